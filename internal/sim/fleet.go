package sim

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/s3task/s3task"
)

// startWorker starts a new worker process with conc slots (0: 1 to 3,
// drawn) and runs it until it is stopped or crashes. It does nothing once
// the fleet is shutting down.
func (w *World) startWorker(conc int) error {
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
	p.conc = conc
	// Production defaults: only the ID, the slots and the logger are set.
	p.worker, err = s3task.NewWorker(p.store, s3task.HandlerFunc(p.handle), &s3task.WorkerOptions{
		ID: name, Concurrency: conc, Logger: w.log,
	})
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
	w.h.Workers = append(w.h.Workers, WorkerInfo{Name: name, Concurrency: conc})
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
	select {
	case <-w.over:
		return true
	default:
		return w.h.End != (time.Time{})
	}
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
// replacement at once or once it has exited.
func (w *World) stop(p *proc) {
	if !w.retire(p) {
		return
	}
	now := time.Now()
	w.event(p.name, EventStop, now, now)
	p.cancel()
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
		if err := w.startWorker(p.conc); err != nil {
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
		fleet := slices.Clone(w.workers)
		w.mu.Unlock()
		all := append(slices.Clone(fleet), ops...)
		now := time.Now()
		switch w.rng.Pick(3, 2, 3, 2, 2) {
		case 0: // a frozen process: its requests hang
			p := all[w.rng.IntN(len(all))]
			d := w.rng.Dur(time.Minute, 5*time.Minute)
			p.link.pause(d)
			w.event(p.name, EventPause, now, now.Add(d))
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
			w.wg.Go(func() {
				if w.sleep(slow) {
					p.link.outage(cut)
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
		}
	}
}

// shutdown stops the whole fleet and waits for every goroutine of the world.
func (w *World) shutdown() {
	w.mu.Lock()
	fleet := slices.Clone(w.workers)
	w.workers = nil
	w.mu.Unlock()
	for _, p := range fleet {
		now := time.Now()
		w.event(p.name, EventStop, now, now)
		p.cancel()
	}
	// Hung requests and slow hooks give up now; handlers still wind down.
	close(w.over)
	w.wg.Wait()
}
