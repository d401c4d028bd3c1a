package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
)

// TestServeHelpGroupsEveryFlag: serve --help lists its flags under headings — listening,
// backends, holds and confirmations, limits, security, observability, demo — each flag
// once, none left over under "Other", and with its default rather than a value the
// environment set.
func TestServeHelpGroupsEveryFlag(t *testing.T) {
	var sets []*flag.FlagSet
	ctx := context.WithValue(context.Background(), flagSetsKey{}, &sets)
	var out bytes.Buffer
	env := func(name string) string {
		if name == "HOLDFAST_RATE_LIMIT" {
			return "7"
		}
		return ""
	}
	var ee *exitError
	if err := run(ctx, []string{"serve", "--help"}, env, &out, io.Discard); !errors.As(err, &ee) || ee.code != 0 {
		t.Fatalf("serve --help: %v, want exit 0", err)
	}
	if len(sets) != 1 {
		t.Fatalf("serve --help gave %d flag sets", len(sets))
	}
	var headings []string
	under := map[string]string{} // flag -> heading
	heading := ""
	for _, line := range strings.Split(out.String(), "\n") {
		switch {
		case strings.HasPrefix(line, "  -"):
			name, _, _ := strings.Cut(strings.TrimPrefix(line, "  -"), " ")
			if prev, ok := under[name]; ok {
				t.Errorf("--%s is listed under %q and %q", name, prev, heading)
			}
			under[name] = heading
		case line != "" && !strings.HasPrefix(line, " ") && strings.HasSuffix(line, ":") && !strings.HasPrefix(line, "Usage"):
			heading = strings.TrimSuffix(line, ":")
			headings = append(headings, heading)
		}
	}
	want := []string{"Listening", "Backends", "Memory", "Holds and confirmations", "Limits per holder and client address", "Security", "Observability", "Webhooks", "Demo"}
	if strings.Join(headings, "|") != strings.Join(want, "|") {
		t.Errorf("headings %q, want %q", headings, want)
	}
	sets[0].VisitAll(func(f *flag.Flag) {
		if h := under[f.Name]; h == "" || h == "Other" {
			t.Errorf("--%s is under no heading of serve --help (put it in flagGroups)", f.Name)
		}
	})
	for name, h := range map[string]string{"addr": "Listening", "database-url": "Backends", "confirm-batch": "Holds and confirmations",
		"rate-limit": "Limits per holder and client address", "operator-token": "Security", "log-level": "Observability"} {
		if under[name] != h {
			t.Errorf("--%s is under %q, want %q", name, under[name], h)
		}
	}
	if !strings.Contains(out.String(), "(default 20)") || strings.Contains(out.String(), "(default 7)") {
		t.Errorf("--rate-limit's default is not the one shown:\n%s", out.String())
	}
}
