package s3task_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"strings"
	"time"

	"github.com/s3task/s3task"
)

// A handler's error decides what happens next. A plain error is retried
// while attempts are left; Permanent ends the task at once; RetryAfter asks
// for the next attempt no sooner than the given time, which suits an
// upstream that answered "slow down".
func ExamplePermanent() {
	store, _ := exampleStore(nil)
	ctx := context.Background()
	errUpstreamBusy := errors.New("upstream: 429 too many requests")
	worker, err := s3task.NewWorker(store, s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		switch job.Task.Name {
		case "unparsable":
			return s3task.Permanent(errors.New("line 3: not a CSV"))
		case "throttled":
			return s3task.RetryAfter(errUpstreamBusy, time.Minute)
		}
		return errors.New("disk full")
	}), nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, name := range []string{"unparsable", "throttled", "unlucky"} {
		task := queueTask(store, s3task.CreateParams{Name: name, MaxAttempts: 3}, "a,b\n")
		task, err := worker.RunTask(ctx, task.ID)
		if err != nil {
			log.Fatal(err)
		}
		retry := "no retry"
		switch {
		case task.RetryAt.IsZero():
		case time.Until(task.RetryAt) > 50*time.Second:
			retry = "retry in a minute"
		default:
			retry = "retry after the usual backoff"
		}
		fmt.Printf("%s: %s (%s), %s: %s\n", task.Name, task.Status, task.ErrorCategory, retry, task.LastError)
	}
	// Output:
	// unparsable: failed (permanent), no retry: line 3: not a CSV
	// throttled: failed (transient), retry in a minute: upstream: 429 too many requests
	// unlucky: failed (transient), retry after the usual backoff: disk full
}

// Get reads a task's record, the whole state of the task, with one GET: a
// host's status page or API answers from it.
func ExampleStore_Get() {
	store, _ := exampleStore(nil)
	ctx := context.Background()
	created := queueTask(store, s3task.CreateParams{Name: "June import", Type: "csv", CreatedBy: "ada"}, "a,b\n")

	task, err := store.Get(ctx, created.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.Name, "by", task.CreatedBy+":", task.Status, "attempts used", task.AttemptsUsed(), "of", task.MaxAttempts)

	_, err = store.Get(ctx, s3task.NewID()) // a valid ID of no task
	fmt.Println("unknown ID:", errors.Is(err, s3task.ErrNotFound))
	_, err = store.Get(ctx, "../etc/passwd")
	fmt.Println("not an ID:", errors.Is(err, s3task.ErrInvalidID))
	// Output:
	// June import by ada: queued attempts used 0 of 3
	// unknown ID: true
	// not an ID: true
}

// A task that failed for good stays failed until Retry, which verifies
// the input again and queues the task with a fresh allowance of attempts.
// Retry of a task that has not failed is refused.
func ExampleStore_Retry() {
	store, _ := exampleStore(nil)
	ctx := context.Background()
	fixed := false
	worker, err := s3task.NewWorker(store, s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		if !fixed {
			return s3task.Permanent(errors.New("the price list is missing"))
		}
		return nil
	}), nil)
	if err != nil {
		log.Fatal(err)
	}
	task := queueTask(store, s3task.CreateParams{Name: "invoice run"}, "a,b\n")
	task, err = worker.RunTask(ctx, task.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.Status, "retryable:", task.Retryable())

	fixed = true // an operator uploads the price list, then retries
	task, err = store.Retry(ctx, task.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("after Retry:", task.Status)
	task, err = worker.RunTask(ctx, task.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.Status, "in attempt", task.Attempt)

	_, err = store.Retry(ctx, task.ID)
	var te *s3task.TransitionError
	fmt.Println("retry a completed task:", errors.As(err, &te), te.From)
	// Output:
	// failed retryable: true
	// after Retry: queued
	// completed in attempt 2
	// retry a completed task: true completed
}

// PresignDownload hands a client a short-lived GET of the completed task's
// output, so the file goes from S3 to the browser without passing through
// the host; OpenOutput reads it in the host instead.
func ExampleStore_PresignDownload() {
	store, mem := exampleStore(nil)
	ctx := context.Background()
	worker, err := s3task.NewWorker(store, s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		return job.WriteOutput(ctx, strings.NewReader("name,ok\nada,yes\n"))
	}), nil)
	if err != nil {
		log.Fatal(err)
	}
	task := queueTask(store, s3task.CreateParams{Name: "report"}, "name\nada\n")
	if _, err := worker.RunTask(ctx, task.ID); err != nil {
		log.Fatal(err)
	}

	get, err := store.PresignDownload(ctx, task.ID, 5*time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	// What the browser does with the URL (here through the in-process S3's
	// transport; a real client simply follows it).
	req, err := http.NewRequestWithContext(ctx, get.Method, get.URL, nil)
	if err != nil {
		log.Fatal(err)
	}
	req.Header = get.Header.Clone()
	resp, err := (&http.Client{Transport: mem.Transport()}).Do(req)
	if err != nil {
		log.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Printf("%s %d: %q\n", get.Method, resp.StatusCode, body)

	unfinished := queueTask(store, s3task.CreateParams{Name: "not yet"}, "x\n")
	_, err = store.PresignDownload(ctx, unfinished.ID, 5*time.Minute)
	fmt.Println("before completion:", errors.Is(err, s3task.ErrNotCompleted))
	// Output:
	// GET 200: "name,ok\nada,yes\n"
	// before completion: true
}

// Purge deletes finished tasks created before a cutoff, folder and record
// (here the input and the record: the handler wrote no output); a dry run
// says what it would delete. Unfinished tasks are kept.
func ExampleStore_Purge() {
	store, mem := exampleStore(nil)
	ctx := context.Background()
	worker, err := s3task.NewWorker(store, s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error { return nil }), nil)
	if err != nil {
		log.Fatal(err)
	}
	done := queueTask(store, s3task.CreateParams{Name: "done"}, "x\n")
	if _, err := worker.RunTask(ctx, done.ID); err != nil {
		log.Fatal(err)
	}
	queueTask(store, s3task.CreateParams{Name: "waiting"}, "x\n")

	// Purge leaves a task until a minute after its last change; the test
	// server's clock moves on instead of the example waiting.
	mem.Advance(2 * time.Minute)
	cutoff := store.Now() // in real use, days ago
	dry, err := store.Purge(ctx, cutoff, s3task.PurgeOptions{DryRun: true})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("dry run: would purge %d of %d, keep %d\n", len(dry.Purged), dry.Tasks, dry.Kept)
	report, err := store.Purge(ctx, cutoff, s3task.PurgeOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("purged %d task(s), %d objects\n", len(report.Purged), report.Objects)
	_, err = store.Get(ctx, done.ID)
	fmt.Println("done is gone:", errors.Is(err, s3task.ErrNotFound))
	// Output:
	// dry run: would purge 1 of 2, keep 1
	// purged 1 task(s), 2 objects
	// done is gone: true
}
