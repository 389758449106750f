package s3event_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/s3event"
)

// printer stands in for an *s3task.Worker: it prints the events it is
// given and takes interest in those under "tasks/".
type printer struct{}

func (printer) Notify(e s3task.ObjectEvent) bool {
	fmt.Printf("event: bucket %s, key %q, removed %v\n", e.Bucket, e.Key, e.Removed)
	return strings.HasPrefix(e.Key, "tasks/")
}

// A webhook endpoint for S3 event notifications. In a real program the
// notifier is the worker, and the handler is mounted on the program's own
// server; the S3 server is given its URL with the token.
func ExampleNewHandler() {
	h, err := s3event.NewHandler(printer{}, &s3event.HandlerOptions{Token: "s3cret"})
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	// What S3 posts when an object is written; AWS form-encodes the key.
	body := `{"Records":[{
		"eventName": "ObjectCreated:Put",
		"s3": {
			"bucket": {"name": "my-bucket"},
			"object": {"key": "tasks/m/2024+05+01%2F01HX.json", "size": 120}
		}
	}]}`
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/s3-events", strings.NewReader(body))
	if err != nil {
		log.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := srv.Client().Do(req)
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	fmt.Println(resp.Status)

	// Without the token, nothing reaches the notifier.
	resp, err = srv.Client().Post(srv.URL+"/s3-events", "application/json", strings.NewReader(body))
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	fmt.Println(resp.Status)

	// Output:
	// event: bucket my-bucket, key "tasks/m/2024 05 01/01HX.json", removed false
	// 204 No Content
	// 401 Unauthorized
}
