package conformance

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/s3test"
)

// skewed returns store options for a machine whose clock is off by d.
func skewed(d time.Duration) *s3task.StoreOptions {
	return &s3task.StoreOptions{Clock: func() time.Time { return time.Now().Add(d) }}
}

// testCrashRecovery: worker A claims a task and is cut off from S3, as if
// its machine froze. Next to it run B, whose clock is ten minutes slow, and
// C, ten minutes fast. While A's lease is live, neither may take the task,
// however often they list the markers, and even when a marker due early
// makes them read the record; once the lease expires by the server's clock,
// one of them recovers it as attempt 2. When A comes back, nothing it does
// changes the result.
func testCrashRecovery(t *testing.T, b Backend) {
	h := open(t, b, nil)
	var cut s3test.Cutter
	releaseA := newGate(t)
	aWrote := make(chan error, 1)
	aReturned := make(chan struct{})
	evA := newEvents()
	handlerA := s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		defer close(aReturned)
		_ = releaseA.wait(ctx)
		// A stale handler that ignores its context and writes anyway: the key
		// is its own attempt's, and it must never become the result.
		aWrote <- job.WriteOutput(context.WithoutCancel(ctx), strings.NewReader("stale result from A"))
		return nil
	})
	runA := h.startWorker(h.newStore(nil, cut.Wrap), handlerA, h.workerOptions("worker-a", evA.hooks()))
	task := h.submit(s3task.CreateParams{Name: "crash"}, "x\n")
	claimA := await(h, evA.claimed, "worker A's claim")
	if claimA.Attempt != 1 || claimA.WorkerID != "worker-a" {
		t.Fatalf("A claimed attempt %d as %q", claimA.Attempt, claimA.WorkerID)
	}

	// A marker due now, besides the one A's claim put at the end of its
	// lease: one a reconcile put back late, say. It makes B and C read the
	// record while the lease is live, and judge it by the server's clock.
	early := h.store.Prefix() + "active/" + time.Now().UTC().Format("20060102T150405.000Z") + "_" + task.ID
	h.put(early, nil)

	readsB := &recordReads{key: h.recordKey(task.ID), dir: h.store.Prefix() + "active/", more: make(chan struct{}, 1)}
	readsC := &recordReads{key: h.recordKey(task.ID), dir: h.store.Prefix() + "active/", more: make(chan struct{}, 1)}
	handlerBC := s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		return job.WriteOutput(ctx, strings.NewReader("fresh result from "+job.Task.WorkerID))
	})
	evB, evC := newEvents(), newEvents()
	h.startWorker(h.newStore(skewed(-10*time.Minute), readsB.wrap), handlerBC, h.workerOptions("worker-b-slow", evB.hooks()))
	h.startWorker(h.newStore(skewed(10*time.Minute), readsC.wrap), handlerBC, h.workerOptions("worker-c-fast", evC.hooks()))

	// B and C each read the record, and list the markers again and again,
	// while A's lease is live.
	for _, r := range []*recordReads{readsB, readsC} {
		for r.count() < 1 || r.listings() < 5 {
			await(h, r.more, "B and C to look at the task")
		}
	}
	none(t, evB.claimed, "claim by B while A's lease is live")
	none(t, evC.claimed, "claim by C (fast clock) while A's lease is live")

	cut.Cut() // from now on nothing A sends reaches S3
	h.waitFor("A's requests to be refused", func() bool { return cut.Refused() > 0 })
	h.tg.ExpireLeases()

	var claim *s3task.Task
	var evWinner *events
	select {
	case claim = <-evB.claimed:
		evWinner = evB
	case claim = <-evC.claimed:
		evWinner = evC
	case <-time.After(h.tg.Timing.Wait):
		t.Fatalf("nobody recovered the task within %s of A's lease expiring", h.tg.Timing.Wait)
	}
	if claim.Attempt != 2 {
		t.Errorf("recovered as attempt %d by %s, want a new attempt 2", claim.Attempt, claim.WorkerID)
	}
	done := await(h, evWinner.completed, "the recovered task to complete")

	cut.Restore()
	releaseA.open()
	if err := await(h, aWrote, "A's handler to write its output"); err != nil {
		t.Logf("A's late output write failed (allowed): %v", err)
	} else if body, _ := h.object(h.outputKey(task.ID, 1)); string(body) != "stale result from A" {
		t.Errorf("A's output write succeeded, but attempt 1's output holds %q", body)
	}
	await(h, aReturned, "A's handler to return")
	lost := await(h, evA.lost, "A to report its lost lease")
	if lost.id != task.ID || !errors.Is(lost.cause, s3task.ErrLeaseLost) {
		t.Errorf("OnLeaseLost(%s, %v), want (%s, ErrLeaseLost)", lost.id, lost.cause, task.ID)
	}
	runA.stop()
	none(t, evA.completed, "OnComplete from A")
	none(t, evA.failed, "OnFail from A")

	got := h.get(task.ID)
	if got.Revision != done.Revision || got.Status != s3task.StatusCompleted || got.Attempt != 2 || got.WorkerID != claim.WorkerID {
		t.Errorf("record: %s attempt %d by %q (revision %s); want %s's completion of attempt 2 (revision %s)",
			got.Status, got.Attempt, got.WorkerID, got.Revision, claim.WorkerID, done.Revision)
	}
	if got.OutputPath != h.outputKey(task.ID, 2) {
		t.Errorf("output_object_path = %q, want attempt 2's", got.OutputPath)
	}
	if out := h.output(task.ID); out != "fresh result from "+claim.WorkerID {
		t.Errorf("output %q, want the recovering worker's", out)
	}
	h.waitFor("the marker to go", func() bool { return !h.hasMarker(task.ID) })
}
