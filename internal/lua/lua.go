// Package lua holds holdfast's Redis scripts as one Redis function library: common.lua
// (the shared argument checks and the in-Redis ownership test) once, then every other
// .lua file of this directory as a function of its own, named after the file. Redis
// runs the library's top level once, when it loads the library (FUNCTION LOAD), and
// each FCALL runs only its function's body. The engine runs them; holdfast bench drives
// the hold function raw, without the engine, to measure the engine's overhead. The key
// and argument layout of every script is in common.lua and at the top of each script.
package lua

import (
	"context"
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"fmt"
	"path"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

//go:embed *.lua
var files embed.FS

// The scripts, one function each. Script.Run sends FCALL, and loads the library and
// calls once more when Redis lost it (FUNCTION FLUSH, a restart, a replica promoted
// that never had it).
var (
	Hold    = function("hold")
	Extend  = function("extend")
	Release = function("release") // deletes, and leaves one small tombstone: works when Redis is full
	Verify  = function("verify")
	// Reserve is a batch's check of a hold, which keeps the hold for the batch until it
	// decides; Unreserve gives it back when the batch did not commit it. Both only
	// rewrite hold keys in place: they run when Redis is full too.
	Reserve   = function("reserve")
	Unreserve = function("unreserve")
	Regen     = function("regen")
	// Mark writes sold markers and tombstones. It runs when Redis is full too: a marker
	// is a few bytes and replaces a hold key, and a sold seat must look sold.
	Mark = function("mark")
	// Lower sets sold markers back to what the database says where a failover lost
	// their bookings (compare and set). Like Mark, it runs when Redis is full.
	Lower = function("lower")
	// Index builds a page of a show's best-available index; Best holds the best seats.
	Index = function("index")
	Best  = function("best")
	// Queue is a show's waiting room: the draw, admissions, joins and tickets. Counts
	// moves the seats booked per holder that the holder limit counts forward to the
	// database's; Recount sets them to it, for reconciliation (compare and set).
	Queue   = function("queue")
	Counts  = function("counts")
	Recount = function("recount")
	// Close closes a show in Redis for DeleteShow, seals it once deleted, or opens it
	// again when the delete was refused.
	Close = function("close")
	// Areas gives Redis a show's areas (capacities) for a rebuild or a new show.
	Areas = function("areas")
	// Shrink gives back part of a hold and keeps the rest. It only deletes and renames
	// hold keys, so it runs when Redis is full too, as Release does.
	Shrink = function("shrink")
	// Reclaim gives a holder's live holds of a show fresh tokens and generations.
	Reclaim = function("reclaim")
	// Rest gives back what a partial confirmation did not book, after its commit. Like
	// Release it only deletes hold keys, so it runs when Redis is full too.
	Rest = function("rest")
	// Transfer moves a hold to another holder under a new token and generation.
	Transfer = function("transfer")
)

// library is the library's code, as FUNCTION LOAD takes it, prefix what its name and
// every function's name start with, and names the scripts' names (their files').
var library, prefix, names = build(files)

// build makes the library of every .lua file in fsys: common.lua first, at the top
// level, then each other file as the body of a function named prefix + the file's name,
// with the Redis flags its "-- flags:" line names. The library's name and prefix carry a
// hash of the code, so that two versions of holdfast sharing a Redis each call their
// own functions, as they each ran their own scripts by SHA before.
func build(fsys embed.FS) (code, prefix string, names map[string]bool) {
	entries, err := fsys.ReadDir(".")
	if err != nil {
		panic(err)
	}
	common := read(fsys, "common.lua")
	names = map[string]bool{}
	var parts []string
	for _, e := range entries {
		name := strings.TrimSuffix(e.Name(), ".lua")
		if name == "common" || path.Ext(e.Name()) != ".lua" {
			continue
		}
		body := read(fsys, e.Name())
		names[name] = true
		parts = append(parts, fmt.Sprintf("redis.register_function{function_name = PREFIX .. %q, flags = {%s},\ncallback = function(keys, args) begin(keys, args)\n%s\nend}",
			name, flagList(body), body))
	}
	code = common + "\n" + strings.Join(parts, "\n")
	sum := sha1.Sum([]byte(code))
	prefix = "holdfast_" + hex.EncodeToString(sum[:8]) + "_"
	return "#!lua name=" + strings.TrimSuffix(prefix, "_") + "\nlocal PREFIX = \"" + prefix + "\"\n" + code, prefix, names
}

func read(fsys embed.FS, name string) string {
	b, err := fsys.ReadFile(name)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// flagsLine is a script's line naming its Redis flags, e.g. "-- flags: allow-oom".
// Without one, a function has none: Redis refuses it up front when it is out of memory,
// instead of failing it half-way.
var flagsLine = regexp.MustCompile(`(?m)^-- flags: ([a-z, -]+)$`)

// flagList is body's flags as a Lua list's items.
func flagList(body string) string {
	m := flagsLine.FindStringSubmatch(body)
	if m == nil {
		return ""
	}
	var quoted []string
	for _, f := range strings.Split(m[1], ",") {
		quoted = append(quoted, fmt.Sprintf("%q", strings.TrimSpace(f)))
	}
	return strings.Join(quoted, ", ")
}

// Library is the library's code, for FUNCTION LOAD.
func Library() string { return library }

// Script is one function of the library.
type Script struct{ name string }

// function is the library's function made of name.lua; it panics when there is none.
func function(name string) *Script {
	if !names[name] {
		panic("lua: no " + name + ".lua")
	}
	return &Script{name: prefix + name}
}

// Name is the function's name in Redis, what FCALL names.
func (s *Script) Name() string { return s.name }

// Caller sends FCALL: a go-redis client, pipeline or autopipeliner, or a wrapper of one.
// A wrapper that has a Client() redis.UniversalClient method has the library loaded
// through that client (on every master of a Redis Cluster).
type Caller interface {
	FCall(ctx context.Context, function string, keys []string, args ...any) *redis.Cmd
}

// FCall calls the function once, as it is: for a pipeline, whose replies come later.
func (s *Script) FCall(ctx context.Context, c Caller, keys []string, args ...any) *redis.Cmd {
	return c.FCall(ctx, s.name, keys, args...)
}

// Run calls the function, and when Redis does not have it (Missing) loads the library
// and calls once more.
func (s *Script) Run(ctx context.Context, c Caller, keys []string, args ...any) *redis.Cmd {
	before := loads.Load()
	cmd := s.FCall(ctx, c, keys, args...)
	if !Missing(cmd.Err()) {
		return cmd
	}
	if err := reload(ctx, c, before); err != nil {
		failed := redis.NewCmd(ctx)
		failed.SetErr(fmt.Errorf("loading the script library: %w", err))
		return failed
	}
	return s.FCall(ctx, c, keys, args...)
}

// Missing reports whether err is Redis's answer to a call of a function it does not have.
func Missing(err error) bool { return redis.HasErrorPrefix(err, "Function not found") }

// Load loads the library (FUNCTION LOAD REPLACE) where c's calls go: on every master of
// a Redis Cluster or every shard of a Ring, on c's client for a wrapper with a Client
// method, else through c. Loading again what Redis has already is harmless.
func Load(ctx context.Context, c any) error {
	load := func(ctx context.Context, n *redis.Client) error { return n.FunctionLoadReplace(ctx, library).Err() }
	switch c := c.(type) {
	case interface{ Client() redis.UniversalClient }:
		return Load(ctx, c.Client())
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, load)
	case *redis.Ring:
		return c.ForEachShard(ctx, load)
	case interface {
		FunctionLoadReplace(ctx context.Context, code string) *redis.StringCmd
	}:
		return c.FunctionLoadReplace(ctx, library).Err()
	}
	return fmt.Errorf("lua: cannot load functions through %T", c)
}

// loads counts the libraries this process loaded, on any client; loaded is, for each
// client loaded through, a lock and the count at its last load.
var (
	loads  atomic.Uint64
	loaded sync.Map // loader -> *loadState
)

type loadState struct {
	mu   sync.Mutex
	last uint64
}

// reload loads the library for c unless it was loaded through the same client since
// before (loads when the failed call was sent): when many calls find the library gone
// at once, one of them loads it and the others call again.
func reload(ctx context.Context, c Caller, before uint64) error {
	var key any = c
	if w, ok := c.(interface{ Client() redis.UniversalClient }); ok {
		key = w.Client()
	}
	v, _ := loaded.LoadOrStore(key, &loadState{})
	st := v.(*loadState)
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.last > before {
		return nil
	}
	if err := Load(ctx, key); err != nil {
		return err
	}
	st.last = loads.Add(1)
	return nil
}
