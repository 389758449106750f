package s3task

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/s3task/s3task/internal/s3x"
)

// An Object names one version of an object for [Store.Ingest]: what an S3
// event notification or a listing says of it.
type Object struct {
	// Bucket holds the object; "" means the Store's bucket.
	Bucket string
	// Key is the object's key, decoded.
	Key string
	// ETag and VersionID name the version. At least one is required. The
	// ETag tells versions apart when given (events and listings carry it,
	// so both name a version alike): writing the same bytes again in one
	// request makes the same ETag, and no new task. The version ID, when
	// given, pins the copy to that version.
	VersionID, ETag string
	// Size is the object's size in bytes, as the event or the listing says;
	// negative if unknown.
	Size int64
}

// version returns what tells this version of the object from the others.
func (o Object) version() string {
	if etag := strings.Trim(o.ETag, `"`); etag != "" {
		return "e:" + etag
	}
	return "v:" + o.VersionID
}

// IngestKey returns the idempotency key (CreateParams.Key) that
// [Store.Ingest] gives the task of the object version o: the same for
// every event or listing that names the version, whatever the order or
// number of them.
func IngestKey(o Object, defaultBucket string) string {
	b := o.Bucket
	if b == "" {
		b = defaultBucket
	}
	sum := sha256.Sum256([]byte(b + "\x00" + o.Key + "\x00" + o.version()))
	return "ingest:" + hex.EncodeToString(sum[:20])
}

// Metadata keys of a task made by [Store.Ingest], naming its source.
const (
	MetaSourceBucket  = "source.bucket"
	MetaSourceKey     = "source.key"
	MetaSourceVersion = "source.version" // the version ID, or "" if none
	MetaSourceETag    = "source.etag"    // as given, or "" if none
)

// Ingest makes a task of one version of an object that arrived by other
// means (a partner's upload, a batch export), exactly once: every Ingest of
// the same version (see [IngestKey]) returns the one task the first made,
// however many events and sweeps name it, in whatever order, and however
// many of them run at once. The task gets p (Name, Type, Payload or Args,
// Metadata, ...) with the idempotency key set and the source named in its
// metadata (MetaSource*); p.Key must be empty. Its input is a copy of that
// version, taken once: the source may change or go afterwards without
// touching the task, a new version makes a new task, and a Purge deletes
// the copy, never the source. Then the task is submitted.
//
// The rules, for one version of an object:
//
//   - Not there (deleted, or replaced by another version, when Ingest
//     looks): no task is made, and the error wraps [ErrSourceGone]; a task
//     an earlier Ingest made of it is left as it is. So an event for an
//     object that never existed costs one HEAD and leaves nothing behind.
//     If it goes between Ingest's look and its copy, the task just made is
//     abandoned with the reason in CancelReason, on record, and the error
//     wraps ErrSourceGone too.
//   - Over StoreOptions.MaxInputSize: the task is made and abandoned with
//     the reason in CancelReason, and returned with no error, so that the
//     refusal is on record and a repeated event finds it there.
//   - Its task was abandoned before it was submitted (its source went
//     before the copy, or it was refused as too large under a lower limit,
//     or it waited for its input past StoreOptions.AbandonCreatedAfter, or
//     an operator cancelled it): when an Ingest finds the version there,
//     within the limit, it makes a new task of it under the same key; the
//     abandoned one stays on record.
//   - Its task was deleted by [Store.Purge]: it is not ingested again, and
//     the error is a *[PurgedError] naming the purged task (wrapping
//     [ErrPurged]). Purge leaves a tombstone in the key's object for this;
//     a task purged by a version of the library from before tombstones can
//     be ingested once more.
//   - A task an earlier Ingest left created (it stopped between its steps)
//     is taken up where it stopped.
//
// The Store never ingests its own objects: a key under the Store's prefix
// in its bucket is refused, so that a task's output cannot become a task.
//
// Requests, for a new version: a HEAD of the source, a keyed Create (2
// PUTs), a GET of the source and the copy's PUT (the bytes pass through
// this process, spooled to StoreOptions.SpoolDir if need be, since S3's
// server-side copy cannot be told not to replace an object), a GET of the
// record before the copy, and a Submit (GET, HEAD, 2 PUTs, and the wake
// object's GET and PUT): 12 in all. For a version already ingested: the
// HEAD and a keyed Create that finds its task (a refused PUT and 2 GETs);
// for one purged, the HEAD, a refused PUT and a GET; for a version that is
// not there, the HEAD alone.
//
// Errors: [ErrInvalidArgument] for an object without a key, or without a
// version ID or an ETag, one under the Store's prefix, or p with a Key or
// of a type declared without input (wrapping [ErrNoInput] too);
// [ErrSourceGone]; a *[PurgedError]; those of [Store.Create],
// [Store.UploadInput] and [Store.Submit]; S3 errors reading the source.
func (s *Store) Ingest(ctx context.Context, o Object, p CreateParams) (*Task, error) {
	bucket := o.Bucket
	if bucket == "" {
		bucket = s.bucket
	}
	etag := strings.Trim(o.ETag, `"`)
	switch {
	case o.Key == "":
		return nil, invalidArg("an object to ingest needs a key")
	case o.VersionID == "" && etag == "":
		return nil, invalidArg("object %q: a version ID or an ETag is needed to tell its versions apart", o.Key)
	case bucket == s.bucket && strings.HasPrefix(o.Key, s.opts.Prefix):
		return nil, invalidArg("object %q is under the Store's own prefix %q: its own objects are never ingested", o.Key, s.opts.Prefix)
	case p.Key != "":
		return nil, invalidArg("CreateParams.Key is set by Ingest")
	}
	if err := p.typeFromArgs(); err != nil {
		return nil, err
	}
	if s.files(p.Type).NoInput {
		return nil, fmt.Errorf("%w: %w: tasks of type %q take no input (FileOptions.NoInput): an object cannot be one", ErrInvalidArgument, ErrNoInput, p.Type)
	}
	p.Key = IngestKey(o, s.bucket)
	meta := make(map[string]string, len(p.Metadata)+4)
	for k, v := range p.Metadata {
		meta[k] = v
	}
	meta[MetaSourceBucket], meta[MetaSourceKey] = bucket, o.Key
	meta[MetaSourceVersion], meta[MetaSourceETag] = o.VersionID, etag
	p.Metadata = meta

	absent := func() (*Task, error) {
		s.reached("ingest/source-gone")
		return nil, fmt.Errorf("%w: s3://%s/%s, version %s", ErrSourceGone, bucket, o.Key, strings.TrimPrefix(o.version(), "e:"))
	}
	head := &s3.HeadObjectInput{Bucket: &bucket, Key: &o.Key}
	if o.VersionID != "" {
		head.VersionId = &o.VersionID
	}
	if etag != "" {
		head.IfMatch = aws.String(`"` + etag + `"`)
	}
	h, err := s.client.HeadObject(ctx, head)
	switch {
	case s3x.NotFound(err) || s3x.Lost(err): // gone, or no longer that version (412)
		return absent()
	case err != nil:
		return nil, fmt.Errorf("s3task: ingest: look at s3://%s/%s: %w", bucket, o.Key, err)
	case etag != "" && h.ETag != nil && strings.Trim(*h.ETag, `"`) != etag:
		return absent() // a server that ignores If-Match on HEAD answered of another version
	}
	fits := aws.ToInt64(h.ContentLength) <= s.opts.MaxInputSize
	c := &Call{Op: OpCreate, Params: &p, keys: keyPolicy{
		keepPurged: true,
		renew: func(r *record) bool {
			return fits && r.Status == StatusAbandoned && r.SubmittedAt.IsZero() && r.InputETag == ""
		},
	}}
	t, err := s.call(ctx, c)
	if err != nil || t.Status != StatusCreated {
		return t, err
	}
	if !fits {
		return s.refuse(ctx, t, fmt.Sprintf("the source object is %d bytes, over the limit of %d", aws.ToInt64(h.ContentLength), s.opts.MaxInputSize))
	}
	in := &s3.GetObjectInput{Bucket: &bucket, Key: &o.Key, VersionId: head.VersionId, IfMatch: head.IfMatch}
	out, err := s.client.GetObject(ctx, in)
	// Gone, or no longer that version (412, or another version from a
	// server that ignores If-Match).
	gone := s3x.NotFound(err) || s3x.Lost(err)
	if err == nil && etag != "" && out.ETag != nil && strings.Trim(*out.ETag, `"`) != etag {
		out.Body.Close()
		gone = true
	}
	switch {
	case gone:
		if _, err := s.refuse(ctx, t, "the source object changed or was deleted before it was copied"); err != nil {
			return nil, err
		}
		s.reached("ingest/source-gone")
		return nil, fmt.Errorf("%w: s3://%s/%s changed or was deleted before it was copied; task %s is abandoned", ErrSourceGone, bucket, o.Key, t.ID)
	case err != nil:
		return nil, fmt.Errorf("s3task: ingest: read s3://%s/%s: %w", bucket, o.Key, err)
	}
	err = s.UploadInput(ctx, t.ID, out.Body)
	out.Body.Close()
	var se *InputSizeError
	var te *TransitionError
	switch {
	case errors.As(err, &se):
		return s.refuse(ctx, t, fmt.Sprintf("the source object is over the limit of %d bytes", s.opts.MaxInputSize))
	case errors.As(err, &te):
		// Another Ingest of the version (or an operator) moved the task on
		// since it was found created: it is the task all the same.
		s.reached("ingest/moved-on")
		return s.Get(ctx, t.ID)
	case err != nil && !errors.Is(err, ErrInputExists):
		return nil, err
	}
	got, err := s.Submit(ctx, t.ID)
	if errors.As(err, &te) {
		s.reached("ingest/moved-on")
		return s.Get(ctx, t.ID)
	}
	return got, err
}

// refuse abandons the ingested task t, which stays on record, for reason.
func (s *Store) refuse(ctx context.Context, t *Task, reason string) (*Task, error) {
	s.log.WarnContext(ctx, "s3task: ingest refused", "task_id", t.ID, "reason", reason)
	return s.Cancel(ctx, t.ID, "ingest: "+reason)
}
