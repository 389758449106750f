package s3task

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/s3task/s3task/internal/entropy"
	"github.com/s3task/s3task/internal/kit"
	"github.com/s3task/s3task/internal/probe"
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
	do      CallFunc // the create and change calls, through StoreOptions.Middleware

	// skew is the S3 server's clock minus the local clock, in nanoseconds,
	// as estimated from the Date headers of the responses seen; skewLeast
	// and skewMost are the least and the most those headers allow (see
	// observeTime).
	skew      atomic.Int64
	skewLeast atomic.Int64
	skewMost  atomic.Int64
	clockMu   sync.Mutex   // serialises observeTime
	observed  bool         // under clockMu: a Date header was seen
	lastStamp atomic.Int64 // the latest time stamp returned, in Unix milliseconds
	local     localWorkers // workers of this process, woken by Submit and Retry
	wakes     wakeGroup    // this Store's announcements, written one batch at a time
	wakeLast  wakeCache    // the wake object as this Store last wrote it

	// rnd, if set, is the source of all the store's randomness, and ids
	// its ID generator (see package internal/entropy); nil: crypto/rand
	// for revisions and IDs, math/rand/v2 for the rest.
	rnd *entropy.Source
	ids *idGen
	// probe, if set, is told of every branch of internal/probe.Branches
	// the store, or a Worker on it, takes.
	probe func(branch string)
	// exact says opts.Clock is the server's own clock (package internal/kit):
	// Date headers are not needed, and ignored.
	exact bool
}

func init() {
	entropy.Use = func(store any, src *entropy.Source) {
		s := store.(*Store)
		s.rnd, s.ids = src, &idGen{read: func(b []byte) { src.Read("id", b) }}
	}
	probe.Use = func(store any, f func(string)) { store.(*Store).probe = f }
	kit.Exact = func(store any) { store.(*Store).exact = true }
	kit.MakeRun = func(ctx context.Context, store any, name string, at time.Time) (any, error) {
		s := store.(*Store)
		for i := range s.opts.Periodic {
			if p := &s.opts.Periodic[i]; p.Name == name {
				return s.enqueueRun(ctx, p, p.Schedule.Prev(at))
			}
		}
		return nil, invalidArg("no periodic task is named %q", name)
	}
}

// reached reports a branch of internal/probe.Branches to the store's
// probe, if it has one.
func (s *Store) reached(branch string) {
	if s.probe != nil {
		s.probe(branch)
	}
}

// newID returns a new task ID for time t, from the store's generator.
func (s *Store) newID(t time.Time) string {
	if s.ids == nil {
		return NewIDAt(t)
	}
	return s.ids.at(t)
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
	s := &Store{client: client, presign: s3.NewPresignClient(client), bucket: bucket, opts: o, log: o.Logger}
	if s.do, err = chainCalls(s.perform, o.Middleware); err != nil {
		return nil, err
	}
	return s, nil
}

// Bucket returns the bucket the store works in.
func (s *Store) Bucket() string { return s.bucket }

// Prefix returns the key prefix under which tasks live.
func (s *Store) Prefix() string { return s.opts.Prefix }

// Object keys. Only IDs that passed parseID ever reach these.

func (s *Store) taskDir(id string) string   { return s.opts.Prefix + id + "/" }
func (s *Store) recordKey(id string) string { return s.taskDir(id) + "status.json" }
func (s *Store) wakeKey() string            { return s.opts.Prefix + "_wake" }

// InputKey returns the object key of the input of a task whose type has no
// entry in StoreOptions.Files; any task's is its Task.InputPath. It returns
// an error wrapping [ErrInvalidID] for an invalid ID.
func (s *Store) InputKey(id string) (string, error) {
	if err := ParseID(id); err != nil {
		return "", err
	}
	return s.taskDir(id) + "input" + s.opts.InputExt, nil
}

// OutputKey returns the object key of the output of attempt n (counting
// from 1) of a task whose type has no entry in StoreOptions.Files; a
// handler's own is [Job.OutputKey], a completed task's its
// Task.OutputPath. It returns an error wrapping [ErrInvalidID] for an
// invalid ID and [ErrInvalidArgument] for n < 1.
func (s *Store) OutputKey(id string, n int) (string, error) {
	if err := ParseID(id); err != nil {
		return "", err
	}
	if n < 1 {
		return "", invalidArg("attempt %d, attempts count from 1", n)
	}
	return s.taskDir(id) + "output-attempt-" + strconv.Itoa(n) + s.opts.OutputExt, nil
}

// files returns the file options of tasks of type typ: its entry in
// StoreOptions.Files, or the Store's own.
func (s *Store) files(typ string) FileOptions {
	if f, ok := s.opts.Files[typ]; ok {
		return f
	}
	return FileOptions{InputExt: s.opts.InputExt, OutputExt: s.opts.OutputExt, InputContentType: s.opts.InputContentType}
}

// inputKey returns where a new task of type typ keeps its input.
func (s *Store) inputKey(id, typ string) string {
	return s.taskDir(id) + "input" + s.files(typ).InputExt
}

// inputOf returns the key of t's input: the one its record names, which a
// Store with other options cannot derive, as long as it is an input in the
// task's own folder; otherwise the one this Store's options give.
func (s *Store) inputOf(t *Task) string {
	ext, ok := strings.CutPrefix(t.InputPath, s.taskDir(t.ID)+"input")
	if !ok || !validExt(ext) {
		return s.inputKey(t.ID, t.Type)
	}
	return t.InputPath
}

// uploadKeyOf returns the key a presigned POST form uploads t's input to:
// upload<ext> beside its input<ext>. Submit copies it to the input.
func (s *Store) uploadKeyOf(t *Task) string {
	ext := strings.TrimPrefix(s.inputOf(t), s.taskDir(t.ID)+"input")
	return s.taskDir(t.ID) + "upload" + ext
}

// outputKey returns where attempt n of a task of type typ writes its
// output.
func (s *Store) outputKey(id string, n int, typ string) string {
	return s.taskDir(id) + "output-attempt-" + strconv.Itoa(n) + s.files(typ).OutputExt
}

// outputOf returns the key of a completed task's output, and its
// extension: the one its record names if it is the latest attempt's output
// in the task's own folder, so a tampered record cannot point elsewhere;
// otherwise the one this Store's options give.
func (s *Store) outputOf(t *Task) (key, ext string) {
	ext, ok := strings.CutPrefix(t.OutputPath, s.taskDir(t.ID)+"output-attempt-"+strconv.Itoa(t.Attempt))
	if !ok || !validExt(ext) || ext != "" && ext[0] >= '0' && ext[0] <= '9' { // not output-attempt-12 for attempt 1
		ext = s.files(t.Type).OutputExt
		return s.outputKey(t.ID, t.Attempt, t.Type), ext
	}
	return t.OutputPath, ext
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
	// Args, if not nil, is encoded as JSON into the payload, for a handler
	// registered with [HandleJSON] to decode; set Args or Payload, not
	// both. If Args (or a pointer to it) implements [Validator], Create
	// calls Validate first and refuses the task if it fails.
	Args any
	// Key, if set, makes Create idempotent: every Create with the same Key
	// returns the one task the first made, with its parameters (the later
	// calls' are not compared), as long as that task exists, which is
	// until [Store.Purge] removes it; then the next Create with the Key
	// makes a new task. At no time do two tasks of one Key exist, purged
	// ones apart (and, for the keys [Store.Ingest] gives its tasks, ones
	// abandoned before they were submitted, which an Ingest replaces once
	// their source is back). Use a form's submission token or an upstream
	// event ID, so that a double click or a resent request makes one task.
	// At most 256 bytes of printable UTF-8; it is stored in the record
	// (Task.IdempotencyKey).
	//
	// The key has an object of its own under <prefix>_keys/, naming its
	// task. A Create that wrote it and then failed before the task's record
	// leaves the key to the next Create with it: within a minute, that one
	// makes the task under the ID the key names; after two minutes, under
	// a new ID; in between it returns [ErrConflict]. Purge keeps a keyed
	// task until 10 minutes after its key was written, and leaves the key's
	// object (33 bytes) behind as a tombstone naming the purged task, which
	// the next Create takes over ([Store.Ingest] does not: see there).
	// These bounds assume S3 applies a request within a minute of its
	// being sent, or not at all.
	//
	// Cost: a keyed Create adds one PUT (the key's object) to the task's
	// own; a repeated one costs one PUT, refused, and two GETs, and writes
	// nothing; one after a purge costs a refused PUT, a GET of the
	// tombstone and a PUT that takes the key over, beside the task's own.
	//
	// A Key names one task within its KeyScope. A keyed Create that finds
	// its key's task returns it only as [Store.Get] would: the task passes
	// through StoreOptions.Middleware as an [OpGet] call, with [Call.Task]
	// set (no request more), so that a check that refuses a read of it
	// refuses the Create too.
	Key string
	// KeyScope is the namespace of Key: one Key in two scopes names two
	// tasks. A host with tenants sets it to the caller's tenant, best in
	// its StoreMiddleware (c.Params.KeyScope = tenant), so that no
	// tenant's key can ever name another tenant's task. Empty is the scope
	// of every key of earlier versions. At most 256 bytes of printable
	// UTF-8. It is stored in the record with the Key (Task.KeyScope), and
	// ignored without one, so a middleware may set it on every create.
	KeyScope string
	// CreatedBy names who asked for the task, at most 256 bytes. Optional.
	CreatedBy string
	// Metadata is the host's own context for the task, such as a tenant,
	// the ID of the request that made it, or a trace context (package
	// s3taskotel keeps the W3C keys "traceparent" and "tracestate" here).
	// It is stored in the record as it is given and never changed after:
	// handlers read it in Job.Task.Metadata, operators in the record, and
	// it stays the same through every attempt and Retry. Optional. At most
	// [MaxMetadataEntries] entries; each key 1 to [MaxMetadataKeyLen]
	// ASCII letters, digits, '.', '-' or '_'; each value at most
	// [MaxMetadataValueLen] bytes of UTF-8; [MaxMetadataSize] bytes in all.
	// Keep secrets out: anyone who may read the record reads it.
	Metadata map[string]string
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
	if p.Args != nil {
		if len(p.Payload) > 0 {
			return invalidArg("CreateParams has both Args and Payload; set one")
		}
		if err := validate(p.Args); err != nil {
			return fmt.Errorf("%w: CreateParams.Args: %w", ErrInvalidArgument, err)
		}
		payload, err := json.Marshal(p.Args)
		if err != nil {
			return invalidArg("CreateParams.Args does not encode as JSON: %v", err)
		}
		p.Payload, p.Args = payload, nil
	}
	if p.Key != "" {
		if err := checkKey(p.Key); err != nil {
			return err
		}
	}
	if p.KeyScope != "" {
		if err := checkKey(p.KeyScope); err != nil {
			return invalidArg("CreateParams.KeyScope must be at most %d bytes of printable UTF-8", maxKeyLen)
		}
	}
	if err := checkMetadata(p.Metadata); err != nil {
		return err
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
// With a Key that names a task already, it returns that task instead, as
// it is now; [Store.CreateOrGet] tells the two apart. Requests: one PUT;
// with a Key, see [CreateParams.Key].
//
// Errors: [ErrInvalidArgument] for bad params, an Args that does not encode
// or does not validate, or a Type other than the one Args names; also
// [ErrUnknownTaskType] for a type outside StoreOptions.Types; S3 errors
// otherwise.
func (s *Store) Create(ctx context.Context, p CreateParams) (*Task, error) {
	t, _, err := s.CreateOrGet(ctx, p)
	return t, err
}

// CreateOrGet is [Store.Create] that also says whether the call found the
// task rather than made it: found is true when p.Key named a task an
// earlier call made, which is returned as it is now (perhaps long since
// submitted or finished) and of which nothing was changed. Of all the calls
// with one Key, one at most returns found false for a task: the one whose
// record write made it. A call whose answer was lost, resent by the
// caller, gets found true the second time. Without a Key found is always
// false. Requests and errors: as Create.
func (s *Store) CreateOrGet(ctx context.Context, p CreateParams) (t *Task, found bool, err error) {
	if err := p.typeFromArgs(); err != nil {
		return nil, false, err
	}
	c := &Call{Op: OpCreate, Params: &p}
	t, err = s.call(ctx, c)
	if err != nil {
		return nil, false, err
	}
	return t, c.Found, nil
}

// typeFromArgs sets p.Type from the task type p.Args names ([TaskArgs]), if
// any, before a middleware sees p.
func (p *CreateParams) typeFromArgs() error {
	named, ok, err := argsType(p.Args)
	switch {
	case err != nil:
		return err
	case !ok:
	case p.Type == "":
		p.Type = named
	case p.Type != named:
		return invalidArg("CreateParams.Type is %q, but its Args (%T) name task type %q", p.Type, p.Args, named)
	}
	return nil
}

// checkType refuses a task type outside StoreOptions.Types, if set.
func (s *Store) checkType(typ string) error {
	if s.opts.Types == nil || slices.Contains(s.opts.Types, typ) {
		return nil
	}
	return fmt.Errorf("%w: %w %q: this store's fleet serves only %q (StoreOptions.Types)", ErrInvalidArgument, ErrUnknownTaskType, typ, s.opts.Types)
}

func (s *Store) create(ctx context.Context, c *Call) (*Task, error) {
	p := *c.Params
	if err := p.validate(s.opts.MaxPayloadSize); err != nil {
		return nil, err
	}
	if err := s.checkType(p.Type); err != nil {
		return nil, err
	}
	now := s.stamp()
	id := s.newID(now)
	t := &record{Task: Task{
		SchemaVersion:  SchemaVersion,
		ID:             id,
		Type:           p.Type,
		Name:           p.Name,
		Status:         StatusCreated,
		MaxAttempts:    cmp(p.MaxAttempts, s.opts.MaxAttempts),
		InputPath:      s.inputKey(id, p.Type),
		CreatedAt:      now,
		CreatedBy:      p.CreatedBy,
		RunAt:          runAt(p.RunAt),
		IdempotencyKey: p.Key,
	}}
	if p.Key != "" {
		t.KeyScope = p.KeyScope
	}
	if s.files(p.Type).NoInput {
		t.NoInput, t.InputPath = true, ""
	}
	if len(p.Metadata) > 0 {
		t.Metadata = maps.Clone(p.Metadata)
	}
	if len(p.Payload) > 0 {
		var buf bytes.Buffer
		if err := json.Compact(&buf, p.Payload); err != nil {
			return nil, invalidArg("CreateParams.Payload: %v", err)
		}
		t.Payload = buf.Bytes()
	}
	if t.IdempotencyKey != "" {
		got, etag, found, err := s.createKeyed(ctx, t, c.keys)
		if err != nil {
			return nil, fmt.Errorf("s3task: create task with key %q: %w", truncate(p.Key, 64), err)
		}
		c.Found = found
		if found {
			return s.foundKeyed(ctx, got)
		}
		c.made, c.madeETag = got, etag
		return got.task(), nil
	}
	got, etag, err := s.commit(ctx, nil, "", t)
	if errors.Is(err, errOvertaken) {
		err = nil // created, and already changed by another
	}
	if err != nil {
		return nil, fmt.Errorf("s3task: create task %s: %w", id, err)
	}
	c.made, c.madeETag = got, etag
	return got.task(), nil
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
	return s.call(ctx, &Call{Op: OpGet, TaskID: id})
}

// Submit moves a created task to queued once its input is in place, and
// returns it. It checks that the input object exists and is at most
// StoreOptions.MaxInputSize bytes, records the input's ETag (a worker refuses
// an input replaced after this point), writes the active marker (named
// after the submit time, or the task's RunAt if later), then the record,
// then adds the marker to the wake object that tells idle workers to look;
// workers running in this process on this Store start looking at once.
// Submitting a queued task again changes nothing in its record and returns
// it, and announces it in the wake object once more (one PUT, and the GET
// before it as above): the call that queued it may have been told its
// outcome was unknown, and announced nothing. Requests:
// GET, HEAD, PUT marker, PUT record, PUT wake; a GET of the wake object
// before its PUT the first time a Store writes it, and while other
// processes write it too (see "Requests per call" in the package
// documentation).
//
// An input sent with a presigned POST form ([Store.PresignUploadForm]) is
// in the task's upload object: when the input is missing, Submit copies
// that object to the input, create-only, reading it through this process,
// then deletes it once the record is written. That adds a GET, a PUT and a
// HEAD before the record's write and a DELETE after it. An input already
// in place (a presigned PUT, [Store.UploadInput]) is used as it is.
//
// Errors: [ErrInvalidID]; [ErrNotFound]; [ErrInputMissing]; an
// *[InputSizeError] wrapping [ErrInputTooLarge]; a *[TransitionError] for any
// status but created and queued; [ErrConflict]; [ErrOutcomeUnknown]; S3
// errors otherwise. On every error but ErrOutcomeUnknown the record is
// unchanged; a write whose answer was lost but which landed is a success,
// even when a worker claimed the task right after it.
//
// Lost answers. A write whose answer is lost (a timeout, a 5xx, a dropped
// connection, or the 412 that the SDK's resend of it then meets) is settled
// inside the call: it reads the record back and tells from the revisions
// the record keeps whether the write landed. When more writes followed it
// than the record remembers (eight; a running task's heartbeats, say), the
// call decides again against the record as read, as after a lost
// compare-and-set: a task found queued, or claimed since, is submitted, by
// this call or by another, and one still created is submitted again. It
// returns ErrOutcomeUnknown only when the record cannot be read back within
// 30 seconds (or before ctx ends), or is gone (purged meanwhile). The one
// state the record cannot settle: a task found abandoned before it ran gets
// the *TransitionError a Submit of it gets now, although this call's write
// may have landed before the Cancel. A settled doubt costs one GET, the
// read back, beside the SDK's resend of the lost PUT; when the write had
// not landed, the change is written once more (the record's PUT, and its
// marker's).
func (s *Store) Submit(ctx context.Context, id string) (*Task, error) {
	return s.call(ctx, &Call{Op: OpSubmit, TaskID: id})
}

func (s *Store) submit(ctx context.Context, c *Call) (*Task, error) {
	t, etag, err := s.current(ctx, c)
	if err != nil {
		return nil, err
	}
	e := event{kind: evSubmit}
	adopted := false
	if t.Status == StatusCreated && !t.NoInput {
		e.inputETag, e.inputSize, err = s.checkInput(ctx, s.inputOf(&t.Task))
		if errors.Is(err, ErrInputMissing) {
			adopted = true
			e.inputETag, e.inputSize, err = s.adoptUpload(ctx, &t.Task)
		}
		if err != nil {
			return nil, err
		}
	}
	got, changed, err := s.apply(ctx, t, etag, e)
	if changed || announceFound(got, err) {
		s.wake(ctx, s.MarkerKey(&got.Task))
	}
	if adopted && err == nil {
		// The copy is the input now; the upload object only costs storage.
		// A form posted again writes it anew, and Purge deletes it with the
		// task's folder.
		key := s.uploadKeyOf(&got.Task)
		if _, derr := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: &key}); derr != nil {
			s.log.WarnContext(ctx, "s3task: delete the upload object after submit", "key", key, "err", derr)
		}
	}
	return got.task(), err
}

// adoptUpload makes the object a presigned POST form uploaded (see
// uploadKeyOf) t's input: it copies it there through this process,
// create-only, as Ingest copies a source object, and returns what
// checkInput returns for the input afterwards. A copy refused because the
// input exists (a presigned PUT landed meanwhile, or a concurrent Submit
// copied first) leaves that input in place, as written once. S3's own copy
// is not used: not every S3 server honours If-None-Match on a copy.
// Requests: GET of the upload, PUT of the input, HEAD of the input.
func (s *Store) adoptUpload(ctx context.Context, t *Task) (string, int64, error) {
	up, in := s.uploadKeyOf(t), s.inputOf(t)
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &up})
	switch {
	case s3x.NotFound(err):
		// Nothing uploaded, or a concurrent Submit adopted it and deleted
		// it since our HEAD: the input tells which.
		return s.checkInput(ctx, in)
	case err != nil:
		return "", 0, fmt.Errorf("s3task: read upload %s: %w", up, err)
	}
	defer out.Body.Close()
	if n := aws.ToInt64(out.ContentLength); n > s.opts.MaxInputSize {
		return "", 0, &InputSizeError{Key: up, Size: n, Limit: s.opts.MaxInputSize}
	}
	body, size, cleanup, err := s.seekable(out.Body, s.opts.MaxInputSize)
	if err != nil {
		var se *InputSizeError
		if errors.As(err, &se) {
			se.Key = up
		}
		return "", 0, err
	}
	defer cleanup()
	if _, err := s.createObject(ctx, in, body, size, aws.ToString(out.ContentType)); err != nil {
		return "", 0, fmt.Errorf("s3task: copy upload %s to %s: %w", up, in, err)
	}
	s.reached("submit/adopt-upload")
	return s.checkInput(ctx, in)
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
//
// A write whose answer is lost is settled inside the call, as Submit's is
// (see there for what it costs, and when it returns ErrOutcomeUnknown): a
// task found queued, or claimed since (running, or failed or finished by a
// later attempt), is retried, by this call or by another, and is not
// retried twice; one still failed at the same attempt is retried again.
// The one state the record cannot settle: a task found abandoned at the
// same attempt gets the *TransitionError a Retry of it gets now, although
// this call's write may have landed before the Cancel.
func (s *Store) Retry(ctx context.Context, id string) (*Task, error) {
	return s.call(ctx, &Call{Op: OpRetry, TaskID: id})
}

func (s *Store) retry(ctx context.Context, c *Call) (*Task, error) {
	id := c.TaskID
	t, etag, err := s.current(ctx, c)
	if err != nil {
		return nil, err
	}
	e := event{kind: evRetry, states: c.states}
	if t.Retryable() {
		// Verify the input again: the attempt may have failed because it
		// was replaced after Submit, and retrying those same checks forever
		// would help nobody.
		if e.inputETag, e.inputSize, err = s.checkInput(ctx, s.inputOf(&t.Task)); err != nil {
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
	c.result = changed // for a bulk action: whether this call retried it
	if err != nil || !changed {
		return got.task(), err
	}
	s.wake(ctx, s.MarkerKey(&got.Task))
	return got.task(), nil
}

// announceFound reports whether a Submit that found its task queued
// already, by a write it did not make, announces it all the same.
// That write may be an earlier call's whose outcome the caller was told
// is unknown, and which landed after all: that call announced nothing,
// and the caller's repeat, which succeeds, is the one left to. A write of
// another caller announced it already, and the repeat costs the wake
// object's write once more: a repeat is rare, a task no idle worker hears
// of waits for a listing.
func announceFound(got *record, err error) bool {
	return err == nil && got != nil && got.Status == StatusQueued
}

// Cancel abandons a task that is not finished and returns it; reason is kept
// in the record (at most 1024 bytes). A running task's worker sees the change
// at its next heartbeat, cancels its handler's context with [ErrTaskCanceled]
// and writes nothing more. Cancelling an abandoned task changes nothing.
// Requests: GET, PUT record, and DELETE of the marker of a task that had one
// (queued, running, or waiting for a retry). With an OnTerminal hook, the
// task's notice is due now, and keeps a marker due now until it is
// delivered, by this call or, if the hook fails here, by a worker: a task
// that had no marker (never submitted, or failed for good with its notice
// delivered) or whose marker named a later time (scheduled, waiting for a
// retry, running) gets that marker first (one PUT), and its old marker
// goes after the record; once the hook has run, a PUT of the record
// records the notice, and the marker goes.
//
// Errors: [ErrInvalidID]; [ErrInvalidArgument] for a long reason;
// [ErrNotFound]; a *[TransitionError] for a completed task; [ErrConflict];
// [ErrOutcomeUnknown]; S3 errors otherwise. On every error but
// ErrOutcomeUnknown the record is unchanged.
//
// A write whose answer is lost is settled inside the call, as Submit's is
// (see there for what it costs, and when it returns ErrOutcomeUnknown): a
// task found abandoned is cancelled, by this call or by another, and one
// still unfinished is cancelled again, so that a Cancel racing a running
// task's heartbeats neither fails nor leaves its caller in doubt; a task
// found completed gets the *TransitionError, rightly, for an abandoned task
// never completes.
func (s *Store) Cancel(ctx context.Context, id, reason string) (*Task, error) {
	if err := checkReason(reason); err != nil {
		return nil, err // no request for a bad reason
	}
	return s.call(ctx, &Call{Op: OpCancel, TaskID: id, Reason: reason})
}

func (s *Store) cancel(ctx context.Context, c *Call) (*Task, error) {
	reason := c.Reason
	if err := checkReason(reason); err != nil {
		return nil, err // a middleware's change
	}
	t, etag, err := s.current(ctx, c)
	if err != nil {
		return nil, err
	}
	got, changed, err := s.apply(ctx, t, etag, event{kind: evCancel, reason: reason, notify: s.opts.OnTerminal != nil, states: c.states})
	if err != nil {
		return nil, err
	}
	c.result = changed // for a bulk action: whether this call abandoned it
	if changed && got.NotifyPending {
		s.settle(ctx, got, "")
	}
	return got.task(), nil
}

// checkReason refuses a cancel reason over 1024 bytes or not UTF-8.
func checkReason(reason string) error {
	if len(reason) > 1024 || !utf8.ValidString(reason) {
		return invalidArg("cancel reason must be at most 1024 bytes of UTF-8")
	}
	return nil
}

// Schedule sets the earliest time a created or queued task may start (by
// the S3 server's clock, rounded up to a whole millisecond), and returns
// it. A queued task's marker moves to that time, so no worker looks at it
// before, and one starts it within PollInterval after (and the second by
// which one-second Date headers may leave its clock unsure of the
// server's: no worker starts a task early), without listing in between:
// the moved marker is announced in the wake object as a Submit's
// is, so that idle workers note its time, which they may not have seen
// (they may have been busy when it was last listed). Zero (or a time past)
// makes a scheduled task run now. Requests: GET, PUT marker, PUT record,
// DELETE old marker, GET and PUT wake; a created task only gets its record
// written.
//
// Errors: [ErrInvalidID]; [ErrNotFound]; a *[TransitionError] unless the
// task is created or queued; [ErrConflict]; [ErrOutcomeUnknown]; S3 errors
// otherwise. On every error but ErrOutcomeUnknown the record is unchanged.
//
// A write whose answer is lost is settled inside the call, as Submit's is
// (see there for what it costs, and when it returns ErrOutcomeUnknown): a
// task found with the start asked for is scheduled, whatever it has done
// since, and a created or queued one with another start is scheduled again,
// this call counting as later than a concurrent Schedule that landed
// meanwhile. The one state the record cannot settle: a task found started
// with another start gets the *TransitionError, although this call's write
// may have landed before another Schedule replaced its time.
func (s *Store) Schedule(ctx context.Context, id string, at time.Time) (*Task, error) {
	return s.call(ctx, &Call{Op: OpSchedule, TaskID: id, At: at})
}

func (s *Store) schedule(ctx context.Context, c *Call) (*Task, error) {
	at := c.At
	t, etag, err := s.current(ctx, c)
	if err != nil {
		return nil, err
	}
	got, changed, err := s.apply(ctx, t, etag, event{kind: evSchedule, at: runAt(at)})
	if err != nil {
		return nil, err
	}
	if changed && got.Status == StatusQueued {
		// A time still ahead idle workers only note, to list then.
		s.reached("schedule/announced")
		s.wake(ctx, s.MarkerKey(&got.Task))
	}
	return got.task(), nil
}

// runAt returns a caller's start time as kept in the record: in UTC,
// rounded up to a whole millisecond, the resolution of marker names.
func runAt(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return ceilMS(t.UTC())
}

// A cursor is the position after the last entry listed (relative to the
// prefix), base64url-encoded. It never holds a '/', so it cannot reach into
// another folder, and it is only ever used as ListObjectsV2's StartAfter.
