package s3task

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/s3task/s3task/internal/kit"
)

// Enqueue creates a task and queues it in one call, for a producer that
// holds the task's input itself (a cron job, another service, an export
// from a database) rather than a browser that uploads it: what Create,
// UploadInput and Submit do one after the other, in fewer requests. input
// is streamed to S3 as UploadInput streams it, within
// StoreOptions.MaxInputSize; pass bytes as bytes.NewReader(b). For a type
// declared without input ([FileOptions.NoInput]) input must be nil, and
// for any other type it must not be: either mistake is an error wrapping
// [ErrInvalidArgument] and [ErrNoInput], returned before anything is
// written.
//
// With p.Key, Enqueue is exactly-once across crashes and retries of the
// caller: a call that failed or crashed between its requests is finished
// by the next call with the same Key, which finds the task, uploads the
// input if it is not there yet (an input already there is kept: the first
// call's), and submits it; a call that finds the task queued or further
// returns it as it is. Without a Key, a call that fails midway leaves a
// created task that was never queued, which the reconciler abandons; a
// caller that retries should pass a Key.
//
// Every step passes through StoreOptions.Middleware as the single call
// would: an [OpCreate], then an [OpUploadInput] (none without input) and
// an [OpSubmit] with [Call.Task] set to the record the create wrote, which
// they reuse instead of reading it again.
//
// Requests, for a new task: PUT record, PUT input, HEAD input, PUT marker,
// PUT record, PUT wake (with a GET of the wake object first as for Submit):
// 6, against 8 for Create, UploadInput and Submit; 4 without input. A key
// adds one PUT, as for Create. A repeat reads the key's object and the
// record, and whatever the task still needs.
//
// Errors: those of Create, UploadInput and Submit; a *[TransitionError] if
// the found task's input is missing and it can no longer take one.
func (s *Store) Enqueue(ctx context.Context, p CreateParams, input io.Reader) (*Task, error) {
	return s.enqueue(ctx, p, input, keyPolicy{})
}

// enqueue is Enqueue with pol the keyed create's policy.
func (s *Store) enqueue(ctx context.Context, p CreateParams, input io.Reader, pol keyPolicy) (*Task, error) {
	if err := s.inputFits(p.Type, input != nil); err != nil {
		return nil, err
	}
	c := &Call{Op: OpCreate, Params: &p, keys: pol}
	t, err := s.call(ctx, c)
	if err != nil {
		return nil, err
	}
	if t.Status != StatusCreated {
		return t, nil // queued or further: a repeat of a call that went on
	}
	if t.NoInput == (input != nil) { // a middleware changed the type
		return nil, s.inputFits(t.Type, input != nil)
	}
	// The record as the create wrote it, with its ETag, when it made it;
	// a task a repeat found is read again by each step.
	step := func(op Op) *Call {
		n := &Call{Op: op, TaskID: t.ID}
		if c.made != nil {
			n.Task, n.read, n.readID, n.rec, n.etag = c.made.Task.clone(), true, t.ID, c.made, c.madeETag
		}
		return n
	}
	if input != nil {
		up := step(OpUploadInput)
		up.input = input
		if _, err := s.enqueueStep(ctx, up); err != nil && !(c.Found && errors.Is(err, ErrInputExists)) {
			return nil, err
		}
	}
	return s.enqueueStep(ctx, step(OpSubmit))
}

// enqueueStep runs one step of Enqueue through the middleware: with the
// record the create wrote, or with a fresh read.
func (s *Store) enqueueStep(ctx context.Context, c *Call) (*Task, error) {
	switch {
	case !c.read:
		return s.call(ctx, c)
	case kit.Bypassed(ctx):
		return s.perform(ctx, c) // the test kit's own calls
	}
	return s.do(ctx, c)
}

// inputFits reports whether a task of type typ may be enqueued with an
// input (given) or without one.
func (s *Store) inputFits(typ string, given bool) error {
	switch none := s.files(typ).NoInput; {
	case none && given:
		return fmt.Errorf("%w: %w: tasks of type %q take no input (FileOptions.NoInput); pass a nil input", ErrInvalidArgument, ErrNoInput, typ)
	case !none && !given:
		return fmt.Errorf("%w: %w: tasks of type %q take an input; declare the type with FileOptions.NoInput to enqueue it without one", ErrInvalidArgument, ErrNoInput, typ)
	}
	return nil
}
