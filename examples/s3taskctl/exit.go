package main

import (
	"context"
	"errors"
	"net"

	"github.com/aws/smithy-go"

	"github.com/s3task/s3task"
)

// Exit codes. They are part of the command's interface: scripts branch on
// them, so they never change meaning.
const (
	exitOK          = 0 // done; for watch, the task completed
	exitFailed      = 1 // the operation failed, or the watched task failed or was abandoned, or show met an unreadable record
	exitUsage       = 2 // bad command line: unknown command or flag, bad ID, duration or cursor
	exitNotFound    = 3 // no such task
	exitConflict    = 4 // the task's status does not allow it, or it kept changing
	exitUnavailable = 5 // the store cannot be reached or used, or does not enforce conditional writes
)

// exitCodes documents the codes in the help text.
const exitCodes = `Exit codes:
  0  ok (watch: the task completed)
  1  the operation failed (watch: the task failed, was abandoned, or did not finish within -timeout;
     show: the task's record cannot be read, and show printed what it could;
     retry, cancel, purge over several tasks: a task failed)
  2  usage error: unknown command or flag, invalid task ID, duration or cursor
  3  task not found (show: no record and nothing else in its folder; over
     tasks named by ID: one does not exist, and none failed)
  4  conflict: the task's status does not allow the change (retry a completed
     task, cancel a finished one), or it kept changing under the call; over
     tasks named by ID: one was skipped for its status, and none failed.
     A task a filter chose and the action skipped is no error.
  5  store unreachable, refusing access, or not enforcing conditional writes
`

// cmdError is an error with the exit code it ends the command with and a
// short code for -json output.
type cmdError struct {
	exit int
	code string
	err  error
	// quiet: the problem was already explained on stderr.
	quiet bool
	// documented: the command already printed its JSON document, which
	// says what happened (watch of a failed task); no error document follows.
	documented bool
}

func (e *cmdError) Error() string { return e.err.Error() }
func (e *cmdError) Unwrap() error { return e.err }

// body is what e says in a JSON document: the "error" object every
// failure prints with -json, in the error document or in the command's
// own (a bulk report, check's).
func (e *cmdError) body() *errorBody {
	return &errorBody{Code: e.code, Message: e.err.Error(), ExitCode: e.exit}
}

// usageErr reports a bad command line.
func usageErr(err error) error { return &cmdError{exit: exitUsage, code: "usage", err: err} }

// classify returns the exit code and the JSON error code for err.
func classify(err error) (int, string) {
	var ce *cmdError
	if errors.As(err, &ce) {
		return ce.exit, ce.code
	}
	for _, m := range []struct {
		target error
		exit   int
		code   string
	}{
		{s3task.ErrInvalidID, exitUsage, "invalid_id"},
		{s3task.ErrInvalidCursor, exitUsage, "invalid_cursor"},
		{s3task.ErrInvalidArgument, exitUsage, "invalid_argument"},
		{s3task.ErrNotFound, exitNotFound, "not_found"},
		{s3task.ErrInvalidTransition, exitConflict, "invalid_transition"},
		{s3task.ErrConflict, exitConflict, "conflict"},
		{s3task.ErrConditionalWritesUnsupported, exitUnavailable, "unsupported_store"},
		{s3task.ErrCorruptRecord, exitFailed, "corrupt_record"},
		{s3task.ErrUnsupportedSchema, exitFailed, "unsupported_record"},
	} {
		if errors.Is(err, m.target) {
			return m.exit, m.code
		}
	}
	if errors.Is(err, context.Canceled) {
		return exitFailed, "interrupted" // Ctrl-C: the store was fine
	}
	if unreachable(err) {
		return exitUnavailable, "unavailable"
	}
	return exitFailed, "failed"
}

// unreachable reports whether err means the store could not be used at
// all: a network failure, a timeout, or an S3 request refused for a reason
// that is not about the task (no such bucket, access denied, bad
// credentials). The library's own errors are classified before this.
func unreachable(err error) bool {
	var op *smithy.OperationError
	var ne net.Error
	return errors.As(err, &op) || errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded)
}
