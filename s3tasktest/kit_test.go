package s3tasktest_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/s3tasktest"
)

// Advance by exactly a task's RetryAfter, or exactly to its RunAt, makes it
// due; a millisecond less does not, and DrainLeft says why. The test runs
// in a synctest bubble, where the clock stands still while it works, so
// that "a millisecond less" is exact.
func TestAdvanceByExactlyTheWait(t *testing.T) {
	synctest.Test(t, testAdvanceByExactlyTheWait)
}

func testAdvanceByExactlyTheWait(t *testing.T) {
	time.Sleep(400 * time.Millisecond) // off the second, where Date headers would tell the time exactly
	s3 := s3tasktest.NewS3(t)
	store := s3.NewStore(t, nil)
	ctx := context.Background()
	busy := s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		if job.Task.Attempt == 1 && job.Task.Name == "retry" {
			return s3task.RetryAfter(errors.New("busy"), 90*time.Second)
		}
		return nil
	})
	retry := s3tasktest.Submit(t, store, s3task.CreateParams{Name: "retry"}, []byte("x"))
	if ran := s3tasktest.Drain(t, store, busy); len(ran) != 1 || ran[0].Task.Status != s3task.StatusFailed {
		t.Fatalf("first drain: %d results, want the failed first attempt", len(ran))
	}
	failed, err := store.Get(ctx, retry.ID)
	if err != nil {
		t.Fatal(err)
	}
	s3tasktest.Submit(t, store, s3task.CreateParams{Name: "scheduled", RunAt: failed.RetryAt}, []byte("x"))

	s3.Advance(failed.RetryAt.Sub(s3.Now()) - time.Millisecond)
	ran, left := s3tasktest.DrainLeft(t, store, busy)
	if len(ran) != 0 || len(left) != 2 {
		t.Fatalf("a millisecond early: ran %d, left %d; want 0 and 2", len(ran), len(left))
	}
	whys := left[0].Why + " | " + left[1].Why
	if !strings.Contains(whys, "retry due at") || !strings.Contains(whys, "scheduled for") || !strings.Contains(whys, "in 1ms") {
		t.Errorf("left because %q; want a retry and a scheduled start 1ms away", whys)
	}

	s3.Advance(time.Millisecond)
	ran, left = s3tasktest.DrainLeft(t, store, busy)
	if len(ran) != 2 || len(left) != 0 {
		t.Fatalf("at the due time: ran %d, left %d (%v); want both run", len(ran), len(left), left)
	}
	for _, res := range ran {
		if res.Task.Status != s3task.StatusCompleted {
			t.Errorf("task %s (%s): %s, want completed", res.Task.ID, res.Task.Name, res.Task.Status)
		}
	}
}

// DrainLeft names a task never submitted and one of a type the handler
// does not serve; Drain logs the same.
func TestDrainLeftSaysWhy(t *testing.T) {
	store := s3tasktest.NewStore(t, nil)
	ctx := context.Background()
	created, err := store.Create(ctx, s3task.CreateParams{Name: "forgotten"})
	if err != nil {
		t.Fatal(err)
	}
	unserved := s3tasktest.Submit(t, store, s3task.CreateParams{Type: "thumbnail"}, []byte("x"))
	served := s3tasktest.Submit(t, store, s3task.CreateParams{Type: "upper"}, []byte("x"))
	ran, left := s3tasktest.DrainLeft(t, store, upper())
	if len(ran) != 1 || ran[0].Task.ID != served.ID {
		t.Fatalf("ran %d tasks, want only %s", len(ran), served.ID)
	}
	got := map[string]string{}
	for _, l := range left {
		got[l.Task.ID] = l.Why
	}
	if why := got[created.ID]; why != "created: never submitted" {
		t.Errorf("created task left because %q", why)
	}
	if why := got[unserved.ID]; !strings.Contains(why, `type "thumbnail" not served`) {
		t.Errorf("unserved task left because %q", why)
	}
	if len(got) != 2 {
		t.Errorf("left %d tasks, want 2: %v", len(got), got)
	}
}

// A task of a paused type is left behind with the reason, as one of a
// type the handler does not serve is, and not a failure of the test; it
// runs at the drain after Resume. A paused task whose retry is not yet
// due says both.
func TestDrainLeavesPausedTypes(t *testing.T) {
	s3 := s3tasktest.NewS3(t)
	store := s3.NewStore(t, nil)
	ctx := context.Background()
	var mux s3task.Mux
	if err := mux.HandleFunc("upper", func(ctx context.Context, job *s3task.Job) error {
		if job.Task.Name == "flaky" && job.Task.Attempt == 1 {
			return s3task.RetryAfter(errors.New("busy"), time.Minute)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	flaky := s3tasktest.Submit(t, store, s3task.CreateParams{Type: "upper", Name: "flaky"}, []byte("x"))
	if ran := s3tasktest.Drain(t, store, &mux); len(ran) != 1 || ran[0].Task.Status != s3task.StatusFailed {
		t.Fatalf("first drain ran %d tasks, want the flaky one failed", len(ran))
	}
	if err := store.Pause(ctx, "upper"); err != nil {
		t.Fatal(err)
	}
	queued := s3tasktest.Submit(t, store, s3task.CreateParams{Type: "upper", Name: "queued"}, []byte("x"))

	ran, left := s3tasktest.DrainLeft(t, store, &mux)
	if len(ran) != 0 || len(left) != 2 {
		t.Fatalf("paused: ran %d, left %d (%v); want 0 and 2", len(ran), len(left), left)
	}
	got := map[string]string{}
	for _, l := range left {
		got[l.Task.ID] = l.Why
	}
	const paused = `type "upper" paused (Store.Pause)`
	if why := got[queued.ID]; !strings.HasPrefix(why, paused) || strings.Contains(why, "; and") {
		t.Errorf("queued task left because %q; want only the pause", why)
	}
	if why := got[flaky.ID]; !strings.HasPrefix(why, paused) || !strings.Contains(why, "; and retry due at") {
		t.Errorf("retrying task left because %q; want the pause and the retry", why)
	}

	// Due now, still paused: Drain leaves it and does not fail the test.
	s3.Advance(time.Minute)
	if ran := s3tasktest.Drain(t, store, &mux); len(ran) != 0 {
		t.Fatalf("paused, retry due: ran %d tasks, want none", len(ran))
	}
	_, left = s3tasktest.DrainLeft(t, store, &mux)
	for _, l := range left {
		if l.Why != paused+": no worker claims it until Store.Resume" {
			t.Errorf("task %s (%s) left because %q; want the pause alone", l.Task.ID, l.Task.Name, l.Why)
		}
	}

	if err := store.Resume(ctx, "upper"); err != nil {
		t.Fatal(err)
	}
	ran, left = s3tasktest.DrainLeft(t, store, &mux)
	if len(ran) != 2 || len(left) != 0 {
		t.Fatalf("resumed: ran %d, left %d (%v); want both run", len(ran), len(left), left)
	}
	for _, res := range ran {
		if res.Task.Status != s3task.StatusCompleted {
			t.Errorf("task %s (%s): %s, want completed", res.Task.ID, res.Task.Name, res.Task.Status)
		}
	}
}

// The kit's HTTP client follows a Store's presigned URLs: an upload with
// its signed headers, and the download of the output.
func TestPresignedURLsThroughTheKit(t *testing.T) {
	s3 := s3tasktest.NewS3(t)
	store := s3.NewStore(t, &s3task.StoreOptions{InputContentType: "text/plain"})
	ctx := context.Background()
	task, up, err := store.CreateForUpload(ctx, s3task.CreateParams{Type: "upper"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if status, body := s3.Do(t, up.Put, []byte("shout")); status != http.StatusOK {
		t.Fatalf("presigned upload: %d %s", status, body)
	}
	if status, _ := s3.Do(t, up.Put, []byte("again")); status == http.StatusOK {
		t.Errorf("second presigned upload to the same input succeeded; the input is written once")
	}
	if _, err := store.Submit(ctx, task.ID); err != nil {
		t.Fatal(err)
	}
	if res := s3tasktest.Run(t, store, upper(), task.ID); res.Task.Status != s3task.StatusCompleted {
		t.Fatalf("run: %s (%v)", res.Task.Status, res.Err)
	}
	down, err := store.PresignDownload(ctx, task.ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if status, body := s3.Do(t, down, nil); status != http.StatusOK || string(body) != "SHOUT" {
		t.Errorf("presigned download: %d %q, want 200 SHOUT", status, body)
	}
}

type greetArgs struct {
	Name string `json:"name"`
}

func (greetArgs) TaskType() string { return "greet" }

type otherArgs struct{}

func (otherArgs) TaskType() string { return "other" }

// RequireCreated finds the one task of T's type and decodes its args;
// RequireNotCreated passes when there is none.
func TestRequireCreated(t *testing.T) {
	store := s3tasktest.NewStore(t, nil)
	ctx := context.Background()
	s3tasktest.RequireNotCreated[greetArgs](t, store)
	if _, err := store.Create(ctx, s3task.CreateParams{Args: greetArgs{Name: "Ada"}}); err != nil {
		t.Fatal(err)
	}
	got := s3tasktest.RequireCreated[greetArgs](t, store)
	if got.Args.Name != "Ada" || got.Task.Type != "greet" || got.Task.Status != s3task.StatusCreated {
		t.Errorf("RequireCreated = %+v, %s %s; want Ada's created greet task", got.Args, got.Task.Type, got.Task.Status)
	}
	s3tasktest.RequireNotCreated[otherArgs](t, store)
	if _, err := store.Create(ctx, s3task.CreateParams{Args: greetArgs{Name: "Grace"}}); err != nil {
		t.Fatal(err)
	}
	if all := s3tasktest.RequireCreatedMany[greetArgs](t, store); len(all) != 2 || all[0].Args.Name != "Grace" {
		t.Errorf("RequireCreatedMany: %d tasks, newest %+v; want 2, Grace's first", len(all), all[0].Args)
	}
}

// The assertions fail a test that does not meet them, and say why.
func TestRequireCreatedFails(t *testing.T) {
	store := s3tasktest.NewStore(t, nil)
	ctx := context.Background()
	if msg := fatalOf(func(tb testing.TB) { s3tasktest.RequireCreated[greetArgs](tb, store) }); !strings.Contains(msg, `no task of type "greet"`) {
		t.Errorf("RequireCreated on an empty store: %q", msg)
	}
	for _, name := range []string{"Ada", "Grace"} {
		if _, err := store.Create(ctx, s3task.CreateParams{Args: greetArgs{Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	if msg := fatalOf(func(tb testing.TB) { s3tasktest.RequireCreated[greetArgs](tb, store) }); !strings.Contains(msg, "exactly one") || !strings.Contains(msg, "found 2") {
		t.Errorf("RequireCreated with two: %q", msg)
	}
	if msg := fatalOf(func(tb testing.TB) { s3tasktest.RequireNotCreated[greetArgs](tb, store) }); !strings.Contains(msg, `want no task of type "greet"`) {
		t.Errorf("RequireNotCreated with two: %q", msg)
	}
}

// fatalOf runs f with a testing.TB that records its Fatalf and stops f
// there, as a test's would, and returns the message ("" if none).
func fatalOf(f func(testing.TB)) string {
	tb := &recordingTB{}
	var wg sync.WaitGroup
	wg.Go(func() { f(tb) })
	wg.Wait()
	return tb.msg
}

type recordingTB struct {
	testing.TB
	msg string
}

func (r *recordingTB) Helper() {}
func (r *recordingTB) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// MakePeriodicRun makes a periodic task's run as the lease holder would:
// once per period, found again by its key, with the declaration's Args,
// ready for Run.
func TestMakePeriodicRun(t *testing.T) {
	s3 := s3tasktest.NewS3(t)
	store := s3.NewStore(t, &s3task.StoreOptions{
		Files:    map[string]s3task.FileOptions{"greet": {NoInput: true}},
		Periodic: []s3task.Periodic{{Name: "nightly", Schedule: s3task.Daily(2, 0, time.UTC), Params: s3task.CreateParams{Args: greetArgs{Name: "night"}}}},
	})
	night := time.Date(2026, 12, 8, 3, 30, 0, 0, time.UTC)
	first := s3tasktest.MakePeriodicRun(t, store, "nightly", night)
	again := s3tasktest.MakePeriodicRun(t, store, "nightly", night.Add(time.Hour))
	got := s3tasktest.RequireCreated[greetArgs](t, store)
	if again.ID != first.ID || got.Task.ID != first.ID || got.Args.Name != "night" || got.Task.Status != s3task.StatusQueued {
		t.Errorf("two runs of one night: %s and %s; found %s %+v (%s); want one queued task with the declaration's Args", first.ID, again.ID, got.Task.ID, got.Args, got.Task.Status)
	}
	if want := "nightly@2026-12-08T02:00:00Z"; first.IdempotencyKey != want {
		t.Errorf("the run's key is %q, want %q", first.IdempotencyKey, want)
	}
	next := s3tasktest.MakePeriodicRun(t, store, "nightly", night.Add(24*time.Hour))
	if next.ID == first.ID || len(s3tasktest.RequireCreatedMany[greetArgs](t, store)) != 2 {
		t.Errorf("the next night's run is %s, the first %s: want a second task", next.ID, first.ID)
	}
	r := s3tasktest.Run(t, store, s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		if _, err := job.OpenInput(ctx); !errors.Is(err, s3task.ErrNoInput) {
			return fmt.Errorf("OpenInput of a run: %v, want ErrNoInput", err)
		}
		return nil
	}), first.ID)
	if r.Err != nil || r.Task.Status != s3task.StatusCompleted {
		t.Errorf("running the run: %v, %s", r.Err, r.Task.Status)
	}
	if msg := fatalOf(func(tb testing.TB) { s3tasktest.MakePeriodicRun(tb, store, "weekly", night) }); !strings.Contains(msg, `no periodic task is named "weekly"`) {
		t.Errorf("MakePeriodicRun of an undeclared name: %q", msg)
	}
}
