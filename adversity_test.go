package s3task

// Adversity tests: one focused, deterministic test per known defect. Each
// runs in a testing/synctest bubble against the socketless in-memory S3, so
// leases of minutes take milliseconds and every timing is exact. In the
// bubble the S3 server's clock (the Date header) is the virtual clock, so a
// time taken with time.Now inside the bubble is a server time.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/s3task/s3task/internal/faults"
	"github.com/s3task/s3task/internal/s3test"
)

// ---------------------------------------------------------------------------
// Fault tools (the env of these tests is in bubble_test.go)

func advIsRecord(r *http.Request, method, id string) bool {
	return r.Method == method && strings.HasSuffix(r.URL.Path, "/"+id+"/status.json")
}

// advErrResp is an S3 error answer made up without reaching the server.
func advErrResp(r *http.Request, status int, code string) *http.Response {
	body := `<?xml version="1.0" encoding="UTF-8"?><Error><Code>` + code + `</Code><Message>injected</Message></Error>`
	if r.Body != nil {
		r.Body.Close()
	}
	return &http.Response{
		Status: fmt.Sprintf("%d %s", status, http.StatusText(status)), StatusCode: status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"application/xml"}},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)), Request: r,
	}
}

// advLoseAnswer forwards the nth request matching match (from 1); if S3
// applied it, it runs between (another writer slipping in before the
// client hears back), then loses the answer: a connection reset the SDK
// resends after (retryable), or an error it does not retry.
type advLoseAnswer struct {
	match     func(*http.Request) bool
	nth       int32
	retryable bool
	between   func()
	after     func() // runs once the answer was lost, before returning

	n     atomic.Int32
	fired atomic.Bool
}

func (a *advLoseAnswer) wrap(next http.RoundTripper) http.RoundTripper {
	return s3test.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		if !a.match(r) || a.n.Add(1) != a.nth {
			return next.RoundTrip(r)
		}
		resp, err := next.RoundTrip(r)
		if err != nil || resp.StatusCode/100 != 2 {
			return resp, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		a.fired.Store(true)
		if a.between != nil {
			a.between()
		}
		if a.after != nil {
			a.after()
		}
		if a.retryable {
			return nil, &faults.Error{Kind: faults.LostResponse}
		}
		return nil, s3test.ErrCut
	})
}

// advLink cuts a client off from S3: while down, every request fails at
// once (cut) or hangs until its context ends (hang).
type advLink struct {
	mode    atomic.Int32 // 0 up, 1 cut, 2 hang
	release chan struct{}
	once    sync.Once
}

func newAdvLink() *advLink { return &advLink{release: make(chan struct{})} }

func (l *advLink) down(hang bool) {
	if hang {
		l.mode.Store(2)
	} else {
		l.mode.Store(1)
	}
}

// free lets hung requests fail, so the bubble can end.
func (l *advLink) free() { l.once.Do(func() { close(l.release) }) }

func (l *advLink) roundTrip(r *http.Request, next http.RoundTripper) (*http.Response, error) {
	switch l.mode.Load() {
	case 1:
		if r.Body != nil {
			r.Body.Close()
		}
		return nil, s3test.ErrCut
	case 2:
		if r.Body != nil {
			r.Body.Close()
		}
		select {
		case <-r.Context().Done():
			return nil, r.Context().Err()
		case <-l.release:
			return nil, s3test.ErrCut
		}
	}
	return next.RoundTrip(r)
}

// ---------------------------------------------------------------------------
// 1. The lease must end for the holder at lease end - ClockMargin, whatever
// the tick phase.

func TestAdversityLeaseDeadline(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name                      string
		lease, beat, margin, poll time.Duration
		hang                      bool
	}{
		{name: "default/cut"},
		{name: "default/hang", hang: true},
		{name: "4s-1.3s/cut", lease: 4 * time.Second, beat: 1300 * time.Millisecond, margin: time.Second, poll: 250 * time.Millisecond},
		{name: "4s-1.3s/hang", lease: 4 * time.Second, beat: 1300 * time.Millisecond, margin: time.Second, poll: 250 * time.Millisecond, hang: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T, e *advEnv) {
				task := e.submit(CreateParams{Name: "cut off"})
				margin := tc.margin
				if margin == 0 {
					margin = DefaultClockMargin
				}
				opts := func(id string) *WorkerOptions {
					return &WorkerOptions{ID: id, LeaseDuration: tc.lease, HeartbeatInterval: tc.beat, ClockMargin: tc.margin, PollInterval: tc.poll}
				}

				// Worker 1 is cut off right after its first heartbeat
				// (its second record write) landed.
				link := newAdvLink()
				var puts atomic.Int32
				var leaseEnd time.Time
				var mu sync.Mutex
				st1 := e.store(nil, advWrap(func(r *http.Request, next http.RoundTripper) (*http.Response, error) {
					resp, err := link.roundTrip(r, next)
					if err == nil && resp.StatusCode == http.StatusOK && advIsRecord(r, http.MethodPut, task.ID) && puts.Add(1) == 2 {
						mu.Lock()
						leaseEnd = e.record(task.ID).LeaseExpiresAt
						mu.Unlock()
						link.down(tc.hang)
					}
					return resp, err
				}))
				ended1 := make(chan struct{})
				var end1 time.Time
				var cause1 error
				w1 := e.run(st1, func(ctx context.Context, job *Job) error {
					<-ctx.Done()
					end1, cause1 = time.Now(), context.Cause(ctx)
					close(ended1)
					return ctx.Err()
				}, opts("w1"))
				defer link.free() // before w1 stops
				advAwait(t, w1.started, time.Minute, "worker 1's handler start")

				w2 := e.run(e.store(nil), advSucceed, opts("w2"))
				var start2 time.Time
				select {
				case s := <-w2.started:
					start2 = s.at
				case <-time.After(10 * time.Minute):
				}
				select {
				case <-ended1:
				case <-time.After(10 * time.Minute):
					t.Fatal("worker 1's handler context never ended")
				}
				mu.Lock()
				deadline := leaseEnd.Add(-margin)
				mu.Unlock()
				if leaseEnd.IsZero() {
					t.Fatal("setup: worker 1 never heartbeat")
				}
				if !errors.Is(cause1, ErrLeaseLost) {
					t.Errorf("worker 1's handler context cause %v, want ErrLeaseLost", cause1)
				}
				if end1.After(deadline) {
					t.Errorf("worker 1's handler context ended at lease end %+.3fs (server clock); want at or before lease end - ClockMargin (%+.3fs)",
						end1.Sub(leaseEnd).Seconds(), -margin.Seconds())
				}
				switch {
				case start2.IsZero():
					t.Errorf("worker 2 never took the task over")
				case start2.Before(end1):
					t.Errorf("worker 2's handler started %v before worker 1's handler context ended: two handlers of one task at once", end1.Sub(start2))
				}
			})
		})
	}
}

// ---------------------------------------------------------------------------
// 2. An operator call whose write landed never reports a plain failure.

func TestAdversityAmbiguousOverwritten(t *testing.T) {
	t.Parallel()
	type op struct {
		name  string
		setup func(e *advEnv) *Task // the task to start from
		call  func(st *Store, ctx context.Context, id string) (*Task, error)
		want  Status // what the call's own write says
	}
	ops := []op{
		{"Submit", func(e *advEnv) *Task { return e.create(CreateParams{Name: "submit"}) },
			func(st *Store, ctx context.Context, id string) (*Task, error) { return st.Submit(ctx, id) }, StatusQueued},
		{"Retry", func(e *advEnv) *Task { return advFailedTask(e) },
			func(st *Store, ctx context.Context, id string) (*Task, error) { return st.Retry(ctx, id) }, StatusQueued},
		{"Cancel", func(e *advEnv) *Task { return e.submit(CreateParams{Name: "cancel"}) },
			func(st *Store, ctx context.Context, id string) (*Task, error) { return st.Cancel(ctx, id, "enough") }, StatusAbandoned},
	}
	acceptable := func(t *testing.T, what string, err error) {
		t.Helper()
		if err != nil && !errors.Is(err, ErrOutcomeUnknown) {
			t.Errorf("%s returned a plain failure for a change it made: %v (%T); want success or an error wrapping ErrOutcomeUnknown", what, err, err)
		}
	}
	for _, o := range ops {
		// The write lands, its answer is lost, and before the SDK's resend
		// (which then gets 412) someone else changes the record: a worker
		// claims the queued task (Submit, Retry), or a Purge locks the
		// abandoned one (Cancel).
		t.Run(o.name+"/overwritten before the resend", func(t *testing.T) {
			inBubble(t, func(t *testing.T, e *advEnv) {
				task := o.setup(e)
				gate := make(chan struct{})
				var w *advWorker
				var between func()
				if o.name == "Cancel" {
					between = func() { advPurgeLockOnly(e, task.ID) }
				} else {
					between = func() {
						w = e.run(e.store(nil), func(ctx context.Context, job *Job) error {
							<-gate
							return nil
						}, &WorkerOptions{ID: "claimer"})
						advAwait(t, w.started, 5*time.Minute, "the worker's claim")
					}
				}
				lose := &advLoseAnswer{match: func(r *http.Request) bool { return advIsRecord(r, http.MethodPut, task.ID) },
					nth: 1, retryable: true, between: between}
				st := e.store(nil, lose.wrap)
				_, err := o.call(st, e.ctx, task.ID)
				if !lose.fired.Load() {
					t.Fatal("setup: the record write was not made ambiguous")
				}
				acceptable(t, o.name, err)
				if o.name != "Cancel" {
					if got := e.record(task.ID); got.Status != StatusRunning {
						t.Errorf("setup: task is %s, want running (claimed after %s's write)", got.Status, o.name)
					}
					close(gate)
					w.stop()
				}
			})
		})
		// The write lands, and the caller's context ends before the answer.
		t.Run(o.name+"/context ends mid-write", func(t *testing.T) {
			inBubble(t, func(t *testing.T, e *advEnv) {
				task := o.setup(e)
				ctx, cancel := context.WithCancel(e.ctx)
				defer cancel()
				st := e.store(nil, advWrap(func(r *http.Request, next http.RoundTripper) (*http.Response, error) {
					if !advIsRecord(r, http.MethodPut, task.ID) {
						return next.RoundTrip(r)
					}
					resp, err := next.RoundTrip(r)
					if err != nil {
						return resp, err
					}
					resp.Body.Close()
					cancel()
					return nil, r.Context().Err()
				}))
				_, err := o.call(st, ctx, task.ID)
				if got := e.record(task.ID); got.Status != o.want {
					t.Fatalf("setup: task is %s after the write, want %s", got.Status, o.want)
				}
				acceptable(t, o.name, err)
			})
		})
	}
}

// advFailedTask returns a task that failed for good, by a real worker.
func advFailedTask(e *advEnv) *Task {
	e.t.Helper()
	task := e.submit(CreateParams{Name: "fails"})
	w := e.run(e.store(nil), func(ctx context.Context, job *Job) error { return Permanent(errors.New("boom")) }, &WorkerOptions{ID: "failer"})
	if !e.awaitTerminal(task.ID, 5*time.Minute) {
		e.t.Fatal("setup: the task did not fail")
	}
	w.stop()
	got := e.record(task.ID)
	if got.Status != StatusFailed || e.has(e.markerKey(task.ID)) {
		e.t.Fatalf("setup: task %s, marker %v; want failed without marker", got.Status, e.has(e.markerKey(task.ID)))
	}
	return &got.Task
}

// advPurgeLockOnly runs a Purge that locks the (finished) task for deletion
// and is then cut off before it deletes anything, so the record stays with
// purging set.
func advPurgeLockOnly(e *advEnv, id string) {
	e.t.Helper()
	time.Sleep(purgeSettle) // Purge leaves a task until then
	dir := DefaultPrefix + id + "/"
	st := e.store(nil, advWrap(func(r *http.Request, next http.RoundTripper) (*http.Response, error) {
		if r.Method == http.MethodGet && r.URL.Query().Get("prefix") == dir {
			return nil, s3test.ErrCut
		}
		return next.RoundTrip(r)
	}))
	if _, err := st.Purge(e.ctx, time.Now().Add(time.Second), PurgeOptions{}); err == nil {
		e.t.Fatal("setup: the purge was not cut off")
	}
	if !e.record(id).Purging {
		e.t.Fatal("setup: the purge did not lock the task")
	}
}

// ---------------------------------------------------------------------------
// 3. A claim that won is settled, not given up.

func TestAdversityClaimAnswerLost(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		retryable bool // the claim's answer is lost with a resendable error
		reads     int  // record reads that fail after the claim
		status    int  // how they fail: a status, or 0 for a cut
	}{
		{"answer cut, re-read cut once", false, 1, 0},
		{"answer reset and resent, re-read 500 until the SDK gives up", true, 3, http.StatusInternalServerError},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T, e *advEnv) {
				task := e.submit(CreateParams{Name: "one shot", MaxAttempts: 1})
				var failReads atomic.Int32
				lose := &advLoseAnswer{match: func(r *http.Request) bool { return advIsRecord(r, http.MethodPut, task.ID) },
					nth: 1, retryable: tc.retryable, after: func() { failReads.Store(int32(tc.reads)) }}
				failing := advWrap(func(r *http.Request, next http.RoundTripper) (*http.Response, error) {
					if advIsRecord(r, http.MethodGet, task.ID) && failReads.Add(-1) >= 0 {
						if tc.status == 0 {
							return nil, s3test.ErrCut
						}
						return advErrResp(r, tc.status, "InternalError"), nil
					}
					return next.RoundTrip(r)
				})
				w := e.run(e.store(nil, lose.wrap, failing), advSucceed, &WorkerOptions{ID: "w1"})
				e.awaitTerminal(task.ID, 10*time.Minute)
				if !lose.fired.Load() {
					t.Fatal("setup: the claim's answer was not lost")
				}
				got := e.record(task.ID)
				if runs := len(w.started); got.Status != StatusCompleted || runs != 1 {
					t.Errorf("after a claim whose answer was lost: task %s (%s: %q), handler ran %d times; want completed, once",
						got.Status, got.ErrorCategory, got.LastError, runs)
				}
			})
		})
	}
}

// ---------------------------------------------------------------------------
// 4. A slow graceful shutdown keeps the lease until the handler returns.

func TestAdversitySlowShutdown(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		// One attempt only: if the interrupted attempt were counted, the task
		// would fail for good.
		task := e.submit(CreateParams{Name: "slow to stop", MaxAttempts: 1})
		var expired atomic.Bool
		e.mem.OnApply(func(a s3test.Applied) {
			if a.Method == http.MethodPut && a.Key == e.recordKey(task.ID) && strings.Contains(string(a.Body), `"`+CategoryLeaseExpired+`"`) {
				expired.Store(true)
			}
		})

		var ret1 time.Time
		var cause1 error
		w1 := e.run(e.store(nil), func(ctx context.Context, job *Job) error {
			<-ctx.Done()
			cause1 = context.Cause(ctx)
			time.Sleep(2 * time.Minute) // longer than the rest of its lease
			ret1 = time.Now()
			return cause1
		}, &WorkerOptions{ID: "w1"})
		advAwait(t, w1.started, time.Minute, "worker 1's handler start")
		w2 := e.run(e.store(nil), advSucceed, &WorkerOptions{ID: "w2"})

		time.Sleep(time.Second)
		w1.stop() // returns once worker 1's handler has returned
		if !errors.Is(cause1, ErrWorkerStopping) {
			t.Errorf("worker 1's handler context cause %v, want ErrWorkerStopping", cause1)
		}
		e.awaitTerminal(task.ID, 10*time.Minute)
		select {
		case start2 := <-w2.started:
			if start2.at.Before(ret1) {
				t.Errorf("worker 2 started the task %v before worker 1's handler returned", ret1.Sub(start2.at))
			}
		default:
			t.Errorf("worker 2 never ran the task")
		}
		if expired.Load() {
			t.Errorf("the lease of the stopping worker expired and was recovered (lease_expired written)")
		}
		if got := e.record(task.ID); got.Status != StatusCompleted {
			t.Errorf("task %s (%s: %q), want completed: the interrupted attempt must not count", got.Status, got.ErrorCategory, got.LastError)
		}
	})
}

// ---------------------------------------------------------------------------
// 5. Releases on shutdown do not raise max_attempts.

func TestAdversityReleaseKeepsMaxAttempts(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		const maxAttempts = 2
		task := e.submit(CreateParams{Name: "released", MaxAttempts: maxAttempts})
		for i := range 3 {
			w := e.run(e.store(nil), advUntilDone, &WorkerOptions{ID: fmt.Sprintf("stopper-%d", i)})
			advAwait(t, w.started, 5*time.Minute, "the claim")
			w.stop()
			if got := e.record(task.ID); got.Status != StatusQueued || got.ErrorCategory != CategoryShutdown {
				t.Fatalf("release %d: task %s (%s), want queued after a shutdown", i+1, got.Status, got.ErrorCategory)
			}
		}
		raw := map[string]any{}
		e.rawRecord(task.ID, &raw)
		if got := raw["max_attempts"]; got != float64(maxAttempts) {
			t.Errorf("max_attempts %v after 3 releases, want %d as created", got, maxAttempts)
		}
		if got := raw["released_attempts"]; got != float64(3) {
			t.Errorf("released_attempts %v after 3 releases, want 3", got)
		}

		// Every real attempt is still there: the task fails for good after
		// exactly maxAttempts runs.
		w := e.run(e.store(nil), func(ctx context.Context, job *Job) error {
			return errors.New("transient")
		}, &WorkerOptions{ID: "failer", Backoff: func(int) time.Duration { return time.Second }})
		e.awaitTerminal(task.ID, 30*time.Minute)
		w.stop()
		if got, runs := e.record(task.ID), len(w.started); got.Status != StatusFailed || runs != maxAttempts {
			t.Errorf("after the releases: task %s, handler ran %d times; want failed after %d", got.Status, runs, maxAttempts)
		}
	})
}

// ---------------------------------------------------------------------------
// 6. No output once the attempt's context ended.

func TestAdversityLateOutput(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"cancel", "lease lost"} {
		for _, write := range []string{"WriteOutput", "Output.Close"} {
			t.Run(how+"/"+write, func(t *testing.T) {
				inBubble(t, func(t *testing.T, e *advEnv) {
					task := e.submit(CreateParams{Name: "late writer"})
					type late struct {
						cause, err error
					}
					done := make(chan late, 1)
					w := e.run(e.store(nil), func(ctx context.Context, job *Job) error {
						var out *Output
						if write == "Output.Close" {
							var err error
							if out, err = job.CreateOutput(context.Background()); err != nil {
								return err
							}
							io.WriteString(out, "late output\n")
						}
						<-ctx.Done()
						var err error
						if out != nil {
							err = out.Close()
						} else {
							err = job.WriteOutput(context.Background(), strings.NewReader("late output\n"))
						}
						done <- late{context.Cause(ctx), err}
						return ctx.Err()
					}, &WorkerOptions{ID: "w1"})
					advAwait(t, w.started, time.Minute, "the handler start")
					time.Sleep(5 * time.Second)
					want := ErrTaskCanceled
					if how == "cancel" {
						if _, err := e.admin.Cancel(e.ctx, task.ID, "stop"); err != nil {
							t.Fatal(err)
						}
					} else {
						e.takeOver(task.ID, "thief")
						want = ErrLeaseLost
					}
					got := advAwait(t, done, 5*time.Minute, "the handler's late write")
					if !errors.Is(got.cause, want) {
						t.Errorf("setup: handler context cause %v, want %v", got.cause, want)
					}
					if got.err == nil {
						t.Errorf("%s after the context ended (%v) succeeded; want it refused", write, got.cause)
					}
					if e.has(e.outputKey(task.ID, 1)) {
						t.Errorf("%s after the context ended (%v) created %s", write, got.cause, e.outputKey(task.ID, 1))
					}
				})
			})
		}
	}
}

// ---------------------------------------------------------------------------
// 7. Completion notices do not stall the fleet.

func TestAdversityNoticesSlowHook(t *testing.T) {
	t.Parallel()
	for _, where := range []string{"after completing", "met by the poll"} {
		t.Run(where, func(t *testing.T) {
			inBubble(t, func(t *testing.T, e *advEnv) {
				slowID := ""
				if where == "after completing" {
					slowID = e.submit(CreateParams{Name: "slow notice"}).ID
				} else {
					// A cancelled task whose notice is pending: the
					// canceller's hook failed, the marker stays.
					canceller := e.store(&StoreOptions{OnTerminal: func(context.Context, *Task) error { return errors.New("down") }})
					slowID = e.submit(CreateParams{Name: "slow notice"}).ID
					if _, err := canceller.Cancel(e.ctx, slowID, "no"); err != nil {
						t.Fatal(err)
					}
					if !e.record(slowID).NotifyPending || !e.has(e.markerKey(slowID)) {
						t.Fatal("setup: no pending notice")
					}
				}
				entered := make(chan struct{})
				var once sync.Once
				st := e.store(&StoreOptions{OnTerminal: func(ctx context.Context, t *Task) error {
					if t.ID == slowID {
						once.Do(func() { close(entered) })
						time.Sleep(10 * time.Minute)
					}
					return nil
				}})
				w := e.run(st, advSucceed, &WorkerOptions{ID: "w1"})
				advAwait(t, entered, time.Minute, "the slow hook")

				submitted := time.Now()
				other := e.submit(CreateParams{Name: "next"})
				// The hook sleeps again each time it is called, so with the
				// defect the wait can be a multiple of 10 minutes.
				limit := time.After(2 * time.Hour)
			wait:
				for {
					select {
					case s := <-w.started:
						if s.id == other.ID {
							break wait
						}
					case <-limit:
						t.Fatal("a task submitted while an OnTerminal hook blocked did not start within 2 hours")
					}
				}
				if d := time.Since(submitted); d > 10*time.Second {
					t.Errorf("a task submitted while an OnTerminal hook blocked started %v later; want within a few seconds", d)
				}
			})
		})
	}
}

func TestAdversityNoticesFailingHookBackoff(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		task := e.submit(CreateParams{Name: "notice never delivered"})
		var hookCalls, gets, lists atomic.Int32
		counting := advWrap(func(r *http.Request, next http.RoundTripper) (*http.Response, error) {
			switch {
			case advIsRecord(r, http.MethodGet, task.ID):
				gets.Add(1)
			case s3test.Op(r) == "LIST":
				lists.Add(1)
			}
			return next.RoundTrip(r)
		})
		st := e.store(&StoreOptions{OnTerminal: func(context.Context, *Task) error {
			hookCalls.Add(1)
			return errors.New("webhook down")
		}}, counting)
		// The worker lists the markers every poll (MaxPollInterval =
		// PollInterval), as it would with steady activity in the fleet.
		e.run(st, advSucceed, &WorkerOptions{ID: "w1", MaxPollInterval: DefaultPollInterval, ReconcileInterval: -1})
		if !advWaitFor(time.Minute, 100*time.Millisecond, func() bool {
			return e.record(task.ID).Status == StatusCompleted && hookCalls.Load() > 0
		}) {
			t.Fatal("setup: the task did not complete")
		}
		gets.Store(0)
		lists.Store(0)
		hookCalls.Store(0)
		time.Sleep(10 * time.Minute)
		g, l, h := gets.Load(), lists.Load(), hookCalls.Load()
		t.Logf("over 10 idle minutes: %d LISTs, %d GETs of the record, %d hook calls", l, g, h)
		if l < 100 {
			t.Fatalf("setup: only %d LISTs in 10 minutes", l)
		}
		if g*10 > l {
			t.Errorf("an always-failing OnTerminal hook: %d record GETs for %d listings in 10 minutes; want backoff per task (at most a tenth)", g, l)
		}
	})
}

// ---------------------------------------------------------------------------
// 8. Smaller ones.

// TestAdversityHookPanics runs each scenario in a child process, since a
// panic that escapes a worker goroutine ends the whole test binary.
func TestAdversityHookPanics(t *testing.T) {
	if name := os.Getenv("S3TASK_ADVERSITY_PANIC_HOOK"); name != "" {
		advPanicChild(t, name)
		return
	}
	t.Parallel()
	for _, name := range []string{"OnClaim", "OnComplete", "OnFail", "OnLeaseLost", "OnRelease", "OnPoll", "OnReconcile", "OnTerminal"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// The child has until a little before this test's deadline; if
			// it hangs, its own timeout's stack dump says where.
			timeout := time.Duration(0)
			if deadline, ok := t.Deadline(); ok {
				timeout = max(time.Until(deadline)*9/10, time.Second)
			}
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestAdversityHookPanics$", "-test.count=1", "-test.v",
				"-test.timeout="+timeout.Round(time.Second).String())
			cmd.Env = append(os.Environ(), "S3TASK_ADVERSITY_PANIC_HOOK="+name)
			out, err := cmd.CombinedOutput()
			if err == nil {
				return
			}
			lines := strings.Split(string(out), "\n")
			reason := ""
			for _, want := range []func(string) bool{
				func(l string) bool { return strings.HasPrefix(l, "panic:") },
				func(l string) bool { return strings.Contains(l, "DATA RACE") },
				func(l string) bool { return strings.HasPrefix(strings.TrimSpace(l), "adversity_test.go:") },
			} {
				for _, line := range lines {
					if reason == "" && want(line) {
						reason = strings.TrimSpace(line)
					}
				}
			}
			t.Errorf("a panic in %s: the worker process failed (%v): %s", name, err, reason)
			if testing.Verbose() {
				t.Logf("child output:\n%s", out)
			}
		})
	}
}

func advPanicChild(t *testing.T, name string) {
	synctest.Test(t, func(t *testing.T) {
		e := newAdvEnv(t)
		boom := func() { panic("adversity: " + name + " hook panics") }
		var hooks Hooks
		var sopts StoreOptions
		wopts := &WorkerOptions{ID: "w1", Hooks: hooks}
		switch name {
		case "OnClaim":
			wopts.Hooks.OnClaim = func(*Task) { boom() }
		case "OnComplete":
			wopts.Hooks.OnComplete = func(*Task) { boom() }
		case "OnFail":
			wopts.Hooks.OnFail = func(*Task, error) { boom() }
		case "OnLeaseLost":
			wopts.Hooks.OnLeaseLost = func(string, *Task, error) { boom() }
		case "OnRelease":
			wopts.Hooks.OnRelease = func(*Task) { boom() }
		case "OnPoll":
			wopts.Hooks.OnPoll = func(PollStats) { boom() }
		case "OnReconcile":
			wopts.Hooks.OnReconcile = func(*ReconcileReport) { boom() }
			wopts.ReconcileInterval = time.Minute
		case "OnTerminal":
			sopts.OnTerminal = func(context.Context, *Task) error { boom(); return nil }
		default:
			t.Fatalf("unknown hook %s", name)
		}
		first := e.submit(CreateParams{Name: "first"})
		w := e.run(e.store(&sopts), func(ctx context.Context, job *Job) error {
			switch {
			case job.Task.ID != first.ID:
				return nil
			case name == "OnFail":
				return Permanent(errors.New("no"))
			case name == "OnLeaseLost", name == "OnRelease":
				<-ctx.Done()
				return ctx.Err()
			}
			return nil
		}, wopts)
		if name != "OnClaim" {
			advAwait(t, w.started, time.Minute, "the first task's start")
		}
		switch name {
		case "OnLeaseLost":
			if _, err := e.admin.Cancel(e.ctx, first.ID, "lose it"); err != nil {
				t.Fatal(err)
			}
		case "OnRelease":
			w.stop()
			if got := e.record(first.ID); got.Status != StatusQueued {
				t.Errorf("after shutdown the task is %s, want queued", got.Status)
			}
			return
		case "OnReconcile":
			time.Sleep(2 * time.Minute)
		}
		if !e.awaitTerminal(first.ID, 5*time.Minute) {
			t.Fatalf("the first task is %s, want it finished", e.record(first.ID).Status)
		}
		// The worker is still alive and working.
		second := e.submit(CreateParams{Name: "second"})
		if !advWaitFor(5*time.Minute, time.Second, func() bool { return e.record(second.ID).Status == StatusCompleted }) {
			t.Errorf("after a panicking %s the worker no longer runs tasks", name)
		}
	})
}

func TestAdversityWorkerStop(t *testing.T) {
	t.Parallel()
	t.Run("handlers honour their context", func(t *testing.T) {
		inBubble(t, func(t *testing.T, e *advEnv) {
			task := e.submit(CreateParams{Name: "stop me"})
			w := e.run(e.store(nil), advUntilDone, &WorkerOptions{ID: "w1"})
			advAwait(t, w.started, time.Minute, "the handler start")
			ctx, cancel := context.WithTimeout(e.ctx, 5*time.Minute)
			defer cancel()
			if err := w.w.Stop(ctx); err != nil {
				t.Errorf("Stop: %v, want nil", err)
			}
			select {
			case err := <-w.done:
				w.done <- err // for w.stop
			case <-time.After(time.Second):
				t.Errorf("Run had not returned a second after Stop did")
			}
			if got := e.record(task.ID); got.Status != StatusQueued {
				t.Errorf("after Stop the task is %s, want queued (released)", got.Status)
			}
		})
	})
	t.Run("deadline", func(t *testing.T) {
		inBubble(t, func(t *testing.T, e *advEnv) {
			e.submit(CreateParams{Name: "stubborn"})
			w := e.run(e.store(nil), func(ctx context.Context, job *Job) error {
				time.Sleep(time.Hour) // ignores its context
				return nil
			}, &WorkerOptions{ID: "w1"})
			advAwait(t, w.started, time.Minute, "the handler start")
			ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
			defer cancel()
			begin := time.Now()
			err := w.w.Stop(ctx)
			if d := time.Since(begin); d > 5*time.Second {
				t.Errorf("Stop returned %v after it was called, past its context's 5s deadline", d)
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Stop with a handler that ignores its context: %v, want an error wrapping context.DeadlineExceeded", err)
			}
		})
	})
}

// TestAdversitySubmitMarkerAfterRecord: a Reconcile that listed an old
// marker of a created task (a Submit that died before its record write)
// deletes it just after a new Submit wrote its own marker, and judged the
// record before that Submit's record write. The new marker has a key of its
// own (the task's due time), so the delete cannot hit it: the task must
// still have its marker, the one its record calls for.
func TestAdversitySubmitMarkerAfterRecord(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		task := e.create(CreateParams{Name: "resubmitted"})
		e.putRaw(e.markerKey(task.ID), nil) // the dead Submit's marker
		time.Sleep(15 * time.Minute)

		atDelete, letDelete, reconciled := make(chan struct{}), make(chan struct{}), make(chan struct{})
		var rec *ReconcileReport
		var recErr error
		reconciler := e.store(nil, advWrap(func(r *http.Request, next http.RoundTripper) (*http.Response, error) {
			if r.Method == http.MethodDelete && strings.HasSuffix(r.URL.Path, "/active/"+task.ID) {
				close(atDelete)
				<-letDelete
			}
			return next.RoundTrip(r)
		}))
		go func() {
			defer close(reconciled)
			rec, recErr = reconciler.Reconcile(e.ctx, ReconcileOptions{})
		}()
		select {
		case <-atDelete:
		case <-reconciled:
			t.Fatalf("setup: Reconcile did not try to remove the old marker: %+v, %v", rec, recErr)
		}

		var once sync.Once
		submitter := e.store(nil, advWrap(func(r *http.Request, next http.RoundTripper) (*http.Response, error) {
			if advIsRecord(r, http.MethodPut, task.ID) {
				once.Do(func() {
					close(letDelete)
					<-reconciled
				})
			}
			return next.RoundTrip(r)
		}))
		got, err := submitter.Submit(e.ctx, task.ID)
		if err != nil {
			t.Fatal(err)
		}
		<-reconciled
		if recErr != nil {
			t.Fatal(recErr)
		}
		t.Logf("reconcile removed %v", rec.Removed)
		if got.Status != StatusQueued {
			t.Fatalf("Submit: task %s", got.Status)
		}
		if want := e.admin.MarkerKey(got); !e.has(want) {
			t.Errorf("a submitted (queued) task has no marker %s after a Reconcile deleted the old one, %v", want, rec.Removed)
		}
		if old := DefaultPrefix + "active/" + task.ID; e.has(old) {
			t.Errorf("the dead Submit's marker %s is still there", old)
		}
	})
}

// TestAdversityScheduledStart: a task scheduled with RunAt starts at RunAt,
// not before, and within a PollInterval after, by an idle worker that lists
// the markers once when the Submit's wake object tells it to, then waits for
// the marker's time without listing in between or sending requests in a
// loop. RunAt may be any time, to the nanosecond, not only a whole
// millisecond like the server's clock as a worker reads it.
func TestAdversityScheduledStart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		ahead time.Duration
	}{
		{"whole millisecond", 90 * time.Second},
		{"within a millisecond", 90*time.Second + 300*time.Microsecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T, e *advEnv) {
				var reqs s3test.Counter
				const poll = 2 * time.Second
				w := e.run(e.store(nil, reqs.Wrap), advSucceed, &WorkerOptions{ID: "w", PollInterval: poll, MaxPollInterval: time.Hour, ReconcileInterval: -1}) // no reconcile LISTs
				time.Sleep(2 * poll)                                                                                                                            // the worker's first listing is behind it
				reqs.Reset()

				runAt := time.Now().Add(tc.ahead)
				task := e.create(CreateParams{Name: "later", RunAt: runAt})
				got, err := e.admin.Submit(e.ctx, task.ID)
				if err != nil {
					t.Fatal(err)
				}
				// RunAt is kept rounded up to the millisecond, the resolution
				// of marker names, and the task falls due then.
				want := runAt.Truncate(time.Millisecond)
				if !want.Equal(runAt) {
					want = want.Add(time.Millisecond)
				}
				if !got.RunAt.Equal(want) || !got.DueAt.Equal(want) || !e.has(e.admin.MarkerKey(got)) {
					t.Fatalf("submitted: run_at %s, due_at %s, marker %v; want %s and its marker", got.RunAt, got.DueAt, e.has(e.admin.MarkerKey(got)), want)
				}
				at := advAwait(t, w.started, 10*time.Minute, "the scheduled start").at
				if at.Before(runAt) {
					t.Errorf("started %s before run_at", runAt.Sub(at))
				}
				if late := at.Sub(runAt); late > poll {
					t.Errorf("started %s after run_at, want within PollInterval %s", late, poll)
				}
				if n := reqs.Counts()["LIST"]; n > 2 {
					t.Errorf("%d LISTs from Submit to the start, want at most 2 (for the wake object, and once the marker fell due)", n)
				}
			})
		})
	}
}

// TestAdversityLeftoverMarkerOfFinishedTask: a claim that lost its race
// takes back the marker it wrote first; if that DELETE fails (a fault, a
// cut), the marker stays, named after the lease the claim would have
// taken. Here it was written a moment before the task completed. No change
// of a completed task can come after (only a failed one can be retried),
// so the marker is stale, and the package promises that a stale marker is
// removed by the next worker that visits it: workers must not leave it to
// a reconcile (an hour apart by default) and visit it at every listing
// until then.
func TestAdversityLeftoverMarkerOfFinishedTask(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		task := e.submit(CreateParams{Name: "raced"})
		var leftover string
		done := make(chan struct{})
		e.run(e.store(nil), func(ctx context.Context, job *Job) error {
			// The losing claim's marker, written while this attempt runs:
			// that claim came a little later than the winning one.
			time.Sleep(300 * time.Millisecond)
			due := time.Now().Add(DefaultLeaseDuration + DefaultClockMargin).UTC()
			leftover = DefaultPrefix + "active/" + due.Format(markerTimeLayout) + "_" + task.ID
			e.putRaw(leftover, nil)
			time.Sleep(700 * time.Millisecond)
			close(done)
			return nil
		}, &WorkerOptions{ID: "w"})
		advAwait(t, done, time.Minute, "the handler")
		time.Sleep(DefaultLeaseDuration + DefaultClockMargin + 3*DefaultMaxPollInterval)
		got := e.record(task.ID)
		if got.Status != StatusCompleted {
			t.Fatalf("task %s, want completed", got.Status)
		}
		if e.has(leftover) {
			t.Errorf("marker %s of the completed task (written %s before its last write) is still there %s after it fell due",
				strings.TrimPrefix(leftover, DefaultPrefix), 700*time.Millisecond, 3*DefaultMaxPollInterval)
		}
		if e.has(e.admin.MarkerKey(&got.Task)) {
			t.Errorf("the completed task still has the marker of its claim")
		}
	})
}

// TestAdversityOutcomeAfterStalledRenewal: a handler that returned before
// its lease's deadline has its outcome written, even when a renewal under
// way stalls until that deadline. The renewal's request gives up at the
// deadline, the very instant the lease stops being trusted; the handler is
// over by then, so no two handlers can overlap, and the final write is a
// compare-and-set that lands only if nobody took the task. Writing it
// saves the attempt, which would otherwise be used up by a lease left to
// expire. Before, which of the two came first was the Go scheduler's
// coin toss; ten tasks in a row make a coin toss fail this test.
func TestAdversityOutcomeAfterStalledRenewal(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		const tasks = 10
		ids := map[string]bool{}
		for i := range tasks {
			ids[e.submit(CreateParams{Name: fmt.Sprintf("stalled renewal %d", i)}).ID] = true
		}
		// Each task's second record write by the worker (its first renewal)
		// hangs until the request's context ends.
		var mu sync.Mutex
		writes := map[string]int{}
		st := e.store(nil, advWrap(func(r *http.Request, next http.RoundTripper) (*http.Response, error) {
			for id := range ids {
				if advIsRecord(r, http.MethodPut, id) {
					mu.Lock()
					writes[id]++
					n := writes[id]
					mu.Unlock()
					if n == 2 {
						<-r.Context().Done()
						return nil, r.Context().Err()
					}
				}
			}
			return next.RoundTrip(r)
		}))
		// The handler returns after the renewal stalled, well before the
		// deadline (the lease's end less the margin, 55 s after the claim).
		w := e.run(st, func(ctx context.Context, job *Job) error {
			select {
			case <-time.After(DefaultLeaseDuration / 2):
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}, &WorkerOptions{ID: "w", ReconcileInterval: -1})
		for range tasks {
			advAwait(t, w.started, 10*time.Minute, "a handler start")
		}
		time.Sleep(2 * DefaultLeaseDuration)
		for id := range ids {
			if got := e.record(id); got.Status != StatusCompleted || got.Attempt != 1 {
				t.Errorf("task %s: %s, attempt %d [%s], want completed by attempt 1", id, got.Status, got.Attempt, got.ErrorCategory)
			}
		}
	})
}
