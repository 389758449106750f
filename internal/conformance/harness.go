package conformance

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/s3test"
	"github.com/s3task/s3task/internal/s3x"
	"github.com/s3task/s3task/s3tasktest"
)

// harness is what one test of the suite works with: its target, a producer
// Store, and a raw client for looking at objects directly.
type harness struct {
	t     *testing.T
	ctx   context.Context
	tg    *Target
	raw   s3test.Objects
	store *s3task.Store
}

// open starts a test on b: t.Parallel, a fresh target, a producer store.
func open(t *testing.T, b Backend, opts *s3task.StoreOptions) *harness {
	t.Helper()
	t.Parallel()
	tg := b.Open(t)
	h := &harness{t: t, ctx: t.Context(), tg: tg, raw: s3test.Objects{Client: tg.Client(), Bucket: tg.Bucket}}
	h.store = h.newStore(opts)
	return h
}

// newStore returns a Store on the target with a client of its own, as
// another machine would have. opts may be nil; ".csv" extensions and the
// test logger are filled in where unset.
func (h *harness) newStore(opts *s3task.StoreOptions, wrap ...func(http.RoundTripper) http.RoundTripper) *s3task.Store {
	h.t.Helper()
	var o s3task.StoreOptions
	if opts != nil {
		o = *opts
	}
	if o.InputExt == "" {
		o.InputExt = ".csv"
	}
	if o.OutputExt == "" {
		o.OutputExt = ".csv"
	}
	if o.Logger == nil {
		o.Logger = Logger()
	}
	st, err := s3task.NewStore(h.tg.Client(wrap...), h.tg.Bucket, &o)
	if err != nil {
		h.t.Fatalf("NewStore: %v", err)
	}
	return st
}

// submit creates a task, uploads input and submits it.
func (h *harness) submit(p s3task.CreateParams, input string) *s3task.Task {
	h.t.Helper()
	return s3tasktest.Submit(h.t, h.store, p, []byte(input))
}

func (h *harness) get(id string) *s3task.Task {
	h.t.Helper()
	task, err := h.store.Get(h.ctx, id)
	if err != nil {
		h.t.Fatalf("Get(%s): %v", id, err)
	}
	return task
}

func (h *harness) markerKey(id string) string {
	return s3test.Marker(h.ctx, h.raw.Client, h.raw.Bucket, h.store.Prefix(), id)
}
func (h *harness) recordKey(id string) string { return h.store.Prefix() + id + "/status.json" }

func (h *harness) outputKey(id string, n int) string {
	h.t.Helper()
	key, err := h.store.OutputKey(id, n)
	if err != nil {
		h.t.Fatalf("OutputKey(%s, %d): %v", id, n, err)
	}
	return key
}

func (h *harness) inputKey(id string) string {
	h.t.Helper()
	key, err := h.store.InputKey(id)
	if err != nil {
		h.t.Fatalf("InputKey(%s): %v", id, err)
	}
	return key
}

// object returns the bytes at key, or ok=false if there is none.
func (h *harness) object(key string) (body []byte, ok bool) {
	h.t.Helper()
	body, _, err := h.raw.Get(h.ctx, key)
	if s3x.NotFound(err) {
		return nil, false
	}
	if err != nil {
		h.t.Fatalf("GetObject(%s): %v", key, err)
	}
	return body, true
}

// put writes an object directly and returns its ETag.
func (h *harness) put(key string, body []byte) string {
	h.t.Helper()
	etag, err := h.raw.Put(h.ctx, key, body)
	if err != nil {
		h.t.Fatalf("PutObject(%s): %v", key, err)
	}
	return etag
}

func (h *harness) hasMarker(id string) bool {
	h.t.Helper()
	_, ok := h.object(h.markerKey(id))
	return ok
}

// output reads a completed task's output through Store.OpenOutput.
func (h *harness) output(id string) string {
	h.t.Helper()
	b, err := s3test.ReadAll(h.store.OpenOutput(h.ctx, id))
	if err != nil {
		h.t.Fatalf("read output of %s: %v", id, err)
	}
	return string(b)
}

// workerOptions returns options with the target's lease settings, quick
// polls, no backoff between attempts and the given hooks.
func (h *harness) workerOptions(id string, hooks s3task.Hooks) *s3task.WorkerOptions {
	tm := h.tg.Timing
	return &s3task.WorkerOptions{
		ID:                id,
		PollInterval:      10 * time.Millisecond,
		MaxPollInterval:   100 * time.Millisecond,
		LeaseDuration:     tm.Lease,
		HeartbeatInterval: tm.Heartbeat,
		ClockMargin:       tm.Margin,
		Backoff:           func(int) time.Duration { return 0 },
		ShutdownTimeout:   200 * time.Millisecond,
		Logger:            Logger(),
		Hooks:             hooks,
	}
}

// runningWorker is a worker whose Run goroutine the test owns.
type runningWorker struct {
	w      *s3task.Worker
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	t      *testing.T
	wait   time.Duration
}

// startWorker builds a worker and runs it until stop or the end of the test.
func (h *harness) startWorker(store *s3task.Store, hd s3task.Handler, opts *s3task.WorkerOptions) *runningWorker {
	h.t.Helper()
	w, err := s3task.NewWorker(store, hd, opts)
	if err != nil {
		h.t.Fatalf("NewWorker: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rw := &runningWorker{w: w, cancel: cancel, done: make(chan error, 1), t: h.t, wait: h.tg.Timing.Wait}
	go func() { rw.done <- w.Run(ctx) }()
	h.t.Cleanup(rw.stop)
	return rw
}

// stop cancels Run's context and waits for it to return. It can be called
// more than once.
func (rw *runningWorker) stop() {
	rw.once.Do(func() {
		rw.cancel()
		select {
		case err := <-rw.done:
			if err != nil {
				rw.t.Errorf("worker %s: Run returned %v", rw.w.ID(), err)
			}
		case <-time.After(rw.wait):
			rw.t.Errorf("worker %s: Run did not return within %s of its context ending", rw.w.ID(), rw.wait)
		}
	})
}

// events collects what a worker's hooks report, each kind on its own
// channel. Hooks never block: the channels are large, and a test reads only
// what it waits for.
type events struct {
	claimed   chan *s3task.Task
	completed chan *s3task.Task
	failed    chan failure
	lost      chan lostLease
	released  chan *s3task.Task
}

type failure struct {
	task *s3task.Task
	err  error
}

type lostLease struct {
	id    string
	task  *s3task.Task
	cause error
}

func newEvents() *events {
	const n = 1024
	return &events{
		claimed:   make(chan *s3task.Task, n),
		completed: make(chan *s3task.Task, n),
		failed:    make(chan failure, n),
		lost:      make(chan lostLease, n),
		released:  make(chan *s3task.Task, n),
	}
}

func offer[T any](ch chan T, v T) {
	select {
	case ch <- v:
	default:
	}
}

func (ev *events) hooks() s3task.Hooks {
	return s3task.Hooks{
		OnClaim:     func(t *s3task.Task) { offer(ev.claimed, t) },
		OnComplete:  func(t *s3task.Task) { offer(ev.completed, t) },
		OnFail:      func(t *s3task.Task, err error) { offer(ev.failed, failure{t, err}) },
		OnLeaseLost: func(id string, t *s3task.Task, cause error) { offer(ev.lost, lostLease{id, t, cause}) },
		OnRelease:   func(t *s3task.Task) { offer(ev.released, t) },
	}
}

// none fails the test if ch holds anything.
func none[T any](t *testing.T, ch chan T, what string) {
	t.Helper()
	select {
	case v := <-ch:
		t.Errorf("unexpected %s: %+v", what, v)
	default:
	}
}

// await returns the next value from ch, failing the test after the
// target's wait bound.
func await[T any](h *harness, ch <-chan T, what string) T {
	h.t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(h.tg.Timing.Wait):
		h.t.Fatalf("timed out after %s waiting for %s", h.tg.Timing.Wait, what)
		panic("unreachable")
	}
}

// waitFor checks cond on a short ticker until it holds, failing the test
// after the target's wait bound. It waits for a condition, never for a
// fixed time.
func (h *harness) waitFor(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(h.tg.Timing.Wait)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out after %s waiting until %s", h.tg.Timing.Wait, what)
		}
		<-tick.C
	}
}

// gate blocks handlers until the test opens it, or until their context
// ends.
type gate struct {
	once sync.Once
	ch   chan struct{}
}

func newGate(t *testing.T) *gate {
	g := &gate{ch: make(chan struct{})}
	t.Cleanup(g.open) // never leave a handler blocked behind a finished test
	return g
}

func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

func (g *gate) wait(ctx context.Context) error {
	select {
	case <-g.ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// wantLost fails the test unless err is how S3 refuses a conditional write
// (what the library treats as a lost race), and returns a description of
// the answer for the log.
func wantLost(t *testing.T, err error, what string) string {
	t.Helper()
	if err == nil {
		t.Errorf("%s: succeeded, want it refused", what)
		return "accepted"
	}
	if !s3x.Lost(err) {
		t.Errorf("%s: %v; the library would not see this as a lost race", what, err)
	}
	var code interface{ ErrorCode() string }
	if errors.As(err, &code) {
		return code.ErrorCode()
	}
	return err.Error()
}
