package s3task_test

import (
	"context"
	"fmt"
	"log"

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
