package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sys/unix"

	"github.com/holdfast/holdfast/db"
)

// Failover. PostgreSQL may be a primary with standbys, and the primary may die, hang or
// be replaced while confirmations run. What the engine does about it:
//
//   - It never reports a booking whose COMMIT did not return normally unless the
//     booking is proven durable: found on the server that ran the COMMIT, and followed by
//     a durability barrier (a COMMIT of its own, which waits for the synchronous
//     standbys the server is set up with, as the lost one had to). A COMMIT waiting for a
//     synchronous standby is never cancelled or ended by the engine: it stays, holding
//     its locks and its holds' reservations, until the standby answers or the server
//     goes; the caller gets ErrUnavailable and the idempotent retry settles it on
//     whichever primary survives.
//   - It settles a lost reply only on a server whose history has the outcome for good
//     (settleOn): the one that ran the COMMIT (the same cluster and timeline:
//     serverIdentity), or a later timeline of the same cluster (a promoted standby),
//     and ends a backend only on the same running postmaster, matched by pid and start
//     time; elsewhere the outcome is unknown. What it could not settle when it answered
//     it settles later (settle.go): booked, or committed again on the new primary.
//   - It refuses a connection to a primary on an older timeline of the cluster than one
//     it has seen: a deposed primary (backendOf).
//   - Every statement of a batch has a deadline on the client side (stallGuard), so a
//     hung (not dead) primary costs a batch at most a statement's bound; the pool is then
//     emptied, so that no other confirmation waits on a connection to it.
//   - When the server it reaches changes (a promotion, a new cluster), it reconciles the
//     shows' sold markers with the database (reconcile.go): bookings an asynchronous
//     standby never received are reported, and their seats sold again.

// serverIdentity is the server a connection reaches, and the backend that runs it.
type serverIdentity struct {
	system    int64     // pg_control_system().system_identifier: the cluster
	timeline  int32     // the primary's timeline: a promotion starts a new one
	started   time.Time // the postmaster's start: a restart is another process tree
	pid       int32     // the backend
	backStart time.Time // the backend's start: a pid reused later is another backend
}

// sameServer reports whether a and b are the same running server: a backend pid of one
// means the same backend on the other.
func (a serverIdentity) sameServer(b serverIdentity) bool {
	return a.sameHistory(b) && a.started.Equal(b.started)
}

// sameHistory reports whether a and b are the same cluster on the same timeline: what
// one committed, the other has (after a crash, once recovered).
func (a serverIdentity) sameHistory(b serverIdentity) bool {
	return a.system == b.system && a.timeline == b.timeline && a.timeline != 0
}

// succeeds reports whether a is a later timeline of b's cluster: a primary promoted
// after b's timeline began. A promotion starts a timeline above every one its server
// knows, so timelines only grow along the cluster's history, and a primary on an older
// one than the engine has seen was deposed.
func (a serverIdentity) succeeds(b serverIdentity) bool {
	return a.system == b.system && b.timeline != 0 && a.timeline > b.timeline
}

func identityOf(r db.ServerIdentityRow) serverIdentity {
	return serverIdentity{system: r.SystemIdentifier, timeline: r.Timeline, started: r.PostmasterStart, pid: r.Pid, backStart: r.BackendStart}
}

// backends remembers the identity of each pooled connection, read once per connection
// before its first batch: a COMMIT whose reply is lost is settled against it.
type backends struct {
	mu    sync.Mutex
	conns map[*pgconn.PgConn]serverIdentity
	// last is the last server identity seen (under mu); a change starts a reconciliation.
	last serverIdentity
	// changedAt is when the engine first saw last, if it saw another server before it.
	changedAt time.Time
	// changed is closed when the engine finds another server than last (then replaced).
	changed chan struct{}
}

// serverView returns the last server the engine has seen and a channel closed when it
// finds another.
func (e *Engine) serverView() (serverIdentity, <-chan struct{}) {
	b := &e.backends
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.changed == nil {
		b.changed = make(chan struct{})
	}
	return b.last, b.changed
}

// errDeposed: a connection reaches a primary on an older timeline of the cluster than
// one the engine has seen.
var errDeposed = errors.New("deposed primary")

// backendOf returns the identity of conn's server and backend. A server on an older
// timeline of the cluster than one seen before is refused (errDeposed), and conn closed.
func (e *Engine) backendOf(ctx context.Context, conn *pgxpool.Conn) (serverIdentity, error) {
	pc := conn.Conn().PgConn()
	b := &e.backends
	b.mu.Lock()
	id, ok := b.conns[pc]
	b.mu.Unlock()
	if ok {
		return id, nil
	}
	row, err := db.New(conn).ServerIdentity(ctx)
	if err != nil {
		return serverIdentity{}, err
	}
	id = identityOf(row)
	if err := e.noteServer(pc, id); err != nil {
		// A primary deposed by a promotion the engine has seen (frozen, then woken, say):
		// what it commits now is on a timeline no longer followed. Not used, not kept.
		_ = pc.Close(ctx)
		return serverIdentity{}, err
	}
	return id, nil
}

// noteServer records id as the server of pc, and notes a change of server (a failover,
// a new cluster: a reconciliation and a settlement start); it refuses a server on an
// older timeline of the cluster than one seen (errDeposed).
func (e *Engine) noteServer(pc *pgconn.PgConn, id serverIdentity) error {
	b := &e.backends
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.last.succeeds(id) {
		return fmt.Errorf("%w: the connection reaches a deposed primary (cluster %d timeline %d; the engine has seen timeline %d)",
			errDeposed, id.system, id.timeline, b.last.timeline)
	}
	if b.conns == nil {
		b.conns = map[*pgconn.PgConn]serverIdentity{}
	}
	if len(b.conns) >= 4*int(e.pool.Config().MaxConns) {
		for c := range b.conns {
			if c.IsClosed() {
				delete(b.conns, c)
			}
		}
	}
	b.conns[pc] = id
	if id.timeline != 0 && !b.last.sameHistory(id) {
		if b.last.timeline != 0 {
			e.log.Warn("PostgreSQL is another server now (a failover or a new cluster): reconciling the sold markers with it",
				"system_identifier", id.system, "timeline", id.timeline, "was_system_identifier", b.last.system, "was_timeline", b.last.timeline)
			e.m.failovers.Inc()
			b.changedAt = time.Now()
			// The pool's idle connections may reach the old server, frozen or deposed:
			// the settlement, the reconciliation and the next batches dial again.
			e.pool.Reset()
			e.reconcileSoon()
			e.settleSoon()
		}
		b.last = id
		if b.changed != nil {
			close(b.changed)
			b.changed = nil
		}
	}
	return nil
}

// checkServer notes the server a pooled connection reaches (backendOf), so that an
// engine that confirms nothing still finds a failover and reconciles after it. A new
// connection costs one query; one the engine has seen costs none.
func (e *Engine) checkServer(ctx context.Context) {
	conn, err := e.pool.Acquire(ctx)
	if err != nil {
		return
	}
	defer conn.Release()
	_, _ = e.backendOf(ctx, conn)
}

// resolveCommit settles a COMMIT whose reply never came (on the backend ran): the server
// may or may not have committed it. It answers the booking's time when the booking
// exists and is durable, ErrUnavailable otherwise — wrapping errCommitUnknown when the
// outcome could not be settled (the batch then hands its confirmations to the settler,
// settle.go, and their holds stay reserved), and when the booking is not on the server
// the pool reaches now, a later timeline than ran's (the settler commits it again
// there). It never ends a backend that waits for a synchronous standby: that COMMIT is
// written locally and not replicated, and ending it would make it visible here while a
// failover could still lose it.
//
// Once the engine has found another server than ran's history (a failover), the look-up
// is not made, or is cut short: the settler settles every such batch there at once, on
// one connection, and commits again what is absent.
func (e *Engine) resolveCommit(ctx context.Context, ran serverIdentity, w witness, commitErr error) (time.Time, error) {
	id := w.id
	unknown := func(err error) (time.Time, error) {
		e.log.WarnContext(ctx, "commit reply lost; its outcome is unknown, the caller gets ErrUnavailable", "booking_id", id, "error", err)
		return time.Time{}, unavailable("postgres", fmt.Errorf("%w (%w): %w", errCommitUnknown, commitErr, err))
	}
	last, changed := e.serverView()
	if last.timeline != 0 && !last.sameHistory(ran) {
		return unknown(errFailedOver)
	}
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), resolveTimeout)
	defer cancel()
	rctx, cut := context.WithCancelCause(tctx)
	defer cut(nil)
	go func() {
		select {
		case <-changed:
			cut(errFailedOver)
		case <-rctx.Done():
		}
	}()
	conn, err := e.pool.Acquire(rctx)
	if err != nil {
		return unknown(cause(rctx, err))
	}
	defer conn.Release()
	at, out, now, err := e.settleOn(rctx, conn, ran, w, true)
	switch {
	case out == outcomeBooked:
		e.log.WarnContext(ctx, "commit reply lost; the booking was committed", "booking_id", id)
		return at, nil
	case out == outcomeAbsent && now.sameHistory(ran):
		return time.Time{}, unavailable("postgres", fmt.Errorf("commit failed: %w", commitErr))
	case out == outcomeAbsent:
		return unknown(fmt.Errorf("the booking is not on the server the pool reaches now (cluster %d timeline %d, after timeline %d): it is committed again there",
			now.system, now.timeline, ran.timeline))
	}
	return unknown(cause(rctx, err))
}

// errFailedOver: the engine found another server than the one a COMMIT ran on.
var errFailedOver = errors.New("the engine has found another PostgreSQL server since (a failover): the settler settles the batch there")

// cause is err, or what ended ctx when that was not its deadline or a plain cancel.
func cause(ctx context.Context, err error) error {
	if c := context.Cause(ctx); c != nil && !errors.Is(c, context.Canceled) && !errors.Is(c, context.DeadlineExceeded) {
		return fmt.Errorf("%w (%w)", c, err)
	}
	return err
}

// outcome is what settleOn found of a COMMIT whose reply never came.
type outcome int

const (
	outcomeUnknown outcome = iota // not known there, now
	outcomeBooked                 // committed, and as durable as the server promises
	outcomeAbsent                 // not committed, and never will be in that server's history
)

// settleOn settles, on conn, a COMMIT that ran on ran and whose reply never came, by
// whether it made the booking id, and returns the server conn reaches (now). It can
// tell only on a server whose history has the outcome for good:
//
//   - the same running server, once the backend that ran the COMMIT has ended
//     (backendEnded; with waitSyncRep it waits for one that waits for a synchronous
//     standby, within ctx, else it does not);
//   - the same cluster and timeline after a restart: recovery kept what was committed;
//   - a later timeline of the same cluster (succeeds): a standby promoted, which has of
//     ran's history what it replayed before it ended recovery, and never replays more
//     of it — whatever becomes of the COMMIT on the old primary happens on a timeline the
//     new one does not follow (and the engine refuses connections to it: backendOf).
//
// A booking found is booked only once the durability barrier has passed on conn.
func (e *Engine) settleOn(ctx context.Context, conn *pgxpool.Conn, ran serverIdentity, w witness, waitSyncRep bool) (time.Time, outcome, serverIdentity, error) {
	now, err := e.backendOf(ctx, conn)
	if err != nil {
		return time.Time{}, outcomeUnknown, now, err
	}
	switch {
	case now.sameServer(ran):
		if err := e.backendEnded(ctx, conn, ran, w.id, waitSyncRep); err != nil {
			return time.Time{}, outcomeUnknown, now, err
		}
	case now.sameHistory(ran), now.succeeds(ran):
	default:
		return time.Time{}, outcomeUnknown, now, fmt.Errorf("the pool reaches another server now (cluster %d timeline %d; the COMMIT ran on cluster %d timeline %d)",
			now.system, now.timeline, ran.system, ran.timeline)
	}
	at, err := w.committedAt(ctx, db.New(conn))
	switch {
	case err == nil:
		if err := e.durable(ctx, conn); err != nil {
			return time.Time{}, outcomeUnknown, now, err
		}
		return at, outcomeBooked, now, nil
	case errors.Is(err, pgx.ErrNoRows):
		return time.Time{}, outcomeAbsent, now, nil
	default:
		return time.Time{}, outcomeUnknown, now, err
	}
}

// witness is the confirmation of a batch that settles its lost COMMIT (all of the batch
// committed, or none): a booking, by its id; an exchange (gen > 0), by its event, which
// names the booking and the generation the exchange moved it to.
type witness struct {
	id  uuid.UUID
	gen int64
}

// witnessOf is r as its batch's witness.
func witnessOf(r *confirmReq) witness {
	if r.c.swap != nil {
		return witness{id: r.id, gen: r.gen}
	}
	return witness{id: r.id}
}

// committedAt is when w committed, as q's server has it: pgx.ErrNoRows when it has not.
func (w witness) committedAt(ctx context.Context, q *db.Queries) (time.Time, error) {
	if w.gen > 0 {
		return q.ExchangeAt(ctx, db.ExchangeAtParams{BookingID: uuid.NullUUID{UUID: w.id, Valid: true}, Generation: w.gen})
	}
	row, err := q.BookingGet(ctx, w.id)
	return row.ConfirmedAt, err
}

// errSyncRepWait: the backend of a lost COMMIT waits for a synchronous standby.
var errSyncRepWait = errors.New("the COMMIT waits for a synchronous standby; it is left to finish")

// backendEnded returns once the backend (on conn's server) that ran the COMMIT of
// booking id has ended, ending it unless it waits for a synchronous standby: such a one
// it waits for within ctx with waitSyncRep, else it answers errSyncRepWait at once.
func (e *Engine) backendEnded(ctx context.Context, conn *pgxpool.Conn, ran serverIdentity, id uuid.UUID, waitSyncRep bool) error {
	q := db.New(conn)
	backend := db.BackendStateParams{Pid: ran.pid, BackendStart: ran.backStart}
	ended := false
	for attempt := 1; ; attempt++ {
		st, err := q.BackendState(ctx, backend)
		switch {
		case err != nil:
			return err
		case !st.Alive:
			return nil
		case st.SyncRep && !waitSyncRep:
			return errSyncRepWait
		case !st.SyncRep && !ended:
			e.log.WarnContext(ctx, "commit reply lost; ending its backend to settle it", "booking_id", id, "pid", ran.pid)
			if _, err := q.BackendTerminate(ctx, db.BackendTerminateParams(backend)); err != nil {
				return err
			}
			ended = true
		}
		if err := sleepJitter(ctx, min(attempt, 10)); err != nil {
			if st.SyncRep {
				e.m.unproven.Inc()
				return errSyncRepWait
			}
			return err
		}
	}
}

// durable proves that what the server committed so far is as durable as its settings
// promise: a transaction that writes a row commits (and so waits, in COMMIT, for the
// synchronous standbys the server has, after every commit record before its own; a
// transaction that wrote no WAL would not wait). It runs on on: a connection, to prove
// it of that connection's server, or the pool.
// Within ctx; otherwise ErrUnavailable.
func (e *Engine) durable(ctx context.Context, on interface {
	Begin(context.Context) (pgx.Tx, error)
}) error {
	bctx, cancel := context.WithTimeout(ctx, e.cfg.StatementTimeout)
	defer cancel()
	err := pgx.BeginFunc(bctx, on, func(tx pgx.Tx) error {
		n, err := db.New(tx).DurabilityBarrier(bctx, int32(rand.IntN(64)))
		if err == nil && n != 1 {
			err = fmt.Errorf("the barrier wrote %d rows (migration 00005 missing?)", n)
		}
		return err
	})
	if err != nil {
		e.m.unproven.Inc()
		return unavailable("postgres", fmt.Errorf("the booking exists, but its durability could not be proven (a synchronous standby does not answer?): %w", err))
	}
	return nil
}

// stallGuard bounds each step of a batch on the client side: ctx ends when a step has
// run for longer than d (StatementTimeout and a grace), so that a server that stopped
// answering — a hung primary, a partition — costs a batch one step's bound, not its
// whole; onStall runs then, once (the pool is dialled again at once, so that the
// settlement of the batch reaches the server there is now). A COMMIT is never given
// the guarded ctx (commitUncancelled): one waiting for a synchronous standby goes on
// waiting on the server.
type stallGuard struct {
	d       time.Duration
	t       *time.Timer
	stalled atomic.Bool
	onStall func()
}

// guardStalls returns ctx bounded by g's steps; cancel releases it.
func guardStalls(ctx context.Context, d time.Duration, onStall func()) (context.Context, *stallGuard, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	g := &stallGuard{d: d, onStall: onStall}
	g.t = time.AfterFunc(d, func() {
		g.stall()
		cancel()
	})
	return ctx, g, func() {
		g.t.Stop()
		cancel()
	}
}

// step starts a step: the bound starts again.
func (g *stallGuard) step() { g.t.Reset(g.d) }

// stall notes that the server stopped answering within a step's bound.
func (g *stallGuard) stall() {
	if g.stalled.CompareAndSwap(false, true) {
		g.onStall()
	}
}

// stallGrace is how much longer than the server's own statement_timeout the client
// waits for a statement before it concludes the server is not answering.
const stallGrace = time.Second

// stalled handles a batch whose server stopped answering: every connection of the pool
// is closed (those in use when they are released), so that the next ones are dialled
// again — to the new primary once there is one — instead of each waiting on the old.
func (e *Engine) stalled() {
	e.m.stalls.Inc()
	e.log.Warn("PostgreSQL stopped answering a batch within its bound; reconnecting the pool")
	e.pool.Reset()
}

// errCommitPending: a COMMIT did not return within its bound and is left running.
var errCommitPending = errors.New("the COMMIT did not return within its bound; it is left to finish")

// commitUncancelled commits tx and waits for the COMMIT no longer than ctx, without
// ever cancelling it. A COMMIT can wait for a synchronous standby, and a cancel there —
// which pgx sends whenever it gives up on a connection, whether its context ended or a
// deadline passed — makes PostgreSQL keep the commit locally, visible and not
// replicated, so that a failover could lose a booking the engine then finds and
// acknowledges. So the COMMIT runs with no deadline; when ctx ends first, the
// connection is taken out of the pool (Hijack) and left to the COMMIT, which a
// goroutine waits for and then closes (or the TCP keepalives end, if the server is
// gone), and commitUncancelled returns errCommitPending, setting *pending to a channel
// closed when the COMMIT returns: the outcome is settled by resolveCommit or the
// settler meanwhile. The caller must not use conn or tx afterwards.
func (e *Engine) commitUncancelled(ctx context.Context, conn *pgxpool.Conn, tx pgx.Tx, pending *<-chan struct{}) error {
	done := make(chan error, 1)
	go func() { done <- tx.Commit(context.WithoutCancel(ctx)) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	select { // it may have returned at the same moment
	case err := <-done:
		return err
	default:
	}
	c := conn.Hijack()
	returned := make(chan struct{})
	go func() {
		<-done
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = c.Close(cctx)
		close(returned)
	}()
	*pending = returned
	return errCommitPending
}

// Pool settings for failover (TunePool).
const (
	// DefaultConnectTimeout bounds the dial of one host when the URL sets no
	// connect_timeout: a hung host is given up on after it, and the next host tried.
	DefaultConnectTimeout = 2 * time.Second
	// tcpUserTimeout: sent data unacknowledged this long ends the connection (a host
	// that vanished, a partition); keepalives find a silent one.
	tcpUserTimeout    = 10 * time.Second
	keepAliveIdle     = 5 * time.Second
	keepAliveInterval = 2 * time.Second
	keepAliveCount    = 3
)

// TunePool sets what a pool needs to survive a failover, on a configuration parsed from
// a URL (pgxpool.ParseConfig): a connect timeout when the URL has none
// (DefaultConnectTimeout); TCP keepalives and a TCP user timeout, so that a connection
// to a host that vanished ends by itself; and, with several hosts in the URL (with
// target_session_attrs=read-write), the host that last accepted a connection tried
// first, so that after a promotion new connections go to the new primary at once
// instead of each waiting on the old one first. Hosts may be named by name or by
// address: the configuration's LookupFunc (the resolver when unset) resolves them, and
// TunePool remembers what each name resolved to.
func TunePool(cfg *pgxpool.Config) {
	cc := &cfg.ConnConfig.Config
	if cc.ConnectTimeout == 0 {
		cc.ConnectTimeout = DefaultConnectTimeout
	}
	d := &net.Dialer{
		Timeout:         cc.ConnectTimeout,
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: keepAliveIdle, Interval: keepAliveInterval, Count: keepAliveCount},
		Control: func(network, address string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) {
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(tcpUserTimeout.Milliseconds()))
			})
			if err != nil {
				return err
			}
			if network == "unix" {
				return nil
			}
			return serr
		},
	}
	cc.DialFunc = d.DialContext
	if len(cc.Fallbacks) == 0 {
		return
	}
	hp := &hostPicker{lookup: cc.LookupFunc, addrs: map[string][]string{}}
	if hp.lookup == nil {
		hp.lookup = net.DefaultResolver.LookupHost
	}
	cc.LookupFunc = hp.lookupHost
	before, after := cfg.BeforeConnect, cfg.AfterConnect
	cfg.BeforeConnect = func(ctx context.Context, c *pgx.ConnConfig) error {
		if g, _ := hp.good.Load().(string); g != "" {
			preferHost(&c.Config, g)
		}
		if before != nil {
			return before(ctx, c)
		}
		return nil
	}
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		if nc := c.PgConn().Conn(); nc != nil {
			if g := hp.named(&c.Config().Config, nc.RemoteAddr().String()); g != "" {
				hp.good.Store(g)
			}
		}
		if after != nil {
			return after(ctx, c)
		}
		return nil
	}
}

// hostPicker keeps, for TunePool, the host of the URL that last accepted a connection
// ("host:port" as the URL names it). A connection knows only the address it reached (an
// IP and a port), so the picker also keeps what each of the URL's host names last
// resolved to, through the pool's own lookup.
type hostPicker struct {
	lookup pgconn.LookupFunc
	good   atomic.Value // string

	mu    sync.Mutex
	addrs map[string][]string // host name -> its addresses ("ip" or "ip:port")
}

// lookupHost is the pool's lookup, remembering what host resolved to.
func (p *hostPicker) lookupHost(ctx context.Context, host string) ([]string, error) {
	addrs, err := p.lookup(ctx, host)
	if err == nil {
		p.mu.Lock()
		p.addrs[host] = addrs
		p.mu.Unlock()
	}
	return addrs, err
}

// named returns the host of c that remote ("ip:port") is, as "host:port" as c names it:
// the host itself, or a name that resolved to remote's IP with remote's port; "" when
// none is (a Unix socket).
func (p *hostPicker) named(c *pgconn.Config, remote string) string {
	host, port, err := net.SplitHostPort(remote)
	ip := net.ParseIP(host)
	if err != nil || ip == nil {
		return ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, fb := range append([]*pgconn.FallbackConfig{{Host: c.Host, Port: c.Port}}, c.Fallbacks...) {
		name := net.JoinHostPort(fb.Host, strconv.Itoa(int(fb.Port)))
		if name == remote {
			return name
		}
		for _, a := range p.addrs[fb.Host] {
			if a == remote || (strconv.Itoa(int(fb.Port)) == port && net.ParseIP(a).Equal(ip)) {
				return name
			}
		}
	}
	return ""
}

// preferHost moves the entries of the host addr ("host:port") to the front of c's hosts
// (with sslmode=prefer a host has two), keeping the order of the rest.
func preferHost(c *pgconn.Config, addr string) {
	all := append([]*pgconn.FallbackConfig{{Host: c.Host, Port: c.Port, TLSConfig: c.TLSConfig}}, c.Fallbacks...)
	at := func(fb *pgconn.FallbackConfig) bool {
		return net.JoinHostPort(fb.Host, strconv.Itoa(int(fb.Port))) == addr
	}
	if at(all[0]) {
		return
	}
	var front, rest []*pgconn.FallbackConfig
	for _, fb := range all {
		if at(fb) {
			front = append(front, fb)
		} else {
			rest = append(rest, fb)
		}
	}
	if len(front) == 0 {
		return
	}
	all = append(front, rest...)
	c.Host, c.Port, c.TLSConfig = all[0].Host, all[0].Port, all[0].TLSConfig
	c.Fallbacks = all[1:]
}
