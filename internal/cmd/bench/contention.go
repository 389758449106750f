package main

// Scenario 3: many workers draining one queue: throughput, lost claims and
// requests per task.

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/s3task/s3task"
)

type contRow struct {
	workers, tasks int
	elapsed        time.Duration
	claims         int // won, counted by OnClaim
	lostCAS        int // status.json If-Match PUTs answered 412
	distinct       int
	duplicates     int
	lost           int
	worker         counts
	producer       counts
}

func (r contRow) lostPerClaim() float64 { return float64(r.lostCAS) / float64(max(r.claims, 1)) }

type contResult struct {
	cfg   *config
	where string
	rows  []contRow
}

func runContention(ctx context.Context, cfg *config, log io.Writer) (result, error) {
	res := &contResult{cfg: cfg}
	for _, n := range cfg.contWorkers {
		row, where, err := drain(ctx, cfg, n)
		if err != nil {
			return nil, fmt.Errorf("%d workers: %w", n, err)
		}
		res.where = where
		fmt.Fprintf(log, "bench: contention: %d workers drained %d tasks in %s, %d lost claims\n", n, row.tasks, row.elapsed.Round(time.Millisecond), row.lostCAS)
		res.rows = append(res.rows, row)
	}
	return res, nil
}

// drain queues cfg.contTasks zero-work tasks, then lets n workers of
// Concurrency 4 drain them.
func drain(ctx context.Context, cfg *config, n int) (contRow, string, error) {
	row := contRow{workers: n, tasks: cfg.contTasks}
	e, err := openEnv(cfg, fmt.Sprintf("contention-%d", n))
	if err != nil {
		return row, "", err
	}
	defer e.close()
	pm := newMeter()
	producer, ids, err := e.producer(ctx, row.tasks, 32, pm.wrap)
	if err != nil {
		return row, "", err
	}
	if err := submitMany(ctx, producer, ids, 32); err != nil {
		return row, "", err
	}
	row.producer = pm.snapshot()

	wm := newMeter()
	led := newLedger(row.tasks)
	var workers []*s3task.Worker
	for i := range n {
		ws, err := e.store(e.client(delay(cfg.latMin, cfg.latMax), wm.wrap), "tasks", nil)
		if err != nil {
			return row, "", err
		}
		w, err := s3task.NewWorker(ws, noWork, &s3task.WorkerOptions{
			ID: fmt.Sprintf("worker-%d", i), Concurrency: 4, PollInterval: cfg.contPoll,
			Hooks: led.hooks(),
		})
		if err != nil {
			return row, "", err
		}
		workers = append(workers, w)
	}
	start := time.Now()
	var running []*runningWorker
	for _, w := range workers {
		running = append(running, startWorker(ctx, w))
	}
	var waitErr error
	select {
	case <-led.allDone:
	case <-time.After(10 * time.Minute):
		waitErr = fmt.Errorf("not every task completed in 10 minutes")
	case <-ctx.Done():
		waitErr = ctx.Err()
	}
	row.elapsed = time.Since(start)
	row.worker = wm.snapshot()
	if err := stopAll(running); err != nil {
		return row, "", err
	}
	if waitErr != nil {
		return row, "", waitErr
	}
	row.lostCAS = row.worker.lostCAS
	row.claims, row.distinct, row.duplicates, row.lost = led.tally(ids)
	return row, e.where(), nil
}

func (r *contResult) tables() []*table {
	t := newTable(fmt.Sprintf("Scenario 3: contention, workers of Concurrency 4 draining %d zero-work tasks", r.cfg.contTasks),
		"workers", "tasks/s", "lost claims per claim", "LIST/task", "GET/task", "HEAD/task", "PUT/task", "POST/task", "DELETE/task", "total/task", "$ per 1,000 tasks", "claims won", "duplicates", "lost tasks", "drain time")
	for _, row := range r.rows {
		per := perUnit(row.worker.kinds, row.tasks)
		cells := []any{row.workers, fmt.Sprintf("%.0f", float64(row.tasks)/row.elapsed.Seconds()), fmt.Sprintf("%.3f", row.lostPerClaim())}
		cells = append(cells, kindCells(per)...)
		cells = append(cells, sumValues(per), dollars(r.cfg.prices.cost(scale(per, 1000))), row.claims, row.duplicates, row.lost, row.elapsed)
		t.add(cells...)
	}
	lat := "no added latency"
	if r.cfg.latMax > 0 {
		lat = fmt.Sprintf("%s-%s added to each worker request", r.cfg.latMin, r.cfg.latMax)
	}
	t.note("Against %s; each worker has its own S3 client and PollInterval %s (short on purpose, to drain fast); %s. Every task is queued before the workers start; the table counts only the workers' requests, from their start to the last completion.", r.where, r.cfg.contPoll, lat)
	t.note("Lost claims: 412 answers to If-Match PUTs of a status.json. Zero-work tasks have no heartbeats, and a completion cannot lose while the lease holds, so each is a claim another worker won; each also costs a GET (the re-read that settles whether the write was ours). Claims won are counted by OnClaim. Target: below 0.5 lost claims per claim at 16 workers.")
	if len(r.rows) > 0 {
		row := r.rows[len(r.rows)-1]
		t.note("Requests by label at %d workers, per task: %s.", row.workers, labelList(row.worker, row.tasks, ""))
		t.note("GET and DELETE per task grow with the workers while lost claims stay rare: each worker shuffles its listing and visits every marker in it, and by the time it gets to one, another worker has often claimed or finished that task. A running task costs the visitor a GET; a finished one a GET and a DELETE of a marker its finisher already removed.")
		t.note("Producer side (Create, UploadInput, Submit, no added latency), per task: %s.", kindSummary(perUnit(row.producer.kinds, row.tasks)))
	}
	return []*table{t}
}
