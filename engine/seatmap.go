package engine

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

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
		case ttls[i].Val() >= 0: // PTTL is -2 for no key; 0 is a hold with less than 1 ms left
			exp := now.Add(ttls[i].Val())
			out[i].Status, out[i].ExpiresAt = SeatHeld, &exp
		}
	}
	return out, nil
}
