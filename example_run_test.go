package s3task_test

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"mime/multipart"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/s3task/s3task"
)

// A service runs its worker until the process is told to stop (Ctrl-C, or
// the SIGTERM of a deploy): Run then claims nothing more, lets the running
// handler finish or gives its attempt back, and returns nil. Here the
// example stops the run itself, as a signal would.
func ExampleWorker_Run() {
	store, _ := exampleStore(nil)
	started := make(chan string, 1)
	worker, err := s3task.NewWorker(store, s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		started <- job.Task.Name
		<-ctx.Done() // a long job, told to stop: its attempt goes back to the queue
		return context.Cause(ctx)
	}), &s3task.WorkerOptions{ShutdownTimeout: 100 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- worker.Run(ctx) }()

	task := queueTask(store, s3task.CreateParams{Name: "long report"}, "a,b\n")
	fmt.Println("running:", <-started)
	stop() // what SIGTERM does
	fmt.Println("Run returned:", <-done)
	task, err = store.Get(context.Background(), task.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.Status, "attempts used:", task.AttemptsUsed())
	// Output:
	// running: long report
	// Run returned: <nil>
	// queued attempts used: 0
}

// A browser uploads with the presigned POST form: every field of Fields,
// then the file last, in a multipart body. S3 checks the policy, which caps
// the size.
func ExampleStore_PresignUploadForm() {
	store, fakeS3 := exampleStore(&s3task.StoreOptions{InputContentType: "text/csv"})
	ctx := context.Background()
	task, err := store.Create(ctx, s3task.CreateParams{Name: "June import"})
	if err != nil {
		log.Fatal(err)
	}
	form, err := store.PresignUploadForm(ctx, task.ID, 15*time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("fields include the policy:", form.Fields["policy"] != "", "content type:", form.Fields["Content-Type"])

	// What the browser sends (here through the in-process S3's transport).
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	for k, v := range form.Fields {
		if err := mw.WriteField(k, v); err != nil {
			log.Fatal(err)
		}
	}
	file, err := mw.CreateFormFile("file", "june.csv")
	if err != nil {
		log.Fatal(err)
	}
	file.Write([]byte("name,email\nAda,ada@example.com\n"))
	mw.Close()
	req, err := http.NewRequest(http.MethodPost, form.URL, &body)
	if err != nil {
		log.Fatal(err)
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := (&http.Client{Transport: fakeS3.Transport()}).Do(req)
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	fmt.Println("upload:", resp.StatusCode/100 == 2)

	task, err = store.Submit(ctx, task.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.Status, "with", task.InputSize, "bytes of input")
	// Output:
	// fields include the policy: true content type: text/csv
	// upload: true
	// queued with 31 bytes of input
}
