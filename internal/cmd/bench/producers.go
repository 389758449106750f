package main

// Scenario 9: producers that submit at once, and what they pay for the wake
// object (issue 35).

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/s3task/s3task"
)

type producersRow struct {
	producers, stores, tasks int
	c                        counts
	submits                  []time.Duration
}

type producersResult struct {
	cfg   *config
	where string
	rows  []producersRow
}

// runProducers queues tasks with each count of producers of -producers,
// each producer on a Store and client of its own, and with the largest
// count also as goroutines of one Store: every producer creates its tasks
// and uploads their inputs, then all submit theirs at once, one after
// another. Each row works under a prefix of its own (its own wake object).
func runProducers(ctx context.Context, e *env, log io.Writer) (result, error) {
	cfg := e.cfg
	res := &producersResult{cfg: cfg, where: e.where()}
	type variant struct{ producers, stores int }
	var vs []variant
	for _, n := range cfg.producers {
		vs = append(vs, variant{n, n})
	}
	if n := slices.Max(cfg.producers); n > 1 {
		vs = append(vs, variant{n, 1})
	}
	for i, v := range vs {
		row, err := queueAtOnce(ctx, e, fmt.Sprintf("producers-%d", i), v.producers, v.stores)
		if err != nil {
			return nil, err
		}
		res.rows = append(res.rows, row)
		fmt.Fprintf(log, "bench: producers: %d on %d Stores: %d tasks, %.2f requests per task\n", v.producers, v.stores, row.tasks, float64(row.c.total())/float64(row.tasks))
	}
	return res, nil
}

// queueAtOnce runs one row: producers goroutines on stores Stores (each
// with its own client), each queueing cfg.producerTasks tasks.
func queueAtOnce(ctx context.Context, e *env, sub string, producers, stores int) (producersRow, error) {
	cfg := e.cfg
	row := producersRow{producers: producers, stores: stores, tasks: producers * cfg.producerTasks}
	m := newMeter()
	lat := delay(cfg.latMin, cfg.latMax)
	sts := make([]*s3task.Store, stores)
	for i := range sts {
		st, err := e.store(e.client(lat, m.wrap), sub, nil)
		if err != nil {
			return row, err
		}
		sts[i] = st
	}
	var (
		mu    sync.Mutex
		wg    sync.WaitGroup
		ready sync.WaitGroup
		start = make(chan struct{})
		errs  = make([]error, producers)
	)
	ready.Add(producers)
	for p := range producers {
		st := sts[p%stores]
		wg.Go(func() {
			ids := make([]string, cfg.producerTasks)
			for i := range ids {
				if ids[i], errs[p] = prepare(ctx, st, fmt.Sprintf("producer %d task %d", p, i)); errs[p] != nil {
					break
				}
			}
			ready.Done()
			<-start
			if errs[p] != nil {
				return
			}
			for _, id := range ids {
				t0 := time.Now()
				if _, errs[p] = st.Submit(ctx, id); errs[p] != nil {
					return
				}
				took := time.Since(t0)
				mu.Lock()
				row.submits = append(row.submits, took)
				mu.Unlock()
			}
		})
	}
	ready.Wait()
	close(start)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return row, err
		}
	}
	row.c = m.snapshot()
	return row, nil
}

func (r *producersResult) tables() []*table {
	t := newTable(fmt.Sprintf("Scenario 9: queueing with producers that submit at once, %d tasks each", r.cfg.producerTasks),
		"producers", "Stores", "tasks", "requests per task", "wake GET per Submit", "wake PUT per Submit", "refused wake PUT (412) per Submit",
		"unconditional wake PUT per Submit", "paused GET per Submit", "Submit p50", "Submit max")
	for _, row := range r.rows {
		per := func(n int) float64 { return float64(n) / float64(row.tasks) }
		var refused, blind int
		for k, v := range row.c.labels {
			if !strings.HasPrefix(k.label, "PUT wake") {
				continue
			}
			if strings.HasSuffix(k.label, "→412") {
				refused += v
			}
			if !strings.Contains(k.label, " If-") {
				blind += v
			}
		}
		t.add(row.producers, row.stores, row.tasks, per(row.c.total()), per(labelCount(row.c, "GET wake")), per(labelCount(row.c, "PUT wake")),
			per(refused), per(blind), per(labelCount(row.c, "GET paused")), dur(percentile(row.submits, 0.5)), dur(slices.Max(row.submits)))
	}
	lat := "no added latency"
	if r.cfg.latMax > 0 {
		lat = fmt.Sprintf("%s-%s of latency added to every request", r.cfg.latMin, r.cfg.latMax)
	}
	t.note("Same S3 (%s), %s. Each producer creates its tasks and uploads their inputs, then all submit theirs at once, one after another; requests per task count all three calls (8 when nothing contends: Create's PUT, the upload's PUT and GET, Submit's GET, HEAD, PUT marker, PUT record, and the wake object's PUT, with a GET before it the first time a Store writes it and while others write it too). Each Stores = producers row gives every producer a Store and client of its own, as separate processes; the last row runs the producers as goroutines of one Store.", r.where, lat)
	return []*table{t}
}
