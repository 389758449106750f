package s3task_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/s3tasktest"
)

// TestTaskSilent: a running task's silence is the time since its record's
// last write, overdue once it reaches two of the heartbeat intervals its
// claim recorded; for a record without one, once it is longer than half
// the lease that write granted (heartbeats come at least every third of
// it).
func TestTaskSilent(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	running := func(lease time.Duration) *s3task.Task {
		return &s3task.Task{Status: s3task.StatusRunning, UpdatedAt: at, LeaseExpiresAt: at.Add(lease)}
	}
	// beating is a task whose attempt 3, held by w1, was claimed by a
	// worker that heartbeats every 2 s, on a one-minute lease; edit
	// changes its latest entry.
	beating := func(edit func(t *s3task.Task, a *s3task.Attempt)) *s3task.Task {
		t := &s3task.Task{Status: s3task.StatusRunning, Attempt: 3, WorkerID: "w1", UpdatedAt: at, LeaseExpiresAt: at.Add(time.Minute),
			History: []s3task.Attempt{
				{Number: 2, WorkerID: "w0", Outcome: s3task.OutcomeFailed, HeartbeatInterval: time.Hour},
				{Number: 3, WorkerID: "w1", StartedAt: at.Add(-time.Minute), Outcome: s3task.OutcomeRunning, HeartbeatInterval: 2 * time.Second},
			}}
		edit(t, &t.History[1])
		return t
	}
	as := func(*s3task.Task, *s3task.Attempt) {}
	tests := []struct {
		name        string
		task        *s3task.Task
		now         time.Time
		wantSilence time.Duration
		wantOverdue bool
	}{
		{"just renewed", running(10 * time.Minute), at, 0, false},
		{"one heartbeat interval", running(10 * time.Minute), at.Add(200 * time.Second), 200 * time.Second, false},
		{"half the lease", running(10 * time.Minute), at.Add(5 * time.Minute), 5 * time.Minute, false},
		{"past half the lease", running(10 * time.Minute), at.Add(5*time.Minute + time.Second), 5*time.Minute + time.Second, true},
		{"lease over", running(time.Minute), at.Add(2 * time.Minute), 2 * time.Minute, true},
		{"clock behind the write", running(time.Minute), at.Add(-time.Second), 0, false},
		{"lease already out at the write", running(0), at.Add(time.Second), time.Second, true},
		{"queued", &s3task.Task{Status: s3task.StatusQueued, UpdatedAt: at}, at.Add(time.Hour), 0, false},
		{"completed", &s3task.Task{Status: s3task.StatusCompleted, UpdatedAt: at}, at.Add(time.Hour), 0, false},
		{"running, no audit time", &s3task.Task{Status: s3task.StatusRunning}, at, 0, false},
		{"heartbeats: one interval", beating(as), at.Add(2 * time.Second), 2 * time.Second, false},
		{"heartbeats: just under two", beating(as), at.Add(4*time.Second - time.Millisecond), 4*time.Second - time.Millisecond, false},
		{"heartbeats: two intervals", beating(as), at.Add(4 * time.Second), 4 * time.Second, true},
		{"heartbeats: long past", beating(as), at.Add(time.Hour), time.Hour, true},
		{"heartbeats: the entry is another worker's", beating(func(_ *s3task.Task, a *s3task.Attempt) { a.WorkerID = "w9" }), at.Add(10 * time.Second), 10 * time.Second, false},
		{"heartbeats: the entry is of an earlier attempt", beating(func(t *s3task.Task, _ *s3task.Attempt) { t.Attempt = 4 }), at.Add(10 * time.Second), 10 * time.Second, false},
		{"heartbeats: the entry is closed", beating(func(_ *s3task.Task, a *s3task.Attempt) { a.Outcome = s3task.OutcomeFailed }), at.Add(10 * time.Second), 10 * time.Second, false},
		{"heartbeats: unknown, so half the lease", beating(func(_ *s3task.Task, a *s3task.Attempt) { a.HeartbeatInterval = 0 }), at.Add(31 * time.Second), 31 * time.Second, true},
		{"heartbeats: completed", beating(func(t *s3task.Task, _ *s3task.Attempt) { t.Status = s3task.StatusCompleted }), at.Add(time.Hour), 0, false},
	}
	for _, tt := range tests {
		silence, overdue := tt.task.Silent(tt.now)
		if silence != tt.wantSilence || overdue != tt.wantOverdue {
			t.Errorf("%s: Silent = %s, %v; want %s, %v", tt.name, silence, overdue, tt.wantSilence, tt.wantOverdue)
		}
	}
	if got := running(time.Minute).RecoversAt(5 * time.Second); !got.Equal(at.Add(time.Minute + 5*time.Second)) {
		t.Errorf("RecoversAt = %s", got)
	}
	if got := (&s3task.Task{Status: s3task.StatusQueued}).RecoversAt(time.Second); !got.IsZero() {
		t.Errorf("RecoversAt of a queued task = %s, want zero", got)
	}
}

// TestSilentWorkerIsOverdue: a worker whose handler is stuck keeps its
// record fresh; one that stopped writing (here: its heartbeats cannot reach
// S3 any more, as the server's clock moves on) becomes overdue.
func TestSilentWorkerIsOverdue(t *testing.T) {
	t.Parallel()
	srv := s3tasktest.NewS3(t)
	store := srv.NewStore(t, nil)
	ctx := context.Background()
	task := s3tasktest.Submit(t, store, s3task.CreateParams{Name: "stuck"}, []byte("x"))
	started := make(chan struct{})
	release := make(chan struct{})
	done := make(chan struct{})
	w, err := s3task.NewWorker(store, s3task.HandlerFunc(func(ctx context.Context, j *s3task.Job) error {
		close(started)
		<-release
		return nil
	}), &s3task.WorkerOptions{LeaseDuration: time.Hour, ReconcileInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	var runErr error
	go func() { defer close(done); _, runErr = w.RunTask(ctx, task.ID) }()
	select {
	case <-started:
	case <-done:
		t.Fatalf("RunTask returned before the handler started: %v", runErr)
	}
	got, err := store.Get(ctx, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, overdue := got.Silent(srv.Now()); overdue {
		t.Errorf("freshly claimed task is overdue")
	}
	// Forty minutes of silence on a one-hour lease (heartbeats every 20).
	if _, overdue := got.Silent(srv.Now().Add(40 * time.Minute)); !overdue {
		t.Errorf("task silent for 40 of its 60 minutes is not overdue")
	}
	close(release)
	<-done
}

// TestReconcileAbandonsUnsentTasks: a created task whose input never came
// is abandoned by Reconcile once it is older than AbandonCreatedAfter, with
// a reason; a younger one, a submitted one and any with the option
// negative are left alone; Stats counts them first.
func TestReconcileAbandonsUnsentTasks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := s3tasktest.NewS3(t)
	store := srv.NewStore(t, &s3task.StoreOptions{AbandonCreatedAfter: 2 * time.Hour})
	never := srv.NewStore(t, &s3task.StoreOptions{AbandonCreatedAfter: -1})

	old, err := store.Create(ctx, s3task.CreateParams{Name: "never uploaded"})
	if err != nil {
		t.Fatal(err)
	}
	sent := s3tasktest.Submit(t, store, s3task.CreateParams{Name: "submitted"}, []byte("x"))
	srv.Advance(90 * time.Minute)
	_, _ = store.Get(ctx, old.ID) // the store learns the server's clock from its answers
	young, err := store.Create(ctx, s3task.CreateParams{Name: "young"})
	if err != nil {
		t.Fatal(err)
	}
	srv.Advance(31 * time.Minute)
	_, _ = store.Get(ctx, old.ID)

	st, err := store.Stats(ctx, s3task.StatsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st.AwaitingInput != 2 || st.AwaitingInputExpired != 1 {
		t.Errorf("Stats: AwaitingInput %d, AwaitingInputExpired %d; want 2, 1", st.AwaitingInput, st.AwaitingInputExpired)
	}

	if rep, err := never.Reconcile(ctx, s3task.ReconcileOptions{}); err != nil || len(rep.Abandoned) != 0 {
		t.Fatalf("Reconcile with AbandonCreatedAfter < 0: %+v, %v", rep, err)
	}
	dry, err := store.Reconcile(ctx, s3task.ReconcileOptions{DryRun: true})
	if err != nil || len(dry.Abandoned) != 1 || dry.Abandoned[0] != old.ID {
		t.Fatalf("dry run: %+v, %v", dry, err)
	}
	if got, _ := store.Get(ctx, old.ID); got.Status != s3task.StatusCreated {
		t.Fatalf("dry run changed the task: %s", got.Status)
	}
	rep, err := store.Reconcile(ctx, s3task.ReconcileOptions{})
	if err != nil || len(rep.Abandoned) != 1 || rep.Abandoned[0] != old.ID {
		t.Fatalf("Reconcile: %+v, %v", rep, err)
	}
	got, err := store.Get(ctx, old.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != s3task.StatusAbandoned || got.CancelReason != "no input submitted within 2h" {
		t.Errorf("old task: %s, reason %q", got.Status, got.CancelReason)
	}
	for _, id := range []string{young.ID, sent.ID} {
		if got, _ := store.Get(ctx, id); got.Status == s3task.StatusAbandoned {
			t.Errorf("task %s (%s) abandoned", id, got.Name)
		}
	}
	// An upload can no longer be issued for it.
	if _, err := store.PresignUpload(ctx, old.ID, time.Minute); err == nil {
		t.Errorf("PresignUpload of an abandoned task succeeded")
	}
	if rep, err := store.Reconcile(ctx, s3task.ReconcileOptions{}); err != nil || len(rep.Abandoned) != 0 {
		t.Errorf("second Reconcile: %+v, %v", rep, err)
	}
	st, err = store.Stats(ctx, s3task.StatsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st.AwaitingInput != 1 || st.AwaitingInputExpired != 0 {
		t.Errorf("Stats after: AwaitingInput %d, AwaitingInputExpired %d; want 1, 0", st.AwaitingInput, st.AwaitingInputExpired)
	}
}

// TestReconcilerAbandonsUnsentTasks: the fleet's reconciler abandons a
// created task that came of age long after its recent walk passed it, and
// delivers the OnTerminal notice.
func TestReconcilerAbandonsUnsentTasks(t *testing.T) {
	bubble(t, func(t *testing.T) {
		ctx := context.Background()
		srv := s3tasktest.NewS3(t)
		notified := make(chan *s3task.Task, 4)
		store := srv.NewStore(t, &s3task.StoreOptions{
			AbandonCreatedAfter: time.Hour,
			OnTerminal:          func(_ context.Context, t *s3task.Task) error { notified <- t; return nil },
		})
		task, err := store.Create(ctx, s3task.CreateParams{Name: "forgotten"})
		if err != nil {
			t.Fatal(err)
		}
		// Past the cutoff, and within ReconcileWindow (a minute) of it, as the
		// sweep of a first turn needs: a task left while no worker ran is met
		// only there.
		srv.Advance(60*time.Minute + 30*time.Second)
		reports := make(chan *s3task.ReconcileReport, 16)
		w, err := s3task.NewWorker(store, s3task.HandlerFunc(func(context.Context, *s3task.Job) error { return nil }), &s3task.WorkerOptions{
			PollInterval: 10 * time.Millisecond, ReconcileInterval: 20 * time.Millisecond, ReconcileWindow: time.Minute,
			Hooks: s3task.Hooks{OnReconcile: func(r *s3task.ReconcileReport) {
				select {
				case reports <- r:
				default:
				}
			}},
		})
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = w.Run(rctx) }()
		defer func() { cancel(); <-done }()

		deadline := time.After(10 * time.Second)
		for abandoned := false; !abandoned; {
			select {
			case r := <-reports:
				abandoned = len(r.Abandoned) == 1 && r.Abandoned[0] == task.ID
			case <-deadline:
				t.Fatal("the reconciler did not abandon the task")
			}
		}
		got, err := store.Get(ctx, task.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != s3task.StatusAbandoned || !strings.Contains(got.CancelReason, "no input submitted within 1h") {
			t.Errorf("task: %s, reason %q", got.Status, got.CancelReason)
		}
		select {
		case n := <-notified:
			if n.ID != task.ID || n.Status != s3task.StatusAbandoned {
				t.Errorf("notice for %s (%s)", n.ID, n.Status)
			}
		case <-time.After(10 * time.Second):
			t.Error("no OnTerminal notice")
		}
	})
}
