package s3tasktest_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/s3tasktest"
)

type upperArgs struct {
	Suffix string `json:"suffix"`
}

func (a upperArgs) Validate() error {
	if len(a.Suffix) > 3 {
		return errors.New("suffix longer than 3")
	}
	return nil
}

// upper is a handler as a host would write one: typed payload, input in,
// output out.
func upper() *s3task.Mux {
	var mux s3task.Mux
	_ = s3task.HandleJSON(&mux, "upper", func(ctx context.Context, job *s3task.Job, args upperArgs) error {
		in, err := job.OpenInput(ctx)
		if err != nil {
			return err
		}
		defer in.Close()
		b, err := io.ReadAll(in)
		if err != nil {
			return err
		}
		return job.WriteOutput(ctx, strings.NewReader(strings.ToUpper(string(b))+args.Suffix))
	})
	return &mux
}

func TestRunCompletesWithOutput(t *testing.T) {
	store := s3tasktest.NewStore(t, nil)
	task := s3tasktest.Submit(t, store, s3task.CreateParams{Type: "upper", Args: upperArgs{Suffix: "!"}}, []byte("abc"))
	res := s3tasktest.Run(t, store, upper(), task.ID)
	if res.Err != nil || res.Task.Status != s3task.StatusCompleted || string(res.Output) != "ABC!" {
		t.Fatalf("Run = err %v, status %s, output %q; want nil, completed, \"ABC!\"", res.Err, res.Task.Status, res.Output)
	}
}

func TestRunBadPayloadFailsPermanently(t *testing.T) {
	store := s3tasktest.NewStore(t, nil)
	task := s3tasktest.Submit(t, store, s3task.CreateParams{Type: "upper", Payload: []byte(`{"suffix":12}`), MaxAttempts: 5}, []byte("abc"))
	res := s3tasktest.Run(t, store, upper(), task.ID)
	if res.Task.Status != s3task.StatusFailed || !res.Task.Terminal() || res.Task.ErrorCategory != s3task.CategoryBadPayload {
		t.Fatalf("record after a payload that does not decode: status %s, terminal %v, category %q", res.Task.Status, res.Task.Terminal(), res.Task.ErrorCategory)
	}
	if !s3task.IsPermanent(res.Err) || !strings.Contains(res.Task.LastError, "upperArgs") {
		t.Errorf("error %v, last_error %q: want a permanent error naming the type", res.Err, res.Task.LastError)
	}
}

func TestDrainRunsRetriesWhenDue(t *testing.T) {
	s3 := s3tasktest.NewS3(t)
	store := s3.NewStore(t, nil)
	calls := 0
	h := s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		calls++
		if job.Task.Attempt < 2 {
			return s3task.RetryAfter(errors.New("not yet"), time.Hour)
		}
		return job.WriteOutput(ctx, strings.NewReader("done"))
	})
	task := s3tasktest.Submit(t, store, s3task.CreateParams{MaxAttempts: 3}, []byte("x"))
	first := s3tasktest.Drain(t, store, h)
	if len(first) != 1 || first[0].Task.Status != s3task.StatusFailed || first[0].Err == nil {
		t.Fatalf("first drain ran %d attempts; want 1 failed", len(first))
	}
	s3.Advance(time.Hour + time.Second)
	second := s3tasktest.Drain(t, store, h)
	if len(second) != 1 || second[0].Task.ID != task.ID || second[0].Task.Status != s3task.StatusCompleted || string(second[0].Output) != "done" {
		t.Fatalf("second drain: %d results, want the retry to complete", len(second))
	}
	if calls != 2 {
		t.Errorf("handler called %d times, want 2", calls)
	}
}
