package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestLostCommitAfterAFailoverGoesToTheSettler: a batch whose COMMIT reply is lost
// does not settle it on its own committer once the engine has found another server —
// neither when it had found it before (it hands the batch to the settler at once) nor
// when it finds it while the batch looks (the look-up is cut short): the settler settles
// every such batch on the new server, and the committer is free for new batches.
func TestLostCommitAfterAFailoverGoesToTheSettler(t *testing.T) {
	t.Parallel()
	lost := errors.New("the COMMIT's reply was lost")
	// serverOf is the server e's pool reaches: the one the COMMIT ran on.
	serverOf := func(t *testing.T, e *Engine) serverIdentity {
		conn, err := e.pool.Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		ran, err := e.backendOf(t.Context(), conn)
		if err != nil {
			t.Fatal(err)
		}
		return ran
	}
	t.Run("found before", func(t *testing.T) {
		t.Parallel()
		v := newEnv(t)
		ran := serverOf(t, v.e)
		next := ran
		next.timeline++
		if err := v.e.noteServer(nil, next); err != nil {
			t.Fatal(err)
		}
		_, err := v.e.resolveCommit(t.Context(), ran, witness{id: uuid.New()}, lost)
		if !errors.Is(err, errCommitUnknown) || !errors.Is(err, errFailedOver) || !errors.Is(err, ErrUnavailable) {
			t.Fatalf("resolveCommit after the engine found another server: %v, want ErrUnavailable, unknown, handed to the settler (errFailedOver)", err)
		}
	})
	t.Run("found while it looks", func(t *testing.T) {
		t.Parallel()
		v := newEnv(t)
		ran := serverOf(t, v.e)
		// Every connection is busy: the look-up waits for one (up to resolveTimeout).
		var held []*pgxpool.Conn
		for range v.e.pool.Config().MaxConns {
			c, err := v.e.pool.Acquire(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, c)
		}
		defer func() {
			for _, c := range held {
				c.Release()
			}
		}()
		done := make(chan error, 1)
		go func() {
			_, err := v.e.resolveCommit(context.Background(), ran, witness{id: uuid.New()}, lost)
			done <- err
		}()
		next := ran
		next.timeline++
		if err := v.e.noteServer(nil, next); err != nil {
			t.Fatal(err)
		}
		noted := time.Now()
		err := <-done
		t.Logf("resolveCommit answered %v after the engine found the new server: %v", time.Since(noted), err)
		if !errors.Is(err, errCommitUnknown) || !errors.Is(err, errFailedOver) {
			t.Fatalf("resolveCommit when the engine found another server while it looked: %v, want unknown, handed to the settler (errFailedOver)", err)
		}
	})
}

// TestFailoverEmptiesThePool: when the engine finds another server, the pool's idle
// connections are closed — one could reach the old primary, frozen or deposed, and the
// settlement would wait on it for its whole bound.
func TestFailoverEmptiesThePool(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	var conns []*pgxpool.Conn
	for range 3 {
		c, err := v.e.pool.Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	ran, err := v.e.backendOf(t.Context(), conns[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range conns {
		c.Release()
	}
	if idle := v.e.pool.Stat().IdleConns(); idle < 3 {
		t.Fatalf("%d idle connections before, want 3", idle)
	}
	next := ran
	next.timeline++
	if err := v.e.noteServer(nil, next); err != nil {
		t.Fatal(err)
	}
	if idle := v.e.pool.Stat().IdleConns(); idle != 0 {
		t.Fatalf("%d idle connections after the engine found another server, want 0", idle)
	}
}
