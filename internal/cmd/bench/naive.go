package main

// Scenario 4: the same work through s3task and through the naive designs of
// internal/baseline, on the same S3, with the same producers and workers.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/baseline"
	"github.com/s3task/s3task/internal/s3test"
)

const (
	designOurs     = "s3task"
	designShared   = "(a) shared queue.json, no condition"
	designSharedIM = "(b) shared queue.json, If-Match"
	designRename   = "(c) copy-then-delete rename"
)

type naiveRow struct {
	design     string
	tasks      int
	distinct   int
	duplicates int
	lost       int
	errors     int
	elapsed    time.Duration
	producer   counts
	worker     counts
}

type naiveResult struct {
	cfg   *config
	where string
	rows  []naiveRow
}

func (r *naiveResult) row(design string) (naiveRow, bool) {
	for _, row := range r.rows {
		if row.design == design {
			return row, true
		}
	}
	return naiveRow{}, false
}

func runNaive(ctx context.Context, e *env, log io.Writer) (result, error) {
	res := &naiveResult{cfg: e.cfg, where: e.where()}
	row, err := naiveOurs(ctx, e)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", designOurs, err)
	}
	res.rows = append(res.rows, row)
	designs := []struct {
		name string
		mk   func(*s3.Client) baseline.Queue
	}{
		{designShared, func(c *s3.Client) baseline.Queue {
			return &baseline.SharedQueue{Client: c, Bucket: e.bucket, Key: e.prefix + "a/queue.json"}
		}},
		{designSharedIM, func(c *s3.Client) baseline.Queue {
			return &baseline.SharedQueue{Client: c, Bucket: e.bucket, Key: e.prefix + "b/queue.json", Conditional: true}
		}},
		{designRename, func(c *s3.Client) baseline.Queue {
			return &baseline.RenameQueue{Client: c, Bucket: e.bucket, Prefix: e.prefix + "c/"}
		}},
	}
	for _, d := range designs {
		row, err := naiveBaseline(ctx, e, d.name, d.mk)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", d.name, err)
		}
		res.rows = append(res.rows, row)
	}
	for _, row := range res.rows {
		fmt.Fprintf(log, "bench: naive: %s: %d duplicates, %d lost, %s\n", row.design, row.duplicates, row.lost, row.elapsed.Round(time.Millisecond))
	}
	return res, nil
}

// share splits n tasks among p producers: producer i gets the i-th share.
func share(n, p, i int) int { return n/p + btoi(i < n%p) }

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// naiveOurs runs the producers and workers through s3task.
func naiveOurs(ctx context.Context, e *env) (naiveRow, error) {
	cfg := e.cfg
	row := naiveRow{design: designOurs, tasks: cfg.naiveTasks}
	pm, wm := newMeter(), newMeter()
	led := newLedger(row.tasks)
	lat := delay(cfg.latMin, cfg.latMax)
	var running []*runningWorker
	defer func() { _ = stopAll(running) }()
	start := time.Now()
	for i := range cfg.naiveWorkers {
		ws, err := e.store(e.client(lat, wm.wrap), "s3task", nil)
		if err != nil {
			return row, err
		}
		w, err := s3task.NewWorker(ws, noWork, &s3task.WorkerOptions{
			ID: fmt.Sprintf("worker-%d", i), Concurrency: 1, PollInterval: cfg.contPoll,
			Hooks: led.hooks(),
		})
		if err != nil {
			return row, err
		}
		running = append(running, startWorker(ctx, w))
	}
	var (
		mu  sync.Mutex
		ids []string
		wg  sync.WaitGroup
	)
	errs := make([]error, cfg.naiveProducers)
	for p := range cfg.naiveProducers {
		ps, err := e.store(e.client(lat, pm.wrap), "s3task", nil)
		if err != nil {
			return row, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range share(row.tasks, cfg.naiveProducers, p) {
				id, err := prepare(ctx, ps, fmt.Sprintf("producer %d task %d", p, i))
				if err == nil {
					_, err = ps.Submit(ctx, id)
				}
				if err != nil {
					errs[p] = err
					return
				}
				mu.Lock()
				ids = append(ids, id)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return row, err
	}
	select {
	case <-led.allDone:
	case <-time.After(5 * time.Minute):
	case <-ctx.Done():
		return row, ctx.Err()
	}
	row.elapsed = time.Since(start)
	row.producer, row.worker = pm.snapshot(), wm.snapshot()
	_, row.distinct, row.duplicates, row.lost = led.tally(ids)
	return row, nil
}

// naiveBaseline runs the producers and workers through a baseline design.
// Workers pop until the producers are done and the queue looks empty.
func naiveBaseline(ctx context.Context, e *env, design string, mk func(*s3.Client) baseline.Queue) (naiveRow, error) {
	cfg := e.cfg
	row := naiveRow{design: design, tasks: cfg.naiveTasks}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	pm, wm := newMeter(), newMeter()
	lat := delay(cfg.latMin, cfg.latMax)
	if err := mk(e.client()).Init(ctx); err != nil {
		return row, err
	}
	ids := make([]string, row.tasks)
	for i := range ids {
		ids[i] = s3task.NewID()
	}
	led := newLedger(row.tasks)
	var (
		producersDone atomic.Bool
		failures      atomic.Int64
		pwg, wwg      sync.WaitGroup
	)
	start := time.Now()
	for range cfg.naiveWorkers {
		q := mk(e.client(lat, wm.wrap))
		wwg.Add(1)
		go func() {
			defer wwg.Done()
			for ctx.Err() == nil {
				// An empty queue means the end only if every push had
				// finished before this pop began.
				finished := producersDone.Load()
				id, err := q.Pop(ctx)
				if err != nil {
					failures.Add(1)
					_ = s3test.Sleep(ctx, cfg.contPoll)
					continue
				}
				if id == "" {
					if finished {
						return
					}
					_ = s3test.Sleep(ctx, cfg.contPoll)
					continue
				}
				led.claim(id)
				led.complete(id)
				if err := q.Done(ctx, id); err != nil {
					failures.Add(1)
				}
			}
		}()
	}
	for p := range cfg.naiveProducers {
		q := mk(e.client(lat, pm.wrap))
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			for i := p; i < len(ids); i += cfg.naiveProducers {
				if err := q.Push(ctx, ids[i]); err != nil {
					failures.Add(1)
				}
			}
		}()
	}
	pwg.Wait()
	producersDone.Store(true)
	wwg.Wait()
	row.elapsed = time.Since(start)
	if err := ctx.Err(); err != nil {
		return row, fmt.Errorf("did not finish: %w", err)
	}
	row.errors = int(failures.Load())
	row.producer, row.worker = pm.snapshot(), wm.snapshot()
	_, row.distinct, row.duplicates, row.lost = led.tally(ids)
	return row, nil
}

func (r *naiveResult) tables() []*table {
	cfg := r.cfg
	t := newTable(fmt.Sprintf("Scenario 4: s3task next to the naive designs: %d tasks, %d producers submitting while %d workers drain", cfg.naiveTasks, cfg.naiveProducers, cfg.naiveWorkers),
		"design", "processed", "duplicates", "lost", "producer req/task", "worker req/task", "412s/task", "$ per 1,000 tasks", "tasks/s", "errors")
	k := newTable("Scenario 4b: requests per task by kind (producers and workers together)",
		"design", "LIST", "GET", "HEAD", "PUT", "POST", "DELETE", "total")
	for _, row := range r.rows {
		all := row.producer.plus(row.worker)
		per := perUnit(all.kinds, row.tasks)
		lost412 := statusCount(all, http.StatusPreconditionFailed)
		t.add(row.design, row.distinct, row.duplicates, row.lost,
			float64(row.producer.total())/float64(row.tasks), float64(row.worker.total())/float64(row.tasks),
			float64(lost412)/float64(row.tasks), dollars(cfg.prices.cost(scale(per, 1000))),
			fmt.Sprintf("%.0f", float64(row.tasks)/row.elapsed.Seconds()), row.errors)
		cells := []any{row.design}
		cells = append(cells, kindCells(per)...)
		cells = append(cells, sumValues(per))
		k.add(cells...)
	}
	lat := "no added latency"
	if cfg.latMax > 0 {
		lat = fmt.Sprintf("%s-%s of latency added to every request", cfg.latMin, cfg.latMax)
	}
	t.note("Same S3 (%s), same %d producers and %d workers, each with its own S3 client, %s. Zero-work tasks; workers poll every %s when they find nothing. s3task workers run at Concurrency 1.", r.where, cfg.naiveProducers, cfg.naiveWorkers, lat, cfg.contPoll)
	t.note("Duplicates: task hand-outs beyond the first (the same task processed again). Lost: tasks never processed. For s3task a hand-out is a claim won (OnClaim) and processed means completed.")
	t.note("s3task's producer does more than push an ID: Create, an input upload, and Submit, which verifies the input. Its worker keeps a status record with a lease and a completion; the baselines only move IDs. Compare the columns with that in mind; the point of the baselines is the duplicates and lost columns.")
	if row, ok := r.row(designOurs); ok {
		all := row.producer.plus(row.worker)
		t.note("s3task's 412s here, unlike in the contention scenario, come from the trickle of submissions: every Submit changes the wake object, every idle worker sees it at its next check, LISTs (%s LISTs per task here) and goes for the same new task; all but one lose the claim. See BENCHMARKS.md for what it costs and a way out.", num(float64(all.kinds["LIST"])/float64(row.tasks)))
	}
	t.note("(a) loses the tasks a producer added while a worker's stale copy was in flight, and hands out again the tasks a stale copy put back. (b) is correct but every producer and worker queues on one object: each 412 is a lost race that costs another GET and PUT. (c) lets two workers that both copy before either deletes both take the task.")
	return []*table{t, k}
}
