package s3task

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/s3task/s3task/internal/s3x"
)

// Job is one claimed attempt of a task, handed to a [Handler].
type Job struct {
	// Task is the record as claimed: ID, Type, Name, Payload, Metadata,
	// Attempt (this attempt's number), MaxAttempts and so on. Changing it
	// changes nothing in S3.
	Task Task

	store     *Store
	attempt   context.Context // the handler's context: done once the attempt may write nothing more
	answer    time.Duration   // how long OpenInput waits for S3 to answer (0: as long as ctx allows)
	inputETag string          // the input Submit verified; empty in records from before it was kept

	mu       sync.Mutex
	progress Progress
	counters map[string]int64 // SetCounter's
	output   bool             // the attempt's output was written
	open     []*Output        // outputs made by CreateOutput
}

// discardOpen drops every output the handler left open.
func (j *Job) discardOpen() {
	j.mu.Lock()
	open := j.open
	j.open = nil
	j.mu.Unlock()
	for _, o := range open {
		o.Discard()
	}
}

// OpenInput opens the task's input for reading; the caller closes it. It
// reads exactly the object Submit verified: if the input was replaced since,
// or is gone, or is over the size limit, the error is permanent (wrapping
// [ErrInputChanged], [ErrInputMissing] or [ErrInputTooLarge]) so returning it
// from the handler ends the task at once. Requests: one GET. A task
// without input (Task.NoInput) gets a permanent error wrapping
// [ErrNoInput], with no request.
//
// The read ends, whatever ctx it is given, once the handler's context has
// ended (the lease lost, the task cancelled, the worker stopping). A worker
// waits for S3's answer to the GET for as long as it waits for any request
// of its poll (a third of the lease, at least a second); past it the error
// is a plain one, so the attempt can be retried.
func (j *Job) OpenInput(ctx context.Context) (io.ReadCloser, error) {
	s := j.store
	if j.Task.NoInput {
		return nil, Permanent(fmt.Errorf("%w: task %s is of type %q, declared without input (FileOptions.NoInput)", ErrNoInput, j.Task.ID, j.Task.Type))
	}
	key := s.inputOf(&j.Task)
	in := &s3.GetObjectInput{Bucket: &s.bucket, Key: &key}
	if j.inputETag != "" {
		in.IfMatch = aws.String(j.inputETag)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	unlink := func() bool { return false }
	if j.attempt != nil {
		unlink = context.AfterFunc(j.attempt, func() { cancel(context.Cause(j.attempt)) })
	}
	release := func() { unlink(); cancel(nil) }
	// Only the answer has a deadline: reading the body may take as long
	// as the input is large.
	var late *time.Timer
	if j.answer > 0 {
		late = time.AfterFunc(j.answer, func() { cancel(errNoAnswer) })
	}
	out, err := s.client.GetObject(ctx, in)
	if late != nil && !late.Stop() {
		if err == nil {
			out.Body.Close()
		}
		release()
		return nil, fmt.Errorf("s3task: open input %s: %w within %s", key, errNoAnswer, j.answer)
	}
	switch {
	case err == nil:
	case s3x.NotFound(err):
		release()
		return nil, Permanent(fmt.Errorf("%w: no object at %s", ErrInputMissing, key))
	case s3x.Lost(err):
		release()
		return nil, Permanent(WithCategory(fmt.Errorf("%w: %s", ErrInputChanged, key), CategoryInputChanged))
	default:
		release()
		return nil, fmt.Errorf("s3task: open input %s: %w", key, err)
	}
	if etag := aws.ToString(out.ETag); j.inputETag != "" && etag != j.inputETag {
		// Some stores ignore If-Match on GET; the ETag still tells.
		out.Body.Close()
		release()
		return nil, Permanent(WithCategory(fmt.Errorf("%w: %s", ErrInputChanged, key), CategoryInputChanged))
	}
	if n := aws.ToInt64(out.ContentLength); n > s.opts.MaxInputSize {
		out.Body.Close()
		release()
		return nil, Permanent(&InputSizeError{Key: key, Size: n, Limit: s.opts.MaxInputSize})
	}
	return &inputBody{ReadCloser: out.Body, release: release}, nil
}

// errNoAnswer says S3 did not answer a request in time.
var errNoAnswer = errors.New("s3task: S3 did not answer")

// inputBody is the input's body; closing it releases its context.
type inputBody struct {
	io.ReadCloser
	release func()
	once    sync.Once
}

func (b *inputBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.release)
	return err
}

// OutputKey returns the key this attempt's output is written to:
// output-attempt-N in the task's folder.
func (j *Job) OutputKey() string {
	return j.store.outputKey(j.Task.ID, j.Task.Attempt, j.Task.Type)
}

// WriteOutput stores r as this attempt's output. The object is created with
// If-None-Match: *, so no attempt can overwrite another's output, and it
// becomes the task's output only if the attempt completes while it still
// holds the task. Call it at most once per attempt. A reader that cannot seek
// is first copied to a temporary file. Requests: one PUT (plus a HEAD if
// the outcome was unclear).
//
// Once the handler's context has ended (the task was cancelled, the lease
// lost, or the worker is stopping), WriteOutput writes nothing and returns
// an error wrapping the context's cause, whatever ctx it is given; an upload
// under way when that happens is cancelled. On S3 a request already sent at
// that instant may still land, but the attempt can no longer complete, so
// such an object never becomes the task's output.
func (j *Job) WriteOutput(ctx context.Context, r io.Reader) error {
	s := j.store
	key := j.OutputKey()
	if j.attempt != nil {
		if j.attempt.Err() != nil {
			return fmt.Errorf("s3task: write output %s: the attempt has ended: %w", key, context.Cause(j.attempt))
		}
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		defer cancel(nil)
		defer context.AfterFunc(j.attempt, func() { cancel(context.Cause(j.attempt)) })()
	}
	body, size, cleanup, err := s.seekable(r, math.MaxInt64)
	if err != nil {
		return fmt.Errorf("s3task: write output %s: %w", key, err)
	}
	defer cleanup()
	created, err := s.createObject(ctx, key, body, size, "")
	switch {
	case err != nil && ctx.Err() != nil:
		return fmt.Errorf("s3task: write output %s: %w: %w", key, context.Cause(ctx), err)
	case err != nil:
		return fmt.Errorf("s3task: write output %s: %w", key, err)
	case !created:
		return fmt.Errorf("s3task: output %s already exists: write it once per attempt", key)
	}
	j.mu.Lock()
	j.output = true
	j.mu.Unlock()
	return nil
}

// CreateOutput returns a writer for this attempt's output. What is written
// goes to a temporary file in StoreOptions.SpoolDir (unlinked at once where
// the system allows it), so memory stays bounded however large the output;
// [Output.Close] uploads it as [Job.WriteOutput] does, using ctx, and
// [Output.Discard] drops it. An output neither closed nor discarded when the
// handler returns is discarded.
func (j *Job) CreateOutput(ctx context.Context) (*Output, error) {
	f, done, err := j.store.spool()
	if err != nil {
		return nil, fmt.Errorf("s3task: create output: %w", err)
	}
	o := &Output{f: f, done: done, job: j, ctx: ctx}
	j.mu.Lock()
	j.open = append(j.open, o)
	j.mu.Unlock()
	return o, nil
}

// Output is an attempt's output being written; see [Job.CreateOutput]. Use it
// from one goroutine.
type Output struct {
	f      *os.File
	done   func() // closes f, removing it if it could not be unlinked
	job    *Job
	ctx    context.Context
	closed bool
}

// Write appends p to the output.
func (o *Output) Write(p []byte) (int, error) {
	if o.closed {
		return 0, os.ErrClosed
	}
	return o.f.Write(p)
}

// Close uploads what was written as this attempt's output and removes the
// temporary file. It reports the upload's error.
func (o *Output) Close() error {
	if o.closed {
		return os.ErrClosed
	}
	defer o.Discard()
	if _, err := o.f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	return o.job.WriteOutput(o.ctx, o.f)
}

// Discard drops what was written without uploading it. It is safe to call
// after Close, and more than once.
func (o *Output) Discard() {
	if o.closed {
		return
	}
	o.closed = true
	o.done()
}

// SetProgress records the attempt's counters. They reach the record with the
// next heartbeat and with the final write, so Store.Get shows them while the
// task runs. It is safe to call from any goroutine.
func (j *Job) SetProgress(p Progress) {
	j.mu.Lock()
	j.progress = p
	j.mu.Unlock()
}

// MaxCounters is the most counters one attempt may set ([Job.SetCounter]).
const MaxCounters = 16

// SetCounter sets one of the attempt's own counters, for work that is not
// counted in rows: pages rendered, images resized, bytes sent. They reach
// the record (Task.Counters) with the progress counters, at the next
// heartbeat and with the final write. name is 1 to [MaxMetadataKeyLen]
// ASCII letters, digits, '.', '-' or '_'; an attempt sets at most
// [MaxCounters] names. It is safe to call from any goroutine.
//
// Errors: [ErrInvalidArgument] for a name that is not valid, or a new name
// past MaxCounters; the counters set before stay.
func (j *Job) SetCounter(name string, value int64) error {
	if !validMetadataKey(name) {
		return invalidArg("counter name %q must be 1 to %d ASCII letters, digits, '.', '-' or '_'", truncate(name, 40), MaxMetadataKeyLen)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, ok := j.counters[name]; !ok && len(j.counters) == MaxCounters {
		return invalidArg("counter %q would be the attempt's %dth; at most %d", truncate(name, 40), MaxCounters+1, MaxCounters)
	}
	if j.counters == nil {
		j.counters = map[string]int64{}
	}
	j.counters[name] = value
	return nil
}

// state returns what the attempt has to report: its progress, a copy of its
// counters, and whether it wrote its output.
func (j *Job) state() (Progress, map[string]int64, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.progress, maps.Clone(j.counters), j.output
}
