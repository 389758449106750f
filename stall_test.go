package s3task_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/s3tasktest"
)

// stall imitates an S3 that accepts connections but stops answering: while
// it is on, every request that starts blocks until its context ends.
type stall struct {
	on      atomic.Bool
	blocked atomic.Int64 // requests held so far
}

func (s *stall) wrap(next http.RoundTripper) http.RoundTripper {
	return s3tasktest.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		if s.on.Load() {
			s.blocked.Add(1)
			<-r.Context().Done()
			return nil, r.Context().Err()
		}
		return next.RoundTrip(r)
	})
}

// stallWorker returns the options of a worker with short leases: a lease of
// 3s renewed every second, trusted until half a second before its end,
// taken over half a second after it. Its requests are given up after a
// second (the larger of HeartbeatInterval, PollInterval and 1s).
func stallWorker(id string, hooks s3task.Hooks) *s3task.WorkerOptions {
	o := quickWorker(id, hooks)
	o.Concurrency = 1
	o.PollInterval, o.MaxPollInterval = 20*time.Millisecond, 200*time.Millisecond
	o.LeaseDuration, o.ClockMargin = 3*time.Second, 500*time.Millisecond
	o.ShutdownTimeout = 200 * time.Millisecond
	return o
}

// attempts is a handler whose first attempt of every task holds on until
// its context ends, noting the cause and when; later attempts complete.
type attempts struct {
	mu        sync.Mutex
	started   chan int // attempt numbers, as they start
	causes    []error
	endedAt   []time.Time
	completed int
	notified  atomic.Int32 // OnComplete calls, through hooks
}

// hooks counts the OnComplete calls of the workers that run a.
func (a *attempts) hooks() s3task.Hooks {
	return s3task.Hooks{OnComplete: func(*s3task.Task) { a.notified.Add(1) }}
}

func newAttempts() *attempts { return &attempts{started: make(chan int, 16)} }

func (a *attempts) Work(ctx context.Context, job *s3task.Job) error {
	offer(a.started, job.Task.Attempt)
	if job.Task.Attempt == 1 {
		<-ctx.Done()
		a.mu.Lock()
		a.causes = append(a.causes, context.Cause(ctx))
		a.endedAt = append(a.endedAt, time.Now())
		a.mu.Unlock()
		return context.Cause(ctx)
	}
	a.mu.Lock()
	a.completed++
	a.mu.Unlock()
	return nil
}

// TestStalledS3HeartbeatsLoseLease: a running task whose heartbeats meet a
// stalled S3 has its handler cancelled with ErrLeaseLost before the lease
// it last wrote ends; once S3 answers again, the task is recovered and
// completes, once.
func TestStalledS3HeartbeatsLoseLease(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t, nil)
		var st stall
		h := newAttempts()
		hooks := h.hooks()
		task := e.submit(t, "stalled heartbeats")
		runWorker(t, e.newStore(t, nil, st.wrap), h, stallWorker("a", hooks))
		if n := await(t, h.started, "attempt 1 to start"); n != 1 {
			t.Fatalf("attempt %d started, want 1", n)
		}
		held := e.get(t, task.ID) // the lease as claimed; no renewal lands from here on
		st.on.Store(true)
		waitUntil(t, "attempt 1 to be cancelled", func() bool {
			h.mu.Lock()
			defer h.mu.Unlock()
			return len(h.causes) > 0
		})
		h.mu.Lock()
		cause, ended := h.causes[0], h.endedAt[0]
		h.mu.Unlock()
		if last := e.get(t, task.ID); last.Attempt == 1 {
			held = last // renewals before the stall moved the lease on
		}
		if !errors.Is(cause, s3task.ErrLeaseLost) {
			t.Errorf("attempt 1 ended with %v, want ErrLeaseLost", cause)
		}
		if !ended.Before(held.LeaseExpiresAt) {
			t.Errorf("attempt 1 cancelled at %s, not before its lease's end %s", ended.Format(time.StampMilli), held.LeaseExpiresAt.Format(time.StampMilli))
		}
		st.on.Store(false)
		// OnComplete runs after the record is written: wait for both.
		waitUntil(t, "the task to complete", func() bool {
			return e.get(t, task.ID).Status == s3task.StatusCompleted && h.notified.Load() > 0
		})
		got := e.get(t, task.ID)
		h.mu.Lock()
		defer h.mu.Unlock()
		if got.Attempt != 2 || h.completed != 1 || h.notified.Load() != 1 || len(h.causes) != 1 {
			t.Errorf("attempt %d completed; %d handler completions, %d OnComplete, %d cancelled attempts; want attempt 2, 1, 1, 1",
				got.Attempt, h.completed, h.notified.Load(), len(h.causes))
		}
		if st.blocked.Load() == 0 {
			t.Errorf("no request met the stall")
		}
	})
}

// TestStalledS3Stop: Stop returns within its ctx while S3 is stalled and a
// task runs, Run returns within the lease, and the task, recovered once S3
// answers again, completes once.
func TestStalledS3Stop(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t, nil)
		var st stall
		h := newAttempts()
		hooks := h.hooks()
		task := e.submit(t, "stalled stop")
		opts := stallWorker("stopping", hooks)
		w, err := s3task.NewWorker(e.newStore(t, nil, st.wrap), h, opts)
		if err != nil {
			t.Fatal(err)
		}
		runDone := make(chan error, 1)
		go func() { runDone <- w.Run(context.Background()) }()
		await(t, h.started, "attempt 1 to start")
		st.on.Store(true) // the handler runs in the worker's one slot: no poll meets the stall, only the attempt's writes

		// The bubble's clock, which a loaded machine does not move, times
		// Stop and Run exactly.
		const stopWithin = 500 * time.Millisecond
		ctx, cancel := context.WithTimeout(context.Background(), stopWithin)
		defer cancel()
		start := time.Now()
		err = w.Stop(ctx)
		if took := time.Since(start); took > stopWithin {
			t.Errorf("Stop took %s with a %s ctx", took, stopWithin)
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Stop = %v", err)
		}
		// Run ends once the attempt's last write gives up: within the lease.
		select {
		case err := <-runDone:
			if err != nil {
				t.Errorf("Run = %v", err)
			}
		case <-time.After(opts.LeaseDuration + 2*time.Second):
			t.Fatalf("Run still running %s after Stop on a stalled S3", opts.LeaseDuration+2*time.Second)
		}
		if st.blocked.Load() == 0 {
			t.Errorf("no request met the stall")
		}
		st.on.Store(false)
		runWorker(t, e.newStore(t, nil), h, quickWorker("after", hooks))
		// OnComplete runs after the record is written: wait for both.
		waitUntil(t, "the task to complete", func() bool {
			return e.get(t, task.ID).Status == s3task.StatusCompleted && h.notified.Load() > 0
		})
		h.mu.Lock()
		defer h.mu.Unlock()
		if got := e.get(t, task.ID); got.Status != s3task.StatusCompleted || h.completed != 1 || h.notified.Load() != 1 {
			t.Errorf("task %s attempt %d; %d handler completions, %d OnComplete; want completed once", got.Status, got.Attempt, h.completed, h.notified.Load())
		}
	})
}

// TestStalledS3IdleWorkerKeepsPolling: an idle worker's requests to a
// stalled S3 are given up and tried again, and once S3 answers it picks up
// new work as before.
func TestStalledS3IdleWorkerKeepsPolling(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t, nil)
		var st stall
		var polls atomic.Int32
		completed := make(chan *s3task.Task, 4)
		hooks := s3task.Hooks{
			OnPoll:     func(s3task.PollStats) { polls.Add(1) },
			OnComplete: func(t *s3task.Task) { offer(completed, t) },
		}
		opts := stallWorker("idle", hooks)
		runWorker(t, e.newStore(t, nil, st.wrap), succeed, opts)
		waitUntil(t, "a first poll", func() bool { return polls.Load() > 0 })
		st.on.Store(true)
		// Each request is given up after a second (see stallWorker), so a
		// stall of 2.5s meets at least two of them if the loop goes on.
		time.Sleep(2500 * time.Millisecond)
		if n := st.blocked.Load(); n < 2 {
			t.Errorf("%d requests met a 2.5s stall, want at least 2: the poll loop is wedged", n)
		}
		st.on.Store(false)
		before := polls.Load()
		task := e.submit(t, "after the stall")
		done := await(t, completed, "the task submitted after the stall to complete")
		if done.ID != task.ID {
			t.Errorf("completed %s, want %s", done.ID, task.ID)
		}
		// The poll that started the task reports itself when it ends, which
		// may be after the task completed.
		waitUntil(t, "a poll after the stall", func() bool { return polls.Load() > before })
	})
}

// TestStalledS3CheckBackendReturns: CheckBackend on an S3 that has stopped
// answering returns once its context ends, and its clean-up deletes,
// which must outlive that context, are bounded too: it used to wait for
// them without limit, so `s3taskctl check` hung, deaf to its -timeout and
// to Ctrl-C, when S3 froze.
func TestStalledS3CheckBackendReturns(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t, nil)
		var st stall
		store := e.newStore(t, nil, st.wrap)
		st.on.Store(true)
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			_, err := store.CheckBackend(ctx)
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("CheckBackend on a stalled S3: %v, want the context's deadline", err)
			}
			// The docs promise the clean-up's 2 s at most after ctx ends,
			// which the bubble's clock measures exactly.
			deadline, _ := ctx.Deadline()
			if late := time.Since(deadline); late > 2*time.Second {
				t.Errorf("CheckBackend returned %s after its context ended, want at most the clean-up's 2 s", late)
			}
		case <-time.After(testWait):
			t.Fatalf("CheckBackend on a stalled S3 had not returned %s after its context ended", testWait)
		}
		if n := st.blocked.Load(); n < 2 {
			t.Errorf("%d requests met the stall, want the first PUT and the clean-up's DELETE", n)
		}
	})
}
