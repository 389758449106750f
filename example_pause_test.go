package s3task_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/s3task/s3task"
)

// Pause holds back the tasks of one type, say while the service their
// handler calls is down, and lets the others run. The paused tasks wait,
// queued, and Resume lets workers claim them again. Here RunTask stands in
// for a worker's poll, which leaves a paused type's tasks alone the same
// way: it refuses them with ErrTypePaused.
func ExampleStore_Pause() {
	store, _ := exampleStore(nil)
	ctx := context.Background()
	worker, err := s3task.NewWorker(store, s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		fmt.Printf("ran %s (%s)\n", job.Task.Name, job.Task.Type)
		return nil
	}), nil)
	if err != nil {
		log.Fatal(err)
	}
	report := queueTask(store, s3task.CreateParams{Name: "report", Type: "pdf"}, "x\n")
	invoice := queueTask(store, s3task.CreateParams{Name: "invoice", Type: "csv"}, "x\n")

	if err := store.Pause(ctx, "pdf"); err != nil {
		log.Fatal(err)
	}
	paused, err := store.Paused(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("paused:", paused)
	if _, err := worker.RunTask(ctx, report.ID); errors.Is(err, s3task.ErrTypePaused) {
		fmt.Println("the report waits: its type is paused")
	}
	if _, err := worker.RunTask(ctx, invoice.ID); err != nil {
		log.Fatal(err)
	}

	if err := store.Resume(ctx, "pdf"); err != nil {
		log.Fatal(err)
	}
	done, err := worker.RunTask(ctx, report.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("report:", done.Status)
	// Output:
	// paused: [pdf]
	// the report waits: its type is paused
	// ran invoice (csv)
	// ran report (pdf)
	// report: completed
}
