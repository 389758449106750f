package s3task

import (
	"context"
	"errors"
	"log/slog"
	"runtime/debug"
	"time"
)

// lease is one claimed attempt while the worker holds it: the handler, the
// heartbeats that renew the lease and carry progress, and the final write.
// Every record write of the attempt goes through lease.write, one at a time,
// each a compare-and-set on the ETag of the previous one: the heartbeat loop
// writes while the handler runs, and finish writes after the loop ended, so
// the fields below need no lock.
type lease struct {
	w      *Worker
	job    *Job
	log    *slog.Logger
	cancel context.CancelCauseFunc // ends the handler's context

	task     *record   // the record as we last wrote it
	etag     string    // its ETag
	deadline time.Time // local clock: from then on the lease cannot be trusted
	ended    bool      // the record is no longer ours to write
}

// start runs the claimed task t in its own goroutine. The slot taken in poll
// is released when the attempt is settled.
func (w *Worker) start(base context.Context, t *record, etag string) (settled <-chan struct{}) {
	ctx, cancel := context.WithCancelCause(base)
	l := &lease{
		w:      w,
		job:    &Job{Task: *t.Task.clone(), store: w.store, attempt: ctx, answer: w.requestTimeout(), inputETag: t.InputETag},
		log:    w.log.With("task_id", t.ID, "attempt", t.Attempt),
		cancel: cancel,
	}
	l.hold(t, etag)
	l.log.Debug("s3task: claimed task")
	// On the claiming goroutine: whoever counts claims by the hook sees
	// this one before the poll that made it reports (see Hooks.OnClaim).
	w.hook("OnClaim", func(h *Hooks) {
		if h.OnClaim != nil {
			h.OnClaim(l.task.Task.clone())
		}
	})
	done := make(chan struct{})
	w.wg.Add(1)
	go func() {
		defer func() {
			cancel(nil)
			w.freeSlot()
			close(done)
			w.wg.Done()
		}()
		l.run(ctx)
	}()
	return done
}

// hold records t, just written with etag, as the lease's record, and moves
// the deadline to the end of its lease less ClockMargin, by the server's
// clock at the latest it may read (serverLatest), mapped to the local one.
func (l *lease) hold(t *record, etag string) {
	l.task, l.etag = t, etag
	if !t.LeaseExpiresAt.IsZero() {
		left := t.LeaseExpiresAt.Sub(l.w.store.serverLatest()) - l.w.opts.ClockMargin
		l.deadline = time.Now().Add(left)
	}
}

func (l *lease) run(ctx context.Context) {
	trusted := time.Until(l.deadline) > 0 // before the heartbeat loop owns the lease
	stop, stopped := make(chan struct{}), make(chan struct{})
	go l.heartbeats(ctx, stop, stopped)
	var err error
	if trusted {
		err = l.callHandler(ctx)
	} else {
		<-ctx.Done() // a claim settled too late to be trusted: the loop gives it up
	}
	l.job.discardOpen()
	close(stop)
	<-stopped
	l.finish(ctx, err)
}

// callHandler runs the handler inside its middleware, turning a panic
// into an error.
func (l *lease) callHandler(ctx context.Context) (err error) {
	defer func() {
		if r := recover(); r != nil {
			l.log.Error("s3task: handler panicked", "panic", r, "stack", string(debug.Stack()))
			err = &panicError{value: r}
		}
	}()
	return l.w.work.Work(ctx, l.job)
}

// heartbeats renews the lease until stop is closed (the handler returned)
// or the lease is lost. It renews every HeartbeatInterval, sooner when the
// lease would otherwise run out first, and after a failed renewal tries
// again with backoff. It goes on while a stopping worker's handler winds
// down, so a slow shutdown does not cost the attempt. At the deadline
// (the lease's end less ClockMargin, whatever the phase of the renewals) it
// cancels the handler with ErrLeaseLost: another worker may take the task
// over soon after.
func (l *lease) heartbeats(ctx context.Context, stop <-chan struct{}, stopped chan<- struct{}) {
	defer close(stopped)
	wctx := context.WithoutCancel(ctx)
	expire := time.NewTimer(time.Until(l.deadline))
	defer expire.Stop()
	interval := l.w.opts.HeartbeatInterval
	wait, failures := l.renewIn(interval), 0
	for {
		tick := time.NewTimer(wait)
		expired := false
		select {
		case <-stop:
		case <-expire.C:
			expired = true
		case <-tick.C:
		}
		tick.Stop()
		select {
		case <-stop:
			// The handler has returned: its outcome is written next, even
			// if the deadline or a renewal came at the same instant (as it
			// does when a renewal under way ran into the deadline while the
			// handler returned). No handler runs past the deadline either
			// way, and a final write that lands is never wrong: it is a
			// compare-and-set against the record as this lease last wrote it.
			return
		default:
		}
		if expired {
			l.w.store.reached("lease/deadline")
			l.lose(ErrLeaseLost, nil)
			return
		}
		progress, counters, _ := l.job.state()
		// A renewal must land before the deadline or not at all: one that
		// landed later would extend a lease nobody uses any more.
		hctx, cancel := context.WithDeadline(wctx, l.deadline)
		err := l.write(hctx, event{kind: evHeartbeat, progress: &progress, counters: counters, move: l.markerDueWithin(interval)})
		cancel()
		var lost *lostLeaseError
		switch {
		case err == nil:
			failures = 0
			expire.Reset(time.Until(l.deadline))
			wait = l.renewIn(interval)
		case errors.As(err, &lost):
			return
		default:
			failures++
			l.log.Warn("s3task: heartbeat failed", "err", err, "failures", failures)
			wait = min(time.Second<<min(failures-1, 6), interval)
		}
	}
}

// markerDueWithin reports whether the task's marker falls due within one
// more interval and the margin: then this renewal moves it to the end of
// the new lease, once a lease, so that polls never meet a live task.
func (l *lease) markerDueWithin(interval time.Duration) bool {
	return l.task.DueAt.Sub(l.w.store.serverLatest()) < interval+l.w.opts.ClockMargin
}

// renewIn returns how long to wait before the next renewal: interval, or
// less when less than two intervals are left before the deadline (a claim
// settled late), so that a failed renewal can still be tried again; but
// never less than a quarter of the time left. A lease whose holder may
// trust it for less than an interval after each renewal (a ClockMargin
// close to LeaseDuration, less the second by which Date headers leave
// the server's clock unsure) is thus renewed four times in the time it
// is trusted, not again and again without a pause, which would write the
// record thousands of times a second and leave no other writer a chance.
func (l *lease) renewIn(interval time.Duration) time.Duration {
	left := time.Until(l.deadline)
	return max(min(interval, left-interval), min(interval, left/4), 0)
}

// finish writes the attempt's outcome: completed, failed, or back to the
// queue if shutdown interrupted it. It writes nothing once the lease is lost.
func (l *lease) finish(ctx context.Context, handlerErr error) {
	cause := context.Cause(ctx)
	if l.ended || errors.Is(cause, ErrTaskCanceled) || errors.Is(cause, ErrLeaseLost) {
		l.log.Info("s3task: attempt ended without the lease", "cause", cause, "handler_err", handlerErr)
		return
	}
	// The final write must happen even though ctx may be cancelled by
	// shutdown; past the lease it would be refused anyway.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.w.opts.LeaseDuration)
	defer cancel()

	progress, counters, wroteOutput := l.job.state()
	var e event
	switch {
	case handlerErr == nil:
		e = event{kind: evComplete, progress: &progress, counters: counters}
		if wroteOutput {
			e.output = l.job.OutputKey()
		}
	case errors.Is(cause, ErrWorkerStopping):
		e = event{kind: evRelease, releaseLimit: l.w.opts.ReleaseLimit}
	default:
		var he *handlerError
		delay := l.w.backoff(l.task.ID, l.task.AttemptsUsed())
		if errors.As(handlerErr, &he) && he.hasDelay {
			delay = he.delay
		}
		e = event{kind: evFail, progress: &progress, counters: counters, errMsg: truncate(handlerErr.Error(), 4096),
			permanent: IsPermanent(handlerErr), retryDelay: delay, category: failureCategory(handlerErr)}
	}
	if err := l.write(wctx, e); err != nil {
		if !errors.As(err, new(*lostLeaseError)) {
			l.log.Warn("s3task: final write failed; the lease will expire and the task be recovered",
				"event", e.kind.String(), "err", err)
		}
		return
	}
	r, etag := l.task.clone(), l.etag
	t := &r.Task
	switch e.kind {
	case evComplete:
		l.log.Info("s3task: task completed")
		l.w.notifyIfPending(r, etag)
		l.w.hook("OnComplete", func(h *Hooks) {
			if h.OnComplete != nil {
				h.OnComplete(t)
			}
		})
	case evRelease:
		if t.Status == StatusFailed {
			// Given back once too often (WorkerOptions.ReleaseLimit): the
			// task failed for good.
			l.log.Warn("s3task: task given back too many times in a row; failed", "err", t.LastError)
			l.w.notifyIfPending(r, etag)
			l.w.hookFail(t, Permanent(WithCategory(errors.New(t.LastError), CategoryTimeout)))
			return
		}
		l.w.store.reached("lease/release")
		l.w.store.wake(wctx, l.w.store.MarkerKey(t))
		l.log.Info("s3task: task released for another worker")
		l.w.hook("OnRelease", func(h *Hooks) {
			if h.OnRelease != nil {
				h.OnRelease(t)
			}
		})
	case evFail:
		l.log.Info("s3task: attempt failed", "err", handlerErr, "final", t.Terminal())
		if t.Terminal() {
			l.w.notifyIfPending(r, etag)
		} else {
			l.w.noteDue(t.RetryAt)
		}
		l.w.hookFail(t, handlerErr)
	}
}

// lostLeaseError says the record is no longer ours: cause is ErrTaskCanceled
// or ErrLeaseLost.
type lostLeaseError struct{ cause error }

func (e *lostLeaseError) Error() string { return e.cause.Error() }

// write applies e (filled in with this attempt's identity) to the record as
// we last wrote it. If someone else changed the record, the lease is over:
// write cancels the handler and returns a *lostLeaseError.
func (l *lease) write(ctx context.Context, e event) error {
	if l.ended {
		return &lostLeaseError{cause: ErrLeaseLost}
	}
	e.worker, e.attempt = l.w.opts.ID, l.task.Attempt
	e.lease, e.margin = l.w.opts.LeaseDuration, l.w.opts.ClockMargin
	e.notify = l.w.store.opts.OnTerminal != nil
	s := l.w.store
	next, _, err := transition(l.task, e, s.serverNow())
	if err != nil {
		return err // cannot happen for our own record
	}
	got, etag, err := s.commitMarked(ctx, l.task, l.etag, next)
	if errors.Is(err, errLost) && got.Status == StatusRunning && got.WorkerID == e.worker && got.Attempt == e.attempt {
		// Still ours: an earlier write of this attempt landed although its
		// answer was lost, so our ETag was stale. Decide again from it.
		s.reached("lease/still-ours")
		if next, _, err = transition(got, e, s.serverNow()); err != nil {
			return err
		}
		got, etag, err = s.commitMarked(ctx, got, etag, next)
	}
	switch {
	case err == nil:
		l.hold(got, etag)
		return nil
	case errors.Is(err, errLost), errors.Is(err, errOvertaken), errors.Is(err, errGone):
		cause, branch := ErrLeaseLost, "lease/lost"
		if got != nil && got.Status == StatusAbandoned {
			cause, branch = ErrTaskCanceled, "lease/cancelled"
		}
		s.reached(branch)
		l.lose(cause, got)
		return &lostLeaseError{cause: cause}
	}
	return err
}

// lose marks the lease as over, cancels the handler with cause and reports
// it.
func (l *lease) lose(cause error, current *record) {
	if l.ended {
		return
	}
	l.ended = true
	l.cancel(cause)
	l.log.Info("s3task: lost the task", "cause", cause)
	var c *Task
	if current != nil {
		c = current.Task.clone()
	}
	l.w.hook("OnLeaseLost", func(h *Hooks) {
		if h.OnLeaseLost != nil {
			h.OnLeaseLost(l.task.ID, c, cause)
		}
	})
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
