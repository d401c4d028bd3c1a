package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"

	"github.com/holdfast/holdfast/db"
	"github.com/holdfast/holdfast/internal/lua"
)

// Engine holds seats in Redis and confirms bookings in PostgreSQL. It is safe for
// concurrent use; several engines (processes) may share one Redis and one database.
type Engine struct {
	pool *pgxpool.Pool
	q    *db.Queries
	rdb  redis.UniversalClient
	cfg  Config
	log  *slog.Logger
	m    *metrics

	shows   sync.Map // show id -> *show: the inventory, immutable once created
	loads   singleflight.Group
	resyncs singleflight.Group // one rebuild per show at a time when Redis lost it

	policyCheckedAt atomic.Int64 // unix nanoseconds of the last good eviction-policy check

	hooks hooks
}

// hooks are test seams inside Confirm; nil in production.
type hooks struct {
	// beforeWrite runs after the first Redis check, before the transaction begins.
	beforeWrite func(ctx context.Context)
	// beforeCommit runs after the transaction's writes, before the second Redis check.
	beforeCommit func(ctx context.Context)
}

// show is a show's inventory as the engine keeps it in memory, with every Redis key
// built once.
type show struct {
	id       string
	k        keys
	seats    []string          // sorted
	holdKeys map[string]string // seat -> its hold key
	soldKeys map[string]string // seat -> the sold-marker hash of its bucket
	buckets  []string          // every sold-marker hash of the show
}

// HoldRequest asks for seats of one show.
type HoldRequest struct {
	ShowID  string
	SeatIDs []string
	// TTL is the life of the hold; zero means Config.DefaultHoldTTL.
	TTL time.Duration
	// HolderID names the customer; it is capped at Config.MaxSeatsPerHolder seats held
	// at once per show, and it scopes idempotency keys. Empty means no cap.
	HolderID string
}

// Hold is a granted hold. Keep it whole: Extend, Release and Confirm need every field.
// Token is a secret: never log it or put it in a URL.
type Hold struct {
	ShowID     string
	SeatIDs    []string // sorted
	Token      string
	Generation int64
	ExpiresAt  time.Time
	HolderID   string
}

// ConfirmOptions tunes a confirmation.
type ConfirmOptions struct {
	// IdempotencyKey makes the confirmation safe to retry: a retry with the same key
	// returns the booking the first call created; the same key with another request is
	// refused with ErrIdempotencyKeyReused. Keys are scoped to the holder and show.
	IdempotencyKey string
}

// BookingStatus is confirmed or cancelled.
type BookingStatus string

// The booking statuses.
const (
	BookingConfirmed BookingStatus = "confirmed"
	BookingCancelled BookingStatus = "cancelled"
)

// Booking is a confirmed (or later cancelled) booking.
type Booking struct {
	ID          uuid.UUID
	ShowID      string
	SeatIDs     []string
	Generation  int64
	HolderID    string
	Status      BookingStatus
	ConfirmedAt time.Time
	CancelledAt *time.Time
	// Replayed is true when Confirm returned the booking an earlier call with the same
	// idempotency key created.
	Replayed bool
}

// SeatStatus is free, held or sold.
type SeatStatus string

// The seat statuses.
const (
	SeatFree SeatStatus = "free"
	SeatHeld SeatStatus = "held"
	SeatSold SeatStatus = "sold"
)

// SeatState is one seat of a show's seat map.
type SeatState struct {
	SeatID    string
	Status    SeatStatus
	ExpiresAt *time.Time // when held
}

// New returns an engine over a migrated database (see package migrations) and a Redis.
// A nil cfg means the defaults. New does no I/O; the first Redis call checks that
// Redis's maxmemory-policy cannot evict holds.
func New(pool *pgxpool.Pool, rdb redis.UniversalClient, cfg *Config) (*Engine, error) {
	if pool == nil {
		return nil, invalid("pool", "nil")
	}
	if rdb == nil {
		return nil, invalid("rdb", "nil")
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(c.Registerer)
	if err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	return &Engine{pool: pool, q: db.New(pool), rdb: rdb, cfg: c, log: c.Logger, m: m}, nil
}

// show returns a show's inventory, loading it from PostgreSQL on first use.
func (e *Engine) show(ctx context.Context, showID string) (*show, error) {
	if v, ok := e.shows.Load(showID); ok {
		return v.(*show), nil
	}
	v, err, _ := e.loads.Do(showID, func() (any, error) {
		if v, ok := e.shows.Load(showID); ok {
			return v, nil
		}
		seats, err := e.q.SeatListByShow(ctx, showID)
		if err != nil {
			return nil, unavailable("postgres", err)
		}
		if len(seats) == 0 {
			return nil, notFound("show %q", showID)
		}
		sh := newShow(e.cfg.KeyPrefix, showID, seats)
		e.shows.Store(showID, sh)
		return sh, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*show), nil
}

func newShow(prefix, showID string, seats []string) *show {
	sh := &show{id: showID, k: newKeys(prefix, showID), seats: slices.Sorted(slices.Values(seats)),
		holdKeys: make(map[string]string, len(seats)), soldKeys: make(map[string]string, len(seats))}
	for i, s := range sh.seats {
		sh.holdKeys[s] = sh.k.hold(s)
		if i%soldBucketSize == 0 {
			sh.buckets = append(sh.buckets, sh.k.sold(i/soldBucketSize))
		}
		sh.soldKeys[s] = sh.buckets[i/soldBucketSize]
	}
	return sh
}

// scriptKeys returns the common key layout of the scripts for these seats (counter,
// holder zset, hold keys, sold buckets; see internal/lua/common.lua), or ErrNotFound
// naming a seat the show does not have.
func (sh *show) scriptKeys(tag string, seats []string) ([]string, error) {
	n := len(seats)
	ks := make([]string, 2+2*n)
	ks[0], ks[1] = sh.k.gen(), sh.k.holder(tag)
	for i, s := range seats {
		hk, ok := sh.holdKeys[s]
		if !ok {
			return nil, notFound("seat %q in show %q", s, sh.id)
		}
		ks[2+i], ks[2+n+i] = hk, sh.soldKeys[s]
	}
	return ks, nil
}

// CreateShow creates a show with its seats. Creating a show that exists with the same
// seats does nothing; with other seats it is ErrInvalidArgument (a show's inventory is
// fixed).
func (e *Engine) CreateShow(ctx context.Context, showID string, seatIDs []string) error {
	_, err := e.EnsureShow(ctx, showID, seatIDs)
	return err
}

// EnsureShow is CreateShow that also reports whether it created the show.
func (e *Engine) EnsureShow(ctx context.Context, showID string, seatIDs []string) (created bool, err error) {
	if err := validateID("showID", showID); err != nil {
		return false, err
	}
	seats, err := sortedSeatIDs("seatIDs", seatIDs, e.cfg.MaxSeatsPerShow)
	if err != nil {
		return false, err
	}
	err = pgx.BeginTxFunc(ctx, e.pool, e.txOptions(), func(tx pgx.Tx) error {
		q := e.q.WithTx(tx)
		n, err := q.ShowInsert(ctx, showID)
		if err != nil {
			return err
		}
		if n == 0 {
			have, err := q.SeatListByShow(ctx, showID)
			if err != nil {
				return err
			}
			if !slices.Equal(have, seats) {
				return invalid("seatIDs", "show %q exists with %d other seats; a show's seats are fixed", showID, len(have))
			}
			return nil
		}
		created = true
		return q.SeatsInsert(ctx, db.SeatsInsertParams{ShowID: showID, SeatIds: seats})
	})
	if err != nil {
		return false, e.pgErr(err)
	}
	sh := newShow(e.cfg.KeyPrefix, showID, seats)
	e.shows.LoadOrStore(showID, sh)
	// Start the show's counter in Redis (it stays if it exists). Should this fail, the
	// first hold finds no counter and rebuilds the show's Redis state from the database.
	if err := e.resync(ctx, sh, "merge"); err != nil {
		return created, err
	}
	return created, nil
}

// Booking returns a booking by id, or ErrNotFound.
func (e *Engine) Booking(ctx context.Context, bookingID uuid.UUID) (Booking, error) {
	row, err := e.q.BookingGet(ctx, bookingID)
	if err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return Booking{}, notFound("booking %s", bookingID)
		}
		return Booking{}, e.pgErr(err)
	}
	return bookingFromRow(row), nil
}

func bookingFromRow(r db.BookingDetail) Booking {
	return Booking{ID: r.BookingID, ShowID: r.ShowID, SeatIDs: r.SeatIds, Generation: r.Generation,
		HolderID: r.HolderID, Status: BookingStatus(r.Status), ConfirmedAt: r.ConfirmedAt, CancelledAt: r.CancelledAt}
}

// Cancel cancels a confirmed booking: its claims go, the booking is marked cancelled and
// the event logged, then the sold markers are dropped. The seats' fences stay, so the
// hold that made the booking can never confirm again. When Redis fails after the commit
// the answer is ErrUnavailable (the seats still look sold); cancelling a cancelled
// booking changes nothing in PostgreSQL and drops any marker still naming it, so a
// retry finishes the job.
func (e *Engine) Cancel(ctx context.Context, bookingID uuid.UUID) error {
	start := time.Now()
	err := e.cancel(ctx, bookingID)
	e.m.observe("cancel", start, resultOf(err))
	return err
}

func (e *Engine) cancel(ctx context.Context, bookingID uuid.UUID) error {
	var showID string
	var seats []string
	_, err := retryTx(ctx, func() (struct{}, error) {
		return struct{}{}, pgx.BeginTxFunc(ctx, e.pool, e.txOptions(), func(tx pgx.Tx) (err error) {
			showID, seats, err = cancelTx(ctx, e.q.WithTx(tx), bookingID)
			return err
		})
	})
	if err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound("booking %s", bookingID)
		}
		return e.pgErr(err)
	}
	sh, err := e.show(ctx, showID)
	if err != nil {
		return err
	}
	ks, err := sh.scriptKeys("", seats)
	if err != nil {
		return err
	}
	if err := lua.Unsold.Run(ctx, e.rdb, ks, scriptArgs("", []any{bookingID.String()}, seats)...).Err(); err != nil {
		// The cancellation is committed, but its seats still look sold in Redis: new
		// holds on them are refused. That is not success; a retried Cancel (or Resync)
		// drops the markers.
		return e.redisErr(fmt.Errorf("booking cancelled, but its sold markers are still in Redis: %w", err))
	}
	e.log.InfoContext(ctx, "booking cancelled", "show_id", showID, "booking_id", bookingID, "seats", len(seats))
	return nil
}

// cancelTx cancels a booking inside a transaction (nothing to do when it is cancelled
// already) and returns its show and seats, whose sold markers the caller drops.
func cancelTx(ctx context.Context, q *db.Queries, bookingID uuid.UUID) (string, []string, error) {
	b, err := q.BookingGetForUpdate(ctx, bookingID)
	if err != nil {
		return "", nil, err
	}
	detail, err := q.BookingGet(ctx, bookingID)
	if err != nil {
		return "", nil, err
	}
	if b.Status != string(BookingConfirmed) {
		return b.ShowID, detail.SeatIds, nil
	}
	if _, err := q.SeatClaimsDeleteByBooking(ctx, db.SeatClaimsDeleteByBookingParams{ShowID: b.ShowID, BookingID: bookingID}); err != nil {
		return "", nil, err
	}
	if _, err := q.BookingCancel(ctx, db.BookingCancelParams{ShowID: b.ShowID, BookingID: bookingID}); err != nil {
		return "", nil, err
	}
	err = q.BookingEventInsert(ctx, db.BookingEventInsertParams{ShowID: b.ShowID,
		BookingID: uuid.NullUUID{UUID: bookingID, Valid: true}, Kind: "cancelled",
		Generation: b.Generation, SeatIds: detail.SeatIds, HolderID: b.HolderID})
	return b.ShowID, detail.SeatIds, err
}

// Seats returns every seat of a show, sorted, as free, held (with its expiry) or sold.
// Sold comes from PostgreSQL, the authority; held from Redis.
func (e *Engine) Seats(ctx context.Context, showID string) ([]SeatState, error) {
	if err := validateID("showID", showID); err != nil {
		return nil, err
	}
	sh, err := e.show(ctx, showID)
	if err != nil {
		return nil, err
	}
	claims, err := e.q.SeatClaimListByShow(ctx, showID)
	if err != nil {
		return nil, e.pgErr(err)
	}
	sold := make(map[string]bool, len(claims))
	for _, c := range claims {
		sold[c.SeatID] = true
	}
	pipe := e.rdb.Pipeline()
	ttls := make([]*redis.DurationCmd, len(sh.seats))
	for i, s := range sh.seats {
		if !sold[s] {
			ttls[i] = pipe.PTTL(ctx, sh.holdKeys[s])
		}
	}
	now := time.Now()
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, e.redisErr(err)
	}
	out := make([]SeatState, len(sh.seats))
	for i, s := range sh.seats {
		out[i] = SeatState{SeatID: s, Status: SeatFree}
		switch {
		case sold[s]:
			out[i].Status = SeatSold
		case ttls[i].Val() > 0:
			exp := now.Add(ttls[i].Val())
			out[i].Status, out[i].ExpiresAt = SeatHeld, &exp
		}
	}
	return out, nil
}

// Resync rebuilds a show's Redis state from PostgreSQL: the sold markers (adding the
// missing, dropping the stale), and the generation counter, raised to the database's
// high-water mark. Holds on sold seats are dropped; other holds stay.
func (e *Engine) Resync(ctx context.Context, showID string) error {
	if err := validateID("showID", showID); err != nil {
		return err
	}
	sh, err := e.show(ctx, showID)
	if err != nil {
		return err
	}
	return e.resync(ctx, sh, "replace")
}

func (e *Engine) resync(ctx context.Context, sh *show, mode string) error {
	claims, err := e.q.SeatClaimListByShow(ctx, sh.id)
	if err != nil {
		return e.pgErr(err)
	}
	floor, err := e.q.SeatFenceMaxByShow(ctx, sh.id)
	if err != nil {
		return e.pgErr(err)
	}
	seats := make([]string, len(claims))
	ids := make([]any, len(claims))
	for i, c := range claims {
		seats[i], ids[i] = c.SeatID, c.BookingID.String()
	}
	ks, err := sh.scriptKeys("", seats)
	if err != nil {
		return err
	}
	ks = append(ks, sh.buckets...) // cleared in "replace" mode
	args := scriptArgs("", []any{floor, mode}, seats)
	args = append(args, ids...)
	res, err := lua.Resync.Run(ctx, e.rdb, ks, args...).Int64Slice()
	if err != nil {
		return e.redisErr(err)
	}
	if len(res) == 2 && res[1] == 1 && floor > 0 {
		e.m.counterRepairs.Inc()
		e.log.WarnContext(ctx, "generation counter raised to the database high-water mark", "show_id", sh.id, "generation", floor)
	}
	return nil
}

// Ready reports whether PostgreSQL and Redis answer and Redis's eviction policy keeps
// holds. A nil error means ready.
func (e *Engine) Ready(ctx context.Context) error {
	if err := e.pool.Ping(ctx); err != nil {
		return unavailable("postgres", err)
	}
	if err := e.rdb.Ping(ctx).Err(); err != nil {
		return unavailable("redis", err)
	}
	e.policyCheckedAt.Store(0)
	return e.checkRedis(ctx)
}

// policyRecheck is how long a good eviction-policy check is trusted.
const policyRecheck = time.Minute

// checkRedis refuses a Redis whose maxmemory-policy may evict keys: a hold evicted
// before its TTL would let a second customer take the seat.
func (e *Engine) checkRedis(ctx context.Context) error {
	if last := e.policyCheckedAt.Load(); last != 0 && time.Since(time.Unix(0, last)) < policyRecheck {
		return nil
	}
	check := func(ctx context.Context, c redis.UniversalClient) error {
		v, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
		if err != nil {
			return unavailable("redis", fmt.Errorf("read maxmemory-policy: %w", err))
		}
		if p := v["maxmemory-policy"]; p != "noeviction" {
			return fmt.Errorf("%w: redis maxmemory-policy is %q, which may evict holds; set it to noeviction", ErrUnavailable, p)
		}
		return nil
	}
	var err error
	if cc, ok := e.rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return check(ctx, c) })
	} else {
		err = check(ctx, e.rdb)
	}
	if err != nil {
		return err
	}
	e.policyCheckedAt.Store(time.Now().UnixNano())
	return nil
}

// txOptions begins every transaction with bounds on lock waits and statements, so that a
// stuck row lock becomes ErrUnavailable instead of a hang.
func (e *Engine) txOptions() pgx.TxOptions {
	return pgx.TxOptions{BeginQuery: "BEGIN; SET LOCAL lock_timeout = '" + strconv.FormatInt(e.cfg.LockTimeout.Milliseconds(), 10) +
		"ms'; SET LOCAL statement_timeout = '" + strconv.FormatInt(e.cfg.StatementTimeout.Milliseconds(), 10) + "ms'"}
}

// maxTxAttempts bounds the retries of a transaction that hit a serialization failure or
// a deadlock.
const maxTxAttempts = 4

// retryTx runs attempt (one whole transaction) and runs it again, with jitter, when it
// hit a serialization failure or a deadlock (40001, 40P01), at most maxTxAttempts
// times. attempt must have no effect outside the database.
func retryTx[T any](ctx context.Context, attempt func() (T, error)) (T, error) {
	for n := 1; ; n++ {
		v, err := attempt()
		if !retryable(err) || n == maxTxAttempts {
			return v, err
		}
		if sleepJitter(ctx, n) != nil {
			return v, err
		}
	}
}

func retryable(err error) bool {
	code := pgCode(err)
	return code == "40001" || code == "40P01"
}

func sleepJitter(ctx context.Context, attempt int) error {
	d := time.Duration(attempt) * time.Duration(1+rand.IntN(5)) * time.Millisecond
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

func pgConstraint(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.ConstraintName
	}
	return ""
}

// pgErr translates a PostgreSQL error at the boundary: engine errors pass through,
// constraint violations become ErrInvalidArgument or ErrNotFound, everything else
// (connection loss, timeouts, lock waits) is ErrUnavailable.
func (e *Engine) pgErr(err error) error {
	var iae *InvalidArgumentError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &iae), errors.Is(err, ErrNotFound), errors.Is(err, ErrUnavailable):
		return err
	}
	switch pgCode(err) {
	case "23514", "22001", "22P02":
		return fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	case "23503":
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return unavailable("postgres", err)
}

// redisErr translates a Redis error: a script's argument check is ErrInvalidArgument,
// everything else (connection loss, timeouts, OOM, BUSY) is ErrUnavailable.
func (e *Engine) redisErr(err error) error {
	if err == nil {
		return nil
	}
	if strings.HasPrefix(err.Error(), "HOLDFAST_BADARG") {
		return fmt.Errorf("%w: redis script: %w", ErrInvalidArgument, err)
	}
	return unavailable("redis", err)
}

// scriptArgs lays out a script's arguments: the holder tag, the fixed arguments, the
// seats.
func scriptArgs(tag string, fixed []any, seats []string) []any {
	args := make([]any, 0, 1+len(fixed)+len(seats))
	args = append(args, tag)
	args = append(args, fixed...)
	for _, s := range seats {
		args = append(args, s)
	}
	return args
}
