package s3task_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/s3tasktest"
)

func TestMuxZeroValueIsReadyAndReportsItsTypes(t *testing.T) {
	var mux s3task.Mux
	if got := mux.Types(); len(got) != 0 {
		t.Fatalf("empty Mux serves %v", got)
	}
	noop := func(context.Context, *s3task.Job) error { return nil }
	for _, typ := range []string{"resize", "import"} {
		if err := mux.HandleFunc(typ, noop); err != nil {
			t.Fatalf("HandleFunc(%q) on a zero Mux: %v", typ, err)
		}
	}
	if got, want := mux.Types(), []string{"import", "resize"}; !slices.Equal(got, want) {
		t.Errorf("Types() = %v, want %v", got, want)
	}
	for _, bad := range []string{"", strings.Repeat("x", 129), "import"} {
		if err := mux.HandleFunc(bad, noop); !errors.Is(err, s3task.ErrInvalidArgument) {
			t.Errorf("HandleFunc(%.10q...) = %v, want ErrInvalidArgument", bad, err)
		}
	}
	var _ s3task.TypedHandler = &mux
}

// A worker whose handler is a Mux leaves tasks of other types queued, for
// a worker that serves them, instead of failing them: the rolling-deploy
// case. Stats shows what waits, by type.
func TestWorkerClaimsOnlyTheTypesItServes(t *testing.T) {
	bubble(t, func(t *testing.T) {
		s3 := s3tasktest.NewS3(t)
		store := s3.NewStore(t, nil)
		ctx := context.Background()
		old := s3task.NewMux()
		if err := old.HandleFunc("csv", func(ctx context.Context, job *s3task.Job) error { return nil }); err != nil {
			t.Fatal(err)
		}
		csv := s3tasktest.Submit(t, store, s3task.CreateParams{Type: "csv"}, []byte("a"))
		pdf := s3tasktest.Submit(t, store, s3task.CreateParams{Type: "pdf"}, []byte("b"))

		w, err := s3task.NewWorker(s3.NewStore(t, nil), old, &s3task.WorkerOptions{ID: "old", PollInterval: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		wctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- w.Run(wctx) }()
		waitStatus(t, store, csv.ID, s3task.StatusCompleted)
		time.Sleep(300 * time.Millisecond) // several polls that see the pdf task (of the bubble's clock: they happen, however busy the machine)
		stop()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
		got, err := store.Get(ctx, pdf.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != s3task.StatusQueued || got.Attempt != 0 {
			t.Fatalf("task of a type the worker does not serve: %s, attempt %d; want queued, untouched", got.Status, got.Attempt)
		}
		st, err := store.Stats(ctx, s3task.StatsOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if st.UnfinishedByType["pdf"] != 1 || st.UnfinishedByType["csv"] != 0 {
			t.Errorf("Stats.UnfinishedByType = %v, want pdf:1", st.UnfinishedByType)
		}

		// A worker that knows the type runs it; RunTask refuses a type the
		// worker does not serve, with a typed error.
		if _, err := w.RunTask(ctx, pdf.ID); !errors.Is(err, s3task.ErrUnknownTaskType) {
			t.Errorf("RunTask of an unserved type = %v, want ErrUnknownTaskType", err)
		}
		var next s3task.Mux
		_ = next.HandleFunc("pdf", func(ctx context.Context, job *s3task.Job) error { return nil })
		if res := s3tasktest.Run(t, store, &next, pdf.ID); res.Task.Status != s3task.StatusCompleted {
			t.Errorf("the pdf task on a worker serving pdf: %s", res.Task.Status)
		}
	})
}

func waitStatus(t *testing.T, store *s3task.Store, id string, want s3task.Status) {
	t.Helper()
	var got *s3task.Task
	var err error
	waitUntilOr(t, fmt.Sprintf("task %s is %s", id, want), func() bool {
		got, err = store.Get(context.Background(), id)
		return err == nil && got.Status == want
	}, func() string { return fmt.Sprintf("last: %v, %v", got, err) })
}

type resizeArgs struct {
	Width int `json:"width"`
}

func (a *resizeArgs) Validate() error { // a pointer receiver, found all the same
	if a.Width <= 0 {
		return errors.New("width must be positive")
	}
	return nil
}

func TestTypedPayloads(t *testing.T) {
	store := s3tasktest.NewStore(t, nil)
	ctx := context.Background()
	var mux s3task.Mux
	var seen []int
	if err := s3task.HandleJSON(&mux, "resize", func(ctx context.Context, job *s3task.Job, args resizeArgs) error {
		seen = append(seen, args.Width)
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	task, err := store.Create(ctx, s3task.CreateParams{Type: "resize", Args: resizeArgs{Width: 640}})
	if err != nil {
		t.Fatal(err)
	}
	if string(task.Payload) != `{"width":640}` {
		t.Errorf("payload from Args = %s", task.Payload)
	}
	for _, p := range []s3task.CreateParams{
		{Type: "resize", Args: resizeArgs{Width: 0}},                                     // fails Validate
		{Type: "resize", Args: resizeArgs{Width: 1}, Payload: json.RawMessage(`{}`)},     // both
		{Type: "resize", Args: map[string]any{"f": func() {}}},                           // does not encode
		{Type: "resize", Args: resizeArgs{Width: 1}, Payload: nil, Name: "\xff invalid"}, // bad name still caught
	} {
		if _, err := store.Create(ctx, p); !errors.Is(err, s3task.ErrInvalidArgument) {
			t.Errorf("Create(%+v) = %v, want ErrInvalidArgument", p, err)
		}
	}

	good := s3tasktest.Submit(t, store, s3task.CreateParams{Type: "resize", Args: resizeArgs{Width: 32}}, []byte("img"))
	if res := s3tasktest.Run(t, store, &mux, good.ID); res.Err != nil || res.Task.Status != s3task.StatusCompleted {
		t.Fatalf("typed handler: %v, %s", res.Err, res.Task.Status)
	}
	for _, payload := range []string{`{"width":"wide"}`, `{"width":-3}`, `[1]`} {
		bad := s3tasktest.Submit(t, store, s3task.CreateParams{Type: "resize", Payload: json.RawMessage(payload), MaxAttempts: 3}, []byte("img"))
		res := s3tasktest.Run(t, store, &mux, bad.ID)
		if !res.Task.Terminal() || res.Task.ErrorCategory != s3task.CategoryBadPayload || !strings.Contains(res.Task.LastError, `"resize"`) {
			t.Errorf("payload %s: status %s terminal %v category %q last_error %q; want a final bad_payload failure naming the type",
				payload, res.Task.Status, res.Task.Terminal(), res.Task.ErrorCategory, res.Task.LastError)
		}
	}
	if !slices.Equal(seen, []int{32}) {
		t.Errorf("handler saw widths %v, want only [32]", seen)
	}
}
