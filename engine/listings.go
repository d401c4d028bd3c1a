package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/db"
	"github.com/holdfast/holdfast/internal/lua"
)

// ShowInfo is one show of ListShows.
type ShowInfo struct {
	ID        string
	CreatedAt time.Time
	Seats     int // seats in its inventory
	Sold      int // seats of confirmed bookings
	// Places is its standing areas' capacity, PlacesSold their places sold.
	Places, PlacesSold int
}

// Page asks for one page of a list: at most Limit items (1 to MaxPage; 0: DefaultPage)
// after the item After names (empty: from the first).
type Page struct {
	After string
	Limit int
}

// The page sizes of the list calls.
const (
	DefaultPage = 50
	MaxPage     = 500
)

func (p Page) limit() (int32, error) {
	switch {
	case p.Limit == 0:
		return DefaultPage, nil
	case p.Limit < 0 || p.Limit > MaxPage:
		return 0, invalid("limit", "%d is not from 1 to %d", p.Limit, MaxPage)
	}
	return int32(p.Limit), nil
}

// ListShows returns shows newest first, a page at a time: the next page is after the
// last show's ID. A show named by After that does not exist gives an empty page.
func (e *Engine) ListShows(ctx context.Context, p Page) ([]ShowInfo, error) {
	n, err := p.limit()
	if err != nil {
		return nil, err
	}
	arg := db.ShowListParams{MaxRows: n}
	if p.After != "" {
		if err := validateID("after", p.After); err != nil {
			return nil, err
		}
		arg.After = pgtype.Text{String: p.After, Valid: true}
	}
	rows, err := e.q.ShowList(ctx, arg)
	if err != nil {
		return nil, e.pgErr(err)
	}
	out := make([]ShowInfo, len(rows))
	for i, r := range rows {
		out[i] = ShowInfo{ID: r.ShowID, CreatedAt: r.CreatedAt, Seats: int(r.Seats), Sold: int(r.Sold),
			Places: int(r.Places), PlacesSold: int(r.PlacesSold)}
	}
	return out, nil
}

// HolderBookings returns a holder's bookings in every show, newest first, a page at a
// time (After: the last booking's ID), cancelled ones included.
func (e *Engine) HolderBookings(ctx context.Context, holderID string, p Page) ([]Booking, error) {
	if err := requireHolderID(holderID, "whose bookings to list"); err != nil {
		return nil, err
	}
	n, err := p.limit()
	if err != nil {
		return nil, err
	}
	arg := db.BookingListByHolderParams{HolderID: holderID, MaxRows: n}
	if p.After != "" {
		id, err := uuid.Parse(p.After)
		if err != nil {
			return nil, invalid("after", "not a booking id (a UUID)")
		}
		arg.After = uuid.NullUUID{UUID: id, Valid: true}
	}
	rows, err := e.q.BookingListByHolder(ctx, arg)
	if err != nil {
		return nil, e.pgErr(err)
	}
	out := make([]Booking, len(rows))
	for i, r := range rows {
		out[i] = bookingFromRow(r)
	}
	return out, nil
}

// HeldSeat is a seat a holder holds, and until when.
type HeldSeat struct {
	SeatID    string
	ExpiresAt time.Time
}

// HolderHolds returns the seats a holder holds now in a show, in seat order (the
// holds' tokens stay with whoever made them: they are not returned).
func (e *Engine) HolderHolds(ctx context.Context, showID, holderID string) ([]HeldSeat, error) {
	if err := validateID("showID", showID); err != nil {
		return nil, err
	}
	if err := requireHolderID(holderID, "whose holds to list"); err != nil {
		return nil, err
	}
	sh, err := e.show(ctx, showID)
	if err != nil {
		return nil, err
	}
	now := time.Now().UnixMilli()
	zs, err := e.rdb.ZRangeByScoreWithScores(ctx, sh.k.holder(holderTag(holderID)),
		&redis.ZRangeBy{Min: "(" + strconv.FormatInt(now, 10), Max: "+inf"}).Result()
	if err != nil {
		return nil, e.redisErr(err)
	}
	out := make([]HeldSeat, 0, len(zs))
	for _, z := range zs {
		seat, _ := z.Member.(string)
		out = append(out, HeldSeat{SeatID: seat, ExpiresAt: time.UnixMilli(int64(z.Score)).UTC()})
	}
	slices.SortFunc(out, func(a, b HeldSeat) int { return strings.Compare(a.SeatID, b.SeatID) })
	return out, nil
}

// DeleteShow removes a show that never had a booking and has no live hold: its seats,
// fences and rules in PostgreSQL, its keys in Redis but the generation counter (kept,
// so that a show created again under the same id hands out larger generations than
// any hold of this one) and its rules key, which says the show is closed (see
// deleteShow). ErrShowInUse when it has (or had) bookings or live holds, or holds that
// Reclaim or Transfer moved (their events are in the feed), or another DeleteShow of it
// runs; ErrNotFound when there is no such show. No hold is granted on
// the show from DeleteShow's check for live holds on, through any engine; an engine
// that has the show cached forgets it at its next hold or waiting-room call about it,
// or at its next rules refresh (within a second of its next call about it).
func (e *Engine) DeleteShow(ctx context.Context, showID string) error {
	if err := validateID("showID", showID); err != nil {
		return err
	}
	_, err := withShow(ctx, e, showID, func(sh *show) (struct{}, error) { return struct{}{}, e.deleteShow(ctx, sh) })
	if errors.Is(err, ErrNotFound) {
		// Gone from PostgreSQL: what a DeleteShow that failed half-way left in Redis
		// goes now.
		gone := &show{id: showID, k: newKeys(e.cfg.KeyPrefix, showID)}
		if derr := e.deleteShowKeys(ctx, gone); derr != nil {
			return derr
		}
	}
	return err
}

// closeTTL is how long DeleteShow's closing of a show in Redis lasts unless it opens or
// seals it first: a DeleteShow that died half-way leaves the show closed that long.
const closeTTL = 2 * time.Minute

// deleteShow closes the show in Redis, so that no hold is granted from then on, checks
// that it has no live hold and no booking, deletes it from PostgreSQL, then seals the
// closing (for good) and deletes the show's other keys. A refused or failed delete
// opens the show again.
func (e *Engine) deleteShow(ctx context.Context, sh *show) error {
	prev, err := e.closeCall(ctx, sh, "close", strconv.FormatInt(closeTTL.Milliseconds(), 10))
	if err != nil {
		return err
	}
	if err := e.deleteClosed(ctx, sh); err != nil {
		return errors.Join(err, e.reopen(ctx, sh, prev))
	}
	e.dropShow(sh, true)
	if _, err := e.closeCall(ctx, sh, "seal", ""); err != nil {
		return fmt.Errorf("the show is deleted; DeleteShow again removes its keys: %w", err)
	}
	return e.deleteShowKeys(ctx, sh)
}

// deleteClosed deletes a show closed in Redis from PostgreSQL, unless it has a live
// hold, a booking or an event (a hold's move; ErrShowInUse).
func (e *Engine) deleteClosed(ctx context.Context, sh *show) error {
	held, err := e.anyHeld(ctx, sh)
	if err != nil {
		return err
	}
	if held {
		return fmt.Errorf("%w: show %q has live holds; wait until they expire (or are released)", ErrShowInUse, sh.id)
	}
	if e.hooks.afterHeldCheck != nil {
		e.hooks.afterHeldCheck(ctx)
	}
	// Moves still pending (their engine died before the relay) are history too.
	if err := e.relayMoves(ctx, sh.id, sh.k); err != nil {
		return err
	}
	return pgx.BeginTxFunc(ctx, e.pool, e.txOptions(), func(tx pgx.Tx) error {
		q := e.q.WithTx(tx)
		used, err := q.ShowLockForDelete(ctx, db.ShowLockForDeleteParams{ShowID: sh.id, Epoch: sh.epoch})
		if errors.Is(err, pgx.ErrNoRows) {
			return e.replaced(sh) // gone, or another show now: the next read says which
		}
		if err != nil {
			return e.pgErr(err)
		}
		if used.HasBookings {
			return fmt.Errorf("%w: show %q has bookings (cancelled ones count: they are its history)", ErrShowInUse, sh.id)
		}
		if used.HasEvents {
			return fmt.Errorf("%w: show %q has events (a hold's move, a refused confirmation): they are its history", ErrShowInUse, sh.id)
		}
		if _, err := q.ShowDelete(ctx, sh.id); err != nil {
			return e.pgErr(err)
		}
		return nil
	})
}

// reopen opens a show that a refused or failed delete closed, unless PostgreSQL no
// longer has it (a commit whose reply was lost): then the closing is sealed. When the
// caller's context has ended it does so in the background.
func (e *Engine) reopen(ctx context.Context, sh *show, prev string) error {
	if ctx.Err() != nil {
		go func() {
			rctx, cancel := context.WithTimeout(e.viewCtx, e.cfg.StatementTimeout)
			defer cancel()
			if err := e.reopen(rctx, sh, prev); err != nil {
				e.log.WarnContext(rctx, "open a show again after a failed delete", "show_id", sh.id, "error", err)
			}
		}()
		return nil
	}
	epoch, err := e.q.ShowEpochGet(ctx, sh.id)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("the show stays closed for up to %v: %w", closeTTL, e.pgErr(err))
	}
	op := "open"
	if err != nil || epoch != sh.epoch {
		op, prev = "seal", ""
	}
	if _, err := e.closeCall(ctx, sh, op, prev); err != nil {
		return fmt.Errorf("the show stays closed for up to %v: %w", closeTTL, err)
	}
	return nil
}

// closeCall runs close.lua's op on the show (arg: the closing's ms, or the value to
// open with) and returns the show's rules key as it was before.
func (e *Engine) closeCall(ctx context.Context, sh *show, op, arg string) (string, error) {
	res, err := lua.Close.Run(ctx, e.scripts, []string{sh.k.gen()}, op, sh.epoch, arg).Slice()
	if err != nil {
		return "", e.redisErr(err)
	}
	switch status, _ := res[0].(string); status {
	case "OK":
		prev, _ := res[1].(string)
		return prev, nil
	case "CLOSED":
		return "", fmt.Errorf("%w: show %q is being deleted by another call", ErrShowInUse, sh.id)
	case "STALE":
		return "", e.metChange(ctx, sh, status)
	}
	return "", fmt.Errorf("%w: unexpected close script reply %v", ErrUnavailable, res)
}

// anyHeld reports whether any seat of the show has a hold key.
func (e *Engine) anyHeld(ctx context.Context, sh *show) (bool, error) {
	const chunk = 1000
	for i := 0; i < len(sh.seats); i += chunk {
		ks := make([]string, 0, chunk)
		for _, s := range sh.seats[i:min(i+chunk, len(sh.seats))] {
			ks = append(ks, sh.k.hold(s))
		}
		n, err := e.rdb.Exists(ctx, ks...).Result()
		if err != nil {
			return false, e.redisErr(err)
		}
		if n > 0 {
			return true, nil
		}
	}
	return false, nil
}

// deleteShowKeys deletes every Redis key of the show but its generation counter and its
// rules key (one hash slot: on a Cluster, the node that owns it).
func (e *Engine) deleteShowKeys(ctx context.Context, sh *show) error {
	scan := func(ctx context.Context, c redis.UniversalClient) error {
		it := c.Scan(ctx, 0, sh.k.base+"*", 1000).Iterator()
		var batch []string
		for it.Next(ctx) {
			if k := it.Val(); k != sh.k.gen() && k != sh.k.base+"rules" {
				batch = append(batch, k)
			}
			if len(batch) == 500 {
				if err := c.Del(ctx, batch...).Err(); err != nil {
					return err
				}
				batch = batch[:0]
			}
		}
		if err := it.Err(); err != nil {
			return err
		}
		if len(batch) > 0 {
			return c.Del(ctx, batch...).Err()
		}
		return nil
	}
	var err error
	if cc, ok := e.rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	} else {
		err = scan(ctx, e.rdb)
	}
	if err != nil {
		return e.redisErr(fmt.Errorf("delete the keys of show %q (the show is gone from PostgreSQL; DeleteShow again removes the rest): %w", sh.id, err))
	}
	return nil
}
