package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The endpoints timed, in report order.
const (
	epCreate   = "POST /tasks"
	epUpload   = "PUT upload (S3, presigned)"
	epSubmit   = "POST /tasks/{id}/submit"
	epGet      = "GET /tasks/{id}"
	epOutput   = "GET /tasks/{id}/output"
	epDownload = "GET download (S3, presigned)"
	epTask     = "whole flow (create to checked output)"
)

var endpointOrder = []string{epCreate, epUpload, epSubmit, epGet, epOutput, epDownload, epTask}

// apiEndpoint reports whether ep is a call to the csvbatch API.
func apiEndpoint(ep string) bool {
	return ep == epCreate || ep == epSubmit || ep == epGet || ep == epOutput
}

// dataset is the CSV every task gets and the output it must produce.
type dataset struct {
	input, output   []byte
	success, failed int64
}

// newDataset generates rows rows of name,email,n: most good, some with no
// e-mail (required), some with an e-mail of the wrong shape, with spaces
// and capitals that csv_enrich trims and lower-cases.
func newDataset(rows int) *dataset {
	d := &dataset{}
	var in, out bytes.Buffer
	win, wout := csv.NewWriter(&in), csv.NewWriter(&out)
	_ = win.Write([]string{"name", "email", "n"})
	_ = wout.Write([]string{"name", "email", "n", "row_status"})
	for i := range rows {
		name := fmt.Sprintf("User %d", i)
		email := fmt.Sprintf("User.%d@Example.COM", i)
		status := "ok"
		switch {
		case i%7 == 3:
			email, status = "", "error: missing email"
		case i%11 == 5:
			email, status = "NOT-AN-ADDRESS", "error: invalid email"
		}
		_ = win.Write([]string{"  " + name + " ", " " + email + " ", strconv.Itoa(i)})
		_ = wout.Write([]string{name, strings.ToLower(email), strconv.Itoa(i), status})
		if status == "ok" {
			d.success++
		} else {
			d.failed++
		}
	}
	win.Flush()
	wout.Flush()
	d.input, d.output = in.Bytes(), out.Bytes()
	return d
}

// taskInfo is what the clients know of a task they created.
type taskInfo struct {
	verified  bool // its output was downloaded and checked
	abandoned bool // the client gave up on it (an error, or the run ended)
}

// recorder collects latencies, errors and tasks from every client.
type recorder struct {
	mu          sync.Mutex
	latency     map[string][]time.Duration
	unavailable map[string]int // 503 s3_unavailable answers by endpoint
	statuses    map[string]int // other non-success answers that were retried
	errors      map[string]int
	tasks       map[string]*taskInfo
	completed   int
}

func newRecorder() *recorder {
	return &recorder{latency: map[string][]time.Duration{}, unavailable: map[string]int{},
		statuses: map[string]int{}, errors: map[string]int{}, tasks: map[string]*taskInfo{}}
}

func (r *recorder) observe(ep string, d time.Duration) {
	r.mu.Lock()
	r.latency[ep] = append(r.latency[ep], d)
	r.mu.Unlock()
}

func (r *recorder) errorf(format string, args ...any) {
	r.mu.Lock()
	r.errorLocked(fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

func (r *recorder) errorLocked(kind string) { r.errors[kind]++ }

func (r *recorder) progress() (completed, errs int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.errors {
		errs += n
	}
	return r.completed, errs
}

// loadClient runs the flow against the API.
type loadClient struct {
	http  *http.Client
	api   string
	token string
	data  *dataset
	rec   *recorder
	poll  time.Duration
}

// apiAnswer is an answer of the API.
type apiAnswer struct {
	status     int
	code       string // the error code, if any
	retryAfter time.Duration
	body       []byte
}

// flowError is an error of the flow, its text the kind it is counted under.
type flowError struct{ kind string }

func (e *flowError) Error() string { return e.kind }

// call sends one API request, times it, and reads the answer. A 503
// s3_unavailable is counted apart and returned like any answer.
func (c *loadClient) call(ctx context.Context, ep, method, path string, body any, header map[string]string) (*apiAnswer, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.api+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	start := time.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, errStopped
		}
		return nil, &flowError{ep + ": " + transportKind(err)}
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	c.rec.observe(ep, time.Since(start))
	if err != nil {
		if ctx.Err() != nil {
			return nil, errStopped
		}
		return nil, &flowError{ep + ": reading the answer: " + transportKind(err)}
	}
	a := &apiAnswer{status: resp.StatusCode, body: b}
	if resp.StatusCode >= 300 {
		var e struct {
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		_ = json.Unmarshal(b, &e)
		a.code = e.Error.Code
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			a.retryAfter = time.Duration(s) * time.Second
		}
		if a.status == http.StatusServiceUnavailable && a.code == "s3_unavailable" {
			c.rec.mu.Lock()
			c.rec.unavailable[ep]++
			c.rec.mu.Unlock()
		}
	}
	return a, nil
}

// transportKind names a transport error without its addresses and IDs.
func transportKind(err error) string {
	s := err.Error()
	for _, k := range []string{"connection refused", "connection reset", "EOF", "timeout", "deadline exceeded", "broken pipe"} {
		if strings.Contains(s, k) {
			return k
		}
	}
	return s
}

// passing reports whether an answer says "try again later": 503
// s3_unavailable (or any 503), a 409 conflict (the record kept changing).
func (a *apiAnswer) passing() bool {
	return a.status == http.StatusServiceUnavailable || a.status == http.StatusConflict && a.code == "conflict"
}

// unexpected is the error of an answer the flow cannot go on with.
func (a *apiAnswer) unexpected(ep string) error {
	code := a.code
	if code == "" {
		code = strings.TrimSpace(string(a.body))
		if len(code) > 60 {
			code = code[:60]
		}
	}
	return &flowError{fmt.Sprintf("%s: %d %s", ep, a.status, code)}
}

// backoff waits before a repeat: the answer's Retry-After, else a second.
func backoff(ctx context.Context, a *apiAnswer) error {
	d := time.Second
	if a != nil && a.retryAfter > 0 {
		d = a.retryAfter
	}
	select {
	case <-ctx.Done():
		return errStopped
	case <-time.After(d):
		return nil
	}
}

// taskView is the part of a task answer the client reads.
type taskView struct {
	ID           string `json:"task_id"`
	Status       string `json:"status"`
	Terminal     bool   `json:"terminal"`
	RowCount     int64  `json:"row_count"`
	SuccessCount int64  `json:"success_count"`
	ErrorCount   int64  `json:"error_count"`
	LastError    string `json:"last_error"`
}

type presignedView struct {
	Method  string            `json:"method"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
}

// loop runs flows until stopNew is closed; ctx ends the one under way.
func (c *loadClient) loop(ctx context.Context, client int, stopNew <-chan struct{}) {
	for n := 0; ; n++ {
		select {
		case <-stopNew:
			return
		default:
		}
		start := time.Now()
		id, err := c.flow(ctx, client, n)
		c.rec.mu.Lock()
		if id != "" {
			info := c.rec.tasks[id]
			if info == nil {
				info = &taskInfo{}
				c.rec.tasks[id] = info
			}
			if err != nil {
				info.abandoned = true
			} else {
				info.verified = true
				c.rec.completed++
				c.rec.latency[epTask] = append(c.rec.latency[epTask], time.Since(start))
			}
		}
		if err != nil {
			if err == errStopped {
				c.rec.errorLocked("drain: a flow cut short at the end of the run")
			} else {
				c.rec.errorLocked(err.Error())
			}
		}
		c.rec.mu.Unlock()
		if err == errStopped {
			return
		}
		if err != nil {
			// Do not hammer a service that is failing.
			select {
			case <-ctx.Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
}

// flow runs the whole flow once and returns the task's ID (once known).
func (c *loadClient) flow(ctx context.Context, client, n int) (string, error) {
	// 1. Create, repeated with the same key while the answer says so.
	key := fmt.Sprintf("loadtest-%d-%d-%s", client, n, randomHex(6))
	body := map[string]any{
		"name": fmt.Sprintf("loadtest client %d #%d", client, n), "type": "csv_enrich",
		"payload": map[string]any{"required": []string{"name", "email"}},
	}
	var created struct {
		Task   taskView `json:"task"`
		Upload struct {
			Put presignedView `json:"put"`
		} `json:"upload"`
	}
	for {
		a, err := c.call(ctx, epCreate, http.MethodPost, "/tasks", body, map[string]string{"Idempotency-Key": key})
		if err != nil {
			return "", err
		}
		if a.passing() {
			if err := backoff(ctx, a); err != nil {
				return "", err
			}
			continue
		}
		if a.status != http.StatusCreated {
			return "", a.unexpected(epCreate)
		}
		if err := json.Unmarshal(a.body, &created); err != nil || created.Task.ID == "" || created.Upload.Put.URL == "" {
			return "", &flowError{epCreate + ": an answer without task or upload"}
		}
		break
	}
	id := created.Task.ID
	c.rec.mu.Lock()
	if c.rec.tasks[id] == nil {
		c.rec.tasks[id] = &taskInfo{}
	}
	c.rec.mu.Unlock()

	// 2. Upload with the presigned PUT.
	if err := c.transfer(ctx, epUpload, created.Upload.Put, c.data.input, nil); err != nil {
		return id, err
	}

	// 3. Submit. After a 503 the submit may have been made: read the task
	// before repeating it.
	for {
		a, err := c.call(ctx, epSubmit, http.MethodPost, "/tasks/"+id+"/submit", nil, nil)
		if err != nil {
			return id, err
		}
		if a.status == http.StatusOK {
			break
		}
		if !a.passing() {
			return id, a.unexpected(epSubmit)
		}
		if err := backoff(ctx, a); err != nil {
			return id, err
		}
		t, err := c.getTask(ctx, id)
		if err != nil {
			return id, err
		}
		if t.Status != "created" {
			break // the submit went through
		}
	}

	// 4. Poll until terminal.
	var t *taskView
	for {
		select {
		case <-ctx.Done():
			return id, errStopped
		case <-time.After(c.poll):
		}
		var err error
		if t, err = c.getTask(ctx, id); err != nil {
			return id, err
		}
		if t.Terminal {
			break
		}
	}
	switch {
	case t.Status != "completed":
		return id, &flowError{fmt.Sprintf("task ended %s: %s", t.Status, clipText(t.LastError, 80))}
	case t.RowCount != c.data.success+c.data.failed:
		return id, &flowError{fmt.Sprintf("completed with row_count %d, want %d", t.RowCount, c.data.success+c.data.failed)}
	case t.SuccessCount != c.data.success || t.ErrorCount != c.data.failed:
		return id, &flowError{fmt.Sprintf("completed with success/error %d/%d, want %d/%d", t.SuccessCount, t.ErrorCount, c.data.success, c.data.failed)}
	}

	// 5. Download and compare.
	var out presignedView
	for {
		a, err := c.call(ctx, epOutput, http.MethodGet, "/tasks/"+id+"/output", nil, nil)
		if err != nil {
			return id, err
		}
		if a.passing() {
			if err := backoff(ctx, a); err != nil {
				return id, err
			}
			continue
		}
		if a.status != http.StatusOK {
			return id, a.unexpected(epOutput)
		}
		if err := json.Unmarshal(a.body, &out); err != nil || out.URL == "" {
			return id, &flowError{epOutput + ": an answer without a URL"}
		}
		break
	}
	var got bytes.Buffer
	if err := c.transfer(ctx, epDownload, out, nil, &got); err != nil {
		return id, err
	}
	if !bytes.Equal(got.Bytes(), c.data.output) {
		return id, &flowError{"download: the output differs from the expected one"}
	}
	return id, nil
}

// getTask reads the task, waiting out 503s and conflicts.
func (c *loadClient) getTask(ctx context.Context, id string) (*taskView, error) {
	for {
		a, err := c.call(ctx, epGet, http.MethodGet, "/tasks/"+id, nil, nil)
		if err != nil {
			return nil, err
		}
		if a.passing() {
			if err := backoff(ctx, a); err != nil {
				return nil, err
			}
			continue
		}
		if a.status != http.StatusOK {
			return nil, a.unexpected(epGet)
		}
		var t taskView
		if err := json.Unmarshal(a.body, &t); err != nil || t.ID != id {
			return nil, &flowError{epGet + ": an answer that is not the task"}
		}
		return &t, nil
	}
}

// transfer sends a presigned request straight to S3 (through the proxy),
// with body as its body, the answer's body into out. A 5xx answer is
// repeated after a second, a few times: the store may be stalled.
func (c *loadClient) transfer(ctx context.Context, ep string, p presignedView, body []byte, out *bytes.Buffer) error {
	for try := 0; ; try++ {
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		method := p.Method
		if method == "" {
			method = http.MethodGet
		}
		req, err := http.NewRequestWithContext(ctx, method, p.URL, rd)
		if err != nil {
			return &flowError{ep + ": " + err.Error()}
		}
		for k, v := range p.Headers {
			req.Header.Set(k, v)
		}
		start := time.Now()
		resp, err := c.http.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return errStopped
			}
			return &flowError{ep + ": " + transportKind(err)}
		}
		if out != nil {
			out.Reset()
			_, err = io.Copy(out, resp.Body)
		} else {
			_, err = io.Copy(io.Discard, resp.Body)
		}
		resp.Body.Close()
		c.rec.observe(ep, time.Since(start))
		if err != nil {
			if ctx.Err() != nil {
				return errStopped
			}
			return &flowError{ep + ": reading the answer: " + transportKind(err)}
		}
		if resp.StatusCode == http.StatusOK {
			return nil
		}
		if resp.StatusCode < 500 || try == 4 {
			return &flowError{fmt.Sprintf("%s: %d", ep, resp.StatusCode)}
		}
		c.rec.mu.Lock()
		c.rec.statuses[fmt.Sprintf("%s %d", ep, resp.StatusCode)]++
		c.rec.mu.Unlock()
		if err := backoff(ctx, nil); err != nil {
			return err
		}
	}
}

func clipText(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
