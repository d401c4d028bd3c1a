package main

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"
)

// TestConfigurationListsEveryVariable: the table of environment variables in
// docs/CONFIGURATION.md is the one `holdfast env` prints from the commands' flags (every
// flag of every command), so a flag added without its row fails here.
// HOLDFAST_UPDATE_DOCS=1 (make readme) rewrites it.
func TestConfigurationListsEveryVariable(t *testing.T) {
	const path = "../../docs/CONFIGURATION.md"
	var table bytes.Buffer
	if err := run(t.Context(), []string{"env"}, env(nil), &table, io.Discard); err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- env:begin -->\n", "<!-- env:end -->"
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		t.Fatalf("docs/CONFIGURATION.md lacks the %q … %q markers", begin, end)
	}
	want := doc[:i+len(begin)] + table.String() + doc[j:]
	if want == doc {
		return
	}
	if os.Getenv("HOLDFAST_UPDATE_DOCS") == "1" {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("docs/CONFIGURATION.md's table of environment variables is out of date: run `make readme`")
}

// TestEnvironmentSetsEveryFlag: each variable of the table sets its flag (a bad value
// is refused naming the variable, never echoing a secret); the command line wins; the
// conventional names work; --force is not read from the environment.
func TestEnvironmentSetsEveryFlag(t *testing.T) {
	t.Parallel()
	var table bytes.Buffer
	if err := envTable(&table); err != nil {
		t.Fatal(err)
	}
	rows := 0
	for _, line := range strings.Split(table.String(), "\n") {
		if !strings.HasPrefix(line, "| `HOLDFAST_") {
			continue
		}
		rows++
		variable := strings.Trim(strings.Fields(line)[1], "`")
		flagName := strings.TrimPrefix(strings.Trim(strings.Split(line, "|")[2], " `"), "--")
		if variable != envName(flagName) {
			t.Fatalf("row %q: variable %s for --%s", line, variable, flagName)
		}
	}
	if rows < 60 {
		t.Fatalf("the table lists %d variables: the commands have more flags than that", rows)
	}
	// A value the flag refuses is a usage error naming the variable.
	err := run(t.Context(), []string{"serve"}, env(map[string]string{"HOLDFAST_MAX_CONNS": "many"}), io.Discard, io.Discard)
	if exitCode(err) != exitUsage || !strings.Contains(err.Error(), `HOLDFAST_MAX_CONNS="many" is not a valid value of --max-conns`) {
		t.Fatalf("a bad HOLDFAST_MAX_CONNS: %v", err)
	}
	// The variable reaches the flag: serve's own check of the value fires.
	err = run(t.Context(), []string{"serve"}, env(map[string]string{"HOLDFAST_MAX_CONNS": "0"}), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--max-conns must be at least 1") {
		t.Fatalf("HOLDFAST_MAX_CONNS=0: %v", err)
	}
	// The command line wins.
	err = run(t.Context(), []string{"serve", "--max-conns", "0"}, env(map[string]string{"HOLDFAST_MAX_CONNS": "10"}), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--max-conns must be at least 1") {
		t.Fatalf("--max-conns 0 with HOLDFAST_MAX_CONNS=10: %v", err)
	}
	// HOLDFAST_ wins over the conventional name; both work.
	for _, vars := range []map[string]string{{"LISTEN_ADDR": "nonsense"}, {"HOLDFAST_ADDR": "nonsense", "LISTEN_ADDR": "127.0.0.1:0"}} {
		err = run(t.Context(), []string{"serve"}, env(vars), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), `--addr "nonsense" is not host:port`) {
			t.Fatalf("%v: %v", vars, err)
		}
	}
	var help bytes.Buffer
	_ = run(t.Context(), []string{"migrate", "--help"}, env(nil), &help, io.Discard)
	if strings.Contains(help.String(), "HOLDFAST_FORCE") || !strings.Contains(help.String(), "HOLDFAST_DATABASE_URL or DATABASE_URL") {
		t.Fatalf("migrate --help: %s", help.String())
	}
}

// TestEachCommandListsItsOwnFlags: migrate lists no Redis or engine flags, resync and
// demo no engine tuning, and no usage line names a backquoted word as a flag's value.
func TestEachCommandListsItsOwnFlags(t *testing.T) {
	t.Parallel()
	help := func(cmd string) string {
		var out bytes.Buffer
		_ = run(t.Context(), []string{cmd, "--help"}, env(nil), &out, io.Discard)
		return out.String()
	}
	if h := help("migrate"); strings.Contains(h, "-redis-url") || strings.Contains(h, "-confirm-batch") || !strings.Contains(h, "-force") {
		t.Errorf("migrate --help:\n%s", h)
	}
	for _, cmd := range []string{"resync", "demo"} {
		h := help(cmd)
		for _, tuning := range []string{"-confirm-batch", "-max-hold-ttl", "-no-auto-pipeline", "-default-hold-ttl"} {
			if strings.Contains(h, tuning) {
				t.Errorf("%s --help lists %s:\n%s", cmd, tuning, h)
			}
		}
		if !strings.Contains(h, "-redis-url") || !strings.Contains(h, "-key-prefix") {
			t.Errorf("%s --help lacks its backends:\n%s", cmd, h)
		}
	}
	if h := help("demo"); strings.Contains(h, "-url holdfast") || !strings.Contains(h, "-url string") {
		t.Errorf("demo --help names the url flag's value after a backquoted word:\n%s", h)
	}
	if h := help("serve"); !strings.Contains(h, "-confirm-batch") {
		t.Errorf("serve --help lacks the engine's tuning:\n%s", h)
	}
}
