// Command csvbatch is a CSV batch service built on s3task: a control API
// (JSON over HTTP), an operator page, and a worker that runs two task types,
// all in one program. It is the program to run first, and the one to copy
// into a host application.
//
//	go run ./examples/csvbatch
//
// starts on 127.0.0.1:8080 with an embedded S3 (gofakes3) whose objects are
// kept in ./csvbatch-data, so they survive a restart, and prints where the
// page and the API are. With -bucket it runs against a real S3 or an
// S3-compatible store instead, configured by the standard AWS environment.
// -mode api and -mode worker split the API and the worker into separate
// processes sharing one bucket. README.md next to this file walks through
// the API with curl, and lists every flag.
//
// The task types:
//
//   - csv_enrich validates and normalises each row: fields are trimmed, the
//     e-mail column is lower-cased and checked, required columns must be
//     present and non-empty. The output is the input with a row_status
//     column ("ok" or "error: ..."); the task counts good and bad rows.
//   - csv_stats writes a summary per column: non-empty, empty and distinct
//     values, and the count, minimum, maximum and mean of numeric values.
//
// Both stream: the input is read from S3 row by row and the output is
// spooled to a temporary file before it is stored, so a large file is
// processed in bounded memory.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first signal, a second one ends the process at once.
		<-ctx.Done()
		stop()
	}()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	var ue usageError
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
	case errors.As(err, &ue):
		os.Exit(2) // the flag package has printed the problem and the usage
	default:
		fmt.Fprintln(os.Stderr, "csvbatch:", err)
		os.Exit(1)
	}
}

// usageError is a command-line error that has already been reported.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }
