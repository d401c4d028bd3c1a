package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/httpapi"
	"github.com/holdfast/holdfast/internal/demo"
	"github.com/holdfast/holdfast/migrations"
)

func serve(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	f, err := parseServeFlags(ctx, args, getenv, stdout, stderr)
	if err != nil {
		return err
	}
	log := f.logger(stderr)
	tuneGC(f.gcPercent, f.memLimitMB, getenv, log)
	opts, certs, err := f.apiOptions(log)
	if err != nil {
		return err
	}
	svc, err := openService(ctx, &f.backends, &f.eng, log, opts)
	if err != nil {
		return err
	}
	defer svc.close()
	stopHooks, err := startWebhooks(ctx, svc.engine, f.hookURL, f.hookFile, log)
	if err != nil {
		return err
	}
	defer stopHooks()
	if f.demoShow != "" {
		if _, err := svc.engine.EnsureShowLayout(ctx, f.demoShow, demo.Venue(f.demoSeats)); err != nil {
			return fmt.Errorf("create demo show %s: %w", f.demoShow, err)
		}
	}
	l, err := startListeners(ctx, f, svc.api, certs, log, stdout)
	if err != nil {
		return err
	}
	announce(f, opts, l, log, stdout)
	return l.wait(ctx, svc.api, f.drainWait, log)
}

// serveFlags are holdfast serve's flags.
type serveFlags struct {
	backends                        backendFlags
	eng                             engineFlags
	addr, adminAddr                 string
	rateLimit, addrLimit, readLimit float64
	rateBurst, addrBurst, readBurst int
	addrSeats                       int
	proxies                         string
	maxConns, addrConns             int
	maxStreams, addrStream          int
	streamConnects                  float64
	jwtSecret, jwtKey               string
	trustedHolder                   bool
	tlsCert, tlsKey                 string
	opToken, opTokenFile            string
	logKey, logLevel, reqLevel      string
	drainWait                       time.Duration
	demoShow                        string
	demoSeats                       int
	hookURL, hookFile               string
	gcPercent, memLimitMB           int

	trusted       []netip.Prefix // --trusted-proxy, parsed
	level, rlevel slog.Level     // --log-level and --request-log-level, parsed
}

// parseServeFlags registers, parses and checks serve's flags.
func parseServeFlags(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) (*serveFlags, error) {
	fs := flag.NewFlagSet("holdfast serve", flag.ContinueOnError)
	f := &serveFlags{}
	f.register(fs)
	f.backends.register(fs, true)
	f.eng.register(fs)
	if _, err := parseFlags(ctx, fs, args, getenv, stdout, stderr, 0); err != nil {
		return nil, err
	}
	if err := f.checkLimits(fs); err != nil {
		return nil, err
	}
	if err := f.checkSecurity(); err != nil {
		return nil, err
	}
	return f, nil
}

// register defines serve's own flags on fs (the backends' and the engine's are theirs).
func (f *serveFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.addr, "addr", "127.0.0.1:8080", "listen address host:port")
	fs.StringVar(&f.adminAddr, "admin-addr", "127.0.0.1:9090",
		"listen address of the admin listener: /metrics, show creation, resync, the detailed /readyz; keep it off the public network")
	fs.Float64Var(&f.rateLimit, "rate-limit", 20, "holds and confirmations per second per holder")
	fs.IntVar(&f.rateBurst, "rate-burst", 40, "burst of holds and confirmations per holder")
	fs.Float64Var(&f.addrLimit, "addr-rate-limit", 100, "holds and confirmations per second per client address (all its holders)")
	fs.IntVar(&f.addrBurst, "addr-rate-burst", 200, "burst of holds and confirmations per client address")
	fs.Float64Var(&f.readLimit, "read-rate-limit", 50, "reads per second per client address, and per holder when one is named")
	fs.IntVar(&f.readBurst, "read-rate-burst", 100, "burst of reads per client address or holder")
	fs.IntVar(&f.addrSeats, "max-seats-per-addr", 100, "seats one client address may hold at once in one show, whatever holder ids it uses")
	fs.StringVar(&f.proxies, "trusted-proxy", "", "comma-separated CIDRs of proxies whose X-Forwarded-For is believed")
	fs.IntVar(&f.maxConns, "max-conns", 4096, "most open client connections; more wait to be accepted, and from 7/8 of it on idle keep-alive ones are closed")
	fs.IntVar(&f.addrConns, "max-conns-per-addr", 64,
		"most open connections from one client address (an IPv6 /64; not a --trusted-proxy); more are closed as they are accepted")
	fs.IntVar(&f.maxStreams, "max-streams", 1024, "most seat-map event streams open at once (at most half of --max-conns)")
	fs.IntVar(&f.addrStream, "max-streams-per-addr", 16, "most event streams open at once from one client address")
	fs.Float64Var(&f.streamConnects, "stream-connect-rate", 200,
		"seat-map event streams opened per second from all clients (a reconnect storm); past it a connect is refused with 503 and Retry-After")
	fs.StringVar(&f.jwtSecret, "holder-jwt-secret-file", "",
		"file with the HS256 secret of signed holders (Authorization: Bearer <JWT>, sub the holder); read again when it changes")
	fs.StringVar(&f.jwtKey, "holder-jwt-key", "",
		"file with the PEM public key (RSA, ECDSA P-256 or Ed25519) of signed holders; read again when it changes")
	fs.BoolVar(&f.trustedHolder, "trusted-holder-header", false,
		"unsigned holders: Holder-Id is believed as sent, because only a trusted backend that sets it reaches --addr; needed to serve them on an --addr that is not loopback")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "PEM certificate chain: serve HTTPS (and HTTP/2) on --addr; read again when it changes")
	fs.StringVar(&f.tlsKey, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&f.opToken, "operator-token", "",
		"bearer token of the operator routes (show creation, resync); empty turns them off")
	fs.StringVar(&f.opTokenFile, "operator-token-file", "",
		"file with the operator token instead, read again when it changes: rotation without a restart")
	fs.StringVar(&f.logKey, "log-key", "",
		"secret that keys the holder hash in logs; random per process when empty")
	fs.StringVar(&f.logLevel, "log-level", "info", "least level logged: debug, info, warn or error")
	fs.StringVar(&f.reqLevel, "request-log-level", "info", "level of the one line logged per request: debug or info")
	fs.DurationVar(&f.drainWait, "shutdown-timeout", 15*time.Second, "how long in-flight requests may take after SIGINT/SIGTERM")
	fs.StringVar(&f.demoShow, "demo-show", "", "create this show (if missing) before serving")
	fs.IntVar(&f.demoSeats, "demo-seats", 500, "seats of --demo-show")
	fs.IntVar(&f.gcPercent, "gc-percent", 400, "the garbage collector's GOGC: a large show's heap is scanned at every collection, so fewer of them cost less (GOGC in the environment wins)")
	fs.IntVar(&f.memLimitMB, "memory-limit-mb", 0, "soft memory limit in MiB: near it the collector runs as often as it must to stay under (0: nine tenths of the memory the process may use, from its cgroup or the machine; GOMEMLIMIT in the environment wins)")
	fs.StringVar(&f.hookURL, "webhook-url", "", "post every booking event here, per the Standard Webhooks spec (one replica at a time delivers); empty: no webhooks")
	fs.StringVar(&f.hookFile, "webhook-secret-file", "", "file with the whsec_ secret that signs the webhook deliveries")
}

// checkLimits checks the listen address and the limits, and sets --max-streams to half
// of --max-conns when it was not given and that is less.
func (f *serveFlags) checkLimits(fs *flag.FlagSet) error {
	if _, _, err := net.SplitHostPort(f.addr); err != nil {
		return usageErr("--addr %q is not host:port (for example 127.0.0.1:8080)", f.addr)
	}
	if f.adminAddr != "" {
		if _, _, err := net.SplitHostPort(f.adminAddr); err != nil {
			return usageErr("--admin-addr %q is not host:port (for example 127.0.0.1:9090)", f.adminAddr)
		}
	}
	if f.rateLimit <= 0 || f.rateBurst < 1 || f.readLimit <= 0 || f.readBurst < 1 || f.addrLimit <= 0 || f.addrBurst < 1 {
		return usageErr("--rate-limit, --addr-rate-limit and --read-rate-limit must be positive, their bursts at least 1")
	}
	if f.maxConns < 1 {
		return usageErr("--max-conns must be at least 1")
	}
	if f.addrConns <= f.addrStream {
		return usageErr("--max-conns-per-addr (%d) must be more than --max-streams-per-addr (%d): an address's streams and its other requests", f.addrConns, f.addrStream)
	}
	streamsSet := false
	fs.Visit(func(fl *flag.Flag) { streamsSet = streamsSet || fl.Name == "max-streams" })
	if !streamsSet {
		f.maxStreams = max(1, min(f.maxStreams, f.maxConns/2))
	}
	if f.maxStreams < 1 || (streamsSet && f.maxStreams > f.maxConns/2) || f.addrStream < 1 || f.addrSeats < 1 {
		return usageErr("--max-streams must be from 1 to half of --max-conns (%d), so that streams never starve other requests; --max-streams-per-addr and --max-seats-per-addr at least 1", f.maxConns/2)
	}
	if f.gcPercent < 1 || f.memLimitMB < 0 {
		return usageErr("--gc-percent must be at least 1, --memory-limit-mb at least 0 (0: nine tenths of the memory the process may use)")
	}
	var err error
	if f.trusted, err = parseCIDRs(f.proxies); err != nil {
		return usageErr("--trusted-proxy: %v", err)
	}
	return nil
}

// checkSecurity checks the flags of signed holders, TLS, the operator token and the
// log levels.
func (f *serveFlags) checkSecurity() error {
	if f.jwtSecret != "" && f.jwtKey != "" {
		return usageErr("give one of --holder-jwt-secret-file and --holder-jwt-key")
	}
	if err := checkHolderTrust(f.addr, f.jwtSecret != "" || f.jwtKey != "", f.trustedHolder); err != nil {
		return err
	}
	if (f.tlsCert == "") != (f.tlsKey == "") {
		return usageErr("--tls-cert and --tls-key go together")
	}
	if f.opToken != "" && f.opTokenFile != "" {
		return usageErr("give one of --operator-token and --operator-token-file")
	}
	if f.opToken != "" && len(f.opToken) < 16 {
		return usageErr("--operator-token must be at least 16 characters (for example: openssl rand -hex 16)")
	}
	if err := f.level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return usageErr("--log-level %q: want debug, info, warn or error", f.logLevel)
	}
	if err := f.rlevel.UnmarshalText([]byte(f.reqLevel)); err != nil || (f.rlevel != slog.LevelDebug && f.rlevel != slog.LevelInfo) {
		return usageErr("--request-log-level %q: want debug or info", f.reqLevel)
	}
	return nil
}

// logger is the service's JSON logger on stderr, at --log-level.
func (f *serveFlags) logger(stderr io.Writer) *slog.Logger {
	return slog.New(httpapi.LogHandler(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: f.level})))
}

// apiOptions are the HTTP API's options of the flags, the signed holders' keys and the
// TLS certificates loaded (each read again when its file changes; a change that does not
// load is logged and the last good one kept).
func (f *serveFlags) apiOptions(log *slog.Logger) (httpapi.Options, func(*tls.ClientHelloInfo) (*tls.Certificate, error), error) {
	opts := httpapi.Options{RateLimit: f.rateLimit, RateBurst: f.rateBurst, AddrRateLimit: f.addrLimit, AddrRateBurst: f.addrBurst,
		ReadRateLimit: f.readLimit, ReadRateBurst: f.readBurst, MaxSeatsPerAddress: f.addrSeats, TrustedProxies: f.trusted,
		MaxStreams: f.maxStreams, MaxStreamsPerAddress: f.addrStream, StreamConnectRate: f.streamConnects, MaxConns: f.maxConns, MaxConnsPerAddress: f.addrConns,
		OperatorToken: f.opToken, OperatorTokenFile: f.opTokenFile, LogKey: []byte(f.logKey),
		RequestLogLevel: f.rlevel, TLS: f.tlsCert != ""}
	reloadFailed := func(what string) func(error) {
		return func(err error) { log.Error(what+" changed but does not load; the last good one stays", "error", err) }
	}
	var err error
	switch {
	case f.jwtSecret != "":
		if opts.HolderAuth, err = httpapi.HolderSecretFile(f.jwtSecret, reloadFailed("--holder-jwt-secret-file")); err != nil {
			return opts, nil, usageErr("--holder-jwt-secret-file: %v", err)
		}
		opts.DemoIdentity = f.demoShow != ""
	case f.jwtKey != "":
		if opts.HolderAuth, err = httpapi.HolderPublicKeyFile(f.jwtKey, reloadFailed("--holder-jwt-key")); err != nil {
			return opts, nil, usageErr("--holder-jwt-key: %v", err)
		}
	}
	if f.tlsCert == "" {
		return opts, nil, nil
	}
	certs, err := httpapi.CertificateFiles(f.tlsCert, f.tlsKey, reloadFailed("--tls-cert/--tls-key"))
	if err != nil {
		return opts, nil, usageErr("--tls-cert/--tls-key: %v", err)
	}
	return opts, certs, nil
}

// listeners are serve's HTTP servers, serving: the public one first, then the admin one
// when there is one.
type listeners struct {
	servers []*http.Server
	served  chan error // each server's Serve's return
	public  net.Addr
	scheme  string
}

// startListeners listens on --addr (with --max-conns and --max-conns-per-addr) and
// --admin-addr and serves api on them.
func startListeners(ctx context.Context, f *serveFlags, api *httpapi.Server, certs func(*tls.ClientHelloInfo) (*tls.Certificate, error), log *slog.Logger, stdout io.Writer) (*listeners, error) {
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", f.addr, err)
	}
	ln = api.Listener(ln)
	srv := httpServer(api, api, log)
	if wrap, ok := ctx.Value(handlerWrapKey{}).(func(http.Handler) http.Handler); ok {
		srv.Handler = wrap(srv.Handler) // a test watching its request reach the handler
	}
	l := &listeners{servers: []*http.Server{srv}, served: make(chan error, 2), public: ln.Addr(), scheme: "http"}
	if certs != nil {
		l.scheme = "https"
		srv.TLSConfig = &tls.Config{GetCertificate: certs, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
	}
	if f.adminAddr != "" {
		aln, err := net.Listen("tcp", f.adminAddr)
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("listen on --admin-addr %s: %w", f.adminAddr, err)
		}
		adm := httpServer(api.Admin(), api, log)
		l.servers = append(l.servers, adm)
		fmt.Fprintf(stdout, "holdfast: admin (metrics, show creation) on http://%s\n", aln.Addr())
		go func() { l.served <- adm.Serve(aln) }()
	}
	go func() {
		if certs != nil {
			l.served <- srv.ServeTLS(ln, "", "")
			return
		}
		l.served <- srv.Serve(ln)
	}()
	return l, nil
}

// announce says where serve listens and how holders are trusted, and shows the demo's
// walkthrough.
func announce(f *serveFlags, opts httpapi.Options, l *listeners, log *slog.Logger, stdout io.Writer) {
	fmt.Fprintf(stdout, "holdfast: listening on %s://%s\n", l.scheme, l.public)
	switch {
	case opts.HolderAuth == nil && f.trustedHolder:
		log.Info("holder ids are not signed: Holder-Id is believed as sent (--trusted-holder-header); only the backend that sets it may reach --addr", "addr", l.public.String())
	case opts.HolderAuth == nil:
		const warning = "holder ids are not signed: anyone can claim any Holder-Id, so this service belongs behind a backend that sets it (or start it with --holder-jwt-secret-file / --holder-jwt-key)"
		fmt.Fprintln(stdout, "holdfast: warning: "+warning)
		log.Warn(warning)
	}
	if f.demoShow != "" {
		printWalkthrough(stdout, l.scheme, l.public.String(), f.demoShow, opts.HolderAuth != nil)
	}
	log.Info("serving", "addr", l.public.String(), "admin_addr", f.adminAddr, "tls", l.scheme == "https", "signed_holders", opts.HolderAuth != nil)
}

// wait serves until ctx ends (SIGINT/SIGTERM) or a server fails; then it stops
// accepting, reports not ready, lets in-flight requests finish within drain, and closes.
func (l *listeners) wait(ctx context.Context, api *httpapi.Server, drain time.Duration, log *slog.Logger) error {
	select {
	case err := <-l.served:
		for _, s := range l.servers {
			_ = s.Close()
		}
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	api.SetDraining()
	log.Info("shutting down", "timeout", drain.String())
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drain)
	defer cancel()
	for _, s := range l.servers {
		if err := s.Shutdown(sctx); err != nil {
			return fmt.Errorf("shutdown: %w", err)
		}
	}
	for range l.servers {
		if err := <-l.served; err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve: %w", err)
		}
	}
	log.Info("stopped")
	return nil
}

// handlerWrapKey carries, in the context given to serve, a test's wrapper around the
// server's handler.
type handlerWrapKey struct{}

// parseCIDRs reads --trusted-proxy: CIDRs or single addresses, comma-separated.
func parseCIDRs(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			a, aerr := netip.ParseAddr(f)
			if aerr != nil {
				return nil, fmt.Errorf("%q is not a CIDR (10.0.0.0/8) or an address", f)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// checkHolderTrust refuses unsigned holders on a listen address that is not loopback,
// unless the operator says a trusted backend in front sets Holder-Id: whoever reached
// it could otherwise read, cancel and block any holder's bookings and holds.
func checkHolderTrust(addr string, signed, trustedHeader bool) error {
	switch {
	case signed && trustedHeader:
		return usageErr("--trusted-holder-header says Holder-Id is believed as sent; with --holder-jwt-secret-file or --holder-jwt-key holders are signed instead: give one")
	case signed || trustedHeader || loopbackAddr(addr):
		return nil
	}
	return usageErr("--addr %q is not a loopback address and holders are not signed: whoever reaches it could act as any holder "+
		"(read, cancel and block their bookings and holds). Sign holders (--holder-jwt-secret-file or --holder-jwt-key), "+
		"or, if only a trusted backend that sets Holder-Id from its own session reaches this address, say so with --trusted-holder-header", addr)
}

// loopbackAddr reports whether a listen address (host:port) is reached from this
// machine only: its host a loopback IP or "localhost". An empty host is every interface.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// printWalkthrough shows a new user the API in three curl commands.
func printWalkthrough(w io.Writer, scheme, addr, show string, signed bool) {
	if signed {
		fmt.Fprintf(w, `
The seat map, live: %[1]s://%[2]s/shows/%[3]s (it gets a signed demo identity)
Holders are signed: send Authorization: Bearer <JWT> (sub the holder, exp required).
`, scheme, addr, show)
		return
	}
	fmt.Fprintf(w, `
The seat map, live: http://%[1]s/shows/%[2]s

Try it (another terminal):

  # 1. hold two seats for 2 minutes, as customer alice
  H=$(curl -s -X POST http://%[1]s/v1/shows/%[2]s/holds -H 'Holder-Id: alice' \
        -d '{"seats":["R01-001","R01-002"],"ttl_ms":120000}'); echo "$H"

  # 2. confirm the hold (retrying with the same Idempotency-Key returns the same booking)
  curl -s -X POST http://%[1]s/v1/bookings -H 'Holder-Id: alice' -H 'Idempotency-Key: order-1' -d "$H"

  # 3. the seat map: R01-001 and R01-002 are sold
  curl -s http://%[1]s/v1/shows/%[2]s/seats | head -c 300; echo

  make demo    # 200 buyers open a sale of a new show over a minute: it prints the show's
               # page, and http://%[1]s/ lists every show
  Ctrl-C stops the server; make stop stops PostgreSQL and Redis.

`, addr, show)
}

// service is the engine and its HTTP API over open backends.
type service struct {
	pool   *pgxpool.Pool
	rdb    redis.UniversalClient
	engine *engine.Engine
	api    *httpapi.Server
	tp     *sdktrace.TracerProvider // nil unless spans are exported
}

// openService connects to the backends, builds the engine and its API, and refuses to
// start when the backends are not ready (unmigrated database, evicting Redis).
func openService(ctx context.Context, backends *backendFlags, eng *engineFlags, log *slog.Logger, opts httpapi.Options) (*service, error) {
	pool, err := backends.openPool(ctx)
	if err != nil {
		return nil, err
	}
	rdb, err := backends.openRedis(ctx)
	if err != nil {
		pool.Close()
		return nil, err
	}
	svc := &service{pool: pool, rdb: rdb}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg := eng.config()
	cfg.Logger, cfg.Registerer = log, reg
	if eng.otlpEndpoint != "" {
		endpoint := eng.otlpEndpoint
		if u, err := url.Parse(endpoint); err == nil && strings.Trim(u.Path, "/") == "" {
			endpoint = strings.TrimRight(endpoint, "/") + "/v1/traces" // a base URL, as OTEL_EXPORTER_OTLP_ENDPOINT is
		}
		exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint))
		if err != nil {
			svc.close()
			return nil, usageErr("--otlp-endpoint %q: %v", eng.otlpEndpoint, err)
		}
		svc.tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp),
			sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", "holdfast"))))
		cfg.TracerProvider = svc.tp
	}
	if svc.engine, err = engine.New(pool, rdb, &cfg); err != nil {
		svc.close()
		return nil, usageErr("engine configuration: %v", err)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := svc.engine.Ready(rctx); err != nil {
		svc.close()
		return nil, fmt.Errorf("not starting: %w", err)
	}
	if v, err := migrations.Version(rctx, pool); err == nil && v > migrations.Latest() {
		log.Warn("the database schema is newer than this build: a newer holdfast migrated it; this build serves on (migrations only add)",
			"schema_version", v, "build_version", migrations.Latest())
	}
	opts.Logger, opts.Registry = log, reg
	if svc.tp != nil {
		opts.TracerProvider = svc.tp // a server span per request, the engine's spans in it
	}
	if svc.api, err = httpapi.New(svc.engine, opts); err != nil {
		svc.close()
		return nil, err
	}
	return svc, nil
}

func (s *service) close() {
	if s.engine != nil {
		s.engine.Close()
	}
	if s.tp != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = s.tp.Shutdown(ctx) // sends the spans still batched
		cancel()
	}
	s.rdb.Close()
	s.pool.Close()
}

// pendingMigrations reports whether the database lacks migrations this binary has.

// httpServer is an http.Server of h with serve's timeouts, its errors logged to log and
// its connections tracked by api (the public listener's idle connections, closed near
// --max-conns).
func httpServer(h http.Handler, api *httpapi.Server, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ConnContext:       api.ConnContext,
		ConnState:         api.ConnState,
	}
}
