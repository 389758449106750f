package s3task

import (
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestKilledWorkerIsSilentWithinTwoHeartbeats: a worker that dies while it
// holds a task (here its every request fails from then on, so it writes
// nothing more and releases nothing) leaves the task running; Silent calls
// it overdue two heartbeat intervals after the worker's last write, as the
// claim recorded them, and never before one, nor while the worker lived.
func TestKilledWorkerIsSilentWithinTwoHeartbeats(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		const every = 2 * time.Second // as the example service's workers
		var dead atomic.Bool
		st := e.store(nil, advWrap(func(r *http.Request, next http.RoundTripper) (*http.Response, error) {
			if dead.Load() {
				return nil, errors.New("the worker's process is gone")
			}
			return next.RoundTrip(r)
		}))
		task := e.submit(CreateParams{Name: "killed midway"})
		aw := e.run(st, advUntilDone, &WorkerOptions{LeaseDuration: time.Minute, HeartbeatInterval: every, ReconcileInterval: -1})
		advAwait(t, aw.started, time.Minute, "the claim")

		// Alive for three heartbeats: never overdue.
		for end := time.Now().Add(3*every + every/2); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			if silence, overdue := e.record(task.ID).Silent(time.Now()); overdue {
				t.Fatalf("a live worker's task is overdue after %s of silence", silence)
			}
		}
		synctest.Wait()
		dead.Store(true)
		rec := e.record(task.ID)
		last := rec.UpdatedAt
		if rec.Writes < 4 || rec.Status != StatusRunning || rec.heartbeatInterval() != every {
			t.Fatalf("before the kill: %d writes, %s, heartbeat interval %s recorded; want the claim and three heartbeats, running, %s",
				rec.Writes, rec.Status, rec.heartbeatInterval(), every)
		}

		// Dead: not overdue before one interval has passed since its last
		// write (nor, by this rule, before two), overdue at two.
		for time.Now().Before(last.Add(2 * every)) {
			now := time.Now()
			rec := e.record(task.ID)
			if !rec.UpdatedAt.Equal(last) {
				t.Fatalf("the dead worker's record changed at %s", rec.UpdatedAt)
			}
			if silence, overdue := rec.Silent(now); overdue {
				t.Fatalf("overdue after %s of silence, before two heartbeat intervals (%s)", silence, 2*every)
			}
			time.Sleep(min(100*time.Millisecond, last.Add(2*every).Sub(now)))
		}
		// As a host sees it: a Get, judged by the store's clock.
		got, err := e.admin.Get(e.ctx, task.ID)
		if err != nil {
			t.Fatal(err)
		}
		silence, overdue := got.Silent(e.admin.Now())
		if !overdue || silence != 2*every || got.Status != StatusRunning {
			t.Errorf("two heartbeat intervals after the last write: %s, silent %s, overdue %v; want running, %s, overdue", got.Status, silence, overdue, 2*every)
		}
	})
}
