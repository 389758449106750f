package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// testToken is the secret of the caller "alice" in test services.
const testToken = "alice-secret-0123456789"

// options for startService.
type svcOptions struct {
	mode     string // default both
	tokens   string // default "alice:" + testToken; "-" for none
	maxInput int64  // default the library's
	dataDir  string // default: objects in memory
}

// service is a csvbatch app running in the test, with a client for it.
type service struct {
	t      testing.TB
	app    *app
	base   string
	token  string
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
	cfg, err := parseConfig(args, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.maxInput > 0 {
		cfg.maxInput = byteSize(o.maxInput)
	}
	return cfg
}

func noEnv(string) (string, bool) { return "", false }

func discardLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

// startService starts an app and stops it when the test ends.
func startService(t testing.TB, o svcOptions) *service {
	t.Helper()
	return startConfig(t, testConfig(t, o))
}

func startConfig(t testing.TB, cfg *config) *service {
	t.Helper()
	logs := &testLog{t: t}
	ctx, cancel := context.WithCancel(context.Background())
	a, err := start(ctx, cfg, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})))
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
		logs.stop()
	})
	return s
}

// testLog sends log lines to t.Log until the test's cleanup stops it.
type testLog struct {
	mu      sync.Mutex
	t       testing.TB
	stopped bool
}

func (l *testLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.stopped {
		l.t.Log(strings.TrimSpace(string(p)))
	}
	return len(p), nil
}

func (l *testLog) stop() {
	l.mu.Lock()
	l.stopped = true
	l.mu.Unlock()
}

// taskJSON is the part of the API's task view the tests look at.
type taskJSON struct {
	ID             string          `json:"task_id"`
	Type           string          `json:"task_type"`
	Name           string          `json:"task_name"`
	Payload        json.RawMessage `json:"payload"`
	Status         string          `json:"status"`
	Attempt        int             `json:"attempt_id"`
	MaxAttempts    int             `json:"max_attempts"`
	LastError      string          `json:"last_error"`
	CancelReason   string          `json:"cancel_reason"`
	RetryAt        string          `json:"retry_at"`
	RowCount       int64           `json:"row_count"`
	ProcessedCount int64           `json:"processed_count"`
	SuccessCount   int64           `json:"success_count"`
	ErrorCount     int64           `json:"error_count"`
	InputSize      int64           `json:"input_size"`
	CreatedBy      string          `json:"created_by"`
	Retryable      bool            `json:"retryable"`
	Cancelable     bool            `json:"cancelable"`
	Terminal       bool            `json:"terminal"`
}

type presignedJSON struct {
	Method  string            `json:"method"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
}

type createdJSON struct {
	Task   taskJSON `json:"task"`
	Upload struct {
		Put  presignedJSON `json:"put"`
		Post struct {
			URL       string            `json:"url"`
			Fields    map[string]string `json:"fields"`
			FileField string            `json:"file_field"`
			MaxSize   int64             `json:"max_size"`
		} `json:"post"`
	} `json:"upload"`
}

type errorJSON struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// request sends a request with the service's token (if any) and returns the
// status and body. body may be nil, a string (sent as is) or a value sent as
// JSON.
func (s *service) request(method, path string, body any) (int, []byte) {
	s.t.Helper()
	return s.requestAs(s.token, method, path, body)
}

func (s *service) requestAs(token, method, path string, body any) (int, []byte) {
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
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	return resp.StatusCode, data
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
func (s *service) callError(method, path string, body any, wantStatus int, wantCode string) errorJSON {
	s.t.Helper()
	var e errorJSON
	s.call(method, path, body, wantStatus, &e)
	if e.Error.Code != wantCode || e.Error.Message == "" {
		s.t.Fatalf("%s %s: error %+v, want code %q and a message", method, path, e.Error, wantCode)
	}
	return e
}

func (s *service) create(name, taskType string, payload any) createdJSON {
	s.t.Helper()
	var c createdJSON
	s.call("POST", "/tasks", map[string]any{"name": name, "type": taskType, "payload": payload}, http.StatusCreated, &c)
	return c
}

// uploadPut sends data to the presigned PUT URL with a plain HTTP client,
// as curl would.
func (s *service) uploadPut(p presignedJSON, data []byte) {
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
func (s *service) uploadPost(c createdJSON, data []byte) {
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
	resp, err := s.client.Do(req)
	if err != nil {
		s.t.Fatalf("%s to S3: %v", req.Method, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		s.t.Fatalf("%s to S3: status %d: %s", req.Method, resp.StatusCode, data)
	}
	return data
}

func (s *service) get(id string) taskJSON {
	s.t.Helper()
	var t taskJSON
	s.call("GET", "/tasks/"+id, nil, http.StatusOK, &t)
	return t
}

// waitFor polls the task until cond holds, failing the test after a
// deadline.
func (s *service) waitFor(id, what string, cond func(taskJSON) bool) taskJSON {
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
	var p presignedJSON
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
