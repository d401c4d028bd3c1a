// Command funclen fails when a function in the given trees is longer than a limit: a
// function should read as the steps it takes, and past about 80 lines it is a story.
// make verify runs it on engine/, httpapi/, cmd/ and internal/bench/. Test files are
// exempt: a test is a scenario, read top to bottom. A function's length is from its
// func line to its closing brace; its doc comment does not count. No function is
// exempt: one over the limit is split into the steps it takes.
//
//	go run ./internal/checks/funclen [-max 80] dir...
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
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
	if err := flags.Parse(args); err != nil {
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
	for _, f := range found {
		fmt.Fprintf(stdout, "%s:%d: %s is %d lines, over %d: split it into the steps it takes\n", f.pos.Filename, f.pos.Line, f.name, f.lines, *limit)
	}
	if len(found) > 0 {
		return fmt.Errorf("%d functions over %d lines", len(found), *limit)
	}
	return nil
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
