package s3task

// Tests of worker presence (presence.go): what a running worker announces,
// what Store.Workers makes of it, what it costs, and that a failing write
// changes nothing else. Most run in a testing/synctest bubble (see
// bubble_test.go), where minutes of presence intervals pass at once.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/s3task/s3task/internal/s3test"
)

// runHandler runs a worker of st with h and opts in the bubble, quiet
// unless opts name a logger; stop cancels Run's context and waits for Run
// to return. It stops when the test ends too.
func (e *advEnv) runHandler(st *Store, h Handler, opts *WorkerOptions) (w *Worker, stop func()) {
	e.t.Helper()
	if opts.Logger == nil {
		opts.Logger = advQuiet
	}
	w, err := NewWorker(st, h, opts)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	stop = sync.OnceFunc(func() {
		cancel()
		if err := advAwait(e.t, done, time.Hour, "worker "+w.ID()+"'s Run to return"); err != nil {
			e.t.Errorf("worker %s: Run: %v", w.ID(), err)
		}
	})
	e.t.Cleanup(stop)
	return w, stop
}

// workersOf returns what st.Workers lists, failing the test on an error.
func workersOf(t *testing.T, st *Store) *WorkerList {
	t.Helper()
	list, err := st.Workers(context.Background())
	if err != nil {
		t.Fatalf("Workers: %v", err)
	}
	return list
}

// onlyWorker returns the one entry list holds, failing the test otherwise.
func onlyWorker(t *testing.T, list *WorkerList) WorkerInfo {
	t.Helper()
	if len(list.Workers) != 1 {
		t.Fatalf("Workers listed %d entries, want 1: %+v", len(list.Workers), list.Workers)
	}
	return list.Workers[0]
}

// presenceRequests is a transport wrapper that counts, in c, the requests
// for objects of the presence folder only.
func presenceRequests(c *s3test.Counter) func(http.RoundTripper) http.RoundTripper {
	return advWrap(func(r *http.Request, next http.RoundTripper) (*http.Response, error) {
		if strings.Contains(r.URL.Path, "/_workers/") || strings.Contains(r.URL.RawQuery, "_workers") {
			return c.Wrap(next).RoundTrip(r)
		}
		return next.RoundTrip(r)
	})
}

// A running worker is listed with what it is: ID, host, concurrency, the
// types its Mux serves, when it started and last polled, the tasks it
// holds (one while its handler runs, none after), live; and it is gone
// once Run returns.
func TestPresenceAnnouncesWorker(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		release := make(chan struct{})
		started := make(chan string, 4)
		var mux Mux
		if err := mux.HandleFunc("hold", func(ctx context.Context, job *Job) error {
			started <- job.Task.ID
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if err := mux.HandleFunc("quick", advSucceed); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now().UTC()
		// Each request takes 50 ms, as over a network: the loop's start-up
		// read of the wake object comes before its first poll.
		slow := advWrap(func(r *http.Request, next http.RoundTripper) (*http.Response, error) {
			time.Sleep(50 * time.Millisecond)
			return next.RoundTrip(r)
		})
		_, stop := e.runHandler(e.store(nil, slow), &mux, &WorkerOptions{ID: "web-1", Concurrency: 3, ReconcileInterval: -1})
		time.Sleep(time.Second) // its first write is behind it

		got := onlyWorker(t, workersOf(t, e.admin))
		want := WorkerInfo{
			ID: "web-1", Host: hostName(), Concurrency: 3, Types: []string{"hold", "quick"}, Version: libraryVersion(),
			Running: []string{}, PresenceInterval: DefaultPresenceInterval, Live: true, Key: DefaultPrefix + "_workers/web-1.json",
		}
		ignore := cmpopts.IgnoreFields(WorkerInfo{}, "StartedAt", "LastPollAt", "LastSeen", "LiveUntil")
		if diff := gocmp.Diff(want, got, ignore); diff != "" {
			t.Errorf("the running worker (-want +got):\n%s", diff)
		}
		if got.StartedAt.Before(t0.Truncate(time.Millisecond)) || got.StartedAt.After(t0.Add(time.Second)) {
			t.Errorf("StartedAt %s, want when Run started, %s", got.StartedAt, t0)
		}
		// The first write waits for the first poll, and names it: an
		// operator sees a last poll from the start, not "never" for a
		// PresenceInterval.
		if got.LastPollAt.IsZero() || got.LastPollAt.Before(got.StartedAt) || got.LastPollAt.After(time.Now()) {
			t.Errorf("LastPollAt %s, want its first poll, after StartedAt %s", got.LastPollAt, got.StartedAt)
		}
		if d := time.Since(got.LastSeen); d < 0 || d > 2*time.Second {
			t.Errorf("LastSeen %s ago, want its write a second ago", d)
		}

		task := e.submit(CreateParams{Name: "held", Type: "hold"})
		if id := advAwait(t, started, time.Minute, "the held task to start"); id != task.ID {
			t.Fatalf("started %s, want %s", id, task.ID)
		}
		time.Sleep(DefaultPresenceInterval) // the next write names it
		got = onlyWorker(t, workersOf(t, e.admin))
		if diff := gocmp.Diff([]string{task.ID}, got.Running); diff != "" || !got.Live {
			t.Errorf("while its handler runs: running (-want +got):\n%s\nlive %t", diff, got.Live)
		}
		if !got.LastPollAt.After(got.StartedAt) {
			t.Errorf("LastPollAt %s did not move on from the start %s", got.LastPollAt, got.StartedAt)
		}

		close(release)
		if !e.awaitTerminal(task.ID, time.Minute) {
			t.Fatal("the released task did not finish")
		}
		time.Sleep(DefaultPresenceInterval)
		if got = onlyWorker(t, workersOf(t, e.admin)); len(got.Running) != 0 {
			t.Errorf("after the task finished: running %v, want none", got.Running)
		}

		stop()
		if e.has(want.Key) {
			t.Errorf("the presence object %s is left after Run returned", want.Key)
		}
		if list := workersOf(t, e.admin); len(list.Workers) != 0 || list.Truncated {
			t.Errorf("after Run returned: %+v, want no worker", list)
		}
	})
}

// RunTask's attempts are held tasks too, and a handler that is not a
// TypedHandler is offered every type: Types is nil.
func TestPresenceRunTaskAndUntypedHandler(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		release := make(chan struct{})
		w, _ := e.runHandler(e.store(nil), HandlerFunc(func(ctx context.Context, _ *Job) error {
			<-release
			return nil
		}), &WorkerOptions{ID: "w", ReconcileInterval: -1, PollInterval: time.Hour, MaxPollInterval: time.Hour, PresenceInterval: time.Minute})
		time.Sleep(time.Second) // its first listing and write are behind it; its next look is 45 minutes away
		if got := onlyWorker(t, workersOf(t, e.admin)); got.Types != nil {
			t.Errorf("Types %#v, want nil for a handler offered every type", got.Types)
		}
		// Not through a listing: RunTask, on a task the poll loop will not
		// look for before long.
		task := e.submit(CreateParams{Name: "on demand"})
		ran := make(chan error, 1)
		go func() {
			_, err := w.RunTask(context.Background(), task.ID)
			ran <- err
		}()
		time.Sleep(time.Minute)
		if got := onlyWorker(t, workersOf(t, e.admin)); !gocmp.Equal(got.Running, []string{task.ID}) {
			t.Errorf("running %v, want the RunTask task %s", got.Running, task.ID)
		}
		close(release)
		if err := advAwait(t, ran, time.Minute, "RunTask"); err != nil {
			t.Errorf("RunTask: %v", err)
		}
	})
}

// A worker killed without a Stop leaves its presence object: Workers shows
// it live for two intervals plus the clock margin after its last write,
// then not live; the fleet's reconciler deletes it once it has gone
// unwritten for PresenceStaleAfter, and leaves a live worker's alone.
func TestPresenceKilledWorker(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		var cut s3test.Cutter
		_, stop := e.runHandler(e.store(nil, cut.Wrap), HandlerFunc(advSucceed), &WorkerOptions{ID: "doomed", ReconcileInterval: -1})
		time.Sleep(DefaultPresenceInterval + 30*time.Second) // written at the start and an interval later
		cut.Cut()                                            // killed: nothing more reaches S3
		stop()                                               // its DELETE cannot land either
		key := DefaultPrefix + "_workers/doomed.json"
		if !e.has(key) || cut.Refused() == 0 {
			t.Fatalf("setup: presence object there %t, %d requests refused; want it left behind", e.has(key), cut.Refused())
		}

		got := onlyWorker(t, workersOf(t, e.admin))
		if !got.Live || got.Err != nil {
			t.Fatalf("just after its last write: live %t, err %v; want live", got.Live, got.Err)
		}
		bound := 2*DefaultPresenceInterval + DefaultClockMargin
		if !got.LiveUntil.Equal(got.LastSeen.Add(bound)) {
			t.Errorf("LiveUntil %s, want its last write %s and %s", got.LiveUntil, got.LastSeen, bound)
		}
		time.Sleep(time.Until(got.LastSeen.Add(bound - 2*time.Second)))
		if got := onlyWorker(t, workersOf(t, e.admin)); !got.Live {
			t.Errorf("%s after its last write: not live, want live until %s", time.Since(got.LastSeen), bound)
		}
		time.Sleep(4 * time.Second)
		if got := onlyWorker(t, workersOf(t, e.admin)); got.Live {
			t.Errorf("%s after its last write: live, want not live past %s", time.Since(got.LastSeen), bound)
		}

		// Another worker holds the reconciler lease, polls rarely.
		e.runHandler(e.store(nil), HandlerFunc(advSucceed), &WorkerOptions{ID: "survivor", ReconcileInterval: time.Hour,
			PollInterval: time.Minute, MaxPollInterval: 10 * time.Minute})
		time.Sleep(PresenceStaleAfter - 2*time.Hour)
		if !e.has(key) {
			t.Errorf("the dead worker's object was deleted %s after its last write, before PresenceStaleAfter", time.Since(got.LastSeen))
		}
		time.Sleep(4 * time.Hour) // past the bound, and an interval
		if e.has(key) {
			t.Errorf("the dead worker's object is left %s after its last write, past PresenceStaleAfter and a reconciler turn", time.Since(got.LastSeen))
		}
		if got := onlyWorker(t, workersOf(t, e.admin)); got.ID != "survivor" || !got.Live {
			t.Errorf("after the sweep: %+v, want the live survivor only", got)
		}
	})
}

// Presence off: no request touches the presence folder, neither the
// worker's own nor its reconciler's, and Workers lists nothing.
func TestPresenceOffCostsNothing(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		var pres s3test.Counter
		_, stop := e.runHandler(e.store(nil, presenceRequests(&pres)), HandlerFunc(advSucceed),
			&WorkerOptions{ID: "quiet", PresenceInterval: -1, ReconcileInterval: time.Minute})
		task := e.submit(CreateParams{Name: "one"})
		if !e.awaitTerminal(task.ID, time.Minute) {
			t.Fatal("the task did not finish")
		}
		time.Sleep(5 * time.Minute) // several presence intervals and reconciler turns
		stop()
		if n := pres.Total(); n != 0 {
			t.Errorf("presence off: %d requests on the presence folder (%s), want none", n, pres.String())
		}
		if list := workersOf(t, e.admin); len(list.Workers) != 0 {
			t.Errorf("presence off: listed %+v", list.Workers)
		}
	})
}

// The cost: one PUT per worker at the start and per PresenceInterval, one
// DELETE at Stop, nothing else; Workers costs one LIST and one GET per
// worker listed. BENCHMARKS.md has the numbers.
func TestPresenceCost(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		var pres s3test.Counter
		_, stop := e.runHandler(e.store(nil, presenceRequests(&pres)), HandlerFunc(advSucceed),
			&WorkerOptions{ID: "counted", ReconcileInterval: -1})
		const intervals = 10
		time.Sleep(intervals*DefaultPresenceInterval + DefaultPresenceInterval/2)
		if diff := gocmp.Diff(map[string]int{"PUT": intervals + 1}, pres.Counts()); diff != "" {
			t.Errorf("a worker's presence over %d intervals (-want +got):\n%s", intervals, diff)
		}
		stop()
		if diff := gocmp.Diff(map[string]int{"PUT": intervals + 1, "DELETE": 1}, pres.Counts()); diff != "" {
			t.Errorf("and its Stop (-want +got):\n%s", diff)
		}
		perMonth := float64(730*time.Hour/DefaultPresenceInterval) * 1
		t.Logf("presence: %s over %d intervals and a Stop; a worker running all month: %.0f PUTs, $%.3f at $0.005 per 1,000",
			pres.String(), intervals, perMonth, perMonth*0.005/1000)

		const n = 3
		for i := range n {
			e.runHandler(e.store(nil), HandlerFunc(advSucceed), &WorkerOptions{ID: fmt.Sprintf("w%d", i), ReconcileInterval: -1})
		}
		time.Sleep(time.Second)
		var reads s3test.Counter
		list := workersOf(t, e.store(nil, reads.Wrap))
		if len(list.Workers) != n {
			t.Fatalf("listed %d workers, want %d", len(list.Workers), n)
		}
		if diff := gocmp.Diff(map[string]int{"LIST": 1, "GET": n}, reads.Counts()); diff != "" {
			t.Errorf("Workers over %d workers (-want +got):\n%s", n, diff)
		}
		t.Logf("Workers over %d workers: %s", n, reads.String())
	})
}

// lockedBuffer is a bytes.Buffer safe for the log writes of several
// goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A presence write that S3 refuses, or that hangs, is logged and delays
// nothing: tasks start within a PollInterval of their Submit and finish,
// and Stop returns within a request's deadline.
func TestPresenceWriteFailure(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		fail func(r *http.Request) (*http.Response, error)
	}{
		{"refused", func(r *http.Request) (*http.Response, error) {
			return advErrResp(r, http.StatusInternalServerError, "InternalError"), nil
		}},
		{"hanging", func(r *http.Request) (*http.Response, error) {
			<-r.Context().Done() // never answered: the request's deadline ends it
			return nil, r.Context().Err()
		}},
		{"hanging, the DELETE too", func(r *http.Request) (*http.Response, error) {
			<-r.Context().Done()
			return nil, r.Context().Err()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T, e *advEnv) {
				deletes := strings.Contains(tc.name, "DELETE")
				failing := advWrap(func(r *http.Request, next http.RoundTripper) (*http.Response, error) {
					if (r.Method == http.MethodPut || deletes && r.Method == http.MethodDelete) && strings.Contains(r.URL.Path, "/_workers/") {
						return tc.fail(r)
					}
					return next.RoundTrip(r)
				})
				var logs lockedBuffer
				started := make(chan advStart, 64)
				_, stop := e.runHandler(e.store(nil, failing), HandlerFunc(func(ctx context.Context, job *Job) error {
					started <- advStart{job.Task.ID, time.Now()}
					return nil
				}), &WorkerOptions{ID: "w", ReconcileInterval: -1, PresenceInterval: 10 * time.Second,
					Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
				time.Sleep(3 * time.Second)
				for i := range 8 {
					task := e.submit(CreateParams{Name: fmt.Sprintf("task %d", i)})
					submitted := time.Now()
					got := advAwait(t, started, time.Minute, "task "+task.ID+" to start")
					if got.id != task.ID {
						t.Fatalf("started %s, want %s", got.id, task.ID)
					}
					if wait := got.at.Sub(submitted); wait > DefaultPollInterval+time.Second {
						t.Errorf("task %d started %s after its Submit, want within PollInterval %s", i, wait, DefaultPollInterval)
					}
					if !e.awaitTerminal(task.ID, time.Minute) || e.record(task.ID).Status != StatusCompleted {
						t.Errorf("task %d did not complete: %s", i, e.record(task.ID).Status)
					}
					time.Sleep(7 * time.Second) // across presence writes
				}
				time.Sleep(2 * time.Second) // a write under way (hanging: always)
				from := time.Now()
				stop()
				want := time.Second // a write under way is given up
				if deletes {
					want = dropWithin
				}
				if took := time.Since(from); took > want {
					t.Errorf("Stop took %s with presence writes failing, want at most %s", took, want)
				}
				if !strings.Contains(logs.String(), "announce presence") {
					t.Errorf("the failed presence writes were not logged:\n%s", logs.String())
				}
				if list := workersOf(t, e.admin); len(list.Workers) != 0 {
					t.Errorf("listed %+v, want nothing: no write landed", list.Workers)
				}
			})
		})
	}
}

// A presence object's key names its worker both ways, and an ID that is
// not plain is written in hex: no two IDs share a key, and a key
// presenceKey would not give names no worker.
func TestPresenceKey(t *testing.T) {
	t.Parallel()
	s := &Store{opts: StoreOptions{Prefix: DefaultPrefix}}
	dir := DefaultPrefix + "_workers/"
	for id, name := range map[string]string{
		"web-3.4121.9f2c":        "web-3.4121.9f2c",
		"A_b-9":                  "A_b-9",
		".hidden":                "~2e68696464656e",
		"..":                     "~2e2e",
		"a/b":                    "~612f62",
		"host name":              "~686f7374206e616d65",
		"~61":                    "~7e3631",
		"wörker":                 "~77c3b6726b6572",
		strings.Repeat("x", 128): strings.Repeat("x", 128),
	} {
		key := s.presenceKey(id)
		if key != dir+name+".json" {
			t.Errorf("presenceKey(%q) = %q, want %q", id, key, dir+name+".json")
		}
		if got, ok := s.presenceID(key); !ok || got != id {
			t.Errorf("presenceID(%q) = %q, %t; want %q", key, got, ok, id)
		}
	}
	for _, key := range []string{
		dir + "readme.txt",
		dir + ".json",
		dir + "a/b.json",
		dir + "~zz.json",
		dir + "~61.json",     // "a" is plain: its key is a.json
		dir + "~2E2E.json",   // hex in capitals: not the key presenceKey gives
		dir + "~.json",       // no ID
		dir + "~ff.json",     // not UTF-8
		dir + ".hidden.json", // plain names do not start with '.'
		dir + strings.Repeat("x", 129) + ".json",
		DefaultPrefix + "web-1.json",
		DefaultPrefix + "_workersweb-1.json",
	} {
		if id, ok := s.presenceID(key); ok {
			t.Errorf("presenceID(%q) = %q, want none", key, id)
		}
	}
}

// Workers reports an object it cannot read as an entry with an error, and
// lists the others: bodies that do not decode, of another kind or a newer
// format, naming another worker, with bad fields; keys that name no worker
// (no GET for those). Nothing panics, nothing fails the call.
func TestWorkersReportsUnreadable(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		e.runHandler(e.store(nil), HandlerFunc(advSucceed), &WorkerOptions{ID: "good", ReconcileInterval: -1})
		time.Sleep(time.Second)
		dir := DefaultPrefix + "_workers/"
		body := func(edit func(m map[string]any)) []byte {
			m := map[string]any{"kind": "s3task-worker", "schema_version": 1, "worker_id": "x", "host": "h", "concurrency": 1,
				"types": nil, "started_at": time.Now().UTC(), "running": []string{}, "presence_interval_ms": 60000, "clock_margin_ms": 5000,
				"written_at": time.Now().UTC()}
			edit(m)
			b, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		planted := map[string][]byte{
			dir + "corrupt.json":  []byte("{not json"),
			dir + "empty.json":    nil,
			dir + "foreign.json":  body(func(m map[string]any) { m["worker_id"] = "foreign"; m["kind"] = "something-else" }),
			dir + "newer.json":    body(func(m map[string]any) { m["worker_id"] = "newer"; m["schema_version"] = 2 }),
			dir + "impostor.json": body(func(m map[string]any) { m["worker_id"] = "somebody-else" }),
			dir + "badtask.json":  body(func(m map[string]any) { m["worker_id"] = "badtask"; m["running"] = []string{"../x"} }),
			dir + "overfull.json": body(func(m map[string]any) {
				m["worker_id"], m["running"] = "overfull", []string{NewID(), NewID()} // concurrency 1
			}),
			dir + "nointerval.json": body(func(m map[string]any) {
				m["worker_id"] = "nointerval"
				delete(m, "presence_interval_ms")
			}),
			dir + "array.json":  []byte(`[1,2,3]`),
			dir + "readme.txt":  []byte("hello"),
			dir + "deep/x.json": []byte("{}"),
			dir + "old.json": body(func(m map[string]any) {
				m["worker_id"], m["concurrency"], m["types"] = "old", 4, []string{}
				m["some_field_of_a_later_version"] = true
			}),
		}
		for key, b := range planted {
			e.putRaw(key, b)
		}
		var reads s3test.Counter
		list := workersOf(t, e.store(nil, reads.Wrap))
		var got []string
		for _, w := range list.Workers {
			line := fmt.Sprintf("%s %s live=%t", strings.TrimPrefix(w.Key, dir), w.ID, w.Live)
			if w.Err != nil {
				if !errors.Is(w.Err, ErrUnreadablePresence) {
					t.Errorf("%s: error %v does not wrap ErrUnreadablePresence", w.Key, w.Err)
				}
				line += " unreadable"
			}
			got = append(got, line)
		}
		want := []string{
			"array.json array live=false unreadable",
			"badtask.json badtask live=false unreadable",
			"corrupt.json corrupt live=false unreadable",
			"empty.json empty live=false unreadable",
			"foreign.json foreign live=false unreadable",
			"good.json good live=true",
			"impostor.json impostor live=false unreadable",
			"newer.json newer live=false unreadable",
			"nointerval.json nointerval live=false unreadable",
			"old.json old live=true",
			"overfull.json overfull live=false unreadable",
			"deep/x.json  live=false unreadable",
			"readme.txt  live=false unreadable",
		}
		if diff := gocmp.Diff(want, got); diff != "" {
			t.Errorf("Workers (-want +got):\n%s", diff)
		}
		for _, w := range list.Workers {
			if w.ID == "old" && (w.Concurrency != 4 || w.Types == nil || len(w.Types) != 0) {
				t.Errorf("a body with a field this code does not know: %+v, want it read (concurrency 4, types empty, not nil)", w)
			}
			if w.Err != nil && !strings.Contains(w.Err.Error(), w.Key) {
				t.Errorf("the error of %s does not name its key: %v", w.Key, w.Err)
			}
		}
		// The keys that name no worker cost no GET.
		if diff := gocmp.Diff(map[string]int{"LIST": 1, "GET": len(planted) + 1 - 2}, reads.Counts()); diff != "" {
			t.Errorf("requests (-want +got):\n%s", diff)
		}
	})
}

// Workers judges liveness by the S3 server's clock, not the reader's: a
// reader whose own clock runs hours ahead still sees a running worker
// live, once a response has shown it the server's time.
func TestWorkersServerClock(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		e.runHandler(e.store(nil), HandlerFunc(advSucceed), &WorkerOptions{ID: "w", ReconcileInterval: -1})
		time.Sleep(time.Second)
		ahead := e.store(&StoreOptions{Clock: func() time.Time { return time.Now().Add(3 * time.Hour) }})
		list := workersOf(t, ahead)
		if got := onlyWorker(t, list); !got.Live {
			t.Errorf("a reader 3 hours ahead: live %t, at %s (server %s)", got.Live, list.At, e.mem.Now())
		}
		if d := list.At.Sub(e.mem.Now()); d < -2*time.Second || d > 2*time.Second {
			t.Errorf("WorkerList.At %s, %s from the server's clock; want the server's time", list.At, d)
		}
	})
}

// Presence options are validated: a PresenceInterval above the bound is
// refused, naming the field; negative is off; zero is the default, or
// MaxPollInterval if that is longer, up to the bound.
func TestPresenceOptions(t *testing.T) {
	t.Parallel()
	e := newAdvEnv(t)
	_, err := NewWorker(e.admin, HandlerFunc(advSucceed), &WorkerOptions{PresenceInterval: MaxPresenceInterval + time.Second})
	if !errors.Is(err, ErrInvalidOptions) || err == nil || !strings.Contains(err.Error(), "PresenceInterval") {
		t.Errorf("PresenceInterval over MaxPresenceInterval: %v, want ErrInvalidOptions naming the field", err)
	}
	for _, tc := range []struct {
		in, maxPoll, want time.Duration
	}{
		{0, 0, DefaultPresenceInterval},
		{-1, 0, -1},
		{time.Second, 0, time.Second},
		{MaxPresenceInterval, 0, MaxPresenceInterval},
		{0, 10 * time.Minute, 10 * time.Minute}, // listing rarely, announcing as rarely
		{0, 2 * time.Hour, MaxPresenceInterval},
		{time.Minute, 10 * time.Minute, time.Minute},
	} {
		w, err := NewWorker(e.admin, HandlerFunc(advSucceed), &WorkerOptions{PresenceInterval: tc.in, MaxPollInterval: tc.maxPoll})
		if err != nil {
			t.Errorf("PresenceInterval %s, MaxPollInterval %s: %v", tc.in, tc.maxPoll, err)
			continue
		}
		if w.opts.PresenceInterval != tc.want {
			t.Errorf("PresenceInterval %s, MaxPollInterval %s: became %s, want %s", tc.in, tc.maxPoll, w.opts.PresenceInterval, tc.want)
		}
	}
}

// Workers passes through StoreMiddleware as an OpWorkers call, a read with
// no task: a middleware sees it, and one that refuses it costs no request.
func TestWorkersThroughMiddleware(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		e.runHandler(e.store(nil), HandlerFunc(advSucceed), &WorkerOptions{ID: "w", ReconcileInterval: -1})
		time.Sleep(time.Second)
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
		var reqs s3test.Counter
		st := e.store(&StoreOptions{Middleware: []StoreMiddleware{mw}}, reqs.Wrap)
		if got := onlyWorker(t, workersOf(t, st)); got.ID != "w" {
			t.Errorf("through the middleware: listed %+v", got)
		}
		if len(seen) != 1 || seen[0].Op != OpWorkers || seen[0].TaskID != "" || seen[0].Task != nil || seen[0].Op.Writes() {
			t.Errorf("the middleware saw %+v; want one OpWorkers call, no task, not a write", seen)
		}
		refuse, seen = true, nil
		reqs.Reset()
		list, err := st.Workers(context.Background())
		if !errors.Is(err, errNotAdmin) || list != nil {
			t.Errorf("refused by the middleware: %v, %v; want its error", list, err)
		}
		if n := reqs.Total(); n != 0 || len(seen) != 1 {
			t.Errorf("refused: %d requests (%s), middleware called %d times; want none and once", n, reqs.String(), len(seen))
		}
	})
}

// A worker ID that is not plain (a space, a slash, non-ASCII) is written
// under its hex name, and listed under the ID itself.
func TestPresenceOddWorkerID(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		const id = "web 1/ü"
		e.runHandler(e.store(nil), HandlerFunc(advSucceed), &WorkerOptions{ID: id, ReconcileInterval: -1})
		time.Sleep(time.Second)
		got := onlyWorker(t, workersOf(t, e.admin))
		if got.ID != id || got.Err != nil || !got.Live || got.Key != DefaultPrefix+"_workers/~77656220312fc3bc.json" {
			t.Errorf("listed %+v, want %q live under its hex name", got, id)
		}
	})
}
