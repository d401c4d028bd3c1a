package lua

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/internal/testsvc"
)

// TestReleaseWhenFullAfterLibraryLost: Release is flagged allow-oom: it must run when
// Redis is full. A lost library is loaded again with FUNCTION LOAD, which Redis refuses
// when out of memory: Run then sends the script itself by EVAL, which Redis accepts.
func TestReleaseWhenFullAfterLibraryLost(t *testing.T) {
	srv := testsvc.StartRedis(t)
	rdb := redis.NewClient(testsvc.RedisOptions(t, "redis://"+srv.Addr()+"/0"))
	defer rdb.Close()
	ctx := t.Context()
	token := strings.Repeat("b", 32)
	keys := []string{"{s}:gen", "{s}:holder:", "{s}:hold:A1", "{s}:sold:0"}
	rdb.Set(ctx, "{s}:gen", 1, 0)
	res, err := Hold.Run(ctx, rdb, keys, "", token, 600000, 0, "1 1 0 -1 0 600000 100", "A1").Slice()
	if err != nil || res[0] != "OK" {
		t.Fatalf("hold: %v %v", res, err)
	}
	gen := res[1]
	// Redis full (noeviction) and the library lost (FUNCTION FLUSH by an operator, or a
	// replica promoted that was started before the library was loaded, ...).
	if err := rdb.FunctionFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	defer rdb.ConfigSet(ctx, "maxmemory", "0")
	// Control: the old way (EVAL of an allow-oom script) still runs when full.
	if err := rdb.Eval(ctx, "#!lua flags=allow-oom\nreturn redis.call('DEL', KEYS[1])", []string{"{s}:x"}).Err(); err != nil {
		t.Fatalf("control: an allow-oom EVAL when full: %v", err)
	}
	rel, err := Release.Run(ctx, rdb, keys, "", token, gen, 60000, "A1").Slice()
	if err != nil || len(rel) == 0 || rel[0] != "OK" {
		t.Fatalf("allow-oom release when Redis is full and lost the library: %v, %v", rel, err)
	}
}

// TestEveryFunctionIsAScriptToo: each function's EVAL form (Script, the way when the
// library cannot be loaded) compiles, and runs with its flags: verify writes nothing
// and answers on a show Redis does not have.
func TestEveryFunctionIsAScriptToo(t *testing.T) {
	srv := testsvc.StartRedis(t)
	rdb := redis.NewClient(testsvc.RedisOptions(t, "redis://"+srv.Addr()+"/0"))
	defer rdb.Close()
	for _, f := range functions() {
		if err := rdb.ScriptLoad(t.Context(), f.Script()).Err(); err != nil {
			t.Errorf("%s as a script: %v", f.script, err)
		}
	}
	keys := []string{"{v}:gen", "{v}:holder:", "{v}:hold:A1", "{v}:sold:0"}
	res, err := Verify.Eval(t.Context(), rdb, keys, "", strings.Repeat("c", 32), 1, "A1").Int64Slice()
	if err != nil || len(res) != 2 || res[0] != 0 {
		t.Fatalf("verify by EVAL: %v %v, want {0, 0}", res, err)
	}
}
