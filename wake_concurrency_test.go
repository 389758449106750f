package s3task_test

// The wake object under concurrency (issue 35): producers that submit at
// once, each on its own Store and client, or many calls on one Store,
// must all get their announcements into the wake object, with
// compare-and-set writes only, few of them refused, and no read of the
// paused object once their first round is behind them.

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/s3test"
)

// wakeLog records one producer's requests for the wake and the paused
// objects, in order, with S3's answers.
type wakeLog struct {
	mu   sync.Mutex
	reqs []*wakeReq
}

type wakeReq struct {
	what   string // "GET _wake", "PUT _wake", "GET _paused"
	cond   bool   // a PUT with If-Match or If-None-Match
	status int    // 0 while unanswered
}

func (l *wakeLog) wrap(next http.RoundTripper) http.RoundTripper {
	return s3test.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		key := objectKey(r)
		if !strings.HasSuffix(key, "_wake") && !strings.HasSuffix(key, "_paused") {
			return next.RoundTrip(r)
		}
		q := &wakeReq{what: r.Method + " " + key[strings.LastIndexByte(key, '_'):],
			cond: r.Header.Get("If-Match") != "" || r.Header.Get("If-None-Match") != ""}
		l.mu.Lock()
		l.reqs = append(l.reqs, q)
		l.mu.Unlock()
		resp, err := next.RoundTrip(r)
		if err == nil {
			l.mu.Lock()
			q.status = resp.StatusCode
			l.mu.Unlock()
		}
		return resp, err
	})
}

// tally sums what the producers' logs hold: wake PUTs refused with a 412,
// wake PUTs sent without a condition, wake GETs, and GETs of the paused
// object sent after the producer's first wake PUT (its first round).
func tally(logs []*wakeLog) (refused, blind, wakeGets, pausedLate int) {
	for _, l := range logs {
		l.mu.Lock()
		put := false
		for _, q := range l.reqs {
			switch q.what {
			case "PUT _wake":
				put = true
				if q.status == http.StatusPreconditionFailed {
					refused++
				}
				if !q.cond {
					blind++
				}
			case "GET _wake":
				wakeGets++
			case "GET _paused":
				if put {
					pausedLate++
				}
			}
		}
		l.mu.Unlock()
	}
	return refused, blind, wakeGets, pausedLate
}

// gate holds the first request of each of n producers that match accepts
// until all n have sent theirs: so many Submits announce at once that
// every one of them reads the wake object before any writes it.
type gate struct {
	mu    sync.Mutex
	n     int
	open  chan struct{}
	match func(r *http.Request) bool
}

func newGate(n int, match func(r *http.Request) bool) *gate {
	return &gate{n: n, open: make(chan struct{}), match: match}
}

// wrap returns a wrapper for one producer's transport.
func (g *gate) wrap(next http.RoundTripper) http.RoundTripper {
	var once sync.Once
	return s3test.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		if g.match(r) {
			once.Do(func() {
				g.mu.Lock()
				if g.n--; g.n == 0 {
					close(g.open)
				}
				g.mu.Unlock()
				<-g.open
			})
		}
		return next.RoundTrip(r)
	})
}

// wakeNotes returns the keys the wake object's announcements name that
// are not in seen (by revision), reading its body as a worker of the
// previous version would, and adds them to seen.
func wakeNotes(t *testing.T, e *env, seen map[string]bool) []string {
	t.Helper()
	body, ok := e.object(e.store.Prefix() + "_wake")
	if !ok {
		return nil
	}
	lines := strings.Split(strings.TrimRight(string(body), "\n"), "\n")
	switch {
	case lines[0] == "s3task-wake 2":
		lines = lines[1:]
	case lines[0] == "s3task-wake 3" && len(lines) > 1 && strings.HasPrefix(lines[1], "paused "):
		lines = lines[2:]
	default:
		t.Fatalf("the wake object's body is not one this version or the previous one reads:\n%s", body)
	}
	var keys []string
	for _, line := range lines {
		rev, key, _ := strings.Cut(line, " ")
		if !seen[rev] {
			seen[rev] = true
			keys = append(keys, key)
		}
	}
	return keys
}

// TestWakeConcurrentProducers: 16 producers, each on a Store and client of
// its own, submit at once, every one of them reading the wake object
// before any writes it. Every announcement lands in the wake object (its
// new lines name every submitted marker, and an idle worker that may list
// only on the wake object's news runs every task); no wake PUT is sent
// without a condition; fewer than one is refused per Submit on average;
// and no producer reads the paused object after its first round, whether
// the wake object was missing or an earlier version's.
func TestWakeConcurrentProducers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before []byte // the wake object's body before the Submits; nil: none
	}{
		{"no wake object", nil},
		{"the previous version's wake object", []byte("s3task-wake 2\n0123456789abcdef *\n")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				testWakeConcurrentProducers(t, tc.before)
			})
		})
	}
}

func testWakeConcurrentProducers(t *testing.T, before []byte) {
	const producers = 16
	e := newEnv(t, nil)
	wakeKey := e.store.Prefix() + "_wake"
	if before != nil {
		e.put(t, wakeKey, before)
	}
	var (
		mu  sync.Mutex
		ran = map[string]bool{}
	)
	runWorker(t, e.newStore(t, nil), s3task.HandlerFunc(func(_ context.Context, job *s3task.Job) error {
		mu.Lock()
		ran[job.Task.ID] = true
		mu.Unlock()
		return nil
	}), &s3task.WorkerOptions{ID: "idle", Concurrency: producers, MaxPollInterval: time.Hour, ReconcileInterval: -1})
	time.Sleep(10 * time.Second) // its first listing is behind it: it lists again only for news
	seen := map[string]bool{}
	wakeNotes(t, e, seen)

	first := func(what string) func(r *http.Request) bool {
		return func(r *http.Request) bool { return r.Method+" "+objectKey(r) == what }
	}
	gets, puts := newGate(producers, first("GET "+wakeKey)), newGate(producers, first("PUT "+wakeKey))
	logs := make([]*wakeLog, producers)
	stores := make([]*s3task.Store, producers)
	ids := make([]string, producers)
	for i := range producers {
		logs[i] = &wakeLog{}
		stores[i] = e.newStore(t, nil, logs[i].wrap, gets.wrap, puts.wrap)
		ids[i] = e.task(t, "created").ID
	}
	calls := make([]func(), producers)
	for i := range producers {
		calls[i] = func() {
			if _, err := stores[i].Submit(e.ctx, ids[i]); err != nil {
				t.Errorf("Submit(%s): %v", ids[i], err)
			}
		}
	}
	race(calls...)

	announced := map[string]bool{}
	for _, key := range wakeNotes(t, e, seen) {
		announced[key] = true
	}
	for _, id := range ids {
		if key := e.dueMarkerKey(e.get(t, id)); !announced[key] {
			t.Errorf("task %s's marker %s is not among the wake object's new announcements", id, key)
		}
	}
	if body, _ := e.object(wakeKey); !bytes.Contains(body, []byte("\npaused [")) {
		t.Errorf("the wake object's body does not name the paused types:\n%s", body)
	}
	refused, blind, wakeGets, pausedLate := tally(logs)
	t.Logf("per Submit: %.2f wake PUTs refused, %.2f wake GETs; %d wake PUTs without a condition, %d GETs of the paused object after a first round",
		float64(refused)/producers, float64(wakeGets)/producers, blind, pausedLate)
	if blind > 0 {
		t.Errorf("%d wake PUTs without If-Match or If-None-Match: a blind write may drop another writer's announcements", blind)
	}
	if refused > producers {
		t.Errorf("%d wake PUTs refused for %d Submits; want at most one per Submit on average", refused, producers)
	}
	if pausedLate > 0 {
		t.Errorf("%d GETs of the paused object after a producer's first round; want none", pausedLate)
	}
	waitUntilOr(t, "the idle worker to run every submitted task", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ran) == producers
	}, func() string { return fmt.Sprintf("ran %d of %d", len(ran), producers) })
}

// TestWakeGroupCommit: 16 calls on one Store submit at once, every
// request taking a millisecond: while one write of the wake object is
// under way the others gather, and the next write carries them all, so
// the Store never races itself (no wake PUT refused) and every marker is
// announced.
func TestWakeGroupCommit(t *testing.T) {
	bubble(t, func(t *testing.T) {
		const calls = 16
		e := newEnv(t, nil)
		log := &wakeLog{}
		slow := func(next http.RoundTripper) http.RoundTripper {
			return s3test.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
				time.Sleep(time.Millisecond)
				return next.RoundTrip(r)
			})
		}
		st := e.newStore(t, nil, log.wrap, slow)
		ids := make([]string, calls)
		for i := range ids {
			ids[i] = e.task(t, "created").ID
		}
		fns := make([]func(), calls)
		for i := range fns {
			fns[i] = func() {
				if _, err := st.Submit(e.ctx, ids[i]); err != nil {
					t.Errorf("Submit(%s): %v", ids[i], err)
				}
			}
		}
		race(fns...)
		announced := map[string]bool{}
		for _, key := range wakeNotes(t, e, map[string]bool{}) {
			announced[key] = true
		}
		for _, id := range ids {
			if key := e.dueMarkerKey(e.get(t, id)); !announced[key] {
				t.Errorf("task %s's marker %s is not announced in the wake object", id, key)
			}
		}
		refused, blind, _, _ := tally([]*wakeLog{log})
		puts := 0
		for _, q := range log.reqs {
			if q.what == "PUT _wake" {
				puts++
			}
		}
		t.Logf("%d Submits on one Store: %d wake PUTs, %d refused", calls, puts, refused)
		if refused > 0 || blind > 0 {
			t.Errorf("%d wake PUTs refused and %d blind: the Store raced itself", refused, blind)
		}
		if puts >= calls {
			t.Errorf("%d wake PUTs for %d Submits at once: the announcements were not written together", puts, calls)
		}
		if body, _ := e.object(e.store.Prefix() + "_wake"); bytes.Contains(body, []byte(" *\n")) {
			t.Errorf("the wake object tells every worker to list:\n%s", body)
		}
	})
}
