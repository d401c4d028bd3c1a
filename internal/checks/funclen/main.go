// Command funclen fails when a function in the given trees is longer than a limit: a
// function should read as the steps it takes, and past about 80 lines it is a story.
// make verify runs it on engine/, httpapi/, cmd/ and internal/bench/. Test files are
// exempt: a test is a scenario, read top to bottom. A function's length is from its
// func line to its closing brace; its doc comment does not count.
//
// The functions still longer than the limit are listed in a file (-allow: a line per
// function, "path name lines"): one of them may not grow, one not listed may not pass
// the limit, and one that no longer passes it must leave the list.
//
//	go run ./internal/checks/funclen [-max 80] [-allow file] dir...
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "funclen:", err)
		os.Exit(1)
	}
}

// long is a function over the limit.
type long struct {
	pos   token.Position
	name  string
	lines int
}

func run(args []string, stdout io.Writer) error {
	flags := flag.NewFlagSet("funclen", flag.ContinueOnError)
	limit := flags.Int("max", 80, "the most lines a function may have")
	allowFile := flags.String("allow", "", `file of the functions allowed over the limit, a line each: "path name lines"`)
	if err := flags.Parse(args); err != nil {
		return err
	}
	allowed, err := readAllowed(*allowFile)
	if err != nil {
		return err
	}
	if flags.NArg() == 0 {
		return fmt.Errorf("no directory given; usage: funclen [-max 80] dir...")
	}
	var found []long
	for _, dir := range flags.Args() {
		got, err := longFuncs(dir, *limit)
		if err != nil {
			return err
		}
		found = append(found, got...)
	}
	sort.Slice(found, func(i, j int) bool { return found[i].lines > found[j].lines })
	problems := 0
	for _, f := range found {
		key := f.pos.Filename + " " + f.name
		was, ok := allowed[key]
		delete(allowed, key)
		switch {
		case !ok:
			fmt.Fprintf(stdout, "%s:%d: %s is %d lines, over %d: split it into the steps it takes\n", f.pos.Filename, f.pos.Line, f.name, f.lines, *limit)
		case f.lines > was:
			fmt.Fprintf(stdout, "%s:%d: %s grew from %d to %d lines (%s lists it at %d): split it, do not grow it\n", f.pos.Filename, f.pos.Line, f.name, was, f.lines, *allowFile, was)
		default:
			continue
		}
		problems++
	}
	for _, key := range slices.Sorted(maps.Keys(allowed)) {
		fmt.Fprintf(stdout, "%s: %s lists %s, which is no longer over %d lines (or is gone): remove the line\n", *allowFile, *allowFile, key, *limit)
		problems++
	}
	if problems > 0 {
		return fmt.Errorf("%d problems with functions over %d lines", problems, *limit)
	}
	return nil
}

// readAllowed reads the allow file: "path name lines" a line, # comments. No file is
// an empty list.
func readAllowed(path string) (map[string]int, error) {
	allowed := map[string]int{}
	if path == "" {
		return allowed, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	for i, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		n, err := 0, error(nil)
		if len(f) == 3 {
			n, err = strconv.Atoi(f[2])
		}
		if len(f) != 3 || err != nil {
			return nil, fmt.Errorf("%s:%d: want \"path name lines\", got %q", path, i+1, line)
		}
		allowed[f[0]+" "+f[1]] = n
	}
	return allowed, nil
}

// longFuncs returns the functions of the non-test Go files under dir longer than limit.
func longFuncs(dir string, limit int) ([]long, error) {
	fset := token.NewFileSet()
	var found []long
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			start, end := fset.Position(fn.Pos()), fset.Position(fn.End())
			if n := end.Line - start.Line + 1; n > limit {
				found = append(found, long{pos: start, name: funcName(fn), lines: n})
			}
		}
		return nil
	})
	return found, err
}

// funcName is fn's name, with its receiver's type for a method: (*Engine).confirm.
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	t := fn.Recv.List[0].Type
	star := ""
	if s, ok := t.(*ast.StarExpr); ok {
		star, t = "*", s.X
	}
	if g, ok := t.(*ast.IndexExpr); ok {
		t = g.X
	}
	if g, ok := t.(*ast.IndexListExpr); ok {
		t = g.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return "(" + star + id.Name + ")." + fn.Name.Name
	}
	return fn.Name.Name
}
