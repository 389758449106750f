package s3task

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/s3task/s3task/internal/s3x"
)

// PresignedRequest is a presigned S3 request a client can send without
// credentials until Expires.
type PresignedRequest struct {
	Method  string      // GET or PUT
	URL     string      // the signed URL, query string included
	Header  http.Header // headers the client must send exactly as given
	Expires time.Time   // after this S3 refuses the signature
}

// PresignedForm is a presigned browser-style POST upload. Send a
// multipart/form-data POST to URL with every field of Fields, then the file in
// a field named "file" (it must come last). S3 refuses a file larger than
// MaxSize.
type PresignedForm struct {
	URL     string            // where to POST the form
	Fields  map[string]string // form fields to send as given, the policy and its signature among them
	MaxSize int64             // the largest file, in bytes, the policy allows
	Expires time.Time         // after this S3 refuses the policy
}

// MaxPresignTTL is the longest lifetime S3 allows for a presigned URL.
const MaxPresignTTL = 7 * 24 * time.Hour

func checkTTL(ttl time.Duration) error {
	if ttl < time.Second || ttl > MaxPresignTTL {
		return invalidArg("presign TTL %s, want 1s to %s", ttl, MaxPresignTTL)
	}
	return nil
}

// uploadable returns c's task if it still takes an input, and checks ttl.
func (s *Store) uploadable(ctx context.Context, c *Call, ttl time.Duration) (*record, error) {
	t, _, err := s.current(ctx, c)
	if err != nil {
		return nil, err
	}
	if err := checkTTL(ttl); err != nil {
		return nil, err
	}
	if _, _, err = transition(t, event{kind: evUpload}, s.serverNow()); err != nil {
		return nil, err
	}
	return t, nil
}

// presignUpload performs an OpPresignUpload: c.result is the
// *PresignedRequest or, with c.form, the *PresignedForm.
func (s *Store) presignUpload(ctx context.Context, c *Call) (*Task, error) {
	t, err := s.uploadable(ctx, c, c.TTL)
	if err != nil {
		return nil, err
	}
	if c.form {
		form, err := s.presignForm(ctx, &t.Task, c.TTL)
		c.result = form
		return t.task(), err
	}
	put, err := s.presignPut(ctx, &t.Task, c.TTL)
	c.result = put
	return t.task(), err
}

// result returns what c's call returned beside its task: an error if a
// middleware returned without passing the call on, and so without one.
func result[T any](c *Call, err error) (T, error) {
	var zero T
	if err != nil {
		return zero, err
	}
	v, ok := c.result.(T)
	if !ok {
		return zero, fmt.Errorf("s3task: a StoreMiddleware returned no error without passing the %s call on", c.Op)
	}
	return v, nil
}

// PresignUpload returns a presigned PUT of the task's input, valid for ttl.
// It is only issued while the task is created. Its signed headers include
// If-None-Match: *, which the client must send as given (Header): S3 then
// refuses a second upload, so the input Submit verifies cannot be replaced.
// With a pinned Content-Type (StoreOptions.InputContentType, or the one
// StoreOptions.Files gives the task's type) they include it as well. A PUT
// cannot cap the size of what is sent; Submit checks it afterwards, or use
// [Store.PresignUploadForm].
// Requests: one GET (presigning itself is local).
//
// Errors: [ErrInvalidID]; [ErrInvalidArgument] for a TTL outside 1s to 7 days;
// [ErrNotFound]; a *[TransitionError] once the task is submitted.
func (s *Store) PresignUpload(ctx context.Context, id string, ttl time.Duration) (*PresignedRequest, error) {
	if err := checkTTL(ttl); err != nil {
		return nil, err // no request for a bad TTL
	}
	c := &Call{Op: OpPresignUpload, TaskID: id, TTL: ttl}
	_, err := s.call(ctx, c)
	return result[*PresignedRequest](c, err)
}

// PresignUploadForm returns a presigned POST form for the task's input, valid
// for ttl. S3 lets a form replace its object as often as it is posted until
// it expires, so the form does not address the input itself but the task's
// upload object, <prefix><id>/upload<ext>, which [Store.Submit] copies to
// the input, create-only: a form posted again after Submit, even after the
// task completed, changes the upload object and never the input the record
// names. The form's policy makes S3 refuse a file over
// StoreOptions.MaxInputSize and, with a pinned Content-Type (see
// [Store.PresignUpload]), a Content-Type field other than the one in
// Fields. It is only issued while the task is created.
// Requests: one GET.
//
// Errors: as [Store.PresignUpload].
func (s *Store) PresignUploadForm(ctx context.Context, id string, ttl time.Duration) (*PresignedForm, error) {
	if err := checkTTL(ttl); err != nil {
		return nil, err // no request for a bad TTL
	}
	c := &Call{Op: OpPresignUpload, TaskID: id, TTL: ttl, form: true}
	_, err := s.call(ctx, c)
	return result[*PresignedForm](c, err)
}

// Upload is how a client sends a task's input straight to S3: a presigned
// PUT, or a presigned POST form capped at StoreOptions.MaxInputSize. Either
// will do.
type Upload struct {
	Put  *PresignedRequest // a PUT of the whole file, with its headers
	Form *PresignedForm    // a multipart POST form, as a browser sends it
}

// CreateForUpload is [Store.Create] followed by presigning the input's
// upload, valid for ttl, for the common case of a client that uploads right
// away: it saves the record read that PresignUpload makes. Requests: one
// PUT.
//
// An upload is issued only while the task can take one: when p.Key names a
// task already submitted (a resent request after the upload), the task is
// returned with a nil Upload, and no URL that could reach its input.
// [Store.CreateOrGetForUpload] also says whether p.Key found the task.
//
// Errors: as Create, and [ErrInvalidArgument] for a TTL outside 1s to 7
// days (nothing is created then).
func (s *Store) CreateForUpload(ctx context.Context, p CreateParams, ttl time.Duration) (*Task, *Upload, error) {
	t, up, _, err := s.CreateOrGetForUpload(ctx, p, ttl)
	return t, up, err
}

// CreateOrGetForUpload is [Store.CreateForUpload] that also says whether
// the call found the task rather than made it, as [Store.CreateOrGet]
// does: found is true when p.Key named a task an earlier call made, which
// is returned as it is now, with an Upload only if it is still created
// (fresh URLs for the same input, as for a client that resends its
// request before it uploads). Without a Key found is always false.
// Requests and errors: as CreateForUpload.
func (s *Store) CreateOrGetForUpload(ctx context.Context, p CreateParams, ttl time.Duration) (t *Task, up *Upload, found bool, err error) {
	if err := checkTTL(ttl); err != nil {
		return nil, nil, false, err
	}
	t, found, err = s.CreateOrGet(ctx, p)
	if err != nil {
		return nil, nil, false, err
	}
	if t.Status != StatusCreated {
		return t, nil, found, nil
	}
	put, err := s.presignPut(ctx, t, ttl)
	if err != nil {
		return nil, nil, false, err
	}
	form, err := s.presignForm(ctx, t, ttl)
	if err != nil {
		return nil, nil, false, err
	}
	return t, &Upload{Put: put, Form: form}, found, nil
}

func (s *Store) presignPut(ctx context.Context, t *Task, ttl time.Duration) (*PresignedRequest, error) {
	key := s.inputOf(t)
	in := &s3.PutObjectInput{Bucket: &s.bucket, Key: &key, IfNoneMatch: aws.String("*")}
	if ct := s.files(t.Type).InputContentType; ct != "" {
		in.ContentType = aws.String(ct) // signed: another type breaks the signature
	}
	req, err := s.presign.PresignPutObject(ctx, in, s3.WithPresignExpires(ttl))
	if err != nil {
		return nil, fmt.Errorf("s3task: presign upload %s: %w", key, err)
	}
	return &PresignedRequest{Method: req.Method, URL: req.URL, Header: req.SignedHeader, Expires: s.opts.Clock().Add(ttl)}, nil
}

func (s *Store) presignForm(ctx context.Context, t *Task, ttl time.Duration) (*PresignedForm, error) {
	key := s.uploadKeyOf(t)
	ct := s.files(t.Type).InputContentType
	req, err := s.presign.PresignPostObject(ctx, &s3.PutObjectInput{Bucket: &s.bucket, Key: &key}, func(o *s3.PresignPostOptions) {
		o.Expires = ttl
		o.Conditions = []any{[]any{"content-length-range", 0, s.opts.MaxInputSize}}
		if ct != "" {
			o.Conditions = append(o.Conditions, []any{"eq", "$Content-Type", ct})
		}
	})
	if err != nil {
		return nil, fmt.Errorf("s3task: presign upload form %s: %w", key, err)
	}
	if ct != "" {
		req.Values["Content-Type"] = ct
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
	_, err := s.call(ctx, &Call{Op: OpUploadInput, TaskID: id, input: r})
	return err
}

func (s *Store) uploadInput(ctx context.Context, c *Call) (*Task, error) {
	t, err := s.uploadable(ctx, c, time.Minute)
	if err != nil {
		return nil, err
	}
	return t.task(), s.putInput(ctx, &t.Task, c.input)
}

// putInput uploads r as t's input, create-only.
func (s *Store) putInput(ctx context.Context, t *Task, r io.Reader) error {
	key := s.inputOf(t)
	body, size, cleanup, err := s.seekable(r, s.opts.MaxInputSize)
	if err != nil {
		var se *InputSizeError
		if errors.As(err, &se) {
			se.Key = key
		}
		return err
	}
	defer cleanup()
	switch created, err := s.createObject(ctx, key, body, size, s.files(t.Type).InputContentType); {
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
func (s *Store) createObject(ctx context.Context, key string, body io.ReadSeeker, size int64, contentType string) (bool, error) {
	token := s.revision(key)
	in := &s3.PutObjectInput{
		Bucket: &s.bucket, Key: &key, Body: body, ContentLength: aws.Int64(size),
		IfNoneMatch: aws.String("*"),
		Metadata:    map[string]string{"s3task-token": token},
	}
	if contentType != "" {
		in.ContentType = aws.String(contentType)
	}
	_, err := s.client.PutObject(ctx, in)
	if err == nil || !s3x.Lost(err) {
		return err == nil, err
	}
	head, herr := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: &key})
	if herr != nil {
		return false, fmt.Errorf("%w (and checking the object: %w)", err, herr)
	}
	return head.Metadata["s3task-token"] == token, nil
}

// spoolPattern names the library's temporary files in StoreOptions.SpoolDir.
const spoolPattern = "s3task-*"

// SpoolStaleAfter is the age past which a Worker that starts running removes
// a temporary file named s3task-* from StoreOptions.SpoolDir. Only files that
// could not be unlinked when they were made (on systems that do not allow
// it), or made by earlier versions, are ever seen there; an hour is longer
// than such a file is normally in use, and removing one still open does not
// disturb its reader on Unix.
const SpoolStaleAfter = time.Hour

// spool creates a temporary file in the spool folder and unlinks it at once
// where the system allows it; done closes it and removes it if it could not
// be unlinked.
func (s *Store) spool() (f *os.File, done func(), err error) {
	f, err = os.CreateTemp(s.opts.SpoolDir, spoolPattern)
	if err != nil {
		return nil, nil, err
	}
	// Unix keeps the data for the open descriptor; Windows refuses to
	// remove an open file, which is then removed on close.
	unlinked := os.Remove(f.Name()) == nil
	return f, func() {
		f.Close()
		if !unlinked {
			os.Remove(f.Name())
		}
	}, nil
}

// sweepSpool removes the files named s3task-* in the spool folder last
// modified more than SpoolStaleAfter ago. Errors are logged at debug level:
// a file another process still holds may not be removable.
func (s *Store) sweepSpool() {
	dir := s.opts.SpoolDir
	if dir == "" {
		dir = os.TempDir()
	}
	matches, err := filepath.Glob(filepath.Join(dir, spoolPattern))
	if err != nil {
		return
	}
	cutoff := time.Now().Add(-SpoolStaleAfter)
	for _, name := range matches {
		fi, err := os.Lstat(name)
		if err != nil || !fi.Mode().IsRegular() || !fi.ModTime().Before(cutoff) {
			continue
		}
		if err := os.Remove(name); err != nil {
			s.log.Debug("s3task: remove stale spool file", "file", name, "err", err)
		} else {
			s.log.Info("s3task: removed a stale spool file", "file", name, "modified", fi.ModTime())
		}
	}
}

// seekable returns r as a ReadSeeker positioned at its start, with its size,
// spooling it to a temporary file if r cannot seek. More than limit bytes is
// an *InputSizeError.
func (s *Store) seekable(r io.Reader, limit int64) (io.ReadSeeker, int64, func(), error) {
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
	f, cleanup, err := s.spool()
	if err != nil {
		return nil, 0, nil, err
	}
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

// output performs an OpPresignDownload or an OpOpenOutput of c's task,
// which must be completed: c.result is the *PresignedRequest or the
// output's io.ReadCloser.
func (s *Store) output(ctx context.Context, c *Call) (*Task, error) {
	t, _, err := s.current(ctx, c)
	if err != nil {
		return nil, err
	}
	if t.Status != StatusCompleted {
		return nil, fmt.Errorf("%w: task %s is %s", ErrNotCompleted, t.ID, t.Status)
	}
	key, ext := s.outputOf(&t.Task)
	if c.Op == OpOpenOutput {
		out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &key})
		if err != nil {
			if s3x.NotFound(err) {
				return nil, fmt.Errorf("%w: output %s", ErrNotFound, key)
			}
			return nil, fmt.Errorf("s3task: open output %s: %w", key, err)
		}
		c.result = out.Body
		return t.task(), nil
	}
	if err := checkTTL(c.TTL); err != nil {
		return nil, err
	}
	name := t.ID + "-output" + ext
	req, err := s.presign.PresignGetObject(ctx, &s3.GetObjectInput{
		Bucket:                     &s.bucket,
		Key:                        &key,
		ResponseContentDisposition: aws.String(`attachment; filename="` + name + `"`),
	}, s3.WithPresignExpires(c.TTL))
	if err != nil {
		return nil, fmt.Errorf("s3task: presign download %s: %w", key, err)
	}
	c.result = &PresignedRequest{Method: req.Method, URL: req.URL, Header: req.SignedHeader, Expires: s.opts.Clock().Add(c.TTL)}
	return t.task(), nil
}

// PresignDownload returns a presigned GET of a completed task's output, valid
// for ttl. Requests: one GET.
//
// Errors: [ErrInvalidID]; [ErrInvalidArgument] for a TTL outside 1s to 7 days;
// [ErrNotFound]; [ErrNotCompleted].
func (s *Store) PresignDownload(ctx context.Context, id string, ttl time.Duration) (*PresignedRequest, error) {
	if err := checkTTL(ttl); err != nil {
		return nil, err // no request for a bad TTL
	}
	c := &Call{Op: OpPresignDownload, TaskID: id, TTL: ttl}
	_, err := s.call(ctx, c)
	return result[*PresignedRequest](c, err)
}

// OpenOutput opens a completed task's output for reading; the caller closes
// it. Requests: two GETs.
//
// Errors: [ErrInvalidID]; [ErrNotFound] (also when the output object is
// gone); [ErrNotCompleted]; S3 errors otherwise.
func (s *Store) OpenOutput(ctx context.Context, id string) (io.ReadCloser, error) {
	c := &Call{Op: OpOpenOutput, TaskID: id}
	_, err := s.call(ctx, c)
	return result[io.ReadCloser](c, err)
}
