package main

// Scenario 7a, 7b and 7c: fleets draining a backlog, and an idle fleet's
// reconcile.

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/s3test"
)

// 7a: polling cost against the backlog.

type fleetDrainRow struct {
	design    string
	backlog   int
	workers   int
	claims    int    // won in the measured window
	completes int    // completed in it
	c         counts // the workers' requests in it
	elapsed   time.Duration
	seed      time.Duration

	// The whole run, from the workers' start to their stop.
	whole                       counts
	wholeClaims, wholeCompletes int
	wholeElapsed                time.Duration
}

func (r fleetDrainRow) perClaim(n int) float64 { return float64(n) / float64(max(r.claims, 1)) }

func (r fleetDrainRow) lists() float64      { return r.perClaim(r.c.kinds["LIST"]) }
func (r fleetDrainRow) recordGETs() float64 { return r.perClaim(labelCount(r.c, "GET record")) }
func (r fleetDrainRow) recordGETsPerDone() float64 {
	return float64(labelCount(r.c, "GET record")) / float64(max(r.completes, 1))
}
func (r fleetDrainRow) markerDELETEs() float64 { return r.perClaim(labelCount(r.c, "DELETE marker")) }
func (r fleetDrainRow) puts() float64          { return r.perClaim(r.c.kinds["PUT"]) }
func (r fleetDrainRow) lost() float64          { return r.perClaim(r.c.lostCAS) }
func (r fleetDrainRow) total() float64         { return r.perClaim(r.c.total()) }

// fleetDrain seeds a backlog of queued tasks, submitted over the past hour,
// and lets the fleet claim with a handler that returns at once. Requests
// are counted from the claim that ends the warm-up (one per worker, by when
// every worker has listed) to cfg.fleet.claims claims later, where the
// workers are stopped: the start and the stop, where each worker makes one
// LIST that no claim follows, are left out of the per-claim numbers.
func fleetDrain(ctx context.Context, cfg *config, design string, backlog int) (fleetDrainRow, error) {
	fc := cfg.fleet
	row := fleetDrainRow{design: design, backlog: backlog, workers: fc.workers}
	e, err := openFleetEnv(cfg, fmt.Sprintf("fleet-%s-%d", designTag(design), backlog))
	if err != nil {
		return row, err
	}
	defer freeMemory() // after close: the next run's backlog needs the room
	defer e.close()
	prefix := e.prefix + "tasks/"
	now := time.Now()
	t0 := time.Now()
	if _, err := e.seedQueue(ctx, design, prefix, backlog, func(i int) time.Time {
		return now.Add(-time.Second - time.Duration(i)*(fleetAge/time.Duration(backlog)))
	}); err != nil {
		return row, err
	}
	row.seed = time.Since(t0)
	m := newMeter()
	if design == designOld {
		// Each listing the emulation starts ends in a claim, so its
		// whole run has no start or stop effect to leave out.
		f := &oldFleet{e: e, prefix: prefix, workers: fc.workers, stopAt: oldClaims(fc, backlog), m: m}
		start := time.Now()
		row.claims, row.completes, err = f.run(ctx)
		row.elapsed = time.Since(start)
		row.c = m.snapshot()
		row.whole, row.wholeClaims, row.wholeCompletes, row.wholeElapsed = row.c, row.claims, row.completes, row.elapsed
		return row, err
	}
	warm, end := int64(fc.workers), int64(fc.workers+fc.claims)
	var (
		mu           sync.Mutex
		from, to     counts
		doneFrom     int64
		doneTo       int64
		fromT, toT   time.Time
		done         atomic.Int64
		claims, ends int
	)
	onClaim := func(_ string, at time.Time, n int64) {
		switch n {
		case warm, end:
			c, d := m.snapshot(), done.Load()
			mu.Lock()
			if n == warm {
				from, doneFrom, fromT = c, d, at
			} else {
				to, doneTo, toT = c, d, at
			}
			mu.Unlock()
		}
	}
	onComplete := func() { done.Add(1) }
	start := time.Now()
	claims, ends, err = newFleet(ctx, e, "tasks", fc.workers, int(end), 0, m, onClaim, onComplete)
	if err != nil {
		return row, err
	}
	row.whole, row.wholeClaims, row.wholeCompletes, row.wholeElapsed = m.snapshot(), claims, ends, time.Since(start)
	mu.Lock()
	defer mu.Unlock()
	row.c, row.claims, row.completes, row.elapsed = to.minus(from), int(end-warm), int(doneTo-doneFrom), toT.Sub(fromT)
	return row, nil
}

// oldClaims is how many claims of the previous design 7a runs at a backlog:
// cfg.claims, or fewer where each claim's full listing would take more
// than oldPages pages in all (its LISTs per claim are the pages of one
// listing however many claims are made), but at least one per worker.
func oldClaims(fc fleetConfig, backlog int) int {
	pages := (backlog + 999) / 1000
	return min(fc.claims, max(fc.workers, fc.oldPages/pages))
}

// 7b: oldest first.

// waitStats compares each task's wait for a claim with the wait it would
// have had under a strict FIFO in the same run: the k-th earliest claim
// time given to the task due k-th.
type waitStats struct {
	design  string
	n       int
	work    time.Duration
	elapsed time.Duration
	claims  int     // claims won
	dups    int     // claims of a task claimed before
	lost    float64 // lost claims per claim

	actual, fifo                    []time.Duration // per task, in due order
	p50, p99, max, fp50, fp99, fmax time.Duration
	p99Ratio, maxTaskRatio          float64
	considered                      int // tasks whose FIFO wait is at least one handler duration
	worstRank                       int // the due rank (from 0) of the task with the largest ratio
}

// computeWaits fills in the statistics from each task's due and claim time.
func computeWaits(design string, due, claimed map[string]time.Time, work time.Duration) (*waitStats, error) {
	ids := make([]string, 0, len(due))
	for id := range due {
		if _, ok := claimed[id]; !ok {
			return nil, fmt.Errorf("task %s was never claimed", id)
		}
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool {
		if a, b := due[ids[i]], due[ids[j]]; !a.Equal(b) {
			return a.Before(b)
		}
		return ids[i] > ids[j] // inverted ULIDs: the greater was made earlier
	})
	claims := make([]time.Time, 0, len(ids))
	for _, id := range ids {
		claims = append(claims, claimed[id])
	}
	sort.Slice(claims, func(i, j int) bool { return claims[i].Before(claims[j]) })
	ws := &waitStats{design: design, n: len(ids), work: work}
	for k, id := range ids {
		a, f := claimed[id].Sub(due[id]), claims[k].Sub(due[id])
		ws.actual, ws.fifo = append(ws.actual, a), append(ws.fifo, f)
		if f >= work && f > 0 {
			ws.considered++
			if r := float64(a) / float64(f); r > ws.maxTaskRatio {
				ws.maxTaskRatio, ws.worstRank = r, k
			}
		}
	}
	ws.p50, ws.p99, ws.max = percentile(ws.actual, 50), percentile(ws.actual, 99), percentile(ws.actual, 100)
	ws.fp50, ws.fp99, ws.fmax = percentile(ws.fifo, 50), percentile(ws.fifo, 99), percentile(ws.fifo, 100)
	if ws.fp99 > 0 {
		ws.p99Ratio = float64(ws.p99) / float64(ws.fp99)
	}
	return ws, nil
}

// fleetOrder seeds cfg.fleet.queue queued tasks submitted evenly over the
// time the fleet needs to drain them (queue × work / workers) up to now,
// and lets the fleet drain them with a handler that sleeps work.
func fleetOrder(ctx context.Context, cfg *config, design string) (*waitStats, error) {
	fc := cfg.fleet
	e, err := openFleetEnv(cfg, "fleet-order-"+designTag(design))
	if err != nil {
		return nil, err
	}
	defer e.close()
	prefix := e.prefix + "tasks/"
	spread := time.Duration(fc.queue) * max(fc.work, time.Millisecond) / time.Duration(fc.workers)
	now := time.Now()
	due, err := e.seedQueue(ctx, design, prefix, fc.queue, func(i int) time.Time {
		return now.Add(-spread + time.Duration(i)*spread/time.Duration(fc.queue))
	})
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	claimed := make(map[string]time.Time, fc.queue)
	dups := 0
	onClaim := func(id string, at time.Time, _ int64) {
		mu.Lock()
		if _, dup := claimed[id]; dup {
			dups++
		} else {
			claimed[id] = at
		}
		mu.Unlock()
	}
	m := newMeter()
	start := time.Now()
	var claims int
	if design == designOld {
		f := &oldFleet{e: e, prefix: prefix, workers: fc.workers, stopAt: fc.queue, work: fc.work, m: m, onClaim: onClaim}
		claims, _, err = f.run(ctx)
	} else {
		claims, _, err = newFleet(ctx, e, "tasks", fc.workers, fc.queue, fc.work, m, onClaim, nil)
	}
	if err != nil {
		return nil, err
	}
	elapsed := time.Since(start)
	mu.Lock()
	defer mu.Unlock()
	ws, err := computeWaits(design, due, claimed, fc.work)
	if err != nil {
		return nil, err
	}
	ws.elapsed, ws.claims, ws.dups = elapsed, claims, dups
	ws.lost = float64(m.snapshot().lostCAS) / float64(max(claims, 1))
	return ws, nil
}

// 7c: the reconcile bill of an idle fleet.

type fleetReconRow struct {
	design  string
	workers int
	window  time.Duration
	runs    int // reconcile runs that read records
	tasks   int // records read by them, as reported
	c       counts
	took    time.Duration // real time the runs took
}

func (r fleetReconRow) perInterval(n int) float64 {
	return float64(n) / reconcileIntervals
}

// fleetFirstRunWait is how long past its window 7c waits for the holder's
// first reconcile run, on a machine too loaded to end it within.
const fleetFirstRunWait = 5 * time.Minute

// fleetReconcile watches an idle fleet for four ReconcileIntervals over a
// bucket of finished tasks created over the last 12 hours, inside the
// default ReconcileWindow. New: the library's workers, where one holds the
// reconciler lease; they poll four times per ReconcileInterval, since a
// worker's turn at the lease comes between polls. Previous: every worker
// calls Store.Reconcile over the window once per interval, the first time
// at a random point of the first, four times in all, however long the runs
// take on this machine: the count is the bill, whatever the server's pace.
// The new design's window ends no sooner than the holder's first run.
func fleetReconcile(ctx context.Context, cfg *config, design string) (fleetReconRow, error) {
	fc := cfg.fleet
	row := fleetReconRow{design: design, workers: fc.workers, window: reconcileIntervals * fc.reconcile}
	e, err := openFleetEnv(cfg, "fleet-reconcile-"+designTag(design))
	if err != nil {
		return row, err
	}
	defer e.close()
	base, err := e.template(ctx)
	if err != nil {
		return row, err
	}
	prefix := e.prefix + "tasks/"
	now := time.Now()
	err = e.seed(ctx, fc.finished, func(i int) ([]seedObject, error) {
		at := now.Add(-time.Minute - time.Duration(i)*(12*time.Hour/time.Duration(fc.finished)))
		rec := make(map[string]any, len(base))
		for k, v := range base {
			rec[k] = v
		}
		rec["status"], rec["attempt_id"], rec["output_object_path"] = string(s3task.StatusCompleted), 1, "x"
		delete(rec, "due_at")
		id, body, err := cloneRecord(rec, prefix, i, at)
		return []seedObject{{prefix + id + "/status.json", body}}, err
	})
	if err != nil {
		return row, err
	}
	m := newMeter()
	var runs, tasks atomic.Int64
	start := time.Now()
	if design == designOld {
		var wg sync.WaitGroup
		errs := make([]error, fc.workers)
		for i := range fc.workers {
			s, err := e.store(e.client(m.wrap), "tasks", nil)
			if err != nil {
				return row, err
			}
			wg.Go(func() {
				next := start.Add(time.Duration(mrand.Int64N(int64(fc.reconcile))))
				for range reconcileIntervals {
					if errs[i] = s3test.Sleep(ctx, time.Until(next)); errs[i] != nil {
						return
					}
					next = next.Add(fc.reconcile)
					rep, err := s.Reconcile(ctx, s3task.ReconcileOptions{Since: time.Now().Add(-s3task.DefaultReconcileWindow)})
					if err != nil {
						errs[i] = err
						return
					}
					runs.Add(1)
					tasks.Add(int64(rep.Tasks))
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return row, err
		}
	} else {
		var running []*runningWorker
		var firstOnce sync.Once
		first := make(chan struct{}) // closed when the holder's first run ends
		for i := range fc.workers {
			s, err := e.store(e.client(m.wrap), "tasks", nil)
			if err != nil {
				_ = stopAll(running)
				return row, err
			}
			w, err := s3task.NewWorker(s, noWork, &s3task.WorkerOptions{
				ID: fmt.Sprintf("idle-%d", i), ReconcileInterval: fc.reconcile, PollInterval: fc.reconcile / 4,
				Hooks: s3task.Hooks{OnReconcile: func(r *s3task.ReconcileReport) {
					runs.Add(1)
					tasks.Add(int64(r.Tasks))
					firstOnce.Do(func() { close(first) })
				}},
			})
			if err != nil {
				_ = stopAll(running)
				return row, err
			}
			running = append(running, startWorker(ctx, w))
		}
		err := s3test.Sleep(ctx, row.window)
		if err == nil {
			// The bill is that of a fleet whose holder has reconciled
			// once: on a loaded machine its first turn, over every task,
			// may end after the window, and the workers wait for it (up
			// to fleetFirstRunWait more; past that, none ran).
			select {
			case <-first:
			case <-time.After(fleetFirstRunWait):
			case <-ctx.Done():
				err = ctx.Err()
			}
		}
		if serr := stopAll(running); err == nil {
			err = serr
		}
		if err != nil {
			return row, err
		}
	}
	row.took = time.Since(start)
	row.c, row.runs, row.tasks = m.snapshot(), int(runs.Load()), int(tasks.Load())
	return row, nil
}
