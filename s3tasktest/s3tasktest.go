// Package s3tasktest helps a host application test its own use of s3task:
// its handlers, its HTTP endpoints, the flow between them. Everything runs
// in process, on an S3 that keeps its objects in memory and needs no
// network, no server and no credentials.
//
// [NewStore] gives a ready [s3task.Store] on an empty bucket in one call.
// [Submit] creates a task with its input and queues it. [Run] runs a
// handler on one given task, synchronously, and returns what the attempt
// left: the record, the handler's error, the output. [Drain] works the
// queue until nothing is due, as a worker would, inside the test. A test
// of a handler registered with [s3task.HandleJSON] reads:
//
//	func TestCountWords(t *testing.T) {
//		var mux s3task.Mux
//		if err := s3task.HandleJSON(&mux, "count", countWords); err != nil {
//			t.Fatal(err)
//		}
//		store := s3tasktest.NewStore(t, nil)
//		task := s3tasktest.Submit(t, store, s3task.CreateParams{Type: "count", Args: countArgs{Min: 2}}, []byte("to be or not"))
//		res := s3tasktest.Run(t, store, &mux, task.ID)
//		if res.Err != nil || res.Task.Status != s3task.StatusCompleted || string(res.Output) != "4" {
//			t.Errorf("got error %v, status %s, output %q", res.Err, res.Task.Status, res.Output)
//		}
//	}
//
// A test need not wait for time to pass: [S3.Advance] moves the server's
// clock ahead, and the Stores follow it, so a retry, a scheduled start or
// a lease's end falls due at once; drain again to run what fell due. [NewS3] gives
// the S3 itself, for Stores that share a bucket ([S3.NewStore]), for
// reading objects without a request ([S3.Object], [S3.Keys]) and for
// clients that fail, delay or count requests ([S3.Client],
// [RoundTripFunc]).
//
// The examples of [Run] and [Drain] are whole test bodies, with t the
// test's; the package's own tests run them.
//
// The in-memory S3 runs inside a testing/synctest bubble too, where hours of
// retries and leases pass in moments of virtual time.
package s3tasktest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/kit"
	"github.com/s3task/s3task/internal/s3test"
)

// S3 is an in-process S3 with one bucket. Its clients reach it through
// their transport, with no sockets. Requests are served one at a time, each
// applied atomically. Its zero value is not usable; call [NewS3].
type S3 struct {
	mem *s3test.Memory
}

// NewS3 returns an empty in-process S3 with one bucket.
func NewS3(t testing.TB) *S3 {
	t.Helper()
	mem, err := s3test.NewMemory()
	if err != nil {
		t.Fatalf("s3tasktest: %v", err)
	}
	return &S3{mem: mem}
}

// Bucket returns the name of the bucket.
func (s *S3) Bucket() string { return s.mem.Bucket }

// Client returns a new S3 client for the bucket. Each wrap wraps the
// client's transport, innermost first: use it to count, delay or fail
// requests.
func (s *S3) Client(wrap ...func(http.RoundTripper) http.RoundTripper) *s3.Client {
	return s.mem.Client(wrap...)
}

// RoundTripFunc adapts a function to an [http.RoundTripper], for the wraps
// of [S3.Client] and [S3.NewStore]: a test fails, delays or counts
// requests with one.
//
//	store := s3.NewStore(t, nil, func(next http.RoundTripper) http.RoundTripper {
//		return s3tasktest.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
//			if r.Method == http.MethodDelete {
//				return nil, errors.New("injected")
//			}
//			return next.RoundTrip(r)
//		})
//	})
type RoundTripFunc func(*http.Request) (*http.Response, error)

// RoundTrip calls f(r).
func (f RoundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// NewStore returns a Store on the bucket, with its own client (wrapped as
// [S3.Client] does), logging to t ([Logger]) unless opts name a logger,
// failing t if opts are invalid. Stores made from one S3
// see the same tasks, as processes sharing a bucket do.
//
// Unless opts set a Clock, the Store reads the server's clock itself,
// exactly, rather than estimating it from the one-second Date headers as a
// Store on a real S3 does: after [S3.Advance](d), what falls due at d is
// due, to the millisecond. The Store's judgement is exact; its workers'
// waits are timers, though, and only inside a testing/synctest bubble
// (synctest.Test), where time moves when every goroutine waits, does a
// worker act at the very moment a task falls due. Outside one it acts
// when its wait ends, within its PollInterval; a test that asserts when
// something happens belongs in a bubble.
func (s *S3) NewStore(t testing.TB, opts *s3task.StoreOptions, wrap ...func(http.RoundTripper) http.RoundTripper) *s3task.Store {
	t.Helper()
	var o s3task.StoreOptions
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = Logger(t)
	}
	exact := o.Clock == nil
	if exact {
		o.Clock = s.mem.Now
	}
	st, err := s3task.NewStore(s.Client(wrap...), s.Bucket(), &o)
	if err != nil {
		t.Fatalf("s3tasktest: %v", err)
	}
	if exact {
		kit.Exact(st)
	}
	return st
}

// HTTPClient returns an HTTP client that reaches the in-process S3, for
// following the presigned URLs of its Stores (PresignUpload,
// PresignDownload, the POST form) as a browser or curl would.
func (s *S3) HTTPClient() *http.Client { return &http.Client{Transport: s.mem.Transport()} }

// Do sends the presigned request p with body (nil for none), its signed
// headers included, through [S3.HTTPClient], and returns the status and
// the body of the answer. It fails t only if the request cannot be sent.
func (s *S3) Do(t testing.TB, p *s3task.PresignedRequest, body []byte) (int, []byte) {
	t.Helper()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequest(p.Method, p.URL, r)
	if err != nil {
		t.Fatalf("s3tasktest: presigned %s: %v", p.Method, err)
	}
	for k, vs := range p.Header {
		if strings.EqualFold(k, "Host") {
			continue
		}
		req.Header[k] = vs
	}
	resp, err := s.HTTPClient().Do(req)
	if err != nil {
		t.Fatalf("s3tasktest: presigned %s: %v", p.Method, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("s3tasktest: presigned %s: read answer: %v", p.Method, err)
	}
	return resp.StatusCode, b
}

// Object returns an object's bytes, read without a request, and whether it
// exists.
func (s *S3) Object(key string) ([]byte, bool) { return s.mem.Object(key) }

// Keys returns the object keys under prefix, in order, read without a
// request.
func (s *S3) Keys(prefix string) []string { return s.mem.Keys(prefix) }

// Now returns the time by the S3 server's clock.
func (s *S3) Now() time.Time { return s.mem.Now() }

// Advance moves the S3 server's clock forward by d. Stores follow the
// server's clock, so this is how a test makes a retry or a scheduled task
// fall due, or a lease expire, without waiting.
func (s *S3) Advance(d time.Duration) { s.mem.Advance(d) }

// Logger returns a logger that writes to t's log, which the test prints
// when it fails or runs with -v. What is logged after t ends is dropped.
func Logger(t testing.TB) *slog.Logger {
	w := &logWriter{t: t}
	t.Cleanup(func() { w.done.Store(true) })
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type logWriter struct {
	t    testing.TB
	done atomic.Bool
}

func (w *logWriter) Write(p []byte) (int, error) {
	if !w.done.Load() {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

// NewStore returns a Store on a new, empty in-process bucket: NewS3(t) and
// [S3.NewStore] in one call.
func NewStore(t testing.TB, opts *s3task.StoreOptions) *s3task.Store {
	t.Helper()
	return NewS3(t).NewStore(t, opts)
}

// Submit creates a task with p, uploads input as its input and submits it,
// failing t on any error. It returns the queued task.
func Submit(t testing.TB, store *s3task.Store, p s3task.CreateParams, input []byte) *s3task.Task {
	t.Helper()
	ctx := context.Background()
	task, err := store.Create(ctx, p)
	if err != nil {
		t.Fatalf("s3tasktest: create: %v", err)
	}
	if err := store.UploadInput(ctx, task.ID, bytes.NewReader(input)); err != nil {
		t.Fatalf("s3tasktest: upload input of %s: %v", task.ID, err)
	}
	task, err = store.Submit(ctx, task.ID)
	if err != nil {
		t.Fatalf("s3tasktest: submit %s: %v", task.ID, err)
	}
	return task
}

// Result is what one attempt left.
type Result struct {
	// Task is the record after the attempt: completed, failed (see
	// Task.Terminal for whether a retry is to come), or queued again if the
	// handler gave its attempt back on shutdown.
	Task *s3task.Task
	// Err is the error the handler returned (a panic as an error), nil if
	// it succeeded: the handler's own, inside any WorkerOptions.Middleware;
	// Task shows what the worker recorded from the middleware's.
	Err error
	// Output is the output of a completed task, nil if the attempt did not
	// complete it.
	Output []byte
}

// Run claims the task id of store, runs h on it once, synchronously, and
// returns the result. The task must be due: queued (and not scheduled for
// later), or failed with its retry due. It fails t if the task cannot be
// claimed or read.
//
// The handler gets a real [s3task.Job], as a worker's handler does: its
// input, its outputs and its progress go to the store. The worker that
// runs it is made with opts (at most one; nil means the defaults) and ID
// "s3tasktest" unless the options name one.
func Run(t testing.TB, store *s3task.Store, h s3task.Handler, id string, opts ...*s3task.WorkerOptions) *Result {
	t.Helper()
	r := newRunner(t, store, h, opts)
	res, err := r.run(context.Background(), id)
	if err != nil {
		t.Fatalf("s3tasktest: run %s: %v", id, err)
	}
	return res
}

// Drain works store's queue with h until no task is due, running each due
// task, oldest first, as [Run] does, and returns the results in the order
// it ran them. A task that fails with a retry falls due again only when its
// backoff has passed by the server's clock: advance it ([S3.Advance]) and
// drain again to run the retry. Tasks of types h does not serve (see
// [s3task.TypedHandler]) and tasks of a paused type ([s3task.Store.Pause])
// are left as they are, to run once served or resumed. The unfinished
// tasks it leaves,
// and why, go to t's log; [DrainLeft] returns them. It fails t on any
// error other than a handler's.
func Drain(t testing.TB, store *s3task.Store, h s3task.Handler, opts ...*s3task.WorkerOptions) []*Result {
	t.Helper()
	ran, left := DrainLeft(t, store, h, opts...)
	for _, l := range left {
		t.Logf("s3tasktest: drain left task %s: %s", l.Task.ID, l.Why)
	}
	return ran
}

// Left is an unfinished task that [DrainLeft] did not run, and why.
type Left struct {
	Task *s3task.Task // the task's record, as the drain last read it
	// Why says what keeps the task from running now, for example
	// "created: never submitted", "scheduled for 2026-01-02T15:04:05Z, in
	// 1h0m0s by the server's clock", "retry due at ..., in 30s", "type
	// \"resize\" not served by the handler", "type \"resize\" paused
	// (Store.Pause) ...", "running, leased until ...".
	Why string
}

// DrainLeft is [Drain] that also returns the unfinished tasks left, oldest
// first, each with why it did not run, so a test can assert that nothing
// was left, or that exactly what it expects was. It logs nothing.
func DrainLeft(t testing.TB, store *s3task.Store, h s3task.Handler, opts ...*s3task.WorkerOptions) ([]*Result, []Left) {
	t.Helper()
	ctx := context.Background()
	r := newRunner(t, store, h, opts)
	var ran []*Result
	for {
		tasks, err := unfinished(ctx, store)
		if err != nil {
			t.Fatalf("s3tasktest: drain: %v", err)
		}
		before := len(ran)
		for _, task := range tasks {
			if task.Status == s3task.StatusCreated {
				continue
			}
			res, err := r.run(ctx, task.ID)
			switch {
			case errors.Is(err, s3task.ErrInvalidTransition), errors.Is(err, s3task.ErrUnknownTaskType),
				errors.Is(err, s3task.ErrTypePaused):
				continue // not due, not served, or paused
			case err != nil:
				t.Fatalf("s3tasktest: drain: run %s: %v", task.ID, err)
			}
			ran = append(ran, res)
		}
		if len(ran) == before {
			var paused []string
			if len(tasks) > 0 {
				if paused, err = store.Paused(kit.Bypass(ctx)); err != nil {
					t.Fatalf("s3tasktest: drain: %v", err)
				}
			}
			left := make([]Left, 0, len(tasks))
			for _, task := range tasks {
				left = append(left, Left{Task: task, Why: why(store, h, paused, task)})
			}
			return ran, left
		}
	}
}

// why says what keeps task from running now; paused are the paused types.
func why(store *s3task.Store, h s3task.Handler, paused []string, task *s3task.Task) string {
	now := store.Now()
	at := func(when time.Time) string {
		return fmt.Sprintf("%s, in %s by the server's clock", when.UTC().Format(time.RFC3339Nano), when.Sub(now))
	}
	// wait says what the task waits for besides a worker, if anything.
	wait := func() string {
		switch {
		case task.Status == s3task.StatusQueued && task.RunAt.After(now):
			return "scheduled for " + at(task.RunAt)
		case task.Status == s3task.StatusFailed && task.RetryAt.After(now):
			return "retry due at " + at(task.RetryAt)
		case task.Status == s3task.StatusRunning:
			return "running, leased until " + at(task.LeaseExpiresAt)
		}
		return ""
	}
	th, typed := h.(s3task.TypedHandler)
	switch {
	case task.Status == s3task.StatusCreated:
		return "created: never submitted"
	case typed && !slices.Contains(th.Types(), task.Type):
		return fmt.Sprintf("type %q not served by the handler (it serves %q)", task.Type, th.Types())
	case slices.Contains(paused, task.Type):
		r := fmt.Sprintf("type %q paused (Store.Pause): no worker claims it until Store.Resume", task.Type)
		if w := wait(); w != "" {
			r += "; and " + w
		}
		return r
	}
	if w := wait(); w != "" {
		return w
	}
	return fmt.Sprintf("%s, and not due", task.Status)
}

// unfinished returns the tasks that are not finished, oldest first.
func unfinished(ctx context.Context, store *s3task.Store) ([]*s3task.Task, error) {
	tasks, err := all(ctx, store)
	if err != nil {
		return nil, err
	}
	tasks = slices.DeleteFunc(tasks, (*s3task.Task).Terminal)
	slices.Reverse(tasks)
	return tasks, nil
}

// all returns every readable task of store, newest first. Like the kit's
// other reads, it skips the Store's middleware: they are the worker's and
// the test's, not a caller's.
func all(ctx context.Context, store *s3task.Store) ([]*s3task.Task, error) {
	ctx = kit.Bypass(ctx)
	var tasks []*s3task.Task
	opts := s3task.ListOptions{Limit: s3task.MaxListLimit}
	for {
		page, err := store.List(ctx, opts)
		if err != nil {
			return nil, err
		}
		tasks = append(tasks, page.Tasks...)
		if page.NextCursor == "" {
			return tasks, nil
		}
		opts.Cursor = page.NextCursor
	}
}

// runner runs attempts with a worker whose handler notes what h returned.
type runner struct {
	store *s3task.Store
	w     *s3task.Worker
	mu    sync.Mutex
	errs  map[string]error // by task ID: the latest attempt's error
}

func newRunner(t testing.TB, store *s3task.Store, h s3task.Handler, opts []*s3task.WorkerOptions) *runner {
	t.Helper()
	var o s3task.WorkerOptions
	if len(opts) > 0 && opts[0] != nil {
		o = *opts[0]
	}
	if o.ID == "" {
		o.ID = "s3tasktest"
	}
	if o.Logger == nil {
		o.Logger = Logger(t)
	}
	r := &runner{store: store, errs: map[string]error{}}
	var wh s3task.Handler = noting{r, h}
	if th, ok := h.(s3task.TypedHandler); ok {
		wh = typedNoting{noting{r, h}, th}
	}
	w, err := s3task.NewWorker(store, wh, &o)
	if err != nil {
		t.Fatalf("s3tasktest: %v", err)
	}
	r.w = w
	return r
}

// run runs one attempt of task id and reads what it left.
func (r *runner) run(ctx context.Context, id string) (*Result, error) {
	task, err := r.w.RunTask(ctx, id)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	res := &Result{Task: task, Err: r.errs[id]}
	r.mu.Unlock()
	if task.Status == s3task.StatusCompleted {
		out, err := r.store.OpenOutput(kit.Bypass(ctx), id)
		if errors.Is(err, s3task.ErrNotFound) {
			return res, nil // completed without an output
		}
		if err != nil {
			return nil, err
		}
		defer out.Close()
		if res.Output, err = io.ReadAll(out); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// noting runs h and notes its error, a panic included.
type noting struct {
	r *runner
	h s3task.Handler
}

func (n noting) Work(ctx context.Context, job *s3task.Job) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panicked: %v", p)
			n.r.note(job.Task.ID, err)
			panic(p) // the worker records it as a panic
		}
		n.r.note(job.Task.ID, err)
	}()
	return n.h.Work(ctx, job)
}

// typedNoting is noting for a handler that declares its types.
type typedNoting struct {
	noting
	th s3task.TypedHandler
}

func (n typedNoting) Types() []string { return n.th.Types() }

func (r *runner) note(id string, err error) {
	r.mu.Lock()
	r.errs[id] = err
	r.mu.Unlock()
}
