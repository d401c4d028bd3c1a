// Command holdfast serves the seat-reservation engine over HTTP, runs its migrations,
// simulates a sale opening (demo) and measures it (bench).
//
//	holdfast serve   [--addr host:port] [flags]
//	holdfast migrate up|down|status
//	holdfast demo    [--url http://127.0.0.1:8080] [flags]
//	holdfast bench   [flags]
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
)

func main() {
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
