package s3task

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/s3task/s3task/internal/kit"
	"github.com/s3task/s3task/internal/s3x"
)

// An idempotency key names a task by the caller's own word, such as a form's
// submission token or an upstream event ID, so that creating it twice makes
// one task. Each key has an object, <prefix>_keys/<sha256 of the key>,
// holding the ID of the task it names. The first Create writes it with
// If-None-Match: * and then the task's record; every later one reads it and
// returns that task.
//
// The key's object and the task's record are two objects, and S3 cannot
// write both at once, so time closes the gaps:
//
//   - A record for the task a key names is written only within
//     keyAdoptWithin of the key's object being written: by the Create that
//     wrote it, or, if that one has not (it is slow, or died in between),
//     by a later Create that finds the record missing, under the same ID,
//     with If-None-Match: * so that only one of them makes it.
//   - A key naming a task that has no record keyStaleAfter after it was
//     written will never get one: its writer gave up. The next Create
//     takes the key over with a compare-and-set (If-Match on the key's
//     object) and makes a new task.
//   - Purge keeps a finished keyed task until keyHold after its key was
//     written, far beyond keyAdoptWithin, so no write of a Create still in flight
//     can bring a purged task back, and it never deletes the key's object:
//     a delete racing with a new Create of the same key (another Purge's,
//     or a late copy of its own request) could delete the new task's key,
//     and a third Create would then make a second live task for it.
//     Instead, once the record is marked purging and before it is deleted,
//     Purge rewrites the key's object, with If-Match, as a tombstone
//     ("purged " and the ID, 33 bytes) that says the task existed and is
//     gone. A Create takes a tombstone (or a key whose task is being
//     purged) over at once and makes a new task; an Ingest never does (see
//     keyPolicy): a version that was ingested and purged is not ingested
//     again. A key whose task has no record and no tombstone cannot tell a
//     purge by an earlier version of the library from a writer that gave
//     up, and is taken over as above.
//
// These hold as long as S3 applies a request within keyAdoptWithin of its
// being sent, or not at all.

// maxKeyLen bounds an idempotency key.
const maxKeyLen = 256

// The lifetime of an idempotency key; see above.
const (
	keyAdoptWithin = time.Minute
	keyStaleAfter  = 2 * keyAdoptWithin
	keyHold        = 10 * time.Minute
)

// keyTries bounds the rounds of a keyed Create that lose a race for the
// key's object before it returns ErrConflict.
const keyTries = 4

// keyObject returns the object key of the idempotency key's object, key in
// scope: the SHA-256 of the key alone in the empty scope (as earlier
// versions name it), and of the scope, a NUL and the key in any other. A
// key and a scope are printable, so no two pairs share a name.
func (s *Store) keyObject(scope, key string) string {
	name := key
	if scope != "" {
		name = scope + "\x00" + key
	}
	sum := sha256.Sum256([]byte(name))
	return s.opts.Prefix + "_keys/" + hex.EncodeToString(sum[:])
}

// foundKeyed returns t, the task a keyed create found its key naming, as
// Get would: through the middleware, as an OpGet with t as Call.Task, so
// that a check that refuses to read t refuses the create too.
func (s *Store) foundKeyed(ctx context.Context, t *record) (*Task, error) {
	if kit.Bypassed(ctx) {
		return t.task(), nil
	}
	return s.do(ctx, &Call{Op: OpGet, TaskID: t.ID, Task: t.Task.clone(), read: true, readID: t.ID, rec: t})
}

// checkKey validates an idempotency key: 1 to 256 bytes of printable UTF-8.
func checkKey(key string) error {
	if len(key) > maxKeyLen || !utf8.ValidString(key) || strings.IndexFunc(key, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return invalidArg("CreateParams.Key must be at most %d bytes of printable UTF-8", maxKeyLen)
	}
	return nil
}

// keyRef is what a key's object says: the task it names, whether that
// task was purged (the object is a tombstone), and when it was written
// (the server's clock).
type keyRef struct {
	id      string
	purged  bool
	etag    string
	written time.Time
}

// tombstonePrefix starts the body of a key's object whose task was purged.
const tombstonePrefix = "purged "

// keyPolicy is what a keyed create does with a key whose task was purged,
// or whose task it may replace. The zero policy is Create's: it takes a
// purged task's key over, and returns any other task it finds.
type keyPolicy struct {
	// keepPurged: a purged task's key is never taken over; the create
	// fails with a *PurgedError.
	keepPurged bool
	// renew, if not nil, reports whether a task the key names may be
	// replaced under the key by a new task: the old one stays on record.
	renew func(*record) bool
}

// claimKey makes the key's object obj name the task id: it creates it, or
// with etag replaces the object that has that ETag. It returns what the
// object says afterwards: id if this call wrote it.
func (s *Store) claimKey(ctx context.Context, obj, etag, id string) (keyRef, error) {
	in := &s3.PutObjectInput{
		Bucket: &s.bucket, Key: &obj, Body: strings.NewReader(id), ContentLength: aws.Int64(int64(len(id))),
	}
	if etag == "" {
		in.IfNoneMatch = aws.String("*")
	} else {
		in.IfMatch = aws.String(etag)
	}
	out, err := s.client.PutObject(ctx, in)
	switch {
	case err == nil:
		s.observe(out.ResultMetadata)
		return keyRef{id: id, etag: aws.ToString(out.ETag), written: s.serverNow()}, nil
	case !s3x.Lost(err):
		return keyRef{}, fmt.Errorf("s3task: write idempotency key %s: %w", obj, err)
	}
	// Taken, or changed; by this very call if the SDK resent a PUT that had
	// landed, and then the object holds our ID.
	return s.readKey(ctx, obj)
}

// readKey reads a key's object. A missing one is ErrNotFound.
func (s *Store) readKey(ctx context.Context, obj string) (keyRef, error) {
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &obj})
	if err != nil {
		if s3x.NotFound(err) {
			return keyRef{}, fmt.Errorf("%w: idempotency key %s", ErrNotFound, obj)
		}
		return keyRef{}, fmt.Errorf("s3task: read idempotency key %s: %w", obj, err)
	}
	defer out.Body.Close()
	s.observe(out.ResultMetadata)
	data, err := io.ReadAll(io.LimitReader(out.Body, 64))
	if err != nil {
		return keyRef{}, fmt.Errorf("s3task: read idempotency key %s: %w", obj, err)
	}
	id, purged := strings.CutPrefix(string(data), tombstonePrefix)
	if _, err := parseID(id); err != nil {
		return keyRef{}, &RecordError{Key: obj, Err: fmt.Errorf("%w: idempotency key object holds %q, not a task ID", ErrCorruptRecord, truncate(string(data), 40))}
	}
	return keyRef{id: id, purged: purged, etag: aws.ToString(out.ETag), written: aws.ToTime(out.LastModified)}, nil
}

// PurgedError says that a keyed call found its key naming a task that
// [Store.Purge] deleted, and made no new task: [Store.Ingest] never
// ingests a version twice. It wraps [ErrPurged].
type PurgedError struct {
	Key string // the idempotency key (CreateParams.Key)
	ID  string // the purged task
}

// Error describes the problem for people.
func (e *PurgedError) Error() string {
	return fmt.Sprintf("s3task: key %q named task %s, which was purged", truncate(e.Key, 64), e.ID)
}

// Unwrap returns ErrPurged.
func (e *PurgedError) Unwrap() error { return ErrPurged }

// entomb rewrites the key's object of t, a task being purged, as a
// tombstone, if it still names t: k is the object as read, with its ETag.
// A Create that took the key over meanwhile (it may, once the record is
// marked purging) keeps it. Requests: one PUT; on a refusal, a GET.
func (s *Store) entomb(ctx context.Context, t *record, k keyRef) error {
	if k.id != t.ID || k.purged {
		return nil
	}
	obj := s.keyObject(t.KeyScope, t.IdempotencyKey)
	body := tombstonePrefix + t.ID
	_, err := s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket: &s.bucket, Key: &obj, Body: strings.NewReader(body), ContentLength: aws.Int64(int64(len(body))),
		IfMatch: aws.String(k.etag),
	})
	switch {
	case err == nil:
		s.reached("purge/tombstone")
		return nil
	case !s3x.Lost(err):
		return fmt.Errorf("s3task: write tombstone %s: %w", obj, err)
	}
	// Changed since it was read: taken over, or entombed by a resend of
	// this very write (or by another Purge), which the object tells.
	now, err := s.readKey(ctx, obj)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil // deleted by hand: nothing names the task any more
	case err != nil:
		return err
	case now.id == t.ID && !now.purged:
		return fmt.Errorf("%w: idempotency key %s changed while task %s was being purged", ErrConflict, obj, t.ID)
	}
	return nil
}

// createKeyed creates t under the idempotency key t.IdempotencyKey, or
// returns the task the key already names, with its record's ETag; found
// says which: true when another call's write made the task returned. pol
// says what to do with a key whose task was purged or may be replaced.
func (s *Store) createKeyed(ctx context.Context, t *record, pol keyPolicy) (_ *record, etag string, found bool, _ error) {
	obj := s.keyObject(t.KeyScope, t.IdempotencyKey)
	keyETag := "" // the key's object to take over; "": create it
	for try := 0; ; try++ {
		if try == keyTries {
			return nil, "", false, fmt.Errorf("%w: idempotency key %s changed %d times in a row", ErrConflict, obj, try)
		}
		if try > 0 && !sleepCtx(ctx, s.backoff("key/"+obj, try-1, 20*time.Millisecond, time.Second)) {
			return nil, "", false, ctx.Err()
		}
		k, err := s.claimKey(ctx, obj, keyETag, t.ID)
		if errors.Is(err, ErrNotFound) {
			keyETag = "" // deleted since (by hand)
			continue
		}
		if err != nil {
			return nil, "", false, err
		}
		if k.id == t.ID && !k.purged {
			return s.writeKeyed(ctx, t, k)
		}
		purged := k.purged
		if !purged {
			got, gotETag, err := s.read(ctx, k.id)
			age := s.serverNow().Sub(k.written)
			switch {
			case err == nil && got.Purging:
				purged = true // the key is free as soon as the record is marked
			case err == nil && pol.renew != nil && pol.renew(got):
				s.reached("key/renew")
				keyETag = k.etag
				continue
			case err == nil:
				return got, gotETag, true, nil
			case !errors.Is(err, ErrNotFound):
				return nil, "", false, err
			case age < keyAdoptWithin:
				// The key's writer has not written the task yet, or never will:
				// write it ourselves, under the ID the key names. Whichever of us
				// is second finds it there.
				s.reached("key/adopt")
				adopt := t.clone()
				at, _ := IDTime(k.id)
				adopt.ID, adopt.CreatedAt, adopt.InputPath = k.id, at, s.inputKey(k.id, adopt.Type)
				return s.writeKeyed(ctx, adopt, k)
			case age < keyStaleAfter:
				s.reached("key/conflict")
				return nil, "", false, fmt.Errorf("%w: idempotency key %s names task %s, which its writer has not written since %s; try again after %s",
					ErrConflict, obj, k.id, k.written.Format(time.RFC3339), k.written.Add(keyStaleAfter).Format(time.RFC3339))
			}
		}
		if purged && pol.keepPurged {
			s.reached("key/purged")
			return nil, "", false, &PurgedError{Key: t.IdempotencyKey, ID: k.id}
		}
		// A key left behind by a task that was purged, being purged, or
		// never written: take it over.
		s.reached("key/takeover")
		keyETag = k.etag
	}
}

// keyHolds reports whether Purge must keep t, a finished task created with
// a key, for now: its key's object names it and was written less than
// keyHold ago, so a Create of the key may still write its record. It
// returns the key's object as read, for entomb. Requests: one GET.
func (s *Store) keyHolds(ctx context.Context, t *record) (bool, keyRef, error) {
	k, err := s.readKey(ctx, s.keyObject(t.KeyScope, t.IdempotencyKey))
	switch {
	case errors.Is(err, ErrNotFound):
		return false, keyRef{}, nil
	case err != nil:
		return false, keyRef{}, err
	}
	return k.id == t.ID && !k.purged && s.serverNow().Sub(k.written) < keyHold, k, nil
}

// writeKeyed writes t, the task key k names, as a new record. The write
// must be sent within keyAdoptWithin of the key's object; past that, a
// later Create may take the key over, and the write is given up. Another
// Create of the same key may have written the record first: then that is
// the task, found. It returns the record with its ETag.
func (s *Store) writeKeyed(ctx context.Context, t *record, k keyRef) (_ *record, etag string, found bool, _ error) {
	ctx, cancel := context.WithDeadline(ctx, time.Now().Add(k.written.Add(keyAdoptWithin).Sub(s.serverClock())))
	defer cancel()
	got, etag, err := s.commit(ctx, nil, "", t)
	switch {
	case errors.Is(err, errLost):
		return got, etag, true, nil // made by the key's other writer
	case errors.Is(err, errOvertaken):
		return got, etag, false, nil // ours, and changed since
	case err != nil:
		return nil, "", false, err
	}
	return got, etag, false, nil
}
