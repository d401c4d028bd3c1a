package main

import (
	"context"
	"io"
)

func runBench(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return usageErr("bench is not built yet")
}
