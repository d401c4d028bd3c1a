package engine

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
)

// A hold's offer (HoldRequest.Offer, BestRequest.Offer) is kept in Redis beside the
// hold, under the show's hash tag: <base>of:<SHA-1 of the token>, written before the
// hold script runs and living longer than any hold can (offerLife), so that whatever
// the hold becomes the offer is there. reserve.lua reads it when a batch reserves the
// hold, and the booking stores that, not what the presented Hold says: a buyer cannot
// change the price tier their hold was given. reclaim.lua and transfer.lua move it to
// the hold's new token (offer_move in common.lua).

// maxOfferLen bounds an offer, in bytes.
const maxOfferLen = 256

// validateOffer checks an offer: at most maxOfferLen bytes of UTF-8 without control
// characters (it travels in JSON and in line-based idempotency records).
func validateOffer(field, o string) error {
	if len(o) > maxOfferLen {
		return invalid(field, "%d bytes, at most %d", len(o), maxOfferLen)
	}
	if !utf8.ValidString(o) {
		return invalid(field, "not valid UTF-8")
	}
	for _, r := range o {
		if unicode.IsControl(r) {
			return invalid(field, "contains a control character")
		}
	}
	return nil
}

// offer is the key of the offer of the hold of token.
func (k keys) offer(token string) string {
	sum := sha1.Sum([]byte(token))
	return k.base + "of:" + hex.EncodeToString(sum[:])
}

// offerLife is how long an offer's key lives: past the longest life of a hold
// (Config.MaxHoldAge), then the longest a settler may commit a confirmation of it again
// after a lost COMMIT (it gives up after MaxHoldTTL), with a batch's reservation on top,
// and a margin.
func (e *Engine) offerLife() time.Duration {
	return e.cfg.MaxHoldAge + e.cfg.MaxHoldTTL + e.reserveLife() + 10*time.Minute
}

// keepOffer writes the offer of the hold token is about to name (nothing for none). A
// hold the script then refuses leaves the key to expire: it names no hold.
func (e *Engine) keepOffer(ctx context.Context, sh *show, token, offer string) error {
	if offer == "" {
		return nil
	}
	return e.redisErr(e.rdb.Set(ctx, sh.k.offer(token), offer, e.offerLife()).Err())
}

// offerOf is the offer of h, a hold this call has just found current (Extend, Shrink),
// as Redis keeps it, not as the caller presented it; the presented one only when Redis
// does not answer now (the change is made: the booking takes Redis's either way).
func (e *Engine) offerOf(ctx context.Context, sh *show, h Hold) string {
	o, err := e.rdb.Get(ctx, sh.k.offer(h.Token)).Result()
	switch {
	case err == nil:
		return o
	case errors.Is(err, redis.Nil):
		return ""
	}
	return h.Offer
}

// offerPrint is the fingerprint part of a hold request's offer: none without one, so a
// request without an offer has the fingerprint it had before offers.
func offerPrint(offer string) []string {
	if offer == "" {
		return nil
	}
	return []string{"offer", offer}
}
