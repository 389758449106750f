package s3task_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/s3tasktest"
)

// S3 lets a presigned POST form replace its object as often as it is
// posted until the form expires. The form addresses the task's upload
// object, never its input, so posting it again after Submit, or after the
// task completed, leaves the input the record names as it was.
func TestFormPostedAgainCannotReplaceInput(t *testing.T) {
	t.Parallel()
	st, e := setup(t, nil)
	task := e.task(t, "created-no-input")
	form, err := st.PresignUploadForm(e.ctx, task.ID, 15*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	first := []byte("name\nada\n")
	e.postForm(t, form, first)
	if _, err := st.Submit(e.ctx, task.ID); err != nil {
		t.Fatal(err)
	}
	inputKey := e.inputKey(t, task.ID)
	stored := e.stored(t, task.ID)
	wantInput := func(when string) {
		t.Helper()
		etag, size := e.head(t, inputKey)
		body, _ := e.object(inputKey)
		if !bytes.Equal(body, first) || etag != stored.InputETag || size != int64(len(first)) {
			t.Errorf("%s: input %q (etag %s, %d bytes); want the submitted %q (etag %s)", when, body, etag, size, first, stored.InputETag)
		}
	}

	e.postForm(t, form, []byte("name\nmallory\n"))
	wantInput("the form posted again after Submit")

	var seen []byte
	s3tasktest.Drain(t, st, s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		in, err := job.OpenInput(ctx)
		if err != nil {
			return err
		}
		defer in.Close()
		var buf bytes.Buffer
		if _, err := buf.ReadFrom(in); err != nil {
			return err
		}
		seen = buf.Bytes()
		return job.WriteOutput(ctx, strings.NewReader("done"))
	}))
	if got := e.get(t, task.ID); got.Status != s3task.StatusCompleted || !bytes.Equal(seen, first) {
		t.Fatalf("task %s, handler read %q; want completed on %q", got.Status, seen, first)
	}
	e.postForm(t, form, []byte("name\neve\n"))
	wantInput("the form posted again after completion")
	if r := e.stored(t, task.ID); r.InputETag != stored.InputETag {
		t.Errorf("the record's input_etag moved from %s to %s", stored.InputETag, r.InputETag)
	}
}

// An input a presigned PUT placed is the input: a form's upload, posted
// too, is left alone. Two Submits racing over one form upload copy it
// once, and both return the queued task.
func TestFormUploadAdoptedOnce(t *testing.T) {
	t.Parallel()

	t.Run("the PUT's input wins", func(t *testing.T) {
		st, e := setup(t, nil)
		task := e.task(t, "created-no-input")
		form, err := st.PresignUploadForm(e.ctx, task.ID, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		put, err := st.PresignUpload(e.ctx, task.ID, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		e.postForm(t, form, []byte("from the form"))
		e.sendPresigned(t, put, []byte("from the put"))
		got, err := st.Submit(e.ctx, task.ID)
		if err != nil {
			t.Fatal(err)
		}
		if body, _ := e.object(e.inputKey(t, task.ID)); string(body) != "from the put" || got.InputSize != int64(len("from the put")) {
			t.Errorf("input %q (%d bytes recorded); want the PUT's", body, got.InputSize)
		}
	})

	t.Run("racing Submits", func(t *testing.T) {
		for round := range 8 {
			st, e := setup(t, nil)
			task := e.task(t, "created-no-input")
			form, err := st.PresignUploadForm(e.ctx, task.ID, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			body := []byte("racing upload")
			e.postForm(t, form, body)
			var written int // PUTs of the input S3 accepted
			var mu sync.Mutex
			count := func(next http.RoundTripper) http.RoundTripper {
				return s3tasktest.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
					resp, err := next.RoundTrip(r)
					if err == nil && resp.StatusCode == http.StatusOK && isPut(r, e.inputKey(t, task.ID)) {
						mu.Lock()
						written++
						mu.Unlock()
					}
					return resp, err
				})
			}
			var wg sync.WaitGroup
			errs := make([]error, 4)
			for i := range errs {
				other := e.newStore(t, nil, count)
				wg.Go(func() {
					got, err := other.Submit(e.ctx, task.ID)
					if err == nil && (got.Status == s3task.StatusCreated || got.InputSize != int64(len(body))) {
						err = errors.New("returned " + string(got.Status))
					}
					errs[i] = err
				})
			}
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Errorf("round %d: Submit %d: %v", round, i, err)
				}
			}
			if got, _ := e.object(e.inputKey(t, task.ID)); !bytes.Equal(got, body) {
				t.Errorf("round %d: input %q, want %q", round, got, body)
			}
			if written != 1 {
				t.Errorf("round %d: S3 accepted %d PUTs of the input, want exactly 1", round, written)
			}
		}
	})
}

// A form's file over StoreOptions.MaxInputSize (a store that does not
// enforce the policy took it) is refused at Submit, and nothing is copied.
func TestFormUploadOverTheLimit(t *testing.T) {
	t.Parallel()
	st, e := setup(t, &s3task.StoreOptions{MaxInputSize: 8})
	task := e.task(t, "created-no-input")
	form, err := st.PresignUploadForm(e.ctx, task.ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	e.postForm(t, form, []byte("nine byte"))
	_, err = st.Submit(e.ctx, task.ID)
	var se *s3task.InputSizeError
	if !errors.As(err, &se) || !errors.Is(err, s3task.ErrInputTooLarge) || se.Size != 9 {
		t.Fatalf("Submit = %v, want an InputSizeError of 9 bytes", err)
	}
	if e.exists(e.inputKey(t, task.ID)) {
		t.Error("an input was written from an upload over the limit")
	}
	if got := e.get(t, task.ID); got.Status != s3task.StatusCreated {
		t.Errorf("task %s after the refused Submit, want created", got.Status)
	}
}
