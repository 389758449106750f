package s3task

// Tests that pin promises of the documentation which were found broken:
// each runs in a testing/synctest bubble against the socketless in-memory
// S3 (see bubble_test.go), so that every timing is exact.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/s3task/s3task/internal/s3test"
)

// advKeyCounter counts, by key, the requests of one method whose key
// matches.
type advKeyCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

// wrap counts the requests of method whose object key satisfies match.
func (c *advKeyCounter) wrap(method string, match func(key string) bool) func(http.RoundTripper) http.RoundTripper {
	return advWrap(func(r *http.Request, next http.RoundTripper) (*http.Response, error) {
		key := strings.TrimPrefix(r.URL.Path, "/"+s3test.Bucket+"/")
		if r.Method == method && s3test.Op(r) != "LIST" && match(key) {
			c.mu.Lock()
			if c.counts == nil {
				c.counts = map[string]int{}
			}
			c.counts[key]++
			c.mu.Unlock()
		}
		return next.RoundTrip(r)
	})
}

// reset forgets the counts so far.
func (c *advKeyCounter) reset() {
	c.mu.Lock()
	c.counts = nil
	c.mu.Unlock()
}

// most returns the highest count of one key, and that key.
func (c *advKeyCounter) most() (int, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, which := 0, ""
	for key, v := range c.counts {
		if v > n {
			n, which = v, key
		}
	}
	return n, which
}

// total returns the count over every key.
func (c *advKeyCounter) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.counts {
		n += v
	}
	return n
}

// advMarkerKey returns the key of a marker of task id due at due.
func advMarkerKey(id string, due time.Time) string {
	return DefaultPrefix + "active/" + due.UTC().Format(markerTimeLayout) + "_" + id
}

// TestUnreadableRecordsDoNotHideDueTasks: the package promises that a
// corrupt record or one of a newer schema never stops a worker or hides
// other tasks. Such records keep their markers (no worker may rewrite or
// drop what it cannot read), and their markers sort first when they fell
// due long ago. A worker must look past them in the same poll, to the
// valid task behind them in the page it listed, and must not read them
// again at every poll: each is left alone for a while once read.
func TestUnreadableRecordsDoNotHideDueTasks(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		const unreadable = 40
		bad := map[string]bool{}
		for i := range unreadable {
			id := NewID()
			body := `{"schema_version": 1, "task_id": "` + id + `", "status": "que`
			if i%2 == 1 {
				body = `{"schema_version": 2, "task_id": "` + id + `", "status": "parked"}`
			}
			e.putRaw(e.recordKey(id), []byte(body))
			e.putRaw(advMarkerKey(id, time.Now().Add(-time.Hour+time.Duration(i)*time.Second)), nil)
			bad[e.recordKey(id)] = true
		}
		good := e.submit(CreateParams{Name: "behind the broken ones"})

		var gets advKeyCounter
		var mu sync.Mutex
		var firstList time.Time
		st := e.store(nil, gets.wrap(http.MethodGet, func(key string) bool { return bad[key] }),
			advWrap(func(r *http.Request, next http.RoundTripper) (*http.Response, error) {
				if s3test.Op(r) == "LIST" {
					mu.Lock()
					if firstList.IsZero() {
						firstList = time.Now()
					}
					mu.Unlock()
				}
				return next.RoundTrip(r)
			}))
		w := e.run(st, advSucceed, &WorkerOptions{ID: "w"})
		var start advStart
		select {
		case start = <-w.started:
		case <-time.After(3 * time.Hour):
			n, key := gets.most()
			t.Fatalf("a valid task behind %d unreadable records did not start within 3 hours; the worker read %s %d times", unreadable, key, n)
		}
		mu.Lock()
		listed := firstList
		mu.Unlock()
		if start.id != good.ID {
			t.Fatalf("started %s, want %s", start.id, good.ID)
		}
		if d := start.at.Sub(listed); d > DefaultPollInterval+3*time.Second {
			t.Errorf("a valid task behind %d unreadable records started %s after the worker's first listing; want within PollInterval (%s) and a few seconds",
				unreadable, d, DefaultPollInterval)
		}

		// Polls go on (every MaxPollInterval at least); the unreadable
		// records are read again now and then, not at each one.
		gets.reset()
		const span = 30 * time.Minute
		time.Sleep(span)
		n, key := gets.most()
		t.Logf("over %s after the start: %d GETs of the unreadable records, at most %d of one", span, gets.total(), n)
		// One read per 10 minutes, and one by a reconciler turn (an hour
		// apart) at most.
		if limit := int(span/(10*time.Minute)) + 2; n > limit {
			t.Errorf("the worker read the unreadable record %s %d times in %s; want at most %d (once per 10 minutes, plus a reconcile)", key, n, span, limit)
		}
	})
}

// TestScheduleNearerStartsWithinPollInterval: Store.Schedule promises that
// a queued task's marker moves to the new time and a worker starts it
// within PollInterval after, without listing in between. An idle worker
// that listed the task while it was due later keeps that later time as the
// moment to list again; moving the start nearer, though still ahead, must
// reach it as a Submit does, or it starts up to MaxPollInterval late.
func TestScheduleNearerStartsWithinPollInterval(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		const poll = 2 * time.Second
		task := e.submit(CreateParams{Name: "moved nearer", RunAt: time.Now().Add(10 * time.Minute)})
		var lists []time.Time
		var mu sync.Mutex
		w := e.run(e.store(nil, advWrap(func(r *http.Request, next http.RoundTripper) (*http.Response, error) {
			if s3test.Op(r) == "LIST" {
				mu.Lock()
				lists = append(lists, time.Now())
				mu.Unlock()
			}
			return next.RoundTrip(r)
		})), advSucceed, &WorkerOptions{ID: "w", PollInterval: poll, ReconcileInterval: -1})
		time.Sleep(3 * poll)
		mu.Lock()
		listed := len(lists)
		mu.Unlock()
		if listed == 0 {
			t.Fatal("setup: the worker did not list the markers")
		}

		runAt := time.Now().Add(5 * time.Second)
		got, err := e.admin.Schedule(e.ctx, task.ID, runAt)
		if err != nil {
			t.Fatal(err)
		}
		if !got.DueAt.Equal(ceilMS(runAt)) || !e.has(e.admin.MarkerKey(got)) {
			t.Fatalf("scheduled: due_at %s, marker %v; want %s and its marker", got.DueAt, e.has(e.admin.MarkerKey(got)), ceilMS(runAt))
		}
		at := advAwait(t, w.started, time.Hour, "the start").at
		if at.Before(runAt) {
			t.Errorf("started %s before run_at", runAt.Sub(at))
		}
		if late := at.Sub(runAt); late > poll {
			t.Errorf("a task scheduled nearer (but still ahead) started %s after its new run_at; want within PollInterval %s", late, poll)
		}
	})
}

// TestCancelledNoticeIsDueNow: a Store's OnTerminal notice that it could
// not deliver is left pending in the record, with the task's marker, for a
// worker to deliver; the package promises that workers deliver notices
// with backoff (5 seconds doubling to 10 minutes) and list the markers at
// least every MaxPollInterval. So a worker whose hook works delivers the
// notice of a cancelled task within MaxPollInterval and a first backoff,
// whatever the task was waiting for when it was cancelled: not at the
// RunAt of a task scheduled a week out, nor at the RetryAt of a failed one.
func TestCancelledNoticeIsDueNow(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		scheduled := e.submit(CreateParams{Name: "next week", RunAt: time.Now().Add(7 * 24 * time.Hour)})
		waiting := e.submit(CreateParams{Name: "retry in an hour"})
		failer := e.run(e.store(nil), func(context.Context, *Job) error {
			return RetryAfter(errors.New("try again later"), time.Hour)
		}, &WorkerOptions{ID: "failer"})
		if !advWaitFor(time.Minute, 100*time.Millisecond, func() bool {
			r := e.record(waiting.ID)
			return r.Status == StatusFailed && !r.RetryAt.IsZero()
		}) {
			t.Fatalf("setup: task is %s, want failed and waiting for a retry", e.record(waiting.ID).Status)
		}
		failer.stop()

		var mu sync.Mutex
		delivered := map[string]time.Time{}
		e.run(e.store(&StoreOptions{OnTerminal: func(_ context.Context, task *Task) error {
			mu.Lock()
			defer mu.Unlock()
			if _, ok := delivered[task.ID]; !ok {
				delivered[task.ID] = time.Now()
			}
			return nil
		}}), advSucceed, &WorkerOptions{ID: "w"})
		time.Sleep(5 * time.Second) // idle: it listed the markers, and waits

		tried := map[string]bool{}
		canceller := e.store(&StoreOptions{OnTerminal: func(_ context.Context, task *Task) error {
			mu.Lock()
			defer mu.Unlock()
			if !tried[task.ID] {
				tried[task.ID] = true
				return errors.New("webhook down")
			}
			return nil
		}})
		cancelled := time.Now()
		for _, id := range []string{scheduled.ID, waiting.ID} {
			got, err := canceller.Cancel(e.ctx, id, "not needed")
			if err != nil {
				t.Fatal(err)
			}
			if !e.record(got.ID).NotifyPending {
				t.Fatalf("setup: the cancel of %s delivered its notice", id)
			}
		}

		bound := DefaultMaxPollInterval + notifyBackoffMin + 5*time.Second
		advWaitFor(2*time.Hour, time.Second, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(delivered) == 2
		})
		mu.Lock()
		defer mu.Unlock()
		for _, c := range []struct {
			what string
			id   string
		}{{"scheduled a week out", scheduled.ID}, {"waiting an hour for its retry", waiting.ID}} {
			at, ok := delivered[c.id]
			switch {
			case !ok:
				t.Errorf("the notice of a task %s, cancelled with its notice pending, was not delivered within 2 hours", c.what)
			case at.Sub(cancelled) > bound:
				t.Errorf("the notice of a task %s, cancelled with its notice pending, was delivered %s after the cancel; want within %s (MaxPollInterval and a backoff)",
					c.what, at.Sub(cancelled), bound)
			}
			if r := e.record(c.id); r.NotifyPending {
				t.Errorf("the task %s still has its notice pending after delivery", c.what)
			}
		}
	})
}

// TestPurgedTaskNoticeIsDropped: a purge that drops pending notices
// (PurgeOptions.DropPendingNotices) deletes the record of a task whose
// notice a worker still holds, retrying a failing hook. A record that no
// longer exists has no notice left to deliver: the worker must give the
// notice up at its next try, not read the missing record again every ten
// minutes for as long as it runs.
func TestPurgedTaskNoticeIsDropped(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		task := e.submit(CreateParams{Name: "purged before its notice"})
		key := e.recordKey(task.ID)
		var gets advKeyCounter
		var mu sync.Mutex
		calls := 0
		st := e.store(&StoreOptions{OnTerminal: func(context.Context, *Task) error {
			mu.Lock()
			calls++
			mu.Unlock()
			return errors.New("webhook down")
		}}, gets.wrap(http.MethodGet, func(k string) bool { return k == key }))
		e.run(st, advSucceed, &WorkerOptions{ID: "w"})
		if !advWaitFor(time.Minute, 100*time.Millisecond, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return calls > 0
		}) {
			t.Fatal("setup: the hook was never called")
		}
		time.Sleep(purgeSettle) // Purge leaves a task until then
		r, err := e.admin.Purge(e.ctx, time.Now().Add(time.Hour), PurgeOptions{DropPendingNotices: true})
		if err != nil || len(r.Purged) != 1 {
			t.Fatalf("setup: Purge = %+v, %v; want the task purged", r, err)
		}
		gets.reset()
		mu.Lock()
		calls = 0
		mu.Unlock()
		const span = 2 * time.Hour
		time.Sleep(span)
		mu.Lock()
		defer mu.Unlock()
		if n := gets.total(); n > 1 {
			t.Errorf("the worker read the purged task's record %d times in %s; want at most once (then the notice is dropped)", n, span)
		}
		if calls > 0 {
			t.Errorf("the hook was called %d times for a purged task", calls)
		}
	})
}

// TestPurgedTaskReadOnceByTheWorker: a worker has three readers of a
// task's record: its poll loop (visiting a marker it noted), its notifier
// (retrying a failing OnTerminal hook) and its reconciler (rechecking the
// older waiting tasks an earlier turn met). Once one of them finds the
// record deleted, the others take its word for it: the worker reads a
// purged record once, not once per reader (soak seed 5078: three reads).
func TestPurgedTaskReadOnceByTheWorker(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		task := e.submit(CreateParams{Name: "purged while watched"})
		key := e.recordKey(task.ID)
		var gets advKeyCounter
		st := e.store(&StoreOptions{OnTerminal: func(context.Context, *Task) error {
			return errors.New("webhook down")
		}}, gets.wrap(http.MethodGet, func(k string) bool { return k == key }))
		e.run(st, advSucceed, &WorkerOptions{ID: "w", ReconcileInterval: time.Minute, ReconcileWindow: 3 * time.Minute})
		// Past the first turns: the task, finished with its notice pending,
		// is watched by the reconciler, which walks only the last two
		// minutes now, and its notice is retried by the notifier.
		time.Sleep(6 * time.Minute)
		if r := e.record(task.ID); !r.NotifyPending || r.Status != StatusCompleted {
			t.Fatalf("setup: task %s, notify_pending %v; want completed with its notice pending", r.Status, r.NotifyPending)
		}
		r, err := e.admin.Purge(e.ctx, time.Now().Add(time.Hour), PurgeOptions{DropPendingNotices: true})
		if err != nil || len(r.Purged) != 1 {
			t.Fatalf("setup: Purge = %+v, %v; want the task purged", r, err)
		}
		gets.reset()
		const span = 2 * time.Hour
		time.Sleep(span)
		if n := gets.total(); n != 1 {
			t.Errorf("the worker read the purged task's record %d times in %s; want once, by whichever of its readers came first", n, span)
		}
	})
}

// TestPurgedFolderReadOnceByTheReconciler: a form posted after its task
// was purged (presigned forms stay valid for their whole expiry) leaves an
// object in a folder without a record. The reconciler's full walks, and
// its sweep of the tasks coming of age for abandonment, meet that folder
// at every pass; a worker reads the missing record once, then passes over
// the folder (soak: a worker read one such record 4 times).
func TestPurgedFolderReadOnceByTheReconciler(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		task := e.submit(CreateParams{Name: "purged, then posted to"})
		key := e.recordKey(task.ID)
		var gets advKeyCounter
		st := e.store(&StoreOptions{AbandonCreatedAfter: 30 * time.Minute}, gets.wrap(http.MethodGet, func(k string) bool { return k == key }))
		e.run(st, advSucceed, &WorkerOptions{ID: "w", ReconcileInterval: time.Minute})
		time.Sleep(time.Minute)
		if r := e.record(task.ID); r.Status != StatusCompleted {
			t.Fatalf("setup: task %s, want completed", r.Status)
		}
		if r, err := e.admin.Purge(e.ctx, time.Now().Add(time.Hour), PurgeOptions{}); err != nil || len(r.Purged) != 1 {
			t.Fatalf("setup: Purge = %+v, %v; want the task purged", r, err)
		}
		upload := DefaultPrefix + task.ID + "/upload"
		if _, err := e.raw.Put(e.ctx, upload, []byte("posted late")); err != nil {
			t.Fatal(err)
		}
		gets.reset()
		const span = 3 * time.Hour // 7 full walks, and the sweep past the task's creation
		time.Sleep(span)
		if n := gets.total(); n != 1 {
			t.Errorf("the worker read the missing record of a purged task's folder %d times in %s; want once", n, span)
		}
	})
}

// TestStopCancelsHandlersDespiteSlowHook: Worker.Stop promises that when
// its ctx ends it cancels the running handlers' contexts at once, with
// ErrWorkerStopping, without waiting for the rest of ShutdownTimeout. An
// OnTerminal hook that ignores its context, still running on the worker's
// notifier, must not hold that back: Run waits for it before it returns,
// not before it stops the handlers.
func TestStopCancelsHandlersDespiteSlowHook(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		quick := e.submit(CreateParams{Name: "quick, slow notice"})
		long := e.submit(CreateParams{Name: "long"})
		inHook := make(chan struct{})
		var once sync.Once
		st := e.store(&StoreOptions{OnTerminal: func(context.Context, *Task) error {
			once.Do(func() { close(inHook) })
			time.Sleep(20 * time.Minute) // ignores its context
			return nil
		}})
		ended := make(chan time.Time, 1)
		var cause error
		w := e.run(st, func(ctx context.Context, job *Job) error {
			if job.Task.ID == quick.ID {
				return nil
			}
			<-ctx.Done()
			cause = context.Cause(ctx)
			ended <- time.Now()
			return ctx.Err()
		}, &WorkerOptions{ID: "w", Concurrency: 2})
		advAwait(t, inHook, time.Minute, "the slow hook")
		for len(w.started) < 2 {
			time.Sleep(100 * time.Millisecond)
		}
		if r := e.record(long.ID); r.Status != StatusRunning {
			t.Fatalf("setup: the long task is %s, want running", r.Status)
		}

		ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
		defer cancel()
		err := w.w.Stop(ctx)
		deadline, _ := ctx.Deadline()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Stop = %v, want context.DeadlineExceeded (the hook holds Run)", err)
		}
		at := advAwait(t, ended, time.Hour, "the end of the running handler's context")
		if late := at.Sub(deadline); late > time.Second {
			t.Errorf("the running handler's context ended %s after Stop's ctx did; want within a second", late)
		}
		if !errors.Is(cause, ErrWorkerStopping) {
			t.Errorf("the running handler's context cause %v, want ErrWorkerStopping", cause)
		}
	})
}

// TestSubmitMarkerSurvivesFastClockCreate: a fresh Store stamps its first
// writes from its own clock, corrected only by what responses taught it,
// and Create writes without reading first; so a store whose clock is two
// minutes ahead creates a record whose updated_at is two minutes ahead of
// the server. A Submit by another store then writes its marker before the
// record; a Reconcile, or a worker's poll, that judges that marker in
// between must not take it for a marker of a phase that is over ("written
// before the record's last change") and delete it: the queued task would
// be left without a marker until the next reconcile.
func TestSubmitMarkerSurvivesFastClockCreate(t *testing.T) {
	for _, judge := range []string{"Reconcile", "a worker's poll"} {
		t.Run(judge, func(t *testing.T) {
			inBubble(t, func(t *testing.T, e *advEnv) {
				fast := e.store(&StoreOptions{Clock: func() time.Time { return time.Now().Add(2 * time.Minute) }})
				task, err := fast.Create(e.ctx, CreateParams{Name: "created by a fast clock"})
				if err != nil {
					t.Fatal(err)
				}
				if err := e.admin.UploadInput(e.ctx, task.ID, strings.NewReader("a,b\n")); err != nil {
					t.Fatal(err)
				}
				if ahead := time.Until(e.record(task.ID).UpdatedAt); ahead < time.Minute {
					t.Fatalf("setup: the created record's updated_at is %s ahead of the server, want about 2 minutes", ahead)
				}
				time.Sleep(10 * time.Second)

				var judged error
				var once sync.Once
				judgeNow := func() {
					switch judge {
					case "Reconcile":
						_, judged = e.store(nil).Reconcile(e.ctx, ReconcileOptions{})
					default:
						w, err := NewWorker(e.store(nil), HandlerFunc(advSucceed), &WorkerOptions{ID: "judge", Logger: advQuiet})
						if err != nil {
							judged = err
							return
						}
						w.poll(e.ctx, e.ctx, time.Time{})
					}
				}
				submitter := e.store(nil, advWrap(func(r *http.Request, next http.RoundTripper) (*http.Response, error) {
					if advIsRecord(r, http.MethodPut, task.ID) {
						once.Do(judgeNow) // the marker is written, the record not yet
					}
					return next.RoundTrip(r)
				}))
				got, err := submitter.Submit(e.ctx, task.ID)
				if err != nil {
					t.Fatal(err)
				}
				if judged != nil {
					t.Fatal(judged)
				}
				if got.Status != StatusQueued {
					t.Fatalf("Submit: task %s, want queued", got.Status)
				}
				if key := e.admin.MarkerKey(got); !e.has(key) {
					t.Errorf("the submitted task has no marker %s after %s judged it between the Submit's marker and record writes", key, judge)
				}
			})
		})
	}
}

// TestClaimNeverBeforeRunAt: a scheduled task is never claimed before its
// RunAt by the server's clock. A worker judges RunAt by its estimate of
// the server's clock, learnt from Date headers of one-second resolution: a
// header proves only that the server's clock had reached that second. A
// worker whose local clock runs ahead of the server by a second or more
// must not take the upper edge of a header's second for the server's
// time: its claim would land up to a second early. One ahead by less is
// told from an exact clock only by a header read late in a second of the
// server's (phase), which shows the lead; from then on it must not claim
// early either.
func TestClaimNeverBeforeRunAt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ahead, phase time.Duration
	}{
		{1200 * time.Millisecond, 0},
		{2700 * time.Millisecond, 0},
		{1200 * time.Millisecond, 900 * time.Millisecond},
		{300 * time.Millisecond, 800 * time.Millisecond},
	} {
		t.Run(fmt.Sprintf("local clock %s ahead, first header at +%s", tc.ahead, tc.phase), func(t *testing.T) {
			inBubble(t, func(t *testing.T, e *advEnv) {
				time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)) + tc.phase)
				runAt := time.Now().Truncate(time.Second).Add(5 * time.Second)
				task := e.submit(CreateParams{Name: "not before", RunAt: runAt})
				var mu sync.Mutex
				var claimed time.Time
				e.mem.OnApply(func(a s3test.Applied) {
					if a.Method == http.MethodPut && a.Key == e.recordKey(task.ID) && strings.Contains(string(a.Body), `"status":"running"`) {
						mu.Lock()
						if claimed.IsZero() {
							claimed = a.Time
						}
						mu.Unlock()
					}
				})
				st := e.store(&StoreOptions{Clock: func() time.Time { return time.Now().Add(tc.ahead) }})
				w := e.run(st, advSucceed, &WorkerOptions{ID: "w", PollInterval: 10 * time.Second, ReconcileInterval: -1})
				start := advAwait(t, w.started, time.Minute, "the start")
				mu.Lock()
				defer mu.Unlock()
				if claimed.Before(runAt) {
					t.Errorf("the claim was written %s before run_at by the server's clock", runAt.Sub(claimed))
				}
				if start.at.Before(runAt) {
					t.Errorf("the handler started %s before run_at", runAt.Sub(start.at))
				}
				if late := start.at.Sub(runAt); late > 2*time.Second {
					t.Errorf("the handler started %s after run_at; want within a second or so", late)
				}
			})
		})
	}
}

// TestReconcilerLeaseAnswerLost: only the holder of the reconciler lease
// reconciles, and it renews the lease at each of its turns. When the
// answer to its lease write is lost after S3 applied it, the SDK sends
// the write again, and the resend is refused (412: the lease is no longer
// what it was when it was read). That refusal answers the holder's own
// write: it holds the lease, and must reconcile at that turn, not skip it
// as if another worker had taken the lease first.
func TestReconcilerLeaseAnswerLost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		nth  int32 // the lease write whose answer is lost
	}{{"first take", 1}, {"renewal", 3}} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T, e *advEnv) {
				leaseKey := DefaultPrefix + "_reconciler"
				isLease := func(r *http.Request) bool { return strings.HasSuffix(r.URL.Path, "/"+leaseKey) }
				lose := &advLoseAnswer{match: func(r *http.Request) bool { return r.Method == http.MethodPut && isLease(r) },
					nth: tc.nth, retryable: true}
				var mu sync.Mutex
				var reads, reports []time.Time
				st := e.store(nil, lose.wrap, advWrap(func(r *http.Request, next http.RoundTripper) (*http.Response, error) {
					if r.Method == http.MethodGet && isLease(r) {
						mu.Lock()
						reads = append(reads, time.Now())
						mu.Unlock()
					}
					return next.RoundTrip(r)
				}))
				const interval = time.Minute
				e.run(st, advSucceed, &WorkerOptions{ID: "w", ReconcileInterval: interval, Hooks: Hooks{OnReconcile: func(*ReconcileReport) {
					mu.Lock()
					reports = append(reports, time.Now())
					mu.Unlock()
				}}})
				time.Sleep(5*interval + interval/2)
				if !lose.fired.Load() {
					t.Fatal("setup: no lease write's answer was lost")
				}
				mu.Lock()
				defer mu.Unlock()
				// A turn reads the lease first; reads of one turn come
				// within seconds, turns a minute apart.
				turns := 0
				for i, at := range reads {
					if i == 0 || at.Sub(reads[i-1]) > 10*time.Second {
						turns++
					}
				}
				if turns < 5 {
					t.Fatalf("setup: %d reconciler turns, want 5 or more", turns)
				}
				if len(reports) != turns {
					t.Errorf("the only worker, holder of the reconciler lease, reconciled at %d of its %d turns; want every one, the one whose lease write's answer was lost too", len(reports), turns)
				}
			})
		})
	}
}

// TestReconcilerLeaseHandover: of two workers, only the one holding the
// reconciler lease reconciles, walking the whole ReconcileWindow at its
// first turn and only the last two intervals after; when it stops, it
// hands the lease back, and the other takes it over at its next turn (an
// interval later at most, and the poll that notices it), starting with a
// whole walk.
func TestReconcilerLeaseHandover(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		const interval = time.Minute
		const old = 3
		for i := range old { // created well before the last two intervals
			if _, err := e.admin.Create(e.ctx, CreateParams{Name: fmt.Sprintf("old %d", i)}); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(2*interval + interval/4)

		type turn struct {
			at    time.Time
			tasks int
		}
		var mu sync.Mutex
		turns := map[string][]turn{}
		get := func(id string) []turn { mu.Lock(); defer mu.Unlock(); return slices.Clone(turns[id]) }
		workers := map[string]*advWorker{}
		for _, id := range []string{"rec-a", "rec-b"} {
			workers[id] = e.run(e.store(nil), advSucceed, &WorkerOptions{ID: id, ReconcileInterval: interval, Hooks: Hooks{OnReconcile: func(r *ReconcileReport) {
				mu.Lock()
				defer mu.Unlock()
				turns[id] = append(turns[id], turn{time.Now(), r.Tasks})
			}}})
		}
		time.Sleep(4*interval + interval/2)

		holder, other := "rec-a", "rec-b"
		if len(get(holder)) == 0 {
			holder, other = other, holder
		}
		held := get(holder)
		if len(held) < 4 {
			t.Fatalf("%s, the holder, reconciled %d times in 4.5 intervals, want 4 or more", holder, len(held))
		}
		if others := get(other); len(others) > 0 {
			t.Fatalf("both workers reconciled while %s held the lease: %s at %v", holder, other, others)
		}
		if held[0].tasks != old {
			t.Errorf("%s's first turn walked %d tasks, want the whole window: %d", holder, held[0].tasks, old)
		}
		for i, tu := range held[1:] {
			if tu.tasks != 0 {
				t.Errorf("%s's turn %d walked %d tasks, want only those of the last two intervals: 0", holder, i+2, tu.tasks)
			}
		}

		workers[holder].stop()
		stopped := time.Now()
		body, ok := e.mem.Object(DefaultPrefix + "_reconciler")
		if !ok {
			t.Fatal("no reconciler lease object")
		}
		var lease reconcileLease
		if err := json.Unmarshal(body, &lease); err != nil {
			t.Fatal(err)
		}
		if lease.Holder != holder || lease.ExpiresAt.After(stopped) {
			t.Errorf("after %s stopped, the lease is %s's until %s, want %s's, handed back (expired by %s)", holder, lease.Holder, lease.ExpiresAt, holder, stopped)
		}
		time.Sleep(interval + DefaultMaxPollInterval + time.Second)
		took := get(other)
		if len(took) == 0 {
			t.Fatalf("%s did not take the reconciler over within %s of %s's stop", other, interval+DefaultMaxPollInterval, holder)
		}
		if took[0].tasks != old {
			t.Errorf("%s's first turn walked %d tasks, want the whole window: %d", other, took[0].tasks, old)
		}
		if after := get(holder); len(after) != len(held) {
			t.Errorf("%s reconciled again after it stopped", holder)
		}
	})
}

// TestNotifierTiesInIDOrder: notices that fall due at the same moment (one
// poll settles several finished tasks) go out in task ID order, not in the
// map's random order, so a simulated seed replays the same.
func TestNotifierTiesInIDOrder(t *testing.T) {
	n := &notifier{held: map[string]*notice{}}
	at := time.Now().Add(time.Hour)
	ids := []string{"7Z4EAHS848HCJVV3BSPNQ9S7ZN", "7Z4EAHP7KMMNJC7ZRZ0YYNPKFF", "7Z4EAHV7QFWBFBDZNN81Y5K17V", "7Z4EAHSJG5D1E9Y58B83H5JC0A", "7Z4EAHS9K446HHRCW3YX9MS7KC"}
	for _, id := range ids {
		n.held[id] = &notice{t: &record{Task: Task{ID: id}}, next: at}
	}
	n.held["7Z4EAH0000000000000000000Z"] = &notice{t: &record{Task: Task{ID: "7Z4EAH0000000000000000000Z"}}, next: at.Add(time.Millisecond)}
	for range 50 {
		if no, _ := n.first(); no == nil || no.t.ID != "7Z4EAHP7KMMNJC7ZRZ0YYNPKFF" {
			t.Fatalf("first() = %v, want the notice of the lowest ID among the earliest", no)
		}
	}
}

// TestReconcilerRestoresOldTaskMarker: the fleet's reconciler walks only
// the tasks created in its last two intervals at most turns, yet a lost
// marker is restored within an interval whatever the task's age: a task
// scheduled hours ahead, created long before the walk's range, that loses
// its marker gets it back at the holder's next turn, not at its next full
// walk (the 24th turn).
func TestReconcilerRestoresOldTaskMarker(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		const interval = time.Minute
		task := e.submit(CreateParams{Name: "later", RunAt: time.Now().Add(6 * time.Hour)})
		marker := e.markerKey(task.ID)
		if marker == "" {
			t.Fatal("setup: the scheduled task has no marker")
		}
		var mu sync.Mutex
		var restored []time.Time
		e.run(e.store(nil), advSucceed, &WorkerOptions{ID: "w", ReconcileInterval: interval, Hooks: Hooks{OnReconcile: func(r *ReconcileReport) {
			for _, id := range r.Restored {
				if id == task.ID {
					mu.Lock()
					restored = append(restored, time.Now())
					mu.Unlock()
				}
			}
		}}})
		// Past the first (full) turn and the two intervals recent walks
		// cover: from here a turn's walk no longer meets the task.
		time.Sleep(3*interval + interval/2)
		if _, err := e.raw.Client.DeleteObject(e.ctx, &s3.DeleteObjectInput{Bucket: &e.mem.Bucket, Key: &marker}); err != nil {
			t.Fatal(err)
		}
		lost := time.Now()
		time.Sleep(interval + interval/4)
		mu.Lock()
		defer mu.Unlock()
		if len(restored) == 0 || !e.has(marker) {
			t.Fatalf("the marker of a task created %s before it was lost was not restored within %s (restores at %v; marker there: %t)",
				lost.Sub(task.CreatedAt).Round(time.Second), interval+interval/4, restored, e.has(marker))
		}
	})
}

// oldFarTask submits a task that starts 5 days ahead and runs a worker
// whose reconciler turns every interval, and returns once the task is
// past the first (full) turn and the two intervals the walks of recent
// tasks cover: from then only the reconciler's watch meets it. It returns
// the task, its marker and the worker.
func oldFarTask(t *testing.T, e *advEnv, interval time.Duration) (*Task, string, *advWorker) {
	t.Helper()
	task := e.submit(CreateParams{Name: "later", RunAt: time.Now().Add(5 * 24 * time.Hour)})
	far := e.markerKey(task.ID)
	if far == "" {
		t.Fatal("setup: the scheduled task has no marker")
	}
	w := e.run(e.store(nil), advSucceed, &WorkerOptions{ID: "w", ReconcileInterval: interval})
	time.Sleep(3*interval + interval/2)
	return task, far, w
}

// TestReconcilerRemovesLeftMarkerOfOldTask: a task scheduled days ahead,
// older than the walks of recent tasks reach, is moved to now, but its far
// marker stays (the Schedule's outcome was unknown, or its DELETE failed);
// a worker then runs it to its end. No poll visits the far marker before
// its day, and the reconciler's watch of the task still names it: the
// watch must not take the marker's presence for a record that did not
// change. The reconciler's next turn reads the record and removes the
// marker (soak seed 4712: it stayed to the end of the world).
func TestReconcilerRemovesLeftMarkerOfOldTask(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		const interval = time.Minute
		task, far, w := oldFarTask(t, e, interval)
		if _, err := e.admin.Schedule(e.ctx, task.ID, time.Now()); err != nil {
			t.Fatal(err)
		}
		e.putRaw(far, nil) // left behind by the move
		if !advWaitFor(time.Minute, 100*time.Millisecond, func() bool { return e.record(task.ID).Status == StatusCompleted }) {
			t.Fatalf("setup: the task is %s, want completed", e.record(task.ID).Status)
		}
		done := time.Now()
		advAwait(t, w.started, time.Second, "the attempt")
		time.Sleep(interval + interval/4)
		if e.has(far) {
			t.Errorf("the far marker of task %s, completed %s ago, is still there", task.ID, time.Since(done).Round(time.Second))
		}
	})
}

// TestReconcilerRetriesStaleMarkerDelete: as above, but the reconciler's
// DELETE of the far marker fails. The turn it retries with a minute later
// walks only recent tasks, and the task, finished, has left the watch:
// the task stays watched until its marker is gone (soak seed 63912: the
// marker stayed until the world ended).
func TestReconcilerRetriesStaleMarkerDelete(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		const interval = 5 * time.Minute
		task := e.submit(CreateParams{Name: "later", RunAt: time.Now().Add(5 * 24 * time.Hour)})
		far := e.markerKey(task.ID)
		var failed atomic.Int32
		var first atomic.Int64 // when the first DELETE failed
		st := e.store(nil, advWrap(func(r *http.Request, next http.RoundTripper) (*http.Response, error) {
			if r.Method == http.MethodDelete && strings.HasSuffix(r.URL.Path, "/"+far) {
				first.CompareAndSwap(0, time.Now().UnixNano())
				if time.Since(time.Unix(0, first.Load())) < 30*time.Second {
					failed.Add(1)
					return nil, s3test.ErrCut // the first DELETE, resends and all
				}
			}
			return next.RoundTrip(r)
		}))
		w := e.run(st, advSucceed, &WorkerOptions{ID: "w", ReconcileInterval: interval})
		time.Sleep(3*interval + interval/2) // past the range of the recent walks
		if _, err := e.admin.Schedule(e.ctx, task.ID, time.Now()); err != nil {
			t.Fatal(err)
		}
		e.putRaw(far, nil) // left behind by the move
		if !advWaitFor(time.Minute, 100*time.Millisecond, func() bool { return e.record(task.ID).Status == StatusCompleted }) {
			t.Fatalf("setup: the task is %s, want completed", e.record(task.ID).Status)
		}
		advAwait(t, w.started, time.Second, "the attempt")
		if !advWaitFor(interval+interval/4, 100*time.Millisecond, func() bool { return failed.Load() > 0 }) {
			t.Fatal("setup: the reconciler did not try to delete the far marker")
		}
		time.Sleep(2 * time.Minute) // the turn retried a minute after
		if e.has(far) {
			t.Errorf("the far marker of task %s is still there after the turn retried (%d DELETEs failed)", task.ID, failed.Load())
		}
	})
}

// TestReconcilerRestoresMarkerBehindLeftOne: as above, an old task's
// start is moved from days ahead to soon and its far marker stays behind;
// then the new marker is lost. The far marker is the one the watch last
// saw, but not yet due it no longer vouches for the record: the next turn
// reads it and restores the new marker, and the task runs.
func TestReconcilerRestoresMarkerBehindLeftOne(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		const interval = time.Minute
		task, far, _ := oldFarTask(t, e, interval)
		runAt := time.Now().Add(interval / 2)
		if _, err := e.admin.Schedule(e.ctx, task.ID, runAt); err != nil {
			t.Fatal(err)
		}
		near := e.admin.MarkerKey(&e.record(task.ID).Task)
		if near == far || !e.has(near) {
			t.Fatalf("setup: the moved task's marker is %q (far %q, there: %t)", near, far, e.has(near))
		}
		e.putRaw(far, nil) // left behind by the move
		if _, err := e.raw.Client.DeleteObject(e.ctx, &s3.DeleteObjectInput{Bucket: &e.mem.Bucket, Key: &near}); err != nil {
			t.Fatal(err)
		}
		bound := interval + interval/4
		if !advWaitFor(bound+interval/2, 100*time.Millisecond, func() bool { return e.record(task.ID).Status == StatusCompleted }) {
			t.Errorf("the task, due at %s with its marker lost behind a stale one, is %s %s later (near marker there: %t)",
				runAt.Format(time.TimeOnly), e.record(task.ID).Status, time.Since(runAt).Round(time.Second), e.has(near))
		}
	})
}

// TestRetryOfHeldNoticeOnSameMarker: a worker holds the OnTerminal notice
// of a task that failed for good (its hook is slow), and so passes over the
// task's marker, which it has already read. An operator's Retry then gives
// the new phase a due time that names that same marker (the failed record
// kept the lease check's due time, and the Retry lands in that very
// millisecond), so the Retry writes no marker of its own, only its
// announcement. The package promises that a Retry starts within a
// PollInterval or so on an idle worker: the announcement must lift the
// hold, or the only worker of the fleet leaves the task queued for as long
// as its hook runs.
func TestRetryOfHeldNoticeOnSameMarker(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		task := e.submit(CreateParams{Name: "failed, then retried", MaxAttempts: 1})
		entered := make(chan struct{})
		var once sync.Once
		st := e.store(&StoreOptions{OnTerminal: func(ctx context.Context, _ *Task) error {
			once.Do(func() { close(entered) })
			select { // slow: an hour, unless the worker stops
			case <-ctx.Done():
			case <-time.After(time.Hour):
			}
			return nil
		}})
		attempts := 0
		w := e.run(st, func(context.Context, *Job) error {
			attempts++
			if attempts == 1 {
				time.Sleep(5 * time.Second) // the marker is older than the record
				return errors.New("first attempt fails")
			}
			return nil
		}, &WorkerOptions{ID: "w"})
		advAwait(t, entered, time.Minute, "the hook of the failed task")
		failed := e.record(task.ID)
		if failed.Status != StatusFailed || failed.DueAt.IsZero() {
			t.Fatalf("setup: the task is %s with due time %v, want failed with its lease check's due time", failed.Status, failed.DueAt)
		}
		advAwait(t, w.started, time.Second, "the first attempt")
		// The Retry lands in the millisecond its marker is named after.
		time.Sleep(time.Until(failed.DueAt))
		got, err := e.admin.Retry(e.ctx, task.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !got.DueAt.Equal(failed.DueAt) {
			t.Fatalf("setup: the Retry's due time is %v, want the failed record's %v", got.DueAt, failed.DueAt)
		}
		retried := time.Now()
		select {
		case s := <-w.started:
			if d := s.at.Sub(retried); d > DefaultPollInterval+5*time.Second {
				t.Errorf("the retried task started %s after the Retry; want within a PollInterval and a few round trips", d)
			}
		case <-time.After(30 * time.Minute):
			t.Errorf("the retried task did not start within 30 minutes, while the worker held its earlier notice")
		}
	})
}

// TestRetryAnnouncedPastItsDeadline: a Retry whose context runs out while
// it removes the task's old marker (a best-effort step, here slowed by a
// DELETE that does not answer) has still changed the record and returns the
// task. Its announcement must go out all the same, or an idle worker learns
// of the task only at its next listing, up to MaxPollInterval later.
func TestRetryAnnouncedPastItsDeadline(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		task := e.submit(CreateParams{Name: "waiting for its retry"})
		failer := e.run(e.store(nil), func(context.Context, *Job) error {
			return RetryAfter(errors.New("try again later"), time.Hour)
		}, &WorkerOptions{ID: "failer"})
		if !advWaitFor(time.Minute, 100*time.Millisecond, func() bool {
			r := e.record(task.ID)
			return r.Status == StatusFailed && !r.RetryAt.IsZero()
		}) {
			t.Fatalf("setup: task is %s, want failed and waiting for a retry", e.record(task.ID).Status)
		}
		failer.stop()
		oldMarker := e.markerKey(task.ID)

		w := e.run(e.store(nil), advSucceed, &WorkerOptions{ID: "w"})
		time.Sleep(5 * time.Second) // idle: it listed the markers, and waits

		stalled := e.store(nil, advWrap(func(r *http.Request, next http.RoundTripper) (*http.Response, error) {
			if r.Method == http.MethodDelete && strings.HasSuffix(oldMarker, r.URL.Path[strings.LastIndex(r.URL.Path, "/"):]) {
				<-r.Context().Done() // no answer
				return nil, r.Context().Err()
			}
			return next.RoundTrip(r)
		}))
		ctx, cancel := context.WithTimeout(e.ctx, 3*time.Second)
		defer cancel()
		retried := time.Now()
		got, err := stalled.Retry(ctx, task.ID)
		if err != nil {
			t.Fatalf("Retry: %v", err)
		}
		if got.Status != StatusQueued {
			t.Fatalf("setup: Retry returned a %s task", got.Status)
		}
		if ctx.Err() == nil {
			t.Fatal("setup: the Retry's context did not run out")
		}
		select {
		case s := <-w.started:
			if d := s.at.Sub(retried); d > DefaultPollInterval+5*time.Second {
				t.Errorf("a Retry whose context ran out in its clean-up: the task started %s after it; want within a PollInterval and a few round trips", d)
			}
		case <-time.After(10 * time.Minute):
			t.Error("the retried task did not start within 10 minutes")
		}
	})
}
