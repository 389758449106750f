package s3task_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"path"
	"strings"
	"time"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/s3test"
)

// A store is built on an S3 client the caller configures; NewStore checks the
// options and names any field it refuses.
func ExampleNewStore() {
	srv, err := s3test.Start()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	store, err := s3task.NewStore(srv.Client(), srv.Bucket, &s3task.StoreOptions{Prefix: "reports/", InputExt: ".csv"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("tasks live under", store.Prefix())

	_, err = s3task.NewStore(srv.Client(), srv.Bucket, &s3task.StoreOptions{Prefix: "reports"})
	fmt.Println("invalid options:", errors.Is(err, s3task.ErrInvalidOptions))
	// Output:
	// tasks live under reports/
	// invalid options: true
}

// A producer next to the service creates a task, uploads its input and
// submits it; a worker picks it up from there.
func ExampleStore_Submit() {
	srv, err := s3test.Start()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	ctx := context.Background()

	store, err := s3task.NewStore(srv.Client(), srv.Bucket, &s3task.StoreOptions{InputExt: ".csv"})
	if err != nil {
		log.Fatal(err)
	}
	task, err := store.Create(ctx, s3task.CreateParams{Name: "March invoices", Type: "invoices.import"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("created:", task.Status)

	// Browsers would rather use PresignUpload or PresignUploadForm.
	if err := store.UploadInput(ctx, task.ID, strings.NewReader("id,amount\n1,9.50\n")); err != nil {
		log.Fatal(err)
	}
	task, err = store.Submit(ctx, task.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("submitted:", task.Status, "with", task.InputSize, "bytes of input")
	key, err := store.InputKey(task.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("input object:", path.Base(key))

	// Submitting twice is harmless.
	again, err := store.Submit(ctx, task.ID)
	fmt.Println("again:", again.Status, err, again.Revision == task.Revision)
	// Output:
	// created: created
	// submitted: queued with 17 bytes of input
	// input object: input.csv
	// again: queued <nil> true
}

// A task can wait for a time before any worker starts it: created with
// RunAt, or moved with Schedule while it is queued. Its marker is named
// after that time, so workers do not look at it before.
func ExampleStore_Schedule() {
	srv, err := s3test.Start()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	ctx := context.Background()

	store, err := s3task.NewStore(srv.Client(), srv.Bucket, nil)
	if err != nil {
		log.Fatal(err)
	}
	tonight := time.Now().Add(6 * time.Hour)
	task, err := store.Create(ctx, s3task.CreateParams{Name: "nightly export", RunAt: tonight})
	if err != nil {
		log.Fatal(err)
	}
	if err := store.UploadInput(ctx, task.ID, strings.NewReader("x\n")); err != nil {
		log.Fatal(err)
	}
	task, err = store.Submit(ctx, task.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.Status, "and scheduled:", task.Scheduled(time.Now()), "due at RunAt:", task.DueAt.Equal(task.RunAt))

	// The operator wants it now after all.
	task, err = store.Schedule(ctx, task.ID, time.Time{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.Status, "and scheduled:", task.Scheduled(time.Now()))

	// Only a task not started yet can be scheduled.
	task, err = store.Cancel(ctx, task.ID, "not needed")
	if err != nil {
		log.Fatal(err)
	}
	_, err = store.Schedule(ctx, task.ID, tonight)
	fmt.Println("schedule an abandoned task:", errors.Is(err, s3task.ErrInvalidTransition))
	// Output:
	// queued and scheduled: true due at RunAt: true
	// queued and scheduled: false
	// schedule an abandoned task: true
}

// List pages through the tasks, newest first; pass NextCursor back to
// continue.
func ExampleStore_List() {
	srv, err := s3test.Start()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	ctx := context.Background()

	store, err := s3task.NewStore(srv.Client(), srv.Bucket, nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, name := range []string{"alpha", "bravo", "charlie"} {
		if _, err := store.Create(ctx, s3task.CreateParams{Name: name}); err != nil {
			log.Fatal(err)
		}
	}

	var all []*s3task.Task
	opts := s3task.ListOptions{Limit: 2}
	for n := 1; ; n++ {
		page, err := store.List(ctx, opts)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("page %d: %d tasks, %d broken\n", n, len(page.Tasks), len(page.Broken))
		all = append(all, page.Tasks...)
		if page.NextCursor == "" {
			break
		}
		opts.Cursor = page.NextCursor
	}

	for _, t := range all {
		fmt.Println(t.Name, t.Status)
	}
	// Output:
	// page 1: 2 tasks, 0 broken
	// page 2: 1 tasks, 0 broken
	// charlie created
	// bravo created
	// alpha created
}

// Cancel abandons a task for good; cancelling it again changes nothing.
func ExampleStore_Cancel() {
	srv, err := s3test.Start()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	ctx := context.Background()

	store, err := s3task.NewStore(srv.Client(), srv.Bucket, nil)
	if err != nil {
		log.Fatal(err)
	}
	task, err := store.Create(ctx, s3task.CreateParams{Name: "nightly export"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("cancelable:", task.Cancelable())

	task, err = store.Cancel(ctx, task.ID, "customer withdrew the request")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: %s\n", task.Status, task.CancelReason)
	fmt.Println("cancelable:", task.Cancelable(), "terminal:", task.Terminal())

	again, err := store.Cancel(ctx, task.ID, "a second reason")
	fmt.Println("again:", again.Status, again.CancelReason == task.CancelReason, err)

	_, err = store.Submit(ctx, task.ID)
	fmt.Println("submit after cancel refused:", errors.Is(err, s3task.ErrInvalidTransition))
	// Output:
	// cancelable: true
	// abandoned: customer withdrew the request
	// cancelable: false terminal: true
	// again: abandoned true <nil>
	// submit after cancel refused: true
}

// CheckBackend proves, once at start-up, that the bucket refuses conflicting
// conditional writes. A store that ignores If-None-Match and If-Match is
// refused.
func ExampleStore_CheckBackend() {
	srv, err := s3test.Start()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	ctx := context.Background()

	store, err := s3task.NewStore(srv.Client(), srv.Bucket, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := store.CheckBackend(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("conditional writes are enforced")

	lax, err := s3task.NewStore(srv.Client(s3test.StripConditionalHeaders), srv.Bucket, nil)
	if err != nil {
		log.Fatal(err)
	}
	err = lax.CheckBackend(ctx)
	fmt.Println("lax store refused:", errors.Is(err, s3task.ErrConditionalWritesUnsupported))
	// Output:
	// conditional writes are enforced
	// lax store refused: true
}
