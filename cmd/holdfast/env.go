package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
)

// Every flag of every command can also be set from the environment: HOLDFAST_ and the
// flag's name in upper case with "_" for "-" (--rate-limit: HOLDFAST_RATE_LIMIT). A
// few also answer to the conventional name they had first (envAliases); the HOLDFAST_
// name wins when both are set. A flag on the command line wins over the environment.

// envAliases are the other variable names some flags answer to.
var envAliases = map[string]string{
	"database-url":  "DATABASE_URL",
	"redis-url":     "REDIS_URL",
	"redis-cluster": "REDIS_CLUSTER",
	"addr":          "LISTEN_ADDR",
	"otlp-endpoint": "OTEL_EXPORTER_OTLP_ENDPOINT",
}

// notFromEnv are the flags the environment does not set: migrate --force destroys data,
// and a variable left in an env file must not do that for whoever runs migrate next.
var notFromEnv = map[string]bool{"force": true}

// secretFlags are the flags whose values are secrets: never printed, not even in an
// error about their value.
var secretFlags = map[string]bool{"database-url": true, "redis-url": true, "operator-token": true, "log-key": true}

// envName is the HOLDFAST_ variable of a flag.
func envName(flagName string) string {
	return "HOLDFAST_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// envNames are the variables a flag is read from, the one that wins first.
func envNames(flagName string) []string {
	names := []string{envName(flagName)}
	if a, ok := envAliases[flagName]; ok {
		names = append(names, a)
	}
	return names
}

// applyEnv sets every flag of fs whose variable is set, and appends the variable's
// name to each flag's usage. Run before the command line is parsed, so that flags
// given there win.
func applyEnv(fs *flag.FlagSet, getenv func(string) string) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if notFromEnv[f.Name] {
			return
		}
		names := envNames(f.Name)
		f.Usage += " (env " + strings.Join(names, " or ") + ")"
		if err != nil {
			return
		}
		for _, name := range names {
			v := getenv(name)
			if v == "" {
				continue
			}
			if serr := fs.Set(f.Name, v); serr != nil {
				shown := fmt.Sprintf("%q", v)
				if secretFlags[f.Name] {
					shown = "(not shown)"
				}
				err = usageErr("%s=%s is not a valid value of --%s: %v", name, shown, f.Name, cause(serr))
			}
			return
		}
	})
	return err
}

// cause is the flag package's parse error without the value it quotes (which may be a
// secret): "invalid syntax", "value out of range" and the like.
func cause(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 {
		return s[i+2:]
	}
	return s
}

// flagSetsKey collects the flag sets of the commands run with it in their context
// (with --help: nothing runs), for the environment table.
type flagSetsKey struct{}

// envCommands are the commands whose flags the environment table lists.
var envCommands = []string{"serve", "migrate", "resync", "demo", "bench", "abuse", "events"}

// envTable writes the Markdown table of every variable: name, flag, the commands that
// read it, its default and what it does.
func envTable(w io.Writer) error {
	type row struct {
		flag     *flag.Flag
		commands []string
	}
	rows := map[string]*row{}
	for _, cmd := range envCommands {
		var sets []*flag.FlagSet
		ctx := context.WithValue(context.Background(), flagSetsKey{}, &sets)
		_ = run(ctx, []string{cmd, "--help"}, func(string) string { return "" }, io.Discard, io.Discard)
		if len(sets) != 1 {
			return fmt.Errorf("%s --help gave %d flag sets", cmd, len(sets))
		}
		sets[0].VisitAll(func(f *flag.Flag) {
			if notFromEnv[f.Name] {
				return
			}
			r := rows[f.Name]
			if r == nil {
				r = &row{flag: f}
				rows[f.Name] = r
			}
			r.commands = append(r.commands, cmd)
		})
	}
	names := make([]string, 0, len(rows))
	for n := range rows {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintln(w, "| Variable | Flag | Commands | Default | Meaning |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, n := range names {
		r := rows[n]
		usage, _, _ := strings.Cut(r.flag.Usage, " (env ")
		def := r.flag.DefValue
		switch {
		case def == "" || def == "0" || def == "0s" || def == "false":
			def = ""
		default:
			def = "`" + def + "`"
		}
		vars := "`" + strings.Join(envNames(n), "` or `") + "`"
		fmt.Fprintf(w, "| %s | `--%s` | %s | %s | %s |\n", vars, n, strings.Join(r.commands, ", "), def,
			strings.ReplaceAll(usage, "|", `\|`))
	}
	return nil
}
