// Package lua holds holdfast's Redis scripts as one Redis Functions library: common.lua
// (the shared argument checks and the in-Redis ownership test) is its top level, and
// each script's body is one of its functions (hold, extend, ...), registered with the
// script's flags; group, several calls of one script in one call, runs that script's
// body for each. Redis runs the top level once, when the library is loaded (FUNCTION
// LOAD), not at every call as it runs an EVAL script's: each call (FCALL) runs its
// script's body alone, after begin (common.lua) has set its keys, its arguments and the
// per-call state anew.
//
// The library's name, and each function's, carry a hash of its code
// (holdfast_<12 hex digits>, holdfast_<12 hex digits>_hold), so that the libraries of
// two versions of holdfast live side by side in one Redis during a rolling deploy
// (DeleteStale deletes those of versions no engine runs any more). The
// library must be on the server a call goes to: the engine loads it on every master
// with its eviction-policy check (its first Redis call, then once a minute), and
// [Function.Run] (the engine's pipelines likewise) loads it, on every master of a
// Cluster, and calls again once when Redis answers that the function is not there (a
// restart without persistence, FUNCTION FLUSH, a failover to a replica that lacked it).
// holdfast bench drives the hold function raw, without the engine, to measure the
// engine's overhead. The key and argument layout of every script is in common.lua and
// at the top of each script.
package lua

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// The scripts, each a function of the library.
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
	//go:embed group.lua
	groupLua string

	Hold    = newFunction("hold", "", holdLua)
	Extend  = newFunction("extend", "", extendLua)
	Release = newFunction("release", "allow-oom", releaseLua) // deletes, and leaves one small tombstone: works when Redis is full
	Verify  = newFunction("verify", "no-writes", verifyLua)
	// Reserve is a batch's check of a hold, which keeps the hold for the batch until it
	// decides; Unreserve gives it back when the batch did not commit it. Both only
	// rewrite hold keys in place: they run when Redis is full too.
	Reserve   = newFunction("reserve", "allow-oom", reserveLua)
	Unreserve = newFunction("unreserve", "allow-oom", unreserveLua)
	Regen     = newFunction("regen", "", regenLua)
	// Mark writes sold markers and tombstones. It runs when Redis is full too: a marker
	// is a few bytes and replaces a hold key, and a sold seat must look sold.
	Mark = newFunction("mark", "allow-oom", markLua)
	// Lower sets sold markers back to what the database says where a failover lost
	// their bookings (compare and set). Like Mark, it runs when Redis is full.
	Lower = newFunction("lower", "allow-oom", lowerLua)
	// Index builds a page of a show's best-available index; Best holds the best seats.
	Index = newFunction("index", "", indexLua)
	Best  = newFunction("best", "", bestLua)
	// Queue is a show's waiting room: the draw, admissions, joins and tickets. Counts
	// moves the seats booked per holder that the holder limit counts forward to the
	// database's; Recount sets them to it, for reconciliation (compare and set).
	Queue   = newFunction("queue", "", queueLua)
	Counts  = newFunction("counts", "", countsLua)
	Recount = newFunction("recount", "", recountLua)
	// Close closes a show in Redis for DeleteShow, seals it once deleted, or opens it
	// again when the delete was refused.
	Close = newFunction("close", "", closeLua)
	// Areas gives Redis a show's areas (capacities) for a rebuild or a new show.
	Areas = newFunction("areas", "", areasLua)
	// Shrink gives back part of a hold and keeps the rest. It only deletes and renames
	// hold keys, so it runs when Redis is full too, as Release does.
	Shrink = newFunction("shrink", "allow-oom", shrinkLua)
	// Reclaim gives a holder's live holds of a show fresh tokens and generations.
	Reclaim = newFunction("reclaim", "", reclaimLua)
	// Rest gives back what a partial confirmation did not book, after its commit. Like
	// Release it only deletes hold keys, so it runs when Redis is full too.
	Rest = newFunction("rest", "allow-oom", restLua)
	// Transfer moves a hold to another holder under a new token and generation.
	Transfer = newFunction("transfer", "", transferLua)
	// Wait is a show's waitlists: a join, an entry's read, the engine's sweep.
	Wait = newFunction("wl", "", wlLua)
	// Group is several calls of Hold on one show in one call, each the script's own
	// (GroupArgs).
	Group = newFunction("group", "", groupLua, Hold)
)

// Function is one function of the library: a script.
type Function struct {
	script string // its file's name without .lua, the end of the function's name
	flags  string // its Redis flags: "", "allow-oom" or "no-writes"
	body   string
	uses   []*Function // the functions whose bodies it calls (BODY.<script>)
}

func newFunction(script, flags, body string, uses ...*Function) *Function {
	return &Function{script: script, flags: flags, body: body, uses: uses}
}

// define is the Lua that defines the function's body as BODY.<script>.
func (f *Function) define() string {
	return fmt.Sprintf("\n-- %s.lua\nBODY.%s = function()\n%s\nend\n", f.script, f.script, f.body)
}

// functions is every function of the library, in the order it registers them.
func functions() []*Function {
	return []*Function{Hold, Extend, Release, Verify, Reserve, Unreserve, Regen, Mark, Lower, Index, Best,
		Queue, Counts, Recount, Close, Areas, Shrink, Reclaim, Rest, Transfer, Wait, Group}
}

// ScriptName is the function's script: its file's name without .lua.
func (f *Function) ScriptName() string { return f.script }

// GroupArgs lays out the arguments of a Group call of f: each member's keys and
// arguments (f's), one member's after another's.
func GroupArgs(f *Function, keys [][]string, args [][]any) ([]string, []any) {
	var ks []string
	out := []any{f.script, len(keys)}
	for i := range keys {
		ks = append(ks, keys[i]...)
		out = append(append(out, len(keys[i]), len(args[i])), args[i]...)
	}
	return ks, out
}

// Name is the function's name in Redis: the library's, "_", the script's.
func (f *Function) Name() string { return library().name + "_" + f.script }

// Caller runs functions: a go-redis client (plain, failover or cluster), a pipeline, an
// autopipeliner, or a wrapper of one.
type Caller interface {
	FCall(ctx context.Context, function string, keys []string, args ...any) *redis.Cmd
}

// Loader is a Caller that loads the library itself, where its calls go (Load): a
// wrapper of a client, which knows the client.
type Loader interface {
	LoadLibrary(ctx context.Context) error
}

// Call sends FCALL of the function to c, and nothing else: in a pipeline, a reply that
// the function is not there (Missing) is the caller's to act on.
func (f *Function) Call(ctx context.Context, c Caller, keys []string, args ...any) *redis.Cmd {
	return c.FCall(ctx, f.Name(), keys, args...)
}

// Run calls the function on c; when Redis answers that it is not there (Missing), it
// loads the library where c calls (Load) and calls once more, or, when Redis refuses
// the load (FUNCTION LOAD is refused while Redis is out of memory, where an allow-oom
// script must still run), sends the script itself by EVAL (Eval). c must not be a
// pipeline (its replies come at Exec: use Call).
func (f *Function) Run(ctx context.Context, c Caller, keys []string, args ...any) *redis.Cmd {
	cmd := f.Call(ctx, c, keys, args...)
	if Missing(cmd.Err()) {
		if Load(ctx, c) == nil {
			return f.Call(ctx, c, keys, args...)
		}
		if e, ok := c.(Evaler); ok {
			return f.Eval(ctx, e, keys, args...)
		}
	}
	return cmd
}

// Evaler sends EVAL: a go-redis client, or a wrapper of one.
type Evaler interface {
	Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd
}

// Eval sends the function's script by EVAL, as a script of its own (Script): the way
// to run it where the library cannot be loaded. It costs common.lua's top level at every
// call, and Redis keeps it in its script cache.
func (f *Function) Eval(ctx context.Context, c Evaler, keys []string, args ...any) *redis.Cmd {
	return c.Eval(ctx, f.Script(), keys, args...)
}

// Script is the function as an EVAL script: its flags in the shebang, then common.lua
// and its body, begun with the script's KEYS and ARGV.
func (f *Function) Script() string {
	shebang := "#!lua"
	if f.flags != "" {
		shebang += " flags=" + f.flags
	}
	var b strings.Builder
	b.WriteString(shebang + "\nlocal CALL_KEYS, CALL_ARGV = KEYS, ARGV\n" + commonLua + "\nlocal BODY = {}\n")
	for _, u := range f.uses {
		b.WriteString(u.define())
	}
	b.WriteString("\nbegin(CALL_KEYS, CALL_ARGV)\n" + f.body)
	return b.String()
}

// Missing reports whether err is Redis's answer to a call of a function it does not
// have ("ERR Function not found"): the call did not run, and may be made again once the
// library is loaded.
func Missing(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.HasPrefix(msg, "ERR ") && strings.Contains(strings.ToLower(msg), "function not found")
}

// Load loads the library where c's calls go: on every master of a Redis Cluster
// (ForEachMaster) and every shard of a Ring, on the server of a plain or failover
// client, through a Loader's own LoadLibrary. A library of this name already there is
// this very code (its name is the code's hash): Load leaves it and succeeds. A pipeline
// or an autopipeliner of a Cluster would load it on one node only: give Load the client.
func Load(ctx context.Context, c any) error {
	each := func(ctx context.Context, n *redis.Client) error { return LoadOn(ctx, n) }
	switch x := c.(type) {
	case Loader:
		return x.LoadLibrary(ctx)
	case *redis.ClusterClient, *redis.Ring:
		return EachServer(ctx, x.(redis.UniversalClient), each)
	case functionLoader:
		return LoadOn(ctx, x)
	}
	return fmt.Errorf("lua: cannot load the function library through a %T", c)
}

// functionLoader sends FUNCTION LOAD and FUNCTION LIST.
type functionLoader interface {
	FunctionLoad(ctx context.Context, code string) *redis.StringCmd
	FunctionList(ctx context.Context, q redis.FunctionListQuery) *redis.FunctionListCmd
}

// LoadOn loads the library on the one server c talks to, unless it is there. A Redis
// out of memory refuses FUNCTION LOAD even of a library it has: one it has is there all
// the same.
func LoadOn(ctx context.Context, c functionLoader) error {
	name := library().name
	err := c.FunctionLoad(ctx, library().code).Err()
	if err == nil || strings.HasPrefix(err.Error(), "ERR Library ") && strings.Contains(err.Error(), "already exists") {
		return nil
	}
	if libs, lerr := c.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: name}).Result(); lerr == nil &&
		slices.ContainsFunc(libs, func(l redis.Library) bool { return l.Name == name }) {
		return nil
	}
	return fmt.Errorf("load the function library %s: %w", name, err)
}

// LibraryName is the library's name in Redis (FUNCTION LIST, FUNCTION DELETE).
func LibraryName() string { return library().name }

// LibraryCode is the library as FUNCTION LOAD is given it.
func LibraryCode() string { return library().code }

// lib is the library: its name and code.
type lib struct{ name, code string }

var library = sync.OnceValue(build)

// fnPrefix stands for the library's name and "_" in the functions' names until the
// library is hashed.
const fnPrefix = "@holdfast_fn@"

// build makes the library: common.lua, then each script's body as BODY.<script>, which
// its function's callback calls once it has begun the call (common.lua: begin), and
// which a group function calls for each of its members (group.lua). The name is the
// hash of the code with the names left out.
func build() lib {
	var b strings.Builder
	b.WriteString(commonLua + "\nlocal BODY = {}\n")
	for _, f := range functions() {
		flags := ""
		if f.flags != "" {
			flags = fmt.Sprintf("%q", f.flags)
		}
		b.WriteString(f.define())
		fmt.Fprintf(&b, "redis.register_function{function_name = %q, flags = {%s}, callback = function(keys, args)\nbegin(keys, args)\nreturn BODY.%s()\nend}\n",
			fnPrefix+f.script, flags, f.script)
	}
	sum := sha1.Sum([]byte(b.String()))
	name := "holdfast_" + hex.EncodeToString(sum[:6])
	return lib{name: name, code: "#!lua name=" + name + "\n" + strings.ReplaceAll(b.String(), fnPrefix, name+"_")}
}

// IsLibraryName reports whether name is the name of a holdfast library, of this
// version or another (holdfast_<12 hex digits>).
func IsLibraryName(name string) bool {
	hexPart, ok := strings.CutPrefix(name, "holdfast_")
	if !ok || len(hexPart) != 12 {
		return false
	}
	_, err := hex.DecodeString(hexPart)
	return err == nil && strings.ToLower(hexPart) == hexPart
}

// libraryAdmin lists and deletes a server's function libraries.
type libraryAdmin interface {
	FunctionList(ctx context.Context, q redis.FunctionListQuery) *redis.FunctionListCmd
	FunctionDelete(ctx context.Context, libName string) *redis.StringCmd
}

// DeleteStale deletes from the one server c talks to every holdfast library of
// another version (IsLibraryName, not LibraryName) that inUse says no engine uses, and
// returns the names it deleted. Every library loaded costs each script call on that
// server something, and Redis keeps them across restarts; one deleted while an engine
// of its version still runs is loaded again by its next call (Function.Run).
// Libraries of other names are left alone.
func DeleteStale(ctx context.Context, c libraryAdmin, inUse func(ctx context.Context, name string) (bool, error)) ([]string, error) {
	libs, err := c.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: "holdfast_*"}).Result()
	if err != nil {
		return nil, fmt.Errorf("list the function libraries: %w", err)
	}
	var deleted []string
	for _, l := range libs {
		if l.Name == LibraryName() || !IsLibraryName(l.Name) {
			continue
		}
		used, err := inUse(ctx, l.Name)
		if err != nil {
			return deleted, err
		}
		if used {
			continue
		}
		// "Library not found": another engine's clean-up deleted it first.
		if err := c.FunctionDelete(ctx, l.Name).Err(); err != nil && !strings.Contains(err.Error(), "not found") {
			return deleted, fmt.Errorf("delete the function library %s: %w", l.Name, err)
		}
		deleted = append(deleted, l.Name)
	}
	return deleted, nil
}

// EachServer calls fn with a client of each server c's calls go to: every master of a
// Cluster, every shard of a Ring, the one server of a plain or failover client. Any
// other client is an error.
func EachServer(ctx context.Context, c redis.UniversalClient, fn func(ctx context.Context, c *redis.Client) error) error {
	switch x := c.(type) {
	case *redis.ClusterClient:
		return x.ForEachMaster(ctx, fn)
	case *redis.Ring:
		return x.ForEachShard(ctx, fn)
	case *redis.Client:
		return fn(ctx, x)
	}
	return fmt.Errorf("lua: cannot reach the servers of a %T", c)
}
