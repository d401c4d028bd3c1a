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
// req.Section and of req.Category when given, or anywhere), or with req.Adjacent req.Count seats side by side in one
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
	if err := validateOffer("BestRequest.Offer", req.Offer); err != nil {
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
	sections, err := e.bestSections(ctx, sh, req.Section, req.Category)
	if err != nil {
		return Hold{}, err
	}
	if err := e.checkRedis(ctx); err != nil {
		return Hold{}, err
	}
	token, ks, args, err := e.bestCall(ctx, sh, req, ttl, rules, sections)
	if err != nil {
		return Hold{}, err
	}
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
				ExpiresAt: time.UnixMilli(exp), HolderID: req.HolderID, Offer: req.Offer}, nil
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
			// The script gave back a bounded share of the expired holds, or listed the
			// runs of a bounded share of the segments that gave seats back, and has
			// more to do before it may choose: every expired hold could beat its pick,
			// and a run listed nowhere would not be searched.
			if rounds++; rounds > maxReapRounds {
				return Hold{}, fmt.Errorf("%w: show %s has more expired holds to give back or runs to list than %d calls could", ErrUnavailable, sh.id, maxReapRounds)
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

// bestCall is best.lua's call for req on sections under a fresh token: its keys and
// arguments, with the request's idempotency key; the hold's offer is in Redis first.
func (e *Engine) bestCall(ctx context.Context, sh *show, req BestRequest, ttl time.Duration, rules *rulesState, sections []string) (token string, ks []string, args []any, err error) {
	tag := holderTag(req.HolderID)
	adjacent := "0"
	if req.Adjacent {
		adjacent = "1"
	}
	token = newToken()
	ks = []string{sh.k.gen(), sh.k.holder(tag)}
	args = []any{tag, token, ttl.Milliseconds(), e.cfg.MaxSeatsPerHolder, req.Count, adjacent, strings.Join(sections, " "), rules.arg}
	key, err := holdIdem(ctx, sh, "BestRequest.IdempotencyKey", req.IdempotencyKey, req.HolderID, tag, func() []string {
		return bestPrint(req, adjacent, ttl)
	})
	if err != nil {
		return "", nil, nil, err
	}
	if err := e.keepOffer(ctx, sh, token, req.Offer); err != nil {
		return "", nil, nil, err
	}
	ks, args = key.apply(e, ks, args)
	return token, ks, args, nil
}

// bestPrint is what a best-available request's idempotency key fingerprints; without a
// category it is what it was before categories.
func bestPrint(req BestRequest, adjacent string, ttl time.Duration) []string {
	parts := []string{"best", strconv.Itoa(req.Count), req.Section, adjacent, strconv.FormatInt(ttl.Milliseconds(), 10)}
	if req.Category != "" {
		parts = append(parts, "category", req.Category)
	}
	return append(parts, offerPrint(req.Offer)...)
}

// bestSections are the sections a best-available hold may choose from, as best.lua
// numbers them: section, or those of category, or every one; each "" for any. A
// section or a category that the show's seats do not have, or a section of another
// category, is ErrNotFound, naming what the show has.
func (e *Engine) bestSections(ctx context.Context, sh *show, section, category string) ([]string, error) {
	var sections []string
	sectionKnown, categoryKnown := section == "", category == ""
	for n, bs := range sh.sections {
		sectionKnown = sectionKnown || bs.section == section
		categoryKnown = categoryKnown || bs.category == category
		if (section == "" || bs.section == section) && (category == "" || bs.category == category) {
			sections = append(sections, strconv.Itoa(n))
		}
	}
	switch {
	case len(sh.sections) == 0:
		return nil, notFound("seats in show %q: it has standing areas only (hold places of them)", sh.id)
	case !sectionKnown:
		return nil, e.unknownSeat(ctx, sh, notFound("section %q in show %q; its sections are %s", section, sh.id, sh.labels(func(bs bestSection) string { return bs.section })))
	case !categoryKnown:
		return nil, e.unknownSeat(ctx, sh, notFound("seats of category %q in show %q; its seats' categories are %s", category, sh.id, sh.labels(func(bs bestSection) string { return bs.category })))
	case len(sections) == 0:
		return nil, e.unknownSeat(ctx, sh, notFound("seats of category %q in section %q of show %q", category, section, sh.id))
	}
	return sections, nil
}

// labels lists, quoted and sorted, the distinct labels that label takes of the show's
// sections.
func (sh *show) labels(label func(bestSection) string) string {
	var names []string
	for _, bs := range sh.sections {
		if q := strconv.Quote(label(bs)); !slices.Contains(names, q) {
			names = append(names, q)
		}
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// maxReapRounds bounds the calls of one HoldBest that each give back best.lua's share
// (2,000) of a show's expired holds, or list the runs of its share (segments of 2,048
// seats) of those that gave seats back: 100 rounds cover MaxSeatsPerShow's default
// either way.
const maxReapRounds = 100

// buildIndex indexes every seat of the show for best-available holds, a page of whole
// rows at a time, the last page marking the index complete. Pages indexed already are
// left alone, so it is safe to run again, and while the show is on sale: the scripts
// keep the index of every seat that has one. Each page is written only while Redis's
// rules are of the copy's show (index.lua): a copy of a show deleted and created again
// since writes nothing (*showChanged), and neither does one Redis lost the rules of
// meanwhile (ErrUnavailable; the next call rebuilds the show).
func (e *Engine) buildIndex(ctx context.Context, sh *show) error {
	if len(sh.layout) == 0 {
		return nil // standing areas only: no seat to index, and no best-available hold
	}
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
