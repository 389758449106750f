package s3task_test

import (
	"context"
	"io"
	"log"
	"log/slog"
	"strings"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/s3test"
)

// exampleStore is the setup every example shares: a fresh in-process S3
// (an in-memory bucket its clients reach through their transport, with no
// network and no credentials) and a Store on it made with opts. The Store
// and the workers made from it log nowhere unless opts name a logger.
//
// Real code makes its Store with s3task.NewStore(client, bucket, opts), on
// an *s3.Client configured by the application. The examples that reach past
// the Store (to upload through a presigned URL, or to damage the bucket on
// purpose) use the S3 returned with it.
func exampleStore(opts *s3task.StoreOptions) (*s3task.Store, *s3test.Memory) {
	mem, err := s3test.NewMemory()
	if err != nil {
		log.Fatal(err)
	}
	var o s3task.StoreOptions
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	store, err := s3task.NewStore(mem.Client(), mem.Bucket, &o)
	if err != nil {
		log.Fatal(err)
	}
	return store, mem
}

// queueTask creates a task with p, uploads input as its input and submits
// it, as ExampleStore_Submit shows step by step: the producer's side, for
// the examples about the worker's.
func queueTask(store *s3task.Store, p s3task.CreateParams, input string) *s3task.Task {
	ctx := context.Background()
	task, err := store.Create(ctx, p)
	if err != nil {
		log.Fatal(err)
	}
	if err := store.UploadInput(ctx, task.ID, strings.NewReader(input)); err != nil {
		log.Fatal(err)
	}
	task, err = store.Submit(ctx, task.ID)
	if err != nil {
		log.Fatal(err)
	}
	return task
}
