package engine

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/holdfast/holdfast/internal/lua"
)

// Best-available holds. A show's seats are indexed in Redis for them (see
// internal/lua/common.lua): per section, the seats that are not sold by score (rank
// first), held ones apart by expiry so that expired holds are given back lazily, and the
// runs of free adjacent seats by length. Every script that changes a seat keeps the
// index; best.lua reads it, so a call costs about the same whatever the show's size or
// how much of it is sold.

// indexPage is about how many seats one index.lua call indexes (whole rows, or whole
// segments of long rows: see runSegment).
const indexPage = 200

// HoldBest holds the best available seats of a show: req.Count of them (in
// req.Section, or anywhere), or with req.Adjacent req.Count seats side by side in one
// row, best meaning the lowest ranks. It decides and holds in one script, under one
// token and one generation, or holds nothing: when nothing fits it returns a
// [*SeatsUnavailableError] with no seats and the free seats the best section still had.
// The Hold it returns is an ordinary hold: Extend, Release and Confirm treat it as any
// other.
func (e *Engine) HoldBest(ctx context.Context, req BestRequest) (Hold, error) {
	ctx, o := e.begin(ctx, "hold_best", req.ShowID, req.Count)
	h, err := e.holdBest(ctx, req)
	o.end(err, "")
	return h, err
}

func (e *Engine) holdBest(ctx context.Context, req BestRequest) (Hold, error) {
	if err := validateID("BestRequest.ShowID", req.ShowID); err != nil {
		return Hold{}, err
	}
	if req.Count < 1 || req.Count > e.cfg.MaxSeatsPerHold {
		return Hold{}, invalid("BestRequest.Count", "%d is out of range [1, %d]", req.Count, e.cfg.MaxSeatsPerHold)
	}
	ttl, err := e.holdTTL("BestRequest.TTL", req.TTL)
	if err != nil {
		return Hold{}, err
	}
	if err := validateHolderID(req.HolderID); err != nil {
		return Hold{}, err
	}
	return withShow(ctx, e, req.ShowID, func(sh *show) (Hold, error) { return e.holdBestOn(ctx, sh, req, ttl) })
}

// holdBestOn is a best-available hold on the engine's copy of the show.
func (e *Engine) holdBestOn(ctx context.Context, sh *show, req BestRequest, ttl time.Duration) (Hold, error) {
	rules, done, err := e.admitHold(ctx, sh, req.HolderID)
	if err != nil {
		return Hold{}, err
	}
	defer done()
	sections, err := e.bestSections(ctx, sh, req.Section)
	if err != nil {
		return Hold{}, err
	}
	if err := e.checkRedis(ctx); err != nil {
		return Hold{}, err
	}
	tag := holderTag(req.HolderID)
	adjacent := "0"
	if req.Adjacent {
		adjacent = "1"
	}
	token := newToken()
	ks := []string{sh.k.gen(), sh.k.holder(tag)}
	args := []any{tag, token, ttl.Milliseconds(), e.cfg.MaxSeatsPerHolder, req.Count, adjacent, strings.Join(sections, " "), rules.arg}
	key, err := holdIdem(ctx, sh, "BestRequest.IdempotencyKey", req.IdempotencyKey, req.HolderID, tag, func() []string {
		return []string{"best", strconv.Itoa(req.Count), req.Section, adjacent, strconv.FormatInt(ttl.Milliseconds(), 10)}
	})
	if err != nil {
		return Hold{}, err
	}
	ks, args = key.apply(e, ks, args)
	for attempt, rounds := 0, 0; ; {
		res, err := lua.Best.Run(ctx, e.scripts, ks, args...).Slice()
		if err != nil {
			return Hold{}, e.redisErr(err)
		}
		res, first, again := replayed(res)
		if again {
			token = first
		}
		switch status, _ := res[0].(string); status {
		case "KEYREUSED":
			return Hold{}, keyReused("BestRequest.IdempotencyKey")
		case "OK":
			gen, _ := res[1].(int64)
			exp, _ := res[2].(int64)
			e.wrote(sh, res[4])
			seats := slices.Sorted(slices.Values(replyStrings(res[5:])))
			return Hold{ShowID: sh.id, SeatIDs: seats, Token: token, Generation: gen,
				ExpiresAt: time.UnixMilli(exp), HolderID: req.HolderID}, nil
		case "NONE":
			left, _ := res[1].(int64)
			return Hold{}, &SeatsUnavailableError{ShowID: sh.id, Available: int(left)}
		case "LIMIT", "NOTADMITTED":
			if err := e.saleRefusal(sh, res, req.Count); err != nil {
				return Hold{}, err
			}
			return Hold{}, e.holderLimit(sh, res[1], req.Count)
		case "STALE", "CLOSED":
			return Hold{}, e.metChange(ctx, sh, status)
		case "LOST":
			return Hold{}, fmt.Errorf("%w: the hold this call made is gone, or lives under other tokens (Reclaim)", ErrHoldLost)
		case "AGAIN":
			// The script gave back a bounded share of the expired holds and has more
			// to give back before it may choose: every expired hold could beat its pick.
			if rounds++; rounds > maxReapRounds {
				return Hold{}, fmt.Errorf("%w: show %s has more expired holds to give back than %d calls could", ErrUnavailable, sh.id, maxReapRounds)
			}
		case "NOSTATE":
			if err := e.rebuildShow(ctx, sh, attempt, e.resync); err != nil {
				return Hold{}, err
			}
			attempt++
		case "NOINDEX":
			if err := e.rebuildShow(ctx, sh, attempt, e.buildIndex); err != nil {
				return Hold{}, err
			}
			attempt++
		default:
			return Hold{}, fmt.Errorf("%w: unexpected best script reply %v", ErrUnavailable, res)
		}
	}
}

// bestSections are the sections a best-available hold may choose from, as best.lua
// numbers them: section, or every section of the show when it is "". An unknown one is
// ErrNotFound, naming the show's sections.
func (e *Engine) bestSections(ctx context.Context, sh *show, section string) ([]string, error) {
	var sections []string
	if section != "" {
		n, ok := sh.sections[section]
		if !ok {
			names := make([]string, 0, len(sh.sections))
			for name := range sh.sections {
				names = append(names, fmt.Sprintf("%q", name))
			}
			slices.Sort(names)
			return nil, e.unknownSeat(ctx, sh, notFound("section %q in show %q; its sections are %s", section, sh.id, strings.Join(names, ", ")))
		}
		sections = []string{strconv.Itoa(n)}
	} else {
		for _, n := range sh.sections {
			sections = append(sections, strconv.Itoa(n))
		}
		slices.Sort(sections)
	}
	return sections, nil
}

// maxReapRounds bounds the calls of one HoldBest that each give back best.lua's share
// (2,000) of a show's expired holds: 100 rounds cover MaxSeatsPerShow's default.
const maxReapRounds = 100

// buildIndex indexes every seat of the show for best-available holds, a page of whole
// rows at a time, the last page marking the index complete. Pages indexed already are
// left alone, so it is safe to run again, and while the show is on sale: the scripts
// keep the index of every seat that has one. Each page is written only while Redis's
// rules are of the copy's show (index.lua): a copy of a show deleted and created again
// since writes nothing (*showChanged), and neither does one Redis lost the rules of
// meanwhile (ErrUnavailable; the next call rebuilds the show).
func (e *Engine) buildIndex(ctx context.Context, sh *show) error {
	n, err := e.rdb.Exists(ctx, sh.k.index()).Result()
	if err != nil {
		return e.redisErr(err)
	}
	if n == 1 {
		return nil
	}
	page := []any{sh.epoch, "-"}
	flush := func(last bool) error {
		if last {
			page[1] = len(sh.layout)
		}
		res, err := lua.Index.Run(ctx, e.rdb, []string{sh.k.gen()}, page...).Slice()
		page = page[:2]
		if err != nil {
			return e.redisErr(err)
		}
		switch status, _ := res[0].(string); status {
		case "OK":
			return nil
		case "STALE", "CLOSED":
			return e.metChange(ctx, sh, status)
		case "NORULES":
			return fmt.Errorf("%w: redis lost the rules of show %s while its index was built", ErrUnavailable, sh.id)
		}
		return fmt.Errorf("%w: unexpected index script reply %v", ErrUnavailable, res)
	}
	for i, s := range sh.layout {
		// A page ends where no run can continue (a row's or a segment's end).
		if i > 0 && !sh.joinedRight(i-1) && (len(page)-2)/3 >= indexPage {
			if err := flush(false); err != nil {
				return err
			}
		}
		page = append(page, s.ID, sh.bucket[i], sh.meta[i])
	}
	return flush(true)
}
