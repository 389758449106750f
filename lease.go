package s3task

import (
	"context"
	"errors"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"
)

// lease is one claimed attempt while the worker holds it: the handler, the
// heartbeats that renew the lease and carry progress, and the final write.
// Every record write of the attempt goes through lease.write, one at a time,
// each a compare-and-set on the ETag of the previous one.
type lease struct {
	w      *Worker
	job    *Job
	log    *slog.Logger
	cancel context.CancelCauseFunc

	mu    sync.Mutex
	task  *Task  // the record as we last wrote it
	etag  string // its ETag
	ended bool   // the record is no longer ours to write
}

// start runs the claimed task t in its own goroutine. The slot taken in poll
// is released when the attempt is settled.
func (w *Worker) start(base context.Context, t *Task, etag string) {
	ctx, cancel := context.WithCancelCause(base)
	l := &lease{
		w:      w,
		job:    &Job{Task: *t.clone(), store: w.store},
		log:    w.log.With("task_id", t.ID, "attempt", t.Attempt),
		cancel: cancel,
		task:   t,
		etag:   etag,
	}
	w.wg.Add(1)
	go func() {
		defer func() {
			cancel(nil)
			<-w.slots
			select {
			case w.freed <- struct{}{}:
			default:
			}
			w.wg.Done()
		}()
		l.run(ctx)
	}()
}

func (l *lease) run(ctx context.Context) {
	l.log.Debug("s3task: claimed task")
	if h := l.w.opts.Hooks.OnClaim; h != nil {
		h(l.task.clone())
	}
	stop, stopped := make(chan struct{}), make(chan struct{})
	go l.heartbeats(ctx, stop, stopped)
	err := l.callHandler(ctx)
	l.job.discardOpen()
	close(stop)
	<-stopped
	l.finish(ctx, err)
}

// callHandler runs the handler, turning a panic into an error.
func (l *lease) callHandler(ctx context.Context) (err error) {
	defer func() {
		if r := recover(); r != nil {
			l.log.Error("s3task: handler panicked", "panic", r, "stack", string(debug.Stack()))
			err = &panicError{value: r}
		}
	}()
	return l.w.h.Handle(ctx, l.job)
}

// heartbeats renews the lease every HeartbeatInterval until stop is closed
// or the lease is lost. If renewals keep failing until the lease runs out by
// the server's clock, the handler is cancelled with ErrLeaseLost: another
// worker may take the task over from then on.
func (l *lease) heartbeats(ctx context.Context, stop <-chan struct{}, stopped chan<- struct{}) {
	defer close(stopped)
	tick := time.NewTicker(l.w.opts.HeartbeatInterval)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		progress, _ := l.job.state()
		// A renewal must not be cut off halfway by the handler's context
		// being cancelled: its outcome would be unknown to the final write.
		// It may take until the lease runs out.
		l.mu.Lock()
		left := l.task.LeaseExpiresAt.Sub(l.w.store.serverNow())
		l.mu.Unlock()
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(left, time.Second))
		err := l.write(hctx, event{kind: evHeartbeat, progress: &progress})
		cancel()
		if err == nil {
			continue
		}
		var lost *lostLeaseError
		if errors.As(err, &lost) {
			l.cancel(lost.cause)
			return
		}
		l.log.Warn("s3task: heartbeat failed", "err", err)
		l.mu.Lock()
		expired := !l.w.store.serverNow().Before(l.task.LeaseExpiresAt)
		l.mu.Unlock()
		if expired {
			l.lose(ErrLeaseLost, nil)
			l.cancel(ErrLeaseLost)
			return
		}
	}
}

// finish writes the attempt's outcome: completed, failed, or back to the
// queue if shutdown interrupted it. It writes nothing once the lease is lost.
func (l *lease) finish(ctx context.Context, handlerErr error) {
	cause := context.Cause(ctx)
	if errors.Is(cause, ErrTaskCanceled) || errors.Is(cause, ErrLeaseLost) {
		l.log.Info("s3task: attempt ended without the lease", "cause", cause, "handler_err", handlerErr)
		return
	}
	// The final write must happen even though ctx may be cancelled by
	// shutdown; past the lease it would be refused anyway.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.w.opts.LeaseDuration)
	defer cancel()

	progress, wroteOutput := l.job.state()
	var e event
	switch {
	case handlerErr == nil:
		e = event{kind: evComplete, progress: &progress}
		if wroteOutput {
			e.output = l.job.OutputKey()
		}
	case errors.Is(cause, ErrWorkerStopping):
		e = event{kind: evRelease}
	default:
		var he *handlerError
		delay := l.w.opts.Backoff(l.task.Attempt)
		if errors.As(handlerErr, &he) && he.hasDelay {
			delay = he.delay
		}
		e = event{kind: evFail, progress: &progress, errMsg: truncate(handlerErr.Error(), 4096),
			permanent: IsPermanent(handlerErr), retryDelay: delay, category: failureCategory(handlerErr)}
	}
	err := l.write(wctx, e)
	if err != nil {
		l.log.Warn("s3task: final write failed; the lease will expire and the task be recovered",
			"event", e.kind.String(), "err", err)
		return
	}
	l.mu.Lock()
	t, etag := l.task.clone(), l.etag
	l.mu.Unlock()
	hooks := l.w.opts.Hooks
	switch e.kind {
	case evComplete:
		l.w.store.settle(wctx, t, etag)
		l.log.Info("s3task: task completed")
		if hooks.OnComplete != nil {
			hooks.OnComplete(t)
		}
	case evRelease:
		l.w.store.wake(wctx)
		l.log.Info("s3task: task released for another worker")
		if hooks.OnRelease != nil {
			hooks.OnRelease(t)
		}
	case evFail:
		l.log.Info("s3task: attempt failed", "err", handlerErr, "final", t.Terminal())
		if t.Terminal() {
			l.w.store.settle(wctx, t, etag)
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
// we last wrote it. If the compare-and-set loses, someone else changed the
// record: the lease is over, and write returns a *lostLeaseError.
func (l *lease) write(ctx context.Context, e event) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return &lostLeaseError{cause: ErrLeaseLost}
	}
	e.worker, e.attempt, e.lease = l.w.opts.ID, l.task.Attempt, l.w.opts.LeaseDuration
	e.notify = l.w.store.opts.OnTerminal != nil
	s := l.w.store
	next, _, err := transition(l.task, e, s.serverNow())
	if err != nil {
		return err // cannot happen for our own record
	}
	got, etag, err := s.commit(ctx, l.task, l.etag, next)
	if errors.Is(err, errLost) && got.Status == StatusRunning && got.WorkerID == e.worker && got.Attempt == e.attempt {
		// Still ours: an earlier write of this attempt landed although its
		// answer was lost, so our ETag was stale. Decide again from it.
		if next, _, err = transition(got, e, s.serverNow()); err != nil {
			return err
		}
		got, etag, err = s.commit(ctx, got, etag, next)
	}
	switch {
	case err == nil:
		l.task, l.etag = got, etag
		return nil
	case errors.Is(err, errLost), errors.Is(err, ErrNotFound):
		cause := ErrLeaseLost
		if got != nil && got.Status == StatusAbandoned {
			cause = ErrTaskCanceled
		}
		l.loseLocked(cause, got)
		return &lostLeaseError{cause: cause}
	}
	return err
}

// lose marks the lease as over and reports it.
func (l *lease) lose(cause error, current *Task) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.loseLocked(cause, current)
}

func (l *lease) loseLocked(cause error, current *Task) {
	if l.ended {
		return
	}
	l.ended = true
	l.log.Info("s3task: lost the task", "cause", cause)
	if h := l.w.opts.Hooks.OnLeaseLost; h != nil {
		var c *Task
		if current != nil {
			c = current.clone()
		}
		h(l.task.ID, c, cause)
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
