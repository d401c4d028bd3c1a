package engine

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
)

// The errors the engine returns. Match them with [errors.Is]; they may be wrapped.
var (
	// ErrInvalidArgument reports bad input; nothing was written. [InvalidArgumentError]
	// names the field and the rule.
	ErrInvalidArgument = errors.New("engine: invalid argument")
	// ErrNotFound reports an unknown show, seat or booking.
	ErrNotFound = errors.New("engine: not found")
	// ErrSeatsUnavailable reports seats held by someone else or sold;
	// [SeatsUnavailableError] names them.
	ErrSeatsUnavailable = errors.New("engine: seats unavailable")
	// ErrHoldLost reports a hold that is no longer current in Redis: it expired, was
	// released, was confirmed already, or the token or generation is not the owner's.
	// [HoldLostError] says which, as far as its caller may know.
	ErrHoldLost = errors.New("engine: hold lost")
	// ErrStaleGeneration reports a confirmation whose generation the database has seen
	// already, or surpassed: a newer hold on one of its seats was confirmed first.
	ErrStaleGeneration = errors.New("engine: stale generation")
	// ErrIdempotencyKeyReused reports an idempotency key that this holder already used
	// for a different request.
	ErrIdempotencyKeyReused = errors.New("engine: idempotency key reused")
	// ErrExtendLimit reports an extension past the maximum total age of a hold.
	ErrExtendLimit = errors.New("engine: hold extend limit reached")
	// ErrHolderLimit reports a hold that would take a holder past its cap of seats held
	// at once in one show (Config.MaxSeatsPerHolder), or a hold or confirmation past
	// the show's SaleRules.HolderLimit of seats held plus booked.
	ErrHolderLimit = errors.New("engine: holder seat limit reached")
	// ErrNotAdmitted reports a hold (Hold, HoldBest) on a show with a waiting room by a
	// holder not admitted now: Join, and hold once the Ticket says admitted.
	ErrNotAdmitted = errors.New("engine: holder not admitted")
	// ErrShowInUse reports a DeleteShow of a show that has (or had) bookings, live
	// holds, or holds that Reclaim or Transfer moved: nothing was deleted.
	ErrShowInUse = errors.New("engine: show in use")
	// ErrUnavailable reports that Redis or PostgreSQL failed or timed out; the outcome
	// is not success and the seats are not known to be taken. The cause is wrapped.
	ErrUnavailable = errors.New("engine: backend unavailable")
	// ErrOverloaded reports work refused because it could not be done in time: too many
	// confirmations wait for the database, or one would get its turn only after its hold
	// expires. Nothing changed; retry later (HTTP: 503 with Retry-After).
	ErrOverloaded = errors.New("engine: overloaded")
)

// SeatsUnavailableError names the requested seats that were held or sold. From
// [Engine.HoldBest] it names none: nothing fitted, and Available is how many free seats
// the best section (of those asked for) still had. It matches [ErrSeatsUnavailable].
type SeatsUnavailableError struct {
	ShowID    string
	SeatIDs   []string
	Available int
}

func (e *SeatsUnavailableError) Error() string {
	if len(e.SeatIDs) == 0 {
		return fmt.Sprintf("engine: no seats fit in show %s (the best section has %d free)", e.ShowID, e.Available)
	}
	return fmt.Sprintf("engine: seats unavailable in show %s: %s", e.ShowID, strings.Join(e.SeatIDs, ", "))
}

// Is reports whether target is [ErrSeatsUnavailable].
func (e *SeatsUnavailableError) Is(target error) bool { return target == ErrSeatsUnavailable }

// InvalidArgumentError names the field that broke a rule. It matches [ErrInvalidArgument].
type InvalidArgumentError struct {
	Field string
	Rule  string
}

func (e *InvalidArgumentError) Error() string {
	return fmt.Sprintf("engine: invalid argument: %s: %s", e.Field, e.Rule)
}

// Is reports whether target is [ErrInvalidArgument].
func (e *InvalidArgumentError) Is(target error) bool { return target == ErrInvalidArgument }

func invalid(field, format string, args ...any) error {
	return &InvalidArgumentError{Field: field, Rule: fmt.Sprintf(format, args...)}
}

func notFound(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrNotFound, fmt.Sprintf(format, args...))
}

// unavailable wraps a backend failure as [ErrUnavailable], keeping the cause.
func unavailable(backend string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %s: %w", ErrUnavailable, backend, err)
}

// HoldSpentError reports a confirmation of a hold that made a booking already: a hold
// makes at most one booking, ever, whatever seats or generation it presents, even after
// that booking was cancelled. It matches [ErrStaleGeneration] when the database refused
// the hold, or [ErrHoldLost] when Redis no longer had it.
type HoldSpentError struct {
	ShowID string
	// BookingID is the booking the hold made, when the caller is its holder (zero
	// otherwise).
	BookingID uuid.UUID
	err       error
}

func (e *HoldSpentError) Error() string {
	if e.BookingID != uuid.Nil {
		return fmt.Sprintf("%v: the hold made booking %s already", e.err, e.BookingID)
	}
	return fmt.Sprintf("%v: the hold made a booking already", e.err)
}

// Unwrap returns the sentinel it matches.
func (e *HoldSpentError) Unwrap() error { return e.err }

// HoldLostCause is why a presented hold is not current, as far as its caller may know.
type HoldLostCause string

// The causes of a [HoldLostError].
const (
	// HoldExpired: the hold expired at HoldLostError.At (the expiry the caller
	// presented, Hold.ExpiresAt, has passed), or would before its confirmation could
	// commit.
	HoldExpired HoldLostCause = "expired"
	// HoldReleased: the hold was released, at HoldLostError.At. A release is remembered
	// in Redis until releaseMemory (10 minutes) past the hold's expiry, for its own holder and token.
	HoldReleased HoldLostCause = "released"
	// HoldConfirmed: the hold made booking HoldLostError.BookingID. Said to its own
	// holder only; the error then also matches [*HoldSpentError].
	HoldConfirmed HoldLostCause = "confirmed"
	// HoldNotCurrent: none of the above is known to the caller. The token, generation,
	// seats or holder are not the hold's (another holder's hold is never described),
	// the hold was reclaimed, its expiry was not presented, or Redis lost it.
	HoldNotCurrent HoldLostCause = "not_current"
)

// releaseMemory is how long, past the expiry it had, Redis remembers that a hold was
// released (a small key per release), so that a later call with it hears
// [HoldReleased] rather than [HoldNotCurrent].
const releaseMemory = 10 * time.Minute

// HoldLostError says why a hold presented to Confirm, Extend or Release is not current.
// It matches [ErrHoldLost].
type HoldLostError struct {
	ShowID string
	Cause  HoldLostCause
	// At is when the hold expired (HoldExpired) or was released (HoldReleased); zero
	// otherwise.
	At time.Time
	// BookingID is the booking the hold made (HoldConfirmed).
	BookingID uuid.UUID
	// offer: the hold expired was a waitlist's offer (it matches ErrOfferExpired too).
	offer bool
	op    string // confirm, extend or release
	err   error  // what it wraps: the *HoldSpentError, or a refusal's detail
}

func (e *HoldLostError) Error() string {
	var what string
	switch e.Cause {
	case HoldExpired:
		what = "the hold expired at " + e.At.UTC().Format(time.RFC3339Nano)
		if e.offer {
			what = "the waitlist offer expired at " + e.At.UTC().Format(time.RFC3339Nano) + " and went to the next in line"
		}
		if time.Now().Before(e.At) {
			what = "the hold expires at " + e.At.UTC().Format(time.RFC3339Nano) + ", before its confirmation could commit"
		}
	case HoldReleased:
		what = "the hold was released at " + e.At.UTC().Format(time.RFC3339Nano)
	case HoldConfirmed:
		what = fmt.Sprintf("the hold made booking %s already", e.BookingID)
	default:
		what = "the hold is not current"
	}
	msg := fmt.Sprintf("%v: %s: %s", ErrHoldLost, e.op, what)
	var spent *HoldSpentError
	if e.err != nil && !errors.As(e.err, &spent) {
		msg += " (" + strings.TrimPrefix(e.err.Error(), ErrHoldLost.Error()+": ") + ")"
	}
	return msg
}

// Is reports whether target is [ErrHoldLost], or [ErrOfferExpired] for a waitlist
// offer's hold that expired.
func (e *HoldLostError) Is(target error) bool {
	return target == ErrHoldLost || (target == ErrOfferExpired && e.offer && e.Cause == HoldExpired)
}

// Unwrap returns what it wraps: the [*HoldSpentError] of a confirmed hold, or nil.
func (e *HoldLostError) Unwrap() error { return e.err }
