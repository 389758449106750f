package sim

import (
	"context"
	"slices"
	"time"

	"github.com/s3task/s3task"
)

// pauser is the life of the process that pauses task types (Store.Pause)
// and resumes them (Store.Resume) at random moments until the turbulence
// ends, with at most two types paused at once and now and then a Pause of
// a type paused already; the types paused wait while the others run. Then
// it resumes every type it touched, retrying until each Resume succeeds,
// so that the tasks that waited finish. Its calls are recorded like the
// operators' (CallPause, CallResume); a call that failed may still have
// landed, and the checks take that into account (see checkPause).
func (w *World) pauser(p *proc, until time.Time) {
	paused := map[string]bool{}
	var touched []string
	for {
		d := p.rng.Exp(40 * time.Second)
		if !time.Now().Add(d).Before(until) {
			break
		}
		if !w.sleep(d) {
			return
		}
		typ := simTypes[p.rng.IntN(len(simTypes))]
		switch {
		case paused[typ] && p.rng.Chance(0.85):
			if p.pauseCall(CallResume, typ) == nil {
				delete(paused, typ)
			}
		case paused[typ] || len(paused) < 2:
			if !slices.Contains(touched, typ) {
				touched = append(touched, typ)
			}
			_ = p.pauseCall(CallPause, typ)
			paused[typ] = true // a Pause that failed may have landed
		}
	}
	if d := time.Until(until); d > 0 && !w.sleep(d) {
		return
	}
	for _, typ := range touched {
		for try := 0; p.pauseCall(CallResume, typ) != nil; try++ {
			if !w.sleep(p.backoff(try + 1)) {
				return
			}
		}
	}
}

// pauseCall makes one recorded Pause or Resume of typ.
func (p *proc) pauseCall(kind CallKind, typ string) error {
	_, err := p.callWith(Call{Kind: kind, Type: typ}, func(ctx context.Context) (*s3task.Task, error) {
		if kind == CallPause {
			return nil, p.store.Pause(ctx, typ)
		}
		return nil, p.store.Resume(ctx, typ)
	}, nil)
	return err
}
