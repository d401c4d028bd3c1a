package engine

import (
	"fmt"
	"sync/atomic"
)

// Reservation nonces. Every check of a hold that reserves it (reserve.lua) carries a
// nonce, which the reservation keeps; a give-back (unreserve.lua) names the nonce of the
// check it gives back, and frees a reservation only if that check, or an earlier one of
// the same commit id, made it. A commit id is reserved again after a give-back of it was
// sent — the settler commits a confirmation again under its own booking id — and the
// give-back of a check whose reply was lost, sent later, then leaves the re-commit's
// reservation alone. Nonces are drawn in increasing order (a commit id is one process's:
// only its engine reserves it), so a reservation keeps the largest nonce of its checks
// whatever order Redis ran them in.
var reserveNonces atomic.Uint64

// newNonce draws a check's nonce: 16 lowercase hex digits, larger than any drawn before
// in this process.
func newNonce() string { return fmt.Sprintf("%016x", reserveNonces.Add(1)) }
