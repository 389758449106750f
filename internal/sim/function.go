package sim

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/s3task/s3task"
)

// FunctionReleaseLimit is the WorkerOptions.ReleaseLimit of the function
// invocations, s3tasklambda's default.
const FunctionReleaseLimit = 3

// fleetTypes returns the task types a worker of the fleet serves in a
// world with functions: those it was drawn (nil: every type), less "c",
// which only the functions serve.
func fleetTypes(types []string) []string {
	if types == nil {
		types = simTypes
	}
	types = slices.DeleteFunc(slices.Clone(types), func(t string) bool { return t == "c" })
	if len(types) == 0 {
		types = []string{"a"}
	}
	return types
}

// startFunctions starts one or two chains of invocations (see
// Config.Functions).
func (w *World) startFunctions() {
	w.h.Params.ReleaseLimit = FunctionReleaseLimit
	chains := 1 + w.rng.IntN(2)
	for i := range chains {
		rng := NewRand(w.cfg.Seed, fmt.Sprintf("function/%d", i))
		w.wg.Go(func() { w.function(rng) })
	}
	if chains == 1 {
		// Once the turbulence is over, a second chain, as a queue's
		// backlog scales a function up: one chain of short invocations
		// may not get through the long tasks of type c, each given back
		// up to FunctionReleaseLimit times, before the run's cap
		// (soak seeds 40123 and 40266 left three of them queued).
		rng := NewRand(w.cfg.Seed, "function/calm")
		w.wg.Go(func() {
			select {
			case <-w.quiet:
				w.function(rng)
			case <-w.over:
			}
		})
	}
}

// function runs invocations one after the other, a few seconds to a
// minute apart, until the world is over: each a fresh worker process that
// serves every type, runs for 30 seconds to 2 minutes, and is stopped with
// 5 to 10 seconds' grace (its ShutdownTimeout is 3 seconds, as
// s3tasklambda's), so that its handlers still running are asked to stop
// and their tasks given back.
func (w *World) function(rng *Rand) {
	for {
		gap := rng.Dur(time.Second, time.Minute)
		select {
		case <-w.quiet:
			gap = time.Second // the calm: one invocation after the other
		default:
		}
		if !w.sleep(gap) {
			return
		}
		w.mu.Lock()
		if w.closing() {
			w.mu.Unlock()
			return
		}
		w.nameN++
		name := fmt.Sprintf("f%d", w.nameN)
		w.mu.Unlock()
		p, err := w.newProc(name)
		if err != nil {
			panic(err) // the options are fixed
		}
		p.conc = 1 + rng.IntN(2)
		p.worker, err = s3task.NewWorker(p.store, s3task.HandlerFunc(p.handle), &s3task.WorkerOptions{
			ID: name, Concurrency: p.conc, Logger: w.log,
			ReleaseLimit:      FunctionReleaseLimit,
			ShutdownTimeout:   3 * time.Second,
			ReconcileInterval: -1,
			PresenceInterval:  -1,
		})
		if err != nil {
			panic(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		exited := make(chan struct{})
		w.mu.Lock()
		if w.closing() {
			w.mu.Unlock()
			cancel()
			return
		}
		w.h.Workers = append(w.h.Workers, WorkerInfo{Name: name, Concurrency: p.conc})
		now := time.Now()
		w.h.Events = append(w.h.Events, ProcEvent{Proc: name, Kind: EventStart, Start: now, End: now})
		w.mu.Unlock()
		w.wg.Go(func() {
			_ = p.worker.Run(ctx)
			now := time.Now()
			w.event(name, EventExit, now, now)
			close(exited)
		})
		last, grace := rng.Dur(30*time.Second, 2*time.Minute), rng.Dur(5*time.Second, 10*time.Second)
		if w.sleep(last) {
			now := time.Now()
			w.event(name, EventStop, now, now)
			w.event(name, EventStopBy, now, now.Add(grace))
			stopCtx, stop := context.WithTimeout(context.Background(), grace)
			_ = p.worker.Stop(stopCtx)
			stop()
		}
		cancel()
		select {
		case <-exited:
		case <-w.over:
			return
		}
	}
}
