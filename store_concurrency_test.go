package s3task_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

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
	_, e := setup(t, nil)

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
		start := make(chan struct{})
		var wg sync.WaitGroup
		for g := range goroutines {
			task := g % tasks
			c := &raceCall{op: mixes[round][g/tasks], retries: retries[g]}
			if c.op == "cancel" {
				c.reason = fmt.Sprintf("round %d goroutine %d", round, g)
			}
			calls[task] = append(calls[task], c)
			id := initial[task].ID
			wg.Go(func() {
				<-start
				st := stores[g]
				switch c.op {
				case "submit":
					c.got, c.err = st.Submit(e.ctx, id)
				case "cancel":
					c.got, c.err = st.Cancel(e.ctx, id, c.reason)
				case "retry":
					c.got, c.err = st.Retry(e.ctx, id)
				}
			})
		}
		close(start)
		wg.Wait()

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
			final, err := e.admin.Get(e.ctx, init.ID)
			if err != nil {
				t.Fatal(err)
			}
			markers := e.markers(t, init.ID)
			own := e.dueMarkerKey(final)
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
func checkRace(t *testing.T, init *s3task.Task, inputETag string, calls []*raceCall, final *s3task.Task, own string, markers []string) {
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

// statusPuts counts S3's successful answers to status.json PUTs across many
// clients.
type statusPuts struct {
	mu sync.Mutex
	ok int
}

func (s *statusPuts) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := next.RoundTrip(req)
		if err == nil && req.Method == http.MethodPut && strings.HasSuffix(req.URL.Path, "/status.json") && resp.StatusCode == http.StatusOK {
			s.mu.Lock()
			s.ok++
			s.mu.Unlock()
		}
		return resp, err
	})
}

// TestConcurrentSubmit: many machines submit the same created task at once.
// Exactly one write may happen; everybody else sees it.
func TestConcurrentSubmit(t *testing.T) {
	t.Parallel()
	const goroutines = 16
	_, e := setup(t, nil)
	var puts statusPuts
	stores := make([]*s3task.Store, goroutines)
	for g := range stores {
		stores[g] = e.newStore(t, nil, puts.wrap)
	}
	for round := range 3 {
		task := e.task(t, "created")
		results := make([]*s3task.Task, goroutines)
		errs := make([]error, goroutines)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Go(func() {
				<-start
				results[g], errs[g] = stores[g].Submit(e.ctx, task.ID)
			})
		}
		puts.mu.Lock()
		puts.ok = 0
		puts.mu.Unlock()
		close(start)
		wg.Wait()

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
		final, err := e.admin.Get(e.ctx, task.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(revs) != 1 || revs[final.Revision] == 0 {
			t.Errorf("round %d: returned revisions %v, want only the final one %s", round, revs, final.Revision)
		}
		if final.Status != s3task.StatusQueued || final.InputETag == "" {
			t.Errorf("round %d: final record %s with input_etag %q", round, final.Status, final.InputETag)
		}
		// Every Submit wrote a marker before its record write; those that
		// lost took theirs back.
		if diff := cmp.Diff([]string{e.dueMarkerKey(final)}, e.markers(t, task.ID)); diff != "" {
			t.Errorf("round %d: markers after the race (-want +got):\n%s", round, diff)
		}
		puts.mu.Lock()
		if puts.ok != 1 {
			t.Errorf("round %d: %d record writes succeeded, want exactly 1", round, puts.ok)
		}
		puts.mu.Unlock()
	}
}
