// Package lua holds holdfast's Redis scripts: each is its shebang line, then
// common.lua (the shared argument checks and the in-Redis ownership test), then its own
// body. The engine runs them; holdfast bench drives the hold script raw, without the
// engine, to measure the engine's overhead. The key and argument layout of every script
// is in common.lua and at the top of each script.
package lua

import (
	_ "embed"
	"regexp"
	"slices"
	"strings"

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
	//go:embed recount.lua
	recountLua string
	//go:embed close.lua
	closeLua string
	//go:embed areas.lua
	areasLua string
	//go:embed shrink.lua
	shrinkLua string
	//go:embed reclaim.lua
	reclaimLua string
	//go:embed rest.lua
	restLua string
	//go:embed transfer.lua
	transferLua string
	//go:embed wl.lua
	wlLua string

	Hold    = newScript("", holdLua)
	Extend  = newScript("", extendLua)
	Release = newScript(" flags=allow-oom", releaseLua) // deletes, and leaves one small tombstone: works when Redis is full
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
	// moves the seats booked per holder that the holder limit counts forward to the
	// database's; Recount sets them to it, for reconciliation (compare and set).
	Queue   = newScript("", queueLua)
	Counts  = newScript("", countsLua)
	Recount = newScript("", recountLua)
	// Close closes a show in Redis for DeleteShow, seals it once deleted, or opens it
	// again when the delete was refused.
	Close = newScript("", closeLua)
	// Areas gives Redis a show's areas (capacities) for a rebuild or a new show.
	Areas = newScript("", areasLua)
	// Shrink gives back part of a hold and keeps the rest. It only deletes and renames
	// hold keys, so it runs when Redis is full too, as Release does.
	Shrink = newScript(" flags=allow-oom", shrinkLua)
	// Reclaim gives a holder's live holds of a show fresh tokens and generations.
	Reclaim = newScript("", reclaimLua)
	// Rest gives back what a partial confirmation did not book, after its commit. Like
	// Release it only deletes hold keys, so it runs when Redis is full too.
	Rest = newScript(" flags=allow-oom", restLua)
	// Transfer moves a hold to another holder under a new token and generation.
	Transfer = newScript("", transferLua)
	// Wait is a show's waitlists: a join, an entry's read, the engine's sweep.
	Wait = newScript("", wlLua)
)

// newScript builds a Redis 7 script. With a shebang and no no-writes flag, Redis refuses
// the whole script up front when it is out of memory, instead of failing it half-way.
func newScript(flags, body string) *redis.Script {
	return redis.NewScript("#!lua" + flags + "\n" + prelude(commonLua, body) + "\n" + body)
}

// prelude is the part of common that body uses: the top-level statements of common that
// body names, and those they name, in common's order, each with the comment above it.
// Redis runs a script's top level at every call, so each function defined there costs a
// closure per call whether the script calls it or not (common.lua whole: about 9 µs a
// call on the machines of docs/BENCHMARKS.md, as much as a small script's own work).
//
// A top-level statement of common starts at a line that begins with "local" and runs to
// the next line that begins with "local" or "--" (its body is indented, its closing "end"
// is not); it defines the names that declared finds in its first line.
func prelude(common, body string) string {
	type stmt struct {
		text  string
		names []string
	}
	var stmts []stmt
	var comment []string
	for _, line := range strings.Split(common, "\n") {
		switch {
		case declared(line) != nil:
			stmts = append(stmts, stmt{text: strings.Join(append(comment, line), "\n"), names: declared(line)})
			comment = nil
		case strings.HasPrefix(line, "--") || len(stmts) == 0 || (line == "" && len(comment) > 0):
			comment = append(comment, line)
		default:
			last := &stmts[len(stmts)-1]
			last.text += "\n" + line
		}
	}
	// What body names, then what the statements it keeps name, until nothing is added.
	named := map[string]bool{}
	for _, w := range luaWord.FindAllString(body, -1) {
		named[w] = true
	}
	keep := make([]bool, len(stmts))
	for added := true; added; {
		added = false
		for i, st := range stmts {
			if keep[i] || !slices.ContainsFunc(st.names, func(n string) bool { return named[n] }) {
				continue
			}
			keep[i], added = true, true
			for _, w := range luaWord.FindAllString(st.text, -1) {
				named[w] = true
			}
		}
	}
	var out []string
	for i, st := range stmts {
		if keep[i] {
			out = append(out, st.text)
		}
	}
	return strings.Join(out, "\n")
}

// declared is the names that a top-level line of common.lua defines ("local a, b = …",
// "local function f(…)"), or nil for another line.
func declared(line string) []string {
	if !strings.HasPrefix(line, "local ") {
		return nil
	}
	decl := strings.TrimPrefix(strings.TrimPrefix(line, "local "), "function ")
	var names []string
	for _, n := range strings.Split(decl[:strings.IndexAny(decl+"=", "=(")], ",") {
		names = append(names, strings.TrimSpace(n))
	}
	return names
}

// luaWord is a Lua name.
var luaWord = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)
