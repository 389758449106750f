package s3task

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Sentinel errors. Every error the library returns wraps at most one of them,
// so callers test with [errors.Is]; the typed errors below carry details for
// [errors.As].
var (
	// ErrInvalidID means a task ID is not 26 canonical Crockford base32
	// characters. The ID never reached S3. See [IDError].
	ErrInvalidID = errors.New("s3task: invalid task ID")

	// ErrInvalidCursor means a List cursor was not one the library issued.
	ErrInvalidCursor = errors.New("s3task: invalid cursor")

	// ErrInvalidArgument means a parameter other than an ID is out of range:
	// a negative limit, a zero TTL, a payload that is not JSON, and so on.
	ErrInvalidArgument = errors.New("s3task: invalid argument")

	// ErrInvalidOptions means a StoreOptions or WorkerOptions field is out of
	// range; the message names the field.
	ErrInvalidOptions = errors.New("s3task: invalid options")

	// ErrNotFound means the task has no status.json.
	ErrNotFound = errors.New("s3task: task not found")

	// ErrPurged means [Store.Ingest] found that the object version's task
	// existed and was deleted by [Store.Purge]: the version was ingested
	// once, and is not ingested again. See [PurgedError] for the task.
	ErrPurged = errors.New("s3task: task purged")

	// ErrSourceGone means [Store.Ingest] found no object version to ingest:
	// the object was deleted, or replaced by another version, before it was
	// read. No task was made of it (a task an earlier Ingest made stays as
	// it is); the new version, if any, is ingested in its own right.
	ErrSourceGone = errors.New("s3task: ingest source gone")

	// ErrInvalidTransition means the task's current status does not allow
	// the requested change. See [TransitionError].
	ErrInvalidTransition = errors.New("s3task: invalid transition")

	// ErrConflict means the record kept changing under the call: every
	// compare-and-set lost to another writer, up to the configured limit.
	// The record is intact; the call may be repeated.
	ErrConflict = errors.New("s3task: concurrent update conflict")

	// ErrOutcomeUnknown means a call's write may or may not have taken
	// effect: S3's answer was lost (or the call's context ended while it
	// waited), and the record, read back, cannot tell, because it cannot be
	// read in time, because more writes followed than it remembers, or
	// because it is gone: [Store.Purge] deleted the task since, which it
	// does only to a finished task, so the write either landed and finished
	// it, or found it finished. Submit, Retry, Cancel, Schedule, Pause and
	// Resume settle every other doubt themselves by reading again and
	// deciding (see each); Purge and a keyed Create still return it when
	// more writes followed than the record remembers. The record is intact
	// and consistent either way; read it (Store.Get) to see where the task
	// stands before repeating the call. Every other error from a Store call
	// that changes a task means the record is as it was.
	ErrOutcomeUnknown = errors.New("s3task: outcome of the write unknown")

	// ErrInputMissing means Submit found no input object for the task.
	ErrInputMissing = errors.New("s3task: input missing")

	// ErrInputExists means an upload was refused because the task already
	// has its input. An input is written once (with If-None-Match: *), so
	// the bytes Submit verifies are the bytes a worker reads; to use
	// another file, create another task.
	ErrInputExists = errors.New("s3task: input already uploaded")

	// ErrNoInput reports a task without an input: [Job.OpenInput] of a task
	// whose type takes none ([FileOptions.NoInput]), and [Store.Enqueue]
	// given an input for such a type, or none for any other (wrapped with
	// ErrInvalidArgument).
	ErrNoInput = errors.New("s3task: task has no input")

	// ErrInputTooLarge means the input is larger than the configured maximum.
	// See [InputSizeError].
	ErrInputTooLarge = errors.New("s3task: input too large")

	// ErrInputChanged means the input object was replaced after Submit
	// verified it (possible only on a store that ignores If-None-Match on
	// uploads, or by a writer outside the library); the worker refuses to
	// process bytes nobody checked. [Store.Retry] verifies the input again
	// and runs the task on it as it is now.
	ErrInputChanged = errors.New("s3task: input changed after submit")

	// ErrNotCompleted means an output was asked for a task that is not
	// completed.
	ErrNotCompleted = errors.New("s3task: task not completed")

	// ErrCorruptRecord means a status.json could not be decoded or is not
	// self-consistent. See [RecordError] for the key.
	ErrCorruptRecord = errors.New("s3task: corrupt task record")

	// ErrUnsupportedSchema means a status.json has a newer schema_version
	// than this code knows. The record is left untouched.
	ErrUnsupportedSchema = errors.New("s3task: unsupported record schema version")

	// ErrUnreadablePresence means an object in the presence folder
	// (<prefix>_workers/) is not a worker's presence object as this code
	// knows it: its key names no worker, or its body does not decode, is of
	// another kind or a newer format, or names another worker.
	// [Store.Workers] reports it in WorkerInfo.Err and goes on.
	ErrUnreadablePresence = errors.New("s3task: unreadable worker presence object")

	// ErrConditionalWritesUnsupported means the bucket accepted a write that
	// a conditional header should have refused. Workers sharing such a bucket
	// could both claim one task, so the library must not be used with it.
	ErrConditionalWritesUnsupported = errors.New("s3task: store does not enforce conditional writes")

	// ErrLeaseLost is the cause a handler's context carries when another
	// worker took the task over, or the lease could not be renewed in time.
	ErrLeaseLost = errors.New("s3task: lease lost")

	// ErrTaskCanceled is the cause a handler's context carries when an
	// operator cancelled the task while it ran.
	ErrTaskCanceled = errors.New("s3task: task canceled")

	// ErrWorkerStopping is the cause a handler's context carries when the
	// worker is shutting down and the shutdown timeout ran out. The task goes
	// back to the queue without using up an attempt.
	ErrWorkerStopping = errors.New("s3task: worker stopping")
)

// IDError reports an invalid task ID. It wraps [ErrInvalidID].
type IDError struct {
	ID     string // the rejected input, as given
	Reason string // what is wrong with it, in a few words
}

// Error describes the problem for people.
func (e *IDError) Error() string {
	return fmt.Sprintf("s3task: invalid task ID %q: %s", e.ID, e.Reason)
}

// Unwrap returns [ErrInvalidID].
func (e *IDError) Unwrap() error { return ErrInvalidID }

// TransitionError reports a change the task's status does not allow. It wraps
// [ErrInvalidTransition].
type TransitionError struct {
	ID     string // the task
	From   Status // its status when the change was decided
	Event  string // what was asked: "submit", "claim", "cancel", ...
	Reason string // why not, in a few words
}

// Error describes the problem for people.
func (e *TransitionError) Error() string {
	return fmt.Sprintf("s3task: task %s is %s: cannot %s: %s", e.ID, e.From, e.Event, e.Reason)
}

// Unwrap returns [ErrInvalidTransition].
func (e *TransitionError) Unwrap() error { return ErrInvalidTransition }

// RecordError reports a status.json that cannot be used, with its key. It
// wraps [ErrCorruptRecord] or [ErrUnsupportedSchema], and the decoding error
// if there is one.
//
// In JSON (see [RecordError.MarshalJSON]) it is an object with key and
// error, the message of Err.
type RecordError struct {
	Key string `json:"key"` // the object key of the record
	Err error  `json:"-"`   // why: it wraps [ErrCorruptRecord] or [ErrUnsupportedSchema], and the decoding error if any
}

// MarshalJSON encodes e as a JSON object: key, and error, Err's message
// (left out when Err is nil).
func (e RecordError) MarshalJSON() ([]byte, error) {
	type plain RecordError // e's fields, without this method
	return json.Marshal(struct {
		plain
		Error string `json:"error,omitempty"`
	}{plain(e), errorText(e.Err)})
}

// UnmarshalJSON decodes what MarshalJSON encodes. Err is then an error
// with the message encoded, nil if there was none; it wraps none of the
// package's errors.
func (e *RecordError) UnmarshalJSON(data []byte) error {
	type plain RecordError
	v := struct {
		*plain
		Error string `json:"error"`
	}{plain: (*plain)(e)}
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	e.Err = textError(v.Error)
	return nil
}

// errorText returns err's message, "" for nil.
func errorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// textError returns an error with message msg, nil for "".
func textError(msg string) error {
	if msg == "" {
		return nil
	}
	return errors.New(msg)
}

// Error describes the problem for people.
func (e *RecordError) Error() string {
	return fmt.Sprintf("s3task: record %s: %v", e.Key, e.Err)
}

// Unwrap returns the underlying error.
func (e *RecordError) Unwrap() error { return e.Err }

// StateError reports a value that names no [State], given where a state
// is wanted ([ParseState], [ListOptions.States], [BulkOptions.States]). It
// wraps [ErrInvalidArgument].
type StateError struct {
	Value string // the value given, as it was
}

// Error names the value and the states there are.
func (e *StateError) Error() string {
	names := make([]string, len(states))
	for i, s := range states {
		names[i] = string(s)
	}
	return fmt.Sprintf("%v: %q is not a task state (want %s)", ErrInvalidArgument, truncate(e.Value, 40), strings.Join(names, ", "))
}

// Unwrap returns [ErrInvalidArgument].
func (e *StateError) Unwrap() error { return ErrInvalidArgument }

// InputSizeError reports an input larger than allowed. It wraps
// [ErrInputTooLarge].
type InputSizeError struct {
	Key   string // the input object
	Size  int64  // its size in bytes
	Limit int64  // StoreOptions.MaxInputSize
}

// Error describes the problem for people.
func (e *InputSizeError) Error() string {
	return fmt.Sprintf("s3task: input %s is %d bytes, over the limit of %d", e.Key, e.Size, e.Limit)
}

// Unwrap returns [ErrInputTooLarge].
func (e *InputSizeError) Unwrap() error { return ErrInputTooLarge }

func invalidArg(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidArgument}, args...)...)
}

// Permanent marks err as not worth retrying: the worker fails the task for
// good, whatever attempts are left, with err in last_error. Permanent(nil)
// is nil.
func Permanent(err error) error {
	return wrapHandlerError(err, func(he *handlerError) { he.permanent = true })
}

// RetryAfter asks the worker to retry the task no sooner than d from now,
// instead of after the configured backoff, if attempts are left.
// RetryAfter(nil, d) is nil.
func RetryAfter(err error, d time.Duration) error {
	return wrapHandlerError(err, func(he *handlerError) { he.delay, he.hasDelay = max(d, 0), true })
}

// Failure categories the library records in a task's error_category
// ([Task.ErrorCategory]) when the handler's error names none of its own
// (see [WithCategory]). [Store.Stats] counts failures by category.
const (
	// CategoryTransient is a handler's plain error: retried while attempts
	// are left.
	CategoryTransient = "transient"
	// CategoryPermanent is an error made by [Permanent].
	CategoryPermanent = "permanent"
	// CategoryPanic is a handler's panic.
	CategoryPanic = "panic"
	// CategoryLeaseExpired is an attempt whose worker stopped renewing its
	// lease (it crashed, or lost S3): another worker recovered the task.
	CategoryLeaseExpired = "lease_expired"
	// CategoryShutdown is an attempt given back by a worker that shut down
	// before its handler finished; it does not use up an attempt.
	CategoryShutdown = "shutdown"
	// CategoryTimeout is a task given back unfinished too many times in a
	// row (WorkerOptions.ReleaseLimit): its workers stop before it can
	// finish, as a function's timeout stops an s3tasklambda worker. The
	// failure is permanent; [Store.Retry] runs it again, with the run of
	// give-backs counted afresh.
	CategoryTimeout = "timeout"
	// CategoryBadPayload is a payload that a handler registered with
	// [HandleJSON] could not decode or validate; the failure is permanent.
	CategoryBadPayload = "bad_payload"
	// CategoryUnknownType is a task a [Mux] had no handler for; the failure
	// is permanent.
	CategoryUnknownType = "unknown_type"
	// CategoryInputChanged is an attempt that found its input replaced
	// after Submit verified it ([ErrInputChanged]); the failure is
	// permanent, but [Store.Retry] verifies the input again and runs the
	// task on it as it is now.
	CategoryInputChanged = "input_changed"
)

// WithCategory labels err with a failure category, such as "bad_input" or
// "upstream_timeout". The worker records it in the task's error_category,
// and [Store.Stats] groups failures by it. Without one, a failure is
// [CategoryPermanent] or [CategoryTransient] (see [Permanent]); a panic is
// [CategoryPanic]. WithCategory(nil, c) is nil.
func WithCategory(err error, category string) error {
	return wrapHandlerError(err, func(he *handlerError) { he.category = truncate(category, 64) })
}

// IsPermanent reports whether err, or an error it wraps, was made by
// [Permanent].
func IsPermanent(err error) bool {
	var he *handlerError
	return errors.As(err, &he) && he.permanent
}

// handlerError carries a handler's wishes about retrying.
type handlerError struct {
	err       error
	permanent bool
	delay     time.Duration
	hasDelay  bool
	category  string
}

func (e *handlerError) Error() string { return e.err.Error() }
func (e *handlerError) Unwrap() error { return e.err }

// wrapHandlerError wraps err with the wishes of any handlerError inside it,
// then applies set, so the outermost one holds them all:
// Permanent(WithCategory(err, c)) is both.
func wrapHandlerError(err error, set func(*handlerError)) error {
	if err == nil {
		return nil
	}
	he := &handlerError{err: err}
	var inner *handlerError
	if errors.As(err, &inner) {
		he.permanent, he.delay, he.hasDelay, he.category = inner.permanent, inner.delay, inner.hasDelay, inner.category
	}
	set(he)
	return he
}

// ErrorCategory returns the category a worker records in a task's
// error_category when an attempt ends with err: its [WithCategory] label;
// otherwise [CategoryPermanent] for an error made by [Permanent] and
// [CategoryTransient] for any other. It returns "" for nil. A [Middleware]
// can label a span or a metric with it before the record is written.
func ErrorCategory(err error) string {
	if err == nil {
		return ""
	}
	return failureCategory(err)
}

// failureCategory returns the category to record for a handler's error.
func failureCategory(err error) string {
	var he *handlerError
	switch {
	case errors.As(err, &he) && he.category != "":
		return he.category
	case IsPermanent(err):
		return CategoryPermanent
	case errors.As(err, new(*panicError)):
		return CategoryPanic
	}
	return CategoryTransient
}

// panicError is a handler's panic as an error.
type panicError struct{ value any }

func (e *panicError) Error() string { return fmt.Sprintf("handler panicked: %v", e.value) }
