package s3task

// Doubts settled inside the library: an operator's change of a task
// (Submit, Retry, Cancel, Schedule) whose write's answer was lost reads the
// record and decides again, and hands the doubt to its caller
// (ErrOutcomeUnknown) only when S3 cannot be read back in time. Each test
// runs in a synctest bubble against the socketless in-memory S3 (see
// bubble_test.go); Pause and Resume have theirs in doubtpause_test.go.

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/s3task/s3task/internal/faults"
	"github.com/s3task/s3task/internal/s3test"
)

// doubtWrites is how many writes by others a test puts after a doubtful
// write: more than the record remembers, so it cannot tell from its
// revisions whether that write landed.
const doubtWrites = priorRevisions + 2

// doubtful makes the first PUT of task id's record with If-Match (a
// change's write) doubtful. If landed, it forwards the write and then runs
// between; otherwise it runs between instead. Either way the answer is
// then lost as a connection reset, which the SDK resends after: the resend
// meets a record that changed, and gets 412.
type doubtful struct {
	id      string
	landed  bool
	between func()

	fired atomic.Bool
}

func (d *doubtful) wrap(next http.RoundTripper) http.RoundTripper {
	return s3test.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		if !advIsRecord(r, http.MethodPut, d.id) || r.Header.Get("If-Match") == "" || d.fired.Swap(true) {
			return next.RoundTrip(r)
		}
		if d.landed {
			resp, err := next.RoundTrip(r)
			if err != nil {
				return nil, err
			}
			resp.Body.Close()
		} else if r.Body != nil {
			r.Body.Close()
		}
		d.between()
		return nil, &faults.Error{Kind: faults.LostResponse}
	})
}

// bump writes task id's record n times as it is, each write a well-behaved
// one that keeps the count and the revisions (as a notice's record, a
// heartbeat or a Schedule do): writes by others after a doubtful one.
func (e *advEnv) bump(id string, n int) {
	e.t.Helper()
	for range n {
		t, etag, err := e.admin.read(e.ctx, id)
		if err == nil {
			_, _, err = e.admin.commit(e.ctx, t, etag, t)
		}
		if err != nil {
			e.t.Errorf("setup: rewrite the record of %s: %v", id, err)
			return
		}
	}
}

// A Cancel whose write is held in flight while the worker renews its
// lease more times than the record remembers, then refused (412): the
// record cannot tell whether the write landed (it did not), so Cancel
// reads it, finds the task still running, and cancels it again, instead
// of returning ErrOutcomeUnknown.
func TestDoubtCancelRacingHeartbeats(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		task := e.submit(CreateParams{Name: "racing"})
		ended := make(chan error, 1)
		w := e.run(e.store(nil), func(ctx context.Context, job *Job) error {
			<-ctx.Done()
			ended <- context.Cause(ctx)
			return ctx.Err()
		}, &WorkerOptions{ID: "beating", LeaseDuration: 10 * time.Second, HeartbeatInterval: time.Second, ClockMargin: 2 * time.Second})
		advAwait(t, w.started, time.Minute, "the handler's start")

		base := e.record(task.ID).Writes
		var held atomic.Bool
		st := e.store(nil, advWrap(func(r *http.Request, next http.RoundTripper) (*http.Response, error) {
			if advIsRecord(r, http.MethodPut, task.ID) && !held.Swap(true) {
				// In flight while the heartbeats go on.
				if !advWaitFor(time.Minute, 100*time.Millisecond, func() bool { return e.record(task.ID).Writes > base+doubtWrites }) {
					t.Error("setup: the worker did not renew its lease while the Cancel was in flight")
				}
			}
			return next.RoundTrip(r)
		}))
		got, err := st.Cancel(e.ctx, task.ID, "stop")
		if !held.Load() {
			t.Fatal("setup: the Cancel's write was not held")
		}
		if err != nil {
			t.Fatalf("Cancel racing heartbeats: %v", err)
		}
		if got.Status != StatusAbandoned {
			t.Errorf("Cancel returned the task %s, want abandoned", got.Status)
		}
		if cause := advAwait(t, ended, time.Minute, "the handler's context to end"); !errors.Is(cause, ErrTaskCanceled) {
			t.Errorf("the handler's context ended with %v, want ErrTaskCanceled", cause)
		}
	})
}

// One test per call and outcome: a write whose answer is lost, and that
// more writes by others follow than the record remembers, either landed
// (the call finds its goal reached and succeeds, writing nothing more) or
// did not (the call decides again against the record, and makes the
// change once).
func TestDoubtLostAnswer(t *testing.T) {
	t.Parallel()
	far := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC) // a start well after the bubble's clock
	type call struct {
		name  string
		setup func(e *advEnv) *Task
		do    func(st *Store, ctx context.Context, id string) (*Task, error)
		check func(t *testing.T, before, after *record) // the change made once
	}
	calls := []call{
		{"Submit", func(e *advEnv) *Task { return e.create(CreateParams{Name: "submit"}) },
			func(st *Store, ctx context.Context, id string) (*Task, error) { return st.Submit(ctx, id) },
			func(t *testing.T, before, after *record) {
				if after.Status != StatusQueued || after.SubmittedAt.IsZero() {
					t.Errorf("task is %s (submitted at %v), want queued", after.Status, after.SubmittedAt)
				}
			}},
		{"Retry", func(e *advEnv) *Task { return advFailedTask(e) },
			func(st *Store, ctx context.Context, id string) (*Task, error) { return st.Retry(ctx, id) },
			func(t *testing.T, before, after *record) {
				if after.Status != StatusQueued || after.Attempt != before.Attempt || after.DueAt.Before(before.UpdatedAt) {
					t.Errorf("task is %s at attempt %d due %v, want queued at attempt %d, due since %v", after.Status, after.Attempt, after.DueAt, before.Attempt, before.UpdatedAt)
				}
			}},
		{"Cancel", func(e *advEnv) *Task { return e.submit(CreateParams{Name: "cancel"}) },
			func(st *Store, ctx context.Context, id string) (*Task, error) { return st.Cancel(ctx, id, "enough") },
			func(t *testing.T, before, after *record) {
				if after.Status != StatusAbandoned || after.CancelReason != "enough" {
					t.Errorf("task is %s (reason %q), want abandoned for %q", after.Status, after.CancelReason, "enough")
				}
			}},
		{"Schedule", func(e *advEnv) *Task { return e.submit(CreateParams{Name: "schedule"}) },
			func(st *Store, ctx context.Context, id string) (*Task, error) { return st.Schedule(ctx, id, far) },
			func(t *testing.T, before, after *record) {
				if after.Status != StatusQueued || !after.RunAt.Equal(far) || !after.DueAt.Equal(far) {
					t.Errorf("task is %s to run at %v (due %v), want queued for %v", after.Status, after.RunAt, after.DueAt, far)
				}
			}},
	}
	for _, c := range calls {
		for _, landed := range []bool{true, false} {
			name := c.name + "/landed"
			if !landed {
				name = c.name + "/not landed"
			}
			t.Run(name, func(t *testing.T) {
				inBubble(t, func(t *testing.T, e *advEnv) {
					task := c.setup(e)
					before := e.record(task.ID)
					writes := &writesOf{id: task.ID}
					d := &doubtful{id: task.ID, landed: landed, between: func() { e.bump(task.ID, doubtWrites) }}
					st := e.store(nil, writes.wrap, d.wrap)
					got, err := c.do(st, e.ctx, task.ID)
					if !d.fired.Load() {
						t.Fatal("setup: the call's write was not made doubtful")
					}
					if err != nil {
						t.Fatalf("%s: %v; want the doubt settled", c.name, err)
					}
					after := e.record(task.ID)
					c.check(t, before, after)
					if got.Status != after.Status || got.Revision != after.Revision {
						t.Errorf("%s returned the task %s at revision %s, want it as stored: %s at %s", c.name, got.Status, got.Revision, after.Status, after.Revision)
					}
					// Landed, the write in doubt was the change; not, one
					// write more made it: once either way. The doubt cost
					// one read of the record, beside the call's own.
					if n := writes.n.Load(); n != 1 {
						t.Errorf("S3 applied %d record writes of the call, want 1", n)
					}
					if n := writes.reads.Load(); n != 2 {
						t.Errorf("the call read the record %d times, want 2 (its read, and one to settle the doubt)", n)
					}
					// Its markers are those the record calls for: none
					// left behind by the write in doubt.
					var want []string
					if after.needsMarker() {
						want = []string{e.admin.MarkerKey(&after.Task)}
					}
					if got := advMarkersOf(e, task.ID); !slices.Equal(got, want) {
						t.Errorf("the task's markers are %v, want %v", got, want)
					}
					if r := e.record(task.ID); r.Writes != before.Writes+doubtWrites+1 {
						t.Errorf("the record was written %d times since the call began, want %d (the others', and the change once)", r.Writes-before.Writes, doubtWrites+1)
					}
				})
			})
		}
	}
}

// A Schedule whose write landed unanswered, after which another store
// scheduled the task again and again (more writes than the record
// remembers): the record shows another start, so Schedule writes its own
// once more, counting as the later of the calls, and returns the task
// with the start it asked for.
func TestDoubtScheduleConcurrent(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		task := e.submit(CreateParams{Name: "rescheduled"})
		far := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
		other := e.store(nil)
		d := &doubtful{id: task.ID, landed: true, between: func() {
			for i := range doubtWrites {
				if _, err := other.Schedule(e.ctx, task.ID, far.Add(time.Duration(i+1)*time.Minute)); err != nil {
					t.Errorf("setup: the other Schedule: %v", err)
				}
			}
		}}
		got, err := e.store(nil, d.wrap).Schedule(e.ctx, task.ID, far)
		if !d.fired.Load() {
			t.Fatal("setup: the Schedule's write was not made doubtful")
		}
		if err != nil {
			t.Fatalf("Schedule: %v; want the doubt settled", err)
		}
		if r := e.record(task.ID); !got.RunAt.Equal(far) || !r.RunAt.Equal(far) || !r.DueAt.Equal(far) {
			t.Errorf("Schedule returned a start at %v; the record says %v (due %v); want %v", got.RunAt, r.RunAt, r.DueAt, far)
		}
		if got, want := advMarkersOf(e, task.ID), []string{e.admin.MarkerKey(&e.record(task.ID).Task)}; !slices.Equal(got, want) || !strings.Contains(want[0], "/20010101T000000.000Z_") {
			t.Errorf("the task's markers are %v, want only %v, the one of the start asked for", got, want)
		}
	})
}

// A Retry whose write did not land while an automatic retry of the task
// claimed it and renewed the lease more times than the record remembers:
// the task got its next attempt, the goal of the Retry, so Retry reports
// success and writes nothing, rather than retry the task a second time (or
// return ErrOutcomeUnknown).
func TestDoubtRetryAfterAutomaticRetry(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		task := e.submit(CreateParams{Name: "retried by itself", MaxAttempts: 3})
		gate := make(chan struct{})
		var runs atomic.Int32
		w := e.run(e.store(nil), func(ctx context.Context, job *Job) error {
			if runs.Add(1) == 1 {
				return RetryAfter(errors.New("first attempt fails"), time.Minute)
			}
			select {
			case <-gate:
			case <-ctx.Done():
			}
			return nil
		}, &WorkerOptions{ID: "auto", LeaseDuration: 10 * time.Second, HeartbeatInterval: time.Second, ClockMargin: 2 * time.Second})
		defer w.stop()
		defer close(gate)
		advAwait(t, w.started, time.Minute, "the first attempt")
		if !advWaitFor(time.Minute, 100*time.Millisecond, func() bool { return e.record(task.ID).Status == StatusFailed }) {
			t.Fatal("setup: the first attempt did not fail")
		}
		before := e.record(task.ID)
		if before.RetryAt.IsZero() {
			t.Fatal("setup: the failed task has no automatic retry")
		}
		writes := &writesOf{id: task.ID}
		d := &doubtful{id: task.ID, between: func() {
			advAwait(t, w.started, 5*time.Minute, "the automatic retry")
			if !advWaitFor(time.Minute, 100*time.Millisecond, func() bool { return e.record(task.ID).Writes > before.Writes+doubtWrites }) {
				t.Error("setup: the second attempt did not renew its lease")
			}
		}}
		got, err := e.store(nil, writes.wrap, d.wrap).Retry(e.ctx, task.ID)
		if !d.fired.Load() {
			t.Fatal("setup: the Retry's write was not made doubtful")
		}
		if err != nil {
			t.Fatalf("Retry: %v; want success, the task having run again", err)
		}
		if got.Status != StatusRunning || got.Attempt != before.Attempt+1 {
			t.Errorf("Retry returned the task %s at attempt %d, want running at attempt %d", got.Status, got.Attempt, before.Attempt+1)
		}
		if n := writes.n.Load(); n != 0 {
			t.Errorf("Retry wrote the record %d times after the doubt, want none", n)
		}
		if r := e.record(task.ID); r.Status != StatusRunning || r.MaxAttempts != before.MaxAttempts {
			t.Errorf("the task is %s with %d attempts allowed, want running with %d", r.Status, r.MaxAttempts, before.MaxAttempts)
		}
	})
}

// The limit the calls document: a write whose answer is lost while S3
// stays unreachable cannot be settled, and the call says ErrOutcomeUnknown
// once it has tried to read the record back for settleWithin.
func TestDoubtUnreachable(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		task := e.submit(CreateParams{Name: "cut off"})
		link := newAdvLink()
		lose := &advLoseAnswer{match: func(r *http.Request) bool { return advIsRecord(r, http.MethodPut, task.ID) },
			nth: 1, after: func() { link.down(false) }}
		st := e.store(nil, advWrap(link.roundTrip), lose.wrap)
		start := time.Now()
		_, err := st.Cancel(e.ctx, task.ID, "x")
		if !errors.Is(err, ErrOutcomeUnknown) {
			t.Fatalf("Cancel cut off after its write: %v, want ErrOutcomeUnknown", err)
		}
		if took := time.Since(start); took < settleWithin {
			t.Errorf("Cancel gave up after %s, want %s of re-reads", took, settleWithin)
		}
	})
}

// advMarkersOf lists the markers of task id, read straight from the
// backend.
func advMarkersOf(e *advEnv, id string) []string {
	var out []string
	for _, key := range e.mem.Keys(DefaultPrefix + "active/") {
		if strings.HasSuffix(key, "_"+id) || strings.HasSuffix(key, "/"+id) {
			out = append(out, key)
		}
	}
	return out
}

// The state machine's side: an operator's change decided again after a
// write in doubt (event.unsure) finds its goal reached in every state that
// write leads to, and is decided afresh in every other.
func TestDoubtTransition(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := now.Add(time.Hour)
	rec := func(st Status, attempt int, edit ...func(*record)) *record {
		r := &record{Task: Task{SchemaVersion: SchemaVersion, ID: "7ZZZZZZZZZZZZZZZZZZZZZZZZZ", Status: st, Attempt: attempt, MaxAttempts: 3}}
		for _, f := range edit {
			f(r)
		}
		return r
	}
	purging := func(r *record) { r.Purging = true }
	runAt := func(r *record) { r.RunAt = at }
	type result int
	const (
		reachedGoal result = iota // no write, no error
		writes                    // decided afresh: a write
		refused                   // decided afresh: a TransitionError
	)
	type tc struct {
		name string
		t    *record
		e    event
		want result
	}
	unsure := []tc{
		{"cancel/created", rec(StatusCreated, 0), event{kind: evCancel}, writes},
		{"cancel/queued", rec(StatusQueued, 0), event{kind: evCancel}, writes},
		{"cancel/running", rec(StatusRunning, 1), event{kind: evCancel}, writes},
		{"cancel/failed", rec(StatusFailed, 1), event{kind: evCancel}, writes},
		{"cancel/completed", rec(StatusCompleted, 1), event{kind: evCancel}, refused},
		{"cancel/abandoned", rec(StatusAbandoned, 1), event{kind: evCancel}, reachedGoal},
		{"cancel/abandoned, being purged", rec(StatusAbandoned, 1, purging), event{kind: evCancel}, reachedGoal},
		{"cancel/completed, being purged", rec(StatusCompleted, 1, purging), event{kind: evCancel}, refused},

		{"retry/failed, same attempt", rec(StatusFailed, 1), event{kind: evRetry, attempt: 1}, writes},
		{"retry/queued", rec(StatusQueued, 1), event{kind: evRetry, attempt: 1}, reachedGoal},
		{"retry/running the next attempt", rec(StatusRunning, 2), event{kind: evRetry, attempt: 1}, reachedGoal},
		{"retry/completed by the next attempt", rec(StatusCompleted, 2), event{kind: evRetry, attempt: 1}, reachedGoal},
		{"retry/failed again", rec(StatusFailed, 2), event{kind: evRetry, attempt: 1}, reachedGoal},
		{"retry/abandoned after the next attempt", rec(StatusAbandoned, 2), event{kind: evRetry, attempt: 1}, reachedGoal},
		{"retry/abandoned, same attempt", rec(StatusAbandoned, 1), event{kind: evRetry, attempt: 1}, refused},
		{"retry/failed, being purged", rec(StatusFailed, 1, purging), event{kind: evRetry, attempt: 1}, refused},

		{"submit/created", rec(StatusCreated, 0), event{kind: evSubmit}, writes},
		{"submit/queued", rec(StatusQueued, 0), event{kind: evSubmit}, reachedGoal},
		{"submit/running", rec(StatusRunning, 1), event{kind: evSubmit}, reachedGoal},
		{"submit/failed", rec(StatusFailed, 1), event{kind: evSubmit}, reachedGoal},
		{"submit/abandoned before it ran", rec(StatusAbandoned, 0), event{kind: evSubmit}, refused},

		{"schedule/created", rec(StatusCreated, 0), event{kind: evSchedule, at: at}, writes},
		{"schedule/queued, another time", rec(StatusQueued, 0), event{kind: evSchedule, at: at}, writes},
		{"schedule/queued, the time asked", rec(StatusQueued, 0, runAt), event{kind: evSchedule, at: at}, reachedGoal},
		{"schedule/running, the time asked", rec(StatusRunning, 1, runAt), event{kind: evSchedule, at: at}, reachedGoal},
		{"schedule/abandoned, the time asked", rec(StatusAbandoned, 0, runAt), event{kind: evSchedule, at: at}, reachedGoal},
		{"schedule/running, another time", rec(StatusRunning, 1), event{kind: evSchedule, at: at}, refused},
	}
	// Without a write in doubt, the same states are decided as ever.
	sure := []tc{
		{"cancel/abandoned, being purged", rec(StatusAbandoned, 1, purging), event{kind: evCancel}, refused},
		{"retry/queued", rec(StatusQueued, 1), event{kind: evRetry, attempt: 1}, refused},
		{"retry/failed again", rec(StatusFailed, 2), event{kind: evRetry, attempt: 1}, writes},
		{"submit/running", rec(StatusRunning, 1), event{kind: evSubmit}, refused},
		{"schedule/running, the time asked", rec(StatusRunning, 1, runAt), event{kind: evSchedule, at: at}, refused},
	}
	type run struct {
		tc
		unsure bool
	}
	var runs []run
	for _, c := range unsure {
		runs = append(runs, run{c, true})
	}
	for _, c := range sure {
		c.name = "sure/" + c.name
		runs = append(runs, run{c, false})
	}
	for _, c := range runs {
		t.Run(c.name, func(t *testing.T) {
			e := c.e
			e.unsure = c.unsure
			next, write, err := transition(c.t, e, now)
			var got result
			switch {
			case err != nil:
				var te *TransitionError
				if !errors.As(err, &te) {
					t.Fatalf("error %v (%T), want a *TransitionError if any", err, err)
				}
				got = refused
			case write:
				got = writes
			default:
				got = reachedGoal
				if next != c.t {
					t.Errorf("no write, but a record other than the one given")
				}
			}
			if got != c.want {
				t.Errorf("in doubt %t: got %v (write %t, err %v), want %v (0 goal reached, 1 write, 2 refused)", e.unsure, got, write, err, c.want)
			}
		})
	}
}
