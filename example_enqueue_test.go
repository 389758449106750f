package s3task_test

import (
	"context"
	"fmt"
	"log"
	"strings"

	"github.com/s3task/s3task"
)

// A producer that holds its input (a cron job, another service) queues a
// task in one call. With a Key the call is safe to repeat: a retry after a
// crash finishes the task the first call began, and a repeat returns it.
// A type declared without input is queued with none.
func ExampleStore_Enqueue() {
	store, _ := exampleStore(&s3task.StoreOptions{
		Files: map[string]s3task.FileOptions{"nightly-export": {NoInput: true}},
	})
	ctx := context.Background()

	csv := "sku,qty\nA-1,3\n"
	p := s3task.CreateParams{Name: "orders.csv", Key: "upload-2026-12-07-0001"}
	task, err := store.Enqueue(ctx, p, strings.NewReader(csv))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.Status, task.InputSize, "bytes")

	again, err := store.Enqueue(ctx, p, strings.NewReader(csv))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("same task:", again.ID == task.ID)

	export, err := store.Enqueue(ctx, s3task.CreateParams{Type: "nightly-export", Key: "export-2026-12-06"}, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(export.Status, "without input:", export.NoInput)
	// Output:
	// queued 14 bytes
	// same task: true
	// queued without input: true
}
