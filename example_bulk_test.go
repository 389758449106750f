package s3task_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/s3task/s3task"
)

// Retry every failed task of one type: a dry run first says what would be
// retried and what would not, and why; the run then retries them and
// leaves the others alone. Each call acts on at most Limit tasks and
// returns a cursor to go on from.
func ExampleStore_RetryMany() {
	store, _ := exampleStore(nil)
	ctx := context.Background()
	worker, err := s3task.NewWorker(store, s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		if job.Task.Name != "march" {
			return s3task.Permanent(errors.New("the price list is missing"))
		}
		return nil
	}), nil)
	if err != nil {
		log.Fatal(err)
	}
	names := map[string]string{}
	for _, p := range []s3task.CreateParams{
		{Name: "january", Type: "invoices"}, {Name: "february", Type: "invoices"},
		{Name: "march", Type: "invoices"}, {Name: "payroll", Type: "salaries"},
	} {
		task := queueTask(store, p, "a,b\n")
		if _, err := worker.RunTask(ctx, task.ID); err != nil {
			log.Fatal(err)
		}
		names[task.ID] = p.Name
	}

	// show prints a report, a line per task.
	show := func(r *s3task.BulkReport) {
		for _, res := range r.Results {
			var te *s3task.TransitionError
			if errors.As(res.Err, &te) {
				fmt.Printf("  %s %s: %s\n", names[res.ID], res.Outcome, te.Reason)
			} else {
				fmt.Printf("  %s %s\n", names[res.ID], res.Outcome)
			}
		}
	}

	fmt.Println("dry run, every invoice task:")
	r, err := store.RetryMany(ctx, s3task.BulkOptions{Types: []string{"invoices"}, DryRun: true})
	if err != nil {
		log.Fatal(err)
	}
	show(r)

	fmt.Println("retry the failed ones, one per call:")
	opts := s3task.BulkOptions{Statuses: []s3task.Status{s3task.StatusFailed}, Types: []string{"invoices"}, Limit: 1}
	for {
		r, err := store.RetryMany(ctx, opts)
		if err != nil {
			log.Fatal(err)
		}
		show(r)
		if r.NextCursor == "" {
			break
		}
		opts.Cursor = r.NextCursor
	}
	// Output:
	// dry run, every invoice task:
	//   march skipped: only a failed task can be retried
	//   february would_do
	//   january would_do
	// retry the failed ones, one per call:
	//   february done
	//   january done
}

// A selection from a user interface is a list of IDs. Each is reported on
// its own: an ID that is not one, a task already finished, a task that
// does not exist; the others are cancelled.
func ExampleStore_CancelMany() {
	store, _ := exampleStore(nil)
	ctx := context.Background()
	var ids []string
	for _, name := range []string{"first", "second"} {
		task := queueTask(store, s3task.CreateParams{Name: name}, "a,b\n")
		ids = append(ids, task.ID)
	}
	if _, err := store.Cancel(ctx, ids[0], "wrong file"); err != nil {
		log.Fatal(err)
	}
	ids = append(ids, "../etc", s3task.NewIDAt(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)))

	r, err := store.CancelMany(ctx, "the whole batch was wrong", s3task.BulkOptions{IDs: ids})
	if err != nil {
		log.Fatal(err)
	}
	for i, res := range r.Results {
		fmt.Printf("%d: %s", i+1, res.Outcome)
		var te *s3task.TransitionError
		switch {
		case errors.As(res.Err, &te):
			fmt.Printf(" (%s)", te.Reason)
		case errors.Is(res.Err, s3task.ErrInvalidID):
			fmt.Print(" (not a task ID)")
		case errors.Is(res.Err, s3task.ErrNotFound):
			fmt.Print(" (no such task)")
		case res.Task != nil:
			fmt.Printf(" (%s: %s)", res.Task.Name, res.Task.CancelReason)
		}
		fmt.Println()
	}
	fmt.Printf("acted on %d, skipped %d, failed %d\n", r.Acted, r.Skipped, r.Failed)
	// Output:
	// 1: failed (not a task ID)
	// 2: done (second: the whole batch was wrong)
	// 3: skipped (it is abandoned already)
	// 4: skipped (no such task)
	// acted on 1, skipped 2, failed 1
}
