package s3task_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/s3task/s3task"
)

// A Store that declares the fleet's periodic tasks shows them: when each
// runs next, and its latest run with the run's task. Here the worker makes
// the run of the hour that has begun as soon as it starts, and
// Store.Periodics then finds it, completed.
func ExampleStore_Periodics() {
	store, _ := exampleStore(&s3task.StoreOptions{
		Files: map[string]s3task.FileOptions{"report": {NoInput: true}},
		Periodic: []s3task.Periodic{{
			Name:     "hourly-report",
			Schedule: s3task.Every(time.Hour),
			Params:   s3task.CreateParams{Type: "report"},
		}},
	})
	ctx := context.Background()
	show := func(p s3task.PeriodicStatus) {
		last := "none yet"
		switch {
		case p.Err != nil:
			last = "unreadable: " + p.Err.Error()
		case p.Purged:
			last = "purged"
		case p.Last != nil:
			last = string(p.Last.Status)
		}
		fmt.Printf("%s (%s, missed runs: %s): next run on the hour: %t; last run: %s\n",
			p.Periodic.Name, p.Periodic.Schedule, p.Periodic.Missed, p.Next.Equal(p.Next.Truncate(time.Hour)), last)
	}
	list, err := store.Periodics(ctx)
	if err != nil {
		log.Fatal(err)
	}
	show(list.Periodics[0])

	var mux s3task.Mux
	if err := mux.HandleFunc("report", func(context.Context, *s3task.Job) error { return nil }); err != nil {
		log.Fatal(err)
	}
	worker, err := s3task.NewWorker(store, &mux, nil)
	if err != nil {
		log.Fatal(err)
	}
	go worker.Run(ctx)
	for ; ; time.Sleep(10 * time.Millisecond) {
		if list, err = store.Periodics(ctx); err != nil {
			log.Fatal(err)
		}
		if p := list.Periodics[0]; p.Last != nil && p.Last.Status == s3task.StatusCompleted {
			break
		}
	}
	show(list.Periodics[0])

	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := worker.Stop(stopCtx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// hourly-report (every 1h0m0s, missed runs: skip): next run on the hour: true; last run: none yet
	// hourly-report (every 1h0m0s, missed runs: skip): next run on the hour: true; last run: completed
}
