package s3task_test

import (
	"context"
	"errors"
	"slices"
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

// TestNoticeOnComplete: the worker that completes a task calls OnTerminal
// once, then clears the notice and the marker.
func TestNoticeOnComplete(t *testing.T) {
	t.Parallel()
	e := setupWorker(t)
	n := newNotices(false)
	ev := newHookEvents()
	store := e.newStore(t, &s3task.StoreOptions{OnTerminal: n.hook})
	startWorker(t, store, s3task.HandlerFunc(func(context.Context, *s3task.Job) error { return nil }), workerOptions("notifier", ev.hooks()))
	task := e.submit(t, s3task.CreateParams{Name: "notify me"}, "x\n")

	if id := awaitSignal(t, n.ch, "the notice"); id != task.ID {
		t.Fatalf("notice for %s, want %s", id, task.ID)
	}
	waitForCondition(t, "the notice to be recorded and the marker removed", func() bool {
		got := e.get(t, task.ID)
		return !got.NotifyPending && !e.hasMarker(t, task.ID)
	})
	if got := n.of(task.ID); len(got) != 1 || got[0] != s3task.StatusCompleted {
		t.Errorf("notices %v, want one for completed", got)
	}
}

// TestNoticeDeliveredByAnotherWorker: a worker whose hook fails (as if its
// process died before delivering) leaves the notice pending and the marker in
// place; the marker keeps the due time of the claim (the lease's end plus
// the clock margin), when other workers may take over. Once it falls due, a
// worker without the hook leaves the notice and marker alone too; a worker
// with a working hook delivers it when it next lists the marker.
func TestNoticeDeliveredByAnotherWorker(t *testing.T) {
	t.Parallel()
	e := setupWorker(t)
	broken := newNotices(true)
	ev := newHookEvents()
	a := startWorker(t, e.newStore(t, &s3task.StoreOptions{OnTerminal: broken.hook}),
		s3task.HandlerFunc(func(context.Context, *s3task.Job) error { return nil }), workerOptions("broken-hook", ev.hooks()))
	task := e.submit(t, s3task.CreateParams{Name: "notice goes astray"}, "x\n")
	awaitSignal(t, ev.completed, "the task to complete")
	waitForCondition(t, "the failed delivery", func() bool { return len(broken.of(task.ID)) > 0 })
	a.stop()

	got := e.get(t, task.ID)
	if got.Status != s3task.StatusCompleted || !got.NotifyPending || !e.hasMarker(t, task.ID) {
		t.Fatalf("after a failed delivery: status %s, notify_pending %v, marker %v; want completed, true, true",
			got.Status, got.NotifyPending, e.hasMarker(t, task.ID))
	}
	if key, want := e.markerKey(task.ID), e.store.MarkerKey(got); key != want {
		t.Errorf("marker of the task with its notice pending: %s, want %s (due_at %s)", key, want, got.DueAt)
	}
	// The marker falls due when the lease would have run out: move the
	// server's clock there rather than wait.
	e.srv.Advance(got.DueAt.Sub(e.srv.Now()) + 2*time.Second)

	// A worker without the hook visits and leaves the notice alone.
	var polled = make(chan s3task.PollStats, 16)
	opts := workerOptions("no-hook", s3task.Hooks{OnPoll: func(p s3task.PollStats) { offerHook(polled, p) }})
	opts.MaxPollInterval = 20 * time.Millisecond
	var blog requestLog
	b := startWorker(t, e.newStore(t, nil, blog.wrap), s3task.HandlerFunc(func(context.Context, *s3task.Job) error { return nil }), opts)
	recordPath := "/" + e.srv.Bucket + "/" + e.recordKey(task.ID)
	waitForCondition(t, "the hook-less worker to visit the due marker", func() bool {
		return slices.Contains(blog.since(0), "GET "+recordPath)
	})
	for len(polled) > 0 {
		<-polled
	}
	for range 3 { // polls after the visit: time to act on it
		awaitSignal(t, polled, "a poll of the hook-less worker")
	}
	b.stop()
	if after := e.get(t, task.ID); after.Revision != got.Revision || !e.hasMarker(t, task.ID) {
		t.Fatalf("a worker without the hook changed the record (revision %s -> %s) or removed the marker", got.Revision, after.Revision)
	}

	good := newNotices(false)
	opts = workerOptions("good-hook", s3task.Hooks{})
	opts.MaxPollInterval = 20 * time.Millisecond
	startWorker(t, e.newStore(t, &s3task.StoreOptions{OnTerminal: good.hook}), s3task.HandlerFunc(func(context.Context, *s3task.Job) error { return nil }), opts)
	if id := awaitSignal(t, good.ch, "the notice from the second worker"); id != task.ID {
		t.Fatalf("notice for %s, want %s", id, task.ID)
	}
	waitForCondition(t, "the notice recorded and the marker removed", func() bool {
		return !e.get(t, task.ID).NotifyPending && !e.hasMarker(t, task.ID)
	})
}

// TestNoticeOnCancelAndFinalFailure: Cancel through a Store with the hook
// notifies at once; a final failure notifies from the worker; a retry in
// between does not leave a notice for the failure behind.
func TestNoticeOnCancelAndFinalFailure(t *testing.T) {
	t.Parallel()
	e := setupWorker(t)
	n := newNotices(false)
	st := e.newStore(t, &s3task.StoreOptions{OnTerminal: n.hook})

	queued := e.submit(t, s3task.CreateParams{Name: "cancel me"}, "x\n")
	if _, err := st.Cancel(e.ctx, queued.ID, "not needed"); err != nil {
		t.Fatal(err)
	}
	if got := n.of(queued.ID); len(got) != 1 || got[0] != s3task.StatusAbandoned {
		t.Errorf("notices after Cancel: %v, want one for abandoned", got)
	}
	if rec := e.get(t, queued.ID); rec.NotifyPending || e.hasMarker(t, queued.ID) {
		t.Errorf("after Cancel: notify_pending %v, marker %v; want both cleared", rec.NotifyPending, e.hasMarker(t, queued.ID))
	}

	ev := newHookEvents()
	startWorker(t, e.newStore(t, &s3task.StoreOptions{OnTerminal: n.hook}), s3task.HandlerFunc(func(context.Context, *s3task.Job) error {
		return s3task.Permanent(errors.New("bad file"))
	}), workerOptions("failer", ev.hooks()))
	bad := e.submit(t, s3task.CreateParams{Name: "fails"}, "x\n")
	for awaitSignal(t, n.ch, "the failure notice") != bad.ID {
		// the Cancel's notice may come first
	}
	if got := n.of(bad.ID); len(got) != 1 || got[0] != s3task.StatusFailed {
		t.Errorf("notices for the failed task: %v, want one for failed", got)
	}
}

// TestPurgeAndPendingNotices: a finished task whose notice never went out
// (the hook keeps failing) is kept by Purge, and purged, notice and all,
// with DropPendingNotices.
func TestPurgeAndPendingNotices(t *testing.T) {
	t.Parallel()
	e := setupWorker(t)
	broken := newNotices(true)
	ev := newHookEvents()
	a := startWorker(t, e.newStore(t, &s3task.StoreOptions{OnTerminal: broken.hook}),
		s3task.HandlerFunc(func(context.Context, *s3task.Job) error { return nil }), workerOptions("broken-hook", ev.hooks()))
	task := e.submit(t, s3task.CreateParams{Name: "never notified"}, "x\n")
	awaitSignal(t, ev.completed, "the task to complete")
	waitForCondition(t, "the failed delivery", func() bool { return len(broken.of(task.ID)) > 0 })
	a.stop()

	st := e.newStore(t, nil)
	cutoff := time.Now().Add(time.Hour)
	r, err := st.Purge(e.ctx, cutoff, s3task.PurgeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Purged) != 0 || r.Kept != 1 || !e.get(t, task.ID).NotifyPending {
		t.Fatalf("Purge with a notice pending: purged %v, kept %d; want the task kept, notice pending", r.Purged, r.Kept)
	}
	r, err = st.Purge(e.ctx, cutoff, s3task.PurgeOptions{DropPendingNotices: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Purged) != 1 || r.Purged[0] != task.ID {
		t.Fatalf("Purge with DropPendingNotices: purged %v, want [%s]", r.Purged, task.ID)
	}
	if _, err := st.Get(e.ctx, task.ID); !errors.Is(err, s3task.ErrNotFound) || e.hasMarker(t, task.ID) {
		t.Errorf("after the purge: Get = %v, marker %v; want ErrNotFound and no marker", err, e.hasMarker(t, task.ID))
	}
}

// TestNoticeOfTaskCancelledBeforeSubmit: a created task has no marker, so
// a Store with the hook writes one before cancelling it; when its own
// delivery fails, a worker with a working hook delivers the notice at its
// next listing instead of waiting for a reconcile.
func TestNoticeOfTaskCancelledBeforeSubmit(t *testing.T) {
	t.Parallel()
	e := setupWorker(t)
	broken := newNotices(true)
	st := e.newStore(t, &s3task.StoreOptions{OnTerminal: broken.hook})
	task, err := st.Create(e.ctx, s3task.CreateParams{Name: "never submitted"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Cancel(e.ctx, task.ID, "changed my mind"); err != nil {
		t.Fatal(err)
	}
	if got := broken.of(task.ID); len(got) != 1 || !e.get(t, task.ID).NotifyPending || !e.hasMarker(t, task.ID) {
		t.Fatalf("after a failed notice: calls %v, notify_pending %v, marker %v; want one call, pending, a marker",
			got, e.get(t, task.ID).NotifyPending, e.hasMarker(t, task.ID))
	}

	good := newNotices(false)
	opts := workerOptions("good-hook", s3task.Hooks{})
	opts.MaxPollInterval = 20 * time.Millisecond
	opts.ReconcileInterval = -1 // the marker, not a reconcile, must bring the worker
	startWorker(t, e.newStore(t, &s3task.StoreOptions{OnTerminal: good.hook}), s3task.HandlerFunc(func(context.Context, *s3task.Job) error { return nil }), opts)
	if id := awaitSignal(t, good.ch, "the notice from the worker"); id != task.ID {
		t.Fatalf("notice for %s, want %s", id, task.ID)
	}
	waitForCondition(t, "the notice recorded and the marker removed", func() bool {
		return !e.get(t, task.ID).NotifyPending && !e.hasMarker(t, task.ID)
	})
}
