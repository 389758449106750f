package s3task_test

// Tests of the task states (Task.State, ParseState) and of the filter by
// state of List and of the bulk actions (ListOptions.States,
// BulkOptions.States): dead told from retrying, scheduled from ready, by
// the server's clock, with full pages and the cursor as for any filter.

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/s3task/s3task"
)

func TestTaskState(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name string
		task s3task.Task
		want s3task.State
	}{
		{"created", s3task.Task{Status: s3task.StatusCreated}, s3task.StateCreated},
		{"created with a start to come", s3task.Task{Status: s3task.StatusCreated, RunAt: now.Add(time.Hour)}, s3task.StateCreated},
		{"queued", s3task.Task{Status: s3task.StatusQueued}, s3task.StateReady},
		{"queued, its start to come", s3task.Task{Status: s3task.StatusQueued, RunAt: now.Add(time.Millisecond)}, s3task.StateScheduled},
		// Task.Scheduled and the claim agree: a start at now may run now.
		{"queued, its start now", s3task.Task{Status: s3task.StatusQueued, RunAt: now}, s3task.StateReady},
		{"queued, its start past", s3task.Task{Status: s3task.StatusQueued, RunAt: now.Add(-time.Hour)}, s3task.StateReady},
		{"running", s3task.Task{Status: s3task.StatusRunning, LeaseExpiresAt: now.Add(time.Minute)}, s3task.StateRunning},
		{"completed", s3task.Task{Status: s3task.StatusCompleted}, s3task.StateCompleted},
		{"failed, its retry to come", s3task.Task{Status: s3task.StatusFailed, RetryAt: now.Add(time.Minute)}, s3task.StateRetrying},
		// A retry due and not yet claimed is still to come.
		{"failed, its retry due", s3task.Task{Status: s3task.StatusFailed, RetryAt: now.Add(-time.Minute)}, s3task.StateRetrying},
		{"failed for good", s3task.Task{Status: s3task.StatusFailed, Attempt: 3, MaxAttempts: 3}, s3task.StateDead},
		{"failed permanently with attempts left", s3task.Task{Status: s3task.StatusFailed, Attempt: 1, MaxAttempts: 3}, s3task.StateDead},
		{"abandoned", s3task.Task{Status: s3task.StatusAbandoned}, s3task.StateAbandoned},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.task.State(now)
			if got != tc.want {
				t.Errorf("State = %q, want %q", got, tc.want)
			}
			if !got.Valid() || got.Status() != tc.task.Status {
				t.Errorf("state %q: Valid %v, Status %q; want a valid state of status %q", got, got.Valid(), got.Status(), tc.task.Status)
			}
			if dead := got == s3task.StateDead; tc.task.Status == s3task.StatusFailed && dead != tc.task.Terminal() {
				t.Errorf("state %q, but Terminal is %v", got, tc.task.Terminal())
			}
		})
	}
}

func TestParseState(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"created", "scheduled", "ready", "running", "completed", "retrying", "dead", "abandoned"} {
		st, err := s3task.ParseState(name)
		if err != nil || string(st) != name || !st.Valid() {
			t.Errorf("ParseState(%q) = %q, %v", name, st, err)
		}
	}
	for _, bad := range []string{"", "queued", "failed", "Dead", " dead", "paused"} {
		st, err := s3task.ParseState(bad)
		var se *s3task.StateError
		if st != "" || !errors.As(err, &se) || se.Value != bad || !errors.Is(err, s3task.ErrInvalidArgument) {
			t.Errorf("ParseState(%q) = %q, %v; want a *StateError wrapping ErrInvalidArgument", bad, st, err)
		}
		if s3task.State(bad).Valid() || s3task.State(bad).Status() != "" {
			t.Errorf("State(%q) is valid, or has a status", bad)
		}
	}
}

// stateTasks makes a task in each state, plus a second dead one (failed
// with every attempt used, the first failed permanently), and returns
// them by name, the server's clock standing before every start and retry
// to come.
func stateTasks(t *testing.T, e *env) map[string]*s3task.Task {
	t.Helper()
	tasks := map[string]*s3task.Task{}
	for _, name := range []string{"created", "ready", "running", "completed", "retrying", "dead", "exhausted", "abandoned", "scheduled"} {
		p := s3task.CreateParams{Name: name}
		state := map[string]string{"ready": "queued", "retrying": "failed-waiting", "dead": "failed", "exhausted": "failed-exhausted", "scheduled": "queued"}[name]
		if state == "" {
			state = name
		}
		if name == "scheduled" {
			p.RunAt = e.srv.Now().Add(time.Hour)
		}
		task, err := e.store.Create(e.ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		tasks[name] = e.prepare(t, task, state)
	}
	return tasks
}

// States filter as they are named, alone or with statuses, and a page
// filtered by state is full: Limit 1 over tasks of which few pass still
// holds one, and paging on with the cursor finds each once.
func TestListStates(t *testing.T) {
	t.Parallel()
	st, e := setup(t, nil)
	tasks := stateTasks(t, e)
	ids := func(names ...string) []string {
		var out []string
		for _, n := range names {
			out = append(out, tasks[n].ID)
		}
		slices.Sort(out) // listing order
		return out
	}
	cases := []struct {
		name string
		opts s3task.ListOptions
		want []string
	}{
		{"dead", s3task.ListOptions{States: []s3task.State{s3task.StateDead}}, ids("dead", "exhausted")},
		{"retrying", s3task.ListOptions{States: []s3task.State{s3task.StateRetrying}}, ids("retrying")},
		{"scheduled", s3task.ListOptions{States: []s3task.State{s3task.StateScheduled}}, ids("scheduled")},
		{"ready", s3task.ListOptions{States: []s3task.State{s3task.StateReady}}, ids("ready")},
		{"dead or retrying", s3task.ListOptions{States: []s3task.State{s3task.StateDead, s3task.StateRetrying}}, ids("dead", "exhausted", "retrying")},
		{"the status failed, for both", s3task.ListOptions{Statuses: []s3task.Status{s3task.StatusFailed}}, ids("dead", "exhausted", "retrying")},
		{"a status and a state of it", s3task.ListOptions{Statuses: []s3task.Status{s3task.StatusFailed}, States: []s3task.State{s3task.StateDead}}, ids("dead", "exhausted")},
		{"a status and a state of another", s3task.ListOptions{Statuses: []s3task.Status{s3task.StatusQueued}, States: []s3task.State{s3task.StateDead}}, nil},
		{"a state with a type", s3task.ListOptions{States: []s3task.State{s3task.StateDead}, Types: []string{"other"}}, nil},
		{"every state", s3task.ListOptions{States: []s3task.State{"created", "scheduled", "ready", "running", "completed", "retrying", "dead", "abandoned"}},
			ids("created", "ready", "running", "completed", "retrying", "dead", "exhausted", "abandoned", "scheduled")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			page, err := st.List(e.ctx, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, taskIDs(page.Tasks)); diff != "" {
				t.Errorf("one page (-want +got):\n%s", diff)
			}
			// A page at a time: each full, the cursor right after its task.
			var got []string
			opts := tc.opts
			opts.Limit = 1
			for range 20 {
				page, err := st.List(e.ctx, opts)
				if err != nil {
					t.Fatal(err)
				}
				if len(page.Tasks) == 0 && page.NextCursor != "" {
					t.Fatalf("an empty page with a cursor after %d tasks", len(got))
				}
				got = append(got, taskIDs(page.Tasks)...)
				if page.NextCursor == "" {
					break
				}
				if want := cursorAfter(page.Tasks[0].ID); page.NextCursor != want {
					t.Errorf("cursor %q, want the one right after the page's task (%q)", page.NextCursor, want)
				}
				opts.Cursor = page.NextCursor
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("paged one at a time (-want +got):\n%s", diff)
			}
		})
	}
}

// A scheduled task is ready once the server's clock reaches its RunAt,
// with no write: the filter judges by the server's clock, as a worker's
// claim does. The test runs in a synctest bubble, where the clock stands
// still while it works, so that "a millisecond before" is exact.
func TestListStatesByServerClock(t *testing.T) { bubble(t, testListStatesByServerClock) }

func testListStatesByServerClock(t *testing.T) {
	st, e := setup(t, nil)
	at := e.srv.Now().Truncate(time.Millisecond).Add(time.Hour)
	task, err := e.store.Create(e.ctx, s3task.CreateParams{Name: "later", RunAt: at})
	if err != nil {
		t.Fatal(err)
	}
	e.prepare(t, task, "queued")
	list := func(state s3task.State) []string {
		t.Helper()
		page, err := st.List(e.ctx, s3task.ListOptions{States: []s3task.State{state}})
		if err != nil {
			t.Fatal(err)
		}
		return taskIDs(page.Tasks)
	}
	e.srv.Advance(at.Sub(e.srv.Now()) - time.Millisecond)
	if got, ready := list(s3task.StateScheduled), list(s3task.StateReady); len(got) != 1 || len(ready) != 0 {
		t.Errorf("a millisecond before its start: scheduled %v, ready %v; want it scheduled", got, ready)
	}
	e.srv.Advance(time.Millisecond)
	if got, ready := list(s3task.StateScheduled), list(s3task.StateReady); len(got) != 0 || len(ready) != 1 {
		t.Errorf("at its start: scheduled %v, ready %v; want it ready", got, ready)
	}
}

// A state that is not one is refused before any request, with a
// *StateError that wraps ErrInvalidArgument, by List and the bulk actions.
func TestListStatesInvalid(t *testing.T) {
	t.Parallel()
	st, e := setup(t, nil)
	for _, bad := range [][]s3task.State{{"failed"}, {s3task.StateDead, ""}, {"DEAD"}} {
		e.count.Reset()
		page, err := st.List(e.ctx, s3task.ListOptions{States: bad})
		var se *s3task.StateError
		if page != nil || !errors.As(err, &se) || !errors.Is(err, s3task.ErrInvalidArgument) {
			t.Errorf("List(States %q) = %v, %v; want a *StateError wrapping ErrInvalidArgument", bad, page, err)
		}
		for _, action := range []string{"retry", "cancel", "purge"} {
			r, err := bulkCall(e.ctx, st, action, "", s3task.BulkOptions{States: bad, DryRun: true})
			if r != nil || !errors.As(err, &se) {
				t.Errorf("%s(States %q) = %v, %v; want a *StateError", action, bad, r, err)
			}
		}
		e.wantCounts(t, map[string]int{})
	}
	// States alone is a filter: a bulk action needs nothing more.
	if _, err := st.CancelMany(e.ctx, "", s3task.BulkOptions{States: []s3task.State{s3task.StateScheduled}, DryRun: true}); err != nil {
		t.Errorf("CancelMany with States alone: %v", err)
	}
	if _, err := st.RetryMany(e.ctx, s3task.BulkOptions{States: []s3task.State{s3task.StateDead}, IDs: []string{s3task.NewID()}}); !errors.Is(err, s3task.ErrInvalidArgument) {
		t.Errorf("RetryMany with States and IDs: %v, want ErrInvalidArgument", err)
	}
}

// RetryMany of the dead tasks retries those failed for good and leaves
// those waiting for their backoff as they are: the dry run over the mix
// names only the dead, and the run does what it said.
func TestRetryManyDead(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	var dead, waiting []*s3task.Task
	for range 3 {
		dead = append(dead, e.bulkTask(t, "import", "failed", nil), e.bulkTask(t, "import", "failed-exhausted", nil))
		waiting = append(waiting, e.bulkTask(t, "import", "failed-waiting", nil))
	}
	opts := s3task.BulkOptions{States: []s3task.State{s3task.StateDead}}

	var r *s3task.BulkReport
	e.unchanged(t, "a dry run", func() {
		var err error
		dry := opts
		dry.DryRun = true
		if r, err = e.store.RetryMany(e.ctx, dry); err != nil {
			t.Fatal(err)
		}
	})
	var want []string
	for _, id := range newestFirst(dead...) {
		want = append(want, id+" would_do")
	}
	wantOutcomes(t, r, want...)
	if r.Scanned != 9 || r.NextCursor != "" {
		t.Errorf("dry run scanned %d, next cursor %q; want all 9, and the end", r.Scanned, r.NextCursor)
	}

	if r, err := e.store.RetryMany(e.ctx, opts); err != nil {
		t.Fatal(err)
	} else {
		want = want[:0]
		for _, id := range newestFirst(dead...) {
			want = append(want, id+" done")
		}
		wantOutcomes(t, r, want...)
	}
	for _, task := range dead {
		if got := e.get(t, task.ID); got.Status != s3task.StatusQueued {
			t.Errorf("dead task %s is %s after the retry, want queued", task.ID, got.Status)
		}
	}
	for _, task := range waiting {
		got := e.get(t, task.ID)
		if got.Status != s3task.StatusFailed || !got.RetryAt.Equal(task.RetryAt) || got.Revision != task.Revision {
			t.Errorf("waiting task %s: %s, retry at %v (was %v); want it untouched", task.ID, got.Status, got.RetryAt, task.RetryAt)
		}
	}
}

// A task's state is judged again at its turn, by its record then and the
// server's clock: a scheduled task whose start comes between the listing
// and the action is skipped by CancelMany of the scheduled tasks, in a
// dry run and in a run, with a reason that names its state. The test runs
// in a synctest bubble, where the clock stands still while it works.
func TestBulkStatesJudgedAtTurn(t *testing.T) {
	for _, dry := range []bool{true, false} {
		t.Run(map[bool]string{true: "dry run", false: "run"}[dry], func(t *testing.T) {
			bubble(t, func(t *testing.T) { testBulkStatesJudgedAtTurn(t, dry) })
		})
	}
}

func testBulkStatesJudgedAtTurn(t *testing.T, dry bool) {
	e := newEnv(t, nil)
	at := e.srv.Now().Truncate(time.Millisecond).Add(time.Hour)
	var tasks []*s3task.Task
	for i, name := range []string{"soon", "later"} {
		task, err := e.store.Create(e.ctx, s3task.CreateParams{Name: name, RunAt: at.Add(time.Duration(i) * time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		tasks = append(tasks, e.prepare(t, task, "queued"))
	}
	soon, later := tasks[0], tasks[1]
	// Once the page is listed, the server's clock reaches soon's start.
	advance := func(next s3task.CallFunc) s3task.CallFunc {
		return func(ctx context.Context, c *s3task.Call) (*s3task.Task, error) {
			task, err := next(ctx, c)
			if c.Op == s3task.OpList {
				e.srv.Advance(at.Sub(e.srv.Now()))
			}
			return task, err
		}
	}
	store := e.newStore(t, &s3task.StoreOptions{Middleware: []s3task.StoreMiddleware{advance}})
	r, err := store.CancelMany(e.ctx, "", s3task.BulkOptions{States: []s3task.State{s3task.StateScheduled}, DryRun: dry})
	if err != nil {
		t.Fatal(err)
	}
	acted := map[bool]string{true: " would_do", false: " done"}[dry]
	want := map[string]string{soon.ID: soon.ID + " skipped: it is ready now", later.ID: later.ID + acted}
	var wantList []string
	for _, id := range newestFirst(soon, later) {
		wantList = append(wantList, want[id])
	}
	wantOutcomes(t, r, wantList...)
	if got := e.get(t, soon.ID); got.Status != s3task.StatusQueued {
		t.Errorf("the task that became ready is %s, want queued", got.Status)
	}
	wantLater := map[bool]s3task.Status{true: s3task.StatusQueued, false: s3task.StatusAbandoned}[dry]
	if got := e.get(t, later.ID); got.Status != wantLater {
		t.Errorf("the scheduled task is %s, want %s", got.Status, wantLater)
	}
}
