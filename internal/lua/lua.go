// Package lua holds holdfast's Redis scripts: each is its shebang line, then
// common.lua (the shared argument checks and the in-Redis ownership test), then its own
// body. The engine runs them; holdfast bench drives the hold script raw, without the
// engine, to measure the engine's overhead. The key and argument layout of every script
// is in common.lua and at the top of each script.
package lua

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The scripts. Script.Run sends EVALSHA and falls back to EVAL when Redis lost its
// script cache (SCRIPT FLUSH, restart).
var (
	//go:embed common.lua
	commonLua string
	//go:embed hold.lua
	holdLua string
	//go:embed extend.lua
	extendLua string
	//go:embed release.lua
	releaseLua string
	//go:embed verify.lua
	verifyLua string
	//go:embed reserve.lua
	reserveLua string
	//go:embed unreserve.lua
	unreserveLua string
	//go:embed regen.lua
	regenLua string
	//go:embed mark.lua
	markLua string
	//go:embed lower.lua
	lowerLua string
	//go:embed index.lua
	indexLua string
	//go:embed best.lua
	bestLua string
	//go:embed queue.lua
	queueLua string
	//go:embed counts.lua
	countsLua string

	Hold    = newScript("", holdLua)
	Extend  = newScript("", extendLua)
	Release = newScript(" flags=allow-oom", releaseLua) // only deletes: works when Redis is full
	Verify  = newScript(" flags=no-writes", verifyLua)
	// Reserve is a batch's check of a hold, which keeps the hold for the batch until it
	// decides; Unreserve gives it back when the batch did not commit it. Both only
	// rewrite hold keys in place: they run when Redis is full too.
	Reserve   = newScript(" flags=allow-oom", reserveLua)
	Unreserve = newScript(" flags=allow-oom", unreserveLua)
	Regen     = newScript("", regenLua)
	// Mark writes sold markers and tombstones. It runs when Redis is full too: a marker
	// is a few bytes and replaces a hold key, and a sold seat must look sold.
	Mark = newScript(" flags=allow-oom", markLua)
	// Lower sets sold markers back to what the database says where a failover lost
	// their bookings (compare and set). Like Mark, it runs when Redis is full.
	Lower = newScript(" flags=allow-oom", lowerLua)
	// Index builds a page of a show's best-available index; Best holds the best seats.
	Index = newScript("", indexLua)
	Best  = newScript("", bestLua)
	// Queue is a show's waiting room: the draw, admissions, joins and tickets. Counts
	// writes the seats booked per holder that the holder limit counts.
	Queue  = newScript("", queueLua)
	Counts = newScript("", countsLua)
)

// newScript builds a Redis 7 script. With a shebang and no no-writes flag, Redis refuses
// the whole script up front when it is out of memory, instead of failing it half-way.
func newScript(flags, body string) *redis.Script {
	return redis.NewScript("#!lua" + flags + "\n" + commonLua + "\n" + body)
}
