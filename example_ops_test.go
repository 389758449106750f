package s3task_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/s3task/s3task"
)

// Stats tells a quiet system from a stuck one; Reconcile repairs the
// marker index from the records. Here a queued task has lost its marker, so
// no worker would ever find it, until Reconcile puts it back.
func ExampleStore_Reconcile() {
	store, fakeS3 := exampleStore(nil)
	ctx := context.Background()

	queueTask(store, s3task.CreateParams{Name: "first"}, "x\n")
	second := queueTask(store, s3task.CreateParams{Name: "second"}, "x\n")
	// Lose the second one's marker, as a hand-made mistake would.
	key := store.MarkerKey(second)
	if _, err := fakeS3.Client().DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(fakeS3.Bucket), Key: &key}); err != nil {
		log.Fatal(err)
	}

	st, err := store.Stats(ctx, s3task.StatsOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("tasks %d, queued %d, unfinished %d, oldest unfinished %q\n",
		st.Tasks, st.ByStatus[s3task.StatusQueued], st.Unfinished, st.OldestUnfinished.Name)

	report, err := store.Reconcile(ctx, s3task.ReconcileOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("reconcile: read %d, restored %d marker(s)\n", report.Tasks, len(report.Restored))
	again, err := store.Reconcile(ctx, s3task.ReconcileOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("second run clean:", again.Clean())
	// Output:
	// tasks 2, queued 2, unfinished 2, oldest unfinished "first"
	// reconcile: read 2, restored 1 marker(s)
	// second run clean: true
}

// Stats.OldestWaiting is the figure to alert on: it counts a task's wait
// from when a worker could first take it, where OldestUnfinished counts
// from its creation. Here a report is scheduled an hour ahead, and an
// import is queued 20 minutes later with no worker running: after 25
// minutes only the import has been waiting, for 5 of them. A paused type's
// tasks wait on purpose and are left out.
func ExampleStore_Stats_waiting() {
	store, fakeS3 := exampleStore(nil)
	ctx := context.Background()
	queueTask(store, s3task.CreateParams{Name: "nightly report", Type: "pdf", RunAt: store.Now().Add(time.Hour)}, "x\n")
	fakeS3.Advance(20 * time.Minute) // the server's clock moves; the Store follows it
	queueTask(store, s3task.CreateParams{Name: "import", Type: "csv"}, "x\n")
	fakeS3.Advance(5 * time.Minute)

	st, err := store.Stats(ctx, s3task.StatsOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("oldest unfinished %q, created %s ago\n", st.OldestUnfinished.Name, st.OldestUnfinishedAge.Round(time.Minute))
	fmt.Printf("oldest waiting %q, due %s ago; scheduled %d\n", st.OldestWaiting.Name, st.OldestWaitingAge.Round(time.Minute), st.Scheduled)
	fmt.Println("wait by type:", st.WaitByType["csv"].Round(time.Minute))

	if err := store.Pause(ctx, "csv"); err != nil {
		log.Fatal(err)
	}
	st, err = store.Stats(ctx, s3task.StatsOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("csv paused, oldest waiting:", st.OldestWaiting)
	// Output:
	// oldest unfinished "nightly report", created 25m0s ago
	// oldest waiting "import", due 5m0s ago; scheduled 1
	// wait by type: 5m0s
	// csv paused, oldest waiting: <nil>
}
