// Command s3taskctl lets an operator see and repair an s3task bucket
// without reading S3 by hand: list and show tasks, watch one run, retry or
// cancel it, count what is waiting and why things failed, repair the marker
// index, purge old finished tasks, and check that a store enforces the
// conditional writes s3task depends on.
//
//	s3taskctl [flags] <command> [command flags] [arguments]
//
// It reaches the bucket with the same settings as examples/csvbatch: -bucket,
// -s3-endpoint, -s3-region, -s3-path-style and -prefix, or the environment
// variables S3TASKCTL_<FLAG> (and, as a fallback, CSVBATCH_<FLAG>), with
// credentials from the standard AWS configuration. Output is a table for
// people, or one JSON document per command with -json. Run
// "s3taskctl -h" for the commands and the exit codes scripts can rely on.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
