package main

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/s3task/s3task/s3tasktest"
)

// s3Fault is a switch in front of the service's S3: while stalled, every
// request waits, unanswered, until its context ends (an S3 that accepts
// connections and never answers, as a SIGSTOPped server does); while
// refused, every request fails at once as a connection refused would.
type s3Fault struct {
	stalled, refused atomic.Bool
	seen             atomic.Int64 // requests that met a fault
}

func (f *s3Fault) wrap(next http.RoundTripper) http.RoundTripper {
	return s3tasktest.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		switch {
		case f.stalled.Load():
			f.seen.Add(1)
			if r.Body != nil {
				r.Body.Close()
			}
			<-r.Context().Done()
			return nil, r.Context().Err()
		case f.refused.Load():
			f.seen.Add(1)
			if r.Body != nil {
				r.Body.Close()
			}
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
		}
		return next.RoundTrip(r)
	})
}

// startFaultyService starts an API-only service whose S3 client goes
// through a fault switch, with an S3 deadline of timeout, and creates one
// task while S3 still answers.
func startFaultyService(t *testing.T, timeout time.Duration) (*service, *s3Fault, string) {
	t.Helper()
	t.Parallel()
	f := new(s3Fault)
	cfg := testConfig(t, svcOptions{mode: modeAPI})
	cfg.s3Timeout = timeout
	cfg.statsInterval = 0 // no background S3 calls: only the API's
	cfg.s3Wrap = f.wrap
	s := startConfig(t, cfg)
	return s, f, s.create("before the stall", typeStats, nil).Task.ID
}

// send sends a request with the service's token and returns the response
// with its body read.
func (s *service) send(method, path, body string) (*http.Response, []byte) {
	s.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(s.t.Context(), method, s.base+path, r)
	if err != nil {
		s.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	return s.do(req)
}

// checkUnavailable sends a request and checks that it is answered with a
// JSON 503 s3_unavailable and a Retry-After, within bound.
func checkUnavailable(t *testing.T, s *service, method, path, body string, bound time.Duration) errorResponse {
	t.Helper()
	start := time.Now()
	resp, data := s.send(method, path, body)
	elapsed := time.Since(start)
	var e errorResponse
	if err := json.Unmarshal(data, &e); err != nil || resp.StatusCode != http.StatusServiceUnavailable || e.Error.Code != codeS3Unavailable || e.Error.Message == "" {
		t.Fatalf("%s %s: %d %s, want 503 with code %s", method, path, resp.StatusCode, data, codeS3Unavailable)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("%s %s: Content-Type %q", method, path, ct)
	}
	if n, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || n < 1 {
		t.Errorf("%s %s: Retry-After %q, want a number of seconds", method, path, resp.Header.Get("Retry-After"))
	}
	// A bound, not a benchmark: the answer must not wait for S3 any longer
	// than the deadline and a margin for a loaded machine.
	if elapsed > bound {
		t.Errorf("%s %s: answered after %s, want at most %s", method, path, elapsed.Round(time.Millisecond), bound)
	}
	return e
}

// TestS3StallAnswers503: while S3 accepts requests and never answers, the
// API answers each request with 503 s3_unavailable and a Retry-After
// within -s3-timeout plus a margin, instead of waiting for the client to
// give up; once S3 answers again, so does the API.
func TestS3StallAnswers503(t *testing.T) {
	const timeout = 500 * time.Millisecond
	const bound = timeout + 2*time.Second
	s, f, id := startFaultyService(t, timeout)

	f.stalled.Store(true)
	calls := []struct{ method, path, body string }{
		{"GET", "/tasks/" + id, ""},
		{"GET", "/tasks", ""},
		{"GET", "/tasks?limit=5", ""},
		{"POST", "/tasks", `{"name":"during the stall","type":"csv_stats"}`},
		{"POST", "/tasks/" + id + "/submit", ""},
		{"POST", "/tasks/" + id + "/cancel", ""},
		{"GET", "/tasks/" + id + "/output", ""},
	}
	for _, call := range calls {
		e := checkUnavailable(t, s, call.method, call.path, call.body, bound)
		if !strings.Contains(e.Error.Message, timeout.String()) {
			t.Errorf("%s %s: message %q does not give the deadline", call.method, call.path, e.Error.Message)
		}
		if call.method == "POST" && !strings.Contains(e.Error.Message, "may or may not") {
			t.Errorf("%s %s: message %q does not say the outcome is unknown", call.method, call.path, e.Error.Message)
		}
		// Only a create takes an Idempotency-Key.
		if create := call.path == "/tasks" && call.method == "POST"; create != strings.Contains(e.Error.Message, "Idempotency-Key") {
			t.Errorf("%s %s: message %q: mentions Idempotency-Key %v, want %v", call.method, call.path, e.Error.Message, !create, create)
		}
	}
	// Each call met the stall at most once: the SDK did not resend a
	// request its deadline had cut short, nor did the library.
	if n := f.seen.Load(); n > int64(len(calls)) {
		t.Errorf("%d S3 requests met the stall in %d calls, want one each", n, len(calls))
	}

	f.stalled.Store(false)
	if got := s.get(id); got.Status != "created" {
		t.Errorf("task after the stall: %+v", got)
	}
	var page listResponse
	s.call("GET", "/tasks", nil, http.StatusOK, &page)
	if len(page.Tasks) == 0 {
		t.Error("no task listed after the stall")
	}
	s.create("after the stall", typeStats, nil)
}

// TestS3StallConcurrent: requests that arrive together during a stall do
// not queue behind one another; each is answered within the bound.
func TestS3StallConcurrent(t *testing.T) {
	const timeout = 500 * time.Millisecond
	s, f, id := startFaultyService(t, timeout)
	f.stalled.Store(true)
	const n = 8
	type result struct {
		status  int
		elapsed time.Duration
		err     error
	}
	results := make(chan result, n)
	start := time.Now()
	for range n {
		go func() {
			req, _ := http.NewRequest("GET", s.base+"/tasks/"+id, nil)
			req.Header.Set("Authorization", "Bearer "+s.token)
			resp, err := s.client.Do(req)
			if err != nil {
				results <- result{err: err}
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			results <- result{status: resp.StatusCode, elapsed: time.Since(start)}
		}()
	}
	for range n {
		r := <-results
		if r.err != nil || r.status != http.StatusServiceUnavailable || r.elapsed > timeout+2*time.Second {
			t.Errorf("concurrent GET during a stall: status %d after %s, err %v; want 503 within %s", r.status, r.elapsed, r.err, timeout+2*time.Second)
		}
	}
	f.stalled.Store(false)
	s.get(id)
}

// TestS3RefusedAnswers503: when S3 refuses connections, the SDK's retries
// run inside the deadline and the API answers 503 s3_unavailable; a read
// answers once the SDK gives up, before the deadline. A create's write
// has an unknown outcome, so the library reads the record back until the
// deadline ends it: it answers within the bound too. Then the API
// recovers.
func TestS3RefusedAnswers503(t *testing.T) {
	const timeout = 3 * time.Second
	s, f, id := startFaultyService(t, timeout)

	f.refused.Store(true)
	for _, path := range []string{"/tasks/" + id, "/tasks"} {
		e := checkUnavailable(t, s, "GET", path, "", timeout)
		if !strings.Contains(e.Error.Message, "cannot be reached") {
			t.Errorf("GET %s: message %q", path, e.Error.Message)
		}
	}
	checkUnavailable(t, s, "POST", "/tasks", `{"name":"refused","type":"csv_stats"}`, timeout+2*time.Second)
	if f.seen.Load() < 3 {
		t.Errorf("%d S3 requests refused, want at least one per call", f.seen.Load())
	}
	f.refused.Store(false)
	s.get(id)
}

// TestS3UnavailableMapping: errorFor maps S3 trouble of every kind to
// s3_unavailable and keeps other failures as they were.
func TestS3UnavailableMapping(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		code string
	}{
		{&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, "internal"}, // not wrapped as the SDK does: unknown
		{connErr{}, codeS3Unavailable},
		{statusErr(503), codeS3Unavailable},
		{statusErr(500), codeS3Unavailable},
		{statusErr(403), "internal"},
		{errors.Join(errors.New("retry quota exceeded"), connErr{}), codeS3Unavailable},
		{errors.New("something else"), "internal"},
	} {
		if got := errorFor(tc.err); got.code != tc.code {
			t.Errorf("errorFor(%v) = %s, want %s", tc.err, got.code, tc.code)
		}
	}
}

// connErr is a transport failure as the SDK reports it
// (smithyhttp.RequestSendError).
type connErr struct{}

func (connErr) Error() string         { return "send request: connection refused" }
func (connErr) ConnectionError() bool { return true }

// statusErr is an S3 answer with an HTTP status, as the SDK reports it.
type statusErr int

func (e statusErr) Error() string       { return "S3 answered " + strconv.Itoa(int(e)) }
func (e statusErr) HTTPStatusCode() int { return int(e) }

// TestS3TimeoutFlag: -s3-timeout defaults to 5s, takes CSVBATCH_S3_TIMEOUT,
// and refuses a deadline that could never be met or never ends.
func TestS3TimeoutFlag(t *testing.T) {
	t.Parallel()
	cfg, err := parseConfig(nil, noEnv, io.Discard)
	if err != nil || cfg.s3Timeout != 5*time.Second {
		t.Fatalf("default: %v, %v", cfg, err)
	}
	env := func(k string) (string, bool) { return "2s", k == "CSVBATCH_S3_TIMEOUT" }
	if cfg, err := parseConfig(nil, env, io.Discard); err != nil || cfg.s3Timeout != 2*time.Second {
		t.Errorf("CSVBATCH_S3_TIMEOUT=2s: %v", err)
	}
	for _, v := range []string{"0", "-1s", "1ms", "11m"} {
		if _, err := parseConfig([]string{"-s3-timeout", v}, noEnv, io.Discard); err == nil || !strings.Contains(err.Error(), "-s3-timeout") {
			t.Errorf("-s3-timeout %s: %v", v, err)
		}
	}
}
