package s3task_test

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/s3test"
	"github.com/s3task/s3task/s3tasktest"
)

// The worker tests run on the env of helpers_test.go, with workers run by
// runWorker; what follows is their own.

// Lease settings of the worker tests. Leases are long so that none runs out
// by itself; the tests that need an expired lease move the server's clock
// with Advance instead of sleeping.
const (
	workerLease     = 10 * time.Second
	workerMargin    = 2 * time.Second
	workerHeartbeat = 50 * time.Millisecond
	// workerPastLease moves the server's clock far enough for any worker
	// to judge a lease left alone as expired: Date headers have one-second
	// resolution, so a worker's view of the server's clock may be off by
	// about a second.
	workerPastLease = workerLease + workerMargin + 2*time.Second
)

// workerOptions returns quickWorker's options with the library's default
// concurrency and reconcile, workerLease, frequent heartbeats and a short
// shutdown.
func workerOptions(id string, hooks s3task.Hooks) *s3task.WorkerOptions {
	o := quickWorker(id, hooks)
	o.Concurrency, o.ReconcileInterval = 0, 0
	o.PollInterval = 10 * time.Millisecond
	o.LeaseDuration, o.ClockMargin, o.HeartbeatInterval = workerLease, workerMargin, workerHeartbeat
	o.ShutdownTimeout = 200 * time.Millisecond
	return o
}

// submitWith is submit with more than a name: it creates a task with p and
// testInput as its input and submits it.
func (e *env) submitWith(t *testing.T, p s3task.CreateParams) *s3task.Task {
	t.Helper()
	return s3tasktest.Submit(t, e.store, p, []byte(testInput))
}

// created creates a task with p and uploads testInput as its input, for a
// test that submits it itself.
func (e *env) created(t *testing.T, p s3task.CreateParams) *s3task.Task {
	t.Helper()
	task, err := e.store.Create(e.ctx, p)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return e.prepare(t, task, "created")
}

// output reads a completed task's output through Store.OpenOutput.
func (e *env) output(t *testing.T, id string) string {
	t.Helper()
	b, err := s3test.ReadAll(e.store.OpenOutput(e.ctx, id))
	if err != nil {
		t.Fatalf("output of %s: %v", id, err)
	}
	return string(b)
}

// markerDue returns the due time in a marker key, zero for a key without
// one (as earlier versions wrote).
func markerDue(t *testing.T, prefix, key, id string) time.Time {
	t.Helper()
	name := strings.TrimPrefix(key, prefix+"active/")
	if name == id {
		return time.Time{}
	}
	at, ok := strings.CutSuffix(name, "_"+id)
	if !ok {
		t.Fatalf("marker key %s is not one of task %s", key, id)
	}
	due, err := time.Parse(dueKeyLayout, at)
	if err != nil {
		t.Fatalf("marker key %s: %v", key, err)
	}
	return due
}

// expectMarked fails the test unless task, as stored, has a marker that
// falls due no later than the task needs a worker: a worker will find it.
func (e *env) expectMarked(t *testing.T, task *s3task.Task) {
	t.Helper()
	if problem := e.markedProblem(t, task); problem != "" {
		t.Error(problem)
	}
}

// markedProblem says what keeps task, as stored, from being found by a
// worker: no marker, or only markers that fall due after the task needs
// one; "" if nothing does. Any marker due in time will do: a worker that
// visits it reads the record, which says what to do. A change under way
// (a claim, say) writes its marker before its record, so for a moment a
// task has the marker of its next phase, due later, beside its own.
func (e *env) markedProblem(t *testing.T, task *s3task.Task) string {
	t.Helper()
	keys := e.markers(task.ID)
	if len(keys) == 0 {
		return fmt.Sprintf("task %s is %s but has no active marker: no worker will ever pick it up", task.ID, task.Status)
	}
	for _, key := range keys {
		if due := markerDue(t, e.store.Prefix(), key, task.ID); !due.After(task.DueAt) {
			return ""
		}
	}
	return fmt.Sprintf("task %s: its markers %v all fall due after the task's due_at %s", task.ID, keys, task.DueAt)
}

// expectMarkedNow is expectMarked for a task a worker may change at any
// moment: it judges a record and the markers read while the record did
// not change (the same revision before and after), so that a claim
// between the two reads is not taken for a missing or late marker.
func (e *env) expectMarkedNow(t *testing.T, id string) {
	t.Helper()
	for range 20 {
		before := e.get(t, id)
		problem := e.markedProblem(t, before)
		if after := e.get(t, id); after.Revision == before.Revision {
			if problem != "" {
				t.Error(problem)
			}
			return
		}
	}
	t.Errorf("task %s kept changing: its markers could not be judged against one record", id)
}

// worker is a worker run by runWorker, with the events of its hooks.
type worker struct {
	*hookEvents
	opts *s3task.WorkerOptions
	stop func()
}

// withEvents returns workerOptions for id, changed by edit unless it is
// nil, whose hooks report to the events it returns.
func withEvents(id string, edit func(o *s3task.WorkerOptions)) (*hookEvents, *s3task.WorkerOptions) {
	ev := newHookEvents()
	opts := workerOptions(id, ev.hooks())
	if edit != nil {
		edit(opts)
	}
	return ev, opts
}

// startWorker runs a worker named id on store with the options of
// withEvents.
func startWorker(t *testing.T, store *s3task.Store, id string, h s3task.Handler, edit func(o *s3task.WorkerOptions)) *worker {
	t.Helper()
	ev, opts := withEvents(id, edit)
	return &worker{hookEvents: ev, opts: opts, stop: runWorker(t, store, h, opts)}
}

// newWorker makes the worker startWorker would run, for a test about Run
// itself (see runItself), and returns it with its events.
func newWorker(t *testing.T, store *s3task.Store, id string, h s3task.Handler, edit func(o *s3task.WorkerOptions)) (*s3task.Worker, *hookEvents) {
	t.Helper()
	ev, opts := withEvents(id, edit)
	w, err := s3task.NewWorker(store, h, opts)
	if err != nil {
		t.Fatalf("NewWorker: %v", err)
	}
	return w, ev
}

// runItself runs w in the background: cancel ends Run's context, and wait
// returns what Run returned, failing the test if it does not return within
// testWait. Both run when the test ends.
func runItself(t *testing.T, w *s3task.Worker) (cancel context.CancelFunc, wait func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	wait = sync.OnceValue(func() error { return await(t, done, "Run to return") })
	t.Cleanup(func() {
		cancel()
		if err := wait(); err != nil {
			t.Errorf("worker %s: Run returned %v", w.ID(), err)
		}
	})
	return cancel, wait
}

// hookEvents collects what a worker's hooks report, each kind on its own
// channel. Hooks never block (see offer): the channels are large, and a test
// reads only what it waits for.
type hookEvents struct {
	claimed, completed, released chan *s3task.Task
	failed                       chan hookFailure
	lost                         chan hookLost
	polled                       chan s3task.PollStats
}

type hookFailure struct {
	task *s3task.Task
	err  error
}

type hookLost struct {
	id    string
	task  *s3task.Task
	cause error
}

func newHookEvents() *hookEvents {
	const n = 1024
	return &hookEvents{
		claimed: make(chan *s3task.Task, n), completed: make(chan *s3task.Task, n), released: make(chan *s3task.Task, n),
		failed: make(chan hookFailure, n), lost: make(chan hookLost, n), polled: make(chan s3task.PollStats, n),
	}
}

func (h *hookEvents) hooks() s3task.Hooks {
	return s3task.Hooks{
		OnClaim:     func(t *s3task.Task) { offer(h.claimed, t) },
		OnComplete:  func(t *s3task.Task) { offer(h.completed, t) },
		OnFail:      func(t *s3task.Task, err error) { offer(h.failed, hookFailure{t, err}) },
		OnLeaseLost: func(id string, t *s3task.Task, cause error) { offer(h.lost, hookLost{id, t, cause}) },
		OnRelease:   func(t *s3task.Task) { offer(h.released, t) },
		OnPoll:      func(p s3task.PollStats) { offer(h.polled, p) },
	}
}

// expectNone fails the test if any of the hooks named reported something
// the test has not taken.
func (h *hookEvents) expectNone(t *testing.T, hooks ...string) {
	t.Helper()
	for _, name := range hooks {
		switch name {
		case "OnClaim":
			expectNoHook(t, h.claimed, name)
		case "OnComplete":
			expectNoHook(t, h.completed, name)
		case "OnFail":
			expectNoHook(t, h.failed, name)
		case "OnLeaseLost":
			expectNoHook(t, h.lost, name)
		case "OnRelease":
			expectNoHook(t, h.released, name)
		default:
			t.Fatalf("no events of a hook %s", name)
		}
	}
}

// expectNoHook fails the test if ch holds anything.
func expectNoHook[T any](t *testing.T, ch chan T, what string) {
	t.Helper()
	select {
	case v := <-ch:
		t.Errorf("unexpected %s: %+v", what, v)
	default:
	}
}

// awaitWithin is await that also fails the test if the value took longer
// than d to come. It is for tests in a bubble (see bubble), whose clock a
// busy machine does not move: in real time, such a bound fails on a loaded
// machine.
func awaitWithin[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	if !runsInBubble(t) {
		t.Fatalf("awaitWithin(%s) outside a bubble: a wall-clock bound", what)
	}
	start := time.Now()
	v := await(t, ch, what)
	if took := time.Since(start); took > d {
		t.Errorf("%s took %s, want at most %s", what, took.Round(time.Millisecond), d)
	}
	return v
}

// awaitTask returns the next task on ch, one of a worker's events, failing
// the test unless it is task id.
func awaitTask(t *testing.T, ch <-chan *s3task.Task, id, what string) *s3task.Task {
	t.Helper()
	got := await(t, ch, what)
	if got.ID != id {
		t.Fatalf("%s: got task %s, want %s", what, got.ID, id)
	}
	return got
}

// awaitMore waits until the requests c counts of kind op (as s3test.Op
// names them) have grown by n.
func awaitMore(t *testing.T, c *s3test.Counter, op string, n int, what string) {
	t.Helper()
	from := c.Counts()[op]
	waitUntil(t, what, func() bool { return c.Counts()[op] >= from+n })
}

// handlerGate blocks handlers until the test opens it, or until their
// context ends.
type handlerGate struct {
	once sync.Once
	ch   chan struct{}
}

func newHandlerGate(t *testing.T) *handlerGate {
	g := &handlerGate{ch: make(chan struct{})}
	t.Cleanup(g.open) // never leave a handler blocked behind a finished test
	return g
}

func (g *handlerGate) open() { g.once.Do(func() { close(g.ch) }) }

// wait returns nil once the gate opens, or the context's error.
func (g *handlerGate) wait(ctx context.Context) error {
	select {
	case <-g.ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// handler returns a handler that waits for the gate.
func (g *handlerGate) handler() s3task.Handler {
	return s3task.HandlerFunc(func(ctx context.Context, _ *s3task.Job) error { return g.wait(ctx) })
}

// untilDone is a handler that signals its start, runs until its context
// ends, reports the context's cause, and then returns the context's error,
// or nil if it claims success.
type untilDone struct {
	started chan struct{}
	causes  chan error
	success bool
}

func newUntilDone(success bool) *untilDone {
	return &untilDone{started: make(chan struct{}, 1), causes: make(chan error, 1), success: success}
}

func (u *untilDone) Work(ctx context.Context, _ *s3task.Job) error {
	offer(u.started, struct{}{})
	<-ctx.Done()
	offer(u.causes, context.Cause(ctx))
	if u.success {
		return nil
	}
	return ctx.Err()
}

// answered counts the requests of a client for which match holds once S3
// answered them.
type answered struct {
	match func(r *http.Request, resp *http.Response) bool
	n     atomic.Int64
}

func (a *answered) wrap(next http.RoundTripper) http.RoundTripper {
	return s3tasktest.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := next.RoundTrip(r)
		if err == nil && a.match(r, resp) {
			a.n.Add(1)
		}
		return resp, err
	})
}

func (a *answered) count() int { return int(a.n.Load()) }

// putsAnswered counts the PUTs of a client to keys ending in /key that S3
// answered with status.
func putsAnswered(key string, status int) *answered {
	return &answered{match: func(r *http.Request, resp *http.Response) bool {
		return isPut(r, key) && resp.StatusCode == status
	}}
}

func TestWorkerEndToEndCSV(t *testing.T) {
	t.Parallel()
	producer, e := setup(t, nil) // e.count counts the producer's requests
	input := "name,city\nada,london\ngrace,arlington\nlinus,helsinki\nbarbara,boston\n"
	// The expected results come from the input, not from the handler.
	lines := strings.Split(strings.TrimSuffix(input, "\n"), "\n")
	dataRows := int64(len(lines) - 1)

	handler := s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		in, err := job.OpenInput(ctx)
		if err != nil {
			return err
		}
		defer in.Close()
		records, err := csv.NewReader(in).ReadAll()
		if err != nil {
			return s3task.Permanent(err)
		}
		out, err := job.CreateOutput(ctx)
		if err != nil {
			return err
		}
		cw := csv.NewWriter(out)
		var p s3task.Progress
		p.RowCount = int64(len(records) - 1)
		for i, rec := range records {
			for j := range rec {
				rec[j] = strings.ToUpper(rec[j])
			}
			if err := cw.Write(rec); err != nil {
				out.Close()
				return err
			}
			if i > 0 {
				p.ProcessedCount++
				p.SuccessCount++
				job.SetProgress(p)
			}
		}
		cw.Flush()
		if err := cw.Error(); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})

	var workerReqs s3test.Counter
	ev := startWorker(t, e.newStore(t, nil, workerReqs.Wrap), "csv-worker", handler, func(o *s3task.WorkerOptions) {
		o.HeartbeatInterval = workerLease / 3 // no heartbeat during this short task: request counts stay exact
	})

	workerReqs.Reset()
	submitted := s3tasktest.Submit(t, producer, s3task.CreateParams{Name: "cities.csv", Type: "upper"}, []byte(input))
	claimed := await(t, ev.claimed, "the claim")
	done := awaitTask(t, ev.completed, submitted.ID, "the task to complete")
	t.Logf("requests for one task: producer (create, upload, submit): %s; worker (polls included): %s", e.count.String(), workerReqs.String())

	// Submit makes the task due at once; the claim moves it to the end of
	// the lease plus the clock margin, and completing keeps that.
	if submitted.DueAt.IsZero() || submitted.DueAt.Before(submitted.CreatedAt) {
		t.Errorf("submitted: due_at %s, want a time from created_at %s on", submitted.DueAt, submitted.CreatedAt)
	}
	if want := claimed.LeaseExpiresAt.Add(workerMargin); !claimed.DueAt.Equal(want) {
		t.Errorf("claimed: due_at %s, want lease end + margin = %s", claimed.DueAt, want)
	}
	got := e.get(t, submitted.ID)
	want := *submitted
	want.Status = s3task.StatusCompleted
	want.Attempt = 1
	want.WorkerID = "csv-worker"
	want.DueAt = claimed.DueAt
	want.StartedAt = claimed.StartedAt // the claim's time, kept
	if claimed.StartedAt.IsZero() || claimed.StartedAt.Before(submitted.SubmittedAt) {
		t.Errorf("claimed: started_at %s, want the claim's time, after submitted_at %s", claimed.StartedAt, submitted.SubmittedAt)
	}
	want.Progress = s3task.Progress{RowCount: dataRows, ProcessedCount: dataRows, SuccessCount: dataRows}
	want.OutputPath = e.outputKey(t, submitted.ID, 1)
	// The claim opened the attempt's entry in the history, with the
	// worker's heartbeat interval; the completion closed it.
	opened := s3task.Attempt{Number: 1, WorkerID: "csv-worker", StartedAt: claimed.StartedAt, Outcome: s3task.OutcomeRunning, HeartbeatInterval: (workerLease / 3).Truncate(time.Millisecond)}
	if diff := cmp.Diff([]s3task.Attempt{opened}, claimed.History); diff != "" {
		t.Errorf("claimed: history (-want +got):\n%s", diff)
	}
	closed := opened
	closed.Outcome = s3task.OutcomeCompleted
	if len(got.History) == 1 {
		closed.EndedAt = got.History[0].EndedAt
		if closed.EndedAt.Before(closed.StartedAt) || closed.EndedAt.After(got.UpdatedAt) {
			t.Errorf("the attempt ended at %s, not between its start %s and the record's write %s", closed.EndedAt, closed.StartedAt, got.UpdatedAt)
		}
	}
	want.History = []s3task.Attempt{closed}
	if diff := cmp.Diff(&want, got, ignoreWriteStamp()); diff != "" {
		t.Errorf("completed record (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(got, done, ignoreWriteStamp()); diff != "" {
		t.Errorf("OnComplete saw a different record than Get (-get +hook):\n%s", diff)
	}
	if out := e.output(t, submitted.ID); out != strings.ToUpper(input) {
		t.Errorf("output = %q, want %q", out, strings.ToUpper(input))
	}
	e.wantMarkers(t, submitted.ID) // none left
	ev.expectNone(t, "OnFail", "OnLeaseLost")
}

func TestWorkerProgressVisibleWhileRunning(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	release := newHandlerGate(t)
	want := s3task.Progress{RowCount: 40, ProcessedCount: 17, SuccessCount: 15, ErrorCount: 2}
	handler := s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		job.SetProgress(want)
		return release.wait(ctx)
	})
	ev := startWorker(t, e.newStore(t, nil), "progress-worker", handler, nil)
	task := e.submit(t, "progress")
	await(t, ev.claimed, "the claim")

	var running *s3task.Task
	waitUntil(t, "Get shows the handler's progress", func() bool {
		running = e.get(t, task.ID)
		return running.Progress == want
	})
	if running.Status != s3task.StatusRunning || running.WorkerID != ev.opts.ID || running.Attempt != 1 {
		t.Errorf("while running: status %s, worker %q, attempt %d; want running, %q, 1",
			running.Status, running.WorkerID, running.Attempt, ev.opts.ID)
	}
	if !running.LeaseExpiresAt.After(e.srv.Now()) {
		t.Errorf("lease_expires_at %s is not in the future (server now %s)", running.LeaseExpiresAt, e.srv.Now())
	}

	release.open()
	done := await(t, ev.completed, "the task to complete")
	if done.Progress != want {
		t.Errorf("progress after completion = %+v, want %+v", done.Progress, want)
	}
}

func TestWorkerRetriesUntilSuccess(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	const succeedAt = 3
	var mu sync.Mutex
	var attempts []int
	handler := s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		n := job.Task.Attempt
		mu.Lock()
		attempts = append(attempts, n)
		mu.Unlock()
		// Every attempt writes an output; only the last one's may count.
		if err := job.WriteOutput(ctx, strings.NewReader(fmt.Sprintf("written by attempt %d", n))); err != nil {
			return err
		}
		if n < succeedAt {
			return fmt.Errorf("flaky dependency, attempt %d", n)
		}
		return nil
	})
	ev := startWorker(t, e.newStore(t, nil), "retry-worker", handler, nil)
	task := e.submitWith(t, s3task.CreateParams{Name: "flaky", MaxAttempts: succeedAt})

	for n := 1; n < succeedAt; n++ {
		f := await(t, ev.failed, fmt.Sprintf("attempt %d to fail", n))
		if f.task.Attempt != n || f.task.Terminal() || f.task.RetryAt.IsZero() {
			t.Errorf("failure %d: attempt %d, terminal %v, retry_at %v; want attempt %d with a retry scheduled",
				n, f.task.Attempt, f.task.Terminal(), f.task.RetryAt, n)
		}
		if want := fmt.Sprintf("flaky dependency, attempt %d", n); f.task.LastError != want {
			t.Errorf("failure %d: last_error %q, want %q", n, f.task.LastError, want)
		}
	}
	done := await(t, ev.completed, "the task to complete")
	got := e.get(t, task.ID)
	if got.Status != s3task.StatusCompleted || got.Attempt != succeedAt || got.LastError != "" {
		t.Errorf("final record: status %s, attempt_id %d, last_error %q; want completed, %d, empty",
			got.Status, got.Attempt, got.LastError, succeedAt)
	}
	if want := e.outputKey(t, task.ID, succeedAt); got.OutputPath != want || done.OutputPath != want {
		t.Errorf("output_object_path = %q (hook %q), want %q", got.OutputPath, done.OutputPath, want)
	}
	if out, want := e.output(t, task.ID), fmt.Sprintf("written by attempt %d", succeedAt); out != want {
		t.Errorf("OpenOutput = %q, want %q", out, want)
	}
	for n := 1; n < succeedAt; n++ {
		body, ok := e.object(e.outputKey(t, task.ID, n))
		if want := fmt.Sprintf("written by attempt %d", n); !ok || string(body) != want {
			t.Errorf("output of attempt %d = %q (exists %v), want %q", n, body, ok, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff([]int{1, 2, 3}, attempts); diff != "" {
		t.Errorf("handler attempts (-want +got):\n%s", diff)
	}
	e.wantMarkers(t, task.ID) // none left
}

func TestWorkerFailsAtMaxAttempts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	handler := s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		return fmt.Errorf("cannot parse row %d", 7*job.Task.Attempt)
	})
	ev := startWorker(t, e.newStore(t, nil), "failing-worker", handler, nil)
	task := e.submit(t, "doomed")
	if task.MaxAttempts != s3task.DefaultMaxAttempts {
		t.Fatalf("max_attempts = %d, want the default %d", task.MaxAttempts, s3task.DefaultMaxAttempts)
	}

	var last hookFailure
	for n := 1; n <= task.MaxAttempts; n++ {
		last = await(t, ev.failed, fmt.Sprintf("attempt %d to fail", n))
		if last.task.Attempt != n {
			t.Fatalf("failure %d reported attempt %d", n, last.task.Attempt)
		}
		if final := n == task.MaxAttempts; last.task.Terminal() != final {
			t.Errorf("attempt %d: Terminal() = %v, want %v", n, last.task.Terminal(), final)
		}
	}
	got := e.get(t, task.ID)
	wantMsg := fmt.Sprintf("cannot parse row %d", 7*task.MaxAttempts)
	if got.Status != s3task.StatusFailed || !got.Terminal() || got.Attempt != task.MaxAttempts || !got.RetryAt.IsZero() {
		t.Errorf("final record: status %s, terminal %v, attempt %d, retry_at %v; want failed for good at attempt %d",
			got.Status, got.Terminal(), got.Attempt, got.RetryAt, task.MaxAttempts)
	}
	if !strings.Contains(got.LastError, wantMsg) {
		t.Errorf("last_error = %q, want it to hold %q", got.LastError, wantMsg)
	}
	if last.err == nil || last.err.Error() != wantMsg {
		t.Errorf("OnFail err = %v, want %q", last.err, wantMsg)
	}
	e.wantMarkers(t, task.ID) // none left
	claims := len(ev.claimed)
	if claims != task.MaxAttempts {
		t.Errorf("%d claims, want %d", claims, task.MaxAttempts)
	}
}

func TestWorkerPermanentErrorStopsAfterFirstAttempt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	handler := s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		return s3task.Permanent(errors.New("column 'amount' missing"))
	})
	ev := startWorker(t, e.newStore(t, nil), "permanent-worker", handler, nil)
	task := e.submit(t, "bad input")

	f := await(t, ev.failed, "the permanent failure")
	if !f.task.Terminal() || !s3task.IsPermanent(f.err) {
		t.Errorf("OnFail: terminal %v, IsPermanent(err) %v; want both", f.task.Terminal(), s3task.IsPermanent(f.err))
	}
	got := e.get(t, task.ID)
	if got.Status != s3task.StatusFailed || got.Attempt != 1 || got.MaxAttempts != task.MaxAttempts || !got.Terminal() {
		t.Errorf("record: status %s, attempt %d of %d, terminal %v; want failed for good after attempt 1 of %d",
			got.Status, got.Attempt, got.MaxAttempts, got.Terminal(), task.MaxAttempts)
	}
	if !strings.Contains(got.LastError, "column 'amount' missing") {
		t.Errorf("last_error = %q", got.LastError)
	}
	e.wantMarkers(t, task.ID) // none left
	if n := len(ev.claimed); n != 1 {
		t.Errorf("%d claims, want 1", n)
	}
}

func TestWorkerRetryAfterWaitsForServerClock(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	const delay = time.Hour
	handler := s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		if job.Task.Attempt == 1 {
			return s3task.RetryAfter(errors.New("rate limited"), delay)
		}
		return nil
	})
	var workerReqs s3test.Counter
	ev := startWorker(t, e.newStore(t, nil, workerReqs.Wrap), "patient-worker", handler, nil)
	before := e.srv.Now()
	task := e.submit(t, "rate limited")

	f := await(t, ev.failed, "the first attempt to fail")
	after := e.srv.Now()
	// The worker reads the server's clock from one-second Date headers.
	if lo, hi := before.Add(delay-2*time.Second), after.Add(delay+2*time.Second); f.task.RetryAt.Before(lo) || f.task.RetryAt.After(hi) {
		t.Errorf("retry_at = %s, want between %s and %s", f.task.RetryAt, lo, hi)
	}
	if f.task.Terminal() || f.task.Status != s3task.StatusFailed {
		t.Errorf("after RetryAfter: status %s, terminal %v; want failed awaiting retry", f.task.Status, f.task.Terminal())
	}

	// Let the worker look at the task several more times: it must leave it.
	awaitMore(t, &workerReqs, "GET", 5, "the worker to read the record 5 more times")
	if n := len(ev.claimed); n != 1 {
		t.Fatalf("%d claims before the retry was due, want 1", n)
	}
	if got := e.get(t, task.ID); got.Status != s3task.StatusFailed || got.Attempt != 1 {
		t.Fatalf("before the retry was due: status %s, attempt %d; want failed, 1", got.Status, got.Attempt)
	}

	e.srv.Advance(delay + 2*time.Second)
	done := await(t, ev.completed, "the retry once the server's clock passed retry_at")
	if done.Attempt != 2 {
		t.Errorf("completed at attempt %d, want 2", done.Attempt)
	}
}

// TestWorkerCrashRecovery cuts worker A off from S3 while its handler runs,
// lets the lease expire by the server's clock, and has worker B take the task
// over as a new attempt. When A comes back and its handler returns, nothing
// it does may change B's result.
func TestWorkerCrashRecovery(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)

	var cut s3test.Cutter
	releaseA := newHandlerGate(t)
	aWrote := make(chan error, 1)
	aReturned := make(chan struct{})
	handlerA := s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		defer close(aReturned)
		_ = releaseA.wait(ctx)
		// A stale handler that ignores its context and writes its output
		// anyway: the key is its own, but it must never become the result.
		aWrote <- job.WriteOutput(context.WithoutCancel(ctx), strings.NewReader("stale result from A"))
		return nil
	})
	evA := startWorker(t, e.newStore(t, nil, cut.Wrap), "worker-a", handlerA, nil)

	task := e.submit(t, "crash")
	claimA := await(t, evA.claimed, "worker A's claim")
	if claimA.Attempt != 1 || claimA.WorkerID != "worker-a" {
		t.Fatalf("A claimed attempt %d as %q", claimA.Attempt, claimA.WorkerID)
	}

	handlerB := s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		return job.WriteOutput(ctx, strings.NewReader("fresh result from B"))
	})
	evB := startWorker(t, e.newStore(t, nil), "worker-b", handlerB, nil)

	cut.Cut() // from now on nothing A sends reaches S3
	waitUntil(t, "A's requests are refused", func() bool { return cut.Refused() > 0 })
	e.srv.Advance(workerPastLease)

	claimB := await(t, evB.claimed, "worker B to recover the task")
	if claimB.Attempt != 2 || claimB.WorkerID != "worker-b" {
		t.Errorf("B claimed attempt %d as %q, want a new attempt 2 as worker-b", claimB.Attempt, claimB.WorkerID)
	}
	doneB := await(t, evB.completed, "worker B to complete")

	cut.Restore()
	releaseA.open()
	if err := await(t, aWrote, "A's handler to write its output"); err != nil {
		t.Logf("A's output write failed (allowed): %v", err)
	} else if body, _ := e.object(e.outputKey(t, task.ID, 1)); string(body) != "stale result from A" {
		t.Errorf("A's output write succeeded, but attempt 1's output holds %q", body)
	}
	await(t, aReturned, "A's handler to return")
	lost := await(t, evA.lost, "A to report its lost lease")
	if lost.id != task.ID || !errors.Is(lost.cause, s3task.ErrLeaseLost) {
		t.Errorf("OnLeaseLost(%s, cause %v), want (%s, ErrLeaseLost)", lost.id, lost.cause, task.ID)
	}
	evA.stop() // everything A does is over once Run returned
	evA.expectNone(t, "OnComplete", "OnFail")

	got := e.get(t, task.ID)
	if diff := cmp.Diff(doneB, got); diff != "" {
		t.Errorf("A changed B's completed record (-B's +now):\n%s", diff)
	}
	if got.Status != s3task.StatusCompleted || got.Attempt != 2 || got.WorkerID != "worker-b" {
		t.Errorf("record: status %s, attempt %d, worker %q; want completed by worker-b at attempt 2", got.Status, got.Attempt, got.WorkerID)
	}
	if want := e.outputKey(t, task.ID, 2); got.OutputPath != want {
		t.Errorf("output_object_path = %q, want %q", got.OutputPath, want)
	}
	if out := e.output(t, task.ID); out != "fresh result from B" {
		t.Errorf("OpenOutput = %q, want B's result", out)
	}
	e.wantMarkers(t, task.ID) // none left
}

func TestWorkerCancelWhileRunning(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t, nil)
		handler := newUntilDone(false)
		ev := startWorker(t, e.newStore(t, nil), "cancel-worker", handler, func(o *s3task.WorkerOptions) { o.HeartbeatInterval = 100 * time.Millisecond })
		task := e.submit(t, "to cancel")
		await(t, handler.started, "the handler to start")

		canceled, err := e.store.Cancel(e.ctx, task.ID, "user pressed stop")
		if err != nil {
			t.Fatalf("Cancel: %v", err)
		}
		canceledAt := time.Now()
		// The worker learns of it at its next heartbeat, within a
		// HeartbeatInterval of the bubble's clock, which a loaded machine
		// does not move (the bound adds one for the test's own polling):
		// the handler is not left running until the lease runs out.
		bound := 2 * ev.opts.HeartbeatInterval
		cause := awaitWithin(t, handler.causes, bound, "the handler's context to be cancelled")
		t.Logf("handler cancelled %s after Cancel returned (heartbeat every %s)", time.Since(canceledAt).Round(time.Millisecond), ev.opts.HeartbeatInterval)
		if !errors.Is(cause, s3task.ErrTaskCanceled) {
			t.Errorf("context.Cause = %v, want ErrTaskCanceled", cause)
		}
		lost := await(t, ev.lost, "OnLeaseLost")
		if !errors.Is(lost.cause, s3task.ErrTaskCanceled) || lost.task == nil || lost.task.Status != s3task.StatusAbandoned {
			t.Errorf("OnLeaseLost cause %v, task %+v; want ErrTaskCanceled with the abandoned record", lost.cause, lost.task)
		}
		ev.stop()

		got := e.get(t, task.ID)
		if diff := cmp.Diff(canceled, got); diff != "" {
			t.Errorf("the worker changed the abandoned record (-after Cancel +now):\n%s", diff)
		}
		if got.Status != s3task.StatusAbandoned || got.CancelReason != "user pressed stop" {
			t.Errorf("status %s, reason %q; want abandoned, %q", got.Status, got.CancelReason, "user pressed stop")
		}
		e.wantMarkers(t, task.ID) // none left
		ev.expectNone(t, "OnComplete", "OnFail", "OnRelease")
	})
}

// TestWorkerFastClockKeepsOffLiveLease runs worker B with a clock ten
// minutes fast next to worker A, which holds a task. The server's clock moves
// on by more than a lease in steps, with A renewing in between; B must judge
// by the server's clock and never take the task.
func TestWorkerFastClockKeepsOffLiveLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	release := newHandlerGate(t)
	renewedA := putsAnswered("status.json", http.StatusOK)
	var reqsB s3test.Counter
	evA := startWorker(t, e.newStore(t, nil, renewedA.wrap), "worker-a", release.handler(), nil)
	task := e.submit(t, "held")
	await(t, evA.claimed, "A's claim")

	fast := &s3task.StoreOptions{Clock: func() time.Time { return time.Now().Add(10 * time.Minute) }}
	evB := startWorker(t, e.newStore(t, fast, reqsB.Wrap), "worker-b", release.handler(), nil)

	const steps = 4
	step := workerLease / 2
	for i := range steps {
		e.srv.Advance(step)
		// A's first renewal after the jump may still use the old clock
		// reading; the ones after it renew from the new one.
		puts := renewedA.count()
		waitUntil(t, "A renewed its lease three times", func() bool { return renewedA.count() >= puts+3 })
		awaitMore(t, &reqsB, "GET", 3, "B to look at the task again")
		if n := len(evB.claimed); n != 0 {
			t.Fatalf("step %d (server clock +%s): B took over a task whose lease A keeps renewing", i+1, step*time.Duration(i+1))
		}
	}
	if got := e.get(t, task.ID); got.Status != s3task.StatusRunning || got.WorkerID != "worker-a" || got.Attempt != 1 {
		t.Fatalf("status %s, worker %q, attempt %d; want still running by worker-a at attempt 1", got.Status, got.WorkerID, got.Attempt)
	}
	t.Logf("B polled with a fast clock: %s", reqsB.String())

	release.open()
	done := await(t, evA.completed, "A to complete")
	if done.Attempt != 1 || done.WorkerID != "worker-a" {
		t.Errorf("completed attempt %d by %q, want attempt 1 by worker-a", done.Attempt, done.WorkerID)
	}
	evB.expectNone(t, "OnClaim")
	evA.expectNone(t, "OnLeaseLost")
}

// TestWorkerSlowClockRecoversExpiredLease checks that a worker whose clock is
// ten minutes slow still sees a lease that truly expired by the server's
// clock, and recovers the task.
func TestWorkerSlowClockRecoversExpiredLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	var cut s3test.Cutter
	stuck := newHandlerGate(t).handler() // runs until its context ends
	evA := startWorker(t, e.newStore(t, nil, cut.Wrap), "worker-a", stuck, nil)
	task := e.submit(t, "orphaned")
	await(t, evA.claimed, "A's claim")
	cut.Cut()
	t.Cleanup(cut.Restore) // let A stop cleanly

	slow := &s3task.StoreOptions{Clock: func() time.Time { return time.Now().Add(-10 * time.Minute) }}
	var reqsC s3test.Counter
	evC := startWorker(t, e.newStore(t, slow, reqsC.Wrap), "worker-c", succeed, nil)
	// While the lease is live, C leaves the task alone.
	awaitMore(t, &reqsC, "GET", 3, "C to look at the task")
	expectNoHook(t, evC.claimed, "claim by C of a live lease")

	e.srv.Advance(workerPastLease)
	claim := await(t, evC.claimed, "the slow-clock worker to recover the task")
	if claim.ID != task.ID || claim.Attempt != 2 {
		t.Errorf("C claimed %s attempt %d, want %s attempt 2", claim.ID, claim.Attempt, task.ID)
	}
	done := await(t, evC.completed, "C to complete")
	if done.Status != s3task.StatusCompleted || done.WorkerID != "worker-c" {
		t.Errorf("done: %s by %q", done.Status, done.WorkerID)
	}
	// The lease A was given, and C judged expired, was set by the server's
	// clock, not by C's slow one.
	if d := claim.LeaseExpiresAt.Sub(e.srv.Now()); d < workerLease-5*time.Second || d > workerLease+5*time.Second {
		t.Errorf("C's lease ends %s from the server's now, want about %s", d, workerLease)
	}
}

func TestWorkerPanickingHandler(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	mux := s3task.NewMux()
	if err := mux.HandleFunc("explode", func(ctx context.Context, job *s3task.Job) error {
		panic("boom: handler bug")
	}); err != nil {
		t.Fatal(err)
	}
	if err := mux.Handle("fine", succeed); err != nil {
		t.Fatal(err)
	}
	ev := startWorker(t, e.newStore(t, nil), "panic-worker", mux, nil)

	bad := e.submitWith(t, s3task.CreateParams{Name: "explodes", Type: "explode", MaxAttempts: 1})
	f := await(t, ev.failed, "the panicking attempt to fail")
	if f.task.ID != bad.ID || !strings.Contains(f.task.LastError, "panic") || !strings.Contains(f.task.LastError, "boom") || !f.task.Terminal() {
		t.Errorf("failure of %s: last_error %q, terminal %v; want %s with a panic message, final", f.task.ID, f.task.LastError, f.task.Terminal(), bad.ID)
	}
	if got := e.get(t, bad.ID); got.Status != s3task.StatusFailed || !strings.Contains(got.LastError, "panic") {
		t.Errorf("record: %s, last_error %q", got.Status, got.LastError)
	}

	good := e.submitWith(t, s3task.CreateParams{Name: "after the panic", Type: "fine"})
	awaitTask(t, ev.completed, good.ID, "the worker to go on with another task")
}

// A Mux given to a worker as it is never claims a type it does not serve
// (see TestWorkerClaimsOnlyTheTypesItServes); wrapped in a handler that
// serves every type, it fails the task permanently.
func TestMuxUnknownTaskTypeFailsPermanently(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	mux := s3task.NewMux()
	if err := mux.Handle("known", succeed); err != nil {
		t.Fatal(err)
	}
	ev := startWorker(t, e.newStore(t, nil), "mux-worker", s3task.HandlerFunc(mux.Work), nil)
	task := e.submitWith(t, s3task.CreateParams{Name: "mystery", Type: "no-such-type"})

	f := await(t, ev.failed, "the unknown type to fail")
	if !errors.Is(f.err, s3task.ErrUnknownTaskType) || !s3task.IsPermanent(f.err) {
		t.Errorf("OnFail err = %v: Is(ErrUnknownTaskType) %v, IsPermanent %v; want both",
			f.err, errors.Is(f.err, s3task.ErrUnknownTaskType), s3task.IsPermanent(f.err))
	}
	got := e.get(t, task.ID)
	if got.Status != s3task.StatusFailed || !got.Terminal() || got.Attempt != 1 || got.MaxAttempts != task.MaxAttempts {
		t.Errorf("record: %s, terminal %v, attempt %d of %d; want failed for good after 1 of %d",
			got.Status, got.Terminal(), got.Attempt, got.MaxAttempts, task.MaxAttempts)
	}
	if !strings.Contains(got.LastError, "no-such-type") || got.ErrorCategory != s3task.CategoryUnknownType {
		t.Errorf("last_error = %q, category %q; want it to name the type, category %q", got.LastError, got.ErrorCategory, s3task.CategoryUnknownType)
	}
	if n := len(ev.claimed); n != 1 {
		t.Errorf("%d claims, want 1", n)
	}
}

func TestMuxHandle(t *testing.T) {
	t.Parallel()
	mux := s3task.NewMux()
	var calls []string
	first := func(ctx context.Context, job *s3task.Job) error { calls = append(calls, "first"); return nil }
	second := func(ctx context.Context, job *s3task.Job) error { calls = append(calls, "second"); return nil }
	if err := mux.HandleFunc("report", first); err != nil {
		t.Fatalf("first HandleFunc: %v", err)
	}
	tests := []struct {
		name     string
		register func() error
	}{
		{"same type twice with Handle", func() error { return mux.Handle("report", s3task.HandlerFunc(second)) }},
		{"same type twice with HandleFunc", func() error { return mux.HandleFunc("report", second) }},
		{"nil handler", func() error { return mux.Handle("other", nil) }},
		{"nil func", func() error { return mux.HandleFunc("other", nil) }},
		{"type over 128 bytes", func() error { return mux.HandleFunc(strings.Repeat("t", 129), second) }},
	}
	for _, tt := range tests {
		if err := tt.register(); !errors.Is(err, s3task.ErrInvalidArgument) {
			t.Errorf("%s: err = %v, want ErrInvalidArgument", tt.name, err)
		}
	}
	if err := mux.Work(context.Background(), &s3task.Job{Task: s3task.Task{Type: "report"}}); err != nil {
		t.Fatalf("Work: %v", err)
	}
	if diff := cmp.Diff([]string{"first"}, calls); diff != "" {
		t.Errorf("handlers called (-want +got):\n%s", diff)
	}
	err := mux.Work(context.Background(), &s3task.Job{Task: s3task.Task{Type: "other"}})
	if !errors.Is(err, s3task.ErrUnknownTaskType) || !s3task.IsPermanent(err) {
		t.Errorf("Work on a type whose registration failed: %v, want a permanent ErrUnknownTaskType", err)
	}
}

func TestMuxRoutesByType(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	var mu sync.Mutex
	ran := map[string]string{} // task ID -> handler
	mux := s3task.NewMux()
	for _, typ := range []string{"resize", "transcode"} {
		if err := mux.HandleFunc(typ, func(ctx context.Context, job *s3task.Job) error {
			mu.Lock()
			defer mu.Unlock()
			if prev, dup := ran[job.Task.ID]; dup {
				return fmt.Errorf("task already ran in %s", prev)
			}
			ran[job.Task.ID] = typ
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	ev := startWorker(t, e.newStore(t, nil), "mux-worker", mux, nil)
	want := map[string]string{}
	for _, typ := range []string{"resize", "transcode", "resize"} {
		task := e.submitWith(t, s3task.CreateParams{Name: typ, Type: typ})
		want[task.ID] = typ
	}
	for range want {
		await(t, ev.completed, "a task to complete")
	}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff(want, ran); diff != "" {
		t.Errorf("handler per task (-want +got):\n%s", diff)
	}
}

func TestWorkerShutdownReleasesTask(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	handlerA := newUntilDone(false)
	evA := startWorker(t, e.newStore(t, nil), "worker-a", handlerA, func(o *s3task.WorkerOptions) { o.ShutdownTimeout = 50 * time.Millisecond })
	task := e.submit(t, "interrupted")
	claimed := await(t, evA.claimed, "A's claim")

	evA.stop()
	// Run returned, so the handler's end and the release are behind us.
	if cause := await(t, handlerA.causes, "the handler's cancellation"); !errors.Is(cause, s3task.ErrWorkerStopping) {
		t.Errorf("context.Cause = %v, want ErrWorkerStopping", cause)
	}
	released := await(t, evA.released, "OnRelease")
	expectNoHook(t, evA.failed, "OnFail on shutdown")
	got := e.get(t, task.ID)
	if diff := cmp.Diff(released, got); diff != "" {
		t.Errorf("OnRelease record differs from the stored one (-hook +stored):\n%s", diff)
	}
	if got.Status != s3task.StatusQueued || got.MaxAttempts != task.MaxAttempts || got.Attempt != 1 || got.ReleasedAttempts != 1 || got.AttemptsUsed() != 0 || got.WorkerID != "" {
		t.Errorf("after shutdown: status %s, max_attempts %d, attempt %d, released %d, worker %q; want queued, %d, 1, 1, none",
			got.Status, got.MaxAttempts, got.Attempt, got.ReleasedAttempts, got.WorkerID, task.MaxAttempts)
	}
	e.expectMarked(t, got) // or no worker would find it
	if got.DueAt.Before(claimed.UpdatedAt) || got.DueAt.After(got.UpdatedAt) {
		t.Errorf("released task: due_at %s, want the release's time, from the claim at %s to the release's write at %s", got.DueAt, claimed.UpdatedAt, got.UpdatedAt)
	}

	evB := startWorker(t, e.newStore(t, nil), "worker-b", succeed, nil)
	done := await(t, evB.completed, "B to complete the released task")
	if done.ID != task.ID || done.Attempt != 2 || done.WorkerID != "worker-b" {
		t.Errorf("B completed %s attempt %d as %q, want %s attempt 2", done.ID, done.Attempt, done.WorkerID, task.ID)
	}
}

func TestWorkerShutdownLetsHandlerFinish(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	release := newHandlerGate(t)
	started := make(chan struct{})
	ctxErrAtRelease := make(chan error, 1)
	handler := s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		close(started)
		err := release.wait(ctx)
		ctxErrAtRelease <- err
		if err != nil {
			return err
		}
		return job.WriteOutput(ctx, strings.NewReader("finished during shutdown"))
	})
	w, ev := newWorker(t, e.newStore(t, nil), "graceful-worker", handler, func(o *s3task.WorkerOptions) { o.ShutdownTimeout = testWait })
	cancel, wait := runItself(t, w)
	task := e.submit(t, "nearly done")
	await(t, started, "the handler to start")

	cancel() // shutdown begins; the handler is still running
	release.open()
	if err := wait(); err != nil {
		t.Errorf("Run: %v", err)
	}

	if err := await(t, ctxErrAtRelease, "the handler to be released"); err != nil {
		t.Errorf("handler context ended during the shutdown timeout: %v", err)
	}
	done := await(t, ev.completed, "OnComplete")
	expectNoHook(t, ev.released, "OnRelease")
	got := e.get(t, task.ID)
	if got.Status != s3task.StatusCompleted || got.Attempt != 1 || got.MaxAttempts != task.MaxAttempts {
		t.Errorf("status %s, attempt %d, max_attempts %d; want completed, 1, %d", got.Status, got.Attempt, got.MaxAttempts, task.MaxAttempts)
	}
	if done.ID != task.ID || e.output(t, task.ID) != "finished during shutdown" {
		t.Errorf("completed %s with output %q", done.ID, e.output(t, task.ID))
	}
}

// listTimes records when the head of the marker folder was listed. The
// look for markers named as earlier versions did (start-after
// <prefix>active/3), which a worker makes at its first poll and then once
// per ReconcileInterval, is counted apart in legacy.
type listTimes struct {
	mu     sync.Mutex
	times  []time.Time
	legacy int
}

func (l *listTimes) wrap(next http.RoundTripper) http.RoundTripper {
	return s3tasktest.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		if s3test.Op(r) == "LIST" {
			l.mu.Lock()
			if strings.HasSuffix(r.URL.Query().Get("start-after"), "active/3") {
				l.legacy++
			} else {
				l.times = append(l.times, time.Now())
			}
			l.mu.Unlock()
		}
		return next.RoundTrip(r)
	})
}

func (l *listTimes) legacyLooks() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.legacy
}

func (l *listTimes) get() []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Time(nil), l.times...)
}

// gaps returns the time between each two listings in a row.
func (l *listTimes) gaps() []time.Duration {
	times := l.get()
	var d []time.Duration
	for i := 1; i < len(times); i++ {
		d = append(d, times[i].Sub(times[i-1]))
	}
	return d
}

// TestWorkerIdleCost checks what an idle worker costs: one conditional GET
// of the wake object per PollInterval and a LIST only every MaxPollInterval.
// Only lower bounds of gaps are checked: a timer never fires early, however
// loaded the machine is.
func TestWorkerIdleCost(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	var reqs s3test.Counter
	var lists listTimes
	ev := startWorker(t, e.newStore(t, nil, reqs.Wrap, lists.wrap), "idle-worker", succeed, func(o *s3task.WorkerOptions) {
		o.PollInterval, o.MaxPollInterval = 10*time.Millisecond, 80*time.Millisecond
		o.PresenceInterval = -1 // its one PUT a minute is counted in TestPresenceCost
	})

	const polls = 4
	waitUntil(t, fmt.Sprintf("%d idle listings", polls), func() bool { return len(lists.get()) >= polls })
	counts := reqs.Counts()
	if counts["LIST"] < polls || counts["GET"] == 0 || len(counts) != 2 {
		t.Errorf("idle worker requests: %s; want GETs of the wake object and LISTs only", reqs.String())
	}
	if n := lists.legacyLooks(); n != 0 {
		t.Errorf("%d looks for markers of earlier versions apart, want none: every poll's listing reaches the end of the folder, where they sort, and finds none", n)
	}
	gaps := lists.gaps()
	for i, gap := range gaps {
		if gap < ev.opts.MaxPollInterval {
			t.Errorf("gap before idle listing %d = %s, want at least MaxPollInterval %s", i+1, gap, ev.opts.MaxPollInterval)
		}
	}
	t.Logf("idle: requests %s; gaps between listings: %v", reqs.String(), gaps)

	task := e.submit(t, "wake up")
	awaitTask(t, ev.completed, task.ID, "the idle worker to pick up new work")
}

// TestWorkerWakesOnSubmit shows that new work is found through the wake
// object, not the safety listing: with MaxPollInterval an hour, a worker that
// has listed once still picks up tasks submitted and retried after that.
func TestWorkerWakesOnSubmit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	var lists listTimes
	fail := make(chan bool, 2)
	fail <- true
	handler := s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		select {
		case <-fail:
			return s3task.Permanent(errors.New("first run fails for good"))
		default:
			return nil
		}
	})
	ev := startWorker(t, e.newStore(t, nil, lists.wrap), "wake-worker", handler, func(o *s3task.WorkerOptions) { o.MaxPollInterval = time.Hour })
	waitUntil(t, "the first listing", func() bool { return len(lists.get()) >= 1 })

	task := e.submit(t, "woken")
	if f := await(t, ev.failed, "the submitted task to run"); f.task.ID != task.ID || !f.task.Terminal() {
		t.Fatalf("failure of %s (terminal %v), want %s for good", f.task.ID, f.task.Terminal(), task.ID)
	}
	if _, err := e.store.Retry(e.ctx, task.ID); err != nil {
		t.Fatal(err)
	}
	awaitTask(t, ev.completed, task.ID, "the retried task to run")
	if n := len(lists.get()); n > 3 {
		t.Errorf("%d listings for two wake-ups, want at most 3 (the first and one per wake)", n)
	}
}

func TestNewWorkerValidatesOptions(t *testing.T) {
	t.Parallel()
	store, ok := newEnv(t, nil).store, succeed

	optionTests := []struct {
		name   string
		opts   s3task.WorkerOptions
		fields []string // what the message must name
	}{
		{"HeartbeatInterval over a third of LeaseDuration", s3task.WorkerOptions{LeaseDuration: 30 * time.Second, HeartbeatInterval: 10*time.Second + time.Millisecond}, []string{"HeartbeatInterval", "LeaseDuration"}},
		{"HeartbeatInterval over a third of the default LeaseDuration", s3task.WorkerOptions{HeartbeatInterval: s3task.DefaultLeaseDuration/3 + time.Second}, []string{"HeartbeatInterval", "LeaseDuration"}},
		{"negative PollInterval", s3task.WorkerOptions{PollInterval: -time.Second}, []string{"PollInterval"}},
		{"negative MaxPollInterval", s3task.WorkerOptions{MaxPollInterval: -time.Second}, []string{"MaxPollInterval"}},
		{"negative LeaseDuration", s3task.WorkerOptions{LeaseDuration: -time.Second}, []string{"LeaseDuration"}},
		{"negative HeartbeatInterval", s3task.WorkerOptions{HeartbeatInterval: -time.Second}, []string{"HeartbeatInterval"}},
		{"negative ClockMargin", s3task.WorkerOptions{ClockMargin: -time.Second}, []string{"ClockMargin"}},
		{"negative ShutdownTimeout", s3task.WorkerOptions{ShutdownTimeout: -time.Second}, []string{"ShutdownTimeout"}},
		{"negative Concurrency", s3task.WorkerOptions{Concurrency: -1}, []string{"Concurrency"}},
		{"MaxPollInterval below PollInterval", s3task.WorkerOptions{PollInterval: time.Second, MaxPollInterval: 500 * time.Millisecond}, []string{"MaxPollInterval", "PollInterval"}},
		{"ClockMargin equal to LeaseDuration", s3task.WorkerOptions{LeaseDuration: 9 * time.Second, ClockMargin: 9 * time.Second}, []string{"ClockMargin", "LeaseDuration"}},
		{"ClockMargin over LeaseDuration", s3task.WorkerOptions{LeaseDuration: 9 * time.Second, ClockMargin: 10 * time.Second}, []string{"ClockMargin", "LeaseDuration"}},
		{"ID over 128 bytes", s3task.WorkerOptions{ID: strings.Repeat("w", 129)}, []string{"ID"}},
	}
	for _, tt := range optionTests {
		t.Run(tt.name, func(t *testing.T) {
			opts := tt.opts
			_, err := s3task.NewWorker(store, ok, &opts)
			if !errors.Is(err, s3task.ErrInvalidOptions) {
				t.Fatalf("NewWorker = %v, want an error wrapping ErrInvalidOptions", err)
			}
			for _, f := range tt.fields {
				if !strings.Contains(err.Error(), f) {
					t.Errorf("error %q does not name %s", err, f)
				}
			}
		})
	}

	argTests := []struct {
		name    string
		store   *s3task.Store
		handler s3task.Handler
	}{
		{"nil store", nil, ok},
		{"nil handler", store, nil},
		// A HandlerFunc holding a nil function is a nil handler too. If it
		// were accepted, every attempt of every task would fail with a
		// nil-call panic.
		{"nil HandlerFunc", store, s3task.HandlerFunc(nil)},
	}
	for _, tt := range argTests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := s3task.NewWorker(tt.store, tt.handler, nil); !errors.Is(err, s3task.ErrInvalidOptions) {
				t.Errorf("NewWorker = %v, want an error wrapping ErrInvalidOptions", err)
			}
		})
	}

	t.Run("the caller's options are not changed", func(t *testing.T) {
		opts := s3task.WorkerOptions{LeaseDuration: 30 * time.Second, HeartbeatInterval: 10 * time.Second, ClockMargin: 29 * time.Second}
		before := opts
		if _, err := s3task.NewWorker(store, ok, &opts); err != nil {
			t.Fatalf("NewWorker: %v", err)
		}
		if diff := cmp.Diff(before, opts); diff != "" { // no func is set: they compare as nil
			t.Errorf("NewWorker changed the caller's options (-before +after):\n%s", diff)
		}
	})
	t.Run("nil options mean defaults", func(t *testing.T) {
		w, err := s3task.NewWorker(store, ok, nil)
		if err != nil {
			t.Fatalf("NewWorker(nil options): %v", err)
		}
		if w.ID() == "" {
			t.Errorf("worker has no default ID")
		}
	})
}

func TestWorkerRunTwice(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	var reqs s3test.Counter
	w, ev := newWorker(t, e.newStore(t, nil, reqs.Wrap), "twice", succeed, nil)
	cancel, wait := runItself(t, w)
	// Once the first Run polls, it is running.
	waitUntil(t, "the first Run polls", func() bool { return reqs.Counts()["LIST"] > 0 })

	second := make(chan error, 1)
	go func() { second <- w.Run(context.Background()) }()
	if err := await(t, second, "the second Run to return"); err == nil {
		t.Fatal("a second concurrent Run returned nil, want an error")
	} else if !strings.Contains(err.Error(), "running") {
		t.Errorf("second Run error %q does not say the worker is running", err)
	}

	// The refused Run did not disturb the first one.
	task := e.submit(t, "still served")
	awaitTask(t, ev.completed, task.ID, "the first Run to complete a task")

	// Once the first Run is over, the worker can run again.
	cancel()
	if err := wait(); err != nil {
		t.Errorf("the first Run returned %v", err)
	}
	ended, end := context.WithCancel(context.Background())
	end()
	if err := w.Run(ended); err != nil {
		t.Errorf("Run after the first one returned = %v, want nil", err)
	}
}

// TestWorkerSurvivesBrokenRecords puts broken entries next to a valid task:
// a corrupt status.json and one with a newer schema behind markers, a marker
// that is not a task ID and a marker whose task has no record. The worker must
// go on, finish the valid task, leave the broken records byte for byte as they
// were and drop the marker that points at nothing.
func TestWorkerSurvivesBrokenRecords(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)

	corruptID, futureID, orphanID := s3task.NewID(), s3task.NewID(), s3task.NewID()
	corrupt := []byte(`{"schema_version": 1, "task_id": "` + corruptID + `", "status": "queu`)
	future := []byte(`{"schema_version":2,"task_id":"` + futureID + `","status":"queued","attempt_id":0,"max_attempts":3,` +
		`"input_object_path":"` + e.store.Prefix() + futureID + `/input.csv","priority":"high","created_at":"2030-01-01T00:00:00Z",` +
		`"updated_at":"2030-01-01T00:00:00Z","revision":"f00d"}`)
	e.put(t, e.recordKey(corruptID), corrupt)
	e.put(t, e.recordKey(futureID), future)
	for _, id := range []string{corruptID, futureID, orphanID, "not-an-id"} {
		e.put(t, e.markerKey(id), nil)
	}

	ev := startWorker(t, e.newStore(t, nil), "robust-worker", succeed, nil)
	valid := e.submit(t, "valid")
	awaitTask(t, ev.completed, valid.ID, "the valid task to complete")
	waitUntil(t, "the marker without a record is removed", func() bool { return !e.hasMarker(orphanID) })

	// The worker keeps going after all that.
	again := e.submit(t, "valid again")
	awaitTask(t, ev.completed, again.ID, "a second valid task to complete")

	for _, r := range []struct {
		id   string
		want []byte
	}{{corruptID, corrupt}, {futureID, future}} {
		got, ok := e.object(e.recordKey(r.id))
		if !ok || string(got) != string(r.want) {
			t.Errorf("record %s changed:\n got %q (exists %v)\nwant %q", r.id, got, ok, r.want)
		}
	}
	if _, err := e.store.Get(e.ctx, futureID); !errors.Is(err, s3task.ErrUnsupportedSchema) {
		t.Errorf("Get(future record) = %v, want ErrUnsupportedSchema", err)
	}
	for n := len(ev.claimed); n > 0; n-- {
		if c := <-ev.claimed; c.ID != valid.ID && c.ID != again.ID {
			t.Errorf("worker claimed %s, which has no usable record", c.ID)
		}
	}
	expectNoHook(t, ev.failed, "OnFail")
}

// TestWorkerMarkerDropRacingRetry replays a race between a worker that
// settles a finally failed task and an operator's Retry of it. Retry writes
// the marker of the queued task first, then the record. Here the worker
// lists that marker and reads the record while it still says failed
// (Retry's record write is held back). It must leave the marker alone: the
// marker is newer than the record, so it belongs to a change under way, and
// it has a key of its own, so the worker's delete of the failed phase's
// marker cannot hit it. Once Retry's record lands, the task is queued with
// its marker, and it runs again.
func TestWorkerMarkerDropRacingRetry(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t, nil)
		var wlog recorder
		handler := s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
			if job.Task.Attempt == 1 {
				return s3task.Permanent(errors.New("bad row"))
			}
			return nil
		})
		ev := startWorker(t, e.newStore(t, nil, wlog.wrap), "dropping-worker", handler, nil)
		task := e.submit(t, "retried by an operator")
		if f := await(t, ev.failed, "the permanent failure"); !f.task.Terminal() {
			t.Fatalf("failure is not final: %+v", f.task)
		}
		waitUntil(t, "the failed task's marker goes", func() bool { return !e.hasMarker(task.ID) })
		// The operator retries a while after the failure. (In the bubble,
		// time moves only when every goroutine waits: a Retry at the very
		// instant of the claim would name its marker after the failed
		// record's own due time, and so share its key.)
		time.Sleep(time.Second)

		recordKey := e.recordKey(task.ID)
		hold := s3test.NewHold(t, func(r *http.Request) bool { return isPut(r, recordKey) })
		operator := e.newStore(t, nil, hold.Wrap)
		retried := make(chan error, 1)
		go func() {
			_, err := operator.Retry(e.ctx, task.ID)
			retried <- err
		}()
		await(t, hold.Arrived(), "Retry to write its marker and reach its record write")
		retryMarker := e.markerKey(task.ID) // computed now: the marker Retry just wrote
		if !e.hasMarker(task.ID) {
			t.Fatalf("Retry reached its record write without a marker for task %s", task.ID)
		}

		// Wait for the worker to visit the new marker, reading the record, still
		// failed, twice over.
		reads := len(wlog.answers("GET " + recordKey))
		waitUntil(t, "the worker visits the new marker of the failed task twice", func() bool {
			return len(wlog.answers("GET "+recordKey)) >= reads+2
		})
		if wlog.index("DELETE "+retryMarker) >= 0 {
			t.Errorf("the worker deleted the marker Retry wrote (%s) while Retry's record write was under way", retryMarker)
		}
		if _, ok := e.object(retryMarker); !ok {
			t.Fatalf("marker %s written by Retry is gone before its record landed", retryMarker)
		}
		hold.Release()
		if err := await(t, retried, "Retry to return"); err != nil {
			t.Fatalf("Retry: %v", err)
		}

		got := e.get(t, task.ID)
		if got.Status != s3task.StatusQueued && got.Attempt < 2 {
			t.Fatalf("after Retry: status %s attempt %d, want queued (or claimed again)", got.Status, got.Attempt)
		}
		if got.Status == s3task.StatusQueued {
			e.expectMarkedNow(t, task.ID) // the worker may be claiming it: judge a record and markers that agree
		}
		if done := await(t, ev.completed, "the retried task to complete"); done.ID != task.ID || done.Attempt != 2 {
			t.Errorf("completed %s attempt %d, want %s attempt 2", done.ID, done.Attempt, task.ID)
		}
		waitUntil(t, "the completed task's marker goes", func() bool { return !e.hasMarker(task.ID) })
	})
}

// TestWorkerFastClockAfterCheckBackend starts a worker the way the package
// documentation suggests, NewStore, CheckBackend, then the worker, on a
// machine whose clock is ten minutes fast. It must judge leases by the
// server's clock all the same: not take over a task whose holder is alive,
// and not write leases ten minutes too long.
func TestWorkerFastClockAfterCheckBackend(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	releaseA := newHandlerGate(t)
	evA := startWorker(t, e.newStore(t, nil), "worker-a", releaseA.handler(), func(o *s3task.WorkerOptions) {
		// A renews rarely, so no renewal changes the record between the fast
		// worker's read and its claim: if it judged the lease expired, its
		// claim would land.
		o.HeartbeatInterval = workerLease / 3
	})
	e.submit(t, "held by A")
	claimA := await(t, evA.claimed, "A's claim")

	var reqsF s3test.Counter
	fast := e.newStore(t, &s3task.StoreOptions{Clock: func() time.Time { return time.Now().Add(10 * time.Minute) }}, reqsF.Wrap)
	if _, err := fast.CheckBackend(e.ctx); err != nil {
		t.Fatalf("CheckBackend: %v", err)
	}
	evF := startWorker(t, fast, "fast-worker", succeed, nil)
	gets := reqsF.Counts()["GET"]
	waitUntil(t, "the fast worker looked at A's task", func() bool {
		return reqsF.Counts()["GET"] >= gets+3 || len(evF.claimed) > 0
	})
	select {
	case c := <-evF.claimed:
		t.Errorf("the fast worker took over %s (attempt %d) from A, whose lease was live: it ended %s after the server's now",
			c.ID, c.Attempt, claimA.LeaseExpiresAt.Sub(e.srv.Now()).Round(time.Second))
	default:
	}
	releaseA.open()
	evA.stop()

	task := e.submit(t, "for the fast worker")
	var claim *s3task.Task
	for claim == nil || claim.ID != task.ID {
		claim = await(t, evF.claimed, "the fast worker's claim")
	}
	if d := claim.LeaseExpiresAt.Sub(e.srv.Now()); d < workerLease-5*time.Second || d > workerLease+5*time.Second {
		t.Errorf("the fast worker's lease ends %s after the server's now, want about LeaseDuration (%s)", d.Round(time.Second), workerLease)
	}
}

// TestWorkerCutOffStopsHandlerAtLeaseEnd cuts a worker off from S3 while its
// handler runs. Its renewals fail, and once its lease has run out it must
// cancel the handler with ErrLeaseLost on its own, and write nothing more
// for the task even when S3 is reachable again.
func TestWorkerCutOffStopsHandlerAtLeaseEnd(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t, nil)
		var cut s3test.Cutter
		handler := newUntilDone(true) // would complete the task if anything still reached it
		ev := startWorker(t, e.newStore(t, nil, cut.Wrap), "cut-worker", handler, func(o *s3task.WorkerOptions) {
			// A short lease: this test waits for it to run out (in the
			// bubble's time).
			o.LeaseDuration, o.HeartbeatInterval, o.ClockMargin = 1500*time.Millisecond, 500*time.Millisecond, time.Second
		})
		task := e.submit(t, "cut off")
		await(t, handler.started, "the handler to start")

		cut.Cut()
		before := e.get(t, task.ID) // the last record A wrote
		if before.Status != s3task.StatusRunning || before.WorkerID != "cut-worker" {
			t.Fatalf("status %s, worker %q; want running by cut-worker", before.Status, before.WorkerID)
		}
		cause := await(t, handler.causes, "the handler to be cancelled once the lease ran out")
		t.Logf("handler cancelled %s after the lease's end by the server's clock", e.srv.Now().Sub(before.LeaseExpiresAt).Round(time.Millisecond))
		if !errors.Is(cause, s3task.ErrLeaseLost) {
			t.Errorf("context.Cause = %v, want ErrLeaseLost", cause)
		}
		lost := await(t, ev.lost, "OnLeaseLost")
		if lost.id != task.ID || !errors.Is(lost.cause, s3task.ErrLeaseLost) {
			t.Errorf("OnLeaseLost(%s, %v), want (%s, ErrLeaseLost)", lost.id, lost.cause, task.ID)
		}

		cut.Restore()
		ev.stop()
		if got := e.get(t, task.ID); !cmp.Equal(before, got) {
			t.Errorf("the worker wrote after losing its lease (-before +after):\n%s", cmp.Diff(before, got))
		}
		ev.expectNone(t, "OnComplete", "OnRelease")
	})
}

// TestWorkerRefusesUnverifiedInput covers Job.OpenInput's guards: an input
// replaced after Submit verified it, one deleted since, and one over the size
// limit all fail the task for good, whatever attempts are left.
func TestWorkerRefusesUnverifiedInput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		tamper  func(t *testing.T, e *env, task *s3task.Task)
		opts    *s3task.StoreOptions // the worker's store
		wantErr error
		wantMsg string // in last_error
	}{
		{
			name: "replaced after submit",
			tamper: func(t *testing.T, e *env, task *s3task.Task) {
				e.put(t, task.InputPath, []byte("other,bytes\n"))
			},
			wantErr: s3task.ErrInputChanged,
			wantMsg: "input changed after submit",
		},
		{
			name: "deleted after submit",
			tamper: func(t *testing.T, e *env, task *s3task.Task) {
				e.del(t, task.InputPath)
			},
			wantErr: s3task.ErrInputMissing,
			wantMsg: "input missing",
		},
		{
			name:    "over the worker's size limit",
			tamper:  func(*testing.T, *env, *s3task.Task) {},
			opts:    &s3task.StoreOptions{MaxInputSize: 4},
			wantErr: s3task.ErrInputTooLarge,
			wantMsg: fmt.Sprintf("is %d bytes, over the limit of 4", len(testInput)),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, nil)
			task := e.submit(t, tt.name)
			tt.tamper(t, e, task)

			opened := make(chan struct{}, 1)
			handler := s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
				in, err := job.OpenInput(ctx)
				if err == nil {
					in.Close()
					opened <- struct{}{}
				}
				return err
			})
			ev := startWorker(t, e.newStore(t, tt.opts), "input-guard", handler, nil)

			f := await(t, ev.failed, "the attempt to fail")
			if !errors.Is(f.err, tt.wantErr) || !s3task.IsPermanent(f.err) {
				t.Errorf("handler error %v: want a permanent %v", f.err, tt.wantErr)
			}
			got := e.get(t, task.ID)
			if got.Status != s3task.StatusFailed || !got.Terminal() || got.Attempt != 1 {
				t.Errorf("record: %s at attempt %d, terminal %v; want failed for good after attempt 1", got.Status, got.Attempt, got.Terminal())
			}
			if !strings.Contains(got.LastError, tt.wantMsg) {
				t.Errorf("last_error %q does not say %q", got.LastError, tt.wantMsg)
			}
			expectNoHook(t, opened, "input opened")
		})
	}
}

func TestDefaultBackoff(t *testing.T) {
	t.Parallel()
	tests := []struct {
		attempt  int
		min, max time.Duration
	}{
		{1, 5 * time.Second, 10 * time.Second},
		{2, 10 * time.Second, 20 * time.Second},
		{4, 40 * time.Second, 80 * time.Second},
		{7, 5 * time.Minute, 10 * time.Minute},
		{50, 5 * time.Minute, 10 * time.Minute}, // capped, no overflow
	}
	for _, tt := range tests {
		distinct := map[time.Duration]bool{}
		for range 200 {
			d := s3task.DefaultBackoff(tt.attempt)
			if d < tt.min || d > tt.max {
				t.Fatalf("DefaultBackoff(%d) = %s, want within [%s, %s]", tt.attempt, d, tt.min, tt.max)
			}
			distinct[d] = true
		}
		if len(distinct) < 100 {
			t.Errorf("DefaultBackoff(%d) gave only %d distinct waits in 200 calls: no jitter?", tt.attempt, len(distinct))
		}
	}
}

// TestWorkerOutputs covers the ways a handler writes its output: a reader
// that cannot seek (spooled to a file first), CreateOutput closed, and
// CreateOutput discarded or left open (nothing uploaded).
func TestWorkerOutputs(t *testing.T) {
	t.Parallel()
	// created writes text to an output made with CreateOutput, then ends
	// as end says.
	created := func(text string, end func(out *s3task.Output) error) func(ctx context.Context, job *s3task.Job) error {
		return func(ctx context.Context, job *s3task.Job) error {
			out, err := job.CreateOutput(ctx)
			if err != nil {
				return err
			}
			io.WriteString(out, text)
			return end(out)
		}
	}
	tests := []struct {
		name    string
		write   func(ctx context.Context, job *s3task.Job) error
		want    string
		wantOut bool
	}{
		{
			name: "reader that cannot seek",
			write: func(ctx context.Context, job *s3task.Job) error {
				return job.WriteOutput(ctx, io.MultiReader(strings.NewReader("hello, "), strings.NewReader("world\n")))
			},
			want: "hello, world\n", wantOut: true,
		},
		{name: "CreateOutput closed", write: created("row 1\n", (*s3task.Output).Close), want: "row 1\n", wantOut: true},
		{name: "CreateOutput discarded", write: created("half a file", func(out *s3task.Output) error {
			out.Discard()
			if err := out.Close(); err == nil {
				return errors.New("Close after Discard succeeded")
			}
			return nil
		})},
		{name: "CreateOutput left open", write: created("forgotten", func(*s3task.Output) error { return nil })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, nil)
			ev := startWorker(t, e.newStore(t, nil), "output-writer", s3task.HandlerFunc(tt.write), nil)
			task := e.submit(t, tt.name)
			done := await(t, ev.completed, "the task to complete")
			body, ok := e.object(e.outputKey(t, task.ID, 1))
			if ok != tt.wantOut || string(body) != tt.want {
				t.Errorf("output object: exists %v, %q; want exists %v, %q", ok, body, tt.wantOut, tt.want)
			}
			if wantPath := map[bool]string{true: e.outputKey(t, task.ID, 1)}[tt.wantOut]; done.OutputPath != wantPath {
				t.Errorf("output_object_path %q, want %q", done.OutputPath, wantPath)
			}
		})
	}
}

// TestWorkerWakesForItsOwnRetry: a retry this worker scheduled is picked up
// when it falls due, although no wake object announces it and the safety
// listing is an hour away.
func TestWorkerWakesForItsOwnRetry(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	var runs atomic.Int32
	handler := s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		if runs.Add(1) == 1 {
			return s3task.RetryAfter(errors.New("busy upstream"), 10*time.Minute)
		}
		return nil
	})
	ev := startWorker(t, e.newStore(t, nil), "self-retry", handler, func(o *s3task.WorkerOptions) { o.MaxPollInterval = time.Hour })
	task := e.submit(t, "retry me later")
	f := await(t, ev.failed, "the first attempt to fail")
	if f.task.Terminal() || f.task.RetryAt.IsZero() {
		t.Fatalf("first failure: terminal %v, retry_at %v; want a retry scheduled", f.task.Terminal(), f.task.RetryAt)
	}
	expectNoHook(t, ev.completed, "completion before the retry is due")
	if !f.task.DueAt.Equal(f.task.RetryAt) {
		t.Errorf("failed task awaiting its retry: due_at %s, want retry_at %s", f.task.DueAt, f.task.RetryAt)
	}
	if key, want := e.markerKey(task.ID), e.store.MarkerKey(f.task); key != want {
		t.Errorf("marker of the failed task %s, want %s, named after its retry", key, want)
	}
	e.srv.Advance(10*time.Minute + time.Second)
	done := await(t, ev.completed, "the retry once due")
	if done.ID != task.ID || done.Attempt != 2 {
		t.Errorf("completed %s at attempt %d, want %s at attempt 2", done.ID, done.Attempt, task.ID)
	}
}

// TestWorkerPicksOldestFirst: a worker takes the tasks due first, choosing
// at random among the 16 at the head of the queue so that workers polling
// together spread out. With one slot, every claim must be of one of the 16
// tasks due first among those still queued: the order of their markers,
// named after the due time, is the order of the queue.
func TestWorkerPicksOldestFirst(t *testing.T) {
	t.Parallel()
	const spread = 16
	for _, n := range []int{3, 40} {
		t.Run(fmt.Sprintf("%d tasks", n), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, nil)
			queued := map[string]string{} // marker key -> task ID
			for i := range n {
				task := e.submit(t, fmt.Sprintf("task %d", i))
				if task.DueAt.IsZero() {
					t.Fatalf("submitted task %s has no due_at", task.ID)
				}
				queued[e.store.MarkerKey(task)] = task.ID
			}

			ev := startWorker(t, e.newStore(t, nil), "oldest-first", succeed, func(o *s3task.WorkerOptions) { o.Concurrency = 1 })
			seen := map[string]bool{}
			for i := range n {
				claimed := await(t, ev.claimed, fmt.Sprintf("claim %d of %d", i+1, n))
				if seen[claimed.ID] {
					t.Fatalf("task %s claimed twice", claimed.ID)
				}
				seen[claimed.ID] = true
				keys := slices.Sorted(maps.Keys(queued))
				rank := slices.IndexFunc(keys, func(k string) bool { return queued[k] == claimed.ID })
				if rank < 0 {
					t.Fatalf("claim %d: task %s was not queued", i+1, claimed.ID)
				}
				if rank >= spread {
					t.Errorf("claim %d: task %s was %d in the queue of %d, want one of the %d due first", i+1, claimed.ID, rank+1, len(keys), spread)
				}
				delete(queued, keys[rank])
			}
			for range n {
				await(t, ev.completed, "a task to complete")
			}
		})
	}
}

// TestWorkerWaitsForRunAt: a task submitted with RunAt a little ahead is
// scheduled: its marker is named after RunAt, no worker claims it before
// then, and an idle worker claims it soon after, waking for the marker's
// time without listing in between (one LIST for the Submit's wake object,
// one when the marker falls due). The test server's clock is the bubble's.
func TestWorkerWaitsForRunAt(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t, nil)
		var reqs s3test.Counter
		var lists listTimes
		claimedAt := make(chan time.Time, 1)
		ev := startWorker(t, e.newStore(t, nil, reqs.Wrap, lists.wrap), "scheduled", succeed, func(o *s3task.WorkerOptions) {
			onClaim := o.Hooks.OnClaim
			o.Hooks.OnClaim = func(t *s3task.Task) { offer(claimedAt, time.Now()); onClaim(t) }
			o.PollInterval, o.MaxPollInterval = 50*time.Millisecond, time.Hour // no safety listing
			o.ReconcileInterval = -1                                           // nor a reconcile's
		})
		await(t, ev.polled, "the first listing")

		const ahead = 1500 * time.Millisecond
		runAt := e.srv.Now().Add(ahead).Truncate(time.Millisecond)
		task := e.created(t, s3task.CreateParams{Name: "later", RunAt: runAt})
		listsBefore := len(lists.get())
		submitted, err := e.store.Submit(e.ctx, task.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !submitted.RunAt.Equal(runAt) || !submitted.DueAt.Equal(runAt) || !submitted.Scheduled(e.srv.Now()) {
			t.Errorf("submitted: run_at %s, due_at %s, scheduled %v; want both %s, scheduled", submitted.RunAt, submitted.DueAt, submitted.Scheduled(e.srv.Now()), runAt)
		}
		if key, want := e.markerKey(task.ID), e.store.MarkerKey(submitted); key != want {
			t.Errorf("marker %s, want %s", key, want)
		}

		claimed := await(t, ev.claimed, "the scheduled task's claim")
		at := await(t, claimedAt, "the claim's time")
		if at.Before(runAt) {
			t.Errorf("claimed %s before run_at", runAt.Sub(at))
		}
		if start := claimed.LeaseExpiresAt.Add(-workerLease); start.Before(runAt) {
			t.Errorf("claim written at %s by the server's clock, before run_at %s", start, runAt)
		}
		if late := at.Sub(runAt); late > 5*time.Second {
			t.Errorf("claimed %s after run_at, want soon after", late)
		}
		if n := len(lists.get()) - listsBefore; n > 2 {
			t.Errorf("%d LISTs between Submit and the claim, want at most 2 (the wake object's, then the marker's time): %s", n, reqs.String())
		}
		await(t, ev.completed, "the scheduled task to complete")
	})
}

// TestWorkerWake: an idle worker with a long PollInterval lists at once when
// woken, and so starts a task submitted through another Store (whose wake
// object it would only check a PollInterval later).
func TestWorkerWake(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t, nil)
		const poll = 10 * time.Second
		w, ev := newWorker(t, e.newStore(t, nil), "wakeable", succeed, func(o *s3task.WorkerOptions) { o.PollInterval, o.MaxPollInterval = poll, time.Hour })
		w.Wake() // not running: nothing happens, nothing blocks
		runItself(t, w)
		await(t, ev.polled, "the first listing")

		begin := time.Now()
		w.Wake()
		if p := awaitWithin(t, ev.polled, 5*time.Second, "a listing after Wake"); p.Markers != 0 || p.Started != 0 {
			t.Errorf("listing after Wake: %+v, want an empty one", p)
		}
		task := e.submit(t, "announced by other means")
		w.Wake()
		claimed := awaitWithin(t, ev.claimed, 5*time.Second, "the claim after Wake")
		if claimed.ID != task.ID {
			t.Errorf("claimed %s, want %s", claimed.ID, task.ID)
		}
		t.Logf("woken twice and claimed in %s (PollInterval %s)", time.Since(begin), poll)
	})
}

// TestWorkerStartsLocalSubmitAtOnce: a Submit through the worker's own
// Store kicks it, so the task starts without waiting for the worker's next
// check of the wake object, a PollInterval away.
func TestWorkerStartsLocalSubmitAtOnce(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t, nil)
		store := e.newStore(t, nil)
		ev := startWorker(t, store, "local", succeed, func(o *s3task.WorkerOptions) { o.PollInterval, o.MaxPollInterval = 10*time.Second, time.Hour })
		await(t, ev.polled, "the first listing")

		task := e.created(t, s3task.CreateParams{Name: "local"})
		begin := time.Now()
		if _, err := store.Submit(e.ctx, task.ID); err != nil {
			t.Fatal(err)
		}
		claimed := awaitWithin(t, ev.claimed, 5*time.Second, "the claim of the local Submit")
		if claimed.ID != task.ID {
			t.Errorf("claimed %s, want %s", claimed.ID, task.ID)
		}
		t.Logf("claimed %s after Submit (PollInterval %s)", time.Since(begin), ev.opts.PollInterval)
		await(t, ev.completed, "the task to complete")
	})
}

// TestWorkerPicksUpLegacyMarkers: a task queued by an earlier version has
// a record without due_at and its marker at the plain active/<id>, which
// sorts after every marker named after a time. A worker must still start
// it while other markers, not yet due, come first: here that of a task
// running on another worker, whose marker its heartbeats keep ahead of the
// lease's end.
func TestWorkerPicksUpLegacyMarkers(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t, nil)
		release := newHandlerGate(t)
		// The first worker's one slot runs the blocker, so it cannot take the
		// task while the test turns it into one an earlier version left.
		first := startWorker(t, e.newStore(t, nil), "legacy-reader", release.handler(), func(o *s3task.WorkerOptions) { o.Concurrency = 1 })
		blocker := e.submit(t, "blocker")
		awaitTask(t, first.claimed, blocker.ID, "the blocker's claim")

		// A queued task as an earlier version left it: no due_at in the record,
		// the marker at active/<id>.
		task := e.created(t, s3task.CreateParams{Name: "legacy"})
		queued := e.store // submit through a Store the worker does not share
		submitted, err := queued.Submit(e.ctx, task.ID)
		if err != nil {
			t.Fatal(err)
		}
		body, ok := e.object(e.recordKey(task.ID))
		if !ok {
			t.Fatal("no record")
		}
		var rec map[string]any
		if err := json.Unmarshal(body, &rec); err != nil {
			t.Fatal(err)
		}
		delete(rec, "due_at")
		legacy, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		// The legacy marker first, then the record, then the dated marker goes:
		// the task always has a marker.
		legacyKey := e.store.Prefix() + "active/" + task.ID
		e.put(t, legacyKey, nil)
		e.put(t, e.recordKey(task.ID), legacy)
		e.del(t, e.store.MarkerKey(submitted))
		if got := e.get(t, task.ID); !got.DueAt.IsZero() || got.Status != s3task.StatusQueued || e.markerKey(task.ID) != legacyKey {
			t.Fatalf("setup: due_at %s, status %s, marker %s; want none, queued, %s", got.DueAt, got.Status, e.markerKey(task.ID), legacyKey)
		}
		// The wake object tells the worker to look; its safety listing comes
		// every MaxPollInterval anyway.
		if _, err := queued.Submit(e.ctx, task.ID); err != nil {
			t.Fatal(err)
		}
		// A worker looks for such markers when it starts (and once per
		// ReconcileInterval): one started now finds it while the blocker's
		// marker stands in the way of the first.
		second := startWorker(t, e.newStore(t, nil), "legacy-reader-2", succeed, nil)
		c := awaitWithin(t, second.claimed, 5*time.Second, "the legacy task's claim while the blocker runs")
		if c.ID != task.ID {
			t.Fatalf("claimed %s, want the legacy task %s", c.ID, task.ID)
		}
		await(t, second.completed, "the legacy task to complete")
		release.open()
		await(t, first.completed, "the blocker to complete")
	})
}

// TestWorkerHeartbeatsMoveMarker: while a task runs longer than its lease,
// its holder moves the task's marker on to the end of the renewed lease,
// about once a lease, so the marker never falls due while the lease is
// live and polls do not visit a running task.
func TestWorkerHeartbeatsMoveMarker(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t, nil)
		release := newHandlerGate(t)
		ev := startWorker(t, e.newStore(t, nil), "mover", release.handler(), func(o *s3task.WorkerOptions) {
			o.LeaseDuration, o.HeartbeatInterval, o.ClockMargin = time.Second, 100*time.Millisecond, 200*time.Millisecond
		})
		task := e.submit(t, "long")
		await(t, ev.claimed, "the claim")

		seen := map[string]bool{}
		for end := time.Now().Add(3500 * time.Millisecond); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			key := e.markerKey(task.ID)
			due := markerDue(t, e.store.Prefix(), key, task.ID)
			if due.IsZero() {
				t.Fatalf("running task's marker %q: want one named after its due time", key)
			}
			if now := e.srv.Now(); !due.After(now) {
				t.Errorf("marker %s fell due at %s while the lease was live (server time %s)", key, due, now)
			}
			seen[key] = true
		}
		if len(seen) < 3 {
			t.Errorf("the marker moved %d times in 3.5 leases, want at least twice: %v", len(seen)-1, seen)
		}
		release.open()
		await(t, ev.completed, "the task to complete")
		e.wantMarkers(t, task.ID) // none left
	})
}

// contention watches every handler run across all workers of a test.
type contention struct {
	mu       sync.Mutex
	running  map[string]int // task ID -> handlers running for it now
	runs     map[string]int // "task/attempt" -> handler runs
	complete map[string]int // task ID -> OnComplete calls, all workers
	overlaps []string       // what was seen running twice at once
	total    int            // completions so far
	allDone  chan struct{}  // closed when total reaches want
	want     int            // completions to wait for
	byWorker map[string]int // worker ID -> tasks completed
}

func newContention(want int) *contention {
	return &contention{
		running: map[string]int{}, runs: map[string]int{}, complete: map[string]int{},
		allDone: make(chan struct{}), want: want, byWorker: map[string]int{},
	}
}

func (c *contention) enter(job *s3task.Job, worker string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id := job.Task.ID
	c.running[id]++
	if c.running[id] > 1 {
		c.overlaps = append(c.overlaps, fmt.Sprintf("%s: %d handlers at once (latest: attempt %d on %s)", id, c.running[id], job.Task.Attempt, worker))
	}
	c.runs[fmt.Sprintf("%s/%d", id, job.Task.Attempt)]++
}

func (c *contention) leave(job *s3task.Job) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running[job.Task.ID]--
}

func (c *contention) completed(t *s3task.Task) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.complete[t.ID]++
	c.byWorker[t.WorkerID]++
	c.total++
	if c.total == c.want {
		close(c.allDone)
	}
}

// TestWorkerContention runs 200 tasks through 8 workers, each with its own
// S3 client and 4 slots, all polling the same markers. No lease expires, so
// every task must run exactly once, never twice at the same time, and end
// completed with its marker gone.
func TestWorkerContention(t *testing.T) {
	t.Parallel()
	const (
		workers     = 8
		concurrency = 4
		tasks       = 200
	)
	producer, e := setup(t, nil) // e.count counts the producer's requests
	c := newContention(tasks)

	// Submit everything first, from several producers at once as web
	// handlers would, so that all workers find all 200 markers together.
	start := time.Now()
	ids := make([]string, tasks)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	errs := make(chan error, tasks)
	for i := range tasks {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			task, err := producer.Create(e.ctx, s3task.CreateParams{Name: fmt.Sprintf("task %d", i)})
			if err == nil {
				ids[i] = task.ID
				err = producer.UploadInput(e.ctx, task.ID, strings.NewReader("row\n"))
			}
			if err == nil {
				_, err = producer.Submit(e.ctx, task.ID)
			}
			if err != nil {
				errs <- fmt.Errorf("task %d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	produced := e.count.Counts()
	t.Logf("submitted %d tasks in %s", tasks, time.Since(start).Round(time.Millisecond))
	start = time.Now()

	workerReqs := make([]*s3test.Counter, workers)
	lost := putsAnswered("status.json", http.StatusPreconditionFailed)
	for i := range workers {
		id := fmt.Sprintf("worker-%d", i)
		workerReqs[i] = &s3test.Counter{}
		handler := s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
			c.enter(job, id)
			defer c.leave(job)
			// One request inside the handler widens the window in which a
			// second claim of the same task would show.
			return job.WriteOutput(ctx, strings.NewReader(job.Task.ID))
		})
		startWorker(t, e.newStore(t, nil, workerReqs[i].Wrap, lost.wrap), id, handler, func(o *s3task.WorkerOptions) {
			o.Concurrency = concurrency
			o.Hooks = s3task.Hooks{
				OnComplete: c.completed,
				OnFail: func(task *s3task.Task, err error) {
					t.Errorf("%s: task %s attempt %d failed: %v", id, task.ID, task.Attempt, err)
				},
				OnLeaseLost: func(taskID string, _ *s3task.Task, cause error) {
					t.Errorf("%s: lost task %s: %v", id, taskID, cause)
				},
			}
		})
	}

	await(t, c.allDone, fmt.Sprintf("all %d tasks to complete", tasks))
	t.Logf("%d workers completed them in %s", workers, time.Since(start).Round(time.Millisecond))

	// Request cost per task, measured at the moment the last task completed.
	all := map[string]int{}
	for _, r := range workerReqs {
		for k, v := range r.Counts() {
			all[k] += v
		}
	}
	t.Logf("requests per task: producer %s; workers %s", requestsPerTask(produced, tasks), requestsPerTask(all, tasks))
	// Nothing but a claim competes for a record here, so every 412 on one
	// is a lost claim: each costs the loser a marker PUT and DELETE besides.
	t.Logf("lost claims per task: %.2f", float64(lost.count())/tasks)

	c.mu.Lock()
	for _, o := range c.overlaps {
		t.Errorf("overlap: %s", o)
	}
	for _, id := range ids {
		if n := c.complete[id]; n != 1 {
			t.Errorf("task %s: OnComplete called %d times across workers, want 1", id, n)
		}
	}
	for key, n := range c.runs {
		if n != 1 {
			t.Errorf("task/attempt %s: handler ran %d times, want 1", key, n)
		}
	}
	if len(c.runs) != tasks {
		t.Errorf("%d handler runs (task, attempt), want %d: no task should need a second attempt", len(c.runs), tasks)
	}
	t.Logf("tasks completed per worker: %v", c.byWorker)
	c.mu.Unlock()

	for _, id := range ids {
		got := e.get(t, id)
		if got.Status != s3task.StatusCompleted || got.Attempt != 1 {
			t.Errorf("task %s: status %s, attempt %d; want completed at attempt 1", id, got.Status, got.Attempt)
		}
	}
	if left := e.srv.Keys(e.store.Prefix() + "active/"); len(left) != 0 {
		t.Errorf("%d markers left after every task completed", len(left))
	}
}

// requestsPerTask formats request counts divided by n, e.g. "GET=4.21 PUT=3.00".
func requestsPerTask(counts map[string]int, n int) string {
	var b strings.Builder
	total := 0
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		total += counts[k]
		fmt.Fprintf(&b, "%s=%.2f ", k, float64(counts[k])/float64(n))
	}
	fmt.Fprintf(&b, "(total %.2f)", float64(total)/float64(n))
	return b.String()
}

// A purge can leave markers of earlier phases behind (their deletes
// failed). A worker that finds the task's record deleted through one of
// them removes the others without reading the record again: one GET of the
// record for the task, however many markers it left.
func TestWorkerReadsDeletedRecordOnce(t *testing.T) {
	e := newEnv(t, nil)
	task := e.submit(t, "purged")
	var leftovers []string
	for i := range 3 {
		key := e.datedMarker(task.ID, time.Now().Add(-time.Duration(i+1)*time.Minute))
		e.put(t, key, nil)
		leftovers = append(leftovers, key)
	}
	e.del(t, e.recordKey(task.ID))
	var reads atomic.Int32
	store := e.newStore(t, nil, func(next http.RoundTripper) http.RoundTripper {
		return s3tasktest.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, task.ID+"/status.json") {
				reads.Add(1)
			}
			return next.RoundTrip(r)
		})
	})
	runWorker(t, store, s3task.HandlerFunc(func(context.Context, *s3task.Job) error { return nil }), &s3task.WorkerOptions{Concurrency: 4})
	waitUntil(t, "the task's markers to go", func() bool { return !e.hasMarker(task.ID) })
	if n := reads.Load(); n != 1 {
		t.Errorf("the worker read the deleted record %d times for %d markers, want once", n, len(leftovers)+1)
	}
}
