package engine

import (
	"fmt"
	"sync/atomic"
	"time"
)

// Reservation nonces. Every check of a hold that reserves it (reserve.lua) carries a
// nonce, which the reservation keeps; a give-back (unreserve.lua) names the nonce of the
// check it gives back, and frees a reservation only if that check, or an earlier one of
// the same commit id, made it. A commit id is reserved again after a give-back of it was
// sent — the settler commits a confirmation again under its own booking id, and an
// exchange retried on another engine commits under the same booking id — and the
// give-back of a check whose reply was lost, sent later, then leaves the later check's
// reservation alone. A reservation keeps the largest nonce of its checks whatever order
// Redis ran them in.
//
// Nonces are the wall clock in nanoseconds, or one more than the last drawn when the
// clock has not moved on (a draw takes longer than a nanosecond, so the counter does not
// run ahead of the clock): in increasing order within a process, and across processes
// whose clocks agree to within the time between two checks of one commit id (a retry
// comes a round trip or more after the check it retries).
type nonceSource struct{ last atomic.Uint64 }

var reserveNonces nonceSource

// next draws a nonce: 16 lowercase hex digits, larger than any drawn before from s and
// not earlier than now.
func (s *nonceSource) next() string {
	for {
		last := s.last.Load()
		n := max(last+1, uint64(time.Now().UnixNano()))
		if s.last.CompareAndSwap(last, n) {
			return fmt.Sprintf("%016x", n)
		}
	}
}

// newNonce draws a check's nonce from this process's source.
func newNonce() string { return reserveNonces.next() }
