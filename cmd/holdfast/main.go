// Command holdfast serves the seat-reservation engine over HTTP, runs its migrations,
// simulates a sale opening (demo) and measures it (bench); env prints its environment
// variables.
//
//	holdfast serve   [--addr host:port] [flags]
//	holdfast migrate up|down|status
//	holdfast demo    [--url http://127.0.0.1:8080] [flags]
//	holdfast bench   [flags]
//	holdfast abuse   [flags]
//	holdfast resync  --show SHOW [--from-database]
//	holdfast events  [--after CURSOR] [--follow]
//	holdfast env
//	holdfast version
//
// Run "holdfast help" or "holdfast <command> -h" for the flags.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/redis/go-redis/v9"
)

func main() {
	// go-redis logs its connection-pool trouble on its own; the commands report failures
	// themselves, with what to do, so its lines would only come first and confuse.
	redis.SetLogger(quietRedis{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			if ee.msg != "" {
				fmt.Fprintln(os.Stderr, "holdfast:", ee.msg)
			}
			os.Exit(ee.code)
		}
		fmt.Fprintln(os.Stderr, "holdfast:", err)
		os.Exit(1)
	}
}

// quietRedis drops go-redis's internal log lines.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}
