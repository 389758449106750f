package s3task_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/s3task/s3task"
)

// Every running worker announces itself in the bucket, and Store.Workers
// lists them, for an operator's view of the fleet: what each serves, what
// it runs now, and whether it is alive. A worker that stops is gone from
// the list.
func ExampleStore_Workers() {
	store, _ := exampleStore(nil)
	ctx := context.Background()

	var mux s3task.Mux
	if err := mux.HandleFunc("report", func(context.Context, *s3task.Job) error { return nil }); err != nil {
		log.Fatal(err)
	}
	worker, err := s3task.NewWorker(store, &mux, &s3task.WorkerOptions{
		ID:               "reports-1",
		Concurrency:      4,
		PresenceInterval: 2 * time.Minute, // the default; negative turns presence off
	})
	if err != nil {
		log.Fatal(err)
	}
	go worker.Run(ctx)

	// The worker writes its presence object as Run starts: wait for it.
	var list *s3task.WorkerList
	for ; ; time.Sleep(10 * time.Millisecond) {
		if list, err = store.Workers(ctx); err != nil {
			log.Fatal(err)
		}
		if len(list.Workers) > 0 {
			break
		}
	}
	for _, w := range list.Workers {
		if w.Err != nil {
			fmt.Println("unreadable:", w.Key, w.Err)
			continue
		}
		fmt.Printf("%s: live %t, %d of %d slots busy, serves %v\n", w.ID, w.Live, len(w.Running), w.Concurrency, w.Types)
	}

	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := worker.Stop(stopCtx); err != nil {
		log.Fatal(err)
	}
	if list, err = store.Workers(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("after Stop:", len(list.Workers), "workers")
	// Output:
	// reports-1: live true, 0 of 4 slots busy, serves [report]
	// after Stop: 0 workers
}
