package conformance

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/s3task/s3task"
)

// testWorkerEndToEnd: a worker reads the input, reports progress that shows
// in the record while it runs, writes its output and completes the task.
func testWorkerEndToEnd(t *testing.T, b Backend) {
	h := open(t, b, nil)
	input := "name,qty\nbolt,12\nnut,x\nwasher,3\n"
	proceed := newGate(t)
	ev := newEvents()
	handler := s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		in, err := job.OpenInput(ctx)
		if err != nil {
			return err
		}
		defer in.Close()
		var out strings.Builder
		var p s3task.Progress
		sc := bufio.NewScanner(in)
		sc.Scan() // header
		for sc.Scan() {
			name, qty, _ := strings.Cut(sc.Text(), ",")
			p.RowCount++
			p.ProcessedCount++
			if strings.Trim(qty, "0123456789") != "" {
				p.ErrorCount++
				continue
			}
			p.SuccessCount++
			fmt.Fprintf(&out, "%s,%s\n", strings.ToUpper(name), qty)
		}
		if err := sc.Err(); err != nil {
			return err
		}
		job.SetProgress(p)
		if err := proceed.wait(ctx); err != nil {
			return err
		}
		w, err := job.CreateOutput(ctx)
		if err != nil {
			return err
		}
		if _, err := w.Write([]byte(out.String())); err != nil {
			return err
		}
		return w.Close()
	})
	h.startWorker(h.newStore(nil), handler, h.workerOptions("e2e-worker", ev.hooks()))
	task := h.submit(s3task.CreateParams{Name: "end to end", Type: "csv"}, input)

	claimed := await(h, ev.claimed, "the claim")
	if claimed.ID != task.ID || claimed.Attempt != 1 || claimed.WorkerID != "e2e-worker" || claimed.Status != s3task.StatusRunning {
		t.Errorf("claimed %s attempt %d by %q, status %s", claimed.ID, claimed.Attempt, claimed.WorkerID, claimed.Status)
	}
	want := s3task.Progress{RowCount: 3, ProcessedCount: 3, SuccessCount: 2, ErrorCount: 1}
	// Progress reaches the record with the next heartbeat.
	h.waitFor("the progress to show in the record while the task runs", func() bool {
		got := h.get(task.ID)
		return got.Status == s3task.StatusRunning && got.Progress == want
	})
	proceed.open()
	done := await(h, ev.completed, "the completion")
	got := h.get(task.ID)
	if got.Status != s3task.StatusCompleted || got.Attempt != 1 || got.Progress != want || !got.LeaseExpiresAt.IsZero() {
		t.Errorf("completed record: status %s, attempt %d, progress %+v, lease %v", got.Status, got.Attempt, got.Progress, got.LeaseExpiresAt)
	}
	if got.Revision != done.Revision {
		t.Errorf("stored revision %s, OnComplete saw %s", got.Revision, done.Revision)
	}
	if got.OutputPath != h.outputKey(task.ID, 1) {
		t.Errorf("output_object_path %q, want %q", got.OutputPath, h.outputKey(task.ID, 1))
	}
	if out := h.output(task.ID); out != "BOLT,12\nWASHER,3\n" {
		t.Errorf("output %q", out)
	}
	if body, _ := h.object(h.inputKey(task.ID)); string(body) != input {
		t.Errorf("input changed to %q", body)
	}
	h.waitFor("the marker to go", func() bool { return !h.hasMarker(task.ID) })
}

// testRetriesToMaxAttempts: a handler that always fails runs exactly
// max_attempts times, then the task fails for good; a permanent error stops
// at the first attempt.
func testRetriesToMaxAttempts(t *testing.T, b Backend) {
	h := open(t, b, nil)
	var mu sync.Mutex
	attempts := map[string][]int{}
	ev := newEvents()
	handler := s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		mu.Lock()
		attempts[job.Task.ID] = append(attempts[job.Task.ID], job.Task.Attempt)
		mu.Unlock()
		err := fmt.Errorf("flaky attempt %d", job.Task.Attempt)
		if job.Task.Name == "permanent" {
			return s3task.Permanent(err)
		}
		return err
	})
	rw := h.startWorker(h.newStore(nil), handler, h.workerOptions("retry-worker", ev.hooks()))
	flaky := h.submit(s3task.CreateParams{Name: "flaky", MaxAttempts: 3}, "x\n")
	perm := h.submit(s3task.CreateParams{Name: "permanent", MaxAttempts: 3}, "x\n")

	final := map[string]*s3task.Task{}
	for len(final) < 2 {
		f := await(h, ev.failed, "the final failures")
		if f.task.Terminal() {
			final[f.task.ID] = f.task
		}
	}
	h.waitFor("both markers to go", func() bool { return !h.hasMarker(flaky.ID) && !h.hasMarker(perm.ID) })
	rw.stop()

	mu.Lock()
	defer mu.Unlock()
	for _, c := range []struct {
		id   string
		runs []int
	}{{flaky.ID, []int{1, 2, 3}}, {perm.ID, []int{1}}} {
		if fmt.Sprint(attempts[c.id]) != fmt.Sprint(c.runs) {
			t.Errorf("task %s ran attempts %v, want %v", c.id, attempts[c.id], c.runs)
		}
		got := h.get(c.id)
		n := len(c.runs)
		if got.Status != s3task.StatusFailed || got.Attempt != n || !got.RetryAt.IsZero() || got.LastError != fmt.Sprintf("flaky attempt %d", n) {
			t.Errorf("task %s: status %s, attempt %d, retry at %v, last error %q; want failed for good at attempt %d",
				c.id, got.Status, got.Attempt, got.RetryAt, got.LastError, n)
		}
		if got.Attempt > got.MaxAttempts {
			t.Errorf("task %s: attempt %d over max_attempts %d", c.id, got.Attempt, got.MaxAttempts)
		}
	}
}

// untilDone returns a handler that closes started, waits for its context
// to end, sends the context's cause on causes and returns what ret returns
// then. It runs once.
func untilDone(ret func(ctx context.Context) error) (handler s3task.Handler, started <-chan struct{}, causes <-chan error) {
	start, cause := make(chan struct{}), make(chan error, 1)
	return s3task.HandlerFunc(func(ctx context.Context, _ *s3task.Job) error {
		close(start)
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return ret(ctx)
	}), start, cause
}

// testCancelWhileRunning: an operator cancels a running task; the handler's
// context says so within a few heartbeats, and the worker writes nothing
// more.
func testCancelWhileRunning(t *testing.T, b Backend) {
	h := open(t, b, nil)
	handler, started, causes := untilDone(context.Context.Err)
	ev := newEvents()
	opts := h.workerOptions("cancel-worker", ev.hooks())
	rw := h.startWorker(h.newStore(nil), handler, opts)
	task := h.submit(s3task.CreateParams{Name: "to cancel"}, "x\n")
	await(h, started, "the handler to start")

	canceled, err := h.store.Cancel(h.ctx, task.ID, "user pressed stop")
	if err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	at := time.Now()
	// The worker learns of it at its next heartbeat; the bound leaves room
	// for a loaded machine and is still well inside the lease.
	cause := await(h, causes, "the handler's context to be cancelled")
	if d := time.Since(at); d > opts.LeaseDuration {
		t.Errorf("the handler learned of the cancel after %s, longer than a lease", d)
	}
	if !errors.Is(cause, s3task.ErrTaskCanceled) {
		t.Errorf("context.Cause = %v, want ErrTaskCanceled", cause)
	}
	lost := await(h, ev.lost, "OnLeaseLost")
	if !errors.Is(lost.cause, s3task.ErrTaskCanceled) || lost.task == nil || lost.task.Status != s3task.StatusAbandoned {
		t.Errorf("OnLeaseLost cause %v, task %+v; want ErrTaskCanceled with the abandoned record", lost.cause, lost.task)
	}
	rw.stop()
	got := h.get(task.ID)
	if got.Revision != canceled.Revision || got.Status != s3task.StatusAbandoned {
		t.Errorf("record after the worker stopped: %s (revision %s); want the abandoned record Cancel wrote (%s)", got.Status, got.Revision, canceled.Revision)
	}
	if h.hasMarker(task.ID) {
		t.Errorf("marker of the abandoned task still there")
	}
	none(t, ev.completed, "OnComplete")
	none(t, ev.failed, "OnFail")
	none(t, ev.released, "OnRelease")
}

// testRecordVanishesWhileRunning: the record of a running task is deleted
// behind the worker's back. Its next heartbeat is an If-Match on a missing
// key (404 on AWS, versitygw and SeaweedFS, 412 on gofakes3); either way the worker must
// take the lease as lost, stop the handler and never write the record back.
func testRecordVanishesWhileRunning(t *testing.T, b Backend) {
	h := open(t, b, nil)
	// A handler that claims success must not bring the record back.
	handler, started, causes := untilDone(func(context.Context) error { return nil })
	ev := newEvents()
	rw := h.startWorker(h.newStore(nil), handler, h.workerOptions("orphan-worker", ev.hooks()))
	task := h.submit(s3task.CreateParams{Name: "orphaned"}, "x\n")
	await(h, started, "the handler to start")
	key := h.recordKey(task.ID)
	if err := h.raw.Delete(h.ctx, key); err != nil {
		t.Fatal(err)
	}
	if cause := await(h, causes, "the handler's context to be cancelled"); !errors.Is(cause, s3task.ErrLeaseLost) {
		t.Errorf("context.Cause = %v, want ErrLeaseLost", cause)
	}
	lost := await(h, ev.lost, "OnLeaseLost")
	if lost.id != task.ID || lost.task != nil || !errors.Is(lost.cause, s3task.ErrLeaseLost) {
		t.Errorf("OnLeaseLost(%s, %+v, %v); want (%s, nil, ErrLeaseLost)", lost.id, lost.task, lost.cause, task.ID)
	}
	rw.stop()
	if body, ok := h.object(key); ok {
		t.Errorf("the deleted record was written back: %s", body)
	}
	none(t, ev.completed, "OnComplete")
	none(t, ev.failed, "OnFail")
}

// testInputReplacedAfterSubmit: the input is replaced after Submit verified
// it. Whether or not the store honours If-Match on GET, the worker must
// refuse to process bytes nobody checked: the task fails for good with
// ErrInputChanged and no output.
func testInputReplacedAfterSubmit(t *testing.T, b Backend) {
	h := open(t, b, nil)
	task := h.submit(s3task.CreateParams{Name: "swapped input"}, "original,1\n")
	h.put(h.inputKey(task.ID), []byte("swapped,2\n"))
	ev := newEvents()
	ran := make(chan string, 1)
	h.startWorker(h.newStore(nil), s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		in, err := job.OpenInput(ctx)
		if err != nil {
			return err
		}
		defer in.Close()
		data, _ := io.ReadAll(in)
		ran <- string(data)
		return job.WriteOutput(ctx, strings.NewReader("processed "+string(data)))
	}), h.workerOptions("input-worker", ev.hooks()))
	f := await(h, ev.failed, "the task to fail")
	if !errors.Is(f.err, s3task.ErrInputChanged) || !f.task.Terminal() || f.task.ErrorCategory != s3task.CategoryInputChanged {
		t.Errorf("failure %v (final %v, category %q), want a final ErrInputChanged, category %q", f.err, f.task.Terminal(), f.task.ErrorCategory, s3task.CategoryInputChanged)
	}
	select {
	case data := <-ran:
		t.Errorf("the handler processed the replaced input %q", data)
	default:
	}
	if _, ok := h.object(h.outputKey(task.ID, 1)); ok {
		t.Errorf("an output was written")
	}
}

// testScheduledStart: a task submitted with a RunAt ahead is not started
// before it, even by a worker whose own clock is ten minutes fast, while a
// task due now, submitted after it, runs at once; once the time comes by
// the server's clock, a worker starts it with no Submit to wake it. A task
// held for an hour starts at once when Schedule is told to run it now.
func testScheduledStart(t *testing.T, b Backend) {
	h := open(t, b, nil)
	ev := newEvents()
	h.startWorker(h.newStore(skewed(10*time.Minute)), s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		return job.WriteOutput(ctx, strings.NewReader("ran "+job.Task.Name))
	}), h.workerOptions("scheduled-worker", ev.hooks()))

	runAt := time.Now().Add(h.tg.Timing.PastLease - time.Second) // passed by ExpireLeases
	later := h.submit(s3task.CreateParams{Name: "later", RunAt: runAt}, "x\n")
	if !later.Scheduled(time.Now()) || !later.DueAt.Equal(later.RunAt) {
		t.Fatalf("submitted with RunAt %v: scheduled %v, due_at %v", runAt, later.Scheduled(time.Now()), later.DueAt)
	}
	if key := h.store.MarkerKey(later); h.markerKey(later.ID) != key {
		t.Errorf("marker %s, want %s, named after RunAt", h.markerKey(later.ID), key)
	}
	now := h.submit(s3task.CreateParams{Name: "now"}, "x\n")
	if got := await(h, ev.claimed, "the task due now to start"); got.ID != now.ID {
		t.Fatalf("started %s (%s) first, want the task due now %s", got.ID, got.Name, now.ID)
	}
	await(h, ev.completed, "the task due now to complete")
	none(t, ev.claimed, "a start of the scheduled task before its time")
	if got := h.get(later.ID); got.Status != s3task.StatusQueued || got.Attempt != 0 {
		t.Fatalf("the scheduled task is %s at attempt %d before its time, want queued", got.Status, got.Attempt)
	}

	h.tg.ExpireLeases() // moves the server's clock past RunAt, or lets the time pass
	claimed := await(h, ev.claimed, "the scheduled task to start once its time came")
	if claimed.ID != later.ID || claimed.Attempt != 1 {
		t.Errorf("started %s attempt %d, want %s attempt 1", claimed.ID, claimed.Attempt, later.ID)
	}
	await(h, ev.completed, "the scheduled task to complete")

	held := h.submit(s3task.CreateParams{Name: "held", RunAt: time.Now().Add(time.Hour)}, "x\n")
	none(t, ev.claimed, "a start of the task held for an hour")
	if _, err := h.store.Schedule(h.ctx, held.ID, time.Time{}); err != nil {
		t.Fatalf("Schedule(now): %v", err)
	}
	if got := await(h, ev.claimed, "the held task to start once scheduled now"); got.ID != held.ID {
		t.Errorf("started %s, want the held task %s", got.ID, held.ID)
	}
	await(h, ev.completed, "the held task to complete")
	h.waitFor("every marker to go", func() bool {
		return !h.hasMarker(later.ID) && !h.hasMarker(now.ID) && !h.hasMarker(held.ID)
	})
}
