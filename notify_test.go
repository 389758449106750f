package s3task_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/s3task/s3task"
)

// notices records the OnTerminal calls of one or more stores.
type notices struct {
	mu    sync.Mutex
	calls map[string][]s3task.Status // task ID -> statuses notified, in order
	fail  bool                       // answer every call with an error
	ch    chan string                // a task ID per successful call
}

func newNotices(fail bool) *notices {
	return &notices{calls: map[string][]s3task.Status{}, fail: fail, ch: make(chan string, 64)}
}

func (n *notices) hook(ctx context.Context, t *s3task.Task) error {
	n.mu.Lock()
	n.calls[t.ID] = append(n.calls[t.ID], t.Status)
	n.mu.Unlock()
	if n.fail {
		return errors.New("webhook down")
	}
	n.ch <- t.ID
	return nil
}

func (n *notices) of(id string) []s3task.Status {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]s3task.Status(nil), n.calls[id]...)
}

// wantOne fails t unless task id was notified once, as status.
func (n *notices) wantOne(t *testing.T, id string, status s3task.Status) {
	t.Helper()
	if got := n.of(id); len(got) != 1 || got[0] != status {
		t.Errorf("notices of %s: %v, want one for %s", id, got, status)
	}
}

// notifying returns a Store whose OnTerminal hook is n's.
func (e *env) notifying(t *testing.T, n *notices) *s3task.Store {
	t.Helper()
	return e.newStore(t, &s3task.StoreOptions{OnTerminal: n.hook})
}

// awaitDelivered waits for n's notice of task id, then for the store to
// record it: notify_pending cleared and the marker removed.
func awaitDelivered(t *testing.T, e *env, n *notices, id string) {
	t.Helper()
	if got := await(t, n.ch, "the notice of "+id); got != id {
		t.Fatalf("notice for %s, want %s", got, id)
	}
	waitUntil(t, "the notice recorded and the marker removed", func() bool {
		return !e.stored(t, id).NotifyPending && !e.hasMarker(id)
	})
}

// completeUndelivered submits a task and has it completed by a worker whose
// hook fails, as if its process died before delivering the notice. The
// worker is stopped when it returns.
func completeUndelivered(t *testing.T, e *env, name string) *s3task.Task {
	t.Helper()
	broken := newNotices(true)
	completed := make(chan *s3task.Task, 1)
	stop := runWorker(t, e.notifying(t, broken), succeed,
		quickWorker("broken-hook", s3task.Hooks{OnComplete: func(t *s3task.Task) { offer(completed, t) }}))
	task := e.submit(t, name)
	await(t, completed, "the task to complete")
	waitUntil(t, "the failed delivery", func() bool { return len(broken.of(task.ID)) > 0 })
	stop()
	return task
}

// TestNoticeOnComplete: the worker that completes a task calls OnTerminal
// once, then clears the notice and the marker.
func TestNoticeOnComplete(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	n := newNotices(false)
	runWorker(t, e.notifying(t, n), succeed, quickWorker("notifier", s3task.Hooks{}))
	task := e.submit(t, "notify me")

	awaitDelivered(t, e, n, task.ID)
	n.wantOne(t, task.ID, s3task.StatusCompleted)
}

// TestNoticeDeliveredByAnotherWorker: a worker whose hook fails (as if its
// process died before delivering) leaves the notice pending and the marker in
// place; the marker keeps the due time of the claim (the lease's end plus
// the clock margin), when other workers may take over. Once it falls due, a
// worker without the hook leaves the notice and marker alone too; a worker
// with a working hook delivers it when it next lists the marker.
func TestNoticeDeliveredByAnotherWorker(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	task := completeUndelivered(t, e, "notice goes astray")

	got := e.stored(t, task.ID)
	if got.Status != s3task.StatusCompleted || !got.NotifyPending || !e.hasMarker(task.ID) {
		t.Fatalf("after a failed delivery: status %s, notify_pending %v, marker %v; want completed, true, true",
			got.Status, got.NotifyPending, e.hasMarker(task.ID))
	}
	if key, want := e.markerKey(task.ID), e.store.MarkerKey(&got.Task); key != want {
		t.Errorf("marker of the task with its notice pending: %s, want %s (due_at %s)", key, want, got.DueAt)
	}
	// The marker falls due when the lease would have run out: move the
	// server's clock there rather than wait.
	e.srv.Advance(got.DueAt.Sub(e.srv.Now()) + 2*time.Second)

	// A worker without the hook visits and leaves the notice alone.
	polled := make(chan s3task.PollStats, 16)
	opts := quickWorker("no-hook", s3task.Hooks{OnPoll: func(p s3task.PollStats) { offer(polled, p) }})
	opts.MaxPollInterval = 20 * time.Millisecond
	var requests recorder
	stop := runWorker(t, e.newStore(t, nil, requests.wrap), succeed, opts)
	waitUntil(t, "the hook-less worker to visit the due marker", func() bool {
		return requests.index("GET "+e.recordKey(task.ID)) >= 0
	})
	for len(polled) > 0 {
		<-polled
	}
	for range 3 { // polls after the visit: time to act on it
		await(t, polled, "a poll of the hook-less worker")
	}
	stop()
	if after := e.get(t, task.ID); after.Revision != got.Revision || !e.hasMarker(task.ID) {
		t.Fatalf("a worker without the hook changed the record (revision %s -> %s) or removed the marker", got.Revision, after.Revision)
	}

	good := newNotices(false)
	opts = quickWorker("good-hook", s3task.Hooks{})
	opts.MaxPollInterval = 20 * time.Millisecond
	runWorker(t, e.notifying(t, good), succeed, opts)
	awaitDelivered(t, e, good, task.ID)
}

// TestNoticeOnCancelAndFinalFailure: Cancel through a Store with the hook
// notifies at once; a final failure notifies from the worker; a retry in
// between does not leave a notice for the failure behind.
func TestNoticeOnCancelAndFinalFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	n := newNotices(false)

	queued := e.submit(t, "cancel me")
	if _, err := e.notifying(t, n).Cancel(e.ctx, queued.ID, "not needed"); err != nil {
		t.Fatal(err)
	}
	n.wantOne(t, queued.ID, s3task.StatusAbandoned)
	if rec := e.stored(t, queued.ID); rec.NotifyPending || e.hasMarker(queued.ID) {
		t.Errorf("after Cancel: notify_pending %v, marker %v; want both cleared", rec.NotifyPending, e.hasMarker(queued.ID))
	}

	runWorker(t, e.notifying(t, n), s3task.HandlerFunc(func(context.Context, *s3task.Job) error {
		return s3task.Permanent(errors.New("bad file"))
	}), quickWorker("failer", s3task.Hooks{}))
	bad := e.submit(t, "fails")
	for await(t, n.ch, "the failure notice") != bad.ID {
		// the Cancel's notice may come first
	}
	n.wantOne(t, bad.ID, s3task.StatusFailed)
}

// TestPurgeAndPendingNotices: a finished task whose notice never went out
// (the hook keeps failing) is kept by Purge, and purged, notice and all,
// with DropPendingNotices.
func TestPurgeAndPendingNotices(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	task := completeUndelivered(t, e, "never notified")
	e.srv.Advance(time.Minute) // Purge leaves a task until a minute after its last change

	cutoff := time.Now().Add(time.Hour)
	r, err := e.store.Purge(e.ctx, cutoff, s3task.PurgeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Purged) != 0 || r.Kept != 1 || !e.stored(t, task.ID).NotifyPending {
		t.Fatalf("Purge with a notice pending: purged %v, kept %d; want the task kept, notice pending", r.Purged, r.Kept)
	}
	r, err = e.store.Purge(e.ctx, cutoff, s3task.PurgeOptions{DropPendingNotices: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Purged) != 1 || r.Purged[0] != task.ID {
		t.Fatalf("Purge with DropPendingNotices: purged %v, want [%s]", r.Purged, task.ID)
	}
	if _, err := e.store.Get(e.ctx, task.ID); !errors.Is(err, s3task.ErrNotFound) || e.hasMarker(task.ID) {
		t.Errorf("after the purge: Get = %v, marker %v; want ErrNotFound and no marker", err, e.hasMarker(task.ID))
	}
}

// TestNoticeOfTaskCancelledBeforeSubmit: a created task has no marker, so
// a Store with the hook writes one before cancelling it; when its own
// delivery fails, a worker with a working hook delivers the notice at its
// next listing (it runs no reconcile: the marker must bring it).
func TestNoticeOfTaskCancelledBeforeSubmit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	broken := newNotices(true)
	st := e.notifying(t, broken)
	task, err := st.Create(e.ctx, s3task.CreateParams{Name: "never submitted"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Cancel(e.ctx, task.ID, "changed my mind"); err != nil {
		t.Fatal(err)
	}
	if got := broken.of(task.ID); len(got) != 1 || !e.stored(t, task.ID).NotifyPending || !e.hasMarker(task.ID) {
		t.Fatalf("after a failed notice: calls %v, notify_pending %v, marker %v; want one call, pending, a marker",
			got, e.stored(t, task.ID).NotifyPending, e.hasMarker(task.ID))
	}

	good := newNotices(false)
	opts := quickWorker("good-hook", s3task.Hooks{})
	opts.MaxPollInterval = 20 * time.Millisecond
	runWorker(t, e.notifying(t, good), succeed, opts)
	awaitDelivered(t, e, good, task.ID)
}
