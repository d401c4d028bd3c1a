package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/holdfast/holdfast/db"
)

// Idempotency keys. Every write but Reclaim (whose answer is always the holder's live
// holds) takes one: HoldRequest.IdempotencyKey,
// BestRequest.IdempotencyKey and ConfirmOptions.IdempotencyKey, and for the writes whose
// signature has no request struct (Extend, Release, Shrink, Transfer, Cancel,
// CancelSeats, TransferBooking) the context, by WithIdempotencyKey. A retry of a request
// under its key gets the first call's answer and changes nothing more; another request
// under the same key is ErrIdempotencyKeyReused. Keys are scoped to the holder (and,
// for a write on a hold, to the hold's token; for a write on a booking, to the booking
// and to the side that writes: its holder or the operator).
//
// A hold's key is kept inside the hold scripts (common.lua: idem_open), in a record
// under the show's hash tag, and lives with the hold: while the hold lives, a retry
// gets it as it is now (same token; a Shrink's part), or ErrHoldLost once Reclaim gave
// it fresh tokens; once it is gone, the key is free.
// A key of a write on a hold is kept in the same way for Config.MaxHoldAge, the longest
// a hold can live. A booking's key is kept in PostgreSQL with the booking.

type idempotencyKeyCtx struct{}

// WithIdempotencyKey returns a context that carries key as the idempotency key of the
// write it is passed to: Extend, Release, Shrink, Transfer, Cancel, CancelSeats and
// TransferBooking take their key from it (a request struct's own key, where it has one,
// comes first). An empty key means none.
func WithIdempotencyKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, idempotencyKeyCtx{}, key)
}

// idempotencyKeyOf is own when set, else the key ctx carries.
func idempotencyKeyOf(ctx context.Context, own string) string {
	if own != "" {
		return own
	}
	k, _ := ctx.Value(idempotencyKeyCtx{}).(string)
	return k
}

// idem is a Redis-kept write's key as its script takes it: the record, under the show's
// hash tag, and the request's fingerprint. The zero idem is no key.
type idem struct{ rec, fp string }

// redisIdem returns the idem of a write of show sh under key, scoped by scope (the
// holder's tag, and the hold's token for a write on a hold) and identified by request
// (the write's kind and arguments). field names the key in an error.
func redisIdem(sh *show, field, key string, scope []string, request ...string) (idem, error) {
	if key == "" {
		return idem{}, nil
	}
	if err := validateIdempotencyKey(field, key); err != nil {
		return idem{}, err
	}
	return idem{rec: sh.k.base + "idem:" + printOf(append(scope, key)...), fp: printOf(request...)}, nil
}

// apply returns a script call's keys and arguments with the key's record and
// fingerprint appended, and the record's life: Config.MaxHoldAge, the longest a hold
// lives.
func (k idem) apply(e *Engine, ks []string, args []any) ([]string, []any) {
	if k.rec == "" {
		return ks, args
	}
	return append(ks, k.rec), append(args, k.fp, e.cfg.MaxHoldAge.Milliseconds())
}

// replayed unwraps a script's reply to a retried request ({"REPLAY", token, reply...},
// common.lua: idem_replay): the first call's reply, the token of the hold it names, and
// true. Any other reply is returned as it is.
func replayed(res []any) ([]any, string, bool) {
	if len(res) < 3 {
		return res, "", false
	}
	if s, _ := res[0].(string); s != "REPLAY" {
		return res, "", false
	}
	token, _ := res[1].(string)
	return res[2:], token, true
}

// onHoldIdem is the idem of a write on the hold h under the key ctx carries, scoped to
// the hold's holder and token and identified by request with the hold's seats and
// generation.
func onHoldIdem(ctx context.Context, sh *show, h Hold, request ...string) (idem, error) {
	key := idempotencyKeyOf(ctx, "")
	if key == "" {
		return idem{}, nil
	}
	parts := append([]string{strconv.FormatInt(h.Generation, 10), sortedPrint(h.SeatIDs), placesPrint(h.Places)}, request...)
	return redisIdem(sh, "IdempotencyKey", key, []string{"on-hold", holderTag(h.HolderID), h.Token}, parts...)
}

// replyStrings is a script reply's strings.
func replyStrings(res []any) []string {
	out := make([]string, 0, len(res))
	for _, v := range res {
		if s, ok := v.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// keyReused is the refusal of a request under a key that answered another one.
func keyReused(field string) error {
	return fmt.Errorf("%w: %s names another request", ErrIdempotencyKeyReused, field)
}

// printSum is a SHA-256 over parts, length-prefixed so that no two lists share an
// encoding; printOf is the same as 64 hex digits.
func printSum(parts ...string) []byte {
	h := sha256.New()
	var n [8]byte
	for _, p := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	return h.Sum(nil)
}

func printOf(parts ...string) string { return hex.EncodeToString(printSum(parts...)) }

// sortedPrint is seat ids, in any order, as one fingerprint part.
func sortedPrint(seats []string) string {
	return strings.Join(slices.Sorted(slices.Values(seats)), " ")
}

// placesPrint is places, in any order, as one fingerprint part.
func placesPrint(places []Places) string {
	parts := make([]string, len(places))
	for i, p := range places {
		parts[i] = p.AreaID + "=" + strconv.Itoa(p.Count)
	}
	return sortedPrint(parts)
}

// bookingKey is a write on a booking under its key, as its transaction checks it: the
// key and the request's fingerprint, and who writes (scope: the booking's holder, or
// the operator). The zero bookingKey is no key.
type bookingKey struct {
	key, scope string
	fp         []byte
}

// The scopes of a write on a booking: by its holder (whoever holds it when the key is
// first used: a retry after an operator moved the booking still gets its answer), or
// by an operator.
const (
	byHolder   = "holder"
	byOperator = "operator"
)

// bookingKeyOf is the bookingKey of a write on a booking under the key ctx carries,
// identified by request.
func bookingKeyOf(ctx context.Context, scope string, request ...string) (bookingKey, error) {
	key := idempotencyKeyOf(ctx, "")
	if key == "" {
		return bookingKey{}, nil
	}
	if err := validateIdempotencyKey("IdempotencyKey", key); err != nil {
		return bookingKey{}, err
	}
	return bookingKey{key: key, scope: scope, fp: printSum(request...)}, nil
}

// replay looks the key up (in the transaction of q, which holds the booking's row lock,
// or before it): the answer it gave and true when it answered this request,
// ErrIdempotencyKeyReused when another, false when it is new (or there is no key). A key
// a write on behalf of another holder used (ctx: AsHolder; the answer names the holder
// who wrote) is ErrNotFound, as that holder's booking is: the key tells nothing of it.
func (k bookingKey) replay(ctx context.Context, q *db.Queries, bookingID uuid.UUID) (Booking, bool, error) {
	if k.key == "" {
		return Booking{}, false, nil
	}
	row, err := q.BookingWriteKeyGet(ctx, db.BookingWriteKeyGetParams{BookingID: bookingID, Scope: k.scope, IdempotencyKey: k.key})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Booking{}, false, nil
	case err != nil:
		return Booking{}, false, err
	}
	var b Booking
	if err := json.Unmarshal(row.Answer, &b); err != nil {
		return Booking{}, false, fmt.Errorf("the answer kept under the key: %w", err)
	}
	switch {
	case notTheHolders(ctx, b.HolderID):
		return Booking{}, false, notFound("booking %s", bookingID)
	case !bytes.Equal(row.Fingerprint, k.fp):
		return Booking{}, false, keyReused("IdempotencyKey")
	}
	b.Replayed = true
	return b, true, nil
}

// keep writes the key, in the transaction of q, with answer (the booking as the write
// left it). Nothing without a key.
func (k bookingKey) keep(ctx context.Context, q *db.Queries, answer Booking) error {
	if k.key == "" {
		return nil
	}
	body, err := json.Marshal(answer)
	if err != nil {
		return err
	}
	return q.BookingWriteKeyInsert(ctx, db.BookingWriteKeyInsertParams{ShowID: answer.ShowID, BookingID: answer.ID,
		Scope: k.scope, IdempotencyKey: k.key, Fingerprint: k.fp, Answer: body})
}
