package lua

import (
	"strings"
	"testing"
)

func TestPreludeKeepsWhatTheBodyNamesInOrder(t *testing.T) {
	common := `-- header

local function unused() return 1 end

-- b doubles.
local function b(x) return x * 2 end

local K, L = 3, 4

-- c uses b and K.
local function c(x)
    local y = b(x)

    return y + K
end
local function d() return unused() end`
	got := prelude(common, "return c(1)")
	for _, want := range []string{"-- b doubles.\nlocal function b(x)", "local K, L = 3, 4", "-- c uses b and K.\nlocal function c(x)\n    local y = b(x)\n\n    return y + K\nend"} {
		if !strings.Contains(got, want) {
			t.Errorf("prelude lacks %q:\n%s", want, got)
		}
	}
	for _, not := range []string{"unused", "function d"} {
		if strings.Contains(got, not) {
			t.Errorf("prelude keeps %q, which nothing names:\n%s", not, got)
		}
	}
	if strings.Index(got, "function b") > strings.Index(got, "function c") {
		t.Errorf("prelude changed common's order:\n%s", got)
	}
}

// Every name common.lua defines that a script's text names is defined by the script's
// prelude: a script never reads a global where it meant one of common's functions.
func TestEveryScriptHasWhatItNames(t *testing.T) {
	defined := map[string]bool{}
	for _, line := range strings.Split(commonLua, "\n") {
		for _, n := range declared(line) {
			defined[n] = true
		}
	}
	if len(defined) < 40 {
		t.Fatalf("found %d names in common.lua", len(defined))
	}
	for name, body := range map[string]string{"hold": holdLua, "extend": extendLua, "release": releaseLua, "verify": verifyLua,
		"reserve": reserveLua, "unreserve": unreserveLua, "regen": regenLua, "mark": markLua, "lower": lowerLua,
		"index": indexLua, "best": bestLua, "queue": queueLua, "counts": countsLua,
		"recount": recountLua} {
		p := prelude(commonLua, body)
		has := map[string]bool{}
		for _, line := range strings.Split(p, "\n") {
			for _, n := range declared(line) {
				has[n] = true
			}
		}
		for _, w := range luaWord.FindAllString(p+"\n"+body, -1) {
			if defined[w] && !has[w] {
				t.Errorf("%s.lua names %s, which its prelude does not define", name, w)
			}
		}
		if len(p) >= len(commonLua) {
			t.Errorf("%s.lua keeps all of common.lua (%d bytes)", name, len(p))
		}
	}
}
