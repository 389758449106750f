package main

// Scenario 7d, 7e and 7f: how soon submitted tasks are picked up.

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/s3test"
)

// 7d: pickup by a worker of the same process.

type fleetPickupRow struct {
	variant string
	poll    time.Duration
	pickups []time.Duration
	c       counts // the worker's requests from each Submit to its completion, summed
}

type producerKey struct{}

// splitMeter counts the requests made with a context marked by producerKey
// on p, the others on w: the producer and the worker of one Store.
func splitMeter(p, w *meter) wrapper {
	return func(next http.RoundTripper) http.RoundTripper {
		pw, ww := p.wrap(next), w.wrap(next)
		return s3test.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Context().Value(producerKey{}) != nil {
				return pw.RoundTrip(r)
			}
			return ww.RoundTrip(r)
		})
	}
}

// fleetPickup times Submit → OnClaim for one worker at the default
// PollInterval, on the producer's own Store (local: Submit wakes it at once)
// or on a Store of its own (it learns of the task from the wake object).
func fleetPickup(ctx context.Context, cfg *config, local bool) (fleetPickupRow, error) {
	row := fleetPickupRow{variant: "worker on the submitting Store (local wake)", poll: s3task.DefaultPollInterval}
	name := "fleet-pickup-local"
	if !local {
		row.variant, name = "worker on a Store of its own", "fleet-pickup-remote"
	}
	e, err := openFleetEnv(cfg, name)
	if err != nil {
		return row, err
	}
	defer e.close()
	pm, wm := newMeter(), newMeter()
	pctx := context.WithValue(ctx, producerKey{}, true)
	ps, ids, err := e.producer(pctx, cfg.fleet.samples+1, 8, splitMeter(pm, wm))
	if err != nil {
		return row, err
	}
	ws := ps
	if !local {
		if ws, err = e.store(e.client(wm.wrap), "tasks", nil); err != nil {
			return row, err
		}
	}
	p := newPickups(1)
	w, err := s3task.NewWorker(ws, noWork, &s3task.WorkerOptions{ID: "pickup-worker", ReconcileInterval: -1, Hooks: p.hooks()})
	if err != nil {
		return row, err
	}
	rw := startWorker(ctx, w)
	defer rw.stop()
	pickup := func(id string) (time.Duration, error) {
		return p.pickup(pctx, ps, id, 3*s3task.DefaultPollInterval+5*time.Second)
	}
	if _, err := pickup(ids[0]); err != nil { // the wake object exists from here on
		return row, err
	}
	row.c = newCounts()
	for _, id := range ids[1:] {
		// Land each Submit at a random point of the worker's poll cycle;
		// a local wake does not depend on it, so it needs no long pause.
		pause := time.Duration(mrand.Int64N(int64(s3task.DefaultPollInterval)))
		if local {
			pause = 50*time.Millisecond + time.Duration(mrand.Int64N(int64(250*time.Millisecond)))
		}
		if err := s3test.Sleep(ctx, pause); err != nil {
			return row, err
		}
		before := wm.snapshot()
		d, err := pickup(id)
		if err != nil {
			return row, err
		}
		row.pickups = append(row.pickups, d)
		row.c = row.c.plus(wm.snapshot().minus(before))
	}
	return row, nil
}

// 7e: delayed start.

type fleetDelayed struct {
	lead        time.Duration   // RunAt - the start of Create
	late        time.Duration   // claim - RunAt
	lists       []time.Duration // the worker's LISTs from Create to the claim, relative to RunAt
	listsBefore int             // LISTs before RunAt (to the millisecond, as the marker holds it)
	listsAfter  int             // LISTs at or after it, up to the claim
	c           counts          // the worker's requests from Create to the claim
}

// fleetDelayedStart creates, uploads and submits a task with RunAt set
// cfg.fleet.runAt ahead, watched by one idle worker on a Store of its own
// at the default PollInterval, and notes when the worker listed.
func fleetDelayedStart(ctx context.Context, cfg *config) (fleetDelayed, error) {
	var res fleetDelayed
	e, err := openFleetEnv(cfg, "fleet-delayed")
	if err != nil {
		return res, err
	}
	defer e.close()
	var mu sync.Mutex
	var listAt []time.Time
	stamp := func(next http.RoundTripper) http.RoundTripper {
		return s3test.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			if s3test.Op(r) == "LIST" {
				mu.Lock()
				listAt = append(listAt, time.Now())
				mu.Unlock()
			}
			return next.RoundTrip(r)
		})
	}
	wm := newMeter()
	ws, err := e.store(e.client(stamp, wm.wrap), "tasks", nil)
	if err != nil {
		return res, err
	}
	ps, err := e.store(e.client(), "tasks", nil)
	if err != nil {
		return res, err
	}
	claims := make(chan time.Time, 1)
	w, err := s3task.NewWorker(ws, noWork, &s3task.WorkerOptions{
		ID: "delayed-worker", ReconcileInterval: -1,
		Hooks: s3task.Hooks{OnClaim: func(*s3task.Task) { offer(claims, time.Now()) }},
	})
	if err != nil {
		return res, err
	}
	rw := startWorker(ctx, w)
	defer rw.stop()
	// Let the worker make its first listing and settle into idle polling.
	if err := s3test.Sleep(ctx, s3task.DefaultPollInterval/2+time.Duration(mrand.Int64N(int64(s3task.DefaultPollInterval)))); err != nil {
		return res, err
	}
	start := time.Now()
	before := wm.snapshot()
	runAt := start.Add(cfg.fleet.runAt)
	t, err := ps.Create(ctx, s3task.CreateParams{Name: "delayed", Type: "bench", RunAt: runAt})
	if err != nil {
		return res, err
	}
	if err := ps.UploadInput(ctx, t.ID, strings.NewReader("id,name\n1,alpha\n")); err != nil {
		return res, err
	}
	if _, err := ps.Submit(ctx, t.ID); err != nil {
		return res, err
	}
	at, err := awaitOne(ctx, claims, cfg.fleet.runAt+3*s3task.DefaultPollInterval+5*time.Second)
	if err != nil {
		return res, err
	}
	res.c = wm.snapshot().minus(before)
	res.lead, res.late = cfg.fleet.runAt, at.Sub(runAt)
	// The marker, and the worker's wait, hold RunAt to the millisecond.
	due := runAt.Truncate(time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	for _, l := range listAt {
		if l.Before(start) || l.After(at) {
			continue
		}
		res.lists = append(res.lists, l.Sub(runAt))
		if l.Before(due) {
			res.listsBefore++
		} else {
			res.listsAfter++
		}
	}
	return res, nil
}

// 7f: LISTs per submitted task with idle workers.

type fleetIdleRow struct {
	workers int
	poll    time.Duration
	samples int
	c       counts // the workers' requests over the samples
	pickups []time.Duration
}

func (r fleetIdleRow) perTask(n int) float64 { return float64(n) / float64(max(r.samples, 1)) }

// fleetIdleLists submits tasks one at a time to n idle workers (each on a
// Store of its own, a producer on another), each Submit at a random point
// of the poll cycle and only once every worker has had a PollInterval to
// notice the previous one, and counts the workers' LISTs.
func fleetIdleLists(ctx context.Context, cfg *config, n int) (fleetIdleRow, error) {
	fc := cfg.fleet
	row := fleetIdleRow{workers: n, poll: fc.idlePoll, samples: fc.idleSamples}
	e, err := openFleetEnv(cfg, fmt.Sprintf("fleet-idle-%d", n))
	if err != nil {
		return row, err
	}
	defer e.close()
	ps, ids, err := e.producer(ctx, row.samples+1, 8)
	if err != nil {
		return row, err
	}
	wm := newMeter()
	p := newPickups(n)
	var running []*runningWorker
	defer func() { _ = stopAll(running) }()
	for i := range n {
		ws, err := e.store(e.client(wm.wrap), "tasks", nil)
		if err != nil {
			return row, err
		}
		w, err := s3task.NewWorker(ws, noWork, &s3task.WorkerOptions{
			// MaxPollInterval an hour: the safety listing (once a
			// minute per idle worker at the default; scenario 2 counts
			// it) stays out of what a Submit costs.
			ID: fmt.Sprintf("idle-%d", i), PollInterval: fc.idlePoll, MaxPollInterval: time.Hour, ReconcileInterval: -1, Hooks: p.hooks(),
		})
		if err != nil {
			return row, err
		}
		running = append(running, startWorker(ctx, w))
	}
	// Every worker's start-up listing is behind it before anything is
	// counted: on a loaded machine a worker may start late.
	if err := waitUntil(ctx, 30*time.Second, "every idle worker's first listing", func() bool {
		return wm.snapshot().kinds["LIST"] >= n
	}); err != nil {
		return row, err
	}
	// Every worker has noticed a Submit within a PollInterval of it, given
	// a margin for the round trips.
	settle := fc.idlePoll + 250*time.Millisecond
	pickup := func(id string) (time.Duration, error) {
		start := time.Now()
		d, err := p.pickup(ctx, ps, id, 3*fc.idlePoll+5*time.Second)
		if err != nil {
			return 0, err
		}
		return d, s3test.Sleep(ctx, time.Until(start.Add(settle)))
	}
	if _, err := pickup(ids[0]); err != nil { // the wake object exists from here on
		return row, err
	}
	before := wm.snapshot()
	for _, id := range ids[1:] {
		if err := s3test.Sleep(ctx, time.Duration(mrand.Int64N(int64(fc.idlePoll)))); err != nil {
			return row, err
		}
		d, err := pickup(id)
		if err != nil {
			return row, err
		}
		row.pickups = append(row.pickups, d)
	}
	row.c = wm.snapshot().minus(before)
	return row, nil
}
