package s3task

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestReleaseLimitFailsTask: workers that stop while a task runs give it
// back; with WorkerOptions.ReleaseLimit 2, the first two give-backs put it
// back in the queue without using an attempt, and the third fails it for
// good, with CategoryTimeout: the OnFail hook gets a permanent error of
// that category instead of OnRelease, and the OnTerminal notice goes out.
// Without a limit, the task is given back however often it is.
func TestReleaseLimitFailsTask(t *testing.T) {
	for _, limit := range []int{2, 0} {
		t.Run(fmt.Sprint("limit ", limit), func(t *testing.T) {
			inBubble(t, func(t *testing.T, e *advEnv) {
				notices := make(chan Task, 8)
				st := e.store(&StoreOptions{OnTerminal: func(_ context.Context, t *Task) error {
					notices <- *t
					return nil
				}})
				var (
					mu       sync.Mutex
					released int
					failures []error
				)
				opts := func() *WorkerOptions {
					return &WorkerOptions{ShutdownTimeout: time.Second, ReleaseLimit: limit, Hooks: Hooks{
						OnRelease: func(*Task) { mu.Lock(); released++; mu.Unlock() },
						OnFail:    func(_ *Task, err error) { mu.Lock(); failures = append(failures, err); mu.Unlock() },
					}}
				}
				task := e.submit(CreateParams{Name: "longer than its workers live"})
				rounds := 5 // without a limit: given back every time
				if limit > 0 {
					rounds = limit + 1
				}
				for i := 1; i <= rounds; i++ {
					aw := e.run(st, advUntilDone, opts())
					advAwait(t, aw.started, time.Minute, fmt.Sprintf("attempt %d's start", i))
					aw.stop() // a graceful shutdown: the handler is stopped and its attempt given back
					got := e.record(task.ID)
					if limit == 0 || i <= limit {
						if got.Status != StatusQueued || got.AttemptsUsed() != 0 || got.ReleasedAttempts != i {
							t.Fatalf("after give-back %d: %s, %d attempts used, %d released; want queued, 0, %d", i, got.Status, got.AttemptsUsed(), got.ReleasedAttempts, i)
						}
						continue
					}
					if got.Status != StatusFailed || !got.Terminal() || got.ErrorCategory != CategoryTimeout || got.AttemptsUsed() != 1 {
						t.Fatalf("after give-back %d: %s (terminal %v), category %q, %d attempts used; want a final failure of category %q using 1",
							i, got.Status, got.Terminal(), got.ErrorCategory, got.AttemptsUsed(), CategoryTimeout)
					}
					last := got.History[len(got.History)-1]
					if last.Outcome != OutcomeFailed || last.ErrorCategory != CategoryTimeout || last.Error != got.LastError {
						t.Errorf("the last attempt's entry is %+v; want it failed, of category %q, with the record's last error", last, CategoryTimeout)
					}
					if !got.NotifyPending {
						t.Errorf("the failure's OnTerminal notice is not pending")
					}
				}
				mu.Lock()
				gotReleased, gotFailures := released, failures
				mu.Unlock()
				if limit == 0 {
					if gotReleased != rounds || len(gotFailures) != 0 {
						t.Errorf("OnRelease %d times, OnFail %d; want %d and none", gotReleased, len(gotFailures), rounds)
					}
					return
				}
				if gotReleased != limit || len(gotFailures) != 1 {
					t.Fatalf("OnRelease %d times, OnFail %d; want %d and 1", gotReleased, len(gotFailures), limit)
				}
				if err := gotFailures[0]; ErrorCategory(err) != CategoryTimeout || !IsPermanent(err) {
					t.Errorf("OnFail got %v (category %q, permanent %v); want a permanent error of category %q", err, ErrorCategory(err), IsPermanent(err), CategoryTimeout)
				}
				// The worker that failed it stopped before its notice went
				// out: the next one delivers it when the marker, left where
				// the attempt's lease check was, falls due, and does not run
				// the task.
				aw := e.run(st, advUntilDone, opts())
				n := advAwait(t, notices, 5*time.Minute, "the failure's notice")
				if n.ID != task.ID || n.Status != StatusFailed || n.ErrorCategory != CategoryTimeout {
					t.Errorf("notice of %s: %s, %q; want %s failed with %q", n.ID, n.Status, n.ErrorCategory, task.ID, CategoryTimeout)
				}
				aw.stop()
				if len(aw.started) != 0 {
					t.Errorf("a worker ran the failed task")
				}
			})
		})
	}
}

// TestReleaseLimitOption: WorkerOptions.ReleaseLimit is at most
// HistoryLimit-1, the most earlier attempts the history shows beside the
// running one; negative means no limit, as zero does.
func TestReleaseLimitOption(t *testing.T) {
	st := newAdvEnv(t).admin
	for _, tc := range []struct {
		limit int
		ok    bool
	}{{-1, true}, {0, true}, {1, true}, {HistoryLimit - 1, true}, {HistoryLimit, false}, {1 << 20, false}} {
		_, err := NewWorker(st, HandlerFunc(advSucceed), &WorkerOptions{ReleaseLimit: tc.limit})
		if tc.ok != (err == nil) || err != nil && !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("ReleaseLimit %d: %v; want accepted %v, or ErrInvalidOptions", tc.limit, err, tc.ok)
		}
	}
}

// TestOnClaimBeforeOnPoll: a poll's claims reach the OnClaim hook before
// its OnPoll reports them, so that a host counting running tasks by the
// hooks never sees a poll's starts before the starts themselves.
func TestOnClaimBeforeOnPoll(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		const tasks = 6
		var (
			mu      sync.Mutex
			claims  int
			started int
			behind  []string
		)
		for range tasks {
			e.submit(CreateParams{})
		}
		done := make(chan struct{}, tasks)
		aw := e.run(e.store(nil), func(context.Context, *Job) error { done <- struct{}{}; return nil }, &WorkerOptions{
			Concurrency: 2,
			Hooks: Hooks{
				OnClaim: func(*Task) { mu.Lock(); claims++; mu.Unlock() },
				OnPoll: func(p PollStats) {
					mu.Lock()
					started += p.Started
					if claims < started {
						behind = append(behind, fmt.Sprintf("a poll reported %d started, %d in all, with %d claims seen", p.Started, started, claims))
					}
					mu.Unlock()
				},
			},
		})
		for i := range tasks {
			advAwait(t, done, time.Minute, fmt.Sprintf("task %d of %d", i+1, tasks))
		}
		aw.stop()
		mu.Lock()
		defer mu.Unlock()
		if started == 0 {
			t.Fatal("no poll started a task")
		}
		for _, b := range behind {
			t.Error(b)
		}
	})
}
