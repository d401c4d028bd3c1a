package engine

import (
	"time"

	"github.com/google/uuid"
)

// HoldRequest asks for seats of one show.
type HoldRequest struct {
	ShowID  string
	SeatIDs []string
	// TTL is the life of the hold; zero means Config.DefaultHoldTTL.
	TTL time.Duration
	// HolderID names the customer; it is capped at Config.MaxSeatsPerHolder seats held
	// at once per show, and it scopes idempotency keys. Empty means no cap.
	HolderID string
	// Places asks for a number of places of each of the show's areas (areas.go), held
	// all or nothing with the seats; a place counts as a seat for every limit.
	Places []Places
	// IdempotencyKey makes the hold safe to retry (idempotency.go): while the hold it
	// made lives, a retry of the same request gets that hold again (the same token);
	// another request under the key is ErrIdempotencyKeyReused. It needs a HolderID,
	// which scopes it.
	IdempotencyKey string
	// Offer is an opaque string the hold carries (a price tier, a price-list version; at
	// most 256 bytes of UTF-8, empty for none): Redis keeps it with the hold, and the
	// booking the hold makes stores it unchanged (Booking.Offer), whatever the Hold
	// presented to Confirm says.
	Offer string
}

// BestRequest asks for the best available seats of a show: Count of them anywhere (or
// in Section), or, with Adjacent, Count seats side by side in one row. Best means the
// lowest ranks (Seat.Rank; for a block, the lowest sum). TTL and HolderID are as in
// HoldRequest.
type BestRequest struct {
	ShowID  string
	Count   int
	Section string
	// Category, when given, restricts the hold to seats of that category (Seat.Category).
	Category string
	Adjacent bool
	TTL      time.Duration
	HolderID string
	// IdempotencyKey is as HoldRequest's: a retry gets the seats the first call chose.
	IdempotencyKey string
	// Offer is as HoldRequest's.
	Offer string
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
	Places     []Places // by area id
	// Offer is the hold's, as it was asked for (HoldRequest.Offer); Reclaim and Transfer
	// keep it.
	Offer string
}

// ConfirmOptions tunes a confirmation.
type ConfirmOptions struct {
	// IdempotencyKey makes the confirmation safe to retry: a retry with the same key
	// returns the booking the first call created; the same key with another request is
	// refused with ErrIdempotencyKeyReused. Keys are scoped to the holder and show.
	IdempotencyKey string
	// SeatIDs and Places, when either is non-empty, confirm only these of the hold's
	// seats and places: the booking has them, and the rest of the hold is released in
	// the same step (sellable once the booking has committed). A seat or area the hold
	// does not have, or more places than it holds, is ErrInvalidArgument.
	SeatIDs []string
	Places  []Places
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
	Places      []Places // by area id
	// Offer is the offer of the hold that made the booking (Hold.Offer), "" for none.
	Offer string
	// Replayed is true when the call returned the answer an earlier call with the same
	// idempotency key gave (Confirm, CancelSeats, TransferBooking).
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

// MaxGeneration is the largest generation there can be: 2^53-1, the largest integer a
// JSON number carries exactly (and Redis Lua's numbers). A presented hold with a
// larger one is an InvalidArgumentError.
const MaxGeneration = 1<<53 - 1
