package s3task

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/s3task/s3task/internal/s3x"
)

// newRevision returns a fresh random revision tag.
func newRevision() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// revision returns a fresh revision tag for a write of the object key,
// from the store's randomness.
func (s *Store) revision(key string) string {
	if s.rnd == nil {
		return newRevision()
	}
	var b [8]byte
	s.rnd.Read("rev/"+key, b[:])
	return hex.EncodeToString(b[:])
}

// read fetches a task's record and its ETag.
func (s *Store) read(ctx context.Context, id string) (*record, string, error) {
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

// errGone is wrapped, beside ErrOutcomeUnknown, when a write's outcome is
// unknown because the record was deleted (purged) since: a worker's lease
// is over either way.
var errGone = errors.New("s3task: record deleted")

// errUntold is wrapped, beside ErrOutcomeUnknown, when a write's outcome
// is unknown because the record, read back, cannot tell: more writes
// followed than it remembers, or a writer that keeps no count wrote. The
// record as read is returned with it, for the caller to decide again
// against (see apply).
var errUntold = errors.New("s3task: the record cannot tell whether the write landed")

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
// as it was); or the record cannot tell (ErrOutcomeUnknown with errUntold),
// is gone (with errGone), or cannot be read in time (ErrOutcomeUnknown).
// With errLost, errOvertaken and errUntold it returns the fresh record and
// ETag, so the caller can decide again without another GET.
func (s *Store) commit(ctx context.Context, cur *record, etag string, next *record) (*record, string, error) {
	n := next.clone()
	key := s.recordKey(n.ID)
	succeed(cur, n, s.revision(key))
	n.UpdatedAt = s.stamp()
	body, err := encodeRecord(n)
	if err != nil {
		return nil, "", fmt.Errorf("s3task: encode record %s: %w", n.ID, err)
	}
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
	case errors.Is(rerr, ErrNotFound) && cur == nil:
		return nil, "", fmt.Errorf("s3task: write %s: %w", key, err) // never created
	case errors.Is(rerr, ErrNotFound):
		// Purge deleted the task, the only way a record goes. Before our
		// write or after it landed? A refusal may answer the SDK's resend
		// of a write that landed, so it cannot tell.
		s.reached("commit/gone")
		return nil, "", fmt.Errorf("%w: write %s: %w, and the record is gone since: %w", ErrOutcomeUnknown, key, err, errGone)
	case rerr != nil:
		return nil, "", fmt.Errorf("%w: write %s: %w (and reading it back: %w)", ErrOutcomeUnknown, key, err, rerr)
	}
	switch landed(cur, n, now) {
	case landedHere:
		s.reached("commit/landed-after-doubt")
		return now, nowETag, nil
	case overtaken:
		s.reached("commit/overtaken")
		return now, nowETag, errOvertaken
	case notLanded:
		s.reached("commit/not-landed")
		if s3x.Lost(err) {
			return now, nowETag, errLost
		}
		return nil, "", fmt.Errorf("s3task: write %s: %w", key, err)
	}
	s.reached("commit/unknown")
	return now, nowETag, fmt.Errorf("%w: write %s: %w, and %d writes followed it: %w", ErrOutcomeUnknown, key, err, now.Writes-n.Writes, errUntold)
}

// reread reads a record after a doubtful write (see persist): a claim
// whose answer was lost must not be given up because one read failed.
func (s *Store) reread(ctx context.Context, id string) (t *record, etag string, err error) {
	final := func(err error) bool {
		var re *RecordError
		return errors.Is(err, ErrNotFound) || errors.As(err, &re)
	}
	err = s.persist(ctx, "reread/"+id, final, func(ctx context.Context) (err error) {
		t, etag, err = s.read(ctx, id)
		return err
	})
	if err != nil {
		return nil, "", err
	}
	return t, etag, nil
}

// persist runs read, which settles a doubtful write, until it succeeds or
// fails in a way final calls for good. A read that fails for a passing
// reason is tried again with backoff for up to settleWithin, or until ctx
// ends; then the last error is returned.
func (s *Store) persist(ctx context.Context, label string, final func(error) bool, read func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, settleWithin)
	defer cancel()
	for try := 0; ; try++ {
		err := read(ctx)
		if err == nil || final(err) {
			return err
		}
		if !sleepCtx(ctx, s.backoff(label, try, 250*time.Millisecond, 4*time.Second)) {
			return err
		}
	}
}

// backoff returns the wait before try number try (from 0): first about
// base, doubling up to about most, the second half of each wait random.
func (s *Store) backoff(label string, try int, base, most time.Duration) time.Duration {
	d := min(base<<min(try, 20), most)
	return d/2 + s.jitter(label, d/2)
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
//
// An operator's change (submit, retry, cancel, schedule) whose write's
// answer was lost is settled the same way when the record, read back,
// cannot tell whether the write landed (errUntold): it decides again
// against that record, with the event marked unsure, so that a state the
// write leads to counts as the change made (see reached) and any other is
// decided afresh; the try counts as a lost one. Having been unsure, it
// reports a change found made as its own: the write may have been it. The
// markers the write in doubt may have left (that of the record it was
// made over, and its own) are deleted once the record has moved on,
// unless it calls for them. Only a record that cannot be read back in
// time (or is gone) leaves the outcome unknown.
func (s *Store) apply(ctx context.Context, t *record, etag string, e event) (*record, bool, error) {
	var left []string // markers a write in doubt may have left behind (see commitMarked)
	for try := 0; ; try++ {
		next, write, err := transition(t, e, s.serverNow())
		if err != nil || !write {
			for _, key := range left {
				if key != "" && key != s.markerOf(t) {
					_ = s.dropMarker(ctx, key)
				}
			}
		}
		if err != nil {
			return nil, false, err
		}
		if !write {
			return t, e.unsure, nil
		}
		if try > s.opts.ConflictRetries {
			return nil, false, fmt.Errorf("%w: task %s changed %d times in a row", ErrConflict, t.ID, try)
		}
		if try > 0 && !sleepCtx(ctx, s.backoff("apply/"+t.ID, try-1, 20*time.Millisecond, time.Second)) {
			return nil, false, ctx.Err()
		}
		got, gotETag, err := s.commitMarked(ctx, t, etag, next, left...)
		switch {
		case err == nil, errors.Is(err, errOvertaken):
			return got, true, nil
		case errors.Is(err, errUntold) && hasGoal(e.kind):
			// Whether the write landed, the record cannot tell; what it
			// shows now can: the change made, or still to make. The
			// markers of the record written over, and of the write, go
			// once the record has moved on, unless it calls for them.
			s.reached("apply/settle")
			if !e.unsure {
				e.unsure, e.attempt = true, t.Attempt
			}
			for _, key := range []string{s.markerOf(t), s.markerOf(next)} {
				if !slices.Contains(left, key) {
					left = append(left, key)
				}
			}
		case !errors.Is(err, errLost):
			return nil, false, err
		}
		// Decide again against what is there now: the goal may be reached
		// already (a concurrent Cancel, or the write in doubt), or no
		// longer allowed. A state short of the goal proves that no write
		// of this call landed, so every error from here on is the record
		// as it was.
		t, etag = got, gotETag
	}
}

// hasGoal reports whether events of kind k are operator's changes that
// name a goal (see reached), so that apply settles a write of one whose
// outcome the record cannot tell by deciding again.
func hasGoal(k eventKind) bool {
	return k == evSubmit || k == evRetry || k == evCancel || k == evSchedule
}

// change reads task id and applies e; see apply.
func (s *Store) change(ctx context.Context, id string, e event) (*record, bool, error) {
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
func (s *Store) settle(ctx context.Context, t *record, etag string) {
	if t.NotifyPending && s.opts.OnTerminal == nil {
		return // a store with the hook will deliver it
	}
	_ = s.deliver(ctx, t, etag)
}
