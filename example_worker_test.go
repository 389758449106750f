package s3task_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/s3test"
)

// A worker with a Mux: each task type gets its handler. The worker runs in a
// goroutine until its context ends; a hook tells when the task is done.
func ExampleWorker() {
	srv, err := s3test.Start()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	store, err := s3task.NewStore(srv.Client(), srv.Bucket, &s3task.StoreOptions{
		InputExt: ".txt", OutputExt: ".txt", Logger: quiet,
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	mux := s3task.NewMux()
	err = mux.HandleFunc("shout", func(ctx context.Context, job *s3task.Job) error {
		in, err := job.OpenInput(ctx)
		if err != nil {
			return err
		}
		defer in.Close()
		text, err := io.ReadAll(in)
		if err != nil {
			return err
		}
		job.SetProgress(s3task.Progress{RowCount: 1, ProcessedCount: 1, SuccessCount: 1})
		return job.WriteOutput(ctx, strings.NewReader(strings.ToUpper(string(text))))
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	done := make(chan *s3task.Task, 1)
	worker, err := s3task.NewWorker(store, mux, &s3task.WorkerOptions{
		PollInterval:    10 * time.Millisecond,
		MaxPollInterval: 100 * time.Millisecond,
		Logger:          quiet,
		Hooks:           s3task.Hooks{OnComplete: func(t *s3task.Task) { done <- t }},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- worker.Run(runCtx) }()
	defer func() {
		stop() // shut the worker down and wait until it has
		<-stopped
	}()

	task, err := store.Create(ctx, s3task.CreateParams{Name: "greeting", Type: "shout"})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := store.UploadInput(ctx, task.ID, strings.NewReader("hello, world")); err != nil {
		fmt.Println(err)
		return
	}
	if _, err := store.Submit(ctx, task.ID); err != nil {
		fmt.Println(err)
		return
	}

	select {
	case <-done:
	case <-time.After(20 * time.Second):
		fmt.Println("the task did not complete")
		return
	}
	got, err := store.Get(ctx, task.ID)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("status:", got.Status)
	fmt.Println("attempt:", got.Attempt)
	fmt.Println("rows processed:", got.ProcessedCount)

	out, err := store.OpenOutput(ctx, task.ID)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer out.Close()
	text, err := io.ReadAll(out)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("output:", string(text))
	// Output:
	// status: completed
	// attempt: 1
	// rows processed: 1
	// output: HELLO, WORLD
}

// Stopping a worker while it runs a task: the handler gets ShutdownTimeout
// to finish, then its context ends with ErrWorkerStopping; the lease is kept
// alive until it returns, and the task goes back to the queue without using
// up an attempt. Stop's context bounds the whole wait.
func ExampleWorker_Stop() {
	srv, err := s3test.Start()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	store, err := s3task.NewStore(srv.Client(), srv.Bucket, &s3task.StoreOptions{Logger: quiet})
	if err != nil {
		fmt.Println(err)
		return
	}

	started := make(chan struct{})
	worker, err := s3task.NewWorker(store, s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		close(started)
		<-ctx.Done() // a long job, interrupted
		fmt.Println("handler stopped:", context.Cause(ctx))
		return ctx.Err()
	}), &s3task.WorkerOptions{
		PollInterval:    10 * time.Millisecond,
		ShutdownTimeout: 50 * time.Millisecond,
		Logger:          quiet,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	go worker.Run(ctx)

	task, err := store.Create(ctx, s3task.CreateParams{Name: "long job"})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := store.UploadInput(ctx, task.ID, strings.NewReader("data")); err != nil {
		fmt.Println(err)
		return
	}
	if _, err := store.Submit(ctx, task.ID); err != nil {
		fmt.Println(err)
		return
	}
	<-started

	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := worker.Stop(stopCtx); err != nil {
		fmt.Println("stop:", err)
		return
	}
	got, err := store.Get(ctx, task.ID)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s; attempt %d, released %d, used %d of %d\n", got.Status, got.Attempt, got.ReleasedAttempts, got.AttemptsUsed(), got.MaxAttempts)
	// Output:
	// handler stopped: s3task: worker stopping
	// queued; attempt 1, released 1, used 0 of 3
}
