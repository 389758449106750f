package s3task

// Workers that poll the same head of the marker folder: each goes for
// tasks of its own (pick), learns the fleet from the presence objects
// (learnFleet), and leaves another worker's last task to it for a
// PollInterval only.

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/s3task/s3task/internal/s3test"
)

// contendHead returns n markers due one after the other, as a listing
// gives them.
func contendHead(n int, now time.Time) []marker {
	head := make([]marker, n)
	for i := range head {
		id := fmt.Sprintf("task-%03d", i)
		head[i] = marker{key: fmt.Sprintf("active/%03d_%s", i, id), id: id, due: now.Add(time.Duration(i-n) * time.Second)}
	}
	return head
}

// contendFleet returns workers with the IDs given, each knowing all the
// others as its rivals.
func contendFleet(t *testing.T, ids ...string) []*Worker {
	e := newAdvEnv(t)
	ws := make([]*Worker, len(ids))
	for i, id := range ids {
		w, err := NewWorker(e.admin, HandlerFunc(advSucceed), &WorkerOptions{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range ids {
			if r != id && w.heardOf(r) {
				w.rivals[r] = rival{}
			}
		}
		ws[i] = w
	}
	return ws
}

// Workers that know the same fleet split the head: each task of it is the
// first visit of exactly one worker's tasks of its own, which come oldest
// first.
func TestPickSplitsTheHead(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	ws := contendFleet(t, "w1", "w2", "w3", "w4", "w5")
	head := contendHead(60, now)
	owner := map[string]string{}
	for _, w := range ws {
		visit := w.pick(slices.Clone(head), now, func(time.Time) {})
		var own []marker
		for _, m := range visit {
			if w.rank(m.id, nil) != 0 {
				break
			}
			own = append(own, m)
		}
		if len(own) == 0 || len(own) == len(visit) {
			t.Fatalf("%s: %d of its %d visits are its own tasks; want some, then help", w.ID(), len(own), len(visit))
		}
		if !slices.IsSortedFunc(own, func(a, b marker) int { return strings.Compare(a.key, b.key) }) {
			t.Errorf("%s: its own tasks out of the listing's order: %v", w.ID(), own)
		}
		for _, m := range own {
			if o, ok := owner[m.id]; ok {
				t.Errorf("task %s is the own task of %s and %s", m.id, o, w.ID())
			}
			owner[m.id] = w.ID()
		}
		for _, m := range visit[len(own):] {
			if w.rank(m.id, nil) == 0 {
				t.Errorf("%s: own task %s after the help", w.ID(), m.id)
			}
		}
	}
	if len(owner) != len(head) {
		t.Errorf("%d of %d tasks of the head are some worker's own; want every one", len(owner), len(head))
	}
}

// A worker with none of its own tasks in the head helps with those it ranks
// second for, newest first; while workers race, it leaves a rival's last
// task in the head to that rival for one PollInterval from when it first
// saw it, then takes it.
func TestPickHelpsAndLeaves(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	ws := contendFleet(t, "w1", "w2")
	w, other := ws[0], ws[1]
	var theirs []marker
	for _, m := range contendHead(200, now) {
		if w.rank(m.id, nil) == 1 {
			theirs = append(theirs, m)
		}
	}
	if len(theirs) < 3 {
		t.Fatalf("setup: %d tasks w2 ranks first for", len(theirs))
	}

	// Two of w2's: w1 helps with the newer first.
	visit := w.pick(slices.Clone(theirs[:2]), now, func(time.Time) { t.Error("a task left while its worker has two in the head") })
	if len(visit) != 2 || visit[0].key != theirs[1].key {
		t.Errorf("help with two of w2's tasks: visits %v, want the newer (%s) first, then the older", visit, theirs[1].key)
	}

	// One of w2's: left to w2 until a PollInterval has passed since w1 first
	// saw it there.
	last := theirs[2:3]
	var soonest time.Time
	w.racedAt = now // workers race: the tail of a queue
	if visit := w.pick(slices.Clone(last), now, func(t time.Time) { soonest = t }); len(visit) != 0 {
		t.Errorf("w2's last task in the head: w1 visits %v at once, want it left to w2", visit)
	}
	if want := now.Add(w.opts.PollInterval); !soonest.Equal(want) {
		t.Errorf("w1 looks again at %s, want %s (a PollInterval later)", soonest, want)
	}
	if visit := w.pick(slices.Clone(last), now.Add(w.opts.PollInterval-time.Millisecond), func(time.Time) {}); len(visit) != 0 {
		t.Errorf("just before the PollInterval has passed: w1 visits %v, want none", visit)
	}
	if visit := w.pick(slices.Clone(last), now.Add(w.opts.PollInterval), func(time.Time) {}); len(visit) != 1 {
		t.Errorf("a PollInterval after w1 first left it: visits %v, want w2's task", visit)
	}

	// With no race for a minute, nothing is left.
	w.passed = nil
	if visit := w.pick(slices.Clone(last), now.Add(fleetRelist), func(time.Time) {}); len(visit) != 1 {
		t.Errorf("a minute after the last race: w1 visits %v of w2's last task, want it", visit)
	}

	// Its owner takes it at once.
	if visit := other.pick(slices.Clone(last), now, func(time.Time) {}); len(visit) != 1 {
		t.Errorf("w2 visits %v of its own last task, want it", visit)
	}

	// A worker that knows no rival visits the whole head.
	alone := contendFleet(t, "solo")[0]
	if visit := alone.pick(contendHead(30, now), now, func(time.Time) {}); len(visit) != 30 {
		t.Errorf("a worker with no rival visits %d of 30 markers", len(visit))
	}
}

// learnFleet: one LIST of the presence folder; the workers whose objects
// are fresh become rivals; a rival neither listed fresh nor heard of
// otherwise within that time is forgotten; one met just now stays.
func TestLearnFleet(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		var pres s3test.Counter
		st := e.store(nil, presenceRequests(&pres))
		w, err := NewWorker(st, HandlerFunc(advSucceed), &WorkerOptions{ID: "me"})
		if err != nil {
			t.Fatal(err)
		}
		e.putRaw(DefaultPrefix+"_workers/stale.json", []byte(`{}`))
		w.rivals["gone"] = rival{seen: st.serverNow()}
		time.Sleep(2*w.opts.PresenceInterval + w.opts.ClockMargin + time.Second)
		e.putRaw(DefaultPrefix+"_workers/fresh.json", []byte(`{}`))
		e.putRaw(DefaultPrefix+"_workers/me.json", []byte(`{}`))
		e.putRaw(DefaultPrefix+"_workers/not a worker", []byte(`{}`))
		w.rivalSeen("met", false) // learnt from a task it took just now: no presence object
		if !w.contended {
			t.Error("a rival seen: not contended")
		}

		w.learnFleet(context.Background())
		var got []string
		for id := range w.rivals {
			got = append(got, id)
		}
		slices.Sort(got)
		if want := []string{"fresh", "met"}; !slices.Equal(got, want) {
			t.Errorf("rivals %v, want %v", got, want)
		}
		if n := pres.Total(); n != 1 || pres.Counts()["LIST"] != 1 {
			t.Errorf("%d requests on the presence folder (%s), want one LIST", n, pres.String())
		}
		if w.contended || w.fleetGap != fleetRelearn {
			t.Errorf("after the first listing: contended %t, next after %s; want false and %s", w.contended, w.fleetGap, fleetRelearn)
		}
		for _, want := range []time.Duration{2 * fleetRelearn, 4 * fleetRelearn} {
			w.learnFleet(context.Background())
			if w.fleetGap != want {
				t.Errorf("next listing after %s, want %s", w.fleetGap, want)
			}
		}
	})
}

// The deployment: eight workers, each on a client of its own, start
// together on a backlog. Each lists the presence folder a few times, not
// per claim; every task runs once; and the workers, once they know one
// another, seldom race for a task. With presence off, nobody lists it.
func TestFleetOnBacklog(t *testing.T) {
	for _, presence := range []time.Duration{0, -1} {
		t.Run(fmt.Sprintf("presence=%v", presence >= 0), func(t *testing.T) {
			inBubble(t, func(t *testing.T, e *advEnv) {
				const workers, tasks = 8, 400
				for i := range tasks {
					e.submit(CreateParams{Name: fmt.Sprintf("t%d", i)})
				}
				var pres s3test.Counter
				var lost atomic.Int32
				var mu sync.Mutex
				ran := map[string]int{}
				var done atomic.Int32
				for i := range workers {
					st := e.store(nil, presenceRequests(&pres), lostClaims(&lost), latency(time.Millisecond))
					e.run(st, func(ctx context.Context, job *Job) error {
						mu.Lock()
						ran[job.Task.ID]++
						mu.Unlock()
						time.Sleep(10 * time.Millisecond)
						done.Add(1)
						return nil
					}, &WorkerOptions{ID: fmt.Sprintf("w%d", i), Concurrency: 1, PollInterval: 20 * time.Millisecond,
						ReconcileInterval: -1, PresenceInterval: presence})
				}
				for done.Load() < tasks {
					time.Sleep(100 * time.Millisecond)
				}
				mu.Lock()
				defer mu.Unlock()
				for id, n := range ran {
					if n != 1 {
						t.Errorf("task %s ran %d times", id, n)
					}
				}
				if len(ran) != tasks {
					t.Errorf("%d tasks ran, want %d", len(ran), tasks)
				}
				lists := pres.Counts()["LIST"]
				if presence < 0 && pres.Total() != 0 {
					t.Errorf("presence off: %d requests on the presence folder (%s), want none", pres.Total(), pres.String())
				}
				if presence >= 0 && (lists < workers || lists > 8*workers) {
					t.Errorf("%d LISTs of the presence folder by %d workers over %d claims; want one to eight each", lists, workers, tasks)
				}
				t.Logf("%d lost claims in %d, %d LISTs of the fleet", int(lost.Load()), tasks, lists)
				if presence >= 0 && int(lost.Load()) > tasks/25 {
					t.Errorf("%d lost claims in %d claims, want at most %d", int(lost.Load()), tasks, tasks/25)
				}
			})
		})
	}
}

// lostClaims counts the record PUTs refused with 412: claims lost to
// another worker (nothing else writes the records here).
func lostClaims(n *atomic.Int32) func(http.RoundTripper) http.RoundTripper {
	return advWrap(func(r *http.Request, next http.RoundTripper) (*http.Response, error) {
		resp, err := next.RoundTrip(r)
		if err == nil && r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/status.json") && resp.StatusCode == http.StatusPreconditionFailed {
			n.Add(1)
		}
		return resp, err
	})
}

// latency delays each request by d before it is sent and after its answer.
func latency(d time.Duration) func(http.RoundTripper) http.RoundTripper {
	return advWrap(func(r *http.Request, next http.RoundTripper) (*http.Response, error) {
		time.Sleep(d)
		resp, err := next.RoundTrip(r)
		time.Sleep(d)
		return resp, err
	})
}

// TestAwaitTakesEveryReadyWakeup: when a kick, a note, the lease and the
// timer are all ready as the poll loop waits, await returns them all, not
// one picked at random, so that the loop does the same whatever select
// picks.
func TestAwaitTakesEveryReadyWakeup(t *testing.T) {
	e := newAdvEnv(t)
	w, err := NewWorker(e.admin, HandlerFunc(advSucceed), &WorkerOptions{ID: "w1"})
	if err != nil {
		t.Fatal(err)
	}
	for range 50 {
		timer := make(chan time.Time, 1)
		took, freed := make(chan struct{}, 1), make(chan struct{}, 1)
		timer <- time.Now()
		took <- struct{}{}
		freed <- struct{}{}
		w.kick("", wakeNote{})
		w.noted <- struct{}{}
		got := w.await(context.Background(), timer, took, freed)
		if want := (wakeups{timer: true, took: true, freed: true, kicked: true, noted: true}); got != want {
			t.Fatalf("await returned %+v, want %+v", got, want)
		}
		w.takeKick()
	}
	// Only what is ready; a nil channel is never ready.
	w.noted <- struct{}{}
	if got, want := w.await(context.Background(), nil, nil, nil), (wakeups{noted: true}); got != want {
		t.Fatalf("await returned %+v, want %+v", got, want)
	}
}
