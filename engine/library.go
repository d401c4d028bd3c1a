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
// loaded, a waiting-room join costs Redis about a quarter more (holdfast bench --only
// join). So every engine keeps a lease on its version's library (libraryLeaseKey,
// renewed every libraryCheckEvery by libraryLoop, lasting libraryLease) and deletes
// from every master the holdfast libraries that no engine holds a lease on
// (lua.DeleteStale): those of versions that have stopped running. An engine of such a
// version that runs after all (one older than the leases, during a rolling upgrade, or
// one in the moment between its first call and its first lease) loads its library
// again at its next call (lua.Function.Run).
const (
	libraryCheckEvery = time.Minute
	libraryLease      = 10 * time.Minute
	libraryTimeout    = 5 * time.Second // one renewal and clean-up
)

// libraryLeaseKey is the lease on a library: outside every KeyPrefix, because a
// library serves every engine of its version on the server, whatever its prefix, and
// in database 0 (leaseClient), whatever database the engine's keys are in.
func libraryLeaseKey(name string) string { return "holdfast:library:" + name }

// libraryLoop keeps the lease on this version's library and deletes stale libraries
// (keepLibrary) at once and then every libraryCheckEvery, until ctx ends: on a ticker
// of its own, so that an engine whatever its other intervals, idle or busy, keeps its
// lease alive. Close waits for it (libraryDone).
func (e *Engine) libraryLoop(ctx context.Context) {
	defer close(e.libraryDone)
	t := time.NewTicker(libraryCheckEvery)
	defer t.Stop()
	for {
		e.keepLibrary(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// keepLibrary renews the lease on this version's library and deletes, from every
// master, the holdfast libraries no engine holds a lease on. A failure is logged (as a
// warning the first time, then at debug level: a Redis whose ACL refuses FUNCTION
// DELETE refuses it every minute); without its own lease the engine deletes nothing.
func (e *Engine) keepLibrary(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, libraryTimeout)
	defer cancel()
	leases, done := leaseClient(e.rdb)
	defer done()
	err := leases.Set(ctx, libraryLeaseKey(lua.LibraryName()), "1", libraryLease).Err()
	if err == nil {
		leased := func(ctx context.Context, name string) (bool, error) {
			n, err := leases.Exists(ctx, libraryLeaseKey(name)).Result()
			return n > 0, err
		}
		err = lua.EachServer(ctx, e.rdb, func(ctx context.Context, c *redis.Client) error {
			deleted, err := lua.DeleteStale(ctx, c, leased)
			for _, name := range deleted {
				e.log.InfoContext(ctx, "deleted the function library of a holdfast version no engine holds a lease on",
					"library", name, "server", c.Options().Addr, "lease", libraryLease)
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

// leaseClient is where the libraries' leases are read and written: database 0 of the
// server, since libraries are the server's and not a database's (a Cluster has only
// database 0). An engine whose keys are in another database gets a client of its own
// for them, closed by done.
func leaseClient(rdb redis.UniversalClient) (leases redis.UniversalClient, done func()) {
	c, ok := rdb.(*redis.Client)
	if !ok || c.Options().DB == 0 {
		return rdb, func() {}
	}
	o := *c.Options()
	o.DB, o.PoolSize, o.MinIdleConns, o.MaxIdleConns = 0, 1, 0, 1
	lc := redis.NewClient(&o)
	return lc, func() { _ = lc.Close() }
}
