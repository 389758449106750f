package s3task_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/s3test"
	"github.com/s3task/s3task/s3tasktest"
)

// enqueueOpts declares the type "export" without input.
var enqueueOpts = &s3task.StoreOptions{Files: map[string]s3task.FileOptions{"export": {NoInput: true}}}

// Enqueue queues a task with its input in one call, or one of a type
// declared without input with none; the handler reads the input, or gets
// ErrNoInput; a wrong pairing of type and input is refused before
// anything is written.
func TestEnqueue(t *testing.T) {
	s3 := s3tasktest.NewS3(t)
	var sent s3test.Counter
	store := s3.NewStore(t, enqueueOpts, sent.Wrap)
	ctx := context.Background()

	task, err := store.Enqueue(ctx, s3task.CreateParams{Name: "orders.csv"}, bytes.NewReader([]byte("a,b\n1,2\n")))
	if err != nil {
		t.Fatal(err)
	}
	if task.Status != s3task.StatusQueued || task.InputSize != 8 || task.NoInput {
		t.Errorf("enqueued %+v; want queued with its 8-byte input", task)
	}
	res := s3tasktest.Run(t, store, s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		r, err := job.OpenInput(ctx)
		if err != nil {
			return err
		}
		defer r.Close()
		got, err := io.ReadAll(r)
		if err == nil && string(got) != "a,b\n1,2\n" {
			err = s3task.Permanent(errors.New("input " + string(got)))
		}
		return err
	}), task.ID)
	if res.Task.Status != s3task.StatusCompleted {
		t.Errorf("the task with input ended %s: %v", res.Task.Status, res.Err)
	}

	sent.Reset()
	export, err := store.Enqueue(ctx, s3task.CreateParams{Type: "export"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := sent.Total(); n != 4 || sent.Counts()["PUT"] != 4 {
		t.Errorf("Enqueue without input sent %s; want 4 PUTs: the record, the marker, the record again, the wake object", sent.String())
	}
	if export.Status != s3task.StatusQueued || !export.NoInput || export.InputPath != "" {
		t.Errorf("enqueued without input: %+v; want queued, NoInput, no input path", export)
	}
	var openErr error
	res = s3tasktest.Run(t, store, s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		_, openErr = job.OpenInput(ctx)
		return nil
	}), export.ID)
	if res.Task.Status != s3task.StatusCompleted || !errors.Is(openErr, s3task.ErrNoInput) {
		t.Errorf("the task without input ended %s, OpenInput: %v; want completed and ErrNoInput", res.Task.Status, openErr)
	}

	created, err := store.Create(ctx, s3task.CreateParams{Type: "export"})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.UploadInput(ctx, created.ID, strings.NewReader("x")); !errors.Is(err, s3task.ErrInvalidTransition) {
		t.Errorf("UploadInput to a task of a type without input: %v, want a TransitionError", err)
	}
	if got, err := store.Submit(ctx, created.ID); err != nil || got.Status != s3task.StatusQueued {
		t.Errorf("Submit of a created task without input: %v, %v; want queued with no input check", got, err)
	}

	before := len(s3.Keys(store.Prefix()))
	for _, c := range []struct {
		typ   string
		input io.Reader
	}{{"export", strings.NewReader("x")}, {"", nil}} {
		if got, err := store.Enqueue(ctx, s3task.CreateParams{Type: c.typ}, c.input); !errors.Is(err, s3task.ErrInvalidArgument) || !errors.Is(err, s3task.ErrNoInput) {
			t.Errorf("Enqueue of type %q with input %t: %v, %v; want ErrInvalidArgument and ErrNoInput", c.typ, c.input != nil, got, err)
		}
	}
	if after := len(s3.Keys(store.Prefix())); after != before {
		t.Errorf("refused Enqueues wrote %d objects", after-before)
	}
}

// A keyed Enqueue is exactly once across a crash between its requests:
// the caller's retry finishes the task the crashed call began, with the
// input the first call uploaded if it got that far, and a retry after that
// returns the same task, changing nothing.
func TestEnqueueCrashes(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		fail   func(r *http.Request) bool
		keepsA bool // the crashed call's input is the task's
	}{
		{"upload", func(r *http.Request) bool {
			return r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/input")
		}, false},
		{"marker", func(r *http.Request) bool {
			return r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/active/")
		}, true},
		{"submit", func(r *http.Request) bool {
			return r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/status.json") && r.Header.Get("If-Match") != ""
		}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s3 := s3tasktest.NewS3(t)
			crashing := s3.NewStore(t, nil, func(next http.RoundTripper) http.RoundTripper {
				return s3tasktest.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
					if c.fail(r) {
						return nil, errors.New("connection reset: the process died here")
					}
					return next.RoundTrip(r)
				})
			})
			p := s3task.CreateParams{Name: "nightly", Key: "order-7"}
			if got, err := crashing.Enqueue(ctx, p, strings.NewReader("A")); err == nil {
				t.Fatalf("Enqueue crashing at the %s: %+v, no error", c.name, got)
			}
			store := s3.NewStore(t, nil)
			task, err := store.Enqueue(ctx, p, strings.NewReader("B"))
			if err != nil || task.Status != s3task.StatusQueued {
				t.Fatalf("the retry: %+v, %v; want the task queued", task, err)
			}
			again, err := store.Enqueue(ctx, p, strings.NewReader("C"))
			if err != nil || again.ID != task.ID || again.Revision != task.Revision {
				t.Errorf("a third call: %+v, %v; want task %s as it was", again, err, task.ID)
			}
			page, err := store.List(ctx, s3task.ListOptions{})
			if err != nil || len(page.Tasks) != 1 {
				t.Fatalf("tasks after the crash and two retries: %v, %v; want one", page, err)
			}
			want := "B"
			if c.keepsA {
				want = "A"
			}
			var got string
			results := s3tasktest.Drain(t, store, s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
				r, err := job.OpenInput(ctx)
				if err != nil {
					return err
				}
				defer r.Close()
				b, err := io.ReadAll(r)
				got = string(b)
				return err
			}))
			if len(results) != 1 || got != want {
				t.Errorf("drained %d tasks, the input read %q; want one, %q", len(results), got, want)
			}
		})
	}
}

// Ingest refuses a type declared without input: an object cannot be the
// input of a task that takes none.
func TestIngestRefusesTypeWithoutInput(t *testing.T) {
	s3 := s3tasktest.NewS3(t)
	store := s3.NewStore(t, enqueueOpts)
	_, err := store.Ingest(context.Background(), s3task.Object{Key: "incoming/a.csv", ETag: "abc"}, s3task.CreateParams{Type: "export"})
	if !errors.Is(err, s3task.ErrInvalidArgument) || !errors.Is(err, s3task.ErrNoInput) {
		t.Errorf("Ingest of a type without input: %v, want ErrInvalidArgument and ErrNoInput", err)
	}
	if keys := s3.Keys(""); len(keys) != 0 {
		t.Errorf("the refused Ingest wrote %v", keys)
	}
}
