package s3task_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime/multipart"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/iotest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/s3test"
	"github.com/s3task/s3task/s3tasktest"
)

// The store tests run on the env of helpers_test.go; what follows are their
// own helpers.

// unchanged runs f and fails t if the bucket is not the same, object for
// object and byte for byte, afterwards: what must be refused must leave no
// trace.
func (e *env) unchanged(t *testing.T, what string, f func()) {
	t.Helper()
	before := e.snapshot("")
	f()
	if diff := cmp.Diff(before, e.snapshot("")); diff != "" {
		t.Errorf("%s changed the bucket (-before +after):\n%s", what, diff)
	}
}

// wantStored fails t unless got is the task as stored, and returns that.
func (e *env) wantStored(t *testing.T, got *s3task.Task) *s3task.Task {
	t.Helper()
	stored := e.get(t, got.ID)
	if diff := cmp.Diff(got, stored); diff != "" {
		t.Errorf("stored differs from returned (-returned +stored):\n%s", diff)
	}
	return stored
}

// wantCounts compares the requests of the store setup returned since the
// last Reset.
func (e *env) wantCounts(t *testing.T, want map[string]int) {
	t.Helper()
	if diff := cmp.Diff(want, e.count.Counts()); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}

// wantNoop calls call, a change the stored task has had already, and fails
// t unless it returns the task as stored after a single read.
func (e *env) wantNoop(t *testing.T, stored *s3task.Task, call func() (*s3task.Task, error)) {
	t.Helper()
	e.count.Reset()
	again, err := call()
	if err != nil {
		t.Fatal(err)
	}
	e.wantCounts(t, map[string]int{"GET": 1})
	if diff := cmp.Diff(stored, again); diff != "" {
		t.Errorf("the change made again (-stored +returned):\n%s", diff)
	}
}

// wantDueNow fails t unless task's DueAt is the moment of the change that
// wrote it: the server's time of the decision, taken just before the
// record's UpdatedAt stamp. Both come from the store's estimate of the
// server's clock, from one-second Date headers, so they may differ by that.
func wantDueNow(t *testing.T, task *s3task.Task) {
	t.Helper()
	if d := task.UpdatedAt.Sub(task.DueAt); task.DueAt.IsZero() || d < -2*time.Second || d > 2*time.Second {
		t.Errorf("due_at %v, want the time of the change (updated_at %v)", task.DueAt, task.UpdatedAt)
	}
}

// sendPresigned sends a presigned request with its signed headers and returns
// the body of S3's answer, failing t unless it is 200 OK.
func (e *env) sendPresigned(t *testing.T, p *s3task.PresignedRequest, body []byte) []byte {
	t.Helper()
	req, err := http.NewRequestWithContext(e.ctx, p.Method, p.URL, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range p.Header {
		if strings.EqualFold(k, "Host") {
			req.Host = vs[0]
		} else {
			req.Header[k] = vs
		}
	}
	return e.send(t, req, http.StatusOK)
}

// send sends req to the in-process S3 and returns the body of the answer,
// failing t unless its status is want, or any 2xx for 0.
func (e *env) send(t *testing.T, req *http.Request, want int) []byte {
	t.Helper()
	resp, err := e.httpClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := s3test.ReadAll(resp.Body, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != want && (want != 0 || resp.StatusCode/100 != 2) {
		t.Fatalf("%s %s: %s: %s", req.Method, req.URL.Path, resp.Status, body)
	}
	return body
}

// wantSubmits submits task id through st and fails t unless it is queued
// with an input of size bytes.
func wantSubmits(t *testing.T, e *env, st *s3task.Store, id string, size int) {
	t.Helper()
	got, err := st.Submit(e.ctx, id)
	if err != nil {
		t.Fatalf("Submit after the upload: %v", err)
	}
	if got.Status != s3task.StatusQueued || got.InputSize != int64(size) {
		t.Errorf("after submit: status %s, input size %d; want queued, %d", got.Status, got.InputSize, size)
	}
}

// postForm sends body through the presigned POST form f, as a browser
// does: every field, then the file last.
func (e *env) postForm(t *testing.T, f *s3task.PresignedForm, body []byte) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, k := range slices.Sorted(maps.Keys(f.Fields)) {
		if err := mw.WriteField(k, f.Fields[k]); err != nil {
			t.Fatal(err)
		}
	}
	fw, err := mw.CreateFormFile("file", "upload.csv")
	if err != nil {
		t.Fatal(err)
	}
	fw.Write(body)
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(e.ctx, http.MethodPost, f.URL, &buf)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	e.send(t, req, 0)
}

// taskIDs returns the IDs of tasks, in order.
func taskIDs(tasks []*s3task.Task) []string {
	var ids []string
	for _, task := range tasks {
		ids = append(ids, task.ID)
	}
	return ids
}

// invalidIDs are inputs that must never become part of a key. The valid ID
// they are derived from is returned too.
func invalidIDs(t *testing.T) []struct{ name, id string } {
	t.Helper()
	valid := s3task.NewID()
	for strings.ToLower(valid) == valid { // make sure lower-casing changes it
		valid = s3task.NewID()
	}
	return []struct{ name, id string }{
		{"empty", ""},
		{"parent path", "../x"},
		{"marker folder", "active"},
		{"dot dot", ".."},
		{"25 chars", valid[:25]},
		{"27 chars", valid + "0"},
		{"lower case of a valid ID", strings.ToLower(valid)},
		{"path traversal padded to 26", "A/../B" + strings.Repeat("0", 20)},
		{"percent-encoded dots", "%2e%2e"},
		{"contains I", valid[:25] + "I"},
		{"contains L", valid[:25] + "L"},
		{"contains O", valid[:25] + "O"},
		{"contains U", valid[:25] + "U"},
		{"starts with 8 (overflows 128 bits)", "8" + valid[1:]},
		{"NUL byte", valid[:12] + "\x00" + valid[13:]},
		{"trailing newline", valid[:25] + "\n"},
	}
}

func TestNewStore(t *testing.T) {
	t.Parallel()
	srv := s3tasktest.NewS3(t)
	bucket := srv.Bucket()
	var count s3test.Counter
	client := srv.Client(count.Wrap)

	t.Run("defaults", func(t *testing.T) {
		st, err := s3task.NewStore(client, bucket, nil)
		if err != nil {
			t.Fatal(err)
		}
		if st.Prefix() != s3task.DefaultPrefix || st.Bucket() != bucket {
			t.Errorf("Prefix, Bucket = %q, %q; want %q, %q", st.Prefix(), st.Bucket(), s3task.DefaultPrefix, bucket)
		}
	})

	t.Run("options are copied, not changed", func(t *testing.T) {
		opts := &s3task.StoreOptions{Prefix: "jobs/", InputExt: ".csv"}
		before := *opts
		st, err := s3task.NewStore(client, bucket, opts)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(before, *opts); diff != "" {
			t.Errorf("NewStore changed the caller's options (-before +after):\n%s", diff)
		}
		opts.Prefix = "other/"
		if st.Prefix() != "jobs/" {
			t.Errorf("Prefix() = %q after the caller changed its struct, want jobs/", st.Prefix())
		}
	})

	bad := []struct {
		name   string
		client *s3.Client
		bucket string
		opts   s3task.StoreOptions
		field  string // what the message must name
	}{
		{"nil client", nil, bucket, s3task.StoreOptions{}, "client"},
		{"empty bucket", client, "", s3task.StoreOptions{}, "bucket"},
		{"prefix without trailing slash", client, bucket, s3task.StoreOptions{Prefix: "tasks"}, "Prefix"},
		{"prefix with leading slash", client, bucket, s3task.StoreOptions{Prefix: "/tasks/"}, "Prefix"},
		{"prefix with empty segment", client, bucket, s3task.StoreOptions{Prefix: "a//b/"}, "Prefix"},
		{"input extension with a slash", client, bucket, s3task.StoreOptions{InputExt: "/../x"}, "InputExt"},
		{"output extension with a space", client, bucket, s3task.StoreOptions{OutputExt: ". csv"}, "OutputExt"},
		{"extension too long", client, bucket, s3task.StoreOptions{InputExt: "." + strings.Repeat("x", 32)}, "InputExt"},
		{"negative MaxAttempts", client, bucket, s3task.StoreOptions{MaxAttempts: -1}, "MaxAttempts"},
		{"negative MaxInputSize", client, bucket, s3task.StoreOptions{MaxInputSize: -1}, "MaxInputSize"},
		{"negative MaxPayloadSize", client, bucket, s3task.StoreOptions{MaxPayloadSize: -1}, "MaxPayloadSize"},
		{"MaxPayloadSize leaves no room in a record", client, bucket, s3task.StoreOptions{MaxPayloadSize: 1 << 20}, "MaxPayloadSize"},
		{"negative ListConcurrency", client, bucket, s3task.StoreOptions{ListConcurrency: -1}, "ListConcurrency"},
		{"negative ConflictRetries", client, bucket, s3task.StoreOptions{ConflictRetries: -1}, "ConflictRetries"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			st, err := s3task.NewStore(tc.client, tc.bucket, &tc.opts)
			if !errors.Is(err, s3task.ErrInvalidOptions) {
				t.Fatalf("err = %v, want ErrInvalidOptions", err)
			}
			if st != nil {
				t.Error("got a Store along with the error")
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error %q does not name %s", err, tc.field)
			}
		})
	}
	if n := count.Total(); n != 0 {
		t.Errorf("NewStore made %d requests (%s), want none", n, count.String())
	}
}

func TestCreate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		opts        *s3task.StoreOptions
		params      s3task.CreateParams
		wantPayload string
		wantMax     int
	}{
		{name: "zero params", params: s3task.CreateParams{}, wantMax: s3task.DefaultMaxAttempts},
		{
			name: "every field",
			params: s3task.CreateParams{
				Name: "March invoices", Type: "invoices.import", CreatedBy: "alice",
				Payload: json.RawMessage(`{ "rows" : [1, 2],  "dry_run": true }`), MaxAttempts: 7,
			},
			wantPayload: `{"rows":[1,2],"dry_run":true}`,
			wantMax:     7,
		},
		{name: "store default attempts", opts: &s3task.StoreOptions{MaxAttempts: 5}, wantMax: 5},
		{name: "fields at their limits", params: s3task.CreateParams{
			Name: strings.Repeat("n", 256), Type: strings.Repeat("t", 128), CreatedBy: strings.Repeat("c", 256), MaxAttempts: 1000,
		}, wantMax: 1000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st, e := setup(t, tc.opts)
			got, err := st.Create(e.ctx, tc.params)
			if err != nil {
				t.Fatal(err)
			}
			e.wantCounts(t, map[string]int{"PUT": 1})
			if err := s3task.ParseID(got.ID); err != nil {
				t.Errorf("ID %q: %v", got.ID, err)
			}
			idTime, err := s3task.IDTime(got.ID)
			if err != nil || !idTime.Equal(got.CreatedAt) {
				t.Errorf("IDTime = %v, %v; want CreatedAt %v", idTime, err, got.CreatedAt)
			}
			want := &s3task.Task{
				SchemaVersion: s3task.SchemaVersion, ID: got.ID, Name: tc.params.Name, Type: tc.params.Type,
				Status: s3task.StatusCreated, MaxAttempts: tc.wantMax, CreatedBy: tc.params.CreatedBy,
				InputPath: e.inputKey(t, got.ID), CreatedAt: got.CreatedAt, UpdatedAt: got.UpdatedAt, Revision: got.Revision,
			}
			if w := e.stored(t, got.ID).Writes; w != 1 {
				t.Errorf("the created record counts %d writes, want 1", w)
			}
			if tc.wantPayload != "" {
				want.Payload = json.RawMessage(tc.wantPayload)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("created task (-want +got):\n%s", diff)
			}
			if got.Revision == "" {
				t.Error("empty revision")
			}
			e.wantStored(t, got)
		})
	}

	t.Run("invalid params", func(t *testing.T) {
		t.Parallel()
		st, e := setup(t, &s3task.StoreOptions{MaxPayloadSize: 64})
		bad := []struct {
			name   string
			params s3task.CreateParams
		}{
			{"name too long", s3task.CreateParams{Name: strings.Repeat("n", 257)}},
			{"type too long", s3task.CreateParams{Type: strings.Repeat("t", 129)}},
			{"created by too long", s3task.CreateParams{CreatedBy: strings.Repeat("c", 257)}},
			{"name not UTF-8", s3task.CreateParams{Name: "bad \xff byte"}},
			{"payload not JSON", s3task.CreateParams{Payload: json.RawMessage(`{"a":`)}},
			{"payload over MaxPayloadSize", s3task.CreateParams{Payload: json.RawMessage(`"` + strings.Repeat("p", 64) + `"`)}},
			{"negative MaxAttempts", s3task.CreateParams{MaxAttempts: -1}},
			{"MaxAttempts over 1000", s3task.CreateParams{MaxAttempts: 1001}},
		}
		for _, tc := range bad {
			t.Run(tc.name, func(t *testing.T) {
				e.count.Reset()
				got, err := st.Create(e.ctx, tc.params)
				if !errors.Is(err, s3task.ErrInvalidArgument) || got != nil {
					t.Errorf("Create = %v, %v; want nil, ErrInvalidArgument", got, err)
				}
				e.wantCounts(t, map[string]int{})
			})
		}
		if snap := e.snapshot(""); len(snap) != 0 {
			t.Errorf("refused creates left objects: %v", snap)
		}
	})
}

func TestGet(t *testing.T) {
	t.Parallel()
	st, e := setup(t, nil)
	created := e.task(t, "created")

	e.count.Reset()
	got, err := st.Get(e.ctx, created.ID)
	if err != nil {
		t.Fatal(err)
	}
	e.wantCounts(t, map[string]int{"GET": 1})
	if diff := cmp.Diff(created, got); diff != "" {
		t.Errorf("Get (-want +got):\n%s", diff)
	}

	// The returned value is a copy.
	got.Status = s3task.StatusCompleted
	again, err := st.Get(e.ctx, created.ID)
	if err != nil || again.Status != s3task.StatusCreated {
		t.Errorf("after changing a returned task, Get = %v, %v", again, err)
	}

	missing := s3task.NewID()
	if _, err := st.Get(e.ctx, missing); !errors.Is(err, s3task.ErrNotFound) {
		t.Errorf("Get(unknown ID) err = %v, want ErrNotFound", err)
	}
}

// plainReader hides every method but Read, so UploadInput cannot seek.
type plainReader struct{ r io.Reader }

func (p plainReader) Read(b []byte) (int, error) { return p.r.Read(b) }

func TestUploadInput(t *testing.T) {
	t.Parallel()
	const limit = 16
	st, e := setup(t, &s3task.StoreOptions{MaxInputSize: limit, InputExt: ".csv"})
	data := []byte("id,amount\n1,9.50")

	partly := bytes.NewReader([]byte("skip:" + string(data)))
	if _, err := partly.Seek(5, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	ok := []struct {
		name string
		r    io.Reader
		want []byte
	}{
		{"seekable reader", bytes.NewReader(data), data},
		{"reader that cannot seek is spooled", plainReader{bytes.NewReader(data)}, data},
		{"seekable reader uploads from its current offset", partly, data},
		{"empty input", strings.NewReader(""), []byte{}},
	}
	for _, tc := range ok {
		t.Run(tc.name, func(t *testing.T) {
			task := e.task(t, "created-no-input")
			e.count.Reset()
			if err := st.UploadInput(e.ctx, task.ID, tc.r); err != nil {
				t.Fatal(err)
			}
			e.wantCounts(t, map[string]int{"GET": 1, "PUT": 1})
			got, found := e.object(e.inputKey(t, task.ID))
			if !found || !bytes.Equal(got, tc.want) {
				t.Errorf("stored input = %q (found %v), want %q", got, found, tc.want)
			}
			after, err := e.store.Get(e.ctx, task.ID)
			if err != nil || after.Status != s3task.StatusCreated || after.Revision != task.Revision {
				t.Errorf("UploadInput changed the record: %+v, %v", after, err)
			}
		})
	}

	tooBig := bytes.Repeat([]byte("x"), limit+1)
	readErr := errors.New("disk on fire")
	bad := []struct {
		name  string
		state string // "" for an unknown ID
		r     io.Reader
		check func(t *testing.T, err error, id string)
	}{
		{"unknown task", "", bytes.NewReader(data), wantIs(s3task.ErrNotFound)},
		{"already submitted", "queued", bytes.NewReader(data), wantTransition(s3task.StatusQueued)},
		{"abandoned", "abandoned", bytes.NewReader(data), wantTransition(s3task.StatusAbandoned)},
		{"seekable input over the limit", "created-no-input", bytes.NewReader(tooBig), wantInputSize(e, limit)},
		{"spooled input over the limit", "created-no-input", plainReader{bytes.NewReader(tooBig)}, wantInputSize(e, limit)},
		{"reader fails", "created-no-input", iotest.ErrReader(readErr), wantIs(readErr)},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			id := e.taskID(t, tc.state)
			refused(t, e, id, tc.check, func() (*s3task.Task, error) { return nil, st.UploadInput(e.ctx, id, tc.r) })
		})
	}
}

func wantTransition(from s3task.Status) func(t *testing.T, err error, id string) {
	return func(t *testing.T, err error, id string) {
		t.Helper()
		var te *s3task.TransitionError
		if !errors.As(err, &te) || !errors.Is(err, s3task.ErrInvalidTransition) {
			t.Fatalf("err = %v, want a *TransitionError", err)
		}
		if te.ID != id || te.From != from {
			t.Errorf("TransitionError{ID: %q, From: %q}, want {%q, %q}", te.ID, te.From, id, from)
		}
	}
}

func wantInputSize(e *env, limit int64) func(t *testing.T, err error, id string) {
	return func(t *testing.T, err error, id string) {
		t.Helper()
		var se *s3task.InputSizeError
		if !errors.As(err, &se) || !errors.Is(err, s3task.ErrInputTooLarge) {
			t.Fatalf("err = %v, want an *InputSizeError", err)
		}
		if se.Key != e.inputKey(t, id) || se.Limit != limit || se.Size <= limit {
			t.Errorf("InputSizeError = %+v, want key %s, limit %d and a size above it", se, e.inputKey(t, id), limit)
		}
	}
}

// sign calls presign, which must succeed after a single read of the record
// (signing is local), and returns what it signed and when it was called.
func sign[T any](t *testing.T, e *env, presign func() (T, error)) (T, callTime) {
	t.Helper()
	e.count.Reset()
	called := callTime{before: time.Now()}
	p, err := presign()
	called.after = time.Now()
	if err != nil {
		t.Fatal(err)
	}
	e.wantCounts(t, map[string]int{"GET": 1})
	return p, called
}

// callTime is when a call was made: between before and after.
type callTime struct{ before, after time.Time }

// wantExpires fails t unless expires is ttl after a moment of the call.
func (c callTime) wantExpires(t *testing.T, expires time.Time, ttl time.Duration) {
	t.Helper()
	if expires.Before(c.before.Add(ttl)) || expires.After(c.after.Add(ttl)) {
		t.Errorf("Expires = %v, want %v from the call", expires, ttl)
	}
}

// presignErrorCases are the documented failures shared by PresignUpload and
// PresignUploadForm.
func presignErrorCases[T comparable](t *testing.T, e *env, call func(id string, ttl time.Duration) (T, error)) {
	t.Helper()
	tests := []struct {
		name  string
		state string // "" for an unknown ID
		ttl   time.Duration
		check func(t *testing.T, err error, id string)
		calls bool // whether S3 may be asked
	}{
		{"zero TTL", "created", 0, wantIs(s3task.ErrInvalidArgument), false},
		{"negative TTL", "created", -time.Minute, wantIs(s3task.ErrInvalidArgument), false},
		{"TTL under a second", "created", 999 * time.Millisecond, wantIs(s3task.ErrInvalidArgument), false},
		{"TTL of 8 days", "created", 8 * 24 * time.Hour, wantIs(s3task.ErrInvalidArgument), false},
		{"unknown task", "", time.Minute, wantIs(s3task.ErrNotFound), true},
		{"submitted task", "queued", time.Minute, wantTransition(s3task.StatusQueued), true},
		{"completed task", "completed", time.Minute, wantTransition(s3task.StatusCompleted), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id := e.taskID(t, tc.state)
			e.count.Reset()
			refused(t, e, id, tc.check, func() (T, error) { return call(id, tc.ttl) })
			if !tc.calls {
				e.wantCounts(t, map[string]int{})
			}
		})
	}
}

// taskID returns the ID of a new task brought to state (see env.task), or
// an unknown ID if state is "".
func (e *env) taskID(t *testing.T, state string) string {
	t.Helper()
	if state == "" {
		return s3task.NewID()
	}
	return e.task(t, state).ID
}

// refused calls call on task id, which it must refuse, and fails t unless
// check accepts the error, nothing came with it, and the bucket is as it
// was.
func refused[T comparable](t *testing.T, e *env, id string, check func(*testing.T, error, string), call func() (T, error)) {
	t.Helper()
	e.unchanged(t, "a refused call", func() {
		got, err := call()
		if none := *new(T); got != none {
			if c, ok := any(got).(io.Closer); ok {
				c.Close()
			}
			t.Errorf("got %v along with error %v", got, err)
		}
		check(t, err, id)
	})
}

func wantIs(target error) func(t *testing.T, err error, id string) {
	return func(t *testing.T, err error, _ string) {
		t.Helper()
		if !errors.Is(err, target) {
			t.Errorf("err = %v, want %v", err, target)
		}
	}
}

func TestPresignUpload(t *testing.T) {
	t.Parallel()
	st, e := setup(t, &s3task.StoreOptions{InputExt: ".csv"})

	t.Run("upload then submit", func(t *testing.T) {
		task := e.task(t, "created-no-input")
		ttl := 15 * time.Minute
		p, called := sign(t, e, func() (*s3task.PresignedRequest, error) { return st.PresignUpload(e.ctx, task.ID, ttl) })
		if p.Method != http.MethodPut {
			t.Errorf("Method = %q, want PUT", p.Method)
		}
		called.wantExpires(t, p.Expires, ttl)
		if !strings.Contains(p.URL, e.inputKey(t, task.ID)) {
			t.Errorf("URL %q does not address the input key %s", p.URL, e.inputKey(t, task.ID))
		}
		body := []byte("name,qty\nbolt,12\n")
		e.sendPresigned(t, p, body)
		wantSubmits(t, e, st, task.ID, len(body))
	})

	t.Run("TTL bounds are inclusive", func(t *testing.T) {
		task := e.task(t, "created")
		for _, ttl := range []time.Duration{time.Second, s3task.MaxPresignTTL} {
			if _, err := st.PresignUpload(e.ctx, task.ID, ttl); err != nil {
				t.Errorf("PresignUpload(ttl %v): %v", ttl, err)
			}
		}
	})

	presignErrorCases(t, e, func(id string, ttl time.Duration) (*s3task.PresignedRequest, error) {
		return st.PresignUpload(e.ctx, id, ttl)
	})
}

func TestPresignUploadForm(t *testing.T) {
	t.Parallel()
	const limit = 1 << 20
	st, e := setup(t, &s3task.StoreOptions{MaxInputSize: limit})

	t.Run("upload then submit", func(t *testing.T) {
		task := e.task(t, "created-no-input")
		ttl := 10 * time.Minute
		f, called := sign(t, e, func() (*s3task.PresignedForm, error) { return st.PresignUploadForm(e.ctx, task.ID, ttl) })
		if f.MaxSize != limit {
			t.Errorf("MaxSize = %d, want %d", f.MaxSize, limit)
		}
		called.wantExpires(t, f.Expires, ttl)
		if want := e.folder(task.ID) + "upload"; f.Fields["key"] != want {
			t.Errorf("key field = %q, want the upload object %q, never the input", f.Fields["key"], want)
		}

		// The policy must cap the size. gofakes3 does not enforce it, so
		// read it.
		raw, err := base64.StdEncoding.DecodeString(f.Fields["policy"])
		if err != nil {
			t.Fatalf("policy field %q: %v", f.Fields["policy"], err)
		}
		var policy struct {
			Conditions []any `json:"conditions"`
		}
		if err := json.Unmarshal(raw, &policy); err != nil {
			t.Fatalf("policy %s: %v", raw, err)
		}
		capped := false
		for _, c := range policy.Conditions {
			if arr, ok := c.([]any); ok && len(arr) == 3 && arr[0] == "content-length-range" {
				capped = arr[2] == float64(limit)
			}
		}
		if !capped {
			t.Errorf("policy %s has no content-length-range up to %d", raw, limit)
		}

		body := []byte("sku,qty\nA-1,3\n")
		e.postForm(t, f, body)
		e.count.Reset()
		wantSubmits(t, e, st, task.ID, len(body))
		// Beside a Submit's usual requests: the input's HEAD finds none,
		// the upload is read and copied, create-only, the copy's HEAD gives
		// the ETag, and the upload object is deleted.
		e.wantCounts(t, map[string]int{"GET": 3, "HEAD": 2, "PUT": 4, "DELETE": 1})
		if got, ok := e.object(e.inputKey(t, task.ID)); !ok || string(got) != string(body) {
			t.Errorf("input after Submit: %q (found %v), want the form's file", got, ok)
		}
		if e.exists(f.Fields["key"]) {
			t.Errorf("the upload object %s is still there after Submit", f.Fields["key"])
		}
	})

	presignErrorCases(t, e, func(id string, ttl time.Duration) (*s3task.PresignedForm, error) {
		return st.PresignUploadForm(e.ctx, id, ttl)
	})
}

func TestSubmit(t *testing.T) {
	t.Parallel()
	const limit = 64
	st, e := setup(t, &s3task.StoreOptions{MaxInputSize: limit})

	t.Run("created with input", func(t *testing.T) {
		task := e.task(t, "created-no-input")
		input := []byte(strings.Repeat("z", limit)) // exactly at the limit
		etag := e.put(t, e.inputKey(t, task.ID), input)

		e.count.Reset()
		got, err := st.Submit(e.ctx, task.ID)
		if err != nil {
			t.Fatal(err)
		}
		e.wantCounts(t, map[string]int{"GET": 2, "HEAD": 1, "PUT": 3}) // record and wake object read; marker, record, wake written
		want := task
		want.Status, want.InputSize = s3task.StatusQueued, int64(len(input))
		if r := e.stored(t, task.ID); r.InputETag != etag {
			t.Errorf("submitted record's input_etag %s, want the input's %s", r.InputETag, etag)
		}
		want.DueAt = got.DueAt             // checked below
		want.SubmittedAt = got.SubmittedAt // likewise
		if diff := cmp.Diff(want, got, ignoreWriteStamp()); diff != "" {
			t.Errorf("submitted task (-want +got):\n%s", diff)
		}
		if got.SubmittedAt.IsZero() || got.SubmittedAt.After(got.UpdatedAt) || got.SubmittedAt.Before(task.UpdatedAt) {
			t.Errorf("submitted_at %s, want the submit's time, between the record's previous write %s and this one %s", got.SubmittedAt, task.UpdatedAt, got.UpdatedAt)
		}
		wantDueNow(t, got) // no RunAt: due at once
		if got.Scheduled(got.UpdatedAt) {
			t.Error("a task submitted without RunAt is scheduled")
		}
		if got.Revision == task.Revision {
			t.Error("revision unchanged by a write")
		}
		// One marker, named after the submit time.
		e.wantMarkers(t, task.ID, e.dueMarkerKey(got))
		stored := e.wantStored(t, got)

		t.Run("again changes nothing, and announces the task again", func(t *testing.T) {
			e.count.Reset()
			again, err := st.Submit(e.ctx, task.ID)
			if err != nil {
				t.Fatal(err)
			}
			e.wantCounts(t, map[string]int{"GET": 1, "PUT": 1}) // the record; the wake object, over the Store's copy
			if diff := cmp.Diff(stored, again); diff != "" {
				t.Errorf("the change made again (-stored +returned):\n%s", diff)
			}
		})
	})

	bad := []struct {
		name  string
		state string
		input []byte // replaces the task's input when not nil
		check func(t *testing.T, err error, id string)
	}{
		{"unknown task", "", nil, wantIs(s3task.ErrNotFound)},
		{"no input", "created-no-input", nil, wantIs(s3task.ErrInputMissing)},
		{"input over MaxInputSize", "created-no-input", bytes.Repeat([]byte("x"), limit+1), wantInputSize(e, limit)},
		{"running", "running", nil, wantTransition(s3task.StatusRunning)},
		{"completed", "completed", nil, wantTransition(s3task.StatusCompleted)},
		{"failed", "failed", nil, wantTransition(s3task.StatusFailed)},
		{"abandoned", "abandoned", nil, wantTransition(s3task.StatusAbandoned)},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			id := e.taskID(t, tc.state)
			if tc.input != nil {
				e.put(t, e.inputKey(t, id), tc.input)
			}
			refused(t, e, id, tc.check, func() (*s3task.Task, error) { return st.Submit(e.ctx, id) })
		})
	}
}

// ignoreWriteStamp ignores what every write renews.
func ignoreWriteStamp() cmp.Option {
	return cmp.FilterPath(func(p cmp.Path) bool {
		s := p.String()
		return s == "Revision" || s == "UpdatedAt" || s == "Writes" || s == "PriorRevisions"
	}, cmp.Ignore())
}

func TestCancel(t *testing.T) {
	t.Parallel()
	st, e := setup(t, nil)

	// Cancel deletes the task's marker, after the record, when it has one:
	// queued, running and failed waiting for a retry do; created and failed
	// for good do not.
	for _, tc := range []struct {
		state  string
		marked bool
	}{{"created", false}, {"queued", true}, {"running", true}, {"failed", false}, {"failed-waiting", true}} {
		state := tc.state
		t.Run("from "+state, func(t *testing.T) {
			task := e.task(t, state)
			if tc.marked {
				e.wantMarkers(t, task.ID, e.dueMarkerKey(task))
			} else {
				e.wantMarkers(t, task.ID)
			}
			reason := "operator said so while " + state
			e.count.Reset()
			got, err := st.Cancel(e.ctx, task.ID, reason)
			if err != nil {
				t.Fatal(err)
			}
			wantReqs := map[string]int{"GET": 1, "PUT": 1}
			if tc.marked {
				wantReqs["DELETE"] = 1
			}
			e.wantCounts(t, wantReqs)
			want := task // DueAt too is kept: the task needs no worker any more, and no marker
			want.Status, want.CancelReason, want.RetryAt, want.LeaseExpiresAt = s3task.StatusAbandoned, reason, time.Time{}, time.Time{}
			if state == "running" && len(got.History) == 1 {
				// The running attempt ends with the task. This record was
				// written without a history, as an earlier version would
				// have: its entry is made from what the record says.
				want.History = []s3task.Attempt{{Number: 1, WorkerID: task.WorkerID, StartedAt: task.StartedAt,
					EndedAt: got.History[0].EndedAt, Outcome: s3task.OutcomeCanceled}}
				if got.History[0].EndedAt.Before(task.UpdatedAt) {
					t.Errorf("the cancelled attempt ended at %s, before the record's last write %s", got.History[0].EndedAt, task.UpdatedAt)
				}
			}
			if diff := cmp.Diff(want, got, ignoreWriteStamp()); diff != "" {
				t.Errorf("cancelled task (-want +got):\n%s", diff)
			}
			if got.Revision == task.Revision {
				t.Error("revision unchanged by a write")
			}
			e.wantMarkers(t, task.ID) // none left
			stored := e.wantStored(t, got)

			e.wantNoop(t, stored, func() (*s3task.Task, error) { return st.Cancel(e.ctx, task.ID, "a second reason") })
		})
	}

	// With an OnTerminal hook, a created task, which has no marker, gets one
	// before its record is written, due now, so that its notice can be found
	// if this store fails to deliver it; the delivered notice removes it.
	t.Run("created, with an OnTerminal hook", func(t *testing.T) {
		var notified []s3task.Status
		rec := &recorder{}
		count := &s3test.Counter{}
		hooked := e.newStore(t, &s3task.StoreOptions{OnTerminal: func(_ context.Context, x *s3task.Task) error {
			notified = append(notified, x.Status)
			return nil
		}}, rec.wrap, count.Wrap)
		task := e.task(t, "created")
		e.wantMarkers(t, task.ID)
		got, err := hooked.Cancel(e.ctx, task.ID, "with a notice")
		if err != nil {
			t.Fatal(err)
		}
		// Read, marker, record; the notice: read again, hook, record, marker.
		if diff := cmp.Diff(map[string]int{"GET": 2, "PUT": 3, "DELETE": 1}, count.Counts()); diff != "" {
			t.Errorf("requests (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]s3task.Status{s3task.StatusAbandoned}, notified); diff != "" {
			t.Errorf("OnTerminal calls (-want +got):\n%s", diff)
		}
		if stored := e.stored(t, task.ID); got.Status != s3task.StatusAbandoned || stored.NotifyPending {
			t.Errorf("after Cancel: status %s, notify_pending %v; want abandoned, delivered", got.Status, stored.NotifyPending)
		}
		wantDueNow(t, got)
		key := e.dueMarkerKey(got)
		put, record, del := rec.index("PUT "+key), rec.index("PUT "+e.recordKey(task.ID)), rec.index("DELETE "+key)
		if put < 0 || record < 0 || del < 0 || put > record || del < record {
			t.Errorf("want PUT %s, then the record, then its DELETE; got: %s", key, rec)
		}
		e.wantMarkers(t, task.ID)
	})

	t.Run("reason at the limit", func(t *testing.T) {
		task := e.task(t, "created")
		reason := strings.Repeat("r", 1024)
		got, err := st.Cancel(e.ctx, task.ID, reason)
		if err != nil || got.CancelReason != reason {
			t.Errorf("Cancel with a 1024-byte reason = %v, %v", got, err)
		}
	})

	bad := []struct {
		name   string
		state  string
		reason string
		check  func(t *testing.T, err error, id string)
		calls  bool
	}{
		{"reason too long", "created", strings.Repeat("r", 1025), wantIs(s3task.ErrInvalidArgument), false},
		{"reason not UTF-8", "created", "bad \xc3", wantIs(s3task.ErrInvalidArgument), false},
		{"unknown task", "", "x", wantIs(s3task.ErrNotFound), true},
		{"completed", "completed", "x", wantTransition(s3task.StatusCompleted), true},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			id := e.taskID(t, tc.state)
			e.count.Reset()
			refused(t, e, id, tc.check, func() (*s3task.Task, error) { return st.Cancel(e.ctx, id, tc.reason) })
			if !tc.calls {
				e.wantCounts(t, map[string]int{})
			}
		})
	}
}

func TestSchedule(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	rec := &recorder{}
	wakeKey := e.store.Prefix() + "_wake"

	// schedule calls Schedule with the requests counted and recorded,
	// through a Store of its own: one with no copy of the wake object
	// (see Submit's), which reads it before it adds to it.
	schedule := func(t *testing.T, id string, at time.Time) (*s3task.Task, error) {
		t.Helper()
		st := e.newStore(t, nil, rec.wrap, e.count.Wrap)
		e.count.Reset()
		rec.reset()
		return st.Schedule(e.ctx, id, at)
	}

	t.Run("created: sets RunAt only", func(t *testing.T) {
		task := e.task(t, "created")
		at := now().Add(time.Hour).In(time.FixedZone("UTC+3", 3*3600))
		got, err := schedule(t, task.ID, at)
		if err != nil {
			t.Fatal(err)
		}
		e.wantCounts(t, map[string]int{"GET": 1, "PUT": 1}) // the record only: no marker, no wake
		want := task
		want.RunAt = at.UTC()
		if diff := cmp.Diff(want, got, ignoreWriteStamp()); diff != "" {
			t.Errorf("scheduled task (-want +got):\n%s", diff)
		}
		if got.RunAt.Location() != time.UTC || !got.DueAt.IsZero() || got.Scheduled(now()) {
			t.Errorf("RunAt %v (in %v), DueAt %v, Scheduled %v; want UTC, no DueAt, not scheduled (not queued yet)", got.RunAt, got.RunAt.Location(), got.DueAt, got.Scheduled(now()))
		}
		e.wantMarkers(t, task.ID)
		stored := e.wantStored(t, got)

		t.Run("again changes nothing", func(t *testing.T) {
			e.wantNoop(t, stored, func() (*s3task.Task, error) { return schedule(t, task.ID, at) })
		})
		t.Run("submit then waits for it", func(t *testing.T) {
			sub, err := e.store.Submit(e.ctx, task.ID)
			if err != nil {
				t.Fatal(err)
			}
			if !sub.DueAt.Equal(at) || !sub.Scheduled(now()) {
				t.Errorf("submitted: DueAt %v, Scheduled %v; want %v, true", sub.DueAt, sub.Scheduled(now()), at)
			}
			e.wantMarkers(t, task.ID, e.dueMarkerKey(sub))
		})
	})

	t.Run("queued: moves the marker", func(t *testing.T) {
		task := e.task(t, "queued")
		old := e.dueMarkerKey(task)
		e.wantMarkers(t, task.ID, old)
		at := now().Add(time.Hour)
		got, err := schedule(t, task.ID, at)
		if err != nil {
			t.Fatal(err)
		}
		// New marker, record, old marker, and the wake object: idle workers
		// note when to list.
		e.wantCounts(t, map[string]int{"GET": 2, "PUT": 3, "DELETE": 1})
		want := task
		want.RunAt, want.DueAt = at, at
		if diff := cmp.Diff(want, got, ignoreWriteStamp()); diff != "" {
			t.Errorf("scheduled task (-want +got):\n%s", diff)
		}
		if !got.Scheduled(now()) || got.Scheduled(at) {
			t.Errorf("Scheduled(now) %v, Scheduled(RunAt) %v; want true, false", got.Scheduled(now()), got.Scheduled(at))
		}
		key := e.dueMarkerKey(got)
		if key == old {
			t.Fatalf("marker key %s unchanged", key)
		}
		put, record, del := rec.index("PUT "+key), rec.index("PUT "+e.recordKey(task.ID)), rec.index("DELETE "+old)
		if put < 0 || record < 0 || del < 0 || put > record || del < record {
			t.Errorf("want PUT %s, the record, then DELETE %s; got: %s", key, old, rec)
		}
		e.wantMarkers(t, task.ID, key) // the old one is gone

		t.Run("run now", func(t *testing.T) {
			got, err := schedule(t, task.ID, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			// New marker, record, wake; the marker due in an hour goes.
			e.wantCounts(t, map[string]int{"GET": 2, "PUT": 3, "DELETE": 1}) // record and wake object read
			if rec.index("PUT "+wakeKey) < 0 {
				t.Errorf("no wake after a run-now: %s", rec)
			}
			if !got.RunAt.IsZero() || got.Scheduled(got.UpdatedAt) {
				t.Errorf("RunAt %v, Scheduled %v; want zero, false", got.RunAt, got.Scheduled(got.UpdatedAt))
			}
			wantDueNow(t, got)
			if rec.index("DELETE "+key) < 0 {
				t.Errorf("the scheduled marker %s was not deleted: %s", key, rec)
			}
			e.wantMarkers(t, task.ID, e.dueMarkerKey(got))
		})
	})

	// A task that may run now already keeps its place in the queue when
	// told to run now, or at a time past.
	for _, at := range []time.Time{{}, now().Add(-time.Hour)} {
		t.Run(fmt.Sprintf("queued: run at %v changes nothing", at), func(t *testing.T) {
			task := e.task(t, "queued")
			e.unchanged(t, "Schedule", func() {
				e.wantNoop(t, task, func() (*s3task.Task, error) { return schedule(t, task.ID, at) })
			})
		})
	}

	t.Run("scheduled: a time past means now", func(t *testing.T) {
		task := e.task(t, "queued")
		if _, err := e.store.Schedule(e.ctx, task.ID, now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		scheduled := e.markerKey(task.ID)
		past := now().Add(-time.Hour)
		got, err := schedule(t, task.ID, past)
		if err != nil {
			t.Fatal(err)
		}
		e.wantCounts(t, map[string]int{"GET": 2, "PUT": 3, "DELETE": 1}) // record and wake object read; marker, record, wake written; the scheduled marker deleted
		if !got.RunAt.Equal(past) || got.Scheduled(got.UpdatedAt) {
			t.Errorf("RunAt %v, Scheduled %v; want %v, false", got.RunAt, got.Scheduled(got.UpdatedAt), past)
		}
		wantDueNow(t, got) // not the time past: a marker is never backdated
		if rec.index("PUT "+wakeKey) < 0 {
			t.Errorf("no wake for a task due now: %s", rec)
		}
		if rec.index("DELETE "+scheduled) < 0 {
			t.Errorf("the scheduled marker %s was not deleted: %s", scheduled, rec)
		}
		e.wantMarkers(t, task.ID, e.dueMarkerKey(got))
	})

	bad := []struct {
		name  string
		state string
		check func(t *testing.T, err error, id string)
	}{
		{"unknown task", "", wantIs(s3task.ErrNotFound)},
		{"running", "running", wantTransition(s3task.StatusRunning)},
		{"completed", "completed", wantTransition(s3task.StatusCompleted)},
		{"failed", "failed", wantTransition(s3task.StatusFailed)},
		{"failed-waiting", "failed-waiting", wantTransition(s3task.StatusFailed)},
		{"abandoned", "abandoned", wantTransition(s3task.StatusAbandoned)},
	}
	for _, tc := range bad {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			id := e.taskID(t, tc.state)
			refused(t, e, id, tc.check, func() (*s3task.Task, error) { return schedule(t, id, now().Add(time.Hour)) })
			e.wantCounts(t, map[string]int{"GET": 1})
		})
	}
	t.Run("refused: invalid ID", func(t *testing.T) {
		got, err := schedule(t, "../x", now())
		var ie *s3task.IDError
		if got != nil || !errors.Is(err, s3task.ErrInvalidID) || !errors.As(err, &ie) {
			t.Errorf("Schedule(../x) = %v, %v; want *IDError wrapping ErrInvalidID", got, err)
		}
		e.wantCounts(t, map[string]int{})
	})
}

// TestCreateRunAt: a task created with RunAt is queued, once submitted, with
// its marker due at RunAt, and is scheduled until then; one with a RunAt
// already past is due at once.
func TestCreateRunAt(t *testing.T) {
	t.Parallel()
	st, e := setup(t, nil)

	at := now().Add(2 * time.Hour)
	task, err := st.Create(e.ctx, s3task.CreateParams{Name: "later", RunAt: at.In(time.FixedZone("UTC-5", -5*3600))})
	if err != nil {
		t.Fatal(err)
	}
	if !task.RunAt.Equal(at) || task.RunAt.Location() != time.UTC || !task.DueAt.IsZero() {
		t.Errorf("created: RunAt %v, DueAt %v; want %v in UTC, none", task.RunAt, task.DueAt, at)
	}
	e.put(t, e.inputKey(t, task.ID), []byte("a\n"))
	e.count.Reset()
	got, err := st.Submit(e.ctx, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	e.wantCounts(t, map[string]int{"GET": 2, "HEAD": 1, "PUT": 3}) // record and wake object read; marker, record, wake written
	if got.Status != s3task.StatusQueued || !got.RunAt.Equal(at) || !got.DueAt.Equal(at) {
		t.Errorf("submitted: status %s, RunAt %v, DueAt %v; want queued, both %v", got.Status, got.RunAt, got.DueAt, at)
	}
	if !got.Scheduled(now()) || got.Scheduled(at) {
		t.Errorf("Scheduled(now) %v, Scheduled(RunAt) %v; want true, false", got.Scheduled(now()), got.Scheduled(at))
	}
	// The key spells RunAt, in UTC, to the millisecond.
	e.wantMarkers(t, task.ID, e.store.Prefix()+"active/"+at.UTC().Format(dueKeyLayout)+"_"+task.ID)

	past := now().Add(-time.Hour)
	early, err := st.Create(e.ctx, s3task.CreateParams{Name: "late already", RunAt: past})
	if err != nil {
		t.Fatal(err)
	}
	e.put(t, e.inputKey(t, early.ID), []byte("a\n"))
	got, err = st.Submit(e.ctx, early.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !got.RunAt.Equal(past) || got.Scheduled(got.UpdatedAt) {
		t.Errorf("RunAt %v, Scheduled %v; want %v, false", got.RunAt, got.Scheduled(got.UpdatedAt), past)
	}
	wantDueNow(t, got)
	e.wantMarkers(t, early.ID, e.dueMarkerKey(got))
}

// TestMarkerKey pins the marker key layout: <prefix>active/<due>_<id>, the
// due time in UTC to the millisecond, so that keys sort by it; a record
// without DueAt (written by an earlier version) calls for <prefix>active/<id>.
func TestMarkerKey(t *testing.T) {
	t.Parallel()
	st, e := setup(t, &s3task.StoreOptions{Prefix: "jobs/eu/"})
	id := s3task.NewID()
	due := time.Date(2026, 6, 21, 12, 0, 0, 123456789, time.FixedZone("UTC+2", 2*3600))
	for _, tc := range []struct {
		task *s3task.Task
		want string
	}{
		{&s3task.Task{ID: id, Status: s3task.StatusQueued, DueAt: due}, "jobs/eu/active/20260621T100000.123Z_" + id},
		{&s3task.Task{ID: id, Status: s3task.StatusQueued}, "jobs/eu/active/" + id},
		{&s3task.Task{ID: id, Status: s3task.StatusCompleted, DueAt: due}, "jobs/eu/active/20260621T100000.123Z_" + id}, // whether or not it needs one
	} {
		if got := st.MarkerKey(tc.task); got != tc.want || got != dueMarkerKey(st.Prefix(), tc.task) {
			t.Errorf("MarkerKey(%s, due %v) = %q, want %q", tc.task.Status, tc.task.DueAt, got, tc.want)
		}
	}
	// Keys sort as their due times do, across a change of second and day.
	times := []time.Time{
		time.Date(2026, 6, 21, 23, 59, 59, 999e6, time.UTC),
		time.Date(2026, 6, 22, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 6, 22, 0, 0, 0, 1e6, time.UTC),
		time.Date(2026, 6, 22, 0, 0, 1, 0, time.UTC),
	}
	var keys []string
	for i, at := range times {
		keys = append(keys, st.MarkerKey(&s3task.Task{ID: s3task.NewIDAt(times[len(times)-1-i]), DueAt: at}))
	}
	if !slices.IsSorted(keys) {
		t.Errorf("marker keys do not sort by due time: %q", keys)
	}
	// A submitted task's marker is the one MarkerKey names.
	task := e.task(t, "queued")
	e.wantMarkers(t, task.ID, st.MarkerKey(task))
}

func TestRetryVerifiesTheInputAgain(t *testing.T) {
	t.Parallel()
	st, e := setup(t, nil)
	// retriesOwnInput retries task id through st and fails t unless the
	// retry verified the task's own input.
	retriesOwnInput := func(t *testing.T, st *s3task.Store, id string) {
		t.Helper()
		got, err := st.Retry(e.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if etag, _ := e.head(t, e.inputKey(t, id)); e.stored(t, got.ID).InputETag != etag {
			t.Errorf("Retry verified input %s, want the task's own %s", e.stored(t, got.ID).InputETag, etag)
		}
	}

	t.Run("replaced input is adopted", func(t *testing.T) {
		task := e.task(t, "failed")
		etag := e.put(t, e.inputKey(t, task.ID), []byte("a,b\n3,4\n5,6\n")) // replaced behind the library's back
		got, err := st.Retry(e.ctx, task.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != s3task.StatusQueued || e.stored(t, got.ID).InputETag != etag || got.InputSize != 12 {
			t.Errorf("after Retry: status %s, input %s (%d bytes); want queued, %s (12 bytes)", got.Status, e.stored(t, got.ID).InputETag, got.InputSize, etag)
		}
	})
	t.Run("a store with other extensions finds the recorded input", func(t *testing.T) {
		// An operator's tool need not know the service's InputExt: the
		// record names the input, within the task's own folder.
		task := e.task(t, "failed")
		retriesOwnInput(t, e.newStore(t, &s3task.StoreOptions{InputExt: ".csv"}), task.ID)
	})
	t.Run("a record naming an input outside its folder is not followed", func(t *testing.T) {
		task := e.task(t, "failed")
		victim := e.task(t, "failed")
		raw, _ := e.object(e.recordKey(task.ID))
		var rec map[string]any
		if err := json.Unmarshal(raw, &rec); err != nil {
			t.Fatal(err)
		}
		rec["input_object_path"] = e.inputKey(t, victim.ID)
		body, _ := json.Marshal(rec)
		e.put(t, e.recordKey(task.ID), body)
		retriesOwnInput(t, st, task.ID)
	})
	t.Run("missing input refuses and changes nothing", func(t *testing.T) {
		task := e.task(t, "failed")
		e.del(t, e.inputKey(t, task.ID))
		refused(t, e, task.ID, wantIs(s3task.ErrInputMissing), func() (*s3task.Task, error) { return st.Retry(e.ctx, task.ID) })
	})
}

func TestUploadInputWritesOnce(t *testing.T) {
	t.Parallel()
	st, e := setup(t, nil)

	task := e.task(t, "created-no-input")
	if err := st.UploadInput(e.ctx, task.ID, strings.NewReader("first")); err != nil {
		t.Fatal(err)
	}
	if err := st.UploadInput(e.ctx, task.ID, strings.NewReader("second")); !errors.Is(err, s3task.ErrInputExists) {
		t.Fatalf("second UploadInput = %v, want ErrInputExists", err)
	}
	if body, _ := e.object(e.inputKey(t, task.ID)); string(body) != "first" {
		t.Errorf("input is %q after a refused second upload, want %q", body, "first")
	}
}

func TestRetry(t *testing.T) {
	t.Parallel()
	st, e := setup(t, nil)

	tests := []struct {
		state   string
		wantMax func(before *s3task.Task) int
		marked  bool // it has a marker before: its retry is pending
	}{
		{"failed", func(b *s3task.Task) int { return b.MaxAttempts }, false},
		{"failed-waiting", func(b *s3task.Task) int { return b.MaxAttempts }, true},
		{"failed-exhausted", func(b *s3task.Task) int { return b.Attempt + 1 }, false}, // one more attempt
	}
	for _, tc := range tests {
		t.Run("from "+tc.state, func(t *testing.T) {
			task := e.task(t, tc.state)
			st := e.newStore(t, nil, e.count.Wrap) // no copy of the wake object yet: it reads it
			e.count.Reset()
			got, err := st.Retry(e.ctx, task.ID)
			if err != nil {
				t.Fatal(err)
			}
			// Input check; the new marker, the record, the old marker if
			// there was one, the wake object.
			wantReqs := map[string]int{"GET": 2, "HEAD": 1, "PUT": 3} // the second GET reads the wake object to add to it
			if tc.marked {
				wantReqs["DELETE"] = 1
			}
			e.wantCounts(t, wantReqs)
			want := task
			want.Status, want.RetryAt, want.MaxAttempts = s3task.StatusQueued, time.Time{}, tc.wantMax(task)
			// The input is verified again and recorded as it is now.
			etag, size := e.head(t, e.inputKey(t, task.ID))
			want.InputSize = size
			if r := e.stored(t, task.ID); r.InputETag != etag {
				t.Errorf("retried record's input_etag %s, want the input's %s", r.InputETag, etag)
			}
			want.DueAt = got.DueAt // checked below
			if diff := cmp.Diff(want, got, ignoreWriteStamp()); diff != "" {
				t.Errorf("retried task (-want +got):\n%s", diff)
			}
			wantDueNow(t, got) // due at once, even if the retry was scheduled later
			// Only the marker of the new phase: the retry's is gone.
			e.wantMarkers(t, task.ID, e.dueMarkerKey(got))
			e.wantStored(t, got)
		})
	}

	bad := []struct {
		state string
		check func(t *testing.T, err error, id string)
	}{
		{"", wantIs(s3task.ErrNotFound)},
		{"created", wantTransition(s3task.StatusCreated)},
		{"queued", wantTransition(s3task.StatusQueued)},
		{"running", wantTransition(s3task.StatusRunning)},
		{"completed", wantTransition(s3task.StatusCompleted)},
		{"abandoned", wantTransition(s3task.StatusAbandoned)},
	}
	for _, tc := range bad {
		name := "refused from " + tc.state
		if tc.state == "" {
			name = "unknown task"
		}
		t.Run(name, func(t *testing.T) {
			id := e.taskID(t, tc.state)
			refused(t, e, id, tc.check, func() (*s3task.Task, error) { return st.Retry(e.ctx, id) })
		})
	}
}

// TestRefusedChangesLeaveBucketUnchanged covers the refusals named in the
// contract: none may leave any trace, not even a marker.
func TestRefusedChangesLeaveBucketUnchanged(t *testing.T) {
	t.Parallel()
	const limit = 10
	tests := []struct {
		name  string
		state string
		input []byte
		call  func(st *s3task.Store, ctx context.Context, id string) (*s3task.Task, error)
		check func(t *testing.T, err error, id string)
	}{
		{"submit without input", "created-no-input", nil, (*s3task.Store).Submit, wantIs(s3task.ErrInputMissing)},
		{"submit of an oversized input", "created-no-input", bytes.Repeat([]byte("y"), 4*limit), (*s3task.Store).Submit,
			func(t *testing.T, err error, id string) {
				var se *s3task.InputSizeError
				if !errors.As(err, &se) || !errors.Is(err, s3task.ErrInputTooLarge) || se.Size != 4*limit || se.Limit != limit {
					t.Errorf("err = %v, want *InputSizeError of %d over %d", err, 4*limit, limit)
				}
			}},
		{"cancel of a completed task", "completed", nil,
			func(st *s3task.Store, ctx context.Context, id string) (*s3task.Task, error) {
				return st.Cancel(ctx, id, "late")
			},
			wantTransition(s3task.StatusCompleted)},
		{"retry of a queued task", "queued", nil, (*s3task.Store).Retry, wantTransition(s3task.StatusQueued)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st, e := setup(t, &s3task.StoreOptions{MaxInputSize: limit})
			id := e.task(t, tc.state).ID
			if tc.input != nil {
				e.put(t, e.inputKey(t, id), tc.input)
			}
			refused(t, e, id, tc.check, func() (*s3task.Task, error) { return tc.call(st, e.ctx, id) })
		})
	}
}

func TestPresignDownload(t *testing.T) {
	t.Parallel()
	st, e := setup(t, &s3task.StoreOptions{OutputExt: ".csv"})

	t.Run("completed", func(t *testing.T) {
		task := e.task(t, "completed")
		want, _ := e.object(e.outputKey(t, task.ID, task.Attempt))
		ttl := 5 * time.Minute
		p, called := sign(t, e, func() (*s3task.PresignedRequest, error) { return st.PresignDownload(e.ctx, task.ID, ttl) })
		if p.Method != http.MethodGet {
			t.Errorf("Method = %q, want GET", p.Method)
		}
		called.wantExpires(t, p.Expires, ttl)
		if got := e.sendPresigned(t, p, nil); !bytes.Equal(got, want) {
			t.Errorf("presigned GET: %q, want %q", got, want)
		}
	})

	bad := []struct {
		name  string
		state string
		ttl   time.Duration
		check func(t *testing.T, err error, id string)
	}{
		{"zero TTL", "completed", 0, wantIs(s3task.ErrInvalidArgument)},
		{"TTL of 8 days", "completed", 8 * 24 * time.Hour, wantIs(s3task.ErrInvalidArgument)},
		{"unknown task", "", time.Minute, wantIs(s3task.ErrNotFound)},
		{"created", "created", time.Minute, wantIs(s3task.ErrNotCompleted)},
		{"queued", "queued", time.Minute, wantIs(s3task.ErrNotCompleted)},
		{"running", "running", time.Minute, wantIs(s3task.ErrNotCompleted)},
		{"failed", "failed", time.Minute, wantIs(s3task.ErrNotCompleted)},
		{"abandoned", "abandoned", time.Minute, wantIs(s3task.ErrNotCompleted)},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			id := e.taskID(t, tc.state)
			refused(t, e, id, tc.check, func() (*s3task.PresignedRequest, error) { return st.PresignDownload(e.ctx, id, tc.ttl) })
		})
	}
}

func TestOpenOutput(t *testing.T) {
	t.Parallel()
	st, e := setup(t, &s3task.StoreOptions{OutputExt: ".json"})

	tests := []struct {
		name    string
		attempt int
		edit    func(t *testing.T, x *s3task.Task)
	}{
		{"first attempt", 1, nil},
		{"second attempt reads its own output", 2, nil},
		{"output path in the record is not trusted", 2, func(t *testing.T, x *s3task.Task) {
			x.OutputPath = e.inputKey(t, x.ID) // tampered: points at the input
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			task := e.task(t, "created")
			for n := 1; n <= tc.attempt; n++ {
				e.put(t, e.outputKey(t, task.ID, n), fmt.Appendf(nil, `{"attempt":%d}`, n))
			}
			e.rewrite(t, task.ID, func(x *stored) {
				x.Status, x.Attempt, x.OutputPath = s3task.StatusCompleted, tc.attempt, e.outputKey(t, x.ID, tc.attempt)
				if tc.edit != nil {
					tc.edit(t, &x.Task)
				}
			})
			e.count.Reset()
			rc, err := st.OpenOutput(e.ctx, task.ID)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(rc)
			rc.Close()
			if err != nil {
				t.Fatal(err)
			}
			e.wantCounts(t, map[string]int{"GET": 2})
			if want := fmt.Sprintf(`{"attempt":%d}`, tc.attempt); string(got) != want {
				t.Errorf("output = %q, want %q", got, want)
			}
		})
	}

	bad := []struct {
		name  string
		state string
		prep  func(t *testing.T, id string)
		check func(t *testing.T, err error, id string)
	}{
		{"unknown task", "", nil, wantIs(s3task.ErrNotFound)},
		{"created", "created", nil, wantIs(s3task.ErrNotCompleted)},
		{"queued", "queued", nil, wantIs(s3task.ErrNotCompleted)},
		{"running", "running", nil, wantIs(s3task.ErrNotCompleted)},
		{"failed", "failed", nil, wantIs(s3task.ErrNotCompleted)},
		{"abandoned", "abandoned", nil, wantIs(s3task.ErrNotCompleted)},
		{"output object gone", "completed", func(t *testing.T, id string) {
			e.del(t, e.outputKey(t, id, 1))
		}, wantIs(s3task.ErrNotFound)},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			id := e.taskID(t, tc.state)
			if tc.prep != nil {
				tc.prep(t, id)
			}
			refused(t, e, id, tc.check, func() (io.ReadCloser, error) { return st.OpenOutput(e.ctx, id) })
		})
	}
}

func TestKeys(t *testing.T) {
	t.Parallel()
	st, e := setup(t, &s3task.StoreOptions{Prefix: "jobs/eu/", InputExt: ".csv", OutputExt: ".json"})
	id := s3task.NewID()
	ok := []struct {
		name string
		got  func() (string, error)
		want string
	}{
		{"input", func() (string, error) { return st.InputKey(id) }, "jobs/eu/" + id + "/input.csv"},
		{"output of attempt 1", func() (string, error) { return st.OutputKey(id, 1) }, "jobs/eu/" + id + "/output-attempt-1.json"},
		{"output of attempt 12", func() (string, error) { return st.OutputKey(id, 12) }, "jobs/eu/" + id + "/output-attempt-12.json"},
	}
	for _, tc := range ok {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.got()
			if err != nil || got != tc.want {
				t.Errorf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	for _, n := range []int{0, -1} {
		t.Run(fmt.Sprintf("output of attempt %d", n), func(t *testing.T) {
			got, err := st.OutputKey(id, n)
			if !errors.Is(err, s3task.ErrInvalidArgument) || got != "" {
				t.Errorf("OutputKey(id, %d) = %q, %v; want ErrInvalidArgument", n, got, err)
			}
		})
	}
	e.wantCounts(t, map[string]int{})
}

func TestCheckBackend(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		wrap    []func(http.RoundTripper) http.RoundTripper
		wantErr error
		want    s3task.BackendReport
	}{
		{"honest store", nil, nil, s3task.BackendReport{
			ConditionalCreate: s3task.Enforced, ConditionalUpdate: s3task.Enforced,
			AtomicUpdate: s3task.Enforced, RaceWinners: 1,
			IfMatchMissingKey: s3task.Enforced, IfMatchMissingKeyAnswer: "412 PreconditionFailed",
			// gofakes3 checks no signatures.
			PresignSignature: s3task.NotEnforced, PresignExpiry: s3task.NotEnforced,
		}},
		{"store ignoring conditional headers", []func(http.RoundTripper) http.RoundTripper{s3test.StripConditionalHeaders}, s3task.ErrConditionalWritesUnsupported, s3task.BackendReport{
			ConditionalCreate: s3task.NotEnforced, ConditionalUpdate: s3task.NotEnforced,
			AtomicUpdate: s3task.NotEnforced, RaceWinners: 4,
			IfMatchMissingKey: s3task.NotEnforced, IfMatchMissingKeyAnswer: "200 (the write succeeded)",
			PresignSignature: s3task.NotEnforced, PresignExpiry: s3task.NotEnforced,
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, nil)
			var count s3test.Counter
			st := e.newStore(t, nil, append(tc.wrap, count.Wrap)...)
			report, err := st.CheckBackend(e.ctx)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("CheckBackend = %v, want %v", err, tc.wantErr)
			}
			if report == nil {
				t.Fatal("CheckBackend returned no report")
			}
			if diff := cmp.Diff(tc.want, *report, cmpopts.IgnoreFields(s3task.BackendReport{}, "ServerClockOffset", "Notes")); diff != "" {
				t.Errorf("report (-want +got):\n%s", diff)
			}
			if tc.wantErr == nil {
				if len(report.Notes) != 0 {
					t.Errorf("notes on an honest store: %q", report.Notes)
				}
				if diff := cmp.Diff(map[string]int{"PUT": 8, "GET": 3, "DELETE": 1}, count.Counts()); diff != "" {
					t.Errorf("requests (-want +got):\n%s", diff)
				}
			}
			if snap := e.snapshot(""); len(snap) != 0 {
				t.Errorf("CheckBackend left objects behind: %v", snap)
			}
		})
	}
}

// idCall is a Store method called on a task ID.
type idCall struct {
	name string
	call func(id string) error
}

// idCalls returns st's methods that take a task ID: those that read its
// record, and those that only name its keys.
func idCalls(ctx context.Context, st *s3task.Store) (readers, namers []idCall) {
	readers = []idCall{
		{"Get", func(id string) error { _, err := st.Get(ctx, id); return err }},
		{"Submit", func(id string) error { _, err := st.Submit(ctx, id); return err }},
		{"Cancel", func(id string) error { _, err := st.Cancel(ctx, id, "x"); return err }},
		{"Retry", func(id string) error { _, err := st.Retry(ctx, id); return err }},
		{"Schedule", func(id string) error { _, err := st.Schedule(ctx, id, time.Now().Add(time.Hour)); return err }},
		{"UploadInput", func(id string) error { return st.UploadInput(ctx, id, strings.NewReader("x")) }},
		{"PresignUpload", func(id string) error { _, err := st.PresignUpload(ctx, id, time.Minute); return err }},
		{"PresignUploadForm", func(id string) error { _, err := st.PresignUploadForm(ctx, id, time.Minute); return err }},
		{"PresignDownload", func(id string) error { _, err := st.PresignDownload(ctx, id, time.Minute); return err }},
		{"OpenOutput", func(id string) error { _, err := st.OpenOutput(ctx, id); return err }},
	}
	namers = []idCall{
		{"InputKey", func(id string) error { _, err := st.InputKey(id); return err }},
		{"OutputKey", func(id string) error { _, err := st.OutputKey(id, 1); return err }},
	}
	return readers, namers
}

func TestInvalidIDs(t *testing.T) {
	t.Parallel()
	st, e := setup(t, nil)
	readers, namers := idCalls(e.ctx, st)
	for _, m := range append(readers, namers...) {
		for _, bad := range invalidIDs(t) {
			t.Run(m.name+"/"+bad.name, func(t *testing.T) {
				e.count.Reset()
				err := m.call(bad.id)
				var ie *s3task.IDError
				if !errors.Is(err, s3task.ErrInvalidID) || !errors.As(err, &ie) {
					t.Fatalf("err = %v, want *IDError wrapping ErrInvalidID", err)
				}
				if ie.ID != bad.id {
					t.Errorf("IDError.ID = %q, want %q", ie.ID, bad.id)
				}
				if n := e.count.Total(); n != 0 {
					t.Errorf("%d requests (%s) for an invalid ID, want none", n, e.count.String())
				}
			})
		}
	}
	if snap := e.snapshot(""); len(snap) != 0 {
		t.Errorf("invalid IDs left objects: %v", snap)
	}
}

// recordJSON returns a valid version-1 record for id, with edit applied to
// its JSON fields.
func recordJSON(t *testing.T, id string, edit func(m map[string]any)) []byte {
	t.Helper()
	b, err := json.Marshal(&s3task.Task{
		SchemaVersion: 1, ID: id, Name: "planted", Status: s3task.StatusCreated, MaxAttempts: 3,
		CreatedAt: now(), UpdatedAt: now(), Revision: "planted",
	})
	if err != nil {
		t.Fatal(err)
	}
	if edit == nil {
		return b
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	b, err = json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// corruptRecord is a status.json body a store must refuse to use.
type corruptRecord struct {
	name string
	body func(t *testing.T, id string) []byte
	want error
}

var corruptRecords = []corruptRecord{
	{"not JSON", func(*testing.T, string) []byte { return []byte("<html>oops</html>") }, s3task.ErrCorruptRecord},
	{"truncated", func(t *testing.T, id string) []byte { b := recordJSON(t, id, nil); return b[:len(b)/2] }, s3task.ErrCorruptRecord},
	{"unknown status", func(t *testing.T, id string) []byte {
		return recordJSON(t, id, func(m map[string]any) { m["status"] = "paused" })
	}, s3task.ErrCorruptRecord},
	{"task_id of another task", func(t *testing.T, _ string) []byte { return recordJSON(t, s3task.NewID(), nil) }, s3task.ErrCorruptRecord},
	{"no schema_version", func(t *testing.T, id string) []byte {
		return recordJSON(t, id, func(m map[string]any) { delete(m, "schema_version") })
	}, s3task.ErrCorruptRecord},
	{"negative attempt", func(t *testing.T, id string) []byte {
		return recordJSON(t, id, func(m map[string]any) { m["attempt_id"] = -1 })
	}, s3task.ErrCorruptRecord},
	{"over 1 MiB", func(t *testing.T, id string) []byte {
		return recordJSON(t, id, func(m map[string]any) { m["payload"] = strings.Repeat("p", 1<<20) })
	}, s3task.ErrCorruptRecord},
	{"future schema_version", func(t *testing.T, id string) []byte {
		return recordJSON(t, id, func(m map[string]any) { m["schema_version"] = 2; m["new_field"] = "kept" })
	}, s3task.ErrUnsupportedSchema},
}

func TestCorruptRecords(t *testing.T) {
	t.Parallel()
	st, e := setup(t, nil)
	calls, _ := idCalls(e.ctx, st)
	for _, rec := range corruptRecords {
		t.Run(rec.name, func(t *testing.T) {
			id := s3task.NewID()
			key := e.recordKey(id)
			body := rec.body(t, id)
			e.put(t, key, body)
			e.put(t, e.inputKey(t, id), []byte("input"))
			e.unchanged(t, "a call on a broken record", func() {
				for _, c := range calls {
					err := c.call(id)
					var re *s3task.RecordError
					if !errors.As(err, &re) || !errors.Is(err, rec.want) {
						t.Errorf("%s: err = %v, want *RecordError wrapping %v", c.name, err, rec.want)
						continue
					}
					if re.Key != key {
						t.Errorf("%s: RecordError.Key = %q, want %q", c.name, re.Key, key)
					}
					other := s3task.ErrCorruptRecord
					if rec.want == s3task.ErrCorruptRecord {
						other = s3task.ErrUnsupportedSchema
					}
					if errors.Is(err, other) {
						t.Errorf("%s: err %v also matches %v", c.name, err, other)
					}
				}
			})
			if got, _ := e.object(key); !bytes.Equal(got, body) {
				t.Errorf("record bytes changed: %d bytes, want the %d planted", len(got), len(body))
			}
		})
	}
}

func TestListBrokenRecords(t *testing.T) {
	t.Parallel()
	st, e := setup(t, nil)
	var good []string
	for range 3 {
		good = append(good, e.task(t, "created").ID)
	}
	wantBroken := map[string]error{}
	for _, rec := range corruptRecords {
		id := s3task.NewID()
		e.put(t, e.recordKey(id), rec.body(t, id))
		wantBroken[e.recordKey(id)] = rec.want
	}
	orphan := s3task.NewID() // an input without a record
	e.put(t, e.inputKey(t, orphan), []byte("input"))
	wantBroken[e.recordKey(orphan)] = s3task.ErrNotFound

	e.count.Reset()
	page, err := st.List(e.ctx, s3task.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(good)
	if diff := cmp.Diff(good, taskIDs(page.Tasks)); diff != "" {
		t.Errorf("readable tasks (-want +got):\n%s", diff)
	}
	if len(page.Broken) != len(wantBroken) {
		t.Errorf("%d broken entries, want %d: %v", len(page.Broken), len(wantBroken), page.Broken)
	}
	for _, re := range page.Broken {
		want, ok := wantBroken[re.Key]
		if !ok {
			t.Errorf("unexpected broken entry %s: %v", re.Key, re.Err)
			continue
		}
		if !errors.Is(re, want) {
			t.Errorf("broken %s: %v, want %v", re.Key, re.Err, want)
		}
		delete(wantBroken, re.Key)
	}
	for key := range wantBroken {
		t.Errorf("broken record %s missing from Page.Broken", key)
	}
	folders := len(good) + len(corruptRecords) + 1
	e.wantCounts(t, map[string]int{"LIST": 1, "GET": folders})
	if page.NextCursor != "" {
		t.Errorf("NextCursor = %q on the only page", page.NextCursor)
	}
}

func TestListArguments(t *testing.T) {
	t.Parallel()
	st, e := setup(t, nil)
	bad := []struct {
		name string
		opts s3task.ListOptions
		want error
	}{
		{"negative limit", s3task.ListOptions{Limit: -1}, s3task.ErrInvalidArgument},
		{"limit over the maximum", s3task.ListOptions{Limit: s3task.MaxListLimit + 1}, s3task.ErrInvalidArgument},
		{"cursor not base64", s3task.ListOptions{Cursor: "not a cursor!"}, s3task.ErrInvalidCursor},
		{"cursor with padding", s3task.ListOptions{Cursor: base64.URLEncoding.EncodeToString([]byte("A"))}, s3task.ErrInvalidCursor},
		{"cursor naming a path", s3task.ListOptions{Cursor: base64.RawURLEncoding.EncodeToString([]byte("../other/x"))}, s3task.ErrInvalidCursor},
		{"cursor not UTF-8", s3task.ListOptions{Cursor: base64.RawURLEncoding.EncodeToString([]byte{0xff, 0xfe})}, s3task.ErrInvalidCursor},
		{"cursor far too long", s3task.ListOptions{Cursor: base64.RawURLEncoding.EncodeToString(bytes.Repeat([]byte("A"), 2000))}, s3task.ErrInvalidCursor},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			e.count.Reset()
			page, err := st.List(e.ctx, tc.opts)
			if !errors.Is(err, tc.want) || page != nil {
				t.Errorf("List = %v, %v; want %v", page, err, tc.want)
			}
			e.wantCounts(t, map[string]int{})
		})
	}
	t.Run("limit at the maximum", func(t *testing.T) {
		if _, err := st.List(e.ctx, s3task.ListOptions{Limit: s3task.MaxListLimit}); err != nil {
			t.Error(err)
		}
	})
}

// createMany creates n tasks with a few goroutines and returns their IDs.
func createMany(t *testing.T, st *s3task.Store, ctx context.Context, n int) []string {
	t.Helper()
	ids := make([]string, n)
	errs := make([]error, n)
	workers := make([]func(), 8)
	for w := range workers {
		workers[w] = func() {
			for i := w; i < n; i += len(workers) {
				task, err := st.Create(ctx, s3task.CreateParams{Name: fmt.Sprintf("task %d", i)})
				if err != nil {
					errs[i] = err
					continue
				}
				ids[i] = task.ID
			}
		}
	}
	race(workers...)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return ids
}

// listPages lists the tasks of st page by page, limit to a page, and
// returns the pages, failing t if there are more than max.
func listPages(t *testing.T, e *env, st *s3task.Store, limit, max int) []*s3task.Page {
	t.Helper()
	var pages []*s3task.Page
	for opts := (s3task.ListOptions{Limit: limit}); len(pages) == 0 || opts.Cursor != ""; {
		if len(pages) == max {
			t.Fatalf("still paging after %d pages", max)
		}
		page, err := st.List(e.ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, page)
		opts.Cursor = page.NextCursor
	}
	return pages
}

func TestListPaging(t *testing.T) {
	t.Parallel()
	const n, limit = 1050, 100
	st, e := setup(t, nil)
	created := createMany(t, e.store, e.ctx, n)
	// Markers of a few tasks live in active/, which must never look like a
	// task.
	for _, id := range created[:3] {
		e.put(t, e.markerKey(id), nil)
	}

	var listed []*s3task.Task
	pages := listPages(t, e, st, limit, n/limit+5)
	for i, page := range pages {
		if len(page.Broken) != 0 {
			t.Errorf("page %d: broken entries %v", i+1, page.Broken)
		}
		if page.NextCursor != "" && len(page.Tasks) != limit {
			t.Errorf("page %d holds %d tasks and is not the last, want %d", i+1, len(page.Tasks), limit)
		}
		listed = append(listed, page.Tasks...)
	}
	if want := (n + limit - 1) / limit; len(pages) != want {
		t.Errorf("%d pages, want %d", len(pages), want)
	}

	var gotIDs []string
	for i, task := range listed {
		gotIDs = append(gotIDs, task.ID)
		if i == 0 {
			continue
		}
		prev := listed[i-1]
		if prev.ID >= task.ID {
			t.Errorf("listing position %d: %s after %s, want IDs ascending", i, task.ID, prev.ID)
		}
		if task.CreatedAt.After(prev.CreatedAt) {
			t.Errorf("listing position %d: created %v after the previous %v, want newest first", i, task.CreatedAt, prev.CreatedAt)
		}
	}
	want := slices.Clone(created)
	slices.Sort(want)
	if diff := cmp.Diff(want, gotIDs); diff != "" {
		t.Errorf("listed IDs differ from the created ones (-want +got):\n%s", diff)
	}
}

func TestListPageCost(t *testing.T) {
	t.Parallel()
	const limit = s3task.DefaultListLimit

	// plant fills a fresh server with n valid records straight through the
	// backend, without HTTP, and returns the cost of the first page.
	cost := func(t *testing.T, n int) map[string]int {
		backend := s3mem.New()
		srv, err := s3test.StartBackend(backend)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Close)
		var ids []string
		for range n {
			id := s3task.NewID()
			ids = append(ids, id)
			body := recordJSON(t, id, nil)
			key := s3task.DefaultPrefix + id + "/status.json"
			if _, err := backend.PutObject(srv.Bucket, key, map[string]string{}, bytes.NewReader(body), int64(len(body)), nil); err != nil {
				t.Fatal(err)
			}
		}
		var count s3test.Counter
		st, err := s3task.NewStore(srv.Client(count.Wrap), srv.Bucket, nil)
		if err != nil {
			t.Fatal(err)
		}
		page, err := st.List(t.Context(), s3task.ListOptions{}) // the default page size
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(ids)
		if diff := cmp.Diff(ids[:limit], taskIDs(page.Tasks)); diff != "" {
			t.Errorf("first page of %d tasks (-want +got):\n%s", n, diff)
		}
		return count.Counts()
	}

	small, large := cost(t, limit), cost(t, 100*limit)
	if diff := cmp.Diff(small, large); diff != "" {
		t.Errorf("page cost depends on the bucket size (-%d tasks +%d tasks):\n%s", limit, 100*limit, diff)
	}
	if diff := cmp.Diff(map[string]int{"LIST": 1, "GET": limit}, large); diff != "" {
		t.Errorf("page cost (-want +got):\n%s", diff)
	}
}

// TestListStrayObjects: objects that are not task folders can sit directly
// under the prefix (a backup copy of a record, a README). They take places in
// a LIST page but must never end the listing before the last task.
func TestListStrayObjects(t *testing.T) {
	t.Parallel()
	st, e := setup(t, nil)
	ids := createMany(t, e.store, e.ctx, 4)
	slices.Sort(ids)
	// Keys that sort just before the second task's folder ("." < "/").
	for _, suffix := range []string{".bak", ".old", ".tmp"} {
		e.put(t, e.store.Prefix()+ids[1]+suffix, []byte("stray"))
	}

	var got []string
	for _, page := range listPages(t, e, st, 2, 20) {
		got = append(got, taskIDs(page.Tasks)...)
	}
	if diff := cmp.Diff(ids, got); diff != "" {
		t.Errorf("tasks listed page by page (-want +got):\n%s", diff)
	}
}

// TestCreateOrderFollowsCallOrder: tasks created one after another by one
// Store must list newest first. The Store corrects its clock by the S3
// server's Date header; the correction must never move time backwards
// between two creates.
func TestCreateOrderFollowsCallOrder(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		skew time.Duration // local clock minus S3's
	}{
		{"local clock behind S3", -2 * time.Second},
		{"local clock ahead of S3", 2 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st, e := setup(t, &s3task.StoreOptions{Clock: func() time.Time { return time.Now().Add(tc.skew) }})
			var made []*s3task.Task
			for _, name := range []string{"first", "second", "third"} {
				task, err := st.Create(e.ctx, s3task.CreateParams{Name: name})
				if err != nil {
					t.Fatal(err)
				}
				made = append(made, task)
			}
			page, err := st.List(e.ctx, s3task.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, task := range page.Tasks {
				got = append(got, task.Name)
			}
			if diff := cmp.Diff([]string{"third", "second", "first"}, got); diff != "" {
				t.Errorf("list order (-want +got):\n%s", diff)
				for _, m := range made {
					t.Logf("%s: created_at %s", m.Name, m.CreatedAt.Format(time.RFC3339Nano))
				}
			}
		})
	}
}

func TestMarkers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	rec := &recorder{}
	st := e.newStore(t, nil, rec.wrap)

	// markerFirst checks that the marker was written, and before the record.
	markerFirst := func(t *testing.T, id string) {
		t.Helper()
		m, r := rec.index("PUT "+e.markerKey(id)), rec.index("PUT "+e.recordKey(id))
		if m < 0 || r < 0 || m > r {
			t.Errorf("want the marker PUT before the record PUT, got: %s", rec)
		}
		if !e.exists(e.markerKey(id)) {
			t.Error("no marker")
		}
	}

	task := e.task(t, "created")
	if e.exists(e.markerKey(task.ID)) {
		t.Fatal("a created task has a marker")
	}
	t.Run("submit writes it", func(t *testing.T) {
		rec.reset()
		got, err := st.Submit(e.ctx, task.ID)
		if err != nil {
			t.Fatal(err)
		}
		markerFirst(t, task.ID)
		// Named after the task's due time, and written once: each phase
		// has its own key, so there is nothing to write again.
		key := e.dueMarkerKey(got)
		if e.markerKey(task.ID) != key {
			t.Errorf("marker %s, want %s", e.markerKey(task.ID), key)
		}
		if n := strings.Count(rec.String(), "PUT "+e.store.Prefix()+"active/"); n != 1 {
			t.Errorf("%d marker PUTs, want 1: %s", n, rec)
		}
	})
	t.Run("cancel removes it after the record", func(t *testing.T) {
		key := e.markerKey(task.ID) // while it is there
		e.wantMarkers(t, task.ID, key)
		rec.reset()
		if _, err := st.Cancel(e.ctx, task.ID, "no longer needed"); err != nil {
			t.Fatal(err)
		}
		d, r := rec.index("DELETE "+key), rec.index("PUT "+e.recordKey(task.ID))
		if d < 0 || r < 0 || d < r {
			t.Errorf("want the record PUT before the DELETE of %s, got: %s", key, rec)
		}
		e.wantMarkers(t, task.ID) // none left
	})
	t.Run("retry of a failed task writes it again", func(t *testing.T) {
		failed := e.task(t, "queued")
		if _, err := e.store.Cancel(e.ctx, failed.ID, ""); err != nil { // removes the marker
			t.Fatal(err)
		}
		e.rewrite(t, failed.ID, func(x *stored) {
			x.Status, x.Attempt, x.CancelReason, x.LastError = s3task.StatusFailed, 1, "", "boom"
		})
		if e.exists(e.markerKey(failed.ID)) {
			t.Fatal("marker present before Retry")
		}
		rec.reset()
		got, err := st.Retry(e.ctx, failed.ID)
		if err != nil {
			t.Fatal(err)
		}
		markerFirst(t, failed.ID)
		e.wantMarkers(t, failed.ID, e.dueMarkerKey(got))
		if strings.Contains(rec.String(), "DELETE ") {
			t.Errorf("a final failure has no marker to delete, got: %s", rec)
		}
	})
	t.Run("retry of a task waiting for its retry moves it", func(t *testing.T) {
		waiting := e.task(t, "failed-waiting")
		old := e.dueMarkerKey(waiting) // due at the retry, an hour away
		e.wantMarkers(t, waiting.ID, old)
		rec.reset()
		got, err := st.Retry(e.ctx, waiting.ID)
		if err != nil {
			t.Fatal(err)
		}
		markerFirst(t, waiting.ID)
		if d, r := rec.index("DELETE "+old), rec.index("PUT "+e.recordKey(waiting.ID)); d < 0 || d < r {
			t.Errorf("want the old marker %s deleted after the record PUT, got: %s", old, rec)
		}
		if e.markerKey(waiting.ID) == old {
			t.Errorf("marker still due at the retry: %s", old)
		}
		e.wantMarkers(t, waiting.ID, e.dueMarkerKey(got))
	})
	t.Run("a refused change leaves the marker", func(t *testing.T) {
		queued := e.task(t, "queued")
		key := e.markerKey(queued.ID)
		rec.reset()
		if _, err := st.Retry(e.ctx, queued.ID); !errors.Is(err, s3task.ErrInvalidTransition) {
			t.Fatalf("Retry of a queued task = %v, want ErrInvalidTransition", err)
		}
		if strings.Contains(rec.String(), "PUT ") || strings.Contains(rec.String(), "DELETE ") {
			t.Errorf("a refused Retry wrote: %s", rec)
		}
		e.wantMarkers(t, queued.ID, key)
	})
}

// fault says how a status.json PUT that S3 applied is reported to the client.
type fault int

const (
	fault500   fault = iota // a 500: the SDK resends the PUT
	faultReset              // a reset connection: the SDK resends the PUT
	faultFinal              // an error the SDK does not retry: no resend
)

func (f fault) String() string {
	return [...]string{"500 after the write", "connection reset after the write", "unretried error after the write"}[f]
}

// finalError is a transport error the AWS SDK's retryer gives up on at once.
type finalError struct{}

func (finalError) Error() string        { return "injected: response lost" }
func (finalError) RetryableError() bool { return false }

// ambiguous is a transport wrapper for the resend problem: the first PUT of a
// status.json reaches S3 and is applied, but the client is told it failed.
type ambiguous struct {
	fault fault
	done  atomic.Bool // the first record PUT was answered
}

func (a *ambiguous) wrap(next http.RoundTripper) http.RoundTripper {
	return s3tasktest.RoundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := next.RoundTrip(req)
		if err != nil || !isPut(req, "status.json") || !a.done.CompareAndSwap(false, true) {
			return resp, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch a.fault {
		case faultReset:
			return nil, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
		case faultFinal:
			return nil, finalError{}
		}
		body := `<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError</Code><Message>injected after the write</Message></Error>`
		return &http.Response{
			Status: "500 Internal Server Error", StatusCode: http.StatusInternalServerError,
			Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header:        http.Header{"Content-Type": {"application/xml"}},
			Body:          io.NopCloser(strings.NewReader(body)),
			ContentLength: int64(len(body)),
			Request:       req,
		}, nil
	})
}

func TestAmbiguousWrites(t *testing.T) {
	t.Parallel()
	ops := []struct {
		name  string
		state string // the task to start from; "" for none
		call  func(st *s3task.Store, ctx context.Context, id string) (*s3task.Task, error)
		want  s3task.Status
	}{
		{"Create", "", func(st *s3task.Store, ctx context.Context, _ string) (*s3task.Task, error) {
			return st.Create(ctx, s3task.CreateParams{Name: "under fault"})
		}, s3task.StatusCreated},
		{"Submit", "created", (*s3task.Store).Submit, s3task.StatusQueued},
		{"Cancel", "queued", func(st *s3task.Store, ctx context.Context, id string) (*s3task.Task, error) {
			return st.Cancel(ctx, id, "under fault")
		}, s3task.StatusAbandoned},
		{"Retry", "failed", (*s3task.Store).Retry, s3task.StatusQueued},
	}
	for _, f := range []fault{fault500, faultReset, faultFinal} {
		// A resend is refused by its own first copy; without one, S3 only
		// saw the applied write.
		wantAnswers := []int{http.StatusOK, http.StatusPreconditionFailed}
		if f == faultFinal {
			wantAnswers = wantAnswers[:1]
		}
		for _, op := range ops {
			t.Run(f.String()+"/"+op.name, func(t *testing.T) {
				t.Parallel()
				e := newEnv(t, nil)
				var id string
				if op.state != "" {
					id = e.task(t, op.state).ID
				}
				rec := &recorder{}
				st := e.newStore(t, nil, rec.wrap, (&ambiguous{fault: f}).wrap)
				got, err := op.call(st, e.ctx, id)
				if err != nil {
					t.Fatalf("%s under an ambiguous write: %v", op.name, err)
				}
				if diff := cmp.Diff(wantAnswers, rec.answers("PUT "+e.recordKey(got.ID))); diff != "" {
					t.Errorf("S3's answers to the record PUTs (-want +got):\n%s", diff)
				}
				if got.Status != op.want {
					t.Errorf("status %s, want %s", got.Status, op.want)
				}
				e.wantStored(t, got)
				page, err := e.store.List(e.ctx, s3task.ListOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if len(page.Tasks) != 1 || len(page.Broken) != 0 {
					t.Errorf("bucket holds %d tasks and %d broken, want exactly the one", len(page.Tasks), len(page.Broken))
				}
			})
		}
	}
}

// hooked is a transport wrapper that runs before[n] just before the n-th
// status.json PUT (from 0) goes out, so a test can slip other writers in at
// an exact point of a call, without timing.
type hooked struct {
	puts   atomic.Int64
	before []func()
}

func (h *hooked) wrap(next http.RoundTripper) http.RoundTripper {
	return s3tasktest.RoundTripFunc(func(req *http.Request) (*http.Response, error) {
		if isPut(req, "status.json") {
			if n := int(h.puts.Add(1)) - 1; n < len(h.before) {
				h.before[n]()
			}
		}
		return next.RoundTrip(req)
	})
}

// TestCancelLosingToAnotherCancel: a Cancel whose every compare-and-set loses
// ends up re-reading a task that another Cancel has just abandoned. There is
// nothing left to write, and cancelling an abandoned task is documented to
// succeed, so the call must not report ErrConflict.
func TestCancelLosingToAnotherCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	task := e.task(t, "created")
	h := &hooked{}
	h.before = []func(){
		func() { // first try: someone submits the task
			if _, err := e.store.Submit(e.ctx, task.ID); err != nil {
				t.Error(err)
			}
		},
		func() { // second try: someone else cancels it
			if _, err := e.store.Cancel(e.ctx, task.ID, "the other operator"); err != nil {
				t.Error(err)
			}
		},
	}
	st := e.newStore(t, &s3task.StoreOptions{ConflictRetries: 1}, h.wrap)
	got, err := st.Cancel(e.ctx, task.ID, "mine")
	if err != nil {
		t.Fatalf("Cancel = %v, want the abandoned task", err)
	}
	if got.Status != s3task.StatusAbandoned || got.CancelReason != "the other operator" {
		t.Errorf("Cancel returned %s with reason %q, want the other operator's abandoned record", got.Status, got.CancelReason)
	}
}

// TestListEndsAtTheLastTask checks that the objects the library keeps after
// the task folders (the marker folder, the wake object) never produce a
// trailing empty page: a page that reaches them is the last.
func TestListEndsAtTheLastTask(t *testing.T) {
	t.Parallel()
	st, e := setup(t, nil)
	for range 2 {
		e.task(t, "queued") // writes a marker and the wake object too
	}
	page, err := st.List(e.ctx, s3task.ListOptions{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Tasks) != 2 {
		t.Fatalf("first page has %d tasks, want 2", len(page.Tasks))
	}
	if page.NextCursor == "" {
		return // the store knew already: fine
	}
	next, err := st.List(e.ctx, s3task.ListOptions{Limit: 2, Cursor: page.NextCursor})
	if err != nil {
		t.Fatal(err)
	}
	if len(next.Tasks) != 0 || len(next.Broken) != 0 || next.NextCursor != "" {
		t.Errorf("page after the last task: %d tasks, %d broken, cursor %q; want an empty last page",
			len(next.Tasks), len(next.Broken), next.NextCursor)
	}
	// With a limit that ends the page on a non-task entry, no cursor at all.
	page, err = st.List(e.ctx, s3task.ListOptions{Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Tasks) != 2 || page.NextCursor != "" {
		t.Errorf("limit 3: %d tasks, cursor %q; want 2 tasks and no cursor", len(page.Tasks), page.NextCursor)
	}
}

func TestCreateForUpload(t *testing.T) {
	t.Parallel()
	st, e := setup(t, &s3task.StoreOptions{MaxInputSize: 1 << 10})
	e.count.Reset()
	task, up, err := st.CreateForUpload(e.ctx, s3task.CreateParams{Name: "direct"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	e.wantCounts(t, map[string]int{"PUT": 1}) // the record; signing is local
	if task.Status != s3task.StatusCreated || up.Put == nil || up.Form == nil || up.Form.MaxSize != 1<<10 {
		t.Fatalf("CreateForUpload = %+v, %+v", task, up)
	}
	e.sendPresigned(t, up.Put, []byte("a,b\n"))
	wantSubmits(t, e, st, task.ID, 4)

	e.unchanged(t, "a refused CreateForUpload", func() {
		if _, _, err := st.CreateForUpload(e.ctx, s3task.CreateParams{Name: "bad ttl"}, 0); !errors.Is(err, s3task.ErrInvalidArgument) {
			t.Errorf("TTL 0: %v, want ErrInvalidArgument", err)
		}
	})
}

// TestSubmitAnnouncesTaskFoundQueued: a Submit whose write's outcome its
// caller was told is unknown may land after all, with no announcement;
// the caller's repeat, which finds the task queued, announces it, so that
// an idle worker hears of it at its next check rather than at a listing.
// (Simulation seed 66195: the repeat lost its compare-and-set to the
// first call's write, which landed late, and announced nothing.)
func TestSubmitAnnouncesTaskFoundQueued(t *testing.T) {
	e := newEnv(t, nil)
	task := e.task(t, "created")
	wake := e.store.Prefix() + "_wake"
	// The earlier call's write landed: queued, marker and all; its
	// announcement never went out.
	e.change(t, task.ID, func(x *stored) {
		x.Status, x.DueAt = s3task.StatusQueued, e.srv.Now().UTC().Truncate(time.Millisecond)
	})
	e.del(t, wake)
	queued := e.get(t, task.ID)
	got, err := e.store.Submit(e.ctx, task.ID)
	if err != nil || got.Status != s3task.StatusQueued || got.Revision != queued.Revision {
		t.Fatalf("Submit of the queued task: %v, %+v; want it as it was", err, got)
	}
	body, ok := e.object(wake)
	if marker := e.store.MarkerKey(got); !ok || !strings.Contains(string(body), marker) {
		t.Errorf("the wake object after the repeat (there: %t):\n%s\nwant it to announce %s", ok, body, marker)
	}
}
