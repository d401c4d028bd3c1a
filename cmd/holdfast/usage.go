package main

import (
	"flag"
	"fmt"
	"io"
)

// flagGroup is one heading of a command's -h and the flags listed under it.
type flagGroup struct {
	title string
	flags []string
}

// flagGroups are the headings of the commands whose -h groups its flags (the others
// list theirs alphabetically, as package flag does). Every flag of such a command is in
// one group: TestServeHelpGroupsEveryFlag.
var flagGroups = map[string][]flagGroup{
	"holdfast serve": {
		{"Listening", []string{"addr", "admin-addr", "tls-cert", "tls-key", "trusted-proxy", "max-conns", "max-conns-per-addr",
			"max-streams", "max-streams-per-addr", "stream-connect-rate", "shutdown-timeout"}},
		{"Backends", []string{"database-url", "pg-max-conns", "redis-url", "redis-cluster", "key-prefix"}},
		{"Memory", []string{"gc-percent", "memory-limit-mb"}},
		{"Holds and confirmations", []string{"default-hold-ttl", "max-hold-ttl", "max-hold-age", "max-seats-per-hold",
			"max-seats-per-holder", "max-confirm-queue", "confirm-batch", "confirm-batch-wait", "confirm-conns",
			"confirm-savepoints", "no-auto-pipeline"}},
		{"Limits per holder and client address", []string{"rate-limit", "rate-burst", "addr-rate-limit", "addr-rate-burst",
			"read-rate-limit", "read-rate-burst", "max-seats-per-addr"}},
		{"Security", []string{"holder-jwt-secret-file", "holder-jwt-key", "trusted-holder-header", "operator-token",
			"operator-token-file", "log-key"}},
		{"Observability", []string{"log-level", "request-log-level", "otlp-endpoint"}},
		{"Webhooks", []string{"webhook-url", "webhook-secret-file"}},
		{"Demo", []string{"demo-show", "demo-seats"}},
	},
}

// printUsage prints a command's flags on w: under its headings (flagGroups), each
// flag as package flag prints it, or flat when the command has none. A flag no group
// names is listed last, under "Other".
func printUsage(fs *flag.FlagSet, w io.Writer) {
	groups, ok := flagGroups[fs.Name()]
	if !ok {
		fs.SetOutput(w)
		fs.Usage()
		return
	}
	fmt.Fprintf(w, "Usage of %s:\n", fs.Name())
	listed := map[string]bool{}
	section := func(title string, names []string) {
		one := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
		for _, name := range names {
			if f := fs.Lookup(name); f != nil {
				one.Var(f.Value, f.Name, f.Usage)
				one.Lookup(name).DefValue = f.DefValue // the default, not a value the environment set
				listed[name] = true
			}
		}
		fmt.Fprintf(w, "\n%s:\n", title)
		one.SetOutput(w)
		one.PrintDefaults()
	}
	for _, g := range groups {
		section(g.title, g.flags)
	}
	var rest []string
	fs.VisitAll(func(f *flag.Flag) {
		if !listed[f.Name] {
			rest = append(rest, f.Name)
		}
	})
	if len(rest) > 0 {
		section("Other", rest)
	}
}
