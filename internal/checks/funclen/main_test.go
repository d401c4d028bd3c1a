package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFuncLen: a function over the limit fails unless the allow file lists it at its
// length or more; a listed one that grew fails, and so does a listed one gone short.
func TestFuncLen(t *testing.T) {
	dir := t.TempDir()
	long := "package p\n\nfunc long() {\n" + strings.Repeat("\t_ = 1\n", 10) + "}\n\nfunc short() {}\n"
	src := filepath.Join(dir, "p.go")
	if err := os.WriteFile(src, []byte(long), 0o600); err != nil {
		t.Fatal(err)
	}
	// A test file is exempt, however long.
	if err := os.WriteFile(filepath.Join(dir, "p_test.go"), []byte(strings.Replace(long, "long()", "longTest()", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	allow := filepath.Join(dir, "allow.txt")
	for _, c := range []struct {
		name, allowed, want string
	}{
		{"not listed", "", "long is 12 lines, over 5"},
		{"listed at its length", src + " long 12\n", ""},
		{"grew", src + " long 11\n", "long grew from 11 to 12 lines"},
		{"listed but short", src + " long 12\n" + src + " short 9\n", "short, which is no longer over 5 lines"},
	} {
		if err := os.WriteFile(allow, []byte(c.allowed), 0o600); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		err := run([]string{"-max", "5", "-allow", allow, dir}, &out)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v\n%s", c.name, err, out.String())
		case c.want != "" && (err == nil || !strings.Contains(out.String(), c.want)):
			t.Errorf("%s: got %v and\n%s\nwant a failure saying %q", c.name, err, out.String(), c.want)
		}
	}
}
