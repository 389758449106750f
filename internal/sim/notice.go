package sim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/s3task/s3task"
)

// noticeKind is how the OnTerminal hook treats one task's notices.
type noticeKind int

const (
	noticeOK       noticeKind = iota
	noticeFlaky               // fails now and then
	noticeStubborn            // fails for a long while after the first call
	noticeSlow                // takes minutes
)

// noticeKindOf returns the hook's behaviour for a task life; every store
// agrees on it.
func (w *World) noticeKindOf(name string) noticeKind {
	return noticeKind(NewRand(w.cfg.Seed, "notice/"+name).Pick(76, 10, 6, 8))
}

var errHook = errors.New("sim: notice receiver unavailable")

// onTerminal is the OnTerminal hook of p's store.
func (p *proc) onTerminal(ctx context.Context, t *s3task.Task) error {
	w := p.w
	start, seq := w.now()
	var err error
	switch w.noticeKindOf(t.Name) {
	case noticeFlaky:
		if p.hook.Chance(0.4) {
			err = errHook
		}
	case noticeStubborn:
		w.mu.Lock()
		until, ok := w.stubborn[t.ID]
		if !ok {
			until = start.Add(NewRand(w.cfg.Seed, "stubborn/"+t.ID).Dur(time.Minute, 4*time.Minute))
			w.stubborn[t.ID] = until
		}
		w.mu.Unlock()
		if start.Before(until) {
			err = fmt.Errorf("%w until %s", errHook, until.Format(time.TimeOnly))
		}
	case noticeSlow:
		// Half the slow hooks do not look at their context, and hold up
		// whoever waits for them.
		timer := time.NewTimer(p.hook.Dur(time.Minute, 3*time.Minute))
		done := ctx.Done()
		if p.hook.Chance(0.5) {
			done = nil
		}
		select {
		case <-timer.C:
		case <-done:
			err = ctx.Err()
		case <-p.link.crashed:
			err = errCrashed
		case <-w.over:
			err = errHook
		}
		timer.Stop()
	}
	if p.link.dead() {
		err = errCrashed
	}
	end := time.Now()
	w.mu.Lock()
	w.h.Notices = append(w.h.Notices, Notice{Proc: p.name, TaskID: t.ID, Status: t.Status, Attempt: t.Attempt, Start: start, End: end, StartSeq: seq, OK: err == nil})
	w.mu.Unlock()
	return err
}
