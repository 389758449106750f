package s3task_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"path"
	"time"

	"github.com/s3task/s3task"
)

// thumbnailArgs names its task type, so neither the producer nor the
// handler spells it.
type thumbnailArgs struct {
	Width int `json:"width"`
}

func (thumbnailArgs) TaskType() string { return "thumbnail" }

// An argument type that names its task type ties the two together: Create
// takes the type from the Args, HandleArgs registers the handler under it,
// and a Store told the types its fleet serves refuses a task no worker
// would ever claim.
func ExampleHandleArgs() {
	var mux s3task.Mux
	err := s3task.HandleArgs(&mux, func(ctx context.Context, job *s3task.Job, args thumbnailArgs) error {
		fmt.Println("thumbnail of width", args.Width)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	store, _ := exampleStore(&s3task.StoreOptions{Types: mux.Types()})
	task := queueTask(store, s3task.CreateParams{Args: thumbnailArgs{Width: 320}}, "image bytes")
	fmt.Println("type:", task.Type)

	worker, err := s3task.NewWorker(store, &mux, nil)
	if err != nil {
		log.Fatal(err)
	}
	if task, err = worker.RunTask(context.Background(), task.ID); err != nil {
		log.Fatal(err)
	}
	fmt.Println("status:", task.Status)

	_, err = store.Create(context.Background(), s3task.CreateParams{Type: "thumbnial"})
	fmt.Println("misspelt type refused:", errors.Is(err, s3task.ErrUnknownTaskType))
	// Output:
	// type: thumbnail
	// thumbnail of width 320
	// status: completed
	// misspelt type refused: true
}

// CreateOrGet tells a resent request from a new one: with the same Key,
// the second call finds the task the first made. CreateForUpload hands out
// an upload only while the task still takes one.
func ExampleStore_CreateOrGet() {
	store, _ := exampleStore(nil)
	ctx := context.Background()
	p := s3task.CreateParams{Name: "June import", Key: "form-7f3a"}
	first, found, err := store.CreateOrGet(ctx, p)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("first call found an earlier task:", found)
	again, found, err := store.CreateOrGet(ctx, p)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("second call found it:", found, "same task:", again.ID == first.ID)

	task := queueTask(store, s3task.CreateParams{Name: "July import", Key: "form-8b21"}, "a,b\n")
	resent, up, err := store.CreateForUpload(ctx, s3task.CreateParams{Name: "July import", Key: "form-8b21"}, time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("resent after submit:", resent.ID == task.ID, resent.Status, "upload offered:", up != nil)
	// Output:
	// first call found an earlier task: false
	// second call found it: true same task: true
	// resent after submit: true queued upload offered: false
}

// Now is the S3 server's clock as the Store knows it: the clock RunAt and
// Schedule are judged by, whatever the local clock says.
func ExampleStore_Now() {
	store, _ := exampleStore(nil)
	ctx := context.Background()
	task := queueTask(store, s3task.CreateParams{Name: "nightly report"}, "a,b\n")
	task, err := store.Schedule(ctx, task.ID, store.Now().Add(time.Hour))
	if err != nil {
		log.Fatal(err)
	}
	wait := task.RunAt.Sub(store.Now())
	fmt.Println("starts within the hour:", wait > 59*time.Minute && wait <= time.Hour)
	// Output:
	// starts within the hour: true
}

// RetryAfter lets a handler choose the wait before its next attempt, such
// as the one a rate-limited upstream asked for.
func ExampleRetryAfter() {
	store, _ := exampleStore(nil)
	worker, err := s3task.NewWorker(store, s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		return s3task.RetryAfter(errors.New("upstream said 429"), 10*time.Minute)
	}), nil)
	if err != nil {
		log.Fatal(err)
	}
	task := queueTask(store, s3task.CreateParams{Name: "sync prices"}, "a,b\n")
	if task, err = worker.RunTask(context.Background(), task.ID); err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.Status, "final:", task.Terminal(), "retry in:", task.RetryAt.Sub(task.UpdatedAt).Round(time.Second))
	// Output:
	// failed final: false retry in: 10m0s
}

// Stats counts the tasks by status, type and failure for a dashboard or an
// alert: here one task done, one waiting for its retry and one not yet
// uploaded.
func ExampleStore_Stats() {
	store, _ := exampleStore(nil)
	ctx := context.Background()
	worker, err := s3task.NewWorker(store, s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		if job.Task.Name == "flaky" {
			return errors.New("timeout")
		}
		return nil
	}), nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, name := range []string{"fine", "flaky"} {
		task := queueTask(store, s3task.CreateParams{Name: name, Type: "csv"}, "a,b\n")
		if _, err := worker.RunTask(ctx, task.ID); err != nil {
			log.Fatal(err)
		}
	}
	if _, err := store.Create(ctx, s3task.CreateParams{Name: "waiting for its file"}); err != nil {
		log.Fatal(err)
	}
	stats, err := store.Stats(ctx, s3task.StatsOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("tasks:", stats.Tasks, "completed:", stats.ByStatus[s3task.StatusCompleted], "awaiting input:", stats.AwaitingInput)
	fmt.Println("waiting for a retry:", stats.WaitingRetry, "unfinished csv:", stats.UnfinishedByType["csv"], "failures:", stats.Failures)
	// Output:
	// tasks: 3 completed: 1 awaiting input: 1
	// waiting for a retry: 1 unfinished csv: 1 failures: map[transient:1]
}

// StoreOptions.Files gives a task type file names and an upload type of its
// own, so one Store and one Worker serve images beside CSV files.
func ExampleFileOptions() {
	store, _ := exampleStore(&s3task.StoreOptions{
		InputExt: ".csv", OutputExt: ".csv", InputContentType: "text/csv",
		Files: map[string]s3task.FileOptions{
			"thumbnail": {InputExt: ".png", OutputExt: ".webp", InputContentType: "image/png"},
		},
	})
	ctx := context.Background()
	for _, p := range []s3task.CreateParams{{Args: thumbnailArgs{Width: 320}}, {Type: "import"}} {
		task, err := store.Create(ctx, p)
		if err != nil {
			log.Fatal(err)
		}
		put, err := store.PresignUpload(ctx, task.ID, time.Minute)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: %s, uploaded as %s\n", task.Type, path.Base(task.InputPath), put.Header.Get("Content-Type"))
	}
	// Output:
	// thumbnail: input.png, uploaded as image/png
	// import: input.csv, uploaded as text/csv
}
