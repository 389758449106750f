package s3task

// The heartbeats of a lease that its holder may trust for less than a
// heartbeat interval after each renewal, in a synctest bubble against the
// socketless in-memory S3 (see bubble_test.go).

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/s3task/s3task/internal/s3test"
)

// writesOf counts the record PUTs of task id that S3 answered 200 (n),
// and the reads of the record (reads), through the transport it wraps.
// Past limit, if set, it cuts every further PUT off instead, so that a
// writer in a busy loop cannot hold the bubble's clock still.
type writesOf struct {
	id    string
	limit int32
	n     atomic.Int32
	reads atomic.Int32
}

func (c *writesOf) wrap(next http.RoundTripper) http.RoundTripper {
	return s3test.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		if c.limit > 0 && c.n.Load() >= c.limit && advIsRecord(r, http.MethodPut, c.id) {
			r.Body.Close()
			return nil, s3test.ErrCut
		}
		if advIsRecord(r, http.MethodGet, c.id) {
			c.reads.Add(1)
		}
		resp, err := next.RoundTrip(r)
		if err == nil && resp.StatusCode == http.StatusOK && advIsRecord(r, http.MethodPut, c.id) {
			c.n.Add(1)
		}
		return resp, err
	})
}

// The defect of the issue: a worker whose lease leaves less than a
// heartbeat interval of trust after each renewal (LeaseDuration 6s,
// HeartbeatInterval 1s, the default ClockMargin of 5s) renewed its lease
// again and again without a pause, thousands of writes a second, and a
// Cancel from another store lost every compare-and-set to them, then
// returned ErrOutcomeUnknown ("... 412 ..., and N writes followed it").
// Renewed four times in the time it is trusted, the lease is held, and
// the Cancel goes through at once.
func TestShortLeaseCancel(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		time.Sleep(300 * time.Millisecond) // off the whole second, as real requests are
		task := e.submit(CreateParams{Name: "short lease"})
		writes := &writesOf{id: task.ID, limit: 1000}
		ended := make(chan error, 1)
		w := e.run(e.store(nil, writes.wrap), func(ctx context.Context, job *Job) error {
			<-ctx.Done()
			ended <- context.Cause(ctx)
			return ctx.Err()
		}, &WorkerOptions{ID: "short", LeaseDuration: 6 * time.Second, HeartbeatInterval: time.Second})
		advAwait(t, w.started, time.Minute, "the handler's start")

		const held = 10 * time.Second
		before := writes.n.Load()
		time.Sleep(held)
		renewals := writes.n.Load() - before
		t.Logf("%d renewals in %s", renewals, held)
		// A renewal every quarter of the second or so the lease is trusted
		// for: about four a second (a few more while the store learns the
		// server's clock), at least one.
		if secs := int32(held / time.Second); renewals < secs || renewals > 5*secs+5 {
			t.Fatalf("the worker renewed its lease %d times in %s, want between %d and %d", renewals, held, secs, 5*secs+5)
		}
		select {
		case cause := <-ended:
			t.Fatalf("the handler's context ended before the Cancel (%v): the lease was not held", cause)
		default:
		}

		got, err := e.store(nil).Cancel(e.ctx, task.ID, "stop")
		if err != nil {
			t.Fatalf("Cancel of the running task: %v", err)
		}
		if got.Status != StatusAbandoned {
			t.Errorf("Cancel returned the task %s, want abandoned", got.Status)
		}
		if cause := advAwait(t, ended, time.Minute, "the handler's context to end"); !errors.Is(cause, ErrTaskCanceled) {
			t.Errorf("the handler's context ended with %v, want ErrTaskCanceled", cause)
		}
		if r := e.record(task.ID); r.Status != StatusAbandoned {
			t.Errorf("the record is %s after the Cancel, want abandoned", r.Status)
		}
	})
}
