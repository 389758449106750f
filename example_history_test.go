package s3task_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/s3task/s3task"
)

// The record keeps the latest attempts of a task (Task.History): which
// worker ran each, when, and how it ended. LastError describes only the
// latest failure, so once attempt 2 succeeds it is empty; attempt 1's
// error is still in the history. A task detail page lists it as it is.
func ExampleTask_History() {
	store, _ := exampleStore(nil)
	ctx := context.Background()
	worker, err := s3task.NewWorker(store, s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		if job.Task.Attempt == 1 {
			return s3task.WithCategory(errors.New("upstream answered 503"), "upstream")
		}
		return nil
	}), &s3task.WorkerOptions{ID: "worker-1", HeartbeatInterval: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	task := queueTask(store, s3task.CreateParams{Name: "nightly export"}, "a,b\n")
	if _, err := worker.RunTask(ctx, task.ID); err != nil { // attempt 1 fails
		log.Fatal(err)
	}
	if _, err := store.Retry(ctx, task.ID); err != nil { // an operator skips the backoff
		log.Fatal(err)
	}
	task, err = worker.RunTask(ctx, task.ID) // attempt 2 completes
	if err != nil {
		log.Fatal(err)
	}

	fmt.Printf("%s after %d attempts, last error %q\n", task.Status, task.Attempt, task.LastError)
	for _, a := range task.History {
		fmt.Printf("attempt %d by %s (heartbeats every %s): %s", a.Number, a.WorkerID, a.HeartbeatInterval, a.Outcome)
		if a.Error != "" {
			fmt.Printf(" [%s] %s", a.ErrorCategory, a.Error)
		}
		fmt.Println()
	}
	// Output:
	// completed after 2 attempts, last error ""
	// attempt 1 by worker-1 (heartbeats every 2s): failed [upstream] upstream answered 503
	// attempt 2 by worker-1 (heartbeats every 2s): completed
}
