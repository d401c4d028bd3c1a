package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/holdfast/holdfast/engine"
)

// resync rebuilds shows' Redis state from PostgreSQL (engine.Resync), for an operator
// after a Redis loss or a failover: holdfast resync --show a --show b.
func resync(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("holdfast resync", flag.ContinueOnError)
	var (
		backends backendFlags
		eng      engineFlags
		shows    showList
	)
	fs.Var(&shows, "show", "a show to resync (repeat for several)")
	backends.register(fs, getenv)
	eng.register(fs, getenv)
	if _, err := parseFlags(fs, args, stdout, stderr, 0); err != nil {
		return err
	}
	if len(shows) == 0 {
		fs.SetOutput(stderr)
		fs.Usage()
		return usageErr("resync takes --show SHOW (one or more)")
	}
	pool, err := backends.openPool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	rdb, err := backends.openRedis(ctx)
	if err != nil {
		return err
	}
	defer rdb.Close()
	cfg := eng.config()
	cfg.Logger = slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	e, err := engine.New(pool, rdb, &cfg)
	if err != nil {
		return usageErr("engine configuration: %v", err)
	}
	defer e.Close()
	for _, show := range shows {
		start := time.Now()
		if err := e.Resync(ctx, show); err != nil {
			return fmt.Errorf("resync %s: %w", show, err)
		}
		fmt.Fprintf(stdout, "resynced %s in %v\n", show, time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// showList is a repeatable --show flag.
type showList []string

func (s *showList) String() string     { return fmt.Sprint(*s) }
func (s *showList) Set(v string) error { *s = append(*s, v); return nil }
