package engine

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// Every script is its shebang line, then common.lua (shared checks and the ownership
// test), then its own body. Script.Run sends EVALSHA and falls back to EVAL when Redis
// lost its script cache (SCRIPT FLUSH, restart).
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
	//go:embed regen.lua
	regenLua string
	//go:embed sold.lua
	soldLua string
	//go:embed unsold.lua
	unsoldLua string
	//go:embed resync.lua
	resyncLua string

	holdScript    = newScript("", holdLua)
	extendScript  = newScript("", extendLua)
	releaseScript = newScript("", releaseLua)
	verifyScript  = newScript(" flags=no-writes", verifyLua)
	regenScript   = newScript("", regenLua)
	soldScript    = newScript("", soldLua)
	unsoldScript  = newScript("", unsoldLua)
	resyncScript  = newScript("", resyncLua)
)

// newScript builds a Redis 7 script. With a shebang and no no-writes flag, Redis refuses
// the whole script up front when it is out of memory, instead of failing it half-way.
func newScript(flags, body string) *redis.Script {
	return redis.NewScript("#!lua" + flags + "\n" + commonLua + "\n" + body)
}
