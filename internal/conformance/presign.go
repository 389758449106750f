package conformance

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"path"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/s3task/s3task"
)

// answer is an HTTP response read whole.
type answer struct {
	status int
	header http.Header
	body   string
}

func (a answer) String() string { return http.StatusText(a.status) + ": " + a.body }

// send sends a request with the target's plain HTTP client.
func (h *harness) send(req *http.Request) answer {
	h.t.Helper()
	resp, err := h.tg.HTTPClient().Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", req.Method, req.URL.Redacted(), err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatalf("read answer: %v", err)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: string(body)}
}

// sendPresigned sends a presigned request with its signed headers; edit, if
// not nil, may change the request first.
func (h *harness) sendPresigned(p *s3task.PresignedRequest, body []byte, edit func(*http.Request)) answer {
	h.t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(h.ctx, p.Method, p.URL, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	for k, vs := range p.Header {
		if strings.EqualFold(k, "Host") {
			req.Host = vs[0]
			continue
		}
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	if edit != nil {
		edit(req)
	}
	return h.send(req)
}

// postForm sends a browser-style POST upload: every field, then the file.
func (h *harness) postForm(f *s3task.PresignedForm, fields map[string]string, file []byte) answer {
	h.t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if err := mw.WriteField(k, fields[k]); err != nil {
			h.t.Fatal(err)
		}
	}
	fw, err := mw.CreateFormFile("file", "input.csv")
	if err != nil {
		h.t.Fatal(err)
	}
	fw.Write(file)
	if err := mw.Close(); err != nil {
		h.t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(h.ctx, http.MethodPost, f.URL, &buf)
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	return h.send(req)
}

func ok(a answer) bool { return a.status/100 == 2 }

// created returns a new task in status created, without input.
func (h *harness) created(name string) *s3task.Task {
	h.t.Helper()
	task, err := h.store.Create(h.ctx, s3task.CreateParams{Name: name})
	if err != nil {
		h.t.Fatalf("Create: %v", err)
	}
	return task
}

// wantSubmitted submits a task and checks the input size it recorded.
func (h *harness) wantSubmitted(id string, size int) {
	h.t.Helper()
	got, err := h.store.Submit(h.ctx, id)
	if err != nil {
		h.t.Fatalf("Submit after upload: %v", err)
	}
	if got.Status != s3task.StatusQueued || got.InputSize != int64(size) {
		h.t.Errorf("after Submit: status %s, input size %d; want queued, %d", got.Status, got.InputSize, size)
	}
}

// testPresignedUpload: a presigned PUT uploads the input without
// credentials.
func testPresignedUpload(t *testing.T, b Backend) {
	h := open(t, b, nil)
	task := h.created("presigned put")
	p, err := h.store.PresignUpload(h.ctx, task.ID, 15*time.Minute)
	if err != nil {
		t.Fatalf("PresignUpload: %v", err)
	}
	body := []byte("name,qty\nbolt,12\n")
	if a := h.sendPresigned(p, body, nil); !ok(a) {
		t.Fatalf("presigned PUT: %s", a)
	}
	if got, _ := h.object(h.inputKey(task.ID)); !bytes.Equal(got, body) {
		t.Errorf("input holds %q", got)
	}
	// The URL is good for one upload: its signed If-None-Match: * makes the
	// store refuse to replace the input.
	if a := h.sendPresigned(p, []byte("replaced\n"), nil); ok(a) || a.status != http.StatusPreconditionFailed {
		t.Errorf("a second upload through the same URL: %s; want 412", a)
	}
	if got, _ := h.object(h.inputKey(task.ID)); !bytes.Equal(got, body) {
		t.Errorf("after a refused second upload, input holds %q", got)
	}
	h.wantSubmitted(task.ID, len(body))
	if h.tg.Caps.VerifiesSignatures {
		// The same PUT without the signature must be refused, or the other
		// refusals below prove nothing.
		bare, _, _ := strings.Cut(p.URL, "?")
		req, err := http.NewRequestWithContext(h.ctx, http.MethodPut, bare, bytes.NewReader([]byte("anonymous")))
		if err != nil {
			t.Fatal(err)
		}
		if a := h.send(req); ok(a) {
			t.Errorf("an unsigned PUT was accepted: %s", a)
		}
	}
}

// testPresignedForm: a presigned POST form uploads the input, as a browser
// would: to the task's upload object, which Submit copies to the input
// create-only; posting the form again after Submit leaves the input alone.
func testPresignedForm(t *testing.T, b Backend) {
	h := open(t, b, &s3task.StoreOptions{MaxInputSize: 1 << 20})
	task := h.created("presigned post")
	f, err := h.store.PresignUploadForm(h.ctx, task.ID, 15*time.Minute)
	if err != nil {
		t.Fatalf("PresignUploadForm: %v", err)
	}
	in := h.inputKey(task.ID)
	if want := path.Dir(in) + "/upload" + path.Ext(in); f.Fields["key"] != want || f.MaxSize != 1<<20 {
		t.Errorf("form key %q, max size %d; want the task's upload object %s, never its input", f.Fields["key"], f.MaxSize, want)
	}
	body := []byte("sku,qty\nA-1,3\n")
	if a := h.postForm(f, f.Fields, body); !ok(a) {
		t.Fatalf("POST upload: %s", a)
	}
	h.wantSubmitted(task.ID, len(body))
	if got, _ := h.object(h.inputKey(task.ID)); !bytes.Equal(got, body) {
		t.Errorf("input after Submit holds %q, want the form's file", got)
	}
	if a := h.postForm(f, f.Fields, []byte("replaced\n")); !ok(a) {
		t.Fatalf("POST upload again: %s", a)
	}
	if got, _ := h.object(h.inputKey(task.ID)); !bytes.Equal(got, body) {
		t.Errorf("the form posted again after Submit replaced the input with %q", got)
	}
}

// completedTask runs one task through a worker that writes output.
func (h *harness) completedTask(output string) *s3task.Task {
	h.t.Helper()
	ev := newEvents()
	rw := h.startWorker(h.newStore(nil), s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		return job.WriteOutput(ctx, strings.NewReader(output))
	}), h.workerOptions("output-worker", ev.hooks()))
	task := h.submit(s3task.CreateParams{Name: "with output"}, "x\n")
	done := await(h, ev.completed, "the task to complete")
	rw.stop()
	if done.ID != task.ID {
		h.t.Fatalf("completed %s, want %s", done.ID, task.ID)
	}
	return done
}

// testPresignedDownload: a completed task's output downloads through a
// presigned GET; a task that is not completed gets no URL.
func testPresignedDownload(t *testing.T, b Backend) {
	h := open(t, b, nil)
	pending := h.created("not done")
	if _, err := h.store.PresignDownload(h.ctx, pending.ID, time.Minute); !errors.Is(err, s3task.ErrNotCompleted) {
		t.Errorf("PresignDownload of a created task = %v, want ErrNotCompleted", err)
	}
	task := h.completedTask("result,1\n")
	p, err := h.store.PresignDownload(h.ctx, task.ID, 5*time.Minute)
	if err != nil {
		t.Fatalf("PresignDownload: %v", err)
	}
	a := h.sendPresigned(p, nil, nil)
	if !ok(a) || a.body != "result,1\n" {
		t.Fatalf("presigned GET: %s", a)
	}
	if cd := a.header.Get("Content-Disposition"); !strings.Contains(cd, task.ID) {
		// The URL asks for an attachment named after the task; a server
		// that ignores response-content-disposition still serves the file.
		t.Logf("%s ignores response-content-disposition (Content-Disposition %q)", h.tg.Backend, cd)
	}
}

// testFormSizeCap: a file over StoreOptions.MaxInputSize never becomes a
// task's input. A server that enforces POST policies refuses the upload;
// on one that does not (gofakes3), Submit refuses the oversized input.
func testFormSizeCap(t *testing.T, b Backend) {
	const limit = 1024
	h := open(t, b, &s3task.StoreOptions{MaxInputSize: limit})
	task := h.created("too big")
	f, err := h.store.PresignUploadForm(h.ctx, task.ID, 15*time.Minute)
	if err != nil {
		t.Fatalf("PresignUploadForm: %v", err)
	}
	big := bytes.Repeat([]byte("x"), 2*limit)
	a := h.postForm(f, f.Fields, big)
	_, stored := h.object(h.inputKey(task.ID))
	switch {
	case ok(a) && h.tg.Caps.VerifiesSignatures:
		t.Errorf("%s accepted a %d-byte upload under a policy capped at %d: %s", h.tg.Backend, len(big), limit, a)
	case ok(a):
		t.Logf("%s does not enforce the policy's size cap; Submit must", h.tg.Backend)
		if _, err := h.store.Submit(h.ctx, task.ID); !errors.Is(err, s3task.ErrInputTooLarge) {
			t.Errorf("Submit of an oversized input = %v, want ErrInputTooLarge", err)
		}
	default:
		t.Logf("%s refused the oversized upload: %s", h.tg.Backend, a)
		if stored {
			t.Errorf("the refused upload left an input object")
		}
		if _, err := h.store.Submit(h.ctx, task.ID); !errors.Is(err, s3task.ErrInputMissing) {
			t.Errorf("Submit after a refused upload = %v, want ErrInputMissing", err)
		}
	}
	// At the cap it goes through.
	exact := h.created("exactly at the cap")
	f, err = h.store.PresignUploadForm(h.ctx, exact.ID, 15*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if a := h.postForm(f, f.Fields, big[:limit]); !ok(a) {
		t.Fatalf("upload of exactly %d bytes: %s", limit, a)
	}
	h.wantSubmitted(exact.ID, limit)
}

// needSignatures skips a test on a server that checks no signatures.
func needSignatures(t *testing.T, h *harness) {
	t.Helper()
	if !h.tg.Caps.VerifiesSignatures {
		t.Skipf("%s checks neither signatures nor presigned-URL expiry", h.tg.Backend)
	}
}

// testPresignExpiry: presigned URLs with a one-second TTL are refused once
// it has passed, for upload (PUT and POST) and download alike.
func testPresignExpiry(t *testing.T, b Backend) {
	h := open(t, b, nil)
	needSignatures(t, h)
	done := h.completedTask("secret output")
	task := h.created("expiring")
	put, err := h.store.PresignUpload(h.ctx, task.ID, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	form, err := h.store.PresignUploadForm(h.ctx, task.ID, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	get, err := h.store.PresignDownload(h.ctx, done.ID, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// A real clock must pass here: the server judges expiry by its own
	// time, which no test can move. Two and a half seconds covers the TTL
	// and the one-second resolution of the signing time; it is the only
	// fixed wait in the suite.
	time.Sleep(2500 * time.Millisecond)
	if a := h.sendPresigned(put, []byte("late"), nil); ok(a) {
		t.Errorf("expired presigned PUT accepted: %s", a)
	}
	if a := h.postForm(form, form.Fields, []byte("late")); ok(a) {
		t.Errorf("expired POST form accepted: %s", a)
	}
	if a := h.sendPresigned(get, nil, nil); ok(a) {
		t.Errorf("expired presigned GET served: %s", a)
	}
	if _, stored := h.object(h.inputKey(task.ID)); stored {
		t.Errorf("an expired URL wrote the input")
	}
}

// testPresignTampered: a presigned URL or form changed in any signed part
// is refused, and the untouched one still works, so the refusals are about
// the changes.
func testPresignTampered(t *testing.T, b Backend) {
	t.Run("ContentType", func(t *testing.T) { testPresignContentType(t, b) })
	h := open(t, b, &s3task.StoreOptions{MaxInputSize: 64})
	needSignatures(t, h)
	task, other := h.created("target"), h.created("other")
	p, err := h.store.PresignUpload(h.ctx, task.ID, 15*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(p.URL)
	if err != nil {
		t.Fatal(err)
	}
	variant := func(edit func(u *url.URL)) *s3task.PresignedRequest {
		c := *u
		edit(&c)
		return &s3task.PresignedRequest{Method: p.Method, URL: c.String(), Header: p.Header, Expires: p.Expires}
	}
	cases := []struct {
		name string
		req  *s3task.PresignedRequest
		edit func(*http.Request)
	}{
		{"signature changed", variant(func(u *url.URL) {
			q := u.Query()
			sig := []byte(q.Get("X-Amz-Signature"))
			if sig[len(sig)-1] == 'a' {
				sig[len(sig)-1] = 'b'
			} else {
				sig[len(sig)-1] = 'a'
			}
			q.Set("X-Amz-Signature", string(sig))
			u.RawQuery = q.Encode()
		}), nil},
		{"another task's key", variant(func(u *url.URL) {
			u.Path = strings.Replace(u.Path, task.ID, other.ID, 1)
			u.RawPath = ""
		}), nil},
		{"expiry extended", variant(func(u *url.URL) {
			q := u.Query()
			q.Set("X-Amz-Expires", "604800")
			u.RawQuery = q.Encode()
		}), nil},
		{"signed Host header differs", p, func(r *http.Request) {
			r.Host = strings.Replace(r.URL.Host, "127.0.0.1", "localhost", 1)
		}},
	}
	for _, c := range cases {
		if a := h.sendPresigned(c.req, []byte("forged"), c.edit); ok(a) {
			t.Errorf("PUT with %s accepted: %s", c.name, a)
		}
	}

	f, err := h.store.PresignUploadForm(h.ctx, task.ID, 15*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// A policy rewritten to allow larger files, with the old signature.
	raw, err := base64.StdEncoding.DecodeString(f.Fields["policy"])
	if err != nil {
		t.Fatal(err)
	}
	var policy map[string]any
	if err := json.Unmarshal(raw, &policy); err != nil {
		t.Fatal(err)
	}
	for _, c := range policy["conditions"].([]any) {
		if arr, isArr := c.([]any); isArr && len(arr) == 3 && arr[0] == "content-length-range" {
			arr[2] = 1 << 30
		}
	}
	raw, err = json.Marshal(policy)
	if err != nil {
		t.Fatal(err)
	}
	forms := []struct {
		name   string
		fields map[string]string
	}{
		{"a loosened policy", withField(f.Fields, "policy", base64.StdEncoding.EncodeToString(raw))},
		{"another task's key", withField(f.Fields, "key", h.inputKey(other.ID))},
	}
	for _, c := range forms {
		if a := h.postForm(f, c.fields, bytes.Repeat([]byte("y"), 128)); ok(a) {
			t.Errorf("POST with %s accepted: %s", c.name, a)
		}
	}
	for _, id := range []string{task.ID, other.ID} {
		if _, stored := h.object(h.inputKey(id)); stored {
			t.Errorf("a tampered request wrote %s", h.inputKey(id))
		}
	}
	if a := h.sendPresigned(p, []byte("genuine"), nil); !ok(a) {
		t.Errorf("the untouched presigned PUT was refused: %s", a)
	}
}

func withField(fields map[string]string, k, v string) map[string]string {
	c := make(map[string]string, len(fields))
	for key, val := range fields {
		c[key] = val
	}
	c[k] = v
	return c
}

// testPresignContentType: with StoreOptions.InputContentType, an upload
// that sends another Content-Type is refused, through the presigned PUT (the
// header is signed) and through the POST form (its policy requires the
// field); sent as given, each goes through.
func testPresignContentType(t *testing.T, b Backend) {
	h := open(t, b, &s3task.StoreOptions{InputContentType: "text/csv"})
	needSignatures(t, h)
	put, post := h.created("pinned put"), h.created("pinned post")
	p, err := h.store.PresignUpload(h.ctx, put.ID, 15*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Header.Get("Content-Type"); got != "text/csv" {
		t.Fatalf("presigned PUT header Content-Type %q, want text/csv", got)
	}
	if a := h.sendPresigned(p, []byte("<html>"), func(r *http.Request) { r.Header.Set("Content-Type", "text/html") }); ok(a) {
		t.Errorf("PUT with Content-Type text/html accepted: %s", a)
	}
	f, err := h.store.PresignUploadForm(h.ctx, post.ID, 15*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if a := h.postForm(f, withField(f.Fields, "Content-Type", "text/html"), []byte("<html>")); ok(a) {
		t.Errorf("POST with Content-Type text/html accepted: %s", a)
	}
	for _, id := range []string{put.ID, post.ID} {
		if _, stored := h.object(h.inputKey(id)); stored {
			t.Errorf("an upload of another type wrote %s", h.inputKey(id))
		}
	}
	body := []byte("a,b\n1,2\n")
	if a := h.sendPresigned(p, body, nil); !ok(a) {
		t.Errorf("the presigned PUT as given was refused: %s", a)
	}
	if a := h.postForm(f, f.Fields, body); !ok(a) {
		t.Errorf("the POST form as given was refused: %s", a)
	}
	for _, id := range []string{put.ID, post.ID} {
		h.wantSubmitted(id, len(body))
	}
}
