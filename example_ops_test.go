package s3task_test

import (
	"context"
	"fmt"
	"log"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/s3test"
)

// Stats tells a quiet system from a stuck one; Reconcile repairs the
// marker index from the records. Here a queued task has lost its marker, so
// no worker would ever find it, until Reconcile puts it back.
func ExampleStore_Reconcile() {
	srv, err := s3test.Start()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	ctx := context.Background()
	store, err := s3task.NewStore(srv.Client(), srv.Bucket, nil)
	if err != nil {
		log.Fatal(err)
	}

	for _, name := range []string{"first", "second"} {
		t, err := store.Create(ctx, s3task.CreateParams{Name: name})
		if err != nil {
			log.Fatal(err)
		}
		if err := store.UploadInput(ctx, t.ID, strings.NewReader("x\n")); err != nil {
			log.Fatal(err)
		}
		queued, err := store.Submit(ctx, t.ID)
		if err != nil {
			log.Fatal(err)
		}
		if name == "second" { // lose its marker, as a hand-made mistake would
			key := store.MarkerKey(queued)
			if _, err := srv.Client().DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(srv.Bucket), Key: &key}); err != nil {
				log.Fatal(err)
			}
		}
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
