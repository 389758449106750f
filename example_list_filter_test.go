package s3task_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/s3task/s3task"
)

// A filtered List reads on past the tasks that do not pass, so a page of one
// tenant's tasks, of the abandoned ones, or of the scheduled ones, is as
// full as its Limit allows.
// MaxScan bounds how far one call reads; a page it cut short says so, and
// its cursor goes on from where it stopped.
func ExampleStore_List_filter() {
	store, _ := exampleStore(nil)
	ctx := context.Background()
	var first *s3task.Task
	for i, tenant := range []string{"acme", "globex", "acme", "globex", "acme", "acme"} {
		task, err := store.Create(ctx, s3task.CreateParams{
			Name: fmt.Sprint("import ", i+1), Type: "csv_import",
			Metadata: map[string]string{"tenant": tenant},
		})
		if err != nil {
			log.Fatal(err)
		}
		if first == nil {
			first = task
		}
	}
	if _, err := store.Cancel(ctx, first.ID, "wrong file"); err != nil {
		log.Fatal(err)
	}

	// show pages through a listing and prints each page.
	show := func(opts s3task.ListOptions) {
		for n := 1; ; n++ {
			page, err := store.List(ctx, opts)
			if err != nil {
				log.Fatal(err)
			}
			var names []string
			for _, t := range page.Tasks {
				names = append(names, t.Name)
			}
			fmt.Printf("page %d: %q, scanned %d, cut short by MaxScan: %v\n", n, names, page.Scanned, page.ScanLimited)
			if page.NextCursor == "" {
				return
			}
			opts.Cursor = page.NextCursor
		}
	}

	fmt.Println("acme's tasks, newest first:")
	show(s3task.ListOptions{Limit: 2, Metadata: map[string]string{"tenant": "acme"}})

	fmt.Println("acme's abandoned tasks, at most 3 folders a call:")
	show(s3task.ListOptions{
		Limit: 2, MaxScan: 3,
		Statuses: []s3task.Status{s3task.StatusAbandoned},
		Metadata: map[string]string{"tenant": "acme"},
	})

	// States tell apart what a status holds: a queued task waiting for its
	// start (scheduled) from one waiting for a worker (ready), a failed
	// one waiting for its retry (retrying) from one failed for good
	// (dead). The Store judges a start by the server's clock.
	queueTask(store, s3task.CreateParams{Name: "nightly", RunAt: store.Now().Add(time.Hour)}, "a,b\n")
	queueTask(store, s3task.CreateParams{Name: "now"}, "a,b\n")
	fmt.Println("scheduled tasks:")
	show(s3task.ListOptions{States: []s3task.State{s3task.StateScheduled}})
	fmt.Println("queued and due:")
	show(s3task.ListOptions{States: []s3task.State{s3task.StateReady}})
	// Output:
	// acme's tasks, newest first:
	// page 1: ["import 6" "import 5"], scanned 2, cut short by MaxScan: false
	// page 2: ["import 3" "import 1"], scanned 4, cut short by MaxScan: false
	// acme's abandoned tasks, at most 3 folders a call:
	// page 1: [], scanned 3, cut short by MaxScan: true
	// page 2: ["import 1"], scanned 3, cut short by MaxScan: false
	// scheduled tasks:
	// page 1: ["nightly"], scanned 8, cut short by MaxScan: false
	// queued and due:
	// page 1: ["now"], scanned 8, cut short by MaxScan: false
}
