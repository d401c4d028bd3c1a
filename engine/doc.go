// Package engine is holdfast's seat-reservation engine: fenced holds in Redis and
// confirmations in PostgreSQL.
//
// A customer holds seats for a few minutes while paying. The hold lives in Redis as one
// key per seat, written all-or-nothing by one Lua script with SET NX semantics and a TTL
// that Redis owns: holds expire by themselves. Each hold carries a generation from a
// per-show Redis INCR counter, handed out in the same script, and a 128-bit random token
// that only its owner knows.
//
// [Engine.Confirm] turns a hold into a booking in one PostgreSQL transaction. The
// transaction advances each seat's fence only if the hold's generation is strictly
// larger than every generation the database has accepted for that seat, then claims the
// seats under a (show, seat) primary key. Inside the transaction, once the seats' fences
// are locked and before anything is written, the hold is checked in Redis and reserved
// until the transaction has decided (a hold whose ExpiresAt does not promise time enough
// for the wait is checked once before it queues too). So an owner whose hold expired
// while it was paused cannot book: its confirmation fails with [ErrHoldLost] or
// [ErrStaleGeneration], and the seat's unique claim refuses a second booking whatever
// Redis says. A hold makes at most one booking, ever ([HoldSpentError]).
//
// After COMMIT the booked seats get a sold marker in Redis, so new holds on them are
// refused at once. The marker write is recorded in PostgreSQL by the booking's own
// transaction (a cancellation's likewise) and, when it fails, made later by the
// background loop that every engine runs ([Config.MarkerRepairInterval]); call
// [Engine.Close] to stop it. Markers only ever move forward, so late, repeated or
// reordered writes, and [Engine.Resync] while a show is on sale, are safe.
//
// A show's [SaleRules] add a limit of seats per holder across orders and a waiting room
// ([Engine.SetSaleRules], [Engine.Join], [Engine.Ticket]); both are checked inside the
// hold scripts, so no hold goes around them, and the limit again by PostgreSQL at
// confirmation. They mean something only when holder ids are not made up by callers.
//
// Errors are sentinels matched with [errors.Is]; [SeatsUnavailableError] and
// [InvalidArgumentError] carry details for [errors.As]. A Redis or PostgreSQL failure is
// always [ErrUnavailable], never "seat taken" and never success.
//
// The Redis client must be created with ContextTimeoutEnabled, so that go-redis honours
// context deadlines ([New] refuses one without); the engine refuses to work against a
// Redis whose maxmemory-policy could evict holds (anything but noeviction).
package engine
