package s3task

// The env of the tests that run in a testing/synctest bubble against the
// socketless in-memory S3 (adversity_test.go, wake_test.go): stores, tasks,
// records read behind the library's back, workers run in the bubble.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/s3task/s3task/internal/s3test"
)

var advQuiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// advEnv is an in-memory S3 with a store that prepares and inspects tasks.
type advEnv struct {
	t     *testing.T
	mem   *s3test.Memory
	raw   s3test.Objects // no faults, no library
	admin *Store         // no faults, no hook
	ctx   context.Context
}

// newAdvEnv returns an env on an empty in-memory S3. Inside a bubble, it
// must be made inside it.
func newAdvEnv(t *testing.T) *advEnv {
	t.Helper()
	mem, err := s3test.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	e := &advEnv{t: t, mem: mem, raw: s3test.Objects{Client: mem.Client(), Bucket: mem.Bucket}, ctx: context.Background()}
	e.admin = e.store(nil)
	return e
}

// inBubble runs test in parallel with the others, in a synctest bubble of
// its own, on an env made inside it.
func inBubble(t *testing.T, test func(t *testing.T, e *advEnv)) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) { test(t, newAdvEnv(t)) })
}

// store returns a store on a client of its own, whose transport the
// busy-loop guard wraps first, then each wrap; quiet unless opts name a
// logger.
func (e *advEnv) store(opts *StoreOptions, wrap ...func(http.RoundTripper) http.RoundTripper) *Store {
	e.t.Helper()
	var o StoreOptions
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = advQuiet
	}
	st, err := NewStore(e.mem.Client(append([]func(http.RoundTripper) http.RoundTripper{s3test.SpinGuard(e.t)}, wrap...)...), e.mem.Bucket, &o)
	if err != nil {
		e.t.Fatal(err)
	}
	return st
}

// create makes a task with its input uploaded, still created.
func (e *advEnv) create(p CreateParams) *Task {
	e.t.Helper()
	task, err := e.admin.Create(e.ctx, p)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.admin.UploadInput(e.ctx, task.ID, strings.NewReader("a,b\n1,2\n")); err != nil {
		e.t.Fatal(err)
	}
	return task
}

// submit makes a queued task.
func (e *advEnv) submit(p CreateParams) *Task {
	e.t.Helper()
	task := e.create(p)
	got, err := e.admin.Submit(e.ctx, task.ID)
	if err != nil {
		e.t.Fatal(err)
	}
	return got
}

func (e *advEnv) recordKey(id string) string { return DefaultPrefix + id + "/status.json" }
func (e *advEnv) markerKey(id string) string {
	return s3test.Marker(e.ctx, e.raw.Client, e.mem.Bucket, DefaultPrefix, id)
}
func (e *advEnv) outputKey(id string, n int) string {
	return fmt.Sprintf("%s%s/output-attempt-%d", DefaultPrefix, id, n)
}

func (e *advEnv) has(key string) bool { _, ok := e.mem.Object(key); return ok }

// rawRecord reads a task's record straight from the backend, no request,
// into v: a *Task, or a map to see fields the Task type may not have yet.
func (e *advEnv) rawRecord(id string, v any) {
	e.t.Helper()
	b, ok := e.mem.Object(e.recordKey(id))
	if !ok {
		e.t.Fatalf("no record for %s", id)
	}
	if err := json.Unmarshal(b, v); err != nil {
		e.t.Fatalf("record of %s: %v", id, err)
	}
}

// record reads a task's record straight from the backend, no request.
func (e *advEnv) record(id string) *record {
	var t record
	e.rawRecord(id, &t)
	return &t
}

func (e *advEnv) putRaw(key string, body []byte) {
	e.t.Helper()
	if _, err := e.raw.Put(e.ctx, key, body); err != nil {
		e.t.Fatal(err)
	}
}

// takeOver rewrites a running task's record as if another worker had taken
// it over with attempt+1, keeping a well-behaved writer's bookkeeping if the
// record has any.
func (e *advEnv) takeOver(id, worker string) {
	e.t.Helper()
	m := map[string]any{}
	e.rawRecord(id, &m)
	m["worker_id"] = worker
	m["attempt_id"] = m["attempt_id"].(float64) + 1
	m["lease_expires_at"] = time.Now().UTC().Add(time.Hour).Format(time.RFC3339Nano)
	if w, ok := m["writes"].(float64); ok {
		m["writes"] = w + 1
		prior, _ := m["prior_revisions"].([]any)
		m["prior_revisions"] = append([]any{m["revision"]}, prior...)
	}
	m["revision"] = "taken-over-by-" + worker
	b, err := json.Marshal(m)
	if err != nil {
		e.t.Fatal(err)
	}
	e.putRaw(e.recordKey(id), b)
}

// advWaitFor polls cond every step of virtual time until it holds or limit
// passes; it reports whether it held.
func advWaitFor(limit, step time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(step)
	}
	return true
}

// awaitTerminal waits up to limit for task id to finish, polling its
// record every second of virtual time; it reports whether it did.
func (e *advEnv) awaitTerminal(id string, limit time.Duration) bool {
	return advWaitFor(limit, time.Second, func() bool { return e.record(id).Terminal() })
}

func advAwait[T any](t *testing.T, ch <-chan T, limit time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(limit):
		t.Fatalf("%s did not happen within %s (virtual)", what, limit)
	}
	var zero T
	return zero
}

// advWorker is a worker running in the bubble until stop, or the end of
// the test.
type advWorker struct {
	w       *Worker
	started chan advStart // each handler start, while there is room: unread, its length counts the runs
	done    chan error
	stop    func() // cancels Run's context and waits (virtual time) for Run to return
}

// advStart is the start of a handler.
type advStart struct {
	id string    // the task's
	at time.Time // by the bubble's clock, the server's
}

// run runs a worker of st with h and opts, quiet unless opts name a logger.
func (e *advEnv) run(st *Store, h HandlerFunc, opts *WorkerOptions) *advWorker {
	e.t.Helper()
	if opts.Logger == nil {
		opts.Logger = advQuiet
	}
	aw := &advWorker{started: make(chan advStart, 64), done: make(chan error, 1)}
	w, err := NewWorker(st, HandlerFunc(func(ctx context.Context, job *Job) error {
		select {
		case aw.started <- advStart{job.Task.ID, time.Now()}:
		default:
		}
		return h(ctx, job)
	}), opts)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	aw.w = w
	go func() { aw.done <- w.Run(ctx) }()
	aw.stop = sync.OnceFunc(func() {
		cancel()
		if err := advAwait(e.t, aw.done, 3*time.Hour, "worker "+w.ID()+"'s Run to return"); err != nil {
			e.t.Errorf("worker %s: Run: %v", w.ID(), err)
		}
	})
	e.t.Cleanup(aw.stop)
	return aw
}

// advSucceed is a handler that completes every task.
func advSucceed(context.Context, *Job) error { return nil }

// advUntilDone is a handler that runs until its context ends and returns
// the context's cause.
func advUntilDone(ctx context.Context, _ *Job) error {
	<-ctx.Done()
	return context.Cause(ctx)
}

// advWrap makes a transport wrapper of f, which gets each request and the
// transport to send it on.
func advWrap(f func(r *http.Request, next http.RoundTripper) (*http.Response, error)) func(http.RoundTripper) http.RoundTripper {
	return func(next http.RoundTripper) http.RoundTripper {
		return s3test.RoundTripFunc(func(r *http.Request) (*http.Response, error) { return f(r, next) })
	}
}
