package engine

import (
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/google/uuid"
)

const (
	maxIDLen             = 64
	tokenLen             = 32 // 128 bits, lowercase hex
	maxHolderIDLen       = 128
	maxIdempotencyKeyLen = 255
)

// newBookingID is a new booking's id: a UUIDv7, whose first 48 bits are the time in ms
// (increasing within a process), so that a booking's entries land at the right edge of
// the indexes keyed by its id (bookings, booking_seats, seat_claims) instead of on a
// random page of each. Of its other 74 bits 62 are random (12 count within the ms). A
// booking's id is no secret: over HTTP every read and write of a booking checks its
// holder.
func newBookingID() uuid.UUID { return uuid.Must(uuid.NewV7()) }

// validID reports whether s matches ^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$: no braces or
// colons, which would break the Redis hash tag and the key layout.
func validID(s string) bool {
	if len(s) == 0 || len(s) > maxIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return false
		}
	}
	return true
}

func validateID(field, s string) error {
	if !validID(s) {
		return invalid(field, "%q must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$", s)
	}
	return nil
}

// sortedSeatIDs checks a list of seat ids — each well formed, no duplicates, between 1
// and max of them — and returns them sorted, in a slice of their own.
func sortedSeatIDs(field string, seats []string, max int) ([]string, error) {
	if len(seats) == 0 {
		return nil, invalid(field, "no seats")
	}
	if len(seats) > max {
		return nil, invalid(field, "%d seats, at most %d", len(seats), max)
	}
	for _, s := range seats {
		if !validID(s) {
			return nil, invalid(field, "seat %q must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$", s)
		}
	}
	sorted := slices.Clone(seats)
	slices.Sort(sorted)
	for i := 1; i < len(sorted); i++ {
		if sorted[i] == sorted[i-1] {
			return nil, invalid(field, "seat %q appears twice", sorted[i])
		}
	}
	return sorted, nil
}

func validToken(t string) bool {
	if len(t) != tokenLen {
		return false
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// requireHolderID is validateHolderID for calls that need a holder (an empty one is
// allowed elsewhere): why says what the holder is needed for.
func requireHolderID(h, why string) error {
	if h == "" {
		return invalid("holderID", "required: %s", why)
	}
	return validateHolderID(h)
}

func validateHolderID(h string) error {
	if len(h) > maxHolderIDLen {
		return invalid("HolderID", "%d bytes, at most %d", len(h), maxHolderIDLen)
	}
	if !utf8.ValidString(h) {
		return invalid("HolderID", "not valid UTF-8")
	}
	for _, r := range h {
		if r < 0x20 || r == 0x7f {
			return invalid("HolderID", "contains a control character")
		}
	}
	return nil
}

// validateIdempotencyKey checks an idempotency key (field names it in the error).
func validateIdempotencyKey(field, k string) error {
	if len(k) > maxIdempotencyKeyLen {
		return invalid(field, "%d bytes, at most %d", len(k), maxIdempotencyKeyLen)
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return invalid(field, "only printable ASCII without spaces")
		}
	}
	return nil
}

// newToken returns 128 random bits from crypto/rand as 32 lowercase hex digits.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics instead)
	return hex.EncodeToString(b[:])
}

// holderTag is what a hold stores of its holder: a hash, so that customer ids never land
// in Redis keys or values. Empty for an empty holder.
func holderTag(holderID string) string {
	if holderID == "" {
		return ""
	}
	sum := sha256.Sum256([]byte("holdfast-holder\x00" + holderID))
	return hex.EncodeToString(sum[:16])
}

// fingerprint identifies a confirm request for its idempotency key: the show, the seats
// (sorted), the token and the generation presented. Fields are length-prefixed so that
// no two different requests share an encoding.
func fingerprint(showID string, sortedSeats []string, token string, generation int64) []byte {
	h := sha256.New()
	var n [8]byte
	put := func(s string) {
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	put("holdfast-confirm-v1")
	put(showID)
	binary.BigEndian.PutUint64(n[:], uint64(len(sortedSeats)))
	h.Write(n[:])
	for _, s := range sortedSeats {
		put(s)
	}
	put(token)
	put(strconv.FormatInt(generation, 10))
	return h.Sum(nil)
}

// keys builds a show's Redis keys. Every key of a show carries the hash tag {show}, so
// all of a show's keys live in one Redis Cluster slot and one script can touch them.
//
//	<prefix>:{<show>}:hold:<seat>     string "<token>:<generation>:<created_ms>:<holder tag>"
//	<prefix>:{<show>}:gen             INCR counter, never deleted
//	<prefix>:{<show>}:sold:<bucket>   hash seat -> booking id, for the seats of one bucket
//	<prefix>:{<show>}:holder:<tag>    zset seat -> expiry ms, the holder's live seats
//	<prefix>:{<show>}:released:<h>    string release time ms, a released hold's tombstone
//	<prefix>:{<show>}:moves           stream: hold moves whose events are not in the feed yet (moves.go)
//
// The sold markers of a show are split into buckets of soldBucketSize seats (in sorted
// seat order), so that Redis keeps each hash as a listpack: about 50 bytes per sold seat
// instead of about 110 in one large hashtable.
type keys struct{ base string }

// soldBucketSize is how many seats share one sold-marker hash; below Redis's default
// hash-max-listpack-entries (128).
const soldBucketSize = 100

func newKeys(prefix, showID string) keys { return keys{base: prefix + ":{" + showID + "}:"} }

func (k keys) gen() string               { return k.base + "gen" }
func (k keys) sold(bucket int) string    { return k.base + "sold:" + strconv.Itoa(bucket) }
func (k keys) hold(seatID string) string { return k.base + "hold:" + seatID }
func (k keys) holder(tag string) string  { return k.base + "holder:" + tag }
func (k keys) feed() string              { return k.base + "feed" }
func (k keys) feedN() string             { return k.base + "feed:n" }
func (k keys) index() string             { return k.base + "ixs" }
func (k keys) booked() string            { return k.base + "booked" }
func (k keys) rules() string             { return k.base + "rules" }
func (k keys) moves() string             { return k.base + "moves" }
func (k keys) horizon() string           { return k.base + "wl:at" }

// released is the tombstone a release of the hold (of holder tag and token) leaves
// (release.lua): the token itself is not in the name.
func (k keys) released(tag, token string) string {
	sum := sha1.Sum([]byte(tag + ":" + token))
	return k.base + "released:" + hex.EncodeToString(sum[:])
}

// holdHash identifies a hold in the database without its secret: SHA-256 over the show
// and the token. A hold makes at most one booking (bookings_hold_unique).
func holdHash(showID, token string) []byte {
	sum := sha256.Sum256([]byte("holdfast-hold-v1\x00" + showID + "\x00" + token))
	return sum[:]
}
