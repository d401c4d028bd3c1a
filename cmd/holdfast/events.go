package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/holdfast/holdfast/engine"
)

// followPoll is how often holdfast events --follow reads the feed when it is idle.
const followPoll = 500 * time.Millisecond

// events prints the event feed (engine.Events) as NDJSON, one event a line, from
// --after (the first event by default) to its end, or with --follow on until
// interrupted. The last line's id is the cursor to pass as --after next time.
func events(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("holdfast events [--after CURSOR] [--follow]", flag.ContinueOnError)
	var (
		backends backendFlags
		eng      engineFlags
		after    string
		follow   bool
	)
	fs.StringVar(&after, "after", "", "print the events after this event id (the last one printed before); empty: from the first")
	fs.BoolVar(&follow, "follow", false, "keep printing new events as they are committed, until interrupted")
	backends.register(fs, true)
	eng.registerPrefix(fs)
	if _, err := parseFlags(ctx, fs, args, getenv, stdout, stderr, 0); err != nil {
		return err
	}
	e, closeEngine, err := backends.openEngine(ctx, &eng, stderr)
	if err != nil {
		return err
	}
	defer closeEngine()
	out := bufio.NewWriter(stdout)
	defer out.Flush()
	enc := json.NewEncoder(out)
	for {
		page, next, err := e.Events(ctx, after, engine.MaxEventsPage)
		if err != nil {
			if ctx.Err() != nil && follow {
				return nil
			}
			return fmt.Errorf("events after %q: %w", after, err)
		}
		for _, ev := range page {
			if err := enc.Encode(ev); err != nil {
				return err
			}
		}
		if err := out.Flush(); err != nil {
			return err
		}
		after = next
		if len(page) == engine.MaxEventsPage {
			continue
		}
		if !follow {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(followPoll):
		}
	}
}
