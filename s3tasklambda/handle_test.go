package s3tasklambda_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/s3test"
	"github.com/s3task/s3task/s3tasklambda"
)

// memEnv is an in-memory S3 with a Store, for tests of Handle without the
// emulator.
func memStore(t *testing.T) *s3task.Store {
	t.Helper()
	mem, err := s3test.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	st, err := s3task.NewStore(mem.Client(), mem.Bucket, &s3task.StoreOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return st
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

// TestHandleReleasesBeforeDeadline: an invocation whose deadline comes
// before its task is done gives the attempt back Reserve before the
// deadline, returns in time, and the next invocation runs the task again
// without it counting.
func TestHandleReleasesBeforeDeadline(t *testing.T) {
	st := memStore(t)
	var calls atomic.Int32
	fn, err := s3tasklambda.New(st, s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		if calls.Add(1) == 1 {
			<-ctx.Done()
			return context.Cause(ctx)
		}
		return nil
	}), &s3tasklambda.Options{Worker: s3task.WorkerOptions{ShutdownTimeout: 500 * time.Millisecond}, Reserve: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	task := submit(t, st, `{}`)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := fn.Handle(ctx, json.RawMessage(`{}`)); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("Handle took %s, past the deadline", d)
	}
	got, err := st.Get(context.Background(), task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != s3task.StatusQueued || got.AttemptsUsed() != 0 {
		t.Fatalf("after the first invocation: %s with %d attempts used; want queued with none", got.Status, got.AttemptsUsed())
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	if _, err := fn.Handle(ctx2, json.RawMessage(`{}`)); err != nil {
		t.Fatal(err)
	}
	if got, _ = st.Get(context.Background(), task.ID); got.Status != s3task.StatusCompleted || got.AttemptsUsed() != 1 {
		t.Errorf("after the second: %s with %d attempts used; want completed with 1", got.Status, got.AttemptsUsed())
	}
}

// TestHandleSQSFailures: of an SQS batch, only the messages naming a task
// given back are reported failed; one that is not an event is not.
func TestHandleSQSFailures(t *testing.T) {
	st := memStore(t)
	fn, err := s3tasklambda.New(st, s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		if strings.Contains(string(job.Task.Payload), "hold") {
			<-ctx.Done()
			return context.Cause(ctx)
		}
		return nil
	}), &s3tasklambda.Options{Worker: s3task.WorkerOptions{ShutdownTimeout: 500 * time.Millisecond}, Reserve: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	held, quick := submit(t, st, `{"hold":1}`), submit(t, st, `{}`)
	ev := func(task *s3task.Task) string {
		return `{"Records":[{"eventSource":"aws:s3","eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"` + st.Bucket() + `"},"object":{"key":"` + st.MarkerKey(task) + `"}}}]}`
	}
	batch := events.SQSEvent{Records: []events.SQSMessage{
		{MessageId: "m-held", EventSource: "aws:sqs", Body: ev(held)},
		{MessageId: "m-quick", EventSource: "aws:sqs", Body: ev(quick)},
		{MessageId: "m-junk", EventSource: "aws:sqs", Body: "not an event"},
	}}
	payload, _ := json.Marshal(batch)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	resp, err := fn.Handle(ctx, payload)
	if err != nil {
		t.Fatal(err)
	}
	if resp == nil || len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != "m-held" {
		t.Errorf("batch item failures %+v; want m-held only", resp)
	}
}

// TestHandleNeedsTime: an invocation without a deadline, or with less time
// than Reserve, is refused at once.
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
	if _, err := s3tasklambda.New(st, s3task.HandlerFunc(func(context.Context, *s3task.Job) error { return nil }), &s3tasklambda.Options{Reserve: time.Second}); err == nil {
		t.Error("New with Reserve under ShutdownTimeout: no error")
	}
}

// TestHandleAnnouncesNoPresence: an invocation lives for seconds, so its
// worker writes no presence object (a PUT and a DELETE each) unless the
// options ask for one.
func TestHandleAnnouncesNoPresence(t *testing.T) {
	mem, err := s3test.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	st, err := s3task.NewStore(mem.Client(), mem.Bucket, &s3task.StoreOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
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
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		if _, err := fn.Handle(ctx, json.RawMessage(`{}`)); err != nil {
			t.Fatal(err)
		}
		cancel()
		if got := presence.Load() > 0; got != tc.want {
			t.Errorf("%s: %d presence writes in an invocation; want some: %v", tc.name, presence.Load(), tc.want)
		}
	}
}
