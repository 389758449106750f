package s3task

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/s3task/s3task/internal/s3x"
)

// An idempotency key names a task by the caller's own word, such as a form's
// submission token or an upstream event ID, so that creating it twice makes
// one task. Each key has an object, <prefix>_keys/<sha256 of the key>,
// created with If-None-Match: * and holding the ID of the task it names.
// The first Create to write it makes the task; every later one reads it and
// returns that task. The object lives as long as its task: Purge deletes it
// with the task, and the key can then name a new task.

// maxKeyLen bounds an idempotency key.
const maxKeyLen = 256

// keyObject returns the object key of an idempotency key's object.
func (s *Store) keyObject(key string) string {
	sum := sha256.Sum256([]byte(key))
	return s.opts.Prefix + "_keys/" + hex.EncodeToString(sum[:])
}

// checkKey validates an idempotency key: 1 to 256 bytes of printable UTF-8.
func checkKey(key string) error {
	if len(key) > maxKeyLen || !utf8.ValidString(key) || strings.IndexFunc(key, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return invalidArg("CreateParams.Key must be at most %d bytes of printable UTF-8", maxKeyLen)
	}
	return nil
}

// claimKey makes key name the task id, unless it names a task already. It
// returns the ID the key names: id if this call wrote it.
func (s *Store) claimKey(ctx context.Context, key, id string) (string, error) {
	obj := s.keyObject(key)
	_, err := s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket: &s.bucket, Key: &obj, Body: strings.NewReader(id), ContentLength: aws.Int64(int64(len(id))),
		IfNoneMatch: aws.String("*"),
	})
	switch {
	case err == nil:
		return id, nil
	case !s3x.Lost(err):
		return "", fmt.Errorf("s3task: create idempotency key %s: %w", obj, err)
	}
	// Taken; by this very call if the SDK resent a PUT that had landed,
	// and then the object holds our ID.
	return s.keyTask(ctx, obj)
}

// keyTask reads the task ID an idempotency key's object holds.
func (s *Store) keyTask(ctx context.Context, obj string) (string, error) {
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &obj})
	if err != nil {
		if s3x.NotFound(err) {
			return "", fmt.Errorf("%w: idempotency key %s was deleted while in use; try again", ErrConflict, obj)
		}
		return "", fmt.Errorf("s3task: read idempotency key %s: %w", obj, err)
	}
	defer out.Body.Close()
	data, err := io.ReadAll(io.LimitReader(out.Body, 64))
	if err != nil {
		return "", fmt.Errorf("s3task: read idempotency key %s: %w", obj, err)
	}
	id := string(data)
	if _, err := parseID(id); err != nil {
		return "", &RecordError{Key: obj, Err: fmt.Errorf("%w: idempotency key object holds %q, not a task ID", ErrCorruptRecord, truncate(id, 40))}
	}
	return id, nil
}

// createKeyed creates t under the idempotency key t.IdempotencyKey, or
// returns the task the key already names.
func (s *Store) createKeyed(ctx context.Context, t *Task) (*Task, error) {
	id, err := s.claimKey(ctx, t.IdempotencyKey, t.ID)
	if err != nil {
		return nil, err
	}
	if id != t.ID {
		got, _, err := s.read(ctx, id)
		if !errors.Is(err, ErrNotFound) {
			return got, err
		}
		// The key's first writer has not written the task yet, or never
		// will (it failed or crashed in between): write it ourselves, under
		// the ID the key names. Whichever of us is second finds it there.
		at, _ := IDTime(id)
		t.ID, t.CreatedAt, t.InputPath = id, at, s.inputKey(id)
	}
	got, _, err := s.commit(ctx, nil, "", t)
	if errors.Is(err, errLost) || errors.Is(err, errOvertaken) {
		err = nil // made by the key's other writer, or changed since
	}
	return got, err
}

// forgetKey deletes the object of the idempotency key of t, a task being
// purged, if it still names t.
func (s *Store) forgetKey(ctx context.Context, t *Task) error {
	if t.IdempotencyKey == "" {
		return nil
	}
	obj := s.keyObject(t.IdempotencyKey)
	id, err := s.keyTask(ctx, obj)
	if errors.Is(err, ErrConflict) || err == nil && id != t.ID {
		return nil // gone already, or names a newer task
	}
	if err != nil {
		return err
	}
	if _, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: aws.String(obj)}); err != nil {
		return fmt.Errorf("s3task: delete idempotency key %s: %w", obj, err)
	}
	return nil
}
