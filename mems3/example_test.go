package mems3_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"strings"
	"time"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/mems3"
)

// A Store on an in-process server: no socket, no credentials, nothing to
// install. The task lives in the server's memory until it closes.
func Example() {
	ctx := context.Background()
	srv, err := mems3.New(nil)
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	store, err := s3task.NewStore(srv.Client(), srv.Bucket(), nil)
	if err != nil {
		log.Fatal(err)
	}
	task, err := store.Create(ctx, s3task.CreateParams{Name: "hello", Type: "greet"})
	if err != nil {
		log.Fatal(err)
	}
	got, err := store.Get(ctx, task.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("bucket %s: task %q of type %s is %s\n", srv.Bucket(), got.Name, got.Type, got.Status)
	// Output: bucket tasks: task "hello" of type greet is created
}

// A listening server, whose presigned URLs work from any HTTP client: here
// net/http uploads a task's input the way a browser or curl would.
func ExampleListen() {
	ctx := context.Background()
	srv, err := mems3.Listen("", &mems3.Options{Bucket: "uploads"})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	store, err := s3task.NewStore(srv.Client(), srv.Bucket(), nil)
	if err != nil {
		log.Fatal(err)
	}
	task, up, err := store.CreateForUpload(ctx, s3task.CreateParams{Name: "report"}, 15*time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, up.Put.Method, up.Put.URL, strings.NewReader("a,b\n1,2\n"))
	if err != nil {
		log.Fatal(err)
	}
	for name, values := range up.Put.Header {
		req.Header[name] = values
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	fmt.Println("upload:", resp.Status)

	task, err = store.Submit(ctx, task.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s, %d bytes of input\n", task.Status, task.InputSize)
	// Output:
	// upload: 200 OK
	// queued, 8 bytes of input
}
