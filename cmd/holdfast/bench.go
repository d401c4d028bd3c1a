package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/holdfast/holdfast/internal/bench"
)

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// runBench measures holdfast against its raw limits and the database-only design, on
// the servers DATABASE_URL and REDIS_URL name, in a scratch database and Redis prefixes
// it removes afterwards.
func runBench(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("holdfast bench", flag.ContinueOnError)
	var (
		backends backendFlags
		duration = fs.Duration("duration", 4*time.Second, "measured time of each timed workload")
		warmup   = fs.Duration("warmup", time.Second, "warm-up before each timed workload")
		seats    = fs.Int("sale-seats", 20_000, "sales: seats of the venue")
		buyers   = fs.Int("sale-buyers", 2_000, "best-available sale: concurrent buyers")
		rate     = fs.Float64("sale-rate", 500, "on-sale: buyers arriving per second after the ramp (three times that in the spike)")
		timeout  = fs.Duration("sale-timeout", 3*time.Minute, "sales: give up after")
		jsonPath = fs.String("json", "", "also write the report as JSON to this file")
		only     = fs.String("only", "", "comma-separated workloads to run: fresh, seatmap, feed, best, hold, shape, memory, confirm, onsale, overload, venue, fair (default all)")
		quick    = fs.Bool("quick", false, "a smoke run for CI: the on-sales only (onsale, fair), 2,000 seats, short think times; fails on a double booking")
		cpuProf  = fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file (go tool pprof)")
		svgDir   = fs.String("svg", "", "also draw the charts (seats sold over time, hold p99 by arrival rate, batch sizes) as SVG files in this directory")
		runs     = fs.Int("runs", 1, "run the workloads this many times in a row and print each goal's spread (the JSON and charts are the last run's)")
	)
	backends.register(fs, true)
	if _, err := parseFlags(ctx, fs, args, getenv, stdout, stderr, 0); err != nil {
		return err
	}
	if *duration <= 0 || *warmup < 0 || *seats < 10 || *buyers < 1 || *rate <= 0 || *runs < 1 {
		return usageErr("--duration and --sale-rate must be positive, --sale-seats at least 10, --sale-buyers and --runs at least 1")
	}
	if *quick {
		if *only == "" {
			*only = "onsale,fair"
		}
		if !flagSet(fs, "sale-seats") {
			*seats = 2_000
		}
		if !flagSet(fs, "sale-timeout") {
			*timeout = time.Minute
		}
	}
	if backends.databaseURL == "" {
		return usageErr("DATABASE_URL is not set; run `make services` and use the URL it prints, or pass --database-url")
	}
	rdb, err := backends.openRedis(ctx)
	if err != nil {
		return err
	}
	defer rdb.Close()
	if *cpuProf != "" {
		f, err := os.Create(*cpuProf)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	fmt.Fprintf(stdout, "holdfast bench: %s, %s warm-up + %s per timed workload\n", time.Now().UTC().Format(time.RFC3339), *warmup, *duration)
	var reps []*bench.Report
	for i := range *runs {
		if *runs > 1 {
			fmt.Fprintf(stdout, "\n== run %d of %d\n", i+1, *runs)
		}
		rep, err := bench.Run(ctx, bench.Options{DatabaseURL: backends.databaseURL, Redis: rdb, Warmup: *warmup, Duration: *duration,
			SaleSeats: *seats, SaleBuyers: *buyers, SaleRate: *rate, SaleTimeout: *timeout, PoolSize: backends.pgMaxConns, Progress: stderr,
			Only: splitList(*only), Quick: *quick})
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout)
		rep.Print(stdout)
		reps = append(reps, rep)
	}
	if len(reps) > 1 {
		fmt.Fprintln(stdout)
		bench.PrintSpread(stdout, reps)
	}
	return writeReport(reps[len(reps)-1], *jsonPath, *svgDir, stdout)
}

// writeReport writes rep as JSON to jsonPath and its charts as SVG files into svgDir,
// each unless empty.
func writeReport(rep *bench.Report, jsonPath, svgDir string, stdout io.Writer) error {
	if jsonPath != "" {
		f, err := os.Create(jsonPath)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := rep.WriteJSON(f); err != nil {
			return err
		}
	}
	if svgDir != "" {
		files, err := rep.WriteCharts(svgDir)
		if err != nil {
			return err
		}
		for _, f := range files {
			fmt.Fprintln(stdout, "chart:", f)
		}
	}
	return nil
}

// flagSet reports whether the command line set the flag name.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
