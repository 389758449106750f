package s3task_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/s3task/s3task"
)

// A Mux routes each task to the handler registered for its type. Its zero
// value is ready to use, and it is itself a Handler to give to NewWorker,
// and a TypedHandler: it lists the types it serves.
func ExampleMux() {
	var mux s3task.Mux
	err := mux.HandleFunc("thumbnail", func(ctx context.Context, job *s3task.Job) error {
		return nil // make the thumbnail
	})
	if err != nil {
		log.Fatal(err)
	}
	err = mux.Handle("transcode", s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		return nil // transcode the video
	}))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("serves:", mux.Types())

	// A type has one handler; the first registration stays.
	err = mux.HandleFunc("thumbnail", func(ctx context.Context, job *s3task.Job) error { return nil })
	fmt.Println("registered twice:", errors.Is(err, s3task.ErrInvalidArgument))
	// Output:
	// serves: [thumbnail transcode]
	// registered twice: true
}

// A worker whose handler is a TypedHandler, such as a Mux, claims only the
// types it lists. During a rolling deploy, tasks of a type the old workers
// do not know yet wait, untouched, for a new worker; Stats shows them
// waiting, by type.
func ExampleTypedHandler() {
	store, _ := exampleStore(nil)
	ctx := context.Background()

	// A new type, submitted before any worker knows it, and an old one.
	wm := queueTask(store, s3task.CreateParams{Name: "logo", Type: "watermark"}, "png")
	queueTask(store, s3task.CreateParams{Name: "photo", Type: "resize"}, "jpg")

	// An old worker: it serves "resize" only.
	var old s3task.Mux
	if err := old.HandleFunc("resize", func(ctx context.Context, job *s3task.Job) error { return nil }); err != nil {
		log.Fatal(err)
	}
	workUntilDone(store, &old, 1)

	st, err := store.Stats(ctx, s3task.StatsOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("completed:", st.ByStatus[s3task.StatusCompleted], "waiting by type:", st.UnfinishedByType)

	// The new worker knows both.
	var current s3task.Mux
	if err := current.HandleFunc("resize", func(ctx context.Context, job *s3task.Job) error { return nil }); err != nil {
		log.Fatal(err)
	}
	if err := current.HandleFunc("watermark", func(ctx context.Context, job *s3task.Job) error { return nil }); err != nil {
		log.Fatal(err)
	}
	workUntilDone(store, &current, 1)

	got, err := store.Get(ctx, wm.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(got.Name, got.Status)
	// Output:
	// completed: 1 waiting by type: map[watermark:1]
	// logo completed
}

// workUntilDone runs a worker with h until it has completed n tasks, then stops it.
func workUntilDone(store *s3task.Store, h s3task.Handler, n int) {
	done := make(chan struct{}, n)
	w, err := s3task.NewWorker(store, h, &s3task.WorkerOptions{
		Hooks: s3task.Hooks{OnComplete: func(*s3task.Task) { done <- struct{}{} }},
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(ctx) }()
	for range n {
		select {
		case <-done:
		case <-ctx.Done():
			log.Fatal("the tasks did not complete")
		}
	}
	cancel()
	<-stopped
}

// A handler says how a failure should be treated: Permanent for one no
// retry can fix, RetryAfter for a wait of its own, WithCategory for a label
// that Stats and the hooks group failures by. A plain error is retried
// after the backoff while attempts are left.
func ExampleWithCategory() {
	store, _ := exampleStore(nil)
	ctx := context.Background()

	var mux s3task.Mux
	err := mux.HandleFunc("import", func(ctx context.Context, job *s3task.Job) error {
		if job.Task.Name == "bad file" {
			return s3task.Permanent(s3task.WithCategory(errors.New("row 2: no email"), "bad_input"))
		}
		return s3task.RetryAfter(s3task.WithCategory(errors.New("CRM answered 503"), "upstream"), time.Minute)
	})
	if err != nil {
		log.Fatal(err)
	}
	worker, err := s3task.NewWorker(store, &mux, nil)
	if err != nil {
		log.Fatal(err)
	}

	for _, name := range []string{"bad file", "good file"} {
		task := queueTask(store, s3task.CreateParams{Name: name, Type: "import"}, "name,email\nAda,\n")
		task, err := worker.RunTask(ctx, task.ID)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: %s, category %s, retry scheduled %v, terminal %v: %s\n",
			task.Name, task.Status, task.ErrorCategory, !task.RetryAt.IsZero(), task.Terminal(), task.LastError)
	}

	st, err := store.Stats(ctx, s3task.StatsOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("failures:", st.Failures)
	// Output:
	// bad file: failed, category bad_input, retry scheduled false, terminal true: row 2: no email
	// good file: failed, category upstream, retry scheduled true, terminal false: CRM answered 503
	// failures: map[bad_input:1 upstream:1]
}
