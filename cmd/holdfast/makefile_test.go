package main

import (
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestMakeRunFlags: the flags make run gives serve (the Makefile's LOCAL_LIMITS, and
// the demo show) pass serve's checks, so that the README's first command serves.
func TestMakeRunFlags(t *testing.T) {
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^LOCAL_LIMITS = ((?:.*\\\n)*.*)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("no LOCAL_LIMITS in the Makefile")
	}
	args := append([]string{"--demo-show", "demo"}, strings.Fields(strings.ReplaceAll(string(m[1]), "\\\n", " "))...)
	if !regexp.MustCompile(`(?m)^run: .*\n\t.*serve --demo-show demo \$\(LOCAL_LIMITS\)`).Match(mk) {
		t.Fatal("make run no longer serves with --demo-show demo $(LOCAL_LIMITS): update this test")
	}
	getenv := func(string) string { return "" }
	if _, err := parseServeFlags(t.Context(), args, getenv, io.Discard, io.Discard); err != nil {
		t.Errorf("serve %v: %v", args, err)
	}
}
