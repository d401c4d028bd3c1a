package lua

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/internal/testsvc"
)

// stmt is a top-level statement of common.lua: it starts at a line that begins with
// "local" and runs to the next line that begins with "local" or "--" (a function's body
// is indented, its closing "end" is not); names are what its first line declares.
type stmt struct {
	text  string
	names []string
}

func statements(common string) []stmt {
	var stmts []stmt
	for _, line := range strings.Split(common, "\n") {
		switch {
		case declared(line) != nil:
			stmts = append(stmts, stmt{text: line, names: declared(line)})
		case strings.HasPrefix(line, "--") || line == "" || len(stmts) == 0:
		default:
			stmts[len(stmts)-1].text += "\n" + line
		}
	}
	return stmts
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

var (
	luaWord    = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)
	luaComment = regexp.MustCompile(`--[^\n]*`)
	luaString  = regexp.MustCompile(`"(?:[^"\\\n]|\\.)*"`)
	// bound finds the names a statement binds itself: locals, parameters, loop variables.
	bound = regexp.MustCompile(`local\s+(?:function\s+)?([\w\s,]+)|function\s*[\w.:]*\s*\(([^)]*)\)|for\s+([\w\s,]+?)\s+(?:in|=)`)
	// assigned finds assignment statements: their targets.
	assigned = regexp.MustCompile(`(?m)(?:^|\bthen\b|\bdo\b|\belse\b|;)\s*([A-Za-z_][\w.]*(?:\[[^\]]*\])*(?:\s*,\s*[A-Za-z_][\w.]*(?:\[[^\]]*\])*)*)\s*=[^=]`)
)

// code is Lua text without its comments and string literals.
func code(s string) string {
	return luaString.ReplaceAllString(luaComment.ReplaceAllString(s, ""), `""`)
}

// A function of the library that names one of common's names declared after it reads
// a global (none exists in a function library: the call fails at run time).
func TestCommonNamesNothingBeforeItIsDeclared(t *testing.T) {
	stmts := statements(commonLua)
	if len(stmts) < 60 {
		t.Fatalf("found %d top-level statements in common.lua", len(stmts))
	}
	declaredAt := map[string]int{}
	for i, st := range stmts {
		for _, n := range st.names {
			declaredAt[n] = i
		}
	}
	for i, st := range stmts {
		text := code(st.text)
		own := map[string]bool{}
		for _, m := range bound.FindAllStringSubmatch(text, -1) {
			for _, w := range luaWord.FindAllString(m[1]+" "+m[2]+" "+m[3], -1) {
				own[w] = true
			}
		}
		for _, w := range luaWord.FindAllString(text, -1) {
			if at, ok := declaredAt[w]; ok && at > i && !own[w] {
				t.Errorf("common.lua: %s names %s, declared after it", st.names, w)
			}
		}
	}
}

// Every top-level local of common.lua that a function of the library assigns, or whose
// table's fields it assigns, is set anew by begin at the start of every call: a value
// left by one call is never seen by the next. WLF is the exception (wl_lib: functions
// only, built once).
func TestBeginSetsEveryCallState(t *testing.T) {
	stmts := statements(commonLua)
	top := map[string]bool{}
	var begin, member string
	for _, st := range stmts {
		if strings.HasPrefix(st.text, "local function begin(") {
			begin = code(st.text)
		}
		if strings.HasPrefix(st.text, "local function begin_member(") {
			member = code(st.text)
		}
		if !strings.HasPrefix(st.text, "local function ") {
			for _, n := range st.names {
				top[n] = true
			}
		}
	}
	if begin == "" {
		t.Fatal("common.lua has no begin")
	}
	if strings.Contains(begin, "begin_member(") {
		begin += "\n" + member // what begin calls it does
	}
	resets := map[string]bool{}
	for _, m := range assigned.FindAllStringSubmatch(begin, -1) {
		for _, target := range strings.Split(m[1], ",") {
			resets[strings.TrimSpace(target)] = true
		}
	}
	for _, want := range []string{"KEYS", "ARGV", "N", "BASE", "WL", "GROUP"} {
		if !resets[want] {
			t.Errorf("begin does not set %s", want)
		}
	}
	texts := map[string]string{"common": commonLua}
	for _, f := range functions() {
		texts[f.script] = f.body
	}
	for file, text := range texts {
		for _, line := range strings.Split(code(text), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "local ") {
				continue
			}
			for _, m := range assigned.FindAllStringSubmatch(line, -1) {
				for _, target := range strings.Split(m[1], ",") {
					name := luaWord.FindString(target)
					if top[name] && !resets[name] && name != "WLF" {
						t.Errorf("%s.lua assigns %s (%q), which begin does not set anew", file, strings.TrimSpace(target), strings.TrimSpace(line))
					}
				}
			}
		}
	}
}

func TestLibraryNameIsItsCodesHash(t *testing.T) {
	name := LibraryName()
	if !regexp.MustCompile(`^holdfast_[0-9a-f]{12}$`).MatchString(name) {
		t.Fatalf("library name %q", name)
	}
	if !strings.HasPrefix(LibraryCode(), "#!lua name="+name+"\n") {
		t.Fatalf("library code starts %q", LibraryCode()[:60])
	}
	if Hold.Name() != name+"_hold" || Wait.Name() != name+"_wl" {
		t.Fatalf("function names %q, %q", Hold.Name(), Wait.Name())
	}
	// Another body, another library: the name follows the code.
	saved := holdLua
	holdLua, Hold.body = saved+"\n", saved+"\n"
	other := build()
	holdLua, Hold.body = saved, saved
	if other.name == name || !strings.Contains(other.code, other.name+"_hold") || strings.Contains(other.code, name) {
		t.Fatalf("a changed body kept the name %s (or the old one inside)", other.name)
	}
}

// TestIsLibraryName: what DeleteStale may delete is a library of this version's name
// shape, whatever its hash, and nothing else.
func TestIsLibraryName(t *testing.T) {
	for name, want := range map[string]bool{
		LibraryName():             true,
		"holdfast_0123456789ab":   true,
		"holdfast_0123456789AB":   false,
		"holdfast_0123456789a":    false,
		"holdfast_0123456789abc":  false,
		"holdfast_state_test":     false,
		"holdfast_0123456789ab_x": false,
		"tickets_0123456789ab":    false,
		"":                        false,
	} {
		if got := IsLibraryName(name); got != want {
			t.Errorf("IsLibraryName(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestMissing(t *testing.T) {
	for err, want := range map[error]bool{
		nil:                                  false,
		errors.New("ERR Function not found"): true,
		errors.New("ERR Function not found"): true,
		errors.New("NOSCRIPT No matching script"): false,
		errors.New("HOLDFAST_BADARG key count"):   false,
		context.DeadlineExceeded:                  false,
	} {
		if got := Missing(err); got != want {
			t.Errorf("Missing(%v) = %v, want %v", err, got, want)
		}
	}
}

// The library loads; a second load of it is a success that changes nothing; FUNCTION
// LIST shows each function with its script's flags.
func TestLibraryLoadsWithEachScriptsFlags(t *testing.T) {
	srv := testsvc.StartRedis(t)
	rdb := redis.NewClient(testsvc.RedisOptions(t, "redis://"+srv.Addr()+"/0"))
	defer rdb.Close()
	ctx := t.Context()
	for range 2 {
		if err := Load(ctx, rdb); err != nil {
			t.Fatal(err)
		}
	}
	libs, err := rdb.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: LibraryName()}).Result()
	if err != nil || len(libs) != 1 {
		t.Fatalf("FUNCTION LIST: %v %v", libs, err)
	}
	flags := map[string][]string{}
	for _, f := range libs[0].Functions {
		flags[f.Name] = f.Flags
	}
	if len(flags) != len(functions()) {
		t.Errorf("%d functions listed, want %d", len(flags), len(functions()))
	}
	for _, f := range functions() {
		got, ok := flags[f.Name()]
		want := []string{}
		if f.flags != "" {
			want = []string{f.flags}
		}
		if !ok || !slices.Equal(append([]string{}, got...), want) {
			t.Errorf("%s: listed %v (%v), want flags %v", f.Name(), ok, got, want)
		}
	}
	for name, f := range map[string]*Function{"verify": Verify, "release": Release, "reserve": Reserve, "unreserve": Unreserve,
		"mark": Mark, "lower": Lower, "shrink": Shrink, "rest": Rest, "hold": Hold} {
		if f.script != name {
			t.Errorf("%s is the function of %s.lua", name, f.script)
		}
	}
}

// A call that finds its function missing (FUNCTION FLUSH, a restart without
// persistence) loads the library and runs.
func TestRunLoadsTheLibraryWhenRedisLostIt(t *testing.T) {
	srv := testsvc.StartRedis(t)
	rdb := redis.NewClient(testsvc.RedisOptions(t, "redis://"+srv.Addr()+"/0"))
	defer rdb.Close()
	ctx := t.Context()
	keys := []string{"{s}:gen", "{s}:holder:", "{s}:hold:A1", "{s}:sold:0"}
	args := []any{"", strings.Repeat("a", 32), 1, "A1"}
	for i := range 3 {
		if i == 1 {
			rdb.FunctionFlush(ctx)
		}
		res, err := Verify.Run(ctx, rdb, keys, args...).Slice()
		if err != nil || len(res) != 2 || res[0] != int64(0) {
			t.Fatalf("verify, call %d: %v %v", i, res, err)
		}
	}
	// A pipeline's call only calls: the caller loads (the engine: runScripts).
	rdb.FunctionFlush(ctx)
	pipe := rdb.Pipeline()
	cmd := Verify.Call(ctx, pipe, keys, args...)
	_, _ = pipe.Exec(ctx)
	if !Missing(cmd.Err()) {
		t.Fatalf("a pipelined call of a flushed library: %v", cmd.Err())
	}
}

// begin starts every call anew: a call that failed half-way, after it had set every
// piece of the call state, leaves nothing for the next. The library here is the real
// one with two functions of the test's: one that sets the state and fails, one that
// reports it.
func TestNoCallSeesAnotherCallsState(t *testing.T) {
	srv := testsvc.StartRedis(t)
	rdb := redis.NewClient(testsvc.RedisOptions(t, "redis://"+srv.Addr()+"/0"))
	defer rdb.Close()
	ctx := t.Context()
	probe := `
redis.register_function{function_name = "t_dirty", callback = function(keys, args)
begin(keys, args)
N, BASE = 7, "{x}:"
WL.on, WL.any, WL.more, WL.offers = true, true, true, 5
WL.dirty.c, WL.taken.S1 = true, true
WL.feeds[1] = {"h", "S1"}
group_begin()
error("half-way")
end}
redis.register_function{function_name = "t_state", callback = function(keys, args)
begin(keys, args)
return {N, BASE, tostring(WL.on), tostring(WL.any), tostring(WL.more), WL.offers, next(WL.dirty) or "", next(WL.taken) or "", #WL.feeds, #KEYS, #ARGV, tostring(GROUP)}
end}
`
	lib := strings.Replace(LibraryCode(), "name="+LibraryName(), "name=holdfast_state_test", 1)
	lib = strings.ReplaceAll(lib, LibraryName()+"_", "t_")
	if err := rdb.FunctionLoad(ctx, lib+probe).Err(); err != nil {
		t.Fatal(err)
	}
	want := []any{int64(0), "", "nil", "false", "false", int64(0), "", "", int64(0), int64(1), int64(0), "nil"}
	for i := range 3 {
		if err := rdb.FCall(ctx, "t_dirty", []string{"{x}:gen", "{x}:b"}, "a", "b").Err(); err == nil || !strings.Contains(err.Error(), "half-way") {
			t.Fatalf("t_dirty: %v", err)
		}
		got, err := rdb.FCall(ctx, "t_state", []string{"{y}:gen"}).Slice()
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("call %d after a failed one saw %v (%v), want %v", i, got, err, want)
		}
	}
}
