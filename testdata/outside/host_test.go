package host

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/s3tasktest"
)

func setup(t *testing.T) (*s3tasktest.S3, *s3task.Store, *s3task.Mux) {
	mux, err := NewMux()
	if err != nil {
		t.Fatal(err)
	}
	s3 := s3tasktest.NewS3(t)
	return s3, s3.NewStore(t, StoreOptions(mux)), mux
}

func TestGreet(t *testing.T) {
	_, store, mux := setup(t)
	ctx := AsTenant(context.Background(), "acme")
	task, err := store.Create(ctx, s3task.CreateParams{Args: GreetArgs{Name: "outside"}})
	if err != nil {
		t.Fatal(err)
	}
	if task.Type != "greet" || task.Metadata["tenant"] != "acme" {
		t.Fatalf("created type %q, metadata %v", task.Type, task.Metadata)
	}
	if err := store.UploadInput(ctx, task.ID, strings.NewReader("unused input")); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Submit(ctx, task.ID); err != nil {
		t.Fatal(err)
	}
	res := s3tasktest.Run(t, store, mux, task.ID)
	if res.Err != nil {
		t.Fatalf("handler failed: %v", res.Err)
	}
	if got, want := string(res.Output), "hello, outside\n"; got != want {
		t.Errorf("output = %q, want %q", got, want)
	}
	created := s3tasktest.RequireCreated[GreetArgs](t, store)
	if created.Args.Name != "outside" || created.Task.Status != s3task.StatusCompleted {
		t.Errorf("RequireCreated: %+v %s", created.Args, created.Task.Status)
	}
}

// A type no worker serves is refused at once; a repeated key is seen as
// a repeat.
func TestKindsAndDuplicates(t *testing.T) {
	_, store, _ := setup(t)
	ctx := AsTenant(context.Background(), "acme")
	if _, err := store.Create(ctx, s3task.CreateParams{Type: "gret"}); !errors.Is(err, s3task.ErrUnknownTaskType) {
		t.Errorf("misspelt type: %v", err)
	}
	p := s3task.CreateParams{Args: GreetArgs{Name: "once"}, Key: "form-1"}
	first, found, err := store.CreateOrGet(ctx, p)
	if err != nil || found {
		t.Fatalf("first: %v %v", found, err)
	}
	again, found, err := store.CreateOrGet(ctx, p)
	if err != nil || !found || again.ID != first.ID {
		t.Fatalf("repeat: %v %v %v", again, found, err)
	}
}

// The tenant check guards reads and writes in one place, and a tenant's
// list is full pages of its own tasks.
func TestTenants(t *testing.T) {
	_, store, _ := setup(t)
	acme := AsTenant(context.Background(), "acme")
	other := AsTenant(context.Background(), "other")
	var ids []string
	for i := range 12 {
		ctx := other
		if i%2 == 0 {
			ctx = acme
		}
		task, err := store.Create(ctx, s3task.CreateParams{Args: GreetArgs{Name: "n"}})
		if err != nil {
			t.Fatal(err)
		}
		if ctx == acme {
			ids = append(ids, task.ID)
		}
	}
	if _, err := store.Get(other, ids[0]); !errors.Is(err, ErrForbidden) {
		t.Errorf("another tenant's Get: %v", err)
	}
	if _, err := store.Cancel(other, ids[0], "mine"); !errors.Is(err, ErrForbidden) {
		t.Errorf("another tenant's Cancel: %v", err)
	}
	if _, err := store.PresignUpload(other, ids[0], time.Minute); !errors.Is(err, ErrForbidden) {
		t.Errorf("another tenant's PresignUpload: %v", err)
	}
	page, err := store.List(acme, s3task.ListOptions{Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Tasks) != 5 || page.NextCursor == "" {
		t.Fatalf("acme's first page: %d tasks, want a full page of 5", len(page.Tasks))
	}
	for _, task := range page.Tasks {
		if task.Metadata["tenant"] != "acme" {
			t.Errorf("acme's list shows %s of %q", task.ID, task.Metadata["tenant"])
		}
	}
}

// A retry falls due after exactly its wait; the presigned URLs work through
// the kit's HTTP client.
func TestRetryAndPresignedURLs(t *testing.T) {
	s3, store, mux := setup(t)
	ctx := AsTenant(context.Background(), "acme")
	task, up, err := store.CreateForUpload(ctx, s3task.CreateParams{Args: GreetArgs{Name: "busy bee"}}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if status, body := s3.Do(t, up.Put, []byte("x")); status != http.StatusOK {
		t.Fatalf("upload: %d %s", status, body)
	}
	if _, err := store.Submit(ctx, task.ID); err != nil {
		t.Fatal(err)
	}
	if ran := s3tasktest.Drain(t, store, mux); len(ran) != 1 || !errors.Is(ran[0].Err, ErrBusy) {
		t.Fatalf("first drain: %d results", len(ran))
	}
	s3.Advance(RetryWait)
	ran := s3tasktest.Drain(t, store, mux)
	if len(ran) != 1 || ran[0].Task.Status != s3task.StatusCompleted {
		t.Fatalf("after exactly the wait: %d results", len(ran))
	}
	down, err := store.PresignDownload(ctx, task.ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if status, body := s3.Do(t, down, nil); status != http.StatusOK || string(body) != "hello, busy bee\n" {
		t.Errorf("download: %d %q", status, body)
	}
}

// The development Store runs on the public in-memory S3.
func TestDevStore(t *testing.T) {
	mux, err := NewMux()
	if err != nil {
		t.Fatal(err)
	}
	store, srv, err := DevStore(mux)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx := AsTenant(context.Background(), "dev")
	task, up, err := store.CreateForUpload(ctx, s3task.CreateParams{Args: GreetArgs{Name: "laptop"}}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(up.Put.Method, up.Put.URL, strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range up.Put.Header {
		req.Header[k] = v
	}
	resp, err := (&http.Client{Transport: srv.Transport()}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("upload: %s", resp.Status)
	}
	worker, err := s3task.NewWorker(store, mux, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Submit(ctx, task.ID); err != nil {
		t.Fatal(err)
	}
	done, err := worker.RunTask(context.Background(), task.ID)
	if err != nil || done.Status != s3task.StatusCompleted {
		t.Fatalf("run: %v %v", done, err)
	}
}
