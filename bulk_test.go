package s3task_test

// Tests of the bulk actions (Store.RetryMany, CancelMany, PurgeMany): the
// dry run, the selection by filter and by ID, the limit and the cursor,
// changes made by others between the listing and the action, the Store
// middleware on every task, the context's end, and what they cost.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/s3tasktest"
)

// bulkTask creates a task of type typ (with metadata md) and brings it to
// state, as env.task does.
func (e *env) bulkTask(t *testing.T, typ, state string, md map[string]string) *s3task.Task {
	t.Helper()
	task, err := e.store.Create(e.ctx, s3task.CreateParams{Name: typ + " " + state, Type: typ, Metadata: md})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return e.prepare(t, task, state)
}

// outcomes returns "ID outcome" for each result, in order, with the reason
// of a skip or the error of a failure.
func outcomes(r *s3task.BulkReport) []string {
	var out []string
	for _, res := range r.Results {
		line := res.ID + " " + string(res.Outcome)
		var te *s3task.TransitionError
		switch {
		case errors.As(res.Err, &te):
			line += ": " + te.Reason
		case res.Err != nil:
			line += ": " + res.Err.Error()
		}
		out = append(out, line)
	}
	return out
}

// wantOutcomes fails t unless r's results are want, in order: each "ID
// outcome", or "ID outcome: words" that the reason of a skip or the error
// of a failure holds.
func wantOutcomes(t *testing.T, r *s3task.BulkReport, want ...string) {
	t.Helper()
	got := outcomes(r)
	ok := len(got) == len(want)
	for i := 0; ok && i < len(want); i++ {
		head, words, _ := strings.Cut(want[i], ": ")
		ok = strings.HasPrefix(got[i], head) && strings.Contains(got[i][len(head):], words)
	}
	if !ok {
		t.Errorf("results:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	acted, skipped, failed := 0, 0, 0
	for _, res := range r.Results {
		switch res.Outcome {
		case s3task.BulkDone, s3task.BulkWouldDo:
			acted++
		case s3task.BulkSkipped:
			skipped++
		case s3task.BulkFailed:
			failed++
		}
	}
	if r.Acted != acted || r.Skipped != skipped || r.Failed != failed {
		t.Errorf("counts acted %d, skipped %d, failed %d; the results have %d, %d, %d", r.Acted, r.Skipped, r.Failed, acted, skipped, failed)
	}
}

// bulkCall calls store's bulk action for action: retry, cancel (with
// reason) or purge.
func bulkCall(ctx context.Context, store *s3task.Store, action, reason string, opts s3task.BulkOptions) (*s3task.BulkReport, error) {
	switch action {
	case "retry":
		return store.RetryMany(ctx, opts)
	case "cancel":
		return store.CancelMany(ctx, reason, opts)
	}
	return store.PurgeMany(ctx, opts)
}

// newestFirst returns the IDs of tasks in listing order.
func newestFirst(tasks ...*s3task.Task) []string {
	ids := make([]string, len(tasks))
	for i, task := range tasks {
		ids[i] = task.ID
	}
	slices.Sort(ids)
	return ids
}

// A dry run judges every task and writes nothing, by filter and by ID, for
// each action; what it says would be done is what the run then does.
func TestBulkDryRunWritesNothing(t *testing.T) {
	t.Parallel()
	store, e := setup(t, nil)
	failed := e.bulkTask(t, "import", "failed", nil)
	waiting := e.bulkTask(t, "import", "failed-waiting", nil)
	queued := e.bulkTask(t, "import", "queued", nil)
	done := e.bulkTask(t, "import", "completed", nil)
	abandoned := e.bulkTask(t, "import", "abandoned", nil)
	other := e.bulkTask(t, "export", "failed", nil)
	all := []string{failed.ID, waiting.ID, queued.ID, done.ID, abandoned.ID, other.ID}
	e.srv.Advance(time.Minute) // Purge leaves a task until a minute after its last change
	byType := s3task.BulkOptions{Types: []string{"import"}, DryRun: true}
	byID := s3task.BulkOptions{IDs: all, DryRun: true}

	retry := map[string]string{
		failed.ID: "would_do", waiting.ID: "would_do", queued.ID: "skipped: only a failed task",
		done.ID: "skipped: only a failed task", abandoned.ID: "skipped: only a failed task", other.ID: "would_do",
	}
	cancel := map[string]string{
		failed.ID: "would_do", waiting.ID: "would_do", queued.ID: "would_do",
		done.ID: "skipped: already completed", abandoned.ID: "skipped: abandoned already", other.ID: "would_do",
	}
	purge := map[string]string{
		failed.ID: "would_do", waiting.ID: "skipped: only a finished task", queued.ID: "skipped: only a finished task",
		done.ID: "would_do", abandoned.ID: "would_do", other.ID: "would_do",
	}
	for _, tc := range []struct {
		action string
		want   map[string]string
	}{
		{"retry", retry},
		{"cancel", cancel},
		{"purge", purge},
	} {
		for _, sel := range []struct {
			name string
			opts s3task.BulkOptions
			ids  []string
		}{
			{"by type", byType, newestFirst(failed, waiting, queued, done, abandoned)},
			{"by ID", byID, newestFirst(failed, waiting, queued, done, abandoned, other)},
		} {
			t.Run(tc.action+" "+sel.name, func(t *testing.T) {
				var r *s3task.BulkReport
				e.unchanged(t, "a dry run", func() {
					var err error
					if r, err = bulkCall(e.ctx, store, tc.action, "tidy up", sel.opts); err != nil {
						t.Fatal(err)
					}
				})
				var want []string
				for _, id := range sel.ids {
					want = append(want, id+" "+tc.want[id])
				}
				wantOutcomes(t, r, want...)
				if !r.DryRun || r.NextCursor != "" || r.ScanLimited {
					t.Errorf("report: dry run %v, cursor %q, scan limited %v", r.DryRun, r.NextCursor, r.ScanLimited)
				}
				for _, res := range r.Results {
					if res.Outcome == s3task.BulkWouldDo && (res.Task == nil || res.Task.ID != res.ID) {
						t.Errorf("%s: would_do without its task: %+v", res.ID, res.Task)
					}
				}
			})
		}
	}

	// The run does what the dry run said.
	r, err := store.RetryMany(e.ctx, s3task.BulkOptions{Types: []string{"import"}})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, id := range newestFirst(failed, waiting, queued, done, abandoned) {
		want = append(want, id+" "+map[bool]string{true: "done", false: "skipped"}[id == failed.ID || id == waiting.ID])
	}
	wantOutcomes(t, r, want...)
	for _, id := range []string{failed.ID, waiting.ID} {
		if got := e.get(t, id); got.Status != s3task.StatusQueued {
			t.Errorf("%s is %s after RetryMany, want queued", id, got.Status)
		}
	}
}

// Retrying every failed task of a type retries those and leaves every
// other task as it was, byte for byte.
func TestRetryManyFailedOfOneType(t *testing.T) {
	t.Parallel()
	store, e := setup(t, nil)
	var mine []*s3task.Task
	var others []string
	for i := range 4 {
		mine = append(mine, e.bulkTask(t, "import", []string{"failed", "failed-exhausted", "failed-waiting", "failed"}[i], nil))
		others = append(others, e.bulkTask(t, "export", "failed", nil).ID)
		others = append(others, e.bulkTask(t, "import", []string{"queued", "completed", "abandoned", "running"}[i], nil).ID)
	}
	before := map[string]string{}
	for _, id := range others {
		body, _ := e.object(e.recordKey(id))
		before[id] = string(body)
	}
	r, err := store.RetryMany(e.ctx, s3task.BulkOptions{Statuses: []s3task.Status{s3task.StatusFailed}, Types: []string{"import"}})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, id := range newestFirst(mine...) {
		want = append(want, id+" done")
	}
	wantOutcomes(t, r, want...)
	if r.Scanned != 12 || r.ScanLimited || r.NextCursor != "" || len(r.Broken) != 0 {
		t.Errorf("scanned %d, scan limited %v, cursor %q, broken %v; want all 12 scanned, to the end", r.Scanned, r.ScanLimited, r.NextCursor, r.Broken)
	}
	for _, task := range mine {
		got := e.get(t, task.ID)
		if got.Status != s3task.StatusQueued || !e.hasOwnMarker(got) {
			t.Errorf("%s: %s, its marker there: %v; want queued with its marker", task.ID, got.Status, e.hasOwnMarker(got))
		}
		e.wantMarkers(t, task.ID, e.store.MarkerKey(got))
	}
	for _, id := range others {
		if body, _ := e.object(e.recordKey(id)); string(body) != before[id] {
			t.Errorf("RetryMany changed %s, which it did not select", id)
		}
	}
}

// Explicit IDs: each is reported on its own, with a typed error for an
// invalid or unknown one, never a panic and never a request for an invalid
// one; repeated IDs count once. Options that make no sense are refused
// before any request.
func TestBulkByID(t *testing.T) {
	t.Parallel()
	store, e := setup(t, nil)
	failed := e.task(t, "failed")
	done := e.task(t, "completed")
	unknown := s3task.NewID()
	ids := []string{"../" + failed.ID, failed.ID, "active", strings.ToLower(done.ID), "", done.ID, unknown, failed.ID}
	r, err := store.RetryMany(e.ctx, s3task.BulkOptions{IDs: ids})
	if err != nil {
		t.Fatal(err)
	}
	sorted := newestFirst(failed, done, &s3task.Task{ID: unknown})
	want := []string{"../" + failed.ID + " failed", "active failed", strings.ToLower(done.ID) + " failed", " failed"}
	for _, id := range sorted {
		switch id {
		case failed.ID:
			want = append(want, id+" done")
		case done.ID:
			want = append(want, id+" skipped: only a failed task")
		default:
			want = append(want, id+" skipped: not found")
		}
	}
	wantOutcomes(t, r, want...)
	for _, res := range r.Results {
		var ie *s3task.IDError
		switch {
		case res.Outcome == s3task.BulkFailed && !errors.As(res.Err, &ie):
			t.Errorf("%q: %v, want an *IDError", res.ID, res.Err)
		case res.ID == unknown && !errors.Is(res.Err, s3task.ErrNotFound):
			t.Errorf("unknown %s: %v, want ErrNotFound", res.ID, res.Err)
		case res.ID == done.ID && !errors.Is(res.Err, s3task.ErrInvalidTransition):
			t.Errorf("completed %s: %v, want ErrInvalidTransition", res.ID, res.Err)
		}
	}

	// Refused as a whole, with no request.
	tooMany := make([]string, s3task.MaxBulkIDs+1)
	for i := range tooMany {
		tooMany[i] = s3task.NewID()
	}
	e.count.Reset()
	for _, tc := range []struct {
		name, action, reason string
		opts                 s3task.BulkOptions
	}{
		{"too many IDs", "retry", "", s3task.BulkOptions{IDs: tooMany}},
		{"no selection", "cancel", "", s3task.BulkOptions{}},
		{"IDs and a filter", "purge", "", s3task.BulkOptions{IDs: ids, Types: []string{"x"}}},
		{"IDs and MaxScan", "purge", "", s3task.BulkOptions{IDs: ids, MaxScan: 5}},
		{"limit too large", "retry", "", s3task.BulkOptions{IDs: ids, Limit: s3task.MaxBulkLimit + 1}},
		{"negative limit", "retry", "", s3task.BulkOptions{IDs: ids, Limit: -1}},
		{"not a status", "retry", "", s3task.BulkOptions{Statuses: []s3task.Status{"lost"}}},
		{"MaxScan too large", "retry", "", s3task.BulkOptions{Types: []string{"x"}, MaxScan: s3task.MaxListScan + 1}},
		{"a long reason", "cancel", strings.Repeat("x", 1025), s3task.BulkOptions{IDs: ids}},
		{"notices, for Retry", "retry", "", s3task.BulkOptions{IDs: ids, DropPendingNotices: true}},
		{"notices, for Cancel", "cancel", "", s3task.BulkOptions{IDs: ids, DropPendingNotices: true}},
	} {
		if r, err := bulkCall(e.ctx, store, tc.action, tc.reason, tc.opts); !errors.Is(err, s3task.ErrInvalidArgument) || r != nil {
			t.Errorf("%s: %v, %v; want ErrInvalidArgument and no report", tc.name, r, err)
		}
	}
	if _, err := store.RetryMany(e.ctx, s3task.BulkOptions{IDs: ids, Cursor: "%%"}); !errors.Is(err, s3task.ErrInvalidCursor) {
		t.Errorf("a bad cursor: %v, want ErrInvalidCursor", err)
	}
	e.wantCounts(t, map[string]int{})
}

// Paging with a limit and the cursor acts on every selected task exactly
// once, and reports every other task of the selection exactly once,
// whether a call stops at its limit or at its scan bound; by ID as by
// filter.
func TestBulkLimitAndCursor(t *testing.T) {
	t.Parallel()
	store, e := setup(t, nil)
	specs := mixed(60)
	ids := plantTasks(t, e, specs)
	var cancelable, resize []string
	for i, sp := range specs {
		if sp.typ != "resize" {
			continue
		}
		resize = append(resize, ids[i])
		if sp.status != s3task.StatusCompleted && sp.status != s3task.StatusAbandoned {
			cancelable = append(cancelable, ids[i])
		}
	}
	for _, tc := range []struct {
		name string
		opts s3task.BulkOptions
		want []string // the tasks reported, in order
	}{
		{"filter, limit 3", s3task.BulkOptions{Types: []string{"resize"}, Limit: 3}, resize},
		{"filter, limit 4, scan 7", s3task.BulkOptions{Types: []string{"resize"}, Limit: 4, MaxScan: 7}, resize},
		{"filter, scan 1", s3task.BulkOptions{Types: []string{"resize"}, MaxScan: 1}, resize},
		{"IDs, limit 2", s3task.BulkOptions{IDs: append(slices.Clone(resize), resize[3], ids[0]+"x"), Limit: 2}, append([]string{ids[0] + "x"}, resize...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A dry run pages as the run does, each would_do reported once.
			for _, dry := range []bool{true, false} {
				opts := tc.opts
				opts.DryRun = dry
				var reported, acted []string
				for calls := 0; ; calls++ {
					if calls > 200 {
						t.Fatal("the cursor never ran out")
					}
					r, err := store.CancelMany(e.ctx, "bulk", opts)
					if err != nil {
						t.Fatal(err)
					}
					limit := cmpInt(opts.Limit, s3task.DefaultBulkLimit)
					if r.Acted > limit {
						t.Errorf("a call acted on %d tasks, over its limit of %d", r.Acted, limit)
					}
					if opts.MaxScan > 0 && r.Scanned > opts.MaxScan {
						t.Errorf("a call scanned %d, over its bound of %d", r.Scanned, opts.MaxScan)
					}
					if r.ScanLimited && (r.Acted == limit || r.NextCursor == "") {
						t.Errorf("scan limited with %d acted and cursor %q", r.Acted, r.NextCursor)
					}
					for _, res := range r.Results {
						reported = append(reported, res.ID)
						if res.Outcome == s3task.BulkDone || res.Outcome == s3task.BulkWouldDo {
							acted = append(acted, res.ID)
						}
					}
					if r.NextCursor == "" {
						break
					}
					opts.Cursor = r.NextCursor
				}
				if diff := cmp.Diff(tc.want, reported); diff != "" {
					t.Errorf("dry run %v: tasks reported (-want +got):\n%s", dry, diff)
				}
				if diff := cmp.Diff(cancelable, acted); diff != "" {
					t.Errorf("dry run %v: tasks acted on (-want +got):\n%s", dry, diff)
				}
			}
			// Put them back for the next case.
			for _, id := range cancelable {
				e.rewrite(t, id, func(x *stored) { x.Status, x.CancelReason = specs[slices.Index(ids, id)].status, "" })
			}
		})
	}
}

func cmpInt(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// A task changed by someone else between the listing and the action is
// judged against its record as it is then: a task cancelled after the
// listing, and one retried between the action's read and its write, are
// skipped, not failed and not retried twice; a Purge that a Retry beat is
// skipped and deletes nothing.
func TestBulkConcurrentChange(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	var tasks []*s3task.Task
	for range 4 {
		tasks = append(tasks, e.task(t, "failed"))
	}
	ids := newestFirst(tasks...)
	cancelled, raced := ids[1], ids[2]
	var once sync.Once
	meddle := func(next s3task.CallFunc) s3task.CallFunc {
		return func(ctx context.Context, c *s3task.Call) (*s3task.Task, error) {
			switch {
			case c.Op == s3task.OpRetry && c.TaskID == raced:
				// The call has read the record; another operator retries
				// the task before its write.
				if _, err := e.store.Retry(ctx, raced); err != nil {
					t.Errorf("Retry of %s: %v", raced, err)
				}
			case c.Op == s3task.OpPurge && c.TaskID == raced:
				if _, err := e.store.Retry(ctx, raced); err != nil {
					t.Errorf("Retry of %s: %v", raced, err)
				}
			}
			task, err := next(ctx, c)
			if c.Op == s3task.OpList {
				// Listed: another operator cancels a task before its turn.
				once.Do(func() {
					if _, err := e.store.Cancel(ctx, cancelled, "not needed"); err != nil {
						t.Errorf("Cancel of %s: %v", cancelled, err)
					}
				})
			}
			return task, err
		}
	}
	store := e.newStore(t, &s3task.StoreOptions{Middleware: []s3task.StoreMiddleware{meddle}})
	writes := e.stored(t, raced).Writes
	r, err := store.RetryMany(e.ctx, s3task.BulkOptions{Statuses: []s3task.Status{s3task.StatusFailed}})
	if err != nil {
		t.Fatal(err)
	}
	wantOutcomes(t, r, ids[0]+" done", cancelled+" skipped: only a failed task", raced+" skipped: only a failed task", ids[3]+" done")
	var te *s3task.TransitionError
	if res := r.Results[1]; !errors.As(res.Err, &te) || te.From != s3task.StatusAbandoned {
		t.Errorf("the task cancelled after the listing: %v, want judged as abandoned", res.Err)
	}
	if res := r.Results[2]; !errors.As(res.Err, &te) || te.From != s3task.StatusQueued {
		t.Errorf("the task retried meanwhile: %v, want judged as queued", res.Err)
	}
	if got := e.stored(t, raced); got.Status != s3task.StatusQueued || got.Writes != writes+1 {
		t.Errorf("the task retried meanwhile: %s after %d writes; want queued by the one other Retry", got.Status, got.Writes-writes)
	}

	// A Retry that beats the purge's lock keeps the task, whole.
	e.change(t, raced, func(x *stored) { x.Status, x.DueAt = s3task.StatusFailed, time.Time{} })
	files := e.snapshot(e.folder(raced))
	e.srv.Advance(time.Minute) // Purge leaves a task until a minute after its last change
	r, err = store.PurgeMany(e.ctx, s3task.BulkOptions{IDs: []string{raced}})
	if err != nil {
		t.Fatal(err)
	}
	wantOutcomes(t, r, raced+" skipped: only a finished task")
	if got := e.stored(t, raced); got.Status != s3task.StatusQueued || got.Purging {
		t.Errorf("after the raced purge: %s, purging %v; want queued, not purging", got.Status, got.Purging)
	}
	if diff := cmp.Diff(slices.Sorted(maps.Keys(files)), slices.Sorted(maps.Keys(e.snapshot(e.folder(raced))))); diff != "" {
		t.Errorf("the raced purge deleted objects (-before +after):\n%s", diff)
	}
}

// The Store middleware guards every task of a bulk action, dry run
// included: another tenant's tasks are refused one by one and the others
// proceed; a filter is narrowed to the caller's tenant as a List is; a
// refused task's record is not in the report. The middleware sees each
// task's call with its own Op, and a dry run as one.
func TestBulkMiddleware(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	var mu sync.Mutex
	var seen []string
	watch := func(next s3task.CallFunc) s3task.CallFunc {
		return func(ctx context.Context, c *s3task.Call) (*s3task.Task, error) {
			mu.Lock()
			seen = append(seen, fmt.Sprintf("%s dry %v", c.Op, c.DryRun()))
			mu.Unlock()
			return next(ctx, c)
		}
	}
	store := e.newStore(t, &s3task.StoreOptions{Middleware: []s3task.StoreMiddleware{watch, tenantGuard}})
	acme, evil := map[string]string{"tenant": "acme"}, map[string]string{"tenant": "evil"}
	a1, x1 := e.bulkTask(t, "import", "failed-waiting", acme), e.bulkTask(t, "import", "failed", evil)
	a2, x2 := e.bulkTask(t, "import", "completed", acme), e.bulkTask(t, "import", "completed", evil)
	ids := []string{a1.ID, x1.ID, a2.ID, x2.ID}
	e.srv.Advance(time.Minute) // Purge leaves a task until a minute after its last change
	refused := func(id string) string { return id + " failed: " + errOtherTenant.Error() }

	for _, dry := range []bool{true, false} {
		t.Run(fmt.Sprint("dry run ", dry), func(t *testing.T) {
			mu.Lock()
			seen = nil
			mu.Unlock()
			done := map[bool]string{true: " would_do", false: " done"}[dry]
			var r *s3task.BulkReport
			check := func() {
				var err error
				if r, err = store.PurgeMany(asTenant("acme"), s3task.BulkOptions{IDs: ids, DryRun: dry}); err != nil {
					t.Fatal(err)
				}
			}
			if dry {
				e.unchanged(t, "a dry run", check)
			} else {
				check()
			}
			want := map[string]string{a1.ID: a1.ID + " skipped: only a finished task", x1.ID: refused(x1.ID), a2.ID: a2.ID + done, x2.ID: refused(x2.ID)}
			var wantList []string
			for _, id := range newestFirst(a1, x1, a2, x2) {
				wantList = append(wantList, want[id])
			}
			wantOutcomes(t, r, wantList...)
			for _, res := range r.Results {
				if res.Outcome == s3task.BulkFailed && res.Task != nil {
					t.Errorf("the report shows the refused task %s", res.ID)
				}
			}
			mu.Lock()
			for _, s := range seen {
				if s != fmt.Sprintf("purge dry %v", dry) {
					t.Errorf("the middleware saw %q, want only purge calls with DryRun %v", s, dry)
				}
			}
			if len(seen) != 4 {
				t.Errorf("the middleware saw %d calls, want one per task", len(seen))
			}
			mu.Unlock()
		})
	}
	if !s3task.OpPurge.Writes() {
		t.Error("OpPurge.Writes() = false")
	}
	for _, id := range []string{x1.ID, x2.ID} {
		if !e.exists(e.recordKey(id)) {
			t.Errorf("another tenant's task %s was purged", id)
		}
	}

	// A filter lists only the caller's tasks: the other tenant's failed
	// task is not even reported.
	r, err := store.RetryMany(asTenant("acme"), s3task.BulkOptions{Statuses: []s3task.Status{s3task.StatusFailed}})
	if err != nil {
		t.Fatal(err)
	}
	wantOutcomes(t, r, a1.ID+" done")
	r, err = store.RetryMany(asTenant("acme"), s3task.BulkOptions{IDs: []string{x1.ID}})
	if err != nil {
		t.Fatal(err)
	}
	wantOutcomes(t, r, refused(x1.ID))
	if got := e.get(t, x1.ID); got.Status != s3task.StatusFailed {
		t.Errorf("another tenant's task is %s, want failed as it was", got.Status)
	}
	r, err = store.CancelMany(asTenant("evil"), "mine", s3task.BulkOptions{IDs: []string{a1.ID, x1.ID}})
	if err != nil {
		t.Fatal(err)
	}
	wantOutcomes(t, r, newestFirst(a1, x1)[0]+" ", newestFirst(a1, x1)[1]+" ")
	for _, res := range r.Results {
		want := s3task.BulkDone
		if res.ID == a1.ID {
			want = s3task.BulkFailed
		}
		if res.Outcome != want {
			t.Errorf("CancelMany by evil: %s %s, want %s", res.ID, res.Outcome, want)
		}
	}
}

// The context ending mid-way stops the call: it reports what it did, each
// task it took once, and returns the context's error with a cursor from
// which a new call does the rest.
func TestBulkContextEnds(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	specs := make([]planted, 30)
	for i := range specs {
		specs[i] = planted{status: s3task.StatusQueued, typ: "import"}
	}
	ids := plantTasks(t, e, specs)
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	var mu sync.Mutex
	calls := map[string]int{} // OpCancel calls by task
	stop := func(next s3task.CallFunc) s3task.CallFunc {
		return func(callCtx context.Context, c *s3task.Call) (*s3task.Task, error) {
			if i := slices.Index(ids, c.TaskID); i > 5 {
				// A task after the sixth goes on only once the sixth's call
				// has ended the context, however the scheduler runs the
				// calls in flight: so the first call starts no task after the
				// end (a second call finds the context ended already).
				<-ctx.Done()
			}
			task, err := next(callCtx, c)
			if c.TaskID == ids[5] {
				cancel() // an operator's Ctrl-C, after the sixth task
			}
			if c.Op == s3task.OpCancel {
				mu.Lock()
				calls[c.TaskID]++
				mu.Unlock()
			}
			return task, err
		}
	}
	store := e.newStore(t, &s3task.StoreOptions{Middleware: []s3task.StoreMiddleware{stop}})
	opts := s3task.BulkOptions{Types: []string{"import"}, Limit: 100}
	r, err := store.CancelMany(ctx, "stop", opts)
	if !errors.Is(err, context.Canceled) || r == nil {
		t.Fatalf("CancelMany with its context cancelled: %v, %v; want the report and context.Canceled", r, err)
	}
	n := len(r.Results)
	// The sixth task's call ends the context; the tasks started while it
	// ran, which wait for that end (BulkConcurrency-1 at most), are
	// reported too, but no task is started after, so the call stops short.
	if n < 6 || n > 6+s3task.BulkConcurrency-1 || r.NextCursor == "" {
		t.Fatalf("%d tasks reported of %d, cursor %q; want the first 6 and those started before the end (%d at most), and a cursor",
			n, len(ids), r.NextCursor, s3task.BulkConcurrency-1)
	}
	var redo []string
	for i, res := range r.Results {
		if res.ID != ids[i] {
			t.Errorf("result %d is %s, want %s: the tasks taken in order", i, res.ID, ids[i])
		}
		switch res.Outcome {
		case s3task.BulkDone:
			if got := e.get(t, res.ID); got.Status != s3task.StatusAbandoned {
				t.Errorf("%s reported done, but it is %s", res.ID, got.Status)
			}
		case s3task.BulkFailed:
			redo = append(redo, res.ID)
		default:
			t.Errorf("%s: %s", res.ID, res.Outcome)
		}
	}
	for _, id := range ids[n:] {
		if got := e.get(t, id); got.Status != s3task.StatusQueued {
			t.Errorf("%s, not reached, is %s", id, got.Status)
		}
	}

	// A new call goes on from the cursor; the failed ones again by ID.
	opts.Cursor = r.NextCursor
	rest, err := store.CancelMany(e.ctx, "stop", opts)
	if err != nil || rest.NextCursor != "" || rest.Acted != len(ids)-n {
		t.Fatalf("the rest: %v, acted %d, cursor %q; want the other %d done", err, rest.Acted, rest.NextCursor, len(ids)-n)
	}
	if len(redo) > 0 {
		if _, err := store.CancelMany(e.ctx, "stop", s3task.BulkOptions{IDs: redo}); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		if got := e.get(t, id); got.Status != s3task.StatusAbandoned {
			t.Errorf("%s is %s after the rest, want abandoned", id, got.Status)
		}
		if n := calls[id]; n == 0 || n > 2 || (n == 2 && !slices.Contains(redo, id)) {
			t.Errorf("%s was taken %d times", id, n)
		}
	}
}

// What a bulk action costs: a dry run costs the listing alone (one LIST
// and one GET per folder scanned) with a filter, one GET per task by ID;
// a run adds the single call's requests per task it acts on.
func TestBulkCost(t *testing.T) {
	t.Parallel()
	store, e := setup(t, nil)
	var failed []*s3task.Task
	for i := range 20 {
		if i%2 == 0 {
			failed = append(failed, e.bulkTask(t, "import", "failed", nil))
		} else {
			e.bulkTask(t, []string{"export", "import"}[i%4/2], []string{"completed", "queued"}[i%4/2], nil)
		}
	}
	filter := s3task.BulkOptions{Statuses: []s3task.Status{s3task.StatusFailed}, Types: []string{"import"}}
	byID := s3task.BulkOptions{IDs: newestFirst(failed...)}
	n := len(failed)

	measure := func(name string, call func() (*s3task.BulkReport, error), want map[string]int) {
		t.Helper()
		e.count.Reset()
		r, err := call()
		if err != nil {
			t.Fatal(err)
		}
		if r.Acted != n {
			t.Errorf("%s: acted on %d, want %d", name, r.Acted, n)
		}
		got := e.count.Counts()
		if want != nil {
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%s: requests (-want +got):\n%s", name, diff)
			}
		}
		t.Logf("%s, %d tasks: %s", name, n, e.count.String())
	}
	dry := filter
	dry.DryRun = true
	measure("RetryMany dry run, filter", func() (*s3task.BulkReport, error) { return store.RetryMany(e.ctx, dry) },
		map[string]int{"LIST": 1, "GET": 20})
	dry = byID
	dry.DryRun = true
	measure("RetryMany dry run, IDs", func() (*s3task.BulkReport, error) { return store.RetryMany(e.ctx, dry) },
		map[string]int{"GET": n})

	// Retry: per task GET, HEAD, PUT of the marker and the record, and the
	// wake object's GET and PUT, which the 4 calls in flight contend for:
	// those are counted apart, at least one each per task.
	var wakeGets, wakePuts int
	var mu sync.Mutex
	counted := e.newStore(t, nil, e.count.Wrap, func(next http.RoundTripper) http.RoundTripper {
		return s3tasktest.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			if strings.HasSuffix(r.URL.Path, "/_wake") {
				mu.Lock()
				if r.Method == http.MethodGet {
					wakeGets++
				} else {
					wakePuts++
				}
				mu.Unlock()
			}
			return next.RoundTrip(r)
		})
	})
	e.count.Reset()
	r, err := counted.RetryMany(e.ctx, filter)
	if err != nil || r.Acted != n {
		t.Fatalf("RetryMany: %v, acted %d", err, r.Acted)
	}
	got := e.count.Counts()
	t.Logf("RetryMany, %d tasks: %s, of which on the wake object GET=%d PUT=%d", n, e.count.String(), wakeGets, wakePuts)
	got["GET"] -= wakeGets
	got["PUT"] -= wakePuts
	if diff := cmp.Diff(map[string]int{"LIST": 1, "GET": 20 + n, "HEAD": n, "PUT": 2 * n}, got); diff != "" {
		t.Errorf("RetryMany: requests but the wake object's (-want +got):\n%s", diff)
	}
	// The Retries' announcements share the Store's writes of the wake
	// object (a group commit): one write or more, at most one a task,
	// that no other write of this Store races. Only the first reads the
	// object: the others write over the copy the Store keeps of what it
	// wrote last, which no one else changed.
	if wakePuts < 1 || wakePuts > n || wakeGets != 1 {
		t.Errorf("the wake object: %d GETs and %d PUTs, want one GET and 1 to %d PUTs", wakeGets, wakePuts, n)
	}

	// Cancel, now that they are queued: GET, PUT, DELETE of the marker.
	measure("CancelMany, IDs", func() (*s3task.BulkReport, error) { return store.CancelMany(e.ctx, "", byID) },
		map[string]int{"GET": n, "PUT": n, "DELETE": n})
	// Purge of the abandoned tasks (a folder of the record and the input):
	// GET, PUT of the lock, LIST of the folder, one DeleteObjects (a POST),
	// DELETEs of the marker and the record.
	e.srv.Advance(time.Minute) // Purge leaves a task until a minute after its last change
	dry = s3task.BulkOptions{Statuses: []s3task.Status{s3task.StatusAbandoned}, DryRun: true}
	measure("PurgeMany dry run, filter", func() (*s3task.BulkReport, error) { return store.PurgeMany(e.ctx, dry) },
		map[string]int{"LIST": 1, "GET": 20})
	measure("PurgeMany, filter", func() (*s3task.BulkReport, error) {
		return store.PurgeMany(e.ctx, s3task.BulkOptions{Statuses: []s3task.Status{s3task.StatusAbandoned}})
	}, map[string]int{"LIST": 1 + n, "GET": 20 + n, "PUT": n, "POST": n, "DELETE": 2 * n})
}

// TestBulkMiddlewarePanic: a middleware that panics on one task's call
// panics the bulk action's caller, as the single call would, on the
// caller's goroutine (where net/http, say, recovers it), not on a goroutine
// of the action's, where it would end the process.
func TestBulkMiddlewarePanic(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	var ids []string
	for i := range 8 {
		task, err := e.store.Create(e.ctx, s3task.CreateParams{Name: fmt.Sprint("task ", i)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, task.ID)
	}
	bad := ids[2]
	type oops struct{ id string }
	store := e.newStore(t, &s3task.StoreOptions{Middleware: []s3task.StoreMiddleware{func(next s3task.CallFunc) s3task.CallFunc {
		return func(ctx context.Context, c *s3task.Call) (*s3task.Task, error) {
			if c.TaskID == bad {
				panic(oops{c.TaskID})
			}
			return next(ctx, c)
		}
	}}})
	got := func() (p any) {
		defer func() { p = recover() }()
		r, err := store.CancelMany(e.ctx, "no longer wanted", s3task.BulkOptions{IDs: ids})
		t.Errorf("CancelMany returned %+v, %v; want it to panic", r, err)
		return nil
	}()
	if got != (oops{bad}) {
		t.Errorf("CancelMany panicked with %v, want the middleware's panic %v", got, oops{bad})
	}
}
