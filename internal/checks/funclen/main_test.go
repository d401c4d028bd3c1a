package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFuncLen: a function over the limit fails, named with its length; one at the
// limit passes; a test file is exempt, however long.
func TestFuncLen(t *testing.T) {
	dir := t.TempDir()
	long := "package p\n\nfunc long() {\n" + strings.Repeat("\t_ = 1\n", 10) + "}\n\nfunc short() {}\n"
	if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(long), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "p_test.go"), []byte(strings.Replace(long, "long()", "longTest()", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		max, want string
	}{
		{"5", "long is 12 lines, over 5"},
		{"12", ""},
	} {
		var out bytes.Buffer
		err := run([]string{"-max", c.max, dir}, &out)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("-max %s: %v\n%s", c.max, err, out.String())
		case c.want != "" && (err == nil || !strings.Contains(out.String(), c.want)):
			t.Errorf("-max %s: got %v and\n%s\nwant a failure saying %q", c.max, err, out.String(), c.want)
		case strings.Contains(out.String(), "longTest"):
			t.Errorf("-max %s: a test file's function was counted:\n%s", c.max, out.String())
		}
	}
}
