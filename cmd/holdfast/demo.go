package main

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/holdfast/holdfast/httpapi"
	"github.com/holdfast/holdfast/internal/demo"
)

// runDemo simulates a sale opening against a live server (--url), or against one it
// starts in-process on loopback.
func runDemo(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("holdfast demo", flag.ContinueOnError)
	var (
		backends backendFlags
		eng      engineFlags
		baseURL  = fs.String("url", "", "URL of a running holdfast serve; empty: start one in-process")
		adminURL = fs.String("admin-url", "http://127.0.0.1:9090", "that server's admin listener (serve --admin-addr), where the show is created")
		show     = fs.String("show", "", "show to create and sell (default sale-<unix time>: a new show each run)")
		seats    = fs.Int("seats", 500, "seats of the show")
		places   = fs.Int("places", 100, "places of the show's standing area FLOOR, sold by count beside the seats (0: none)")
		buyers   = fs.Int("buyers", 200, "concurrent buyers")
		ttl      = fs.Duration("hold-ttl", time.Second, "TTL buyers ask for (late payers wait past it)")
		pace     = fs.Duration("pace", time.Minute, "spread the sale over about this long, to watch it on the page; 0: as fast as the buyers go")
		duration = fs.Duration("duration", 0, "stop by then even if seats remain (default: --pace plus a minute)")
		startIn  = fs.Duration("start-in", 5*time.Second, "wait this long after printing the show's page, before the sale opens (time to open it)")
		opToken  = fs.String("operator-token", "", "the server's operator token, to create the show")
	)
	backends.register(fs, true)
	eng.registerPrefix(fs)
	if _, err := parseFlags(ctx, fs, args, getenv, stdout, stderr, 0); err != nil {
		return err
	}
	if *seats < 1 || *buyers < 1 || *ttl < time.Millisecond || *duration < 0 || *pace < 0 || *startIn < 0 {
		return commandUsage(fs, "--seats, --buyers and --hold-ttl must be positive; --duration, --pace and --start-in not negative")
	}
	if *show == "" {
		*show = fmt.Sprintf("sale-%d", time.Now().Unix())
	}
	if *duration == 0 {
		*duration = *pace + time.Minute
	}
	pool, err := backends.openPool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	url := *baseURL
	if url == "" {
		*opToken = rand.Text()
		svc, err := openService(ctx, &backends, &eng, slog.New(slog.DiscardHandler), httpapi.Options{
			RateLimit: 1000, RateBurst: 1000, OperatorToken: *opToken,
			// Every buyer is this process, one address: the per-address limits are off.
			AddrRateLimit: 1e6, AddrRateBurst: 1e6, ReadRateLimit: 1e6, ReadRateBurst: 1e6, MaxSeatsPerAddress: 1e6})
		if err != nil {
			return err
		}
		defer svc.close()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: svc.api, ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(ln)
		defer srv.Close()
		url = "http://" + ln.Addr().String()
		aln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		adm := &http.Server{Handler: svc.api.Admin(), ReadHeaderTimeout: 5 * time.Second}
		go adm.Serve(aln)
		defer adm.Close()
		*adminURL = "http://" + aln.Addr().String()
		fmt.Fprintf(stdout, "demo: serving in-process on %s\n", url)
	}
	fmt.Fprintf(stdout, "demo: watch the sale on %s/shows/%s\n", strings.TrimRight(url, "/"), *show)
	fmt.Fprintf(stdout, "demo: %d buyers open the sale of %s (%d seats, %d standing places, paced over %v) in %v\n", *buyers, *show, *seats, *places, *pace, *startIn)
	sum, err := demo.Run(ctx, demo.Options{BaseURL: url, Pool: pool, ShowID: *show, Seats: *seats, Places: *places, Buyers: *buyers,
		HoldTTL: *ttl, Duration: *duration, Pace: *pace, StartIn: *startIn, Progress: stderr, AdminURL: *adminURL, OperatorToken: *opToken})
	if err != nil {
		return err
	}
	sum.Print(stdout)
	if !sum.OK() {
		return fmt.Errorf("the sale broke a promise: %d double bookings, %d acknowledged bookings missing, %d replay mismatches, %d places oversold or miscounted",
			sum.DoubleBookings, sum.MissingAcked, sum.ReplayMismatch, sum.PlacesMiscounted)
	}
	return nil
}
