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
)

// ShowInfo is one show of ListShows.
type ShowInfo struct {
	ID        string
	CreatedAt time.Time
	Seats     int // seats in its inventory
	Sold      int // seats of confirmed bookings
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
		out[i] = ShowInfo{ID: r.ShowID, CreatedAt: r.CreatedAt, Seats: int(r.Seats), Sold: int(r.Sold)}
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
// any hold of this one). ErrShowInUse when it has (or had) bookings or live holds;
// ErrNotFound when there is no such show. Other engines forget the show at their next
// rules refresh (within a second of their next call about it).
func (e *Engine) DeleteShow(ctx context.Context, showID string) error {
	if err := validateID("showID", showID); err != nil {
		return err
	}
	sh, err := e.show(ctx, showID)
	if errors.Is(err, ErrNotFound) {
		// Gone from PostgreSQL: what a DeleteShow that failed half-way left in Redis
		// goes now.
		gone := &show{id: showID, k: newKeys(e.cfg.KeyPrefix, showID)}
		if derr := e.deleteShowKeys(ctx, gone); derr != nil {
			return derr
		}
		return err
	}
	if err != nil {
		return err
	}
	held, err := e.anyHeld(ctx, sh)
	if err != nil {
		return err
	}
	if held {
		return fmt.Errorf("%w: show %q has live holds; wait until they expire (or are released)", ErrShowInUse, showID)
	}
	err = pgx.BeginTxFunc(ctx, e.pool, e.txOptions(), func(tx pgx.Tx) error {
		q := e.q.WithTx(tx)
		booked, err := q.ShowLockForDelete(ctx, showID)
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound("show %q", showID)
		}
		if err != nil {
			return e.pgErr(err)
		}
		if booked {
			return fmt.Errorf("%w: show %q has bookings (cancelled ones count: they are its history)", ErrShowInUse, showID)
		}
		if _, err := q.ShowDelete(ctx, showID); err != nil {
			return e.pgErr(err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	e.forgetShow(sh)
	return e.deleteShowKeys(ctx, sh)
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

// forgetShow drops the engine's copy of a deleted show: its inventory, rules and view.
func (e *Engine) forgetShow(sh *show) {
	e.shows.remove(sh.id)
	e.shows.forget(sh.id, time.Now().Add(e.cfg.UnknownShowTTL))
	e.views.mu.Lock()
	v := e.views.m[sh.id]
	e.views.mu.Unlock()
	if v != nil {
		e.dropView(v)
	}
}

// deleteShowKeys deletes every Redis key of the show but its generation counter (one
// hash slot: on a Cluster, the node that owns it).
func (e *Engine) deleteShowKeys(ctx context.Context, sh *show) error {
	scan := func(ctx context.Context, c redis.UniversalClient) error {
		it := c.Scan(ctx, 0, sh.k.base+"*", 1000).Iterator()
		var batch []string
		for it.Next(ctx) {
			if k := it.Val(); k != sh.k.gen() {
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
