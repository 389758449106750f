package main

import (
	"bytes"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/examples/internal/taskview"
)

// ingested returns the tasks whose source is key, by the API's list.
func (s *service) ingested(key string) []taskview.Task {
	s.t.Helper()
	var page listResponse
	s.call("GET", "/tasks?limit=100", nil, http.StatusOK, &page)
	var out []taskview.Task
	for _, t := range page.Tasks {
		if t.Metadata[s3task.MetaSourceKey] == key {
			out = append(out, t)
		}
	}
	return out
}

// awaitIngested waits until key has n tasks and returns them.
func (s *service) awaitIngested(key string, n int) []taskview.Task {
	s.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := s.ingested(key)
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s: %d tasks after 30s, want %d", key, len(got), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestIngestFolder: with -ingest, a CSV put in the folder becomes a task of
// -ingest-type named after the file, which the worker runs; the same bytes
// put again make no second task, new bytes do.
func TestIngestFolder(t *testing.T) {
	cfg := testConfig(t, svcOptions{})
	cfg.ingestPrefix, cfg.ingestSweep = "incoming/", 100*time.Millisecond
	svc := startConfig(t, cfg)
	data := []byte("id,name\n1,alpha\n2,beta\n")
	if _, err := svc.objects().Put(t.Context(), "incoming/june.csv", data); err != nil {
		t.Fatal(err)
	}
	first := svc.awaitIngested("incoming/june.csv", 1)[0]
	if first.Name != "june.csv" || first.Type != typeStats || first.CreatedBy != "ingest" {
		t.Errorf("ingested task: name %q, type %q, created by %q", first.Name, first.Type, first.CreatedBy)
	}
	done := svc.waitFor(first.ID, "completed", completed)
	if done.Progress.ProcessedCount != 2 {
		t.Errorf("the task processed %d rows, want 2", done.Progress.ProcessedCount)
	}
	if _, err := svc.objects().Put(t.Context(), "incoming/june.csv", data); err != nil {
		t.Fatal(err)
	}
	// A sweep that finds a file put after the same bytes listed them too.
	if _, err := svc.objects().Put(t.Context(), "incoming/later.csv", data); err != nil {
		t.Fatal(err)
	}
	svc.awaitIngested("incoming/later.csv", 1)
	if got := svc.ingested("incoming/june.csv"); len(got) != 1 {
		t.Errorf("the same bytes put again: %d tasks, want 1", len(got))
	}
	if _, err := svc.objects().Put(t.Context(), "incoming/june.csv", append(data, "3,gamma\n"...)); err != nil {
		t.Fatal(err)
	}
	if got := svc.awaitIngested("incoming/june.csv", 2); len(got) != 2 {
		t.Errorf("new bytes: %d tasks, want 2", len(got))
	}

	// A file name longer than a task name (a key may have 1,024 bytes)
	// names its task cut at a character boundary.
	long := "incoming/" + strings.Repeat("é", 200) + ".csv"
	if _, err := svc.objects().Put(t.Context(), long, data); err != nil {
		t.Fatal(err)
	}
	if got := svc.awaitIngested(long, 1)[0]; got.Name != strings.Repeat("é", 128) {
		t.Errorf("the task of a file named by 405 bytes is named %q (%d bytes), want its first 128 characters", got.Name, len(got.Name))
	}

	// Nothing waits for a sweep: every ingest went through.
	code, body := svc.scrape(svc.base+"/metrics", svc.token, "")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", code, body)
	}
	if v, ok := parseScrape(t, body)["s3task_ingest_waiting"]; !ok || v != 0 {
		t.Errorf("s3task_ingest_waiting = %v (present %t), want 0", v, ok)
	}
}

func TestFileName(t *testing.T) {
	for key, want := range map[string]string{
		"incoming/june.csv":                                 "june.csv",
		"june.csv":                                          "june.csv",
		"incoming/" + strings.Repeat("a", 256):              strings.Repeat("a", 256),
		"incoming/" + strings.Repeat("a", 257):              strings.Repeat("a", 256),
		"incoming/a" + strings.Repeat("é", 200):             "a" + strings.Repeat("é", 127), // 255 bytes: the next é would cross 256
		"incoming/" + strings.Repeat("😀", 100):              strings.Repeat("😀", 64),
		"incoming/deep/er/" + strings.Repeat("x", 300) + "": strings.Repeat("x", 256),
	} {
		if got := fileName(key); got != want || !utf8.ValidString(got) {
			t.Errorf("fileName(%q) = %q (%d bytes), want %q", key, got, len(got), want)
		}
	}
}

// TestEventsWebhook: with -events-token, POST /s3-events takes the S3
// server's notifications: a file's notification makes its task at once
// (the sweep is an hour away), a delivery without the token is refused,
// and a body that is not a notification is a 400. The service uses an S3
// of its own (not parallel: the credentials are in the environment).
func TestEventsWebhook(t *testing.T) {
	srv := s3Server(t)
	// A file there before the service starts: once its task exists, the
	// first sweep has listed the folder, and the next is an hour away.
	if _, err := objectsOf(srv).Put(t.Context(), "incoming/0-before.csv", []byte("id\n0\n")); err != nil {
		t.Fatal(err)
	}
	svc := startOnS3(t, srv, svcOptions{args: []string{"-ingest", "incoming/", "-ingest-sweep", "1h", "-events-token", "hook-secret"}})
	svc.awaitIngested("incoming/0-before.csv", 1)
	data := []byte("id\n1\n")
	etag, err := svc.objects().Put(t.Context(), "incoming/by event.csv", data)
	if err != nil {
		t.Fatal(err)
	}
	event := fmt.Sprintf(`{"Records":[{"eventName":"ObjectCreated:Put","s3":{"bucket":{"name":%q},"object":{"key":"incoming/by+event.csv","eTag":%q,"size":%d}}}]}`,
		svc.app.objs.bucket, strings.Trim(etag, `"`), len(data))
	post := func(target, body string) int {
		req, err := http.NewRequest("POST", svc.base+target, bytes.NewReader([]byte(body)))
		if err != nil {
			t.Fatal(err)
		}
		resp, _ := svc.do(req)
		return resp.StatusCode
	}
	if code := post("/s3-events", event); code != http.StatusUnauthorized {
		t.Errorf("a delivery without the token: %d, want 401", code)
	}
	if code := post("/s3-events?token=hook-secret", "not json"); code != http.StatusBadRequest {
		t.Errorf("a body that is not a notification: %d, want 400", code)
	}
	if got := svc.ingested("incoming/by event.csv"); len(got) != 0 {
		t.Fatalf("refused deliveries made %d tasks", len(got))
	}
	if code := post("/s3-events?token=hook-secret", event); code != http.StatusNoContent {
		t.Fatalf("the delivery: %d, want 204", code)
	}
	task := svc.awaitIngested("incoming/by event.csv", 1)[0]
	svc.waitFor(task.ID, "completed", completed)
}

// countingTransport counts the requests its RoundTripper sends, by method,
// of the keys that start with a prefix.
type countingTransport struct {
	next   http.RoundTripper
	folder string // a part of a path-style URL's path: "/incoming/junk-"

	mu sync.Mutex
	n  map[string]int
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.Contains(r.URL.Path, c.folder) {
		c.mu.Lock()
		c.n[r.Method]++
		c.mu.Unlock()
	}
	return c.next.RoundTrip(r)
}

func (c *countingTransport) counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n)
}

// eventually waits until cond holds, for as long as the test may run (up
// to half a minute before go test's deadline, so that the test fails with
// what it waited for): a slow machine makes it slow, never a failure.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline, bounded := t.Deadline()
	for !cond() {
		if bounded && time.Until(deadline) < 30*time.Second {
			t.Fatalf("still not %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestEventsFlood: a flood of authenticated deliveries naming 3,000 files
// that do not exist makes no task and costs one HEAD per record: one
// delivery of the 3,000 is refused whole (413, a delivery holds at most
// 10 records), and 300 deliveries of 10 are taken, each record costing the
// ingest a HEAD of its object and nothing more.
func TestEventsFlood(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, svcOptions{args: []string{"-ingest", "incoming/", "-ingest-sweep", "1h", "-events-token", "hook-secret"}})
	var count *countingTransport
	cfg.s3Wrap = func(next http.RoundTripper) http.RoundTripper {
		count = &countingTransport{next: next, folder: "/incoming/junk-", n: map[string]int{}}
		return count
	}
	svc := startConfig(t, cfg)
	bucket := svc.app.objs.bucket
	missing := make([]written, 3000)
	for i := range missing {
		missing[i] = written{Key: fmt.Sprintf("incoming/junk-%04d.csv", i), ETag: "0123456789abcdef0123456789abcdef"}
	}
	hook := svc.base + "/s3-events?token=hook-secret"
	if code := svc.postEvents(hook, eventBody(t, bucket, missing...)); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("one delivery of 3,000 records: %d, want 413", code)
	}
	for i := 0; i < len(missing); i += 10 {
		if code := svc.postEvents(hook, eventBody(t, bucket, missing[i:i+10]...)); code != http.StatusNoContent {
			t.Fatalf("delivery %d of 10 records: %d, want 204", i/10, code)
		}
	}
	eventually(t, "a HEAD per junk record", func() bool { return count.counts()["HEAD"] >= len(missing) })
	if got := svc.app.metricsNow(t)[series("s3task_webhook_events_total", "to", "ingest")]; got != float64(len(missing)) {
		t.Errorf("events that reached the ingest: %v, want %d (the refused delivery's none)", got, len(missing))
	}
	// Past the last HEAD: a further delivery of a real file, taken after
	// the 3,000, makes its task; by then every junk record is done with.
	data := []byte("a\n1\n")
	etag, err := svc.objects().Put(t.Context(), "incoming/real.csv", data)
	if err != nil {
		t.Fatal(err)
	}
	if code := svc.postEvents(hook, eventBody(t, bucket, written{"incoming/real.csv", etag})); code != http.StatusNoContent {
		t.Fatalf("the real file's delivery: %d, want 204", code)
	}
	svc.awaitIngested("incoming/real.csv", 1)
	var page listResponse
	svc.call("GET", "/tasks?limit=1000", nil, http.StatusOK, &page)
	if len(page.Tasks) != 1 || len(page.Broken) != 0 {
		t.Errorf("%d tasks and %d broken records after the flood, want only the real file's task", len(page.Tasks), len(page.Broken))
	}
	if got, want := count.counts(), map[string]int{"HEAD": len(missing)}; !maps.Equal(got, want) {
		t.Errorf("requests of the junk records' keys, by method: %v; want %v, one HEAD each", got, want)
	}
}
