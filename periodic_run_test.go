package s3task

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/s3task/s3task/internal/s3test"
)

// periodicTasks returns the keys of the periodic runs in the bucket,
// sorted, and fails t on two tasks with one key.
func periodicTasks(t *testing.T, e *advEnv) []string {
	t.Helper()
	page, err := e.admin.List(context.Background(), ListOptions{Limit: MaxListLimit})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, task := range page.Tasks {
		if task.KeyScope != periodicKeyScope {
			continue
		}
		if slices.Contains(keys, task.IdempotencyKey) {
			t.Errorf("two tasks for the run %s", task.IdempotencyKey)
		}
		keys = append(keys, task.IdempotencyKey)
	}
	slices.Sort(keys)
	return keys
}

// wantRuns returns the run keys of p for every period that starts in
// [from, to].
func wantRuns(p Periodic, from, to time.Time) []string {
	var keys []string
	for at := p.Schedule.Prev(from); !at.After(to); at = p.Schedule.Next(at) {
		if !at.Before(from) {
			keys = append(keys, p.runKey(at))
		}
	}
	return keys
}

// Two workers, one periodic task every 5 minutes: the lease's holder makes
// one run per period, at its start. When the holder dies, the other takes
// the lease over once it runs out and makes the runs from then on, the
// ones missed within Within late; none twice.
func TestPeriodicRuns(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		p := Periodic{Name: "export", Schedule: Every(5 * time.Minute), Params: CreateParams{Type: "export"}}
		opts := &StoreOptions{Files: map[string]FileOptions{"export": {NoInput: true}}, Periodic: []Periodic{p}}
		start := time.Now()
		var cut s3test.Cutter
		first := e.run(e.store(opts, cut.Wrap), advSucceed, &WorkerOptions{ID: "first", ReconcileInterval: 2 * time.Minute})
		time.Sleep(time.Second)
		e.run(e.store(opts), advSucceed, &WorkerOptions{ID: "second", ReconcileInterval: 2 * time.Minute})

		time.Sleep(31 * time.Minute)
		if got, want := periodicTasks(t, e), wantRuns(p, start, time.Now()); !slices.Equal(got, want) {
			t.Fatalf("runs after 31 minutes: %v, want one per period %v", got, want)
		}

		cut.Cut() // the holder dies: nothing more of it reaches S3
		first.stop()
		time.Sleep(29 * time.Minute)
		if got, want := periodicTasks(t, e), wantRuns(p, start, time.Now()); !slices.Equal(got, want) {
			t.Errorf("runs after the holder died: %v, want one per period %v", got, want)
		}
	})
}

// A worker whose one slot a long handler holds still makes the periodic
// runs on time, and renews the reconciler's lease: its loop waits for the
// reconciler as well as for a free slot.
func TestPeriodicRunsWhileBusy(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		p := Periodic{Name: "tick", Schedule: Every(5 * time.Minute), Params: CreateParams{Type: "tick"}, Within: time.Minute}
		opts := &StoreOptions{Files: map[string]FileOptions{"tick": {NoInput: true}}, Periodic: []Periodic{p}}
		long := e.submit(CreateParams{Name: "long", Type: "long"})
		start := time.Now()
		e.run(e.store(opts), func(ctx context.Context, job *Job) error {
			if job.Task.Type == "long" {
				time.Sleep(40 * time.Minute)
			}
			return nil
		}, &WorkerOptions{ID: "busy", Concurrency: 1, ReconcileInterval: 2 * time.Minute, LeaseDuration: time.Hour})
		time.Sleep(31 * time.Minute)
		if r := e.record(long.ID); r.Status != StatusRunning {
			t.Fatalf("setup: the long task is %s, want running all along", r.Status)
		}
		if got, want := periodicTasks(t, e), wantRuns(p, start, time.Now()); !slices.Equal(got, want) {
			t.Errorf("runs while the only slot was busy: %v, want one per period %v", got, want)
		}
	})
}
