package s3task_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"strings"
	"time"

	"github.com/s3task/s3task"
)

// A worker with a Mux: each task type gets its handler. The worker runs in a
// goroutine until its context ends or Stop is called; a hook tells when the
// task is done.
func ExampleWorker() {
	store, _ := exampleStore(&s3task.StoreOptions{InputExt: ".txt", OutputExt: ".txt"})
	ctx := context.Background()

	var mux s3task.Mux // the zero value is ready to use
	err := mux.HandleFunc("shout", func(ctx context.Context, job *s3task.Job) error {
		in, err := job.OpenInput(ctx)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := job.CreateOutput(ctx)
		if err != nil {
			return err
		}
		text, err := io.ReadAll(in)
		if err != nil {
			out.Discard()
			return err // a plain error: retried while attempts are left
		}
		if _, err := out.Write([]byte(strings.ToUpper(string(text)))); err != nil {
			out.Discard()
			return err
		}
		job.SetProgress(s3task.Progress{RowCount: 1, ProcessedCount: 1, SuccessCount: 1})
		return out.Close()
	})
	if err != nil {
		log.Fatal(err)
	}

	done := make(chan *s3task.Task, 1)
	worker, err := s3task.NewWorker(store, &mux, &s3task.WorkerOptions{
		Concurrency: 2,
		Hooks:       s3task.Hooks{OnComplete: func(t *s3task.Task) { done <- t }},
	})
	if err != nil {
		log.Fatal(err)
	}
	go worker.Run(ctx) // returns once stopped and its running tasks are settled

	// A Submit through the same Store wakes the worker at once.
	queueTask(store, s3task.CreateParams{Name: "greeting", Type: "shout"}, "hello, world")
	task := <-done
	fmt.Println("status:", task.Status, "attempt:", task.Attempt, "rows processed:", task.ProcessedCount)

	// At shutdown, bound the wait.
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := worker.Stop(stopCtx); err != nil {
		log.Fatal(err)
	}

	out, err := store.OpenOutput(ctx, task.ID)
	if err != nil {
		log.Fatal(err)
	}
	defer out.Close()
	text, err := io.ReadAll(out)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("output:", string(text))
	// Output:
	// status: completed attempt: 1 rows processed: 1
	// output: HELLO, WORLD
}

// RunTask runs one given task now, synchronously, with the worker's
// handler, whether or not Run is running: for work an application wants
// done on demand, and for tests. A task that is not due is refused.
func ExampleWorker_RunTask() {
	store, _ := exampleStore(nil)
	ctx := context.Background()

	var mux s3task.Mux
	err := mux.HandleFunc("report", func(ctx context.Context, job *s3task.Job) error {
		// ... build the report ...
		job.SetProgress(s3task.Progress{RowCount: 3, ProcessedCount: 3, SuccessCount: 3})
		return nil // a task may complete without an output
	})
	if err != nil {
		log.Fatal(err)
	}
	worker, err := s3task.NewWorker(store, &mux, nil)
	if err != nil {
		log.Fatal(err)
	}

	task := queueTask(store, s3task.CreateParams{Name: "June report", Type: "report"}, "2026-06")
	task, err = worker.RunTask(ctx, task.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.Name, task.Status, "in attempt", task.Attempt, "rows:", task.SuccessCount)

	// Finished tasks are not due; nor are tasks of a type the Mux lacks.
	_, err = worker.RunTask(ctx, task.ID)
	fmt.Println("again:", errors.Is(err, s3task.ErrInvalidTransition))
	other := queueTask(store, s3task.CreateParams{Type: "translate"}, "un deux")
	_, err = worker.RunTask(ctx, other.ID)
	fmt.Println("unserved type:", errors.Is(err, s3task.ErrUnknownTaskType))
	// Output:
	// June report completed in attempt 1 rows: 3
	// again: true
	// unserved type: true
}

// Stopping a worker while it runs a task: the handler gets ShutdownTimeout
// to finish, then its context ends with ErrWorkerStopping; the lease is kept
// alive until it returns, and the task goes back to the queue without using
// up an attempt. Stop's context bounds the whole wait.
func ExampleWorker_Stop() {
	store, _ := exampleStore(nil)
	ctx := context.Background()

	started := make(chan struct{})
	worker, err := s3task.NewWorker(store, s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		close(started)
		<-ctx.Done() // a long job, interrupted
		fmt.Println("handler stopped:", context.Cause(ctx))
		return ctx.Err()
	}), &s3task.WorkerOptions{ShutdownTimeout: 50 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	go worker.Run(ctx)

	task := queueTask(store, s3task.CreateParams{Name: "long job"}, "data")
	<-started

	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := worker.Stop(stopCtx); err != nil {
		log.Fatal(err)
	}
	got, err := store.Get(ctx, task.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s; attempt %d, released %d, used %d of %d\n", got.Status, got.Attempt, got.ReleasedAttempts, got.AttemptsUsed(), got.MaxAttempts)
	// Output:
	// handler stopped: s3task: worker stopping
	// queued; attempt 1, released 1, used 0 of 3
}
