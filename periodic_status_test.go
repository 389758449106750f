package s3task

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/s3task/s3task/internal/s3test"
)

// periodicOpts are the options of a Store with periodics ps, each of type
// "export", declared without input.
func periodicOpts(ps ...Periodic) *StoreOptions {
	return &StoreOptions{Files: map[string]FileOptions{"export": {NoInput: true}}, Periodic: ps}
}

// periodicsOf calls st.Periodics, failing t on an error.
func periodicsOf(t *testing.T, st *Store) *PeriodicList {
	t.Helper()
	list, err := st.Periodics(context.Background())
	if err != nil {
		t.Fatalf("Periodics: %v", err)
	}
	return list
}

// runOf makes the run of st's periodic named name for the period that
// starts at start, as the holder of the reconciler lease makes it.
func runOf(t *testing.T, st *Store, name string, start time.Time) *Task {
	t.Helper()
	for i := range st.opts.Periodic {
		if p := &st.opts.Periodic[i]; p.Name == name {
			task, err := st.enqueueRun(context.Background(), p, start)
			if err != nil {
				t.Fatalf("the run of %s for %s: %v", name, start, err)
			}
			return task
		}
	}
	t.Fatalf("no periodic %s", name)
	return nil
}

// A Store that declares no periodic task lists none, at no cost.
func TestPeriodicsNone(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		var reqs s3test.Counter
		list := periodicsOf(t, e.store(nil, reqs.Wrap))
		if len(list.Periodics) != 0 || list.At.IsZero() {
			t.Errorf("no periodics declared: %+v", list)
		}
		if n := reqs.Total(); n != 0 {
			t.Errorf("no periodics declared: %d requests (%s), want none", n, reqs.String())
		}
	})
}

// Declared periodics with no run yet are listed in their order, with the
// start of their latest and next periods by the server's clock, and no
// run: two GETs each, the latest period's key and the one before it.
func TestPeriodicsNoRunYet(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		time.Sleep(7 * time.Minute) // 2000-01-01 00:07 UTC in the bubble
		now := time.Now().UTC()
		ps := []Periodic{
			{Name: "often", Schedule: Every(5 * time.Minute), Params: CreateParams{Type: "export"}},
			{Name: "nightly", Schedule: Daily(2, 0, nil), Params: CreateParams{Type: "export", Metadata: map[string]string{"team": "ops"}}, Missed: RunMissedOnce},
		}
		var reqs s3test.Counter
		st := e.store(periodicOpts(ps...), reqs.Wrap)
		list := periodicsOf(t, st)
		if !list.At.Equal(now) {
			t.Errorf("At = %s, want the server's time %s", list.At, now)
		}
		if len(list.Periodics) != 2 {
			t.Fatalf("listed %d periodics, want 2: %+v", len(list.Periodics), list.Periodics)
		}
		day := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
		for i, want := range []struct {
			prev, next time.Time
		}{
			{day.Add(5 * time.Minute), day.Add(10 * time.Minute)},
			{day.Add(-22 * time.Hour), day.Add(2 * time.Hour)},
		} {
			got := list.Periodics[i]
			if got.Periodic.Name != ps[i].Name || got.Periodic.Schedule != ps[i].Schedule || got.Periodic.Missed != ps[i].Missed {
				t.Errorf("[%d] is %+v, want the declaration %+v", i, got.Periodic, ps[i])
			}
			if !got.Prev.Equal(want.prev) || !got.Next.Equal(want.next) {
				t.Errorf("%s: Prev %s, Next %s; want %s, %s", got.Periodic.Name, got.Prev, got.Next, want.prev, want.next)
			}
			if !got.LastPeriod.IsZero() || got.LastID != "" || got.Last != nil || got.Purged || got.Err != nil {
				t.Errorf("%s before any run: %+v", got.Periodic.Name, got)
			}
		}
		if diff := gocmp.Diff(map[string]int{"GET": 4}, reqs.Counts()); diff != "" {
			t.Errorf("two periodics without runs (-want +got):\n%s", diff)
		}

		// The declaration is a copy: changing it changes not the Store's.
		list.Periodics[1].Periodic.Params.Metadata["team"] = "changed"
		if again := periodicsOf(t, st); again.Periodics[1].Periodic.Params.Metadata["team"] != "ops" {
			t.Errorf("a caller's change reached the Store's declaration: %v", again.Periodics[1].Periodic.Params.Metadata)
		}
	})
}

// The latest run is found in the latest period and, when that has none,
// in the period before; not further. Requests: the key's GET (or two) and
// the record's, at most three per periodic.
func TestPeriodicsLastRun(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		time.Sleep(17 * time.Minute) // 00:17: the latest periods start at 00:15 and 00:10
		latest, before := time.Date(2000, 1, 1, 0, 15, 0, 0, time.UTC), time.Date(2000, 1, 1, 0, 10, 0, 0, time.UTC)
		every5 := Every(5 * time.Minute)
		st := e.store(periodicOpts(
			Periodic{Name: "now", Schedule: every5, Params: CreateParams{Type: "export"}},
			Periodic{Name: "late", Schedule: every5, Params: CreateParams{Type: "export"}},
			Periodic{Name: "old", Schedule: every5, Params: CreateParams{Type: "export"}},
		))
		runOf(t, st, "now", before) // superseded by the latest period's run
		now := runOf(t, st, "now", latest)
		late := runOf(t, st, "late", before)
		runOf(t, st, "old", before.Add(-5*time.Minute)) // two periods back: not looked at

		var reqs s3test.Counter
		list := periodicsOf(t, e.store(periodicOpts(st.opts.Periodic...), reqs.Wrap))
		for _, c := range []struct {
			name   string
			period time.Time
			task   *Task
		}{
			{"now", latest, now},
			{"late", before, late},
			{"old", time.Time{}, nil},
		} {
			got := list.Periodics[map[string]int{"now": 0, "late": 1, "old": 2}[c.name]]
			if !got.LastPeriod.Equal(c.period) || got.Purged || got.Err != nil {
				t.Errorf("%s: LastPeriod %s, Purged %t, Err %v; want %s, false, nil", c.name, got.LastPeriod, got.Purged, got.Err, c.period)
			}
			if c.task == nil {
				if got.Last != nil || got.LastID != "" {
					t.Errorf("%s: Last %+v, LastID %q; want none", c.name, got.Last, got.LastID)
				}
				continue
			}
			if got.LastID != c.task.ID || got.Last == nil || got.Last.ID != c.task.ID || got.Last.Status != StatusQueued ||
				got.Last.KeyScope != periodicKeyScope || got.Last.IdempotencyKey != got.Periodic.runKey(c.period) {
				t.Errorf("%s: LastID %q, Last %+v; want the run %s of %s", c.name, got.LastID, got.Last, c.task.ID, c.period)
			}
		}
		// now: key and record; late: two keys and the record; old: two keys.
		if diff := gocmp.Diff(map[string]int{"GET": 2 + 3 + 2}, reqs.Counts()); diff != "" {
			t.Errorf("requests (-want +got):\n%s", diff)
		}
	})
}

// The runs a worker holding the reconciler lease makes are the ones
// Periodics finds, with their tasks as they run and complete.
func TestPeriodicsFindsWorkersRuns(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		opts := periodicOpts(Periodic{Name: "export", Schedule: Every(10 * time.Minute), Params: CreateParams{Type: "export"}})
		e.run(e.store(opts), advSucceed, &WorkerOptions{ID: "holder", ReconcileInterval: 2 * time.Minute})
		st := e.store(opts)
		var got PeriodicStatus
		if !advWaitFor(time.Minute, time.Second, func() bool {
			got = periodicsOf(t, st).Periodics[0]
			return got.Last != nil && got.Last.Status == StatusCompleted
		}) {
			t.Fatalf("the run made at the start was not listed completed: %+v", got)
		}
		if !got.LastPeriod.Equal(got.Prev) || got.Err != nil {
			t.Errorf("the first run: %+v; want the latest period's", got)
		}
		time.Sleep(10 * time.Minute)
		var next PeriodicStatus
		if !advWaitFor(time.Minute, time.Second, func() bool {
			next = periodicsOf(t, st).Periodics[0]
			return next.Last != nil && next.Last.Status == StatusCompleted && next.LastID != got.LastID
		}) {
			t.Fatalf("the next period's run was not listed completed: %+v", next)
		}
		if !next.LastPeriod.Equal(got.Prev.Add(10*time.Minute)) || !next.Next.Equal(next.Prev.Add(10*time.Minute)) {
			t.Errorf("the next period's run: %+v; want the period after %s", next, got.Prev)
		}
	})
}

// A purged run is Purged, with its ID and no task: one GET, its key's
// tombstone. A run whose record is marked purging is Purged too; one whose
// key names a task with no record yet has its ID and no task.
func TestPeriodicsPurgedRun(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		time.Sleep(7 * time.Minute)
		hour := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
		st := e.store(periodicOpts(
			Periodic{Name: "purged", Schedule: Every(time.Hour), Params: CreateParams{Type: "export"}},
			Periodic{Name: "purging", Schedule: Every(time.Hour), Params: CreateParams{Type: "export"}},
			Periodic{Name: "unwritten", Schedule: Every(time.Hour), Params: CreateParams{Type: "export"}},
		))
		ctx := context.Background()
		cancel := func(task *Task) {
			t.Helper()
			if _, err := st.Cancel(ctx, task.ID, "not needed"); err != nil {
				t.Fatal(err)
			}
		}
		purged := runOf(t, st, "purged", hour)
		cancel(purged)
		time.Sleep(keyHold + time.Minute) // Purge keeps a keyed task until then
		if rep, err := st.Purge(ctx, time.Now(), PurgeOptions{}); err != nil || len(rep.Purged) != 1 || rep.Purged[0] != purged.ID {
			t.Fatalf("Purge: %+v, %v; want %s purged", rep, err, purged.ID)
		}
		purging := runOf(t, st, "purging", hour)
		cancel(purging)
		rec := map[string]any{}
		e.rawRecord(purging.ID, &rec)
		rec["purging"] = true
		b, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		e.putRaw(e.recordKey(purging.ID), b)
		unwritten := st.newID(time.Now())
		e.putRaw(st.keyObject(periodicKeyScope, st.opts.Periodic[2].runKey(hour)), []byte(unwritten))

		var reqs s3test.Counter
		list := periodicsOf(t, e.store(periodicOpts(st.opts.Periodic...), reqs.Wrap))
		for i, want := range []struct {
			id     string
			purged bool
		}{{purged.ID, true}, {purging.ID, true}, {unwritten, false}} {
			got := list.Periodics[i]
			if got.LastID != want.id || got.Purged != want.purged || got.Last != nil || !got.LastPeriod.Equal(hour) || got.Err != nil {
				t.Errorf("%s: %+v; want LastID %s, Purged %t, no task", got.Periodic.Name, got, want.id, want.purged)
			}
		}
		// purged: the tombstone; purging and unwritten: the key and the record.
		if diff := gocmp.Diff(map[string]int{"GET": 1 + 2 + 2}, reqs.Counts()); diff != "" {
			t.Errorf("requests (-want +got):\n%s", diff)
		}
	})
}

// A key's object or a record that cannot be read is an entry with Err set,
// and the other entries are listed as ever; an S3 error on the latest
// period's key stops the look there.
func TestPeriodicsUnreadable(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		time.Sleep(7 * time.Minute)
		hour := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
		every := Every(time.Hour)
		st := e.store(periodicOpts(
			Periodic{Name: "bad-key", Schedule: every, Params: CreateParams{Type: "export"}},
			Periodic{Name: "fine", Schedule: every, Params: CreateParams{Type: "export"}},
			Periodic{Name: "bad-record", Schedule: every, Params: CreateParams{Type: "export"}},
			Periodic{Name: "refused", Schedule: every, Params: CreateParams{Type: "export"}},
		))
		e.putRaw(st.keyObject(periodicKeyScope, st.opts.Periodic[0].runKey(hour)), []byte("not a task ID"))
		fine := runOf(t, st, "fine", hour)
		bad := runOf(t, st, "bad-record", hour)
		e.putRaw(e.recordKey(bad.ID), []byte("{"))
		refusedKey := st.keyObject(periodicKeyScope, st.opts.Periodic[3].runKey(hour))
		refuse := advWrap(func(r *http.Request, next http.RoundTripper) (*http.Response, error) {
			if strings.HasSuffix(r.URL.Path, "/"+refusedKey) {
				return &http.Response{StatusCode: http.StatusForbidden, Status: "403 Forbidden", Header: http.Header{}, Body: http.NoBody, Request: r}, nil
			}
			return next.RoundTrip(r)
		})

		list := periodicsOf(t, e.store(periodicOpts(st.opts.Periodic...), refuse))
		if len(list.Periodics) != 4 {
			t.Fatalf("listed %d periodics, want 4", len(list.Periodics))
		}
		badKey, ok, badRec, refused := list.Periodics[0], list.Periodics[1], list.Periodics[2], list.Periodics[3]
		if !errors.Is(badKey.Err, ErrCorruptRecord) || !badKey.LastPeriod.Equal(hour) || badKey.LastID != "" || badKey.Last != nil {
			t.Errorf("a damaged key's object: %+v; want Err wrapping ErrCorruptRecord for the period %s", badKey, hour)
		}
		if ok.Err != nil || ok.Last == nil || ok.Last.ID != fine.ID {
			t.Errorf("the readable run beside them: %+v; want its task %s", ok, fine.ID)
		}
		if !errors.Is(badRec.Err, ErrCorruptRecord) || badRec.LastID != bad.ID || badRec.Last != nil {
			t.Errorf("a damaged record: %+v; want Err wrapping ErrCorruptRecord, LastID %s", badRec, bad.ID)
		}
		if refused.Err == nil || errors.Is(refused.Err, ErrNotFound) || !refused.LastPeriod.Equal(hour) || refused.Last != nil {
			t.Errorf("a key S3 refused to serve: %+v; want its error, no fallback", refused)
		}
	})
}

// Periodics passes through StoreMiddleware as an OpPeriodics call, a read
// with no task: a middleware sees it, and one that refuses it costs no
// request.
func TestPeriodicsThroughMiddleware(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		errNotAdmin := errors.New("operators only")
		var seen []Call
		refuse := false
		mw := func(next CallFunc) CallFunc {
			return func(ctx context.Context, c *Call) (*Task, error) {
				seen = append(seen, *c)
				if refuse {
					return nil, errNotAdmin
				}
				return next(ctx, c)
			}
		}
		opts := periodicOpts(Periodic{Name: "export", Schedule: Every(time.Hour), Params: CreateParams{Type: "export"}})
		opts.Middleware = []StoreMiddleware{mw}
		var reqs s3test.Counter
		st := e.store(opts, reqs.Wrap)
		task := runOf(t, st, "export", st.opts.Periodic[0].Schedule.Prev(time.Now()))
		seen = nil
		if got := periodicsOf(t, st); got.Periodics[0].Last == nil || got.Periodics[0].Last.ID != task.ID {
			t.Errorf("through the middleware: %+v; want the run %s", got.Periodics[0], task.ID)
		}
		if len(seen) != 1 || seen[0].Op != OpPeriodics || seen[0].TaskID != "" || seen[0].Task != nil || seen[0].Op.Writes() {
			t.Errorf("the middleware saw %+v; want one OpPeriodics call, no task, not a write", seen)
		}
		refuse, seen = true, nil
		reqs.Reset()
		list, err := st.Periodics(context.Background())
		if !errors.Is(err, errNotAdmin) || list != nil {
			t.Errorf("refused by the middleware: %v, %v; want its error", list, err)
		}
		if n := reqs.Total(); n != 0 || len(seen) != 1 {
			t.Errorf("refused: %d requests (%s), middleware called %d times; want none and once", n, reqs.String(), len(seen))
		}
	})
}

// A context that ends fails the call with its error.
func TestPeriodicsContext(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		st := e.store(periodicOpts(Periodic{Name: "export", Schedule: Every(time.Hour), Params: CreateParams{Type: "export"}}))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if list, err := st.Periodics(ctx); !errors.Is(err, context.Canceled) || list != nil {
			t.Errorf("Periodics with a cancelled context: %+v, %v; want context.Canceled", list, err)
		}
	})
}
