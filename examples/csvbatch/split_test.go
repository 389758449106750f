package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/s3task/s3task/internal/s3test"
	"github.com/s3task/s3task/mems3"
)

// s3Server starts an S3 (mems3) on a loopback port that services reach as
// an external store, the way separate processes share a bucket, and sets
// the credentials they read from the environment (mems3 checks none). It
// stops after the services the test starts later. The test must not be
// parallel (t.Setenv).
func s3Server(t *testing.T) *mems3.Server {
	t.Helper()
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_REGION", "us-east-1")
	srv, err := mems3.Listen("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
	})
	return srv
}

// onS3 returns flags that point a service at srv's bucket.
func onS3(srv *mems3.Server, more ...string) []string {
	return append([]string{"-bucket", srv.Bucket(), "-s3-endpoint", srv.URL(), "-s3-path-style"}, more...)
}

// startOnS3 starts a service as startService does, with the flags of onS3
// first. Its S3 client's connections are closed after it stops: one that
// the client opened but never used would hold srv's Close for seconds.
func startOnS3(t *testing.T, srv *mems3.Server, o svcOptions) *service {
	t.Helper()
	o.args = onS3(srv, o.args...)
	cfg := testConfig(t, o)
	// The SDK cannot add a CA bundle to a client it did not build; srv
	// speaks plain HTTP anyway.
	t.Setenv("AWS_CA_BUNDLE", "")
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	cfg.s3Wrap = func(http.RoundTripper) http.RoundTripper { return tr }
	return startConfig(t, cfg)
}

// objectsOf reads and writes srv's bucket.
func objectsOf(srv *mems3.Server) s3test.Objects {
	return s3test.Objects{Client: srv.Client(), Bucket: srv.Bucket()}
}

// written names an object written, for eventBody; ETag may be "".
type written struct{ Key, ETag string }

// eventBody is an S3 event notification of objects written, as versitygw
// posts it: keys as they are, one record each.
func eventBody(t *testing.T, bucket string, objs ...written) string {
	t.Helper()
	type record struct {
		EventName string `json:"eventName"`
		S3        struct {
			Bucket struct {
				Name string `json:"name"`
			} `json:"bucket"`
			Object struct {
				Key  string `json:"key"`
				ETag string `json:"eTag,omitempty"`
			} `json:"object"`
		} `json:"s3"`
	}
	var body struct {
		Records []record `json:"Records"`
	}
	for _, o := range objs {
		var r record
		r.EventName = "s3:ObjectCreated:Put"
		r.S3.Bucket.Name, r.S3.Object.Key, r.S3.Object.ETag = bucket, o.Key, strings.Trim(o.ETag, `"`)
		body.Records = append(body.Records, r)
	}
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// postEvents posts body to the webhook at url and returns the status.
func (s *service) postEvents(url, body string) int {
	s.t.Helper()
	req, err := http.NewRequestWithContext(s.t.Context(), "POST", url, strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	resp, _ := s.do(req)
	return resp.StatusCode
}

// metricsNow reads the app's metrics, without a listener.
func (a *app) metricsNow(t *testing.T) scrape {
	t.Helper()
	w := httptest.NewRecorder()
	a.metrics.handler(a.log).ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	return parseScrape(t, w.Body.String())
}

// bannerOf returns what the app's start-up banner says.
func bannerOf(a *app) string {
	var b bytes.Buffer
	a.banner(&b)
	return b.String()
}

// TestSplitWorkerEvents: a -mode worker process serves the webhook on its
// own listener (-events-listen), and the events of a task submitted
// through a separate -mode api process start it there at once. The
// worker polls once an hour (-poll 1h -poll-max 1h) and does not list
// between the event and the task's end: the event, not a poll, started
// it.
func TestSplitWorkerEvents(t *testing.T) {
	srv := s3Server(t)
	api := startOnS3(t, srv, svcOptions{mode: modeAPI})
	worker := startOnS3(t, srv, svcOptions{mode: modeWorker, args: []string{
		"-events-token", "hook-secret", "-events-listen", "127.0.0.1:0", "-poll", "1h", "-poll-max", "1h"}})

	hook := worker.app.eventsURL
	if hook == "" {
		t.Fatal("the worker serves no webhook")
	}
	if got := bannerOf(worker.app); !strings.Contains(got, "csvbatch: events  POST "+hook+" (its own listener), token required: wake this worker for the tasks they name\n") {
		t.Errorf("the worker's banner does not say where its webhook is and what it does:\n%s", got)
	}
	if got := bannerOf(api.app); !strings.Contains(got, "csvbatch: S3") || strings.Contains(got, "events") {
		t.Errorf("the api process, which runs no worker and no ingest, has nothing to say of events:\n%s", got)
	}
	// The worker's first listing, at start, is over: the next is an hour away.
	polls := waitScrape(t, worker.app, "the worker's first listing", func(m scrape) bool { return m["s3task_worker_polls_total"] >= 1 })["s3task_worker_polls_total"]

	id := api.submit("started by its event", typeStats, nil, []byte("a,b\n1,2\n"))
	task, err := api.app.store.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	marker, record := api.app.store.MarkerKey(task), api.app.store.Prefix()+id+"/status.json"
	if code := worker.postEvents(hook, eventBody(t, srv.Bucket(), written{Key: marker})); code != http.StatusUnauthorized {
		t.Fatalf("a delivery without the token: %d, want 401", code)
	}
	if code := worker.postEvents(hook+"?token=hook-secret", eventBody(t, srv.Bucket(), written{Key: marker}, written{Key: record})); code != http.StatusNoContent {
		t.Fatalf("the delivery: %d, want 204", code)
	}
	done := api.waitFor(id, "completed", completed)
	if done.WorkerID != worker.app.worker.ID() {
		t.Errorf("completed by %q, want the worker %q", done.WorkerID, worker.app.worker.ID())
	}
	m := worker.app.metricsNow(t)
	if got := m["s3task_worker_polls_total"]; got != polls {
		t.Errorf("the worker listed %v times since the event; want 0, so that the event is what started the task", got-polls)
	}
	if got := m[series("s3task_webhook_events_total", "to", "worker")]; got != 2 {
		t.Errorf("events that concerned the worker: %v, want 2 (the marker and the record)", got)
	}
}

// TestSplitAPIIngest: a -mode api process with -events-token and -ingest
// makes a task of a file the moment its event comes (the next sweep is an
// hour away), and a separate -mode worker process, with no events, runs
// it: the api process announced it in the bucket's wake object, which the
// worker checks every -poll, and the worker lists no more often than
// -poll-max (an hour).
func TestSplitAPIIngest(t *testing.T) {
	srv := s3Server(t)
	objs := objectsOf(srv)
	// A file there before the api process starts: its first sweep makes
	// its task, so once that task exists the sweep has listed the folder,
	// and the next file can only come in by its event.
	if _, err := objs.Put(t.Context(), "incoming/0-before.csv", []byte("a\n1\n")); err != nil {
		t.Fatal(err)
	}
	api := startOnS3(t, srv, svcOptions{mode: modeAPI, args: []string{
		"-events-token", "hook-secret", "-ingest", "incoming/", "-ingest-sweep", "1h"}})
	worker := startOnS3(t, srv, svcOptions{mode: modeWorker, args: []string{"-poll", "50ms", "-poll-max", "1h"}})

	if got := bannerOf(api.app); !strings.Contains(got, "csvbatch: events  POST "+api.base+"/s3-events, token required: make tasks of the files under incoming/; "+
		"no worker here: the workers learn of new tasks from the bucket's wake object, every -poll\n") {
		t.Errorf("the api process's banner does not say what its webhook does:\n%s", got)
	}
	if got := bannerOf(worker.app); !strings.Contains(got, "csvbatch: events  none (no -events-token): the worker finds new tasks by polling (-poll 50ms, -poll-max 1h0m0s)\n") {
		t.Errorf("the worker's banner does not say it takes no events:\n%s", got)
	}
	api.waitFor(api.awaitIngested("incoming/0-before.csv", 1)[0].ID, "completed", completed)

	etag, err := objs.Put(t.Context(), "incoming/june.csv", []byte("id\n1\n2\n"))
	if err != nil {
		t.Fatal(err)
	}
	body := eventBody(t, srv.Bucket(), written{"incoming/june.csv", etag})
	if code := api.postEvents(api.base+"/s3-events?token=hook-secret", body); code != http.StatusNoContent {
		t.Fatalf("the delivery: %d, want 204", code)
	}
	task := api.awaitIngested("incoming/june.csv", 1)[0]
	done := api.waitFor(task.ID, "completed", completed)
	if done.WorkerID != worker.app.worker.ID() || done.Progress.ProcessedCount != 2 {
		t.Errorf("the file's task: worker %q, %d rows; want the worker process %q and 2 rows", done.WorkerID, done.Progress.ProcessedCount, worker.app.worker.ID())
	}
	if got := api.app.metricsNow(t)[series("s3task_webhook_events_total", "to", "ingest")]; got != 1 {
		t.Errorf("events that concerned the api process's ingest: %v, want 1", got)
	}
}

// waitScrape waits until cond holds of the app's metrics and returns them.
func waitScrape(t *testing.T, a *app, what string, cond func(scrape) bool) scrape {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		m := a.metricsNow(t)
		if cond(m) {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("still not %s after 30s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
