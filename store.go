package s3task

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go/middleware"
	"github.com/oklog/ulid/v2"

	"github.com/s3task/s3task/internal/s3x"
)

// Store is the control side of s3task: it creates tasks, verifies inputs,
// lists and reads records, cancels and retries, and hands out presigned URLs.
// A Store is safe for concurrent use; make one per bucket and share it.
//
// Every change is a compare-and-set on the task's status.json: read it with
// its ETag, decide with the state machine, write it back with If-Match. See the
// package documentation for the object layout and the guarantees.
type Store struct {
	client  *s3.Client
	presign *s3.PresignClient
	bucket  string
	opts    StoreOptions
	log     *slog.Logger

	// skew is the S3 server's clock minus the local clock, in nanoseconds,
	// as last seen in a response's Date header.
	skew      atomic.Int64
	lastStamp atomic.Int64 // the latest time stamp returned, in Unix milliseconds
	local     localWorkers // workers of this process, woken by Submit and Retry
}

// NewStore returns a Store for the tasks under opts.Prefix in bucket. The
// caller builds the client (credentials, region, endpoint); the library never
// loads any configuration of its own. For S3-compatible stores, enable
// path-style addressing and set the request checksum calculation to "when
// required" on the client. Call [Store.CheckBackend] once to prove the bucket
// enforces conditional writes.
//
// NewStore makes no requests. It returns an error wrapping [ErrInvalidOptions]
// for a nil client, an empty bucket or an invalid option.
func NewStore(client *s3.Client, bucket string, opts *StoreOptions) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil S3 client", ErrInvalidOptions)
	}
	if bucket == "" {
		return nil, fmt.Errorf("%w: empty bucket name", ErrInvalidOptions)
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Store{client: client, presign: s3.NewPresignClient(client), bucket: bucket, opts: o, log: o.Logger}, nil
}

// Bucket returns the bucket the store works in.
func (s *Store) Bucket() string { return s.bucket }

// Prefix returns the key prefix under which tasks live.
func (s *Store) Prefix() string { return s.opts.Prefix }

// Object keys. Only IDs that passed parseID ever reach these.

func (s *Store) taskDir(id string) string   { return s.opts.Prefix + id + "/" }
func (s *Store) recordKey(id string) string { return s.taskDir(id) + "status.json" }
func (s *Store) wakeKey() string            { return s.opts.Prefix + "_wake" }

// InputKey returns the object key of a task's input. It returns an error
// wrapping [ErrInvalidID] for an invalid ID.
func (s *Store) InputKey(id string) (string, error) {
	if err := ParseID(id); err != nil {
		return "", err
	}
	return s.inputKey(id), nil
}

func (s *Store) inputKey(id string) string { return s.taskDir(id) + "input" + s.opts.InputExt }

// OutputKey returns the object key of the output of a task's attempt n
// (counting from 1). It returns an error wrapping [ErrInvalidID] for an
// invalid ID and [ErrInvalidArgument] for n < 1.
func (s *Store) OutputKey(id string, n int) (string, error) {
	if err := ParseID(id); err != nil {
		return "", err
	}
	if n < 1 {
		return "", invalidArg("attempt %d, attempts count from 1", n)
	}
	return s.outputKey(id, n), nil
}

func (s *Store) outputKey(id string, n int) string {
	return s.taskDir(id) + "output-attempt-" + strconv.Itoa(n) + s.opts.OutputExt
}

// serverNow returns the S3 server's time as best known: the local clock
// corrected by the offset seen in the last response, in UTC, to the
// millisecond. Every decision about leases and retries uses it.
func (s *Store) serverNow() time.Time {
	return time.UnixMilli(s.serverClock().UnixMilli()).UTC()
}

// serverClock is serverNow at full resolution, for measuring how long is
// left until a time on the server's clock.
func (s *Store) serverClock() time.Time {
	return s.opts.Clock().Add(time.Duration(s.skew.Load()))
}

// maxStampStepBack is how far serverNow may step back (its offset is
// re-estimated from one-second Date headers with every response) before
// stamp follows it instead of holding still.
const maxStampStepBack = 5 * time.Second

// stamp returns the time for IDs and audit timestamps: serverNow, except that
// it does not go back by small steps, so the tasks and records one Store
// writes in sequence are in order. A larger step back is a real correction
// (the first responses of a Store whose local clock is off), and stamp
// follows it.
func (s *Store) stamp() time.Time {
	t := s.serverNow().UnixMilli()
	for {
		last := s.lastStamp.Load()
		if t <= last && last-t <= maxStampStepBack.Milliseconds() {
			t = last
			break
		}
		if s.lastStamp.CompareAndSwap(last, t) {
			break
		}
	}
	return time.UnixMilli(t).UTC()
}

// observe records the server's clock from a response's Date header.
func (s *Store) observe(md middleware.Metadata) {
	if st, ok := awsmiddleware.GetServerTime(md); ok && !st.IsZero() {
		s.observeTime(st)
	}
}

// observeErr records the server's clock from the response behind an error.
func (s *Store) observeErr(err error) {
	if st, ok := s3x.ServerTime(err); ok {
		s.observeTime(st)
	}
}

// observeTime narrows the offset with a Date header: when it was read, the
// server's clock stood between st and st+1s, so the offset lies between
// st-local and that plus a second. An estimate already in that window is
// kept, so the offset does not jitter from one response to the next; one
// outside it moves to the window's nearer edge.
func (s *Store) observeTime(st time.Time) {
	lo := int64(st.Sub(s.opts.Clock()))
	hi := lo + int64(time.Second)
	switch cur := s.skew.Load(); {
	case cur < lo:
		s.skew.Store(lo)
	case cur > hi:
		s.skew.Store(hi)
	}
}

// newRevision returns a fresh random revision tag.
func newRevision() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// CreateParams describes a new task.
type CreateParams struct {
	// Name is a label for people, at most 256 bytes of UTF-8. Optional.
	Name string
	// Type selects the handler in a [Mux], at most 128 bytes of UTF-8.
	// Optional.
	Type string
	// Payload is free JSON for the handler, at most
	// StoreOptions.MaxPayloadSize bytes. Optional.
	Payload json.RawMessage
	// CreatedBy names who asked for the task, at most 256 bytes. Optional.
	CreatedBy string
	// MaxAttempts caps the attempts, from 1 to 1000; zero means
	// StoreOptions.MaxAttempts.
	MaxAttempts int
	// RunAt, if set, is the earliest time the task may start, by the S3
	// server's clock, rounded up to a whole millisecond: once submitted it
	// waits, scheduled, until then. A time past when it is submitted means
	// at once. See [Store.Schedule].
	RunAt time.Time
}

func (p *CreateParams) validate(maxPayload int) error {
	for _, f := range []struct {
		name, v string
		max     int
	}{{"Name", p.Name, 256}, {"Type", p.Type, 128}, {"CreatedBy", p.CreatedBy, 256}} {
		if len(f.v) > f.max || !utf8.ValidString(f.v) {
			return invalidArg("CreateParams.%s must be at most %d bytes of UTF-8", f.name, f.max)
		}
	}
	if len(p.Payload) > maxPayload {
		return invalidArg("CreateParams.Payload is %d bytes, over the limit of %d", len(p.Payload), maxPayload)
	}
	if len(p.Payload) > 0 && !json.Valid(p.Payload) {
		return invalidArg("CreateParams.Payload is not valid JSON")
	}
	if p.MaxAttempts < 0 || p.MaxAttempts > 1000 {
		return invalidArg("CreateParams.MaxAttempts is %d, want 0 (default) to 1000", p.MaxAttempts)
	}
	return nil
}

// Create writes a new task in status created and returns it. The record is
// written with If-None-Match: *, so it can never replace another task's.
// Requests: one PUT.
//
// Errors: [ErrInvalidArgument] for bad params; S3 errors otherwise.
func (s *Store) Create(ctx context.Context, p CreateParams) (*Task, error) {
	if err := p.validate(s.opts.MaxPayloadSize); err != nil {
		return nil, err
	}
	now := s.stamp()
	id := NewIDAt(now)
	t := &Task{
		SchemaVersion: SchemaVersion,
		ID:            id,
		Type:          p.Type,
		Name:          p.Name,
		Status:        StatusCreated,
		MaxAttempts:   cmp(p.MaxAttempts, s.opts.MaxAttempts),
		InputPath:     s.inputKey(id),
		CreatedAt:     now,
		CreatedBy:     p.CreatedBy,
		RunAt:         runAt(p.RunAt),
	}
	if len(p.Payload) > 0 {
		var buf bytes.Buffer
		if err := json.Compact(&buf, p.Payload); err != nil {
			return nil, invalidArg("CreateParams.Payload: %v", err)
		}
		t.Payload = buf.Bytes()
	}
	got, _, err := s.commit(ctx, nil, "", t)
	if errors.Is(err, errOvertaken) {
		err = nil // created, and already changed by another
	}
	if err != nil {
		return nil, fmt.Errorf("s3task: create task %s: %w", id, err)
	}
	return got, nil
}

// cmp returns v, or def when v is zero.
func cmp(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// Get returns the task's record. Requests: one GET.
//
// Errors: [ErrInvalidID]; [ErrNotFound]; a *[RecordError] wrapping
// [ErrCorruptRecord] or [ErrUnsupportedSchema]; S3 errors otherwise.
func (s *Store) Get(ctx context.Context, id string) (*Task, error) {
	if err := ParseID(id); err != nil {
		return nil, err
	}
	t, _, err := s.read(ctx, id)
	return t, err
}

// read fetches a task's record and its ETag.
func (s *Store) read(ctx context.Context, id string) (*Task, string, error) {
	key := s.recordKey(id)
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &key})
	if err != nil {
		if s3x.NotFound(err) {
			return nil, "", fmt.Errorf("%w: %s", ErrNotFound, id)
		}
		return nil, "", fmt.Errorf("s3task: read %s: %w", key, err)
	}
	defer out.Body.Close()
	s.observe(out.ResultMetadata)
	data, err := io.ReadAll(io.LimitReader(out.Body, maxRecordSize+1))
	if err != nil {
		return nil, "", fmt.Errorf("s3task: read %s: %w", key, err)
	}
	if len(data) > maxRecordSize {
		return nil, "", &RecordError{Key: key, Err: fmt.Errorf("%w: larger than %d bytes", ErrCorruptRecord, maxRecordSize)}
	}
	t, err := decodeTask(key, id, data, s.opts.MaxAttempts)
	if err != nil {
		return nil, "", err
	}
	return t, aws.ToString(out.ETag), nil
}

// errLost says a compare-and-set found the record changed by someone else
// and our write did not take effect.
var errLost = errors.New("s3task: lost compare-and-set")

// errOvertaken says our write took effect, but others have written since.
var errOvertaken = errors.New("s3task: write overtaken")

// settleWithin bounds how long a write whose answer was unclear keeps
// re-reading the record to learn whether it landed.
const settleWithin = 30 * time.Second

// commit writes next over the record whose ETag is etag (or creates it when
// cur is nil). On success it returns the written record and its new ETag.
//
// When the outcome is unclear (a 412 or 409 that may answer the SDK's own
// resend of a write that was applied, a 5xx, a timeout) it re-reads the
// record, with backoff if need be, and judges by the revisions it keeps
// (see landed): our write is the record (success); it landed and was
// overwritten since (errOvertaken); it did not land (errLost after a
// precondition failure, the write's own error otherwise, the record being
// as it was); or the record cannot tell, or cannot be read in time
// (ErrOutcomeUnknown). With errLost and errOvertaken it returns the fresh
// record and ETag, so the caller can decide again without another GET.
func (s *Store) commit(ctx context.Context, cur *Task, etag string, next *Task) (*Task, string, error) {
	n := next.clone()
	succeed(cur, n, newRevision())
	n.UpdatedAt = s.stamp()
	body, err := json.Marshal(n)
	if err != nil {
		return nil, "", fmt.Errorf("s3task: encode record %s: %w", n.ID, err)
	}
	key := s.recordKey(n.ID)
	in := &s3.PutObjectInput{
		Bucket:        &s.bucket,
		Key:           &key,
		Body:          bytes.NewReader(body),
		ContentLength: aws.Int64(int64(len(body))),
		ContentType:   aws.String("application/json"),
	}
	if cur == nil {
		in.IfNoneMatch = aws.String("*")
	} else {
		in.IfMatch = aws.String(etag)
	}
	out, err := s.client.PutObject(ctx, in)
	if err == nil {
		s.observe(out.ResultMetadata)
		return n, aws.ToString(out.ETag), nil
	}
	s.observeErr(err)
	now, nowETag, rerr := s.reread(ctx, n.ID)
	switch {
	case errors.Is(rerr, ErrNotFound) && (cur == nil || s3x.Lost(err)):
		// Never created, or deleted under us (a 404 on If-Match).
		if cur == nil {
			return nil, "", fmt.Errorf("s3task: write %s: %w", key, err)
		}
		return nil, "", rerr
	case rerr != nil:
		return nil, "", fmt.Errorf("%w: write %s: %w (and reading it back: %w)", ErrOutcomeUnknown, key, err, rerr)
	}
	switch landed(cur, n, now) {
	case landedHere:
		return now, nowETag, nil
	case overtaken:
		return now, nowETag, errOvertaken
	case notLanded:
		if s3x.Lost(err) {
			return now, nowETag, errLost
		}
		return nil, "", fmt.Errorf("s3task: write %s: %w", key, err)
	}
	return nil, "", fmt.Errorf("%w: write %s: %w, and %d writes followed it", ErrOutcomeUnknown, key, err, now.Writes-n.Writes)
}

// reread reads a record after a doubtful write. A read that fails for a
// passing reason is tried again with backoff for up to settleWithin (or
// until ctx ends): a claim whose answer was lost must not be given up
// because one read failed.
func (s *Store) reread(ctx context.Context, id string) (*Task, string, error) {
	ctx, cancel := context.WithTimeout(ctx, settleWithin)
	defer cancel()
	for try := 0; ; try++ {
		t, etag, err := s.read(ctx, id)
		var re *RecordError
		if err == nil || errors.Is(err, ErrNotFound) || errors.As(err, &re) {
			return t, etag, err
		}
		if !sleepCtx(ctx, backoff(try, 250*time.Millisecond, 4*time.Second)) {
			return nil, "", err
		}
	}
}

// backoff returns the wait before try number try (from 0): first about
// base, doubling up to about most, the second half of each wait random.
func backoff(try int, base, most time.Duration) time.Duration {
	d := min(base<<min(try, 20), most)
	return d/2 + jitter(d/2)
}

// sleepCtx waits for d, or until ctx ends; it reports whether it waited
// the whole time.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// apply decides event e against the record (t, etag) and writes the result
// with the marker index in step (see commitMarked). After a
// lost compare-and-set it waits a moment (with jitter, so that contending
// callers drift apart) and decides again against the fresh record, up to
// ConflictRetries times, then returns ErrConflict. It returns the record as
// stored afterwards and whether this call changed it.
func (s *Store) apply(ctx context.Context, t *Task, etag string, e event) (*Task, bool, error) {
	for try := 0; ; try++ {
		next, write, err := transition(t, e, s.serverNow())
		if err != nil {
			return nil, false, err
		}
		if !write {
			return t, false, nil
		}
		if try > s.opts.ConflictRetries {
			return nil, false, fmt.Errorf("%w: task %s changed %d times in a row", ErrConflict, t.ID, try)
		}
		if try > 0 && !sleepCtx(ctx, backoff(try-1, 20*time.Millisecond, time.Second)) {
			return nil, false, ctx.Err()
		}
		got, gotETag, err := s.commitMarked(ctx, t, etag, next)
		switch {
		case err == nil, errors.Is(err, errOvertaken):
			return got, true, nil
		case !errors.Is(err, errLost):
			return nil, false, err
		}
		// Decide again against what is there now: the goal may be reached
		// already (a concurrent Cancel), or no longer allowed.
		t, etag = got, gotETag
	}
}

// change reads task id and applies e; see apply.
func (s *Store) change(ctx context.Context, id string, e event) (*Task, bool, error) {
	if err := ParseID(id); err != nil {
		return nil, false, err
	}
	t, etag, err := s.read(ctx, id)
	if err != nil {
		return nil, false, err
	}
	return s.apply(ctx, t, etag, e)
}

// settle finishes the bookkeeping of a task that a Store call made
// terminal: it delivers the task's pending OnTerminal notice if this store
// has the hook, then removes the marker. A notice that cannot be delivered
// here keeps the marker, so a worker comes back to it. An empty etag means
// "read it".
func (s *Store) settle(ctx context.Context, t *Task, etag string) {
	if t.NotifyPending && s.opts.OnTerminal == nil {
		return // a store with the hook will deliver it
	}
	_ = s.deliver(ctx, t, etag)
}

// Submit moves a created task to queued once its input is in place, and
// returns it. It checks that the input object exists and is at most
// StoreOptions.MaxInputSize bytes, records the input's ETag (a worker refuses
// an input replaced after this point), writes the active marker (named
// after the submit time, or the task's RunAt if later), then the record,
// then adds the marker to the wake object that tells idle workers to look;
// workers running in this process on this Store start looking at once.
// Submitting a queued task again changes nothing and returns it. Requests:
// GET, HEAD, PUT marker, PUT record, GET and PUT wake.
//
// Errors: [ErrInvalidID]; [ErrNotFound]; [ErrInputMissing]; an
// *[InputSizeError] wrapping [ErrInputTooLarge]; a *[TransitionError] for any
// status but created and queued; [ErrConflict]; [ErrOutcomeUnknown]; S3
// errors otherwise. On every error but ErrOutcomeUnknown the record is
// unchanged; a write whose answer was lost but which landed is a success,
// even when a worker claimed the task right after it.
func (s *Store) Submit(ctx context.Context, id string) (*Task, error) {
	if err := ParseID(id); err != nil {
		return nil, err
	}
	t, etag, err := s.read(ctx, id)
	if err != nil {
		return nil, err
	}
	e := event{kind: evSubmit}
	if t.Status == StatusCreated {
		if e.inputETag, e.inputSize, err = s.checkInput(ctx, s.inputKey(id)); err != nil {
			return nil, err
		}
	}
	got, changed, err := s.apply(ctx, t, etag, e)
	if changed {
		s.wake(ctx, s.MarkerKey(got))
	}
	return got, err
}

// checkInput verifies that the input at key is there and within
// MaxInputSize, and returns its ETag and size. Requests: one HEAD.
func (s *Store) checkInput(ctx context.Context, key string) (string, int64, error) {
	head, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: &key})
	if err != nil {
		if s3x.NotFound(err) {
			return "", 0, fmt.Errorf("%w: no object at %s", ErrInputMissing, key)
		}
		return "", 0, fmt.Errorf("s3task: check input %s: %w", key, err)
	}
	size := aws.ToInt64(head.ContentLength)
	if size > s.opts.MaxInputSize {
		return "", 0, &InputSizeError{Key: key, Size: size, Limit: s.opts.MaxInputSize}
	}
	return aws.ToString(head.ETag), size, nil
}

// submittedInput returns the key of a submitted task's input: the one its
// record names, which a Store with other extensions (an operator's tool)
// cannot derive, as long as it is an input in the task's own folder;
// otherwise the one this Store's options give.
func (s *Store) submittedInput(t *Task) string {
	ext, ok := strings.CutPrefix(t.InputPath, s.taskDir(t.ID)+"input")
	if !ok || !validExt(ext) {
		return s.inputKey(t.ID)
	}
	return t.InputPath
}

// Retry puts a failed task back in the queue at once, whether its failure was
// final or it was waiting for an automatic retry, and returns it. The decision
// is made against the stored record, never against what the caller last saw.
// If all attempts were used, the task gets one more. The input is verified
// again as Submit does, and the record takes its current ETag and size, so a
// task that failed with [ErrInputChanged] runs on the input as it is now.
// The new marker is written before the record and the old one, if the task
// was waiting for its retry, deleted after it (see the package
// documentation, Markers); then the wake object tells idle workers to look.
// Requests: GET, HEAD, PUT marker, PUT record, GET and PUT wake, and DELETE
// of the old marker if there was one (more on a lost compare-and-set).
//
// Errors: [ErrInvalidID]; [ErrNotFound]; a *[TransitionError] unless the task
// is failed; [ErrInputMissing] or an *[InputSizeError] if the input is gone
// or now too large; [ErrConflict]; [ErrOutcomeUnknown]; S3 errors otherwise.
// On every error but ErrOutcomeUnknown the record is unchanged.
func (s *Store) Retry(ctx context.Context, id string) (*Task, error) {
	if err := ParseID(id); err != nil {
		return nil, err
	}
	t, etag, err := s.read(ctx, id)
	if err != nil {
		return nil, err
	}
	e := event{kind: evRetry}
	if t.Retryable() {
		// Verify the input again: the attempt may have failed because it
		// was replaced after Submit, and retrying those same checks forever
		// would help nobody.
		if e.inputETag, e.inputSize, err = s.checkInput(ctx, s.submittedInput(t)); err != nil {
			if errors.Is(err, ErrInputMissing) {
				// A Purge deletes the input after locking the record: if
				// that is why, say so.
				if now, _, rerr := s.read(ctx, id); rerr != nil {
					return nil, rerr
				} else if _, _, terr := transition(now, e, s.serverNow()); terr != nil {
					return nil, terr
				}
			}
			return nil, err
		}
	}
	got, changed, err := s.apply(ctx, t, etag, e)
	if err != nil || !changed {
		return got, err
	}
	s.wake(ctx, s.MarkerKey(got))
	return got, nil
}

// Cancel abandons a task that is not finished and returns it; reason is kept
// in the record (at most 1024 bytes). A running task's worker sees the change
// at its next heartbeat, cancels its handler's context with [ErrTaskCanceled]
// and writes nothing more. Cancelling an abandoned task changes nothing.
// Requests: GET, PUT record, and DELETE of the marker of a task that had one
// (queued, running, or waiting for a retry); with an OnTerminal hook, a task
// never submitted also gets a marker first (one PUT), so that its notice is
// delivered by a worker if this call cannot.
//
// Errors: [ErrInvalidID]; [ErrInvalidArgument] for a long reason;
// [ErrNotFound]; a *[TransitionError] for a completed task; [ErrConflict];
// [ErrOutcomeUnknown]; S3 errors otherwise. On every error but
// ErrOutcomeUnknown the record is unchanged.
func (s *Store) Cancel(ctx context.Context, id, reason string) (*Task, error) {
	if len(reason) > 1024 || !utf8.ValidString(reason) {
		return nil, invalidArg("cancel reason must be at most 1024 bytes of UTF-8")
	}
	if err := ParseID(id); err != nil {
		return nil, err
	}
	t, etag, err := s.read(ctx, id)
	if err != nil {
		return nil, err
	}
	got, changed, err := s.apply(ctx, t, etag, event{kind: evCancel, reason: reason, notify: s.opts.OnTerminal != nil})
	if err != nil {
		return nil, err
	}
	if changed && got.NotifyPending {
		s.settle(ctx, got, "")
	}
	return got, nil
}

// Schedule sets the earliest time a created or queued task may start (by
// the S3 server's clock, rounded up to a whole millisecond), and returns
// it. A queued task's marker moves to
// that time, so no worker looks at it before, and one starts it within
// PollInterval after, without listing in between; zero (or a time past)
// makes a scheduled task run now. Requests: GET, PUT marker, PUT record,
// DELETE old marker, and GET and PUT wake when the task is due now; a
// created task only gets its record written.
//
// Errors: [ErrInvalidID]; [ErrNotFound]; a *[TransitionError] unless the
// task is created or queued; [ErrConflict]; [ErrOutcomeUnknown]; S3 errors
// otherwise. On every error but ErrOutcomeUnknown the record is unchanged.
func (s *Store) Schedule(ctx context.Context, id string, at time.Time) (*Task, error) {
	got, changed, err := s.change(ctx, id, event{kind: evSchedule, at: runAt(at)})
	if err != nil {
		return nil, err
	}
	if changed && got.Status == StatusQueued && !got.Scheduled(s.serverNow()) {
		s.wake(ctx, s.MarkerKey(got))
	}
	return got, nil
}

// runAt returns a caller's start time as kept in the record: in UTC,
// rounded up to a whole millisecond, the resolution of marker names.
func runAt(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return ceilMS(t.UTC())
}

// ListOptions selects a page of tasks.
type ListOptions struct {
	// Limit is the most tasks a page holds, 1 to [MaxListLimit]; zero means
	// [DefaultListLimit].
	Limit int
	// Cursor continues a listing from Page.NextCursor; empty starts at the
	// newest task.
	Cursor string
}

// Page is one page of tasks, newest first.
type Page struct {
	// Tasks holds the readable records in the page, newest first.
	Tasks []*Task
	// Broken holds the task folders in the page whose record could not be
	// used (corrupt, a newer schema, or missing), each with its key. They
	// take a place in the page but never hide the others.
	Broken []*RecordError
	// NextCursor continues the listing; it is empty on the last page.
	NextCursor string
}

// List returns a page of tasks, newest first. A page costs one LIST plus one
// GET per task in it, read concurrently (StoreOptions.ListConcurrency at a
// time); its cost depends on the page size, never on how many tasks the bucket
// holds. The cursor is opaque: pass back Page.NextCursor as it is.
//
// Errors: [ErrInvalidArgument] for a bad limit; [ErrInvalidCursor]; S3
// errors for the LIST (a failed record read lands in Page.Broken instead).
func (s *Store) List(ctx context.Context, opts ListOptions) (*Page, error) {
	limit := opts.Limit
	switch {
	case limit == 0:
		limit = DefaultListLimit
	case limit < 0 || limit > MaxListLimit:
		return nil, invalidArg("list limit %d, want 1 to %d", limit, MaxListLimit)
	}
	after := ""
	if opts.Cursor != "" {
		var err error
		if after, err = decodeCursor(opts.Cursor); err != nil {
			return nil, err
		}
	}
	ids, next, err := s.listFolders(ctx, after, limit)
	if err != nil {
		return nil, err
	}
	page := &Page{}
	if next != "" {
		page.NextCursor = encodeCursor(next)
	}
	page.Tasks, page.Broken = s.readMany(ctx, ids)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return page, nil
}

// listFolders makes one LIST of the task folders, newest first, starting
// after position after (relative to the prefix; "" for the newest). It
// returns the task IDs in it and the position to continue from, "" at the
// end.
func (s *Store) listFolders(ctx context.Context, after string, limit int) (ids []string, next string, err error) {
	in := &s3.ListObjectsV2Input{
		Bucket:    &s.bucket,
		Prefix:    &s.opts.Prefix,
		Delimiter: aws.String("/"),
		MaxKeys:   aws.Int32(int32(limit)),
	}
	if after != "" {
		in.StartAfter = aws.String(s.opts.Prefix + after)
	}
	out, err := s.client.ListObjectsV2(ctx, in)
	if err != nil {
		return nil, "", fmt.Errorf("s3task: list %s: %w", s.opts.Prefix, err)
	}
	s.observe(out.ResultMetadata)

	// The next page starts after the greatest entry of this one, folder or
	// stray object. Every key inside folder name/ sorts below name+"0" ('0'
	// follows '/') and no other key sorts between them, so for a folder
	// that is the position to continue from.
	last := ""
	for _, cp := range out.CommonPrefixes {
		name := strings.TrimSuffix(strings.TrimPrefix(aws.ToString(cp.Prefix), s.opts.Prefix), "/")
		last = max(last, name+"0")
		if ParseID(name) == nil {
			ids = append(ids, name)
		}
	}
	for _, obj := range out.Contents {
		last = max(last, strings.TrimPrefix(aws.ToString(obj.Key), s.opts.Prefix))
	}
	// Task IDs start with '0' to '7'; the marker folder, the wake object and
	// anything else after them cannot hide a task, so a page that reached
	// them is the last.
	if aws.ToBool(out.IsTruncated) && last != "" && last[0] <= '7' {
		next = last
	}
	return ids, next, nil
}

// readMany reads the records of ids, StoreOptions.ListConcurrency at a
// time, and returns the readable ones and the others, each in the order of
// ids.
func (s *Store) readMany(ctx context.Context, ids []string) ([]*Task, []*RecordError) {
	tasks := make([]*Task, len(ids))
	errs := make([]error, len(ids))
	sem := make(chan struct{}, s.opts.ListConcurrency)
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			tasks[i], _, errs[i] = s.read(ctx, id)
		}()
	}
	wg.Wait()
	var good []*Task
	var broken []*RecordError
	for i, t := range tasks {
		if t != nil {
			good = append(good, t)
			continue
		}
		var re *RecordError
		if !errors.As(errs[i], &re) {
			re = &RecordError{Key: s.recordKey(ids[i]), Err: errs[i]}
		}
		broken = append(broken, re)
	}
	return good, broken
}

// walk calls fn with every task record, newest first, a page at a time,
// until fn returns false or the tasks end. It skips tasks created after
// newest (zero: none) by starting the listing past them, stops at the first
// task created before oldest (zero: no limit), and reads at most limit
// records (zero: no limit), reporting whether more tasks were left unread.
// Records that cannot be read go to broken.
func (s *Store) walk(ctx context.Context, newest, oldest time.Time, limit int, fn func(t *Task) bool, broken func(*RecordError)) (more bool, err error) {
	after := ""
	if !newest.IsZero() {
		after = idBound(newest)
	}
	seen := 0
	for {
		size := 1000
		if limit > 0 {
			size = min(size, limit-seen+1) // one more tells whether any are left
		}
		ids, next, err := s.listFolders(ctx, after, size)
		if err != nil {
			return false, err
		}
		if !oldest.IsZero() {
			for i, id := range ids {
				if at, _ := IDTime(id); at.Before(oldest) {
					ids, next = ids[:i], ""
					break
				}
			}
		}
		if limit > 0 && seen+len(ids) > limit {
			ids, next, more = ids[:limit-seen], "", true
		}
		seen += len(ids)
		tasks, bad := s.readMany(ctx, ids)
		if err := ctx.Err(); err != nil {
			return false, err
		}
		for _, re := range bad {
			broken(re)
		}
		for _, t := range tasks {
			if !fn(t) {
				return true, nil
			}
		}
		if next == "" {
			return more, nil
		}
		after = next
	}
}

// idBound returns a listing position after every ID of tasks created after
// t, and before every ID of tasks created at or before t: the inverted time
// of the next millisecond with the largest random part.
func idBound(t time.Time) string {
	var id ulid.ULID
	ms := min(uint64(max(t.UnixMilli()+1, 0)), ulid.MaxTime())
	_ = id.SetTime(ulid.MaxTime() - ms)
	for i := 6; i < 16; i++ {
		id[i] = 0xff
	}
	return id.String()
}

// A cursor is the position after the last entry listed (relative to the
// prefix), base64url-encoded. It never holds a '/', so it cannot reach into
// another folder, and it is only ever used as ListObjectsV2's StartAfter.

func encodeCursor(name string) string { return base64.RawURLEncoding.EncodeToString([]byte(name)) }

func decodeCursor(c string) (string, error) {
	b, err := base64.RawURLEncoding.Strict().DecodeString(c)
	name := string(b)
	if err != nil || name == "" || len(name) > 1024 || strings.Contains(name, "/") || !utf8.ValidString(name) {
		return "", fmt.Errorf("%w: %q", ErrInvalidCursor, c)
	}
	return name, nil
}

// ReconcileOptions selects what [Store.Reconcile] walks.
type ReconcileOptions struct {
	// Since limits the walk to tasks created at or after this time; zero
	// walks every task.
	Since time.Time
	// DryRun reports what would change and changes nothing.
	DryRun bool
}

// ReconcileReport says what [Store.Reconcile] found and did.
type ReconcileReport struct {
	// Tasks is the number of task records read.
	Tasks int
	// Restored lists the tasks that needed a worker but had no marker; their
	// markers were written (unless DryRun).
	Restored []string
	// Removed lists the keys of stale markers that were deleted (unless
	// DryRun): markers of finished tasks, of tasks that no longer exist, of
	// created tasks whose Submit evidently never finished, and objects in
	// the marker folder that are not task IDs.
	Removed []string
	// Broken lists the records that could not be read, with their keys. They
	// are left as they are.
	Broken []*RecordError
}

// Clean reports whether the run found nothing to repair.
func (r *ReconcileReport) Clean() bool {
	return len(r.Restored) == 0 && len(r.Removed) == 0 && len(r.Broken) == 0
}

// Reconcile repairs the marker index against the records, the only truth:
// it writes the missing marker of every task a worker should look at (queued,
// running, failed with a retry scheduled) and removes stale markers. It
// changes no record and no other object, so it is safe to run at any time
// from any number of processes, next to running workers; a marker removed
// while a Retry makes the task pending again is put back. Workers run it
// on their own (WorkerOptions.ReconcileInterval).
//
// Requests: one LIST per 1,000 task folders walked and one GET per task,
// the LISTs of the marker folder, one PUT per restored marker, and a DELETE
// (with a GET to recheck a failed task) per stale one.
//
// Errors: S3 errors from the listings and ctx's, with no report; if some
// repair failed, the report with the first such error (the next run retries
// it). Unreadable records are reported, not returned.
func (s *Store) Reconcile(ctx context.Context, opts ReconcileOptions) (*ReconcileReport, error) {
	markers, stray, err := s.allMarkers(ctx)
	if err != nil {
		return nil, err
	}
	byID := map[string][]marker{}
	for _, m := range markers {
		byID[m.id] = append(byID[m.id], m)
	}
	now := s.serverNow()
	r := &ReconcileReport{}
	var firstErr error
	note := func(err error) {
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	drop := func(key string) {
		r.Removed = append(r.Removed, key)
		if !opts.DryRun {
			note(s.dropMarker(ctx, key))
		}
	}
	_, err = s.walk(ctx, time.Time{}, opts.Since, 0, func(t *Task) bool {
		r.Tasks++
		want, has := s.markerOf(t), false
		for _, m := range byID[t.ID] {
			switch {
			case m.key == want:
				has = true
			case staleMarker(m, t, now):
				drop(m.key)
			}
		}
		delete(byID, t.ID)
		if want != "" && !has {
			r.Restored = append(r.Restored, t.ID)
			if !opts.DryRun {
				note(s.putMarker(ctx, want))
			}
		}
		return true
	}, func(re *RecordError) { r.Broken = append(r.Broken, re) })
	if err != nil {
		return nil, err
	}
	// Markers whose task the walk did not meet: in range, the task has no
	// record (a folder without status.json was reported as broken).
	for id, ms := range byID {
		if at, _ := IDTime(id); at.Before(opts.Since) || brokenID(r.Broken, s.recordKey(id)) {
			continue
		}
		if _, _, err := s.read(ctx, id); !errors.Is(err, ErrNotFound) {
			continue // created since the walk passed it, or unreadable now
		}
		for _, m := range ms {
			drop(m.key)
		}
	}
	for _, key := range stray {
		r.Removed = append(r.Removed, key)
		if !opts.DryRun {
			_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: &key})
			note(err)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(r.Restored) > 0 && !opts.DryRun {
		s.wake(ctx, "") // the restored tasks are new to idle workers
	}
	return r, firstErr
}

func brokenID(broken []*RecordError, key string) bool {
	for _, re := range broken {
		if re.Key == key {
			return true
		}
	}
	return false
}

// StatsOptions bounds what [Store.Stats] reads.
type StatsOptions struct {
	// Since limits the count to tasks created at or after this time; zero
	// means no limit.
	Since time.Time
	// MaxTasks caps the records read, newest first. Zero means
	// [DefaultStatsMaxTasks]; negative means no cap.
	MaxTasks int
	// AttemptsOver counts tasks whose attempt number is above it. Zero means
	// 1: tasks that needed more than one attempt.
	AttemptsOver int
}

// DefaultStatsMaxTasks is the default cap on the records Stats reads.
const DefaultStatsMaxTasks = 1000

// Stats describes the tasks [Store.Stats] read. It tells apart a quiet
// system from a stuck one: what is waiting, for how long, and why things
// failed.
type Stats struct {
	// Tasks is the number of records read.
	Tasks int
	// Truncated says MaxTasks stopped the count before the tasks (or Since)
	// ended: the figures cover the newest Tasks tasks only.
	Truncated bool
	// ByStatus counts the tasks by status.
	ByStatus map[Status]int
	// Unfinished counts the tasks that are not terminal: queued, running, or
	// failed with a retry scheduled. Created tasks, which wait for their
	// upload rather than for a worker, are not counted.
	Unfinished int
	// OldestUnfinished is the oldest unfinished task, nil if none, and
	// OldestUnfinishedAge its age by the S3 server's clock.
	OldestUnfinished    *Task
	OldestUnfinishedAge time.Duration
	// WaitingRetry counts failed tasks with a retry scheduled.
	WaitingRetry int
	// OverAttempts counts the tasks whose attempt number is above
	// StatsOptions.AttemptsOver.
	OverAttempts int
	// Failures counts failed tasks, final or waiting for a retry, by
	// error_category ("permanent", "transient", a handler's own, ...).
	Failures map[string]int
	// Broken counts the records that could not be read.
	Broken int
}

// Stats counts the tasks, newest first, within the bounds of opts. Requests:
// one LIST per 1,000 task folders and one GET per task read: at most
// MaxTasks GETs and MaxTasks/1000+2 LISTs.
//
// Errors: [ErrInvalidArgument] for a negative AttemptsOver; S3 errors and
// ctx's.
func (s *Store) Stats(ctx context.Context, opts StatsOptions) (*Stats, error) {
	if opts.AttemptsOver < 0 {
		return nil, invalidArg("AttemptsOver %d, must not be negative", opts.AttemptsOver)
	}
	over := cmp(opts.AttemptsOver, 1)
	limit := cmp(opts.MaxTasks, DefaultStatsMaxTasks)
	st := &Stats{ByStatus: map[Status]int{}, Failures: map[string]int{}}
	more, err := s.walk(ctx, time.Time{}, opts.Since, max(limit, 0), func(t *Task) bool {
		st.Tasks++
		st.ByStatus[t.Status]++
		if t.Attempt > over {
			st.OverAttempts++
		}
		if t.Status == StatusFailed {
			st.Failures[cmpString(t.ErrorCategory, "unknown")]++
		}
		if t.Status == StatusFailed && !t.Terminal() {
			st.WaitingRetry++
		}
		if t.pending() {
			st.Unfinished++
			st.OldestUnfinished = t // newest first: the last one seen is the oldest
		}
		return true
	}, func(*RecordError) { st.Broken++ })
	if err != nil {
		return nil, err
	}
	st.Truncated = more
	if st.OldestUnfinished != nil {
		st.OldestUnfinishedAge = s.serverNow().Sub(st.OldestUnfinished.CreatedAt)
	}
	return st, nil
}

func cmpString(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// PurgeOptions controls [Store.Purge].
type PurgeOptions struct {
	// DryRun reports what would be deleted and deletes nothing.
	DryRun bool
	// Limit caps the tasks deleted by one call; zero means no cap.
	Limit int
	// DropPendingNotices purges finished tasks whose OnTerminal notice was
	// never delivered too (the hook keeps failing, or was removed from the
	// configuration); those notices are then lost. By default such tasks are
	// kept until their notice goes out.
	DropPendingNotices bool
}

// PurgeReport says what [Store.Purge] found and did.
type PurgeReport struct {
	// Tasks is the number of task records read (all created before the
	// cutoff).
	Tasks int
	// Purged lists the tasks deleted (or, with DryRun, that would be).
	Purged []string
	// Objects is the number of objects deleted, records included.
	Objects int
	// Kept is the number of tasks left because they are not finished.
	Kept int
	// Broken lists the records that could not be read; their folders are
	// left alone.
	Broken []*RecordError
}

// Purge deletes the finished tasks (completed, abandoned, or failed with no
// retry scheduled) created before olderThan, newest first: every object in
// the task's folder, then its marker if any, then the record last. It never
// deletes a task that is queued, running, or waiting for a retry. Before
// deleting anything it marks the record as purging with a compare-and-set,
// after which no transition is allowed, so a Retry that races with it either
// wins first (and the task is kept) or is refused. A purge cut short is
// completed by the next one.
//
// An S3 lifecycle rule can expire the objects under the prefix instead, with
// no requests from here; but a rule goes by object age, not by task status,
// so it would delete a long-waiting task's record as readily as a finished
// one. Use it only with an expiry well beyond any task's life.
//
// Requests: one LIST per 1,000 task folders walked and one GET per task;
// per task deleted, a PUT (the purging mark), a LIST of its folder, one
// DeleteObjects per 1,000 objects, a DELETE of the marker and one of the
// record.
//
// Errors: [ErrInvalidArgument] for a zero cutoff or a negative limit; S3
// errors and ctx's, with the report of what was done so far.
func (s *Store) Purge(ctx context.Context, olderThan time.Time, opts PurgeOptions) (*PurgeReport, error) {
	if olderThan.IsZero() {
		return nil, invalidArg("purge needs a cutoff time")
	}
	if opts.Limit < 0 {
		return nil, invalidArg("purge limit %d, must not be negative", opts.Limit)
	}
	r := &PurgeReport{}
	var err error
	_, werr := s.walk(ctx, olderThan.Add(-time.Millisecond), time.Time{}, 0, func(t *Task) bool {
		r.Tasks++
		if !t.Terminal() {
			r.Kept++
			return true
		}
		if t.NotifyPending && !opts.DropPendingNotices {
			r.Kept++ // its notice has not gone out yet
			return true
		}
		if opts.DryRun {
			r.Purged = append(r.Purged, t.ID)
			return opts.Limit == 0 || len(r.Purged) < opts.Limit
		}
		var n int
		n, err = s.purgeTask(ctx, t.ID, opts.DropPendingNotices)
		r.Objects += n
		switch {
		case errors.Is(err, ErrInvalidTransition):
			r.Kept++ // a Retry got there first
			err = nil
		case err != nil:
			return false
		default:
			r.Purged = append(r.Purged, t.ID)
		}
		return opts.Limit == 0 || len(r.Purged) < opts.Limit
	}, func(re *RecordError) { r.Broken = append(r.Broken, re) })
	return r, errors.Join(werr, err)
}

// purgeTask locks a finished task's record for deletion and deletes its
// folder, marker and record, in that order. It returns the number of objects
// deleted.
func (s *Store) purgeTask(ctx context.Context, id string, force bool) (int, error) {
	t, _, err := s.change(ctx, id, event{kind: evPurge, force: force})
	if err != nil {
		return 0, err
	}
	dir, record := s.taskDir(id), s.recordKey(id)
	deleted := 0
	in := &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: &dir}
	for {
		out, err := s.client.ListObjectsV2(ctx, in)
		if err != nil {
			return deleted, fmt.Errorf("s3task: list %s: %w", dir, err)
		}
		var objs []types.ObjectIdentifier
		for _, obj := range out.Contents {
			if aws.ToString(obj.Key) != record {
				objs = append(objs, types.ObjectIdentifier{Key: obj.Key})
			}
		}
		if len(objs) > 0 {
			res, err := s.client.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: &s.bucket, Delete: &types.Delete{Objects: objs, Quiet: aws.Bool(true)}})
			if err != nil {
				return deleted, fmt.Errorf("s3task: delete objects of %s: %w", dir, err)
			}
			if len(res.Errors) > 0 {
				e := res.Errors[0]
				return deleted, fmt.Errorf("s3task: delete %s: %s: %s", aws.ToString(e.Key), aws.ToString(e.Code), aws.ToString(e.Message))
			}
			deleted += len(objs)
		}
		if !aws.ToBool(out.IsTruncated) || out.NextContinuationToken == nil {
			break
		}
		in.ContinuationToken = out.NextContinuationToken
	}
	for _, key := range []string{s.MarkerKey(t), record} {
		if _, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: &key}); err != nil {
			return deleted, fmt.Errorf("s3task: delete %s: %w", key, err)
		}
	}
	return deleted + 1, nil
}

// PresignedRequest is a presigned S3 request a client can send without
// credentials until Expires.
type PresignedRequest struct {
	Method  string
	URL     string
	Header  http.Header // headers the client must send exactly as given
	Expires time.Time
}

// PresignedForm is a presigned browser-style POST upload. Send a
// multipart/form-data POST to URL with every field of Fields, then the file in
// a field named "file" (it must come last). S3 refuses a file larger than
// MaxSize.
type PresignedForm struct {
	URL     string
	Fields  map[string]string
	MaxSize int64
	Expires time.Time
}

// MaxPresignTTL is the longest lifetime S3 allows for a presigned URL.
const MaxPresignTTL = 7 * 24 * time.Hour

func checkTTL(ttl time.Duration) error {
	if ttl < time.Second || ttl > MaxPresignTTL {
		return invalidArg("presign TTL %s, want 1s to %s", ttl, MaxPresignTTL)
	}
	return nil
}

// checkUpload verifies that the task exists and still takes an input.
func (s *Store) checkUpload(ctx context.Context, id string, ttl time.Duration) error {
	if err := ParseID(id); err != nil {
		return err
	}
	if err := checkTTL(ttl); err != nil {
		return err
	}
	t, _, err := s.read(ctx, id)
	if err != nil {
		return err
	}
	_, _, err = transition(t, event{kind: evUpload}, s.serverNow())
	return err
}

// PresignUpload returns a presigned PUT of the task's input, valid for ttl.
// It is only issued while the task is created. Its signed headers include
// If-None-Match: *, which the client must send as given (Header): S3 then
// refuses a second upload, so the input Submit verifies cannot be replaced. A PUT cannot cap the size of
// what is sent; Submit checks it afterwards, or use [Store.PresignUploadForm].
// Requests: one GET (presigning itself is local).
//
// Errors: [ErrInvalidID]; [ErrInvalidArgument] for a TTL outside 1s to 7 days;
// [ErrNotFound]; a *[TransitionError] once the task is submitted.
func (s *Store) PresignUpload(ctx context.Context, id string, ttl time.Duration) (*PresignedRequest, error) {
	if err := s.checkUpload(ctx, id, ttl); err != nil {
		return nil, err
	}
	return s.presignPut(ctx, id, ttl)
}

// PresignUploadForm returns a presigned POST form for the task's input, valid
// for ttl, whose policy makes S3 refuse a file over
// StoreOptions.MaxInputSize. It is only issued while the task is created.
// Requests: one GET.
//
// Errors: as [Store.PresignUpload].
func (s *Store) PresignUploadForm(ctx context.Context, id string, ttl time.Duration) (*PresignedForm, error) {
	if err := s.checkUpload(ctx, id, ttl); err != nil {
		return nil, err
	}
	return s.presignForm(ctx, id, ttl)
}

// Upload is how a client sends a task's input straight to S3: a presigned
// PUT, or a presigned POST form capped at StoreOptions.MaxInputSize. Either
// will do.
type Upload struct {
	Put  *PresignedRequest
	Form *PresignedForm
}

// CreateForUpload is [Store.Create] followed by presigning the input's
// upload, valid for ttl, for the common case of a client that uploads right
// away: it saves the record read that PresignUpload makes. Requests: one
// PUT.
//
// Errors: as Create, and [ErrInvalidArgument] for a TTL outside 1s to 7
// days (nothing is created then).
func (s *Store) CreateForUpload(ctx context.Context, p CreateParams, ttl time.Duration) (*Task, *Upload, error) {
	if err := checkTTL(ttl); err != nil {
		return nil, nil, err
	}
	t, err := s.Create(ctx, p)
	if err != nil {
		return nil, nil, err
	}
	put, err := s.presignPut(ctx, t.ID, ttl)
	if err != nil {
		return nil, nil, err
	}
	form, err := s.presignForm(ctx, t.ID, ttl)
	if err != nil {
		return nil, nil, err
	}
	return t, &Upload{Put: put, Form: form}, nil
}

func (s *Store) presignPut(ctx context.Context, id string, ttl time.Duration) (*PresignedRequest, error) {
	key := s.inputKey(id)
	req, err := s.presign.PresignPutObject(ctx, &s3.PutObjectInput{Bucket: &s.bucket, Key: &key, IfNoneMatch: aws.String("*")}, s3.WithPresignExpires(ttl))
	if err != nil {
		return nil, fmt.Errorf("s3task: presign upload %s: %w", key, err)
	}
	return &PresignedRequest{Method: req.Method, URL: req.URL, Header: req.SignedHeader, Expires: s.opts.Clock().Add(ttl)}, nil
}

func (s *Store) presignForm(ctx context.Context, id string, ttl time.Duration) (*PresignedForm, error) {
	key := s.inputKey(id)
	req, err := s.presign.PresignPostObject(ctx, &s3.PutObjectInput{Bucket: &s.bucket, Key: &key}, func(o *s3.PresignPostOptions) {
		o.Expires = ttl
		o.Conditions = []any{[]any{"content-length-range", 0, s.opts.MaxInputSize}}
	})
	if err != nil {
		return nil, fmt.Errorf("s3task: presign upload form %s: %w", key, err)
	}
	return &PresignedForm{URL: req.URL, Fields: req.Values, MaxSize: s.opts.MaxInputSize, Expires: s.opts.Clock().Add(ttl)}, nil
}

// UploadInput stores r as the task's input, for producers that run next to
// the service. It is only allowed while the task is created; it does not
// submit. If r is not an io.Seeker it is first copied to a temporary file, so
// memory stays bounded. The input is written once, with If-None-Match: *,
// so it cannot be replaced after Submit verified it. Requests: GET, PUT
// (plus a HEAD if the outcome was unclear).
//
// Errors: [ErrInvalidID]; [ErrNotFound]; a *[TransitionError] once the task is
// submitted; [ErrInputExists] if the task already has its input; an
// *[InputSizeError] over StoreOptions.MaxInputSize (nothing is uploaded);
// I/O and S3 errors otherwise.
func (s *Store) UploadInput(ctx context.Context, id string, r io.Reader) error {
	if err := s.checkUpload(ctx, id, time.Minute); err != nil {
		return err
	}
	key := s.inputKey(id)
	body, size, cleanup, err := seekable(r, s.opts.MaxInputSize)
	if err != nil {
		var se *InputSizeError
		if errors.As(err, &se) {
			se.Key = key
		}
		return err
	}
	defer cleanup()
	switch created, err := s.createObject(ctx, key, body, size); {
	case err != nil:
		return fmt.Errorf("s3task: upload %s: %w", key, err)
	case !created:
		return fmt.Errorf("%w: %s", ErrInputExists, key)
	}
	return nil
}

// createObject creates the object key from body, with If-None-Match: * so
// that it never replaces one. It reports false if the key was taken. When a
// refusal may answer the SDK's resend of our own write whose response was
// lost, a token in the object's metadata tells whose it is.
func (s *Store) createObject(ctx context.Context, key string, body io.ReadSeeker, size int64) (bool, error) {
	token := newRevision()
	_, err := s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket: &s.bucket, Key: &key, Body: body, ContentLength: aws.Int64(size),
		IfNoneMatch: aws.String("*"),
		Metadata:    map[string]string{"s3task-token": token},
	})
	if err == nil || !s3x.Lost(err) {
		return err == nil, err
	}
	head, herr := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: &key})
	if herr != nil {
		return false, fmt.Errorf("%w (and checking the object: %w)", err, herr)
	}
	return head.Metadata["s3task-token"] == token, nil
}

// seekable returns r as a ReadSeeker positioned at its start, with its size,
// spooling it to a temporary file if r cannot seek. More than limit bytes is
// an *InputSizeError.
func seekable(r io.Reader, limit int64) (io.ReadSeeker, int64, func(), error) {
	if rs, ok := r.(io.ReadSeeker); ok {
		start, err := rs.Seek(0, io.SeekCurrent)
		if err != nil {
			return nil, 0, nil, err
		}
		end, err := rs.Seek(0, io.SeekEnd)
		if err != nil {
			return nil, 0, nil, err
		}
		if _, err := rs.Seek(start, io.SeekStart); err != nil {
			return nil, 0, nil, err
		}
		if end-start > limit {
			return nil, 0, nil, &InputSizeError{Size: end - start, Limit: limit}
		}
		return io.NewSectionReader(readerAt{rs, start}, 0, end-start), end - start, func() {}, nil
	}
	f, err := os.CreateTemp("", "s3task-*")
	if err != nil {
		return nil, 0, nil, err
	}
	cleanup := func() { f.Close(); os.Remove(f.Name()) }
	src := r
	if limit < math.MaxInt64 {
		src = io.LimitReader(r, limit+1) // one byte more tells "too large"
	}
	n, err := io.Copy(f, src)
	if err == nil && n > limit {
		err = &InputSizeError{Size: n, Limit: limit}
	}
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		cleanup()
		return nil, 0, nil, err
	}
	return f, n, cleanup, nil
}

// readerAt adapts a ReadSeeker for io.SectionReader. It is only used by one
// goroutine at a time.
type readerAt struct {
	rs    io.ReadSeeker
	start int64
}

func (r readerAt) ReadAt(p []byte, off int64) (int, error) {
	if _, err := r.rs.Seek(r.start+off, io.SeekStart); err != nil {
		return 0, err
	}
	return io.ReadFull(r.rs, p)
}

// completedOutput returns the output key of a completed task.
func (s *Store) completedOutput(ctx context.Context, id string) (string, error) {
	if err := ParseID(id); err != nil {
		return "", err
	}
	t, _, err := s.read(ctx, id)
	if err != nil {
		return "", err
	}
	if t.Status != StatusCompleted {
		return "", fmt.Errorf("%w: task %s is %s", ErrNotCompleted, id, t.Status)
	}
	// The key is derived from the attempt, never taken from the record, so
	// a tampered record cannot point outside the task's folder.
	return s.outputKey(id, t.Attempt), nil
}

// PresignDownload returns a presigned GET of a completed task's output, valid
// for ttl. Requests: one GET.
//
// Errors: [ErrInvalidID]; [ErrInvalidArgument] for a TTL outside 1s to 7 days;
// [ErrNotFound]; [ErrNotCompleted].
func (s *Store) PresignDownload(ctx context.Context, id string, ttl time.Duration) (*PresignedRequest, error) {
	if err := checkTTL(ttl); err != nil {
		return nil, err
	}
	key, err := s.completedOutput(ctx, id)
	if err != nil {
		return nil, err
	}
	name := id + "-output" + s.opts.OutputExt
	req, err := s.presign.PresignGetObject(ctx, &s3.GetObjectInput{
		Bucket:                     &s.bucket,
		Key:                        &key,
		ResponseContentDisposition: aws.String(`attachment; filename="` + name + `"`),
	}, s3.WithPresignExpires(ttl))
	if err != nil {
		return nil, fmt.Errorf("s3task: presign download %s: %w", key, err)
	}
	return &PresignedRequest{Method: req.Method, URL: req.URL, Header: req.SignedHeader, Expires: s.opts.Clock().Add(ttl)}, nil
}

// OpenOutput opens a completed task's output for reading; the caller closes
// it. Requests: two GETs.
//
// Errors: [ErrInvalidID]; [ErrNotFound] (also when the output object is
// gone); [ErrNotCompleted]; S3 errors otherwise.
func (s *Store) OpenOutput(ctx context.Context, id string) (io.ReadCloser, error) {
	key, err := s.completedOutput(ctx, id)
	if err != nil {
		return nil, err
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &key})
	if err != nil {
		if s3x.NotFound(err) {
			return nil, fmt.Errorf("%w: output %s", ErrNotFound, key)
		}
		return nil, fmt.Errorf("s3task: open output %s: %w", key, err)
	}
	return out.Body, nil
}

// CheckBackend proves that the bucket enforces conditional writes, without
// which two workers could both claim one task. Under the prefix it creates a
// scratch object with If-None-Match: *, tries to create it again (must be
// refused), tries to overwrite it with a wrong If-Match ETag (must be
// refused), then deletes it. Requests: three PUTs and one DELETE.
//
// Errors: [ErrConditionalWritesUnsupported] (wrapping what the store did)
// when a refused write went through or the headers are not implemented; S3
// errors otherwise.
func (s *Store) CheckBackend(ctx context.Context) error {
	key := s.opts.Prefix + "_check/" + NewID()
	put := func(body string, ifNoneMatch, ifMatch *string) error {
		out, err := s.client.PutObject(ctx, &s3.PutObjectInput{
			Bucket: &s.bucket, Key: &key, Body: strings.NewReader(body),
			ContentLength: aws.Int64(int64(len(body))), IfNoneMatch: ifNoneMatch, IfMatch: ifMatch,
		})
		if err == nil {
			s.observe(out.ResultMetadata) // learn the server's clock before the first task
		}
		return err
	}
	defer func() {
		// Best effort: a leftover scratch object is harmless.
		_, _ = s.client.DeleteObject(context.WithoutCancel(ctx), &s3.DeleteObjectInput{Bucket: &s.bucket, Key: &key})
	}()
	unsupported := func(what string, err error) error {
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrConditionalWritesUnsupported, what, err)
		}
		return fmt.Errorf("%w: %s", ErrConditionalWritesUnsupported, what)
	}
	if err := put("first", aws.String("*"), nil); err != nil {
		if s3x.NotImplemented(err) {
			return unsupported("If-None-Match is not implemented", err)
		}
		return fmt.Errorf("s3task: check backend: create %s: %w", key, err)
	}
	switch err := put("second", aws.String("*"), nil); {
	case err == nil:
		return unsupported("a second If-None-Match: * create of one key succeeded", nil)
	case !s3x.Lost(err):
		return unsupported("a second If-None-Match: * create failed in an unexpected way", err)
	}
	switch err := put("third", nil, aws.String(`"00000000000000000000000000000000"`)); {
	case err == nil:
		return unsupported("a write with a wrong If-Match ETag succeeded", nil)
	case !s3x.Lost(err):
		return unsupported("a write with a wrong If-Match ETag failed in an unexpected way", err)
	}
	return nil
}
