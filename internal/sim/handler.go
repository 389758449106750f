package sim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/s3task/s3task"
)

// outcome is what a handler means to return once its work is done.
type outcome int

const (
	withOutput outcome = iota
	noOutput
	transient
	permanent
	retryAfter
	panics
)

var outcomeNames = [...]string{"output", "no-output", "transient", "permanent", "retry-after", "panic"}

// plan is what one handler run will do, drawn from the seed, the task's
// life, the attempt and the worker.
type plan struct {
	work     time.Duration // how long the work takes
	outcome  outcome
	delay    time.Duration // retry-after
	slowStop time.Duration // keeps going this long after ErrWorkerStopping
	late     bool          // after its context ended, writes the output with a background context
	// impatient, if not zero, is when after the start an operator
	// cancels the task, its change held up for minutes (see goCancel).
	impatient time.Duration
}

// String describes the plan for messages.
func (p plan) String() string {
	s := fmt.Sprintf("%s after %s", outcomeNames[p.outcome], p.work)
	if p.slowStop > 0 {
		s += fmt.Sprintf(", %s more when stopped", p.slowStop)
	}
	if p.late {
		s += ", late write"
	}
	if p.impatient > 0 {
		s += fmt.Sprintf(", cancelled %s in", p.impatient)
	}
	return s
}

// plan draws what the run of job on worker will do.
func (w *World) plan(job *s3task.Job, worker string) plan {
	r := NewRand(w.cfg.Seed, fmt.Sprintf("run/%s/%d/%s", job.Task.Name, job.Task.Attempt, worker))
	var p plan
	switch r.Pick(60, 25, 15) {
	case 0:
		p.work = r.Dur(time.Second, 20*time.Second)
	case 1:
		p.work = r.Dur(20*time.Second, 75*time.Second)
	default:
		p.work = r.Dur(75*time.Second, 3*time.Minute)
	}
	if w.cfg.Functions && job.Task.Type == "c" && NewRand(w.cfg.Seed, "too-long/"+job.Task.Name).Chance(0.3) {
		// Longer than any function invocation, at every attempt: it is
		// given back until the release limit fails it.
		p.work = r.Dur(3*time.Minute, 5*time.Minute)
	}
	p.outcome = outcome(r.Pick(55, 10, 15, 6, 8, 6))
	if p.outcome == retryAfter {
		p.delay = r.Dur(5*time.Second, 90*time.Second)
	}
	if r.Chance(0.35) {
		p.slowStop = r.Dur(10*time.Second, 100*time.Second)
	}
	p.late = r.Chance(0.2)
	if r.Chance(0.03) {
		p.work = r.Dur(5*time.Minute, 8*time.Minute)
		p.impatient = r.Dur(20*time.Second, time.Minute)
	}
	return p
}

// errCrashed is what a dead handler returns; nothing reaches S3 anyway.
var errCrashed = errors.New("sim: worker crashed")

// handle is the handler of worker p: it records the run around work.
func (p *proc) handle(ctx context.Context, job *s3task.Job) error {
	w := p.w
	pl := w.plan(job, p.name)
	if pl.impatient > 0 {
		w.goCancel(job.Task.ID, pl.impatient)
	}
	start, seq := w.now()
	run := &HandlerRun{Task: job.Task.ID, Attempt: job.Task.Attempt, Worker: p.name, Plan: pl.String(), Start: start, StartSeq: seq}
	w.mu.Lock()
	w.h.Runs = append(w.h.Runs, run)
	w.mu.Unlock()
	context.AfterFunc(ctx, func() {
		if p.link.dead() {
			// A crashed process does nothing the world can see: its
			// contexts end when its Run gives up on the handlers, which
			// a timer of the library may reach at the same instant (a
			// doubtful write's settling, begun when the crash cut its
			// answer), in either order.
			return
		}
		at, seq := w.now()
		at = p.link.thawed(at) // a frozen handler learns of it when it thaws
		c := context.Cause(ctx)
		cause := CauseOther
		switch {
		case errors.Is(c, s3task.ErrLeaseLost):
			cause = CauseLeaseLost
		case errors.Is(c, s3task.ErrTaskCanceled):
			cause = CauseCanceled
		case errors.Is(c, s3task.ErrWorkerStopping):
			cause = CauseStopping
		}
		w.mu.Lock()
		run.CtxEnd, run.CtxEndSeq, run.Cause = at, seq, cause
		w.mu.Unlock()
	})

	var (
		err    error
		dead   bool
		failed any
	)
	func() {
		defer func() { failed = recover() }()
		err = p.work(ctx, job, run, pl, &dead)
	}()
	dead = dead || p.link.dead()
	at, seq := w.now()
	if !dead {
		at = p.link.thawed(at)
	}
	w.mu.Lock()
	run.Returned, run.Return, run.ReturnSeq = true, at, seq
	run.Dead = dead
	run.OK = err == nil && !dead && failed == nil
	switch {
	case dead:
		run.Err = errCrashed.Error()
	case failed != nil:
		run.Err = "panic"
	case err != nil:
		run.Err = err.Error()
	}
	w.mu.Unlock()
	if failed != nil {
		panic(failed)
	}
	return err
}

// work does what the plan says. A dead worker's handler returns at once.
func (p *proc) work(ctx context.Context, job *s3task.Job, run *HandlerRun, pl plan, dead *bool) error {
	w := p.w
	content := fmt.Sprintf("task=%s attempt=%d worker=%s", job.Task.ID, job.Task.Attempt, p.name)
	job.SetProgress(s3task.Progress{RowCount: 100})
	switch pause(pl.work, p.link.crashed, ctx.Done()) {
	case 1:
		*dead = true
		return errCrashed
	case 2:
		return p.interrupted(ctx, job, run, pl, content, dead)
	}
	job.SetProgress(s3task.Progress{RowCount: 100, ProcessedCount: 100, SuccessCount: 100})
	switch pl.outcome {
	case withOutput:
		if err := job.WriteOutput(ctx, strings.NewReader(content)); err != nil {
			return err
		}
		w.mu.Lock()
		run.Output, run.Wrote = content, true
		w.mu.Unlock()
		return nil
	case noOutput:
		return nil
	case transient:
		return errors.New("sim: transient failure")
	case permanent:
		return s3task.Permanent(errors.New("sim: permanent failure"))
	case retryAfter:
		return s3task.RetryAfter(errors.New("sim: try again later"), pl.delay)
	}
	panic("sim: handler panicked")
}

// interrupted is the rest of a run whose context ended before its work was
// done.
func (p *proc) interrupted(ctx context.Context, job *s3task.Job, run *HandlerRun, pl plan, content string, dead *bool) error {
	w := p.w
	cause := context.Cause(ctx)
	if errors.Is(cause, s3task.ErrWorkerStopping) && pl.slowStop > 0 {
		// A slow graceful shutdown: the handler winds down for a while.
		if pause(pl.slowStop, p.link.crashed) == 1 {
			*dead = true
			return errCrashed
		}
	}
	if pl.late {
		// A handler that ignores its context.
		err := job.WriteOutput(context.Background(), strings.NewReader(content))
		if p.link.dead() {
			*dead = true
			return errCrashed
		}
		w.mu.Lock()
		run.Late = true
		if err != nil {
			run.LateErr = err.Error()
		}
		w.mu.Unlock()
	}
	return fmt.Errorf("sim: interrupted: %w", cause)
}
