package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"io"
	"log/slog"
	"mime/multipart"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/examples/internal/taskview"
	"github.com/s3task/s3task/internal/s3test"
	"github.com/s3task/s3task/s3tasktest"
)

// testToken is the secret of the caller "alice" in test services.
const testToken = "alice-secret-0123456789"

// options for startService.
type svcOptions struct {
	mode     string   // default both
	tokens   string   // default "alice:" + testToken; "-" for none
	maxInput int64    // default the library's
	dataDir  string   // default: objects in memory
	args     []string // more flags, after the others
}

// service is a csvbatch app running in the test, with a client for it.
type service struct {
	t      testing.TB
	app    *app
	base   string
	token  string
	header http.Header
	client *http.Client
}

// testConfig returns a configuration for a fast in-process service.
func testConfig(t testing.TB, o svcOptions) *config {
	t.Helper()
	args := []string{
		"-listen", "127.0.0.1:0",
		"-data", o.dataDir,
		"-poll", "20ms",
		"-poll-max", "100ms",
		"-heartbeat", "50ms",
		"-shutdown-timeout", "2s",
		// No periodic summary unless a test asks (o.args): a run made
		// while a test counts tasks would be one too many.
		"-summary-schedule", "off",
	}
	if o.mode != "" {
		args = append(args, "-mode", o.mode)
	}
	switch o.tokens {
	case "":
		args = append(args, "-token", "alice:"+testToken)
	case "-":
	default:
		args = append(args, "-token", o.tokens)
	}
	cfg, err := parseConfig(append(args, o.args...), noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.maxInput > 0 {
		cfg.maxInput = byteSize(o.maxInput)
	}
	return cfg
}

func noEnv(string) (string, bool) { return "", false }

// startService starts an app and stops it when the test ends.
func startService(t testing.TB, o svcOptions) *service {
	t.Helper()
	return startConfig(t, testConfig(t, o))
}

func startConfig(t testing.TB, cfg *config) *service {
	t.Helper()
	log := s3tasktest.Logger(t)
	if _, fuzz := t.(*testing.F); fuzz {
		log = slog.New(slog.DiscardHandler) // the fuzz target must not call f.Log
	}
	ctx, cancel := context.WithCancel(context.Background())
	a, err := start(ctx, cfg, log)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	s := &service{t: t, app: a, base: a.baseURL, client: &http.Client{Transport: &http.Transport{}}}
	if creds, _ := parseTokens(cfg.tokens); len(creds) > 0 {
		s.token = testToken
	}
	t.Cleanup(func() {
		cancel()
		if err := a.close(); err != nil {
			t.Errorf("close: %v", err)
		}
		s.client.CloseIdleConnections()
	})
	return s
}

// as returns a client of the same service that sends token (none if "")
// and header with every request.
func (s *service) as(token string, header http.Header) *service {
	c := *s
	c.token, c.header = token, header
	return &c
}

// request sends a request and returns the status and body. body may be
// nil, a string (sent as is) or a value sent as JSON.
func (s *service) request(method, path string, body any) (int, []byte) {
	s.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			s.t.Fatal(err)
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(s.t.Context(), method, s.base+path, r)
	if err != nil {
		s.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range s.header {
		req.Header[k] = v
	}
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	resp, data := s.do(req)
	return resp.StatusCode, data
}

// do sends req with the service's client and returns the response with its
// body, read and closed.
func (s *service) do(req *http.Request) (*http.Response, []byte) {
	s.t.Helper()
	resp, err := s.client.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	return resp, data
}

// call sends a request, checks the status and decodes the JSON answer
// into out (if not nil).
func (s *service) call(method, path string, body any, wantStatus int, out any) {
	s.t.Helper()
	status, data := s.request(method, path, body)
	if status != wantStatus {
		s.t.Fatalf("%s %s: status %d, want %d; body: %s", method, path, status, wantStatus, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			s.t.Fatalf("%s %s: decode %s: %v", method, path, data, err)
		}
	}
}

// callError sends a request and checks that it fails with status and code.
func (s *service) callError(method, path string, body any, wantStatus int, wantCode string) errorResponse {
	s.t.Helper()
	var e errorResponse
	s.call(method, path, body, wantStatus, &e)
	if e.Error.Code != wantCode || e.Error.Message == "" {
		s.t.Fatalf("%s %s: error %+v, want code %q and a message", method, path, e.Error, wantCode)
	}
	return e
}

func (s *service) create(name, taskType string, payload any) createResponse {
	s.t.Helper()
	var c createResponse
	s.call("POST", "/tasks", map[string]any{"name": name, "type": taskType, "payload": payload}, http.StatusCreated, &c)
	return c
}

// objects reads and writes the service's bucket behind its back.
func (s *service) objects() s3test.Objects {
	return s3test.Objects{Client: s.app.objs.client, Bucket: s.app.objs.bucket}
}

// uploadPut sends data to the presigned PUT URL with a plain HTTP client,
// as curl would.
func (s *service) uploadPut(p presigned, data []byte) {
	s.t.Helper()
	req, err := http.NewRequestWithContext(s.t.Context(), p.Method, p.URL, bytes.NewReader(data))
	if err != nil {
		s.t.Fatal(err)
	}
	for k, v := range p.Headers {
		req.Header.Set(k, v)
	}
	s.sendToS3(req)
}

// uploadPost sends data with the presigned POST form: every field, then the
// file last, as a browser form would.
func (s *service) uploadPost(c createResponse, data []byte) {
	s.t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	for k, v := range c.Upload.Post.Fields {
		if err := mw.WriteField(k, v); err != nil {
			s.t.Fatal(err)
		}
	}
	fw, err := mw.CreateFormFile(c.Upload.Post.FileField, "input.csv")
	if err != nil {
		s.t.Fatal(err)
	}
	fw.Write(data)
	if err := mw.Close(); err != nil {
		s.t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(s.t.Context(), "POST", c.Upload.Post.URL, &body)
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	s.sendToS3(req)
}

func (s *service) sendToS3(req *http.Request) []byte {
	s.t.Helper()
	resp, data := s.do(req)
	if resp.StatusCode/100 != 2 {
		s.t.Fatalf("%s to S3: status %d: %s", req.Method, resp.StatusCode, data)
	}
	return data
}

func (s *service) get(id string) taskview.Task {
	s.t.Helper()
	var t taskview.Task
	s.call("GET", "/tasks/"+id, nil, http.StatusOK, &t)
	return t
}

// submit creates a task, uploads data with the presigned PUT and submits
// the task. It returns the task's ID.
func (s *service) submit(name, taskType string, payload any, data []byte) string {
	s.t.Helper()
	c := s.create(name, taskType, payload)
	s.uploadPut(c.Upload.Put, data)
	s.call("POST", "/tasks/"+c.Task.ID+"/submit", nil, http.StatusOK, nil)
	return c.Task.ID
}

// Conditions for waitFor.
func completed(t taskview.Task) bool     { return t.Status == s3task.StatusCompleted }
func failedForGood(t taskview.Task) bool { return t.Status == s3task.StatusFailed && t.Terminal }

// waitFor polls the task until cond holds, failing the test after a
// deadline.
func (s *service) waitFor(id, what string, cond func(taskview.Task) bool) taskview.Task {
	s.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		t := s.get(id)
		if cond(t) {
			return t
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("task %s: still not %s after 30s: %+v", id, what, t)
		}
		<-tick.C
	}
}

// download fetches the presigned output URL and parses the CSV.
func (s *service) download(id string) [][]string {
	s.t.Helper()
	var p presigned
	s.call("GET", "/tasks/"+id+"/output", nil, http.StatusOK, &p)
	req, err := http.NewRequestWithContext(s.t.Context(), p.Method, p.URL, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	for k, v := range p.Headers {
		req.Header.Set(k, v)
	}
	data := s.sendToS3(req)
	rows, err := csv.NewReader(bytes.NewReader(data)).ReadAll()
	if err != nil {
		s.t.Fatalf("output is not CSV: %v\n%s", err, data)
	}
	return rows
}

// editRecord rewrites task id's status.json behind the service's back. It
// edits the record's JSON, so that what the Task type does not show (the
// verified input's ETag, the write count) stays as it was; times are
// RFC 3339 strings.
func (s *service) editRecord(id string, edit func(rec map[string]any)) {
	s.t.Helper()
	key := s.app.store.Prefix() + id + "/status.json"
	body, _, err := s.objects().Get(s.t.Context(), key)
	if err != nil {
		s.t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(body, &rec); err != nil {
		s.t.Fatal(err)
	}
	edit(rec)
	if body, err = json.Marshal(rec); err != nil {
		s.t.Fatal(err)
	}
	if _, err := s.objects().Put(s.t.Context(), key, body); err != nil {
		s.t.Fatal(err)
	}
}

// rfc3339 formats at as the record keeps its times.
func rfc3339(at time.Time) string { return at.UTC().Format(time.RFC3339Nano) }

// failRecord makes task id failed, as a worker's last attempt of max
// would have left it, in category with message; a retry is due at retryAt
// unless it is zero (then the failure is final). It failed two minutes
// ago: past the minute Purge leaves a task after its last change.
func (s *service) failRecord(id, category, message string, retryAt time.Time) {
	s.t.Helper()
	now := time.Now()
	s.editRecord(id, func(rec map[string]any) {
		rec["status"], rec["attempt_id"], rec["max_attempts"] = "failed", 3, 3
		rec["worker_id"], rec["error_category"], rec["last_error"] = "worker-1", category, message
		rec["started_at"], rec["updated_at"] = rfc3339(now.Add(-3*time.Minute)), rfc3339(now.Add(-2*time.Minute))
		delete(rec, "lease_expires_at")
		delete(rec, "due_at")
		if !retryAt.IsZero() {
			rec["attempt_id"], rec["retry_at"], rec["due_at"] = 1, rfc3339(retryAt), rfc3339(retryAt)
		}
	})
}

// freeAddr returns a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
