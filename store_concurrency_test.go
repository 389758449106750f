package s3task_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/google/go-cmp/cmp"

	"github.com/s3task/s3task"
)

// raceCall is one operator call made during a race, with its outcome.
type raceCall struct {
	op      string // "submit", "cancel" or "retry"
	reason  string // cancel only; unique per call
	retries int    // the ConflictRetries of the calling store
	got     *s3task.Task
	err     error
}

// TestConcurrentOperatorCalls races Submit, Cancel and Retry from 32
// goroutines, each with its own S3 client and Store (32 "machines"), on a few
// tasks, for several rounds, then checks that the outcome is one some serial
// order of the successful calls would give, and that no call claimed a write
// that another overwrote.
//
// Why these checks hold: every status change is a compare-and-set on the
// previous ETag, so the writes to one task form a single chain. The state
// machine allows at most one write per status along that chain here (created
// or failed -> queued -> abandoned, abandoned is final), and each write is made
// by exactly one call, which reports success. A call that only saw what
// another wrote returns the stored record unchanged. So for each status at
// most one revision may ever be reported.
func TestConcurrentOperatorCalls(t *testing.T) {
	t.Parallel()
	const (
		goroutines = 32
		rounds     = 4
		tasks      = 4 // per round; even ones start created, odd ones failed
	)
	e := newEnv(t, nil)

	stores := make([]*s3task.Store, goroutines)
	retries := make([]int, goroutines)
	for g := range stores {
		// Half the stores give up after a single lost compare-and-set, so
		// that ErrConflict can really happen.
		opts := &s3task.StoreOptions{ConflictRetries: 1}
		retries[g] = 1
		if g%2 == 1 {
			opts, retries[g] = nil, s3task.DefaultConflictRetries
		}
		stores[g] = e.newStore(t, opts)
	}
	// What the 8 callers of each task do, by round: queueing calls racing
	// each other alone, then with one cancel among them, then mixed, then
	// mostly cancels.
	mixes := [rounds][goroutines / tasks]string{
		{"submit", "retry", "submit", "retry", "submit", "retry", "submit", "retry"},
		{"submit", "retry", "submit", "retry", "submit", "retry", "submit", "cancel"},
		{"cancel", "submit", "retry", "cancel", "submit", "retry", "cancel", "submit"},
		{"cancel", "cancel", "cancel", "cancel", "submit", "retry", "submit", "retry"},
	}
	outcomes := map[string]int{} // "op: outcome" over every round, logged for the curious

	for round := range rounds {
		initial := make([]*s3task.Task, tasks)
		inputETag := make([]string, tasks)
		for i := range initial {
			if i%2 == 0 {
				initial[i] = e.task(t, "created")
				inputETag[i] = e.put(t, e.inputKey(t, initial[i].ID), []byte(fmt.Sprintf("round %d task %d", round, i)))
			} else {
				initial[i] = e.task(t, "failed-exhausted")
			}
		}

		calls := make([][]*raceCall, tasks)
		racers := make([]func(), goroutines)
		for g := range goroutines {
			task := g % tasks
			c := &raceCall{op: mixes[round][g/tasks], retries: retries[g]}
			if c.op == "cancel" {
				c.reason = fmt.Sprintf("round %d goroutine %d", round, g)
			}
			calls[task] = append(calls[task], c)
			id := initial[task].ID
			racers[g] = func() {
				st := stores[g]
				switch c.op {
				case "submit":
					c.got, c.err = st.Submit(e.ctx, id)
				case "cancel":
					c.got, c.err = st.Cancel(e.ctx, id, c.reason)
				case "retry":
					c.got, c.err = st.Retry(e.ctx, id)
				}
			}
		}
		race(racers...)

		for i, init := range initial {
			for _, c := range calls[i] {
				outcome := "ok"
				switch {
				case errors.Is(c.err, s3task.ErrConflict):
					outcome = "conflict"
				case errors.Is(c.err, s3task.ErrInvalidTransition):
					outcome = "refused"
				case c.err != nil:
					outcome = "error"
				}
				outcomes[fmt.Sprintf("%s from %s: %s", c.op, init.Status, outcome)]++
			}
			final := e.stored(t, init.ID)
			markers := e.markers(init.ID)
			own := e.dueMarkerKey(&final.Task)
			t.Run(fmt.Sprintf("round %d task %d from %s", round, i, init.Status), func(t *testing.T) {
				checkRace(t, init, inputETag[i], calls[i], final, own, markers)
			})
		}
	}
	t.Logf("outcomes: %v", outcomes)
}

// checkRace checks the outcome of one task's race; see
// TestConcurrentOperatorCalls.
// own is the key of the marker the final record calls for, markers the
// task's markers after the race.
func checkRace(t *testing.T, init *s3task.Task, inputETag string, calls []*raceCall, final *stored, own string, markers []string) {
	t.Helper()
	fromCreated := init.Status == s3task.StatusCreated
	revs := map[s3task.Status]map[string]bool{} // reported revisions by status
	var cancelled, retried, submitted, conflicts []*raceCall
	for _, c := range calls {
		if c.err != nil {
			switch {
			case errors.Is(c.err, s3task.ErrConflict):
				conflicts = append(conflicts, c)
			case errors.Is(c.err, s3task.ErrInvalidTransition):
			default:
				t.Errorf("%s: unexpected error %v", c.op, c.err)
			}
			if c.got != nil {
				t.Errorf("%s returned a task with error %v", c.op, c.err)
			}
			continue
		}
		want := s3task.StatusQueued
		switch c.op {
		case "cancel":
			want = s3task.StatusAbandoned
			cancelled = append(cancelled, c)
		case "retry":
			retried = append(retried, c)
		case "submit":
			submitted = append(submitted, c)
		}
		if c.got.Status != want {
			t.Errorf("successful %s returned status %s, want %s", c.op, c.got.Status, want)
			continue
		}
		if c.got.Revision == init.Revision {
			t.Errorf("successful %s returned the initial revision with status %s", c.op, c.got.Status)
		}
		if revs[want] == nil {
			revs[want] = map[string]bool{}
		}
		revs[want][c.got.Revision] = true
	}

	// At most one write per status, so at most one revision each: two
	// would mean two calls both believed they made the same change.
	for status, set := range revs {
		if len(set) > 1 {
			t.Errorf("%d different %s revisions reported: %v", len(set), status, set)
		}
	}
	writes := len(revs[s3task.StatusQueued]) + len(revs[s3task.StatusAbandoned])
	rev := func(s s3task.Status) string {
		for r := range revs[s] {
			return r
		}
		return ""
	}

	// Every cancel that succeeded reports the one abandoned record, whose
	// reason is that of one of them: the call that wrote it.
	if len(cancelled) > 0 {
		writer := false
		for _, c := range cancelled {
			if c.got.CancelReason != cancelled[0].got.CancelReason {
				t.Errorf("cancels report reasons %q and %q", c.got.CancelReason, cancelled[0].got.CancelReason)
			}
			writer = writer || c.reason == c.got.CancelReason
		}
		if !writer {
			t.Errorf("abandoned record has reason %q, which no successful cancel gave", cancelled[0].got.CancelReason)
		}
	}

	// Retry changes a failed task only: at most one can succeed, and none
	// on a task that never failed.
	if fromCreated && len(retried) > 0 {
		t.Errorf("%d retries of a never-failed task succeeded", len(retried))
	}
	if len(retried) > 1 {
		t.Errorf("%d retries succeeded, at most one can have changed the task", len(retried))
	}
	// Submit succeeds only while the task is created or queued: on a failed
	// task, only after a retry queued it.
	if !fromCreated && len(submitted) > 0 && len(retried) != 1 {
		t.Errorf("%d submits of a failed task succeeded without a successful retry", len(submitted))
	}

	// The final record is the last write of the chain.
	queued := rev(s3task.StatusQueued) != ""
	switch {
	case len(cancelled) > 0:
		if final.Status != s3task.StatusAbandoned || final.Revision != rev(s3task.StatusAbandoned) {
			t.Errorf("a cancel succeeded, but the final record is %s revision %s; want abandoned revision %s",
				final.Status, final.Revision, rev(s3task.StatusAbandoned))
		}
		// Legal order: the cancel built on the queued record exactly when
		// a queueing call reported success.
		if fromCreated && (final.InputETag != "") != queued {
			t.Errorf("abandoned record input_etag %q, but a submit reported queued: %v", final.InputETag, queued)
		}
		if !fromCreated && (final.MaxAttempts == init.MaxAttempts+1) != queued {
			t.Errorf("abandoned record max_attempts %d (initially %d), but a retry reported queued: %v",
				final.MaxAttempts, init.MaxAttempts, queued)
		}
	case queued:
		if final.Status != s3task.StatusQueued || final.Revision != rev(s3task.StatusQueued) {
			t.Errorf("final record is %s revision %s, want queued revision %s", final.Status, final.Revision, rev(s3task.StatusQueued))
		}
	default:
		if final.Status != init.Status || final.Revision != init.Revision {
			t.Errorf("no call reported a change, but the record went from %s %s to %s %s",
				init.Status, init.Revision, final.Status, final.Revision)
		}
	}
	if final.Status == s3task.StatusQueued {
		if fromCreated && final.InputETag != inputETag {
			t.Errorf("queued record has input_etag %q, want %q", final.InputETag, inputETag)
		}
		if !fromCreated && (final.MaxAttempts != init.Attempt+1 || !final.RetryAt.IsZero()) {
			t.Errorf("retried record: max_attempts %d, retry_at %v", final.MaxAttempts, final.RetryAt)
		}
	}
	// The queued task has the marker its record calls for; a task that
	// needs none has none. The markers of the calls that lost are gone.
	var want []string
	if final.Status == s3task.StatusQueued {
		want = []string{own}
	}
	if diff := cmp.Diff(want, markers, cmpEmpty); diff != "" {
		t.Errorf("markers of the %s task after the race (-want +got):\n%s", final.Status, diff)
	}

	// ErrConflict only after real contention: the call must have lost
	// retries+1 compare-and-sets, each to a write of another call.
	for _, c := range conflicts {
		if writes < c.retries+1 {
			t.Errorf("%s returned ErrConflict with ConflictRetries %d, but only %d writes happened", c.op, c.retries, writes)
		}
	}
}

// TestConcurrentSubmit: many machines submit the same created task at once.
// Exactly one write may happen; everybody else sees it.
func TestConcurrentSubmit(t *testing.T) {
	t.Parallel()
	const goroutines = 16
	e := newEnv(t, nil)
	var rec recorder
	stores := make([]*s3task.Store, goroutines)
	for g := range stores {
		stores[g] = e.newStore(t, nil, rec.wrap)
	}
	for round := range 3 {
		task := e.task(t, "created")
		results := make([]*s3task.Task, goroutines)
		errs := make([]error, goroutines)
		racers := make([]func(), goroutines)
		for g := range racers {
			racers[g] = func() { results[g], errs[g] = stores[g].Submit(e.ctx, task.ID) }
		}
		rec.reset()
		race(racers...)

		revs := map[string]int{}
		for g := range goroutines {
			switch {
			case errs[g] == nil:
				if results[g].Status != s3task.StatusQueued {
					t.Errorf("round %d: Submit returned status %s", round, results[g].Status)
				}
				revs[results[g].Revision]++
			case errors.Is(errs[g], s3task.ErrConflict):
			default:
				t.Errorf("round %d: Submit: %v", round, errs[g])
			}
		}
		final := e.stored(t, task.ID)
		if len(revs) != 1 || revs[final.Revision] == 0 {
			t.Errorf("round %d: returned revisions %v, want only the final one %s", round, revs, final.Revision)
		}
		if final.Status != s3task.StatusQueued || final.InputETag == "" {
			t.Errorf("round %d: final record %s with input_etag %q", round, final.Status, final.InputETag)
		}
		// Every Submit wrote a marker before its record write; those that
		// lost took theirs back.
		if diff := cmp.Diff([]string{e.dueMarkerKey(&final.Task)}, e.markers(task.ID)); diff != "" {
			t.Errorf("round %d: markers after the race (-want +got):\n%s", round, diff)
		}
		if n := rec.succeeded("PUT " + e.recordKey(task.ID)); n != 1 {
			t.Errorf("round %d: %d record writes succeeded, want exactly 1", round, n)
		}
	}
}

// TestReconcileConcurrentWithWorkers runs reconciles in a loop from several
// processes while workers run fifty tasks and an operator retries the ones
// that failed. Reconcile only ever adds or drops markers, racing with every
// other writer of them; nothing may be lost.
func TestReconcileConcurrentWithWorkers(t *testing.T) {
	t.Parallel()
	e := setupOps(t)
	const (
		tasks       = 50
		failEvery   = 5 // every fifth task fails for good on its first attempt
		reconcilers = 3
	)

	failures := make(chan *s3task.Task, tasks)
	hooks := s3task.Hooks{OnFail: func(t *s3task.Task, _ error) {
		if t.Terminal() {
			failures <- t
		}
	}}
	handler := s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		if strings.HasPrefix(job.Task.Name, "fail-first") && job.Task.Attempt == 1 {
			return s3task.Permanent(errors.New("first attempt fails"))
		}
		return job.WriteOutput(ctx, strings.NewReader("done\n"))
	})

	// The reconcilers run from before the first task until the operator
	// has retried every failure.
	stop := make(chan struct{})
	var runs atomic.Int64
	var wg sync.WaitGroup
	for i := range reconcilers {
		st := e.newStore(t, nil)
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				r, err := st.Reconcile(e.ctx, s3task.ReconcileOptions{})
				if err != nil {
					t.Errorf("reconciler %d: %v", i, err)
					return
				}
				if len(r.Broken) > 0 {
					t.Errorf("reconciler %d: broken records %v", i, r.Broken)
				}
				runs.Add(1)
			}
		})
	}
	stopReconcilers := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopReconcilers)

	var workers []func()
	for range 2 {
		opts := quickWorker("", hooks)
		opts.Concurrency = 3
		workers = append(workers, runWorker(t, e.newStore(t, nil), handler, opts))
	}

	ids := make([]string, tasks)
	wantAttempt := map[string]int{}
	for i := range tasks {
		name := fmt.Sprintf("task %d", i)
		if i%failEvery == 0 {
			name = fmt.Sprintf("fail-first %d", i)
		}
		task := e.submit(t, name)
		ids[i] = task.ID
		wantAttempt[task.ID] = 1
		if i%failEvery == 0 {
			wantAttempt[task.ID] = 2
		}
	}

	operator := e.newStore(t, nil)
	for range tasks / failEvery {
		f := await(t, failures, "a task's final failure")
		if got, err := operator.Retry(e.ctx, f.ID); err != nil || got.Status != s3task.StatusQueued {
			t.Fatalf("Retry(%s) = %v, %v; want it queued", f.ID, got, err)
		}
	}
	stopReconcilers()
	if runs.Load() < reconcilers {
		t.Errorf("only %d reconcile runs completed", runs.Load())
	}

	// With everything stopped, the index must be whole: every task a worker
	// still has to run has the marker its record calls for. (A graceful
	// stop puts interrupted tasks back in the queue, with a marker due now.)
	for _, stopWorker := range workers {
		stopWorker()
	}
	for _, id := range ids {
		if task := e.get(t, id); !task.Terminal() && task.Status != s3task.StatusCreated && !e.hasOwnMarker(task) {
			t.Errorf("task %s (%s) is %s without its marker %s after the reconciles (it has %v)", id, task.Name, task.Status, e.store.MarkerKey(task), e.markers(id))
		}
	}
	workers = nil
	for range 2 {
		opts := quickWorker("", hooks)
		opts.Concurrency = 3
		workers = append(workers, runWorker(t, e.newStore(t, nil), handler, opts))
	}

	// From here only markers lead workers to tasks (the workers run no
	// reconcile of their own): a marker lost on the way strands its task.
	stranded := func() []string {
		var out []string
		for _, id := range ids {
			if task := e.get(t, id); task.Status != s3task.StatusCompleted {
				out = append(out, fmt.Sprintf("%s %s (marker %t)", id, task.Status, e.hasMarker(id)))
			}
		}
		return out
	}
	waitUntilOr(t, "every task completes after the last retry", func() bool { return len(stranded()) == 0 },
		func() string { return strings.Join(stranded(), "\n") })
	for _, id := range ids {
		if got := e.get(t, id); got.Attempt != wantAttempt[id] {
			t.Errorf("task %s (%s) completed at attempt %d, want %d", id, got.Name, got.Attempt, wantAttempt[id])
		}
	}

	// Stale markers (a reconcile that restored a marker the task's next
	// phase had just replaced) are dropped by the workers as they visit
	// them once due, if they were written before the record's last change.
	// Those written within the skew allowance of it are left to the
	// change's writer for a few seconds, so a worker may or may not have
	// dropped them yet when it stops; whatever is left, the reconcile
	// below drops.
	var kept []string
	leftovers := func() bool {
		kept = kept[:0]
		for _, m := range e.listMarkers(t) {
			task, err := e.store.Get(e.ctx, m.id)
			if err != nil || task.Status != s3task.StatusCompleted || m.key == e.store.MarkerKey(task) ||
				m.written.Before(task.UpdatedAt.Add(-2*time.Second)) {
				return false
			}
			kept = append(kept, m.key)
		}
		return true
	}
	waitUntilOr(t, "the workers drop every marker of a phase that is over", leftovers,
		func() string { return e.describeMarkers(t) })
	for _, stopWorker := range workers {
		stopWorker()
	}
	if !leftovers() {
		t.Fatalf("after the workers stopped, a marker is left that is not a completed task's leftover:\n%s", e.describeMarkers(t))
	}
	e.srv.Advance(11 * time.Minute)
	r, err := e.newStore(t, nil).Reconcile(e.ctx, s3task.ReconcileOptions{})
	if err != nil || r.Tasks != tasks || len(r.Restored) != 0 || len(r.Broken) != 0 {
		t.Errorf("Reconcile ten minutes on = %+v, %v; want a run over %d tasks that restores nothing", r, err, tasks)
	} else if diff := cmp.Diff(kept, r.Removed, cmpSet); diff != "" {
		t.Errorf("Reconcile ten minutes on: Removed (-want the markers the workers kept +got):\n%s", diff)
	}
	if left := e.snapshot(e.store.Prefix() + "active/"); len(left) != 0 {
		t.Errorf("markers left after the last reconcile: %v", left)
	}
	r, err = e.newStore(t, nil).Reconcile(e.ctx, s3task.ReconcileOptions{})
	if err != nil || !r.Clean() || r.Tasks != tasks {
		t.Errorf("final Reconcile = %+v, %v; want a clean run over %d tasks", r, err, tasks)
	}
}

// listedMarker is a marker as a LIST shows it.
type listedMarker struct {
	key, id string
	written time.Time
}

// listMarkers lists the marker folder.
func (e *env) listMarkers(t *testing.T) []listedMarker {
	t.Helper()
	var ms []listedMarker
	dir := e.store.Prefix() + "active/"
	p := s3.NewListObjectsV2Paginator(e.raw.Client, &s3.ListObjectsV2Input{Bucket: &e.raw.Bucket, Prefix: &dir})
	for p.HasMorePages() {
		out, err := p.NextPage(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range out.Contents {
			key := aws.ToString(o.Key)
			ms = append(ms, listedMarker{key: key, id: key[strings.LastIndexAny(key, "/_")+1:], written: aws.ToTime(o.LastModified)})
		}
	}
	return ms
}

// describeMarkers lists the markers with when each was written and the
// record of its task, for a failure message.
func (e *env) describeMarkers(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "server now %s\n", e.srv.Now().UTC().Format(time.RFC3339Nano))
	for _, m := range e.listMarkers(t) {
		fmt.Fprintf(&b, "%s written %s", m.key, m.written.UTC().Format(time.RFC3339))
		if task, err := e.store.Get(e.ctx, m.id); err == nil {
			fmt.Fprintf(&b, ": %s, updated %s, due %s, calls for %s", task.Status, task.UpdatedAt.Format(time.RFC3339Nano), task.DueAt.Format(time.RFC3339Nano), e.store.MarkerKey(task))
		} else {
			fmt.Fprintf(&b, ": %v", err)
		}
		b.WriteString("\n")
	}
	return b.String()
}
