package sim

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// Run plays the world of cfg and returns its history; pass it to [Check].
// It must run inside a testing/synctest bubble: it sleeps through hours of
// virtual time. It returns once every task is finished, notified and
// unmarked, or the time cap is reached, and the fleet has stopped.
func Run(cfg Config) (*History, error) {
	w, err := newWorld(cfg)
	if err != nil {
		return nil, err
	}
	cfg = w.cfg
	start := time.Now()
	if err := w.plant(cfg.Planted); err != nil {
		return nil, err
	}
	// The first worker, and its replacements, serve every type; the others
	// some of them, so that tasks wait for a worker that serves them.
	for i := range cfg.Workers {
		var types []string
		if i > 0 && w.rng.Chance(0.7) {
			types = pickTypes(w.rng)
		}
		if cfg.Functions {
			types = fleetTypes(types)
		}
		if err := w.startWorker(0, types); err != nil {
			return nil, err
		}
	}
	if cfg.Functions {
		w.startFunctions()
	}
	ops := make([]*proc, cfg.Operators)
	for i := range ops {
		if ops[i], err = w.newProc(fmt.Sprintf("op%d", i+1)); err != nil {
			return nil, err
		}
	}
	if w.impatientP, err = w.newProc(impatientProc); err != nil {
		return nil, err
	}
	plans := make([][]creation, len(ops))
	for life := range cfg.Tasks {
		o := w.rng.IntN(len(ops))
		plans[o] = append(plans[o], creation{at: start.Add(w.rng.Dur(0, cfg.Arrivals)), life: life})
	}
	// A burst: many lives within a minute, more due at once than one
	// listing page holds.
	burst := start.Add(w.rng.Dur(0, cfg.Arrivals))
	for life := cfg.Tasks; life < cfg.Tasks+cfg.Burst; life++ {
		o := w.rng.IntN(len(ops))
		plans[o] = append(plans[o], creation{at: burst.Add(w.rng.Dur(0, time.Minute)), life: life})
	}
	// A long run has two sleepers: lives created in its first minutes that
	// wait over three hours for their start. The vandal takes their markers
	// once they are older than two reconciler intervals, when the turns
	// that walk only recent tasks pass them by and only the reconciler's
	// recheck of the older waiting tasks it found brings the markers back.
	if cfg.Long {
		for life := cfg.Tasks + cfg.Burst; life < cfg.Tasks+cfg.Burst+2; life++ {
			o := w.rng.IntN(len(ops))
			plans[o] = append(plans[o], creation{at: start.Add(w.rng.Dur(0, 10*time.Minute)), life: life, sleeper: true})
		}
	}
	calm := start.Add(cfg.Arrivals + cfg.Turbulence)
	var operators sync.WaitGroup
	for i, p := range ops {
		slices.SortFunc(plans[i], func(a, b creation) int { return a.at.Compare(b.at) })
		operators.Go(func() { w.operate(p, plans[i], calm) })
	}
	if cfg.Ingest {
		if err := w.startIngesters(); err != nil {
			return nil, err
		}
		partner, err := w.newProc("partner")
		if err != nil {
			return nil, err
		}
		w.mu.Lock()
		w.partnerP = partner
		w.mu.Unlock()
		operators.Go(func() { w.partner(partner, start.Add(cfg.Arrivals)) })
	}
	chaotic := ops
	if cfg.Rush {
		rushers := make([]*proc, rushProcs)
		for i := range rushers {
			if rushers[i], err = w.newProc(fmt.Sprintf("rush%d", i+1)); err != nil {
				return nil, err
			}
		}
		chaotic = append(slices.Clone(chaotic), rushers...)
		at := start.Add(NewRand(cfg.Seed, "rush/at").Dur(time.Minute, max(cfg.Arrivals, 2*time.Minute)))
		first := cfg.Tasks + cfg.Burst + 2 // after the sleepers of a Long run
		operators.Go(func() { w.rush(rushers, at, first) })
	}
	if cfg.Pause {
		pauser, err := w.newProc("pauser")
		if err != nil {
			return nil, err
		}
		chaotic = append(slices.Clone(chaotic), pauser)
		operators.Go(func() { w.pauser(pauser, calm) })
	}
	if cfg.Tidy {
		tidier, err := w.newProc("tidier")
		if err != nil {
			return nil, err
		}
		chaotic = append(slices.Clone(chaotic), tidier)
		operators.Go(func() { w.tidier(tidier, calm) })
	}
	opsDone := make(chan struct{})
	go func() {
		operators.Wait()
		close(opsDone)
	}()
	if !cfg.NoChaos {
		w.wg.Go(func() { w.chaos(chaotic) })
		if cfg.Long {
			w.wg.Go(w.vandal)
		}
	}

	deadline := calm.Add(cfg.Cap)
	finished := func() bool {
		select {
		case <-opsDone:
			return true
		default:
			return false
		}
	}
	var lastSnap time.Time
	capped := false
	for {
		now := time.Now()
		if !now.Before(calm) {
			w.calm()
		}
		if now.Sub(lastSnap) >= time.Minute {
			w.snapshot()
			lastSnap = now
		}
		if finished() && !now.Before(calm) && w.settled() {
			break
		}
		if !now.Before(deadline) {
			capped = true
			break
		}
		time.Sleep(10 * time.Second)
	}
	w.calm()
	w.snapshot()
	w.mu.Lock()
	w.h.End, w.h.Capped = time.Now(), capped
	w.mu.Unlock()
	w.shutdown()
	<-opsDone
	return w.history(), nil
}

// calm ends the turbulence: no more crashes, stops, pauses or outages.
func (w *World) calm() {
	select {
	case <-w.quiet:
	default:
		close(w.quiet)
	}
}
