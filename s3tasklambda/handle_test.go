package s3tasklambda_test

// Tests of Handle and Invoke without the emulator: each runs in a
// testing/synctest bubble on the socketless in-memory S3, so its deadlines,
// timeouts and the latency it gives S3 pass in virtual time, and nothing
// hangs on how busy the machine is.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/s3test"
	"github.com/s3task/s3task/s3tasklambda"
)

// A Function is what lambda.Start takes as it is, payload bytes and all.
var _ lambda.Handler = (*s3tasklambda.Function)(nil)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// inBubble runs test in parallel with the others, in a synctest bubble of
// its own, with an in-memory S3 made inside it.
func inBubble(t *testing.T, test func(t *testing.T, mem *s3test.Memory)) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		mem, err := s3test.NewMemory()
		if err != nil {
			t.Fatal(err)
		}
		test(t, mem)
	})
}

// roundTripper is a function that is an http.RoundTripper.
type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// slow makes every request wait d (in the bubble, virtual time) before it
// is sent: an S3 far away, or a machine too busy to answer quickly.
func slow(d time.Duration) func(http.RoundTripper) http.RoundTripper {
	return func(next http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			time.Sleep(d)
			return next.RoundTrip(r)
		})
	}
}

// newStore returns a Store on mem whose requests go through wrap.
func newStore(t *testing.T, mem *s3test.Memory, wrap ...func(http.RoundTripper) http.RoundTripper) *s3task.Store {
	t.Helper()
	st, err := s3task.NewStore(mem.Client(wrap...), mem.Bucket, &s3task.StoreOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// memStore returns a Store on a new in-memory S3, for the tests that run
// outside a bubble.
func memStore(t *testing.T) *s3task.Store {
	t.Helper()
	mem, err := s3test.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	return newStore(t, mem)
}

func submit(t *testing.T, st *s3task.Store, payload string) *s3task.Task {
	t.Helper()
	ctx := context.Background()
	task, err := st.Create(ctx, s3task.CreateParams{Payload: json.RawMessage(payload)})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.UploadInput(ctx, task.ID, strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	if task, err = st.Submit(ctx, task.ID); err != nil {
		t.Fatal(err)
	}
	return task
}

func get(t *testing.T, st *s3task.Store, id string) *s3task.Task {
	t.Helper()
	got, err := st.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// event is the S3 event notification of task's marker as it is now.
func event(t *testing.T, st *s3task.Store, task *s3task.Task) string {
	t.Helper()
	return `{"Records":[{"eventSource":"aws:s3","eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"` + st.Bucket() + `"},"object":{"key":"` + st.MarkerKey(get(t, st, task.ID)) + `"}}}]}`
}

// sqsPayload is an SQS batch of bodies, each with its message ID.
func sqsPayload(messages ...[2]string) []byte {
	var batch events.SQSEvent
	for _, m := range messages {
		batch.Records = append(batch.Records, events.SQSMessage{MessageId: m[0], EventSource: "aws:sqs", Body: m[1]})
	}
	b, _ := json.Marshal(batch)
	return b
}

// invoke calls fn.Handle with a deadline timeout away and returns its
// answer and how long it took (virtual time, in a bubble).
func invoke(t *testing.T, fn *s3tasklambda.Function, timeout time.Duration, payload []byte) (*events.SQSEventResponse, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	resp, err := fn.Handle(ctx, payload)
	if err != nil {
		t.Fatal(err)
	}
	return resp, time.Since(start)
}

// failedIDs returns the message IDs resp reports failed.
func failedIDs(resp *events.SQSEventResponse) []string {
	if resp == nil {
		return nil
	}
	ids := []string{}
	for _, f := range resp.BatchItemFailures {
		ids = append(ids, f.ItemIdentifier)
	}
	return ids
}

// untilDone is a handler that runs until its context ends.
func untilDone(ctx context.Context, _ *s3task.Job) error {
	<-ctx.Done()
	return context.Cause(ctx)
}

// TestHandleReleasesBeforeDeadline: an invocation whose deadline comes
// before its task is done gives the attempt back Reserve before the
// deadline, returns in time, and the next invocation runs the task again
// without it counting.
func TestHandleReleasesBeforeDeadline(t *testing.T) {
	inBubble(t, func(t *testing.T, mem *s3test.Memory) {
		st := newStore(t, mem)
		var calls atomic.Int32
		fn, err := s3tasklambda.New(st, s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
			if calls.Add(1) == 1 {
				return untilDone(ctx, job)
			}
			return nil
		}), &s3tasklambda.Options{Worker: s3task.WorkerOptions{ShutdownTimeout: 500 * time.Millisecond}, Reserve: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		task := submit(t, st, `{}`)
		if _, took := invoke(t, fn, 4*time.Second, []byte(`{}`)); took >= 4*time.Second {
			t.Errorf("Handle took %s, to the deadline", took)
		}
		if got := get(t, st, task.ID); got.Status != s3task.StatusQueued || got.AttemptsUsed() != 0 {
			t.Fatalf("after the first invocation: %s with %d attempts used; want queued with none", got.Status, got.AttemptsUsed())
		}
		invoke(t, fn, 10*time.Second, []byte(`{}`))
		if got := get(t, st, task.ID); got.Status != s3task.StatusCompleted || got.AttemptsUsed() != 1 {
			t.Errorf("after the second: %s with %d attempts used; want completed with 1", got.Status, got.AttemptsUsed())
		}
	})
}

// TestHandleRunsEveryDueTask: on a slow S3 (300 ms a request), one worker
// slot, an invocation runs every task due, one after the other, before it
// returns, whether events named them or a sweep found them: it waits for
// the worker to list again after each task, however long that takes,
// rather than for a fixed quiet time. (It used to return 200 ms after the
// first task, before the worker had listed again: the failure of
// TestTimeoutReleases on a busy machine.)
func TestHandleRunsEveryDueTask(t *testing.T) {
	for _, named := range []bool{true, false} {
		t.Run(fmt.Sprint("named by events: ", named), func(t *testing.T) {
			inBubble(t, func(t *testing.T, mem *s3test.Memory) {
				st := newStore(t, mem, slow(300*time.Millisecond))
				fn, err := s3tasklambda.New(st, s3task.HandlerFunc(func(context.Context, *s3task.Job) error { return nil }), nil)
				if err != nil {
					t.Fatal(err)
				}
				var tasks []*s3task.Task
				var messages [][2]string
				for i := range 3 {
					task := submit(t, st, `{}`)
					tasks = append(tasks, task)
					messages = append(messages, [2]string{fmt.Sprint("m", i), event(t, st, task)})
				}
				payload := []byte(`{"source":"aws.events","detail-type":"Scheduled Event"}`)
				if named {
					payload = sqsPayload(messages...)
				}
				resp, took := invoke(t, fn, time.Minute, payload)
				for _, task := range tasks {
					if got := get(t, st, task.ID); got.Status != s3task.StatusCompleted {
						t.Errorf("task %s is %s after the invocation; want completed", task.ID, got.Status)
					}
				}
				if ids := failedIDs(resp); len(ids) != 0 {
					t.Errorf("batch item failures %v; want none", ids)
				}
				if took >= time.Minute-8*time.Second {
					t.Errorf("the invocation took %s, up to its Reserve: it did not see the worker idle", took)
				}
			})
		})
	}
}

// TestHandleNamedTaskRunningElsewhere: an event names a task another
// worker holds (a duplicate delivery, another execution environment): the
// invocation looks at it once it is due, leaves it, and returns, long
// before its deadline, reporting nothing failed.
func TestHandleNamedTaskRunningElsewhere(t *testing.T) {
	inBubble(t, func(t *testing.T, mem *s3test.Memory) {
		st := newStore(t, mem)
		task := submit(t, st, `{}`)
		ev := event(t, st, task) // the marker as Submit wrote it
		release := make(chan struct{})
		other, err := s3task.NewWorker(newStore(t, mem), s3task.HandlerFunc(func(ctx context.Context, _ *s3task.Job) error {
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}), &s3task.WorkerOptions{ID: "elsewhere", Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		ran := make(chan error, 1)
		go func() { _, err := other.RunTask(context.Background(), task.ID); ran <- err }()
		synctest.Wait() // claimed, its handler waiting
		if got := get(t, st, task.ID); got.Status != s3task.StatusRunning || got.WorkerID != "elsewhere" {
			t.Fatalf("the task is %s by %q; want running elsewhere", got.Status, got.WorkerID)
		}

		fn, err := s3tasklambda.New(st, s3task.HandlerFunc(untilDone), &s3tasklambda.Options{Worker: s3task.WorkerOptions{ID: "fn", Logger: quiet}})
		if err != nil {
			t.Fatal(err)
		}
		resp, took := invoke(t, fn, 10*time.Minute, sqsPayload([2]string{"m", ev}))
		if took > time.Minute {
			t.Errorf("the invocation took %s; want it back once the worker had looked at the task", took)
		}
		if ids := failedIDs(resp); len(ids) != 0 {
			t.Errorf("batch item failures %v; want none", ids)
		}
		if got := get(t, st, task.ID); got.Status != s3task.StatusRunning || got.WorkerID != "elsewhere" || got.Attempt != 1 {
			t.Errorf("the task is %s by %q at attempt %d; want still running elsewhere at attempt 1", got.Status, got.WorkerID, got.Attempt)
		}
		close(release)
		if err := <-ran; err != nil {
			t.Fatal(err)
		}
	})
}

// TestHandleNamedTaskDueLater: an event names the marker of a task
// scheduled to start in an hour: the invocation does not wait for it, and
// leaves it queued for a later one.
func TestHandleNamedTaskDueLater(t *testing.T) {
	inBubble(t, func(t *testing.T, mem *s3test.Memory) {
		st := newStore(t, mem)
		ctx := context.Background()
		task, err := st.Create(ctx, s3task.CreateParams{RunAt: time.Now().Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		if err := st.UploadInput(ctx, task.ID, strings.NewReader("x")); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Submit(ctx, task.ID); err != nil {
			t.Fatal(err)
		}
		fn, err := s3tasklambda.New(st, s3task.HandlerFunc(func(context.Context, *s3task.Job) error { return nil }), nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, took := invoke(t, fn, 10*time.Minute, []byte(event(t, st, task))); took > time.Minute {
			t.Errorf("the invocation took %s; want it back without waiting for a start an hour away", took)
		}
		if got := get(t, st, task.ID); got.Status != s3task.StatusQueued || got.Attempt != 0 {
			t.Errorf("the task is %s at attempt %d; want queued, not started", got.Status, got.Attempt)
		}
	})
}

// TestHandleSQSFailures: of an SQS batch, the messages naming a task given
// back are reported failed, and so is one that is not an S3 event
// notification, which is logged with its message ID; one whose task
// completed is not, nor is S3's test event.
func TestHandleSQSFailures(t *testing.T) {
	inBubble(t, func(t *testing.T, mem *s3test.Memory) {
		st := newStore(t, mem)
		var logs bytes.Buffer
		var logMu sync.Mutex
		log := slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logs}, nil))
		fn, err := s3tasklambda.New(st, s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
			if strings.Contains(string(job.Task.Payload), "hold") {
				return untilDone(ctx, job)
			}
			return nil
		}), &s3tasklambda.Options{Worker: s3task.WorkerOptions{ShutdownTimeout: 500 * time.Millisecond, Logger: log}, Reserve: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		held, quick := submit(t, st, `{"hold":1}`), submit(t, st, `{}`)
		resp, _ := invoke(t, fn, 4*time.Second, sqsPayload(
			[2]string{"m-held", event(t, st, held)},
			[2]string{"m-quick", event(t, st, quick)},
			[2]string{"m-junk", "not an event"},
			[2]string{"m-test", `{"Service":"Amazon S3","Event":"s3:TestEvent","Bucket":"` + st.Bucket() + `"}`},
		))
		if got := strings.Join(failedIDs(resp), ","); got != "m-held,m-junk" {
			t.Errorf("batch item failures %q; want m-held,m-junk", got)
		}
		logMu.Lock()
		defer logMu.Unlock()
		if !strings.Contains(logs.String(), "message_id=m-junk") || strings.Contains(logs.String(), "message_id=m-test") {
			t.Errorf("the log does not name m-junk alone as malformed:\n%s", logs.String())
		}
	})
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestInvokeAnyPayload: Invoke, the method that makes a Function a
// lambda.Handler, takes the payload as Lambda sends it: one that is not
// JSON at all runs a sweep, as any payload that names no task does, and
// answers null; an SQS batch gets its batch response as JSON.
func TestInvokeAnyPayload(t *testing.T) {
	inBubble(t, func(t *testing.T, mem *s3test.Memory) {
		st := newStore(t, mem)
		fn, err := s3tasklambda.New(st, s3task.HandlerFunc(func(context.Context, *s3task.Job) error { return nil }), &s3tasklambda.Options{Worker: s3task.WorkerOptions{Logger: quiet}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, payload := range []string{"sweep, please", "", "\x00\xff"} {
			task := submit(t, st, `{}`)
			out, err := fn.Invoke(ctx, []byte(payload))
			if err != nil || string(out) != "null" {
				t.Errorf("Invoke(%q) = %q, %v; want null and no error", payload, out, err)
			}
			if got := get(t, st, task.ID); got.Status != s3task.StatusCompleted {
				t.Errorf("after Invoke(%q) the task is %s; want completed by the sweep", payload, got.Status)
			}
		}
		out, err := fn.Invoke(ctx, sqsPayload([2]string{"m-junk", "{"}))
		var resp events.SQSEventResponse
		if err != nil || json.Unmarshal(out, &resp) != nil || len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != "m-junk" {
			t.Errorf("Invoke(SQS batch) = %s, %v; want the batch response naming m-junk", out, err)
		}
	})
}

// TestHandleReleaseLimit: a task that needs longer than an invocation
// leaves is given back by three invocations in a row, each reporting its
// SQS message failed for delivery again, and failed for good by the
// fourth, with the category timeout: that message is not reported, since
// there is nothing left to run. With the limit turned off (negative), it
// is given back every time.
func TestHandleReleaseLimit(t *testing.T) {
	for _, limit := range []int{0, -1} { // 0: the Function's default, DefaultReleaseLimit
		t.Run(fmt.Sprint("ReleaseLimit ", limit), func(t *testing.T) {
			inBubble(t, func(t *testing.T, mem *s3test.Memory) {
				st := newStore(t, mem)
				var failed []error
				var mu sync.Mutex
				fn, err := s3tasklambda.New(st, s3task.HandlerFunc(untilDone), &s3tasklambda.Options{
					Worker: s3task.WorkerOptions{ShutdownTimeout: 500 * time.Millisecond, ReleaseLimit: limit, Logger: quiet,
						Hooks: s3task.Hooks{OnFail: func(_ *s3task.Task, err error) { mu.Lock(); failed = append(failed, err); mu.Unlock() }}},
					Reserve: 2 * time.Second,
				})
				if err != nil {
					t.Fatal(err)
				}
				task := submit(t, st, `{}`)
				rounds := s3tasklambda.DefaultReleaseLimit + 1
				if limit < 0 {
					rounds = 6
				}
				for i := 1; i <= rounds; i++ {
					resp, _ := invoke(t, fn, 20*time.Second, sqsPayload([2]string{"m", event(t, st, task)}))
					got := get(t, st, task.ID)
					if limit < 0 || i <= s3tasklambda.DefaultReleaseLimit {
						if got.Status != s3task.StatusQueued || got.AttemptsUsed() != 0 || got.ErrorCategory != s3task.CategoryShutdown {
							t.Fatalf("after invocation %d: %s, %d attempts used, category %q; want queued, none used, %q", i, got.Status, got.AttemptsUsed(), got.ErrorCategory, s3task.CategoryShutdown)
						}
						if ids := failedIDs(resp); len(ids) != 1 {
							t.Errorf("invocation %d reported %v failed; want its message, the task given back", i, ids)
						}
						continue
					}
					if got.Status != s3task.StatusFailed || !got.Terminal() || got.ErrorCategory != s3task.CategoryTimeout || !strings.Contains(got.LastError, "limit is 3") {
						t.Fatalf("after invocation %d: %s (terminal %v), category %q, %q; want failed for good, category %q, saying the limit",
							i, got.Status, got.Terminal(), got.ErrorCategory, got.LastError, s3task.CategoryTimeout)
					}
					if ids := failedIDs(resp); len(ids) != 0 {
						t.Errorf("invocation %d reported %v failed; want none: the task failed for good", i, ids)
					}
				}
				mu.Lock()
				defer mu.Unlock()
				switch {
				case limit < 0 && len(failed) != 0:
					t.Errorf("OnFail ran %d times; want never", len(failed))
				case limit >= 0 && (len(failed) != 1 || s3task.ErrorCategory(failed[0]) != s3task.CategoryTimeout):
					t.Errorf("OnFail got %v; want one error of category %q", failed, s3task.CategoryTimeout)
				}
			})
		})
	}
}

// TestHandleNeedsTime: an invocation without a deadline, or with less time
// than Reserve, is refused at once; so are options it cannot honour.
func TestHandleNeedsTime(t *testing.T) {
	st := memStore(t)
	fn, err := s3tasklambda.New(st, s3task.HandlerFunc(func(context.Context, *s3task.Job) error { return nil }), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fn.Handle(context.Background(), json.RawMessage(`{}`)); err == nil {
		t.Error("Handle without a deadline: no error")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := fn.Handle(ctx, json.RawMessage(`{}`)); err == nil {
		t.Error("Handle with 1s left (Reserve 8s): no error")
	}
	for name, o := range map[string]s3tasklambda.Options{
		"Reserve under ShutdownTimeout":       {Reserve: time.Second},
		"ReleaseLimit past the history's end": {Worker: s3task.WorkerOptions{ReleaseLimit: s3task.HistoryLimit}},
	} {
		if _, err := s3tasklambda.New(st, s3task.HandlerFunc(func(context.Context, *s3task.Job) error { return nil }), &o); !errors.Is(err, s3task.ErrInvalidOptions) {
			t.Errorf("New with %s: %v; want ErrInvalidOptions", name, err)
		}
	}
}

// TestHandleAnnouncesNoPresence: an invocation lives for seconds, so its
// worker writes no presence object (a PUT and a DELETE each) unless the
// options ask for one.
func TestHandleAnnouncesNoPresence(t *testing.T) {
	inBubble(t, func(t *testing.T, mem *s3test.Memory) {
		st := newStore(t, mem)
		var presence atomic.Int32
		mem.OnApply(func(a s3test.Applied) {
			if strings.Contains(a.Key, "_workers/") {
				presence.Add(1)
			}
		})
		for _, tc := range []struct {
			name     string
			interval time.Duration
			want     bool
		}{{"default", 0, false}, {"asked for", time.Minute, true}} {
			fn, err := s3tasklambda.New(st, s3task.HandlerFunc(func(context.Context, *s3task.Job) error { return nil }),
				&s3tasklambda.Options{Worker: s3task.WorkerOptions{PresenceInterval: tc.interval}})
			if err != nil {
				t.Fatal(err)
			}
			submit(t, st, `{}`)
			presence.Store(0)
			invoke(t, fn, 20*time.Second, []byte(`{}`))
			if got := presence.Load() > 0; got != tc.want {
				t.Errorf("%s: %d presence writes in an invocation; want some: %v", tc.name, presence.Load(), tc.want)
			}
		}
	})
}
