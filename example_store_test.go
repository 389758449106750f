package s3task_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/s3test"
)

// A store is built on an S3 client the application configures. NewStore
// checks the options and names any field it refuses; CheckBackend, run once
// at start-up, proves the bucket enforces conditional writes.
func ExampleNewStore() {
	_, fakeS3 := exampleStore(nil) // stands in for the application's S3
	ctx := context.Background()
	client, bucket := fakeS3.Client(), fakeS3.Bucket

	store, err := s3task.NewStore(client, bucket, &s3task.StoreOptions{
		Prefix: "reports/", InputExt: ".csv", OutputExt: ".csv",
	})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := store.CheckBackend(ctx); err != nil {
		log.Fatal(err) // the bucket does not enforce conditional writes
	}
	fmt.Println("tasks live under", store.Prefix())

	_, err = s3task.NewStore(client, bucket, &s3task.StoreOptions{Prefix: "reports"})
	fmt.Println("invalid options:", errors.Is(err, s3task.ErrInvalidOptions))
	// Output:
	// tasks live under reports/
	// invalid options: true
}

// CheckBackend refuses a store that ignores If-None-Match and If-Match:
// workers sharing it could both claim one task.
func ExampleStore_CheckBackend() {
	_, fakeS3 := exampleStore(nil)
	ctx := context.Background()

	// A client whose requests lose their conditional headers on the way,
	// as they would on a store that does not support them.
	lax, err := s3task.NewStore(fakeS3.Client(s3test.StripConditionalHeaders), fakeS3.Bucket, nil)
	if err != nil {
		log.Fatal(err)
	}
	report, err := lax.CheckBackend(ctx)
	fmt.Println("refused:", errors.Is(err, s3task.ErrConditionalWritesUnsupported))
	fmt.Println("If-None-Match: * create:", report.ConditionalCreate)
	fmt.Println("If-Match update:", report.ConditionalUpdate)
	// Output:
	// refused: true
	// If-None-Match: * create: not enforced
	// If-Match update: not enforced
}

// The control side: a task is created with presigned uploads, the client
// sends its file straight to S3, and Submit checks the input and queues the
// task. The file never passes through the application.
func ExampleStore_CreateForUpload() {
	store, fakeS3 := exampleStore(&s3task.StoreOptions{InputExt: ".csv"})
	ctx := context.Background()

	task, up, err := store.CreateForUpload(ctx, s3task.CreateParams{
		Name: "June import", Type: "csv_import", CreatedBy: "ada",
	}, 15*time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	// up.Form is a size-capped POST form for a browser; up.Put a plain PUT.
	fmt.Println(task.Status, "with", up.Put.Method, "and a form capped at", up.Form.MaxSize>>20, "MiB")

	// What the client does with up.Put (here through the in-process S3's
	// transport; a browser or curl would use the URL as it is).
	req, err := http.NewRequest(up.Put.Method, up.Put.URL, strings.NewReader("name,email\nAda,ada@example.com\n"))
	if err != nil {
		log.Fatal(err)
	}
	for k, v := range up.Put.Header {
		req.Header[k] = v
	}
	resp, err := (&http.Client{Transport: fakeS3.Transport()}).Do(req)
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	fmt.Println("upload:", resp.Status)

	// Once the client says it is done:
	task, err = store.Submit(ctx, task.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.Status, "with", task.InputSize, "bytes of input")

	// The same upload a second time is refused: an input is written once.
	_, err = store.PresignUpload(ctx, task.ID, time.Minute)
	fmt.Println("presign after submit:", errors.Is(err, s3task.ErrInvalidTransition))
	// Output:
	// created with PUT and a form capped at 100 MiB
	// upload: 200 OK
	// queued with 31 bytes of input
	// presign after submit: true
}

// A producer next to the service creates a task, uploads its input and
// submits it; a worker picks it up from there.
func ExampleStore_Submit() {
	store, _ := exampleStore(&s3task.StoreOptions{InputExt: ".csv"})
	ctx := context.Background()

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

// With CreateParams.Key, creating a task is idempotent: every Create with
// the same key returns the task the first one made, for as long as that
// task exists. A form's submission token or an upstream event ID makes a
// good key: a double click or a resent request then makes one task.
func ExampleStore_Create_idempotent() {
	store, _ := exampleStore(nil)
	ctx := context.Background()

	p := s3task.CreateParams{Name: "June import", Type: "csv_import", Key: "upload-form-7f3a9c"}
	first, err := store.Create(ctx, p)
	if err != nil {
		log.Fatal(err)
	}
	// The same request again, say a retry after a timeout:
	again, err := store.Create(ctx, p)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("same task:", again.ID == first.ID, "key:", again.IdempotencyKey)

	// A later call's other parameters are not compared: the key decides.
	p.Name = "renamed"
	again, err = store.Create(ctx, p)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("name:", again.Name)

	// Another key, another task.
	p.Key = "upload-form-b21e04"
	other, err := store.Create(ctx, p)
	if err != nil {
		log.Fatal(err)
	}
	page, err := store.List(ctx, s3task.ListOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("new task:", other.ID != first.ID, "tasks in the bucket:", len(page.Tasks))
	// Output:
	// same task: true key: upload-form-7f3a9c
	// name: June import
	// new task: true tasks in the bucket: 2
}

// A task can wait for a time before any worker starts it: created with
// RunAt, or moved with Schedule while it is queued. Its marker is named
// after that time, so workers do not look at it before.
func ExampleStore_Schedule() {
	store, _ := exampleStore(nil)
	ctx := context.Background()

	tonight := time.Now().Add(6 * time.Hour)
	task := queueTask(store, s3task.CreateParams{Name: "nightly export", RunAt: tonight}, "x\n")
	fmt.Println(task.Status, "and scheduled:", task.Scheduled(time.Now()), "due at RunAt:", task.DueAt.Equal(task.RunAt))

	// The operator wants it now after all.
	task, err := store.Schedule(ctx, task.ID, time.Time{})
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
	store, _ := exampleStore(nil)
	ctx := context.Background()
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
	store, _ := exampleStore(nil)
	ctx := context.Background()

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
