package s3task_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/s3task/s3task"
)

// resizeParams is the payload of a "resize" task. Its Validate method makes
// it a Validator: Create checks it before a task is made, and the handler
// registered with HandleJSON checks it again after decoding.
type resizeParams struct {
	Width  int    `json:"width"`
	Height int    `json:"height"`
	Format string `json:"format,omitempty"`
}

func (a resizeParams) Validate() error {
	if a.Width <= 0 || a.Height <= 0 {
		return errors.New("width and height must be positive")
	}
	return nil
}

// HandleJSON registers a handler that gets its task's payload decoded into
// a Go type; CreateParams.Args encodes one. A payload that does not decode,
// or is not valid, fails the task permanently with CategoryBadPayload, and
// the handler is not called.
func ExampleHandleJSON() {
	store, _ := exampleStore(nil)
	ctx := context.Background()

	var mux s3task.Mux
	err := s3task.HandleJSON(&mux, "resize", func(ctx context.Context, job *s3task.Job, args resizeParams) error {
		fmt.Printf("resizing %s to %dx%d\n", job.Task.Name, args.Width, args.Height)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	worker, err := s3task.NewWorker(store, &mux, nil)
	if err != nil {
		log.Fatal(err)
	}

	// The producer passes the arguments as a value.
	task := queueTask(store, s3task.CreateParams{Name: "avatar", Type: "resize", Args: resizeParams{Width: 64, Height: 64}}, "png")
	if task, err = worker.RunTask(ctx, task.ID); err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.Name, task.Status, string(task.Payload))

	// Invalid arguments never make a task.
	_, err = store.Create(ctx, s3task.CreateParams{Type: "resize", Args: resizeParams{Width: 64}})
	fmt.Println("create refused:", errors.Is(err, s3task.ErrInvalidArgument))

	// A raw payload of the wrong shape (from an older producer, say) fails
	// for good, without using up the other attempts.
	task = queueTask(store, s3task.CreateParams{Name: "banner", Type: "resize", Payload: []byte(`{"width":"wide"}`)}, "png")
	if task, err = worker.RunTask(ctx, task.ID); err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.Name, task.Status, "terminal:", task.Terminal(), "category:", task.ErrorCategory == s3task.CategoryBadPayload)
	// Output:
	// resizing avatar to 64x64
	// avatar completed {"width":64,"height":64}
	// create refused: true
	// banner failed terminal: true category: true
}
