package engine

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/internal/lua"
)

// The scripts' function library is Redis's, not one engine's: every version of
// holdfast loads its own (internal/lua: its name is its code's hash), and Redis keeps
// each one, across restarts too, until it is deleted. Each library loaded makes every
// script call on that server slower, whatever version it is of: with eleven more
// loaded, a waiting-room join costs Redis a quarter to a third more (holdfast bench
// --only join). So every engine keeps a lease on its version's library
// (libraryLeaseKey, renewed every libraryCheckEvery, lasting libraryLease) and deletes
// from every master the holdfast libraries that no engine has leased for that long
// (lua.DeleteStale): those of versions that have stopped running. An engine of such a
// version that runs after all (one older than the leases, during a rolling upgrade)
// loads its library again at its next call (lua.Function.Run).
const (
	libraryCheckEvery = time.Minute
	libraryLease      = 10 * time.Minute
	libraryTimeout    = 5 * time.Second // one renewal and clean-up
)

// libraryLeaseKey is the lease on a library: outside every KeyPrefix, because a
// library serves every engine of its version on the server, whatever its prefix.
func libraryLeaseKey(name string) string { return "holdfast:library:" + name }

// keepLibrary renews the lease on this version's library and deletes, from every
// master, the holdfast libraries no engine holds a lease on. A failure is logged (as a
// warning the first time, then at debug level: a Redis whose ACL refuses FUNCTION
// DELETE refuses it every minute); without its own lease the engine deletes nothing.
func (e *Engine) keepLibrary(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, libraryTimeout)
	defer cancel()
	err := e.rdb.Set(ctx, libraryLeaseKey(lua.LibraryName()), "1", libraryLease).Err()
	if err == nil {
		err = lua.EachServer(ctx, e.rdb, func(ctx context.Context, c *redis.Client) error {
			deleted, err := lua.DeleteStale(ctx, c, e.libraryLeased)
			for _, name := range deleted {
				e.log.InfoContext(ctx, "deleted the function library of a holdfast version no engine has run for a while",
					"library", name, "server", c.Options().Addr, "unleased_for", libraryLease)
			}
			return err
		})
	}
	if err == nil || e.viewCtx.Err() != nil { // done, or the engine is closing
		return
	}
	log := e.log.DebugContext
	if e.libraryWarned.CompareAndSwap(false, true) {
		log = e.log.WarnContext
	}
	log(ctx, "keep the scripts' function library: old libraries stay loaded", "error", err)
}

// libraryLeased reports whether an engine holds a lease on the library name.
func (e *Engine) libraryLeased(ctx context.Context, name string) (bool, error) {
	n, err := e.rdb.Exists(ctx, libraryLeaseKey(name)).Result()
	return n > 0, err
}
