package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/holdfast/holdfast/engine"
)

// resync rebuilds shows' Redis state from PostgreSQL (engine.Resync), for an operator
// after a Redis loss: holdfast resync --show a --show b. With --from-database it is
// authoritative (engine.Reconcile): markers ahead of the database — bookings a
// PostgreSQL failover lost — are set back too, as are the booked seats per holder, and
// each lost booking is printed.
func resync(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("holdfast resync --show SHOW", flag.ContinueOnError)
	var (
		backends backendFlags
		eng      engineFlags
		shows    showList
		fromDB   bool
	)
	fs.Var(&shows, "show", "a show to resync (repeat for several)")
	fs.BoolVar(&fromDB, "from-database", false,
		"make Redis say exactly what PostgreSQL says, lowering markers and booked counts of bookings the database lost (after a failover); prints each lost booking")
	backends.register(fs, true)
	eng.registerPrefix(fs)
	if _, err := parseFlags(ctx, fs, args, getenv, stdout, stderr, 0); err != nil {
		return err
	}
	if len(shows) == 0 {
		return commandUsage(fs, "resync needs --show SHOW (one or more)")
	}
	e, closeEngine, err := backends.openEngine(ctx, &eng, stderr)
	if err != nil {
		return err
	}
	defer closeEngine()
	for _, show := range shows {
		start := time.Now()
		if !fromDB {
			if err := e.Resync(ctx, show); err != nil {
				return fmt.Errorf("resync %s: %w", show, err)
			}
			fmt.Fprintf(stdout, "resynced %s in %v\n", show, time.Since(start).Round(time.Millisecond))
			continue
		}
		rep, err := e.Reconcile(ctx, show)
		if err != nil {
			return fmt.Errorf("resync %s from the database: %w", show, err)
		}
		for _, b := range rep.Lost {
			fmt.Fprintf(stdout, "lost booking: %s show %s generation %d seats %s%s\n", b.BookingID, b.ShowID, b.Generation, strings.Join(b.SeatIDs, " "), placesText(b.Places))
		}
		rules := ""
		if rep.RulesRestored {
			rules = ", sale rules restored (a change the database does not have)"
		}
		fmt.Fprintf(stdout, "resynced %s from the database in %v: %d markers set back, %d lost bookings, %d lost cancellations, %d booked counts set%s\n",
			show, time.Since(start).Round(time.Millisecond), rep.Lowered, len(rep.Lost), rep.LostCancellations, rep.Recounted, rules)
	}
	return nil
}

// showList is a repeatable --show flag.
type showList []string

func (s *showList) String() string {
	if s == nil || len(*s) == 0 {
		return ""
	}
	return strings.Join(*s, ",")
}
func (s *showList) Set(v string) error { *s = append(*s, v); return nil }

// placesText is " places AREA×N ..." for a lost booking's places, or "".
func placesText(ps []engine.Places) string {
	var b strings.Builder
	for i, p := range ps {
		if i == 0 {
			b.WriteString(" places")
		}
		fmt.Fprintf(&b, " %s×%d", p.AreaID, p.Count)
	}
	return b.String()
}
