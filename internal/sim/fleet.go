package sim

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/s3task/s3task"
)

// startWorker starts a new worker process with conc slots (0: 1 to 3,
// drawn) serving the task types types (nil: every type), and runs it until
// it is stopped or crashes. It does nothing once the fleet is shutting
// down.
func (w *World) startWorker(conc int, types []string) error {
	w.mu.Lock()
	if w.closing() {
		w.mu.Unlock()
		return nil
	}
	w.nameN++
	name := fmt.Sprintf("w%d", w.nameN)
	w.mu.Unlock()

	p, err := w.newProc(name)
	if err != nil {
		return err
	}
	if conc <= 0 {
		conc = 1 + p.rng.IntN(3)
	}
	if types != nil && len(w.h.Periodics) > 0 && !slices.Contains(types, periodicType) {
		types = append(slices.Clone(types), periodicType) // every worker makes and runs the periodic runs
	}
	p.conc, p.types = conc, types
	// A worker that serves every type has a plain handler; one that serves
	// some has a Mux, and leaves the tasks of other types to others.
	var h s3task.Handler = s3task.HandlerFunc(p.handle)
	if types != nil {
		mux := s3task.NewMux()
		for _, t := range types {
			if err := mux.HandleFunc(t, p.handle); err != nil {
				return err
			}
		}
		h = mux
	}
	// Production defaults: only the ID, the slots and the logger are set;
	// and, for a worker that relies on events, the polling intervals.
	opts := &s3task.WorkerOptions{ID: name, Concurrency: conc, Logger: w.log}
	if len(w.h.Periodics) > 0 {
		opts.ReconcileInterval = w.h.Params.ReconcileInterval
	}
	events := w.cfg.Events && NewRand(w.cfg.Seed, "events/"+name).Chance(0.5)
	if events {
		opts.PollInterval, opts.MaxPollInterval = s3task.DefaultMaxPollInterval, s3task.DefaultMaxPollInterval
	}
	p.worker, err = s3task.NewWorker(p.store, h, opts)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel, p.exited = cancel, make(chan struct{})

	w.mu.Lock()
	if w.closing() {
		w.mu.Unlock()
		cancel()
		return nil
	}
	w.workers = append(w.workers, p)
	w.h.Workers = append(w.h.Workers, WorkerInfo{Name: name, Concurrency: conc, Types: types, Events: events})
	now := time.Now()
	w.h.Events = append(w.h.Events, ProcEvent{Proc: name, Kind: EventStart, Start: now, End: now})
	w.wg.Add(1)
	w.mu.Unlock()
	go func() {
		defer w.wg.Done()
		_ = p.worker.Run(ctx)
		now := time.Now()
		w.event(name, EventExit, now, now)
		close(p.exited)
	}()
	return nil
}

// closing reports whether the fleet is shutting down. Call it with w.mu held.
func (w *World) closing() bool {
	return w.closed() || w.h.End != (time.Time{})
}

// retire takes p out of the live fleet; it reports false if it was not in it.
func (w *World) retire(p *proc) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	i := slices.Index(w.workers, p)
	if i < 0 {
		return false
	}
	w.workers = slices.Delete(w.workers, i, i+1)
	return true
}

// crash kills worker p: its client is cut for good, its handlers die, its
// Run is cancelled. A replacement starts a little later.
func (w *World) crash(p *proc) {
	if !w.retire(p) {
		return
	}
	now := time.Now()
	w.event(p.name, EventCrash, now, now)
	p.link.crash()
	p.cancel()
	w.goReplace(p, w.rng.Dur(0, 30*time.Second), nil)
}

// stop stops worker p gracefully, as a deploy would, and starts its
// replacement at once or once it has exited. Half the time the deploy
// gives it only seconds: Worker.Stop with a context that ends then, after
// which no handler of p may run on.
func (w *World) stop(p *proc) {
	if !w.retire(p) {
		return
	}
	now := time.Now()
	w.event(p.name, EventStop, now, now)
	if w.rng.Chance(0.5) {
		grace := w.rng.Dur(time.Second, 10*time.Second)
		w.event(p.name, EventStopBy, now, now.Add(grace))
		w.wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), grace)
			defer cancel()
			_ = p.worker.Stop(ctx)
		})
	} else {
		p.cancel()
	}
	if w.rng.Chance(0.5) {
		w.goReplace(p, 0, nil)
	} else {
		w.goReplace(p, 0, p.exited)
	}
}

// goReplace starts a replacement for p after delay, and after after closes
// if it is not nil.
func (w *World) goReplace(p *proc, delay time.Duration, after <-chan struct{}) {
	w.wg.Go(func() {
		if after != nil {
			select {
			case <-after:
			case <-w.over:
				return
			}
		}
		if delay > 0 && !w.sleep(delay) {
			return
		}
		if err := w.startWorker(p.conc, p.types); err != nil {
			panic(err) // options are fixed; cannot happen
		}
	})
}

// chaos crashes, stops, pauses and cuts off processes at random until the
// turbulence ends.
func (w *World) chaos(ops []*proc) {
	for {
		d := w.rng.Exp(150 * time.Second)
		select {
		case <-w.quiet:
			return
		default:
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-w.quiet:
			t.Stop()
			return
		}
		w.mu.Lock()
		all := append(slices.Clone(w.workers), ops...)
		// A long run keeps its first worker up: a fleet that lives long
		// enough for its reconciler's holder to renew the lease.
		fleet := slices.DeleteFunc(slices.Clone(w.workers), func(p *proc) bool { return w.cfg.Long && p.name == "w1" })
		w.mu.Unlock()
		switch w.rng.Pick(3, 2, 3, 2, 2, 2) {
		case 0: // a process whose requests hang
			p := all[w.rng.IntN(len(all))]
			d := w.rng.Dur(time.Minute, 5*time.Minute)
			pick, early, freeze := w.rng.Float64(), w.rng.Dur(0, w.h.Params.ClockMargin+time.Second), w.rng.Dur(w.h.Params.ClockMargin, w.h.Params.MaxFreeze)
			p.link.pause(d)
			if p.worker != nil {
				w.freezeAtDeadline(p, pick, early, freeze) // its renewals hang too
			}
		case 1: // a network blip: requests fail for seconds
			p := all[w.rng.IntN(len(all))]
			p.link.outage(w.rng.Dur(3*time.Second, 20*time.Second))
		case 2: // a worker's network degrades, then it is cut off for minutes
			if len(fleet) == 0 {
				break
			}
			p := fleet[w.rng.IntN(len(fleet))]
			slow := w.rng.Dur(15*time.Second, 40*time.Second)
			p.link.slow(slow)
			cut := w.rng.Dur(40*time.Second, 3*time.Minute)
			target := w.rng.Chance(0.9)
			pick, early, freeze := w.rng.Float64(), w.rng.Dur(0, w.h.Params.ClockMargin+time.Second), w.rng.Dur(w.h.Params.ClockMargin, w.h.Params.MaxFreeze)
			w.wg.Go(func() {
				if w.sleep(slow) {
					p.link.outage(cut)
					if target {
						w.freezeAtDeadline(p, pick, early, freeze)
					}
				}
			})
		case 3:
			if len(fleet) > 0 {
				w.crash(fleet[w.rng.IntN(len(fleet))])
			}
		case 4:
			if len(fleet) > 0 {
				w.stop(fleet[w.rng.IntN(len(fleet))])
			}
		case 5: // a process stands still for a moment: a GC pause, a VM stolen away
			p := all[w.rng.IntN(len(all))]
			p.link.freeze(w.rng.Dur(200*time.Millisecond, 3*time.Second))
		}
	}
}

// freezeAtDeadline is the timing adversary at the ClockMargin boundary:
// worker p, just cut off from S3, cannot renew its leases, and will stop
// trusting each at its deadline, the lease's end less ClockMargin (by its
// sense of the server's clock, which may lag). The adversary freezes the
// process from early before the end of one of the leases (pick chooses
// which; early is up to ClockMargin and a second, so from just before
// the deadline to the lease's end), for freeze: ClockMargin or longer,
// within MaxFreeze. A handler whose deadline falls in the freeze ends only
// when the process thaws, and must still end before another worker may
// take the task over, at the lease's end plus ClockMargin: so the holder
// must stop at its deadline, not at the lease's end.
func (w *World) freezeAtDeadline(p *proc, pick float64, early, freeze time.Duration) {
	held := w.running(p.name)
	if len(held) == 0 {
		return
	}
	slices.SortFunc(held, func(a, b *Record) int { return strings.Compare(a.ID, b.ID) })
	end := held[int(pick*float64(len(held)))].LeaseExpiresAt
	p.link.freezeAt(end.Add(-early), freeze)
}

// shutdown stops the whole fleet and waits for every goroutine of the world.
//
// It stops the fleet a moment after the instant it is called at, as every
// request takes a moment of its own: Run calls it on its ten-second grid,
// on which the timers of the processes that started with the world fire
// too (a presence write every two minutes, an Ingester's sweep), and what
// such a timer starts at that instant would otherwise race with the stop
// (the worker's presence PUT then went out, or not, as the Go scheduler
// had it). The moment is under a millisecond and not a whole number of
// them, as no drawn wait of the world is.
func (w *World) shutdown() {
	pause(time.Duration(1 + NewRand(w.cfg.Seed, "shutdown").IntN(int(time.Millisecond)-1)))
	w.mu.Lock()
	fleet := slices.Clone(w.workers)
	w.workers = nil
	w.mu.Unlock()
	for _, p := range fleet {
		now := time.Now()
		w.event(p.name, EventStop, now, now)
		p.cancel()
	}
	// The Ingesters too, before the world is over: a request of theirs
	// that is held up gives up when it is, and the Ingester must then find
	// its context ended, not go on to its next file or not as the Go
	// scheduler has it.
	w.mu.Lock()
	ingesters := slices.Clone(w.ingesters)
	w.mu.Unlock()
	for _, p := range ingesters {
		p.cancel()
	}
	// Hung requests and slow hooks give up now; handlers still wind down.
	close(w.over)
	w.wg.Wait()
}
