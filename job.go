package s3task

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/s3task/s3task/internal/s3x"
)

// Job is one claimed attempt of a task, handed to a [Handler].
type Job struct {
	// Task is the record as claimed: ID, Type, Name, Payload, Attempt (this
	// attempt's number), MaxAttempts and so on. Changing it changes nothing
	// in S3.
	Task Task

	store   *Store
	attempt context.Context // the handler's context: done once the attempt may write nothing more

	mu       sync.Mutex
	progress Progress
	output   bool      // the attempt's output was written
	open     []*Output // outputs made by CreateOutput
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
// from the handler ends the task at once. Requests: one GET.
func (j *Job) OpenInput(ctx context.Context) (io.ReadCloser, error) {
	s := j.store
	key := s.inputKey(j.Task.ID)
	in := &s3.GetObjectInput{Bucket: &s.bucket, Key: &key}
	if j.Task.InputETag != "" {
		in.IfMatch = aws.String(j.Task.InputETag)
	}
	out, err := s.client.GetObject(ctx, in)
	switch {
	case err == nil:
	case s3x.NotFound(err):
		return nil, Permanent(fmt.Errorf("%w: no object at %s", ErrInputMissing, key))
	case s3x.Lost(err):
		return nil, Permanent(fmt.Errorf("%w: %s", ErrInputChanged, key))
	default:
		return nil, fmt.Errorf("s3task: open input %s: %w", key, err)
	}
	if etag := aws.ToString(out.ETag); j.Task.InputETag != "" && etag != j.Task.InputETag {
		// Some stores ignore If-Match on GET; the ETag still tells.
		out.Body.Close()
		return nil, Permanent(fmt.Errorf("%w: %s", ErrInputChanged, key))
	}
	if n := aws.ToInt64(out.ContentLength); n > s.opts.MaxInputSize {
		out.Body.Close()
		return nil, Permanent(&InputSizeError{Key: key, Size: n, Limit: s.opts.MaxInputSize})
	}
	return out.Body, nil
}

// OutputKey returns the key this attempt's output is written to:
// output-attempt-N in the task's folder.
func (j *Job) OutputKey() string { return j.store.outputKey(j.Task.ID, j.Task.Attempt) }

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
	body, size, cleanup, err := seekable(r, math.MaxInt64)
	if err != nil {
		return fmt.Errorf("s3task: write output %s: %w", key, err)
	}
	defer cleanup()
	created, err := s.createObject(ctx, key, body, size)
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
// goes to a temporary file, so memory stays bounded however large the output;
// [Output.Close] uploads it as [Job.WriteOutput] does, using ctx, and
// [Output.Discard] drops it. An output neither closed nor discarded when the
// handler returns is discarded.
func (j *Job) CreateOutput(ctx context.Context) (*Output, error) {
	f, err := os.CreateTemp("", "s3task-output-*")
	if err != nil {
		return nil, fmt.Errorf("s3task: create output: %w", err)
	}
	o := &Output{f: f, job: j, ctx: ctx}
	j.mu.Lock()
	j.open = append(j.open, o)
	j.mu.Unlock()
	return o, nil
}

// Output is an attempt's output being written; see [Job.CreateOutput]. Use it
// from one goroutine.
type Output struct {
	f    *os.File
	job  *Job
	ctx  context.Context
	done bool
}

// Write appends p to the output.
func (o *Output) Write(p []byte) (int, error) {
	if o.done {
		return 0, os.ErrClosed
	}
	return o.f.Write(p)
}

// Close uploads what was written as this attempt's output and removes the
// temporary file. It reports the upload's error.
func (o *Output) Close() error {
	if o.done {
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
	if o.done {
		return
	}
	o.done = true
	o.f.Close()
	os.Remove(o.f.Name())
}

// SetProgress records the attempt's counters. They reach the record with the
// next heartbeat and with the final write, so Store.Get shows them while the
// task runs. It is safe to call from any goroutine.
func (j *Job) SetProgress(p Progress) {
	j.mu.Lock()
	j.progress = p
	j.mu.Unlock()
}

func (j *Job) state() (Progress, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.progress, j.output
}
