package s3task

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/s3task/s3task/internal/s3test"
)

// eventOpts are a worker's options with events wired: polling is only the
// safety net.
func eventOpts(id string) *WorkerOptions {
	return &WorkerOptions{ID: id, PollInterval: 2 * time.Minute, MaxPollInterval: 10 * time.Minute, ReconcileInterval: -1}
}

// opCounter counts a store's requests by operation (s3test.Op), and GETs
// of the wake object apart.
type opCounter struct {
	mu  sync.Mutex
	ops map[string]int
}

func (c *opCounter) wrap(next http.RoundTripper) http.RoundTripper {
	return s3test.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		op := s3test.Op(r)
		if strings.HasSuffix(r.URL.Path, "/_wake") {
			op += " wake"
		}
		c.mu.Lock()
		if c.ops == nil {
			c.ops = map[string]int{}
		}
		c.ops[op]++
		c.mu.Unlock()
		return next.RoundTrip(r)
	})
}

func (c *opCounter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	ops := c.ops
	c.ops = nil
	return ops
}

func total(ops map[string]int) int {
	n := 0
	for _, v := range ops {
		n += v
	}
	return n
}

// TestNotifyStartsWithoutListing: an event that names a new task's marker
// starts the task on an idle worker at once, with a GET of its record and
// the claim: no LIST, no check of the wake object, however long the worker's
// PollInterval.
func TestNotifyStartsWithoutListing(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		var c opCounter
		w := e.run(e.store(nil, c.wrap), advSucceed, eventOpts("w"))
		time.Sleep(time.Second) // the first listing
		c.take()

		task := e.submit(CreateParams{Name: "told by an event"})
		submitted := time.Now()
		if !w.w.Notify(ObjectEvent{Bucket: e.mem.Bucket, Key: e.markerKey(task.ID)}) {
			t.Fatal("Notify took no interest in the task's marker")
		}
		s := advAwait(t, w.started, time.Hour, "the start")
		if s.id != task.ID || s.at.Sub(submitted) > 100*time.Millisecond {
			t.Errorf("started %s %s after the event; want %s at once", s.id, s.at.Sub(submitted), task.ID)
		}
		if !e.awaitTerminal(task.ID, time.Minute) {
			t.Fatal("the task did not finish")
		}
		ops := c.take()
		if ops["LIST"] != 0 || ops["GET wake"] != 0 {
			t.Errorf("requests to start and finish a task told by an event: %v; want no LIST and no GET of the wake object", ops)
		}
	})
}

// TestNotifyRecordEventAfterMarker: a Submit writes its marker before its
// record, so an event for the marker can reach a worker while the record
// still says created (a task created a while ago). The worker must not
// take that marker for a leftover and delete it; it looks again a second
// later, unless the record's own event comes first: then at once.
func TestNotifyRecordEventAfterMarker(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		w := e.run(e.store(nil), advSucceed, eventOpts("w"))
		task := e.create(CreateParams{Name: "marker first"})
		time.Sleep(time.Minute) // created a while before its Submit
		var recordWritten time.Time
		slow := e.store(nil, advWrap(func(r *http.Request, next http.RoundTripper) (*http.Response, error) {
			if !advIsRecord(r, http.MethodPut, task.ID) {
				return next.RoundTrip(r)
			}
			// The marker is there: its event arrives before the record.
			w.w.Notify(ObjectEvent{Key: e.markerKey(task.ID)})
			time.Sleep(500 * time.Millisecond)
			resp, err := next.RoundTrip(r)
			recordWritten = time.Now()
			w.w.Notify(ObjectEvent{Key: e.recordKey(task.ID)})
			return resp, err
		}))
		if _, err := slow.Submit(e.ctx, task.ID); err != nil {
			t.Fatal(err)
		}
		s := advAwait(t, w.started, time.Hour, "the start")
		if d := s.at.Sub(recordWritten); d > 100*time.Millisecond {
			t.Errorf("started %s after its record's event; want at once", d)
		}
	})
}

// TestNotifyScheduled: an event for a marker due later (a scheduled start)
// brings the worker to it at its time, with no LIST; an event that the
// marker was deleted (a Cancel) takes it back, and the worker reads nothing
// at that time.
func TestNotifyScheduled(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		var c opCounter
		w := e.run(e.store(nil, c.wrap), advSucceed, eventOpts("w"))
		time.Sleep(time.Second)
		runAt := time.Now().Add(time.Minute).Truncate(time.Second)
		kept := e.submit(CreateParams{Name: "in a minute", RunAt: runAt})
		dropped := e.submit(CreateParams{Name: "cancelled", RunAt: runAt})
		droppedMarker := e.markerKey(dropped.ID)
		w.w.Notify(ObjectEvent{Key: e.markerKey(kept.ID)})
		w.w.Notify(ObjectEvent{Key: droppedMarker})
		if _, err := e.admin.Cancel(e.ctx, dropped.ID, "not needed"); err != nil {
			t.Fatal(err)
		}
		w.w.Notify(ObjectEvent{Key: droppedMarker, Removed: true})
		c.take()
		s := advAwait(t, w.started, time.Hour, "the scheduled start")
		if s.id != kept.ID || s.at.Before(runAt) || s.at.Sub(runAt) > time.Second {
			t.Errorf("started %s at %s; want %s at %s", s.id, s.at.Format(time.RFC3339Nano), kept.ID, runAt.Format(time.RFC3339))
		}
		time.Sleep(time.Second)
		ops := c.take()
		if ops["LIST"] != 0 || ops["GET"] != 1 {
			t.Errorf("requests of the scheduled start: %v; want no LIST and one GET (the record of the task to start, not of the cancelled one)", ops)
		}
	})
}

// TestNotifyStorm: every event delivered three times, out of order, to two
// workers at once, mixed with deletions that came before their writes,
// events of other buckets and objects, and forged keys: every task runs
// exactly once, and Notify says which events concerned the worker.
func TestNotifyStorm(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		var mu sync.Mutex
		runs := map[string]int{}
		h := func(context.Context, *Job) error { return nil }
		var workers []*advWorker
		for _, id := range []string{"w1", "w2"} {
			workers = append(workers, e.run(e.store(nil), func(ctx context.Context, j *Job) error {
				mu.Lock()
				runs[j.Task.ID]++
				mu.Unlock()
				time.Sleep(time.Second)
				return h(ctx, j)
			}, &WorkerOptions{ID: id, Concurrency: 2, PollInterval: 2 * time.Minute, MaxPollInterval: time.Hour, ReconcileInterval: -1}))
		}
		time.Sleep(time.Second)
		rng := rand.New(rand.NewPCG(1, 2))
		var tasks []string
		var events []ObjectEvent
		for i := range 20 {
			task := e.submit(CreateParams{Name: "storm"})
			tasks = append(tasks, task.ID)
			marker := e.markerKey(task.ID)
			for range 3 {
				events = append(events,
					ObjectEvent{Bucket: e.mem.Bucket, Key: marker},
					ObjectEvent{Key: e.recordKey(task.ID)},
				)
			}
			if i%4 == 0 {
				events = append(events, ObjectEvent{Key: marker, Removed: true})
			}
		}
		rng.Shuffle(len(events), func(i, j int) { events[i], events[j] = events[j], events[i] })
		var took atomic.Int32
		for _, ev := range events {
			for _, w := range workers {
				if w.w.Notify(ev) {
					took.Add(1)
				}
			}
		}
		if int(took.Load()) != 2*len(events) {
			t.Errorf("Notify took %d of %d events of the workers' own objects", took.Load(), 2*len(events))
		}
		for _, ev := range []ObjectEvent{
			{Bucket: "another-bucket", Key: e.markerKey(tasks[0])},
			{Key: "elsewhere/" + tasks[0]},
			{Key: DefaultPrefix + tasks[0] + "/input.csv"},
			{Key: DefaultPrefix + "_wake"},
			{Key: DefaultPrefix + "active/not-a-marker"},
			{Key: DefaultPrefix + "active/2026-01-01T000000.000Z_" + strings.Repeat("Z", 26)},
		} {
			if workers[0].w.Notify(ev) {
				t.Errorf("Notify(%+v) = true; want false for an event of another object", ev)
			}
		}
		for _, id := range tasks {
			if !e.awaitTerminal(id, 10*time.Minute) {
				t.Fatalf("task %s did not finish", id)
			}
		}
		time.Sleep(time.Minute)
		mu.Lock()
		defer mu.Unlock()
		for _, id := range tasks {
			if runs[id] != 1 {
				t.Errorf("task %s ran %d times; want once", id, runs[id])
			}
		}
	})
}

// TestNotifyIdleCost: an idle worker with events wired (PollInterval two
// minutes, MaxPollInterval ten) sends under one request a minute, as
// package s3event says.
func TestNotifyIdleCost(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		var c opCounter
		e.run(e.store(nil, c.wrap), advSucceed, eventOpts("w"))
		time.Sleep(time.Minute)
		c.take()
		time.Sleep(time.Hour)
		ops := c.take()
		t.Logf("an idle hour: %v", ops)
		if n := total(ops); n > 60 {
			t.Errorf("an idle worker with events wired sent %d requests in an hour (%v); want at most 60", n, ops)
		}
	})
}

// TestNotifyVisitFails: a visit brought by an event that fails for a
// passing reason (S3 answers 503) is tried again a second later, not at the
// next poll minutes away.
func TestNotifyVisitFails(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		var id atomic.Value
		id.Store("")
		var refused atomic.Int32
		flaky := advWrap(func(r *http.Request, next http.RoundTripper) (*http.Response, error) {
			if advIsRecord(r, http.MethodGet, id.Load().(string)) && refused.Add(1) <= 3 {
				return advErrResp(r, http.StatusServiceUnavailable, "SlowDown"), nil
			}
			return next.RoundTrip(r)
		})
		w := e.run(e.store(nil, flaky), advSucceed, eventOpts("w"))
		time.Sleep(time.Second)
		task := e.submit(CreateParams{Name: "first visit refused"})
		id.Store(task.ID)
		told := time.Now()
		w.w.Notify(ObjectEvent{Key: e.markerKey(task.ID)})
		s := advAwait(t, w.started, time.Hour, "the start")
		if refused.Load() < 3 {
			t.Fatalf("setup: %d refused reads", refused.Load())
		}
		if d := s.at.Sub(told); d > 10*time.Second {
			t.Errorf("started %s after the event, its first visit refused; want a retry within seconds", d)
		}
	})
}

// TestNotifyFleetCost counts the requests of 16 idle workers per task
// submitted, when every worker hears of every task (a broker's fan-out,
// NATS without a queue group) and when one of them does (a webhook, a queue
// group), next to the same fleet polling at the defaults. It logs the
// counts for BENCHMARKS.md and checks what the design promises: with one
// receiver no worker lists; with fan-out, each worker pays one GET of the
// record, and those that lose the task leave its marker alone.
func TestNotifyFleetCost(t *testing.T) {
	const workers, tasks = 16, 10
	for _, mode := range []string{"polling", "fan-out", "one receiver"} {
		t.Run(mode, func(t *testing.T) {
			inBubble(t, func(t *testing.T, e *advEnv) {
				var c opCounter
				var fleet []*advWorker
				for i := range workers {
					opts := eventOpts(fmt.Sprintf("w%d", i))
					if mode == "polling" {
						opts = &WorkerOptions{ID: opts.ID, ReconcileInterval: -1}
					}
					fleet = append(fleet, e.run(e.store(nil, c.wrap), advSucceed, opts))
				}
				time.Sleep(2 * time.Minute) // every worker listed once and settled into idling
				c.take()
				for i := range tasks {
					task := e.submit(CreateParams{Name: "fleet"})
					ev := ObjectEvent{Key: e.markerKey(task.ID)}
					switch mode {
					case "fan-out":
						for _, w := range fleet {
							w.w.Notify(ev)
						}
					case "one receiver":
						fleet[i%workers].w.Notify(ev)
					}
					if !e.awaitTerminal(task.ID, time.Minute) {
						t.Fatalf("task %d did not finish", i)
					}
					time.Sleep(3 * time.Second) // the fleet settles before the next
				}
				ops := c.take()
				per := func(op string) float64 { return float64(ops[op]) / tasks }
				t.Logf("%s, %d workers: per task %.1f requests: %.1f LIST, %.1f GET of records, %.1f GET of the wake object, %.1f HEAD, %.1f PUT, %.1f DELETE",
					mode, workers, float64(total(ops))/tasks, per("LIST"), per("GET"), per("GET wake"), per("HEAD"), per("PUT"), per("DELETE"))
				switch mode {
				case "one receiver":
					if ops["LIST"] != 0 {
						t.Errorf("one receiver per event: %d LISTs; want none", ops["LIST"])
					}
				case "fan-out":
					// Workers told at the same instant may race for the
					// claim: each lost claim writes and takes back a marker
					// (2 PUTs, a DELETE) and reads the record again.
					lost := per("PUT") - 3
					if per("GET") > workers+1+lost {
						t.Errorf("fan-out: %.1f record GETs per task; want one per worker, and one per lost claim", per("GET"))
					}
					if per("DELETE") > 2+lost {
						t.Errorf("fan-out: %.1f DELETEs per task; want the writers' own two, and one per lost claim (the workers that lost leave the marker alone)", per("DELETE"))
					}
				}
			})
		})
	}
}

// TestNotifyDuringLongScan: an event can reach a worker while its poll
// loop works through a long run of due markers that start nothing (here
// unreadable records, each answered slowly; in a fleet, a burst others
// claimed first). The event's task must not wait for the scan to end: the
// worker takes the event between two visits of the scan.
func TestNotifyDuringLongScan(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		const unreadable, slow = 200, 100 * time.Millisecond
		bad := map[string]bool{}
		for i := range unreadable {
			id := NewID()
			e.putRaw(e.recordKey(id), []byte(`{"schema_version": 1, "task_id": "`+id+`", "status": "que`))
			e.putRaw(advMarkerKey(id, time.Now().Add(-time.Hour+time.Duration(i)*time.Second)), nil)
			bad["/"+e.recordKey(id)] = true
		}
		var mu sync.Mutex
		read := 0
		st := e.store(nil, advWrap(func(r *http.Request, next http.RoundTripper) (*http.Response, error) {
			if r.Method == http.MethodGet && bad[strings.TrimPrefix(r.URL.Path, "/"+e.mem.Bucket)] {
				mu.Lock()
				read++
				mu.Unlock()
				time.Sleep(slow)
			}
			return next.RoundTrip(r)
		}))
		w := e.run(st, advSucceed, eventOpts("w"))
		time.Sleep(2 * time.Second) // well into the scan: 20 records of 200
		mu.Lock()
		before := read
		mu.Unlock()
		if before == 0 || before >= unreadable {
			t.Fatalf("setup: %d of %d unreadable records read when the event comes; want the scan under way", before, unreadable)
		}
		task := e.submit(CreateParams{Name: "told during a scan"})
		told := time.Now()
		w.w.Notify(ObjectEvent{Key: e.markerKey(task.ID)})
		w.w.Notify(ObjectEvent{Key: e.recordKey(task.ID)})
		s := advAwait(t, w.started, time.Hour, "the start")
		mu.Lock()
		after := read
		mu.Unlock()
		t.Logf("started %s after the event; %d unreadable records read before it, %d by the start", s.at.Sub(told), before, after)
		if s.id != task.ID {
			t.Fatalf("started %s, want %s", s.id, task.ID)
		}
		// A visit of the scan and the event's own: well under a second.
		if d := s.at.Sub(told); d > time.Second {
			t.Errorf("the task told by an event started %s after it, while the scan went on; want within a second", d)
		}
	})
}

// shiftDate returns a transport wrapper that moves the Date header of every
// response by d: a proxy in front of S3 whose clock is off, or a server
// whose Date lags its own time (versitygw's, by up to a second).
func shiftDate(d time.Duration) func(http.RoundTripper) http.RoundTripper {
	return advWrap(func(r *http.Request, next http.RoundTripper) (*http.Response, error) {
		resp, err := next.RoundTrip(r)
		if resp != nil {
			if at, perr := http.ParseTime(resp.Header.Get("Date")); perr == nil {
				resp.Header.Set("Date", at.Add(d).UTC().Format(http.TimeFormat))
			}
		}
		return resp, err
	})
}

// TestNotifyClocksApart: the producer sees the server's clock 1.5 s ahead
// of what it is, the worker 1.5 s behind, so the marker of a task submitted
// for now is named three seconds ahead of the worker's reading. Told of it
// by an event, the worker starts it at once, not when its own reading of
// the clock reaches the name; a start scheduled three seconds ahead by the
// server's clock is still not claimed before that time.
func TestNotifyClocksApart(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		producer := e.store(nil, shiftDate(1500*time.Millisecond))
		w := e.run(e.store(nil, shiftDate(-1500*time.Millisecond)), advSucceed, eventOpts("w"))
		time.Sleep(time.Second) // the first listing: the worker has read the clock
		if _, err := producer.List(e.ctx, ListOptions{}); err != nil {
			t.Fatal(err) // the producer has too
		}
		submit := func(p CreateParams) *Task {
			t.Helper()
			task := e.create(p)
			got, err := producer.Submit(e.ctx, task.ID)
			if err != nil {
				t.Fatal(err)
			}
			w.w.Notify(ObjectEvent{Key: e.markerKey(task.ID)})
			w.w.Notify(ObjectEvent{Key: e.recordKey(task.ID)})
			return got
		}

		now := submit(CreateParams{Name: "for now"})
		if ahead := time.Until(now.DueAt); ahead < time.Second {
			t.Fatalf("the producer named the task due %s ahead of the server's clock; the test needs its clock ahead", ahead)
		}
		submitted := time.Now()
		s := advAwait(t, w.started, time.Hour, "the start")
		if s.id != now.ID || s.at.Sub(submitted) > 100*time.Millisecond {
			t.Errorf("started %s %s after the events; want %s within 100ms", s.id, s.at.Sub(submitted), now.ID)
		}

		runAt := time.Now().Add(3 * time.Second)
		later := submit(CreateParams{Name: "in three seconds", RunAt: runAt})
		s = advAwait(t, w.started, time.Hour, "the scheduled start")
		if s.id != later.ID || s.at.Before(runAt) {
			t.Errorf("started %s at +%s; want %s, not before +%s", s.id, s.at.Sub(submitted), later.ID, runAt.Sub(submitted))
		}
	})
}

// fanOutBus is an event bus for the tests: every write and delete that S3
// answers with success, through a store it wraps, is told a moment later
// to every worker of the fleet, as a broker without a queue group does.
// Every request takes rtt, so that the order of the visits is that of the
// workers' turns, not of the goroutines. It counts the lost claims: PUTs of
// a record with If-Match answered 412.
type fanOutBus struct {
	bucket     string
	rtt, delay time.Duration

	wg    sync.WaitGroup // the deliveries under way
	mu    sync.Mutex
	fleet []*Worker
	lost  int
	reqs  int
}

func (b *fanOutBus) wrap(next http.RoundTripper) http.RoundTripper {
	return s3test.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		time.Sleep(b.rtt)
		resp, err := next.RoundTrip(r)
		b.mu.Lock()
		defer b.mu.Unlock()
		b.reqs++
		if err != nil || resp == nil {
			return resp, err
		}
		key := strings.TrimPrefix(r.URL.Path, "/"+b.bucket+"/")
		if resp.StatusCode == http.StatusPreconditionFailed && r.Method == http.MethodPut &&
			r.Header.Get("If-Match") != "" && strings.HasSuffix(key, "/status.json") {
			b.lost++
		}
		if resp.StatusCode/100 == 2 && (r.Method == http.MethodPut || r.Method == http.MethodDelete) {
			fleet := slices.Clone(b.fleet)
			e := ObjectEvent{Bucket: b.bucket, Key: key, Removed: r.Method == http.MethodDelete}
			b.wg.Add(1)
			go func() {
				defer b.wg.Done()
				time.Sleep(b.delay)
				for _, w := range fleet {
					w.Notify(e)
				}
			}()
		}
		return resp, err
	})
}

func (b *fanOutBus) take() (lost, reqs int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	lost, reqs = b.lost, b.reqs
	b.lost, b.reqs = 0, 0
	return lost, reqs
}

// TestNotifyFanOutStagger: when every worker of a fleet is told of every
// event, they do not all visit a new task at once and race for its claim.
// Each learns the workers that claim the tasks it is told of, and visits a
// task after its turn in an order drawn for that task: the first claims at
// once, and the claim's events reach the others before their turns. Over 40
// tasks submitted one at a time, the first ones included (while the workers
// learn each other), a fleet of 4 and one of 16 lose at most one claim per
// task on average, where each worker but one lost every claim before; each
// task starts within 100ms, by the bubble's clock, of its Submit, and a
// worker alone is never put off at all.
func TestNotifyFanOutStagger(t *testing.T) {
	const tasks = 40
	for _, workers := range []int{1, 4, 16} {
		t.Run(fmt.Sprint(workers), func(t *testing.T) {
			inBubble(t, func(t *testing.T, e *advEnv) {
				bus := &fanOutBus{bucket: e.mem.Bucket, rtt: time.Millisecond, delay: 2 * time.Millisecond}
				t.Cleanup(bus.wg.Wait) // after the workers stop
				started := make(chan advStart, tasks*workers)
				start := func(_ context.Context, job *Job) error {
					started <- advStart{job.Task.ID, time.Now()}
					return nil
				}
				var fleet []*advWorker
				for i := range workers {
					fleet = append(fleet, e.run(e.store(nil, bus.wrap), start, eventOpts(fmt.Sprintf("w%d", i))))
				}
				bus.mu.Lock()
				for _, w := range fleet {
					bus.fleet = append(bus.fleet, w.w)
				}
				bus.mu.Unlock()
				producer := e.store(nil, bus.wrap)
				time.Sleep(time.Second) // every worker listed once
				bus.take()

				lostMost, slowest := 0, time.Duration(0)
				var lostAll, reqsAll int
				for i := range tasks {
					task := e.create(CreateParams{Name: "fan-out"})
					submitted := time.Now()
					if _, err := producer.Submit(e.ctx, task.ID); err != nil {
						t.Fatal(err)
					}
					s := advAwait(t, started, time.Hour, "the start")
					if s.id != task.ID {
						t.Fatalf("task %d: started %s, want %s", i, s.id, task.ID)
					}
					slowest = max(slowest, s.at.Sub(submitted))
					if !e.awaitTerminal(task.ID, time.Minute) {
						t.Fatalf("task %d did not finish", i)
					}
					time.Sleep(time.Second) // the fleet settles
					lost, reqs := bus.take()
					lostMost = max(lostMost, lost)
					lostAll += lost
					reqsAll += reqs
				}
				t.Logf("%d workers, %d tasks: %.2f lost claims and %.1f requests per task (at most %d lost claims for one), the slowest start %s after its Submit",
					workers, tasks, float64(lostAll)/tasks, float64(reqsAll)/tasks, lostMost, slowest)
				if lostAll > tasks {
					t.Errorf("%d lost claims for %d tasks; want at most one per task on average", lostAll, tasks)
				}
				if slowest > 100*time.Millisecond {
					t.Errorf("a task started %s after its Submit; want every one within 100ms", slowest)
				}
				if workers == 1 && len(fleet[0].w.rivals) != 0 {
					t.Errorf("a worker alone learnt of rivals: %v", fleet[0].w.rivals)
				}
			})
		})
	}
}

// TestRivalsMetCount: a rival met again is counted once, so that once
// every rival met is forgotten the worker visits at once again, as one
// that never met any.
func TestRivalsMetCount(t *testing.T) {
	e := newAdvEnv(t)
	w, err := NewWorker(e.admin, HandlerFunc(advSucceed), &WorkerOptions{ID: "w"})
	if err != nil {
		t.Fatal(err)
	}
	w.rivalSeen("a", true)
	w.rivalSeen("a", true)
	w.rivalSeen("b", true)
	if w.met != 2 {
		t.Fatalf("met %d rivals after meeting a twice and b once, want 2", w.met)
	}
	w.dropRival("a")
	w.dropRival("b")
	w.peerSeen("c", false) // heard of by its presence only: not met
	if w.met != 0 || w.stagger("some task") != 0 {
		t.Errorf("after forgetting every rival met: met %d, stagger %s; want 0 and none (only c, never met, is left)", w.met, w.stagger("some task"))
	}
}
