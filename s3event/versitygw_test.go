package s3event_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/s3test"
	"github.com/s3task/s3task/s3event"
)

// notifierFunc adapts a function to s3event.Notifier.
type notifierFunc func(s3task.ObjectEvent) bool

func (f notifierFunc) Notify(e s3task.ObjectEvent) bool { return f(e) }

// TestVersitygwWebhook runs a worker woken by versitygw's own webhook
// deliveries: with a PollInterval of ten minutes, each task submitted starts
// long before any poll could find it, and the worker lists nothing after its
// first listing. Then every delivery is posted again, three times, newest
// first: no task runs twice.
func TestVersitygwWebhook(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	k := startHooked(t, ctx)
	client, bucket := k.gw.Client(), k.bucket
	store, err := s3task.NewStore(client, bucket, quiet)
	if err != nil {
		t.Fatal(err)
	}
	producer, err := s3task.NewStore(k.gw.Client(), bucket, quiet)
	if err != nil {
		t.Fatal(err)
	}

	started := make(chan string, 16)
	var runs sync.Map
	var polls atomic.Int32
	w, err := s3task.NewWorker(store, s3task.HandlerFunc(func(_ context.Context, j *s3task.Job) error {
		n, _ := runs.LoadOrStore(j.Task.ID, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
		started <- j.Task.ID
		return nil
	}), &s3task.WorkerOptions{
		PollInterval:      10 * time.Minute,
		MaxPollInterval:   10 * time.Minute,
		ReconcileInterval: -1,
		Hooks:             s3task.Hooks{OnPoll: func(s3task.PollStats) { polls.Add(1) }},
	})
	if err != nil {
		t.Fatal(err)
	}
	k.target.Store(s3event.Notifier(w))
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	for polls.Load() == 0 {
		time.Sleep(10 * time.Millisecond) // the first listing
	}

	var ids []string
	for i := range 5 {
		task, err := producer.Create(ctx, s3task.CreateParams{Name: "woken by a webhook"})
		if err != nil {
			t.Fatal(err)
		}
		if err := producer.UploadInput(ctx, task.ID, bytes.NewReader([]byte("a,b\n"))); err != nil {
			t.Fatal(err)
		}
		if _, err := producer.Submit(ctx, task.ID); err != nil {
			t.Fatal(err)
		}
		select {
		case id := <-started:
			if id != task.ID {
				t.Fatalf("task %d: started %s, want %s", i, id, task.ID)
			}
		case <-time.After(time.Minute):
			t.Fatalf("task %d was not started within a minute of its Submit, with the worker polling every ten", i)
		}
		ids = append(ids, task.ID)
	}
	if n := polls.Load(); n != 1 {
		t.Errorf("the worker listed the markers %d times; want once, at start-up", n)
	}
	for _, id := range ids {
		if !waitFor(ctx, func() bool {
			got, err := producer.Get(ctx, id)
			return err == nil && got.Status == s3task.StatusCompleted
		}) {
			t.Fatalf("task %s did not complete", id)
		}
	}

	// Every delivery again, three times, the newest first.
	n := k.replay(t)
	if n < 5 {
		t.Fatalf("versitygw made %d deliveries for 5 tasks", n)
	}
	time.Sleep(2 * time.Second)
	for _, id := range ids {
		n, _ := runs.Load(id)
		if got := n.(*atomic.Int32).Load(); got != 1 {
			t.Errorf("task %s ran %d times; want once", id, got)
		}
	}
	t.Logf("%d deliveries from versitygw for 5 tasks", n)
}

func httpBody(b []byte) *readCloser { return &readCloser{bytes.NewReader(b)} }

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

// waitFor polls cond every 50 ms until it holds or ctx ends.
func waitFor(ctx context.Context, cond func() bool) bool {
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
	return true
}

// TestVersitygwIngest: files put under incoming/ become tasks through
// versitygw's webhook, fed to a worker and an Ingester at once; a name with
// "+" and a space, which versitygw sends unencoded, included. Every
// delivery posted again, three times, makes no second task.
func TestVersitygwIngest(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	k := startHooked(t, ctx)
	client, bucket := k.gw.Client(), k.bucket
	store, err := s3task.NewStore(client, bucket, quiet)
	if err != nil {
		t.Fatal(err)
	}
	var runsMu sync.Mutex
	inputs := map[string]string{} // task ID -> its input, as its handler read it
	w, err := s3task.NewWorker(store, s3task.HandlerFunc(func(ctx context.Context, j *s3task.Job) error {
		in, err := j.OpenInput(ctx)
		if err != nil {
			return err
		}
		defer in.Close()
		b, err := io.ReadAll(in)
		if err != nil {
			return err
		}
		runsMu.Lock()
		defer runsMu.Unlock()
		if _, ran := inputs[j.Task.ID]; ran {
			t.Errorf("task %s ran twice", j.Task.ID)
		}
		inputs[j.Task.ID] = string(b)
		return nil
	}), &s3task.WorkerOptions{PollInterval: 10 * time.Minute, MaxPollInterval: 10 * time.Minute, ReconcileInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	ing, err := s3task.NewIngester(store, &s3task.IngestOptions{Prefix: "incoming/"})
	if err != nil {
		t.Fatal(err)
	}
	k.target.Store(s3event.All(w, ing))
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = w.Run(runCtx) })
	wg.Go(func() { _ = ing.Run(runCtx) })
	defer func() { stop(); wg.Wait() }()

	files := map[string]string{
		"incoming/plain.csv":         "a\n1\n",
		"incoming/a+b and c.csv":     "a\n2\n",
		"incoming/deep/folder/x.csv": "a\n3\n",
	}
	for key, body := range files {
		if _, err := (s3test.Objects{Client: client, Bucket: bucket}).Put(ctx, key, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	ran := func() map[string]string {
		runsMu.Lock()
		defer runsMu.Unlock()
		got := map[string]string{}
		for id, in := range inputs {
			task, err := store.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			got[task.Metadata[s3task.MetaSourceKey]] = in
		}
		return got
	}
	if !waitFor(ctx, func() bool { return len(ran()) == len(files) }) {
		t.Fatalf("ran %v; want a task per file", ran())
	}
	if diff := cmp.Diff(files, ran()); diff != "" {
		t.Errorf("inputs of the tasks by source (-want +got):\n%s", diff)
	}
	k.replay(t)
	time.Sleep(3 * time.Second)
	page, err := store.List(ctx, s3task.ListOptions{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	tasks := len(page.Tasks)
	if tasks != len(files) {
		t.Errorf("%d tasks after every delivery came three times more; want %d", tasks, len(files))
	}
}

// hooked is a versitygw whose webhook posts to an s3event handler in the
// test, which passes the deliveries to whatever target holds, and keeps
// them for the test to post again.
type hooked struct {
	gw     *s3test.Gateway
	bucket string
	h      http.Handler
	target atomic.Value // s3event.Notifier

	mu         sync.Mutex
	deliveries [][]byte
}

const hookToken = "webhook-secret"

func startHooked(t *testing.T, ctx context.Context) *hooked {
	t.Helper()
	rc := s3test.RemoteT(t)
	k := &hooked{}
	h, err := s3event.NewHandler(notifierFunc(func(e s3task.ObjectEvent) bool {
		if n, ok := k.target.Load().(s3event.Notifier); ok {
			return n.Notify(e)
		}
		return false
	}), &s3event.HandlerOptions{Token: hookToken})
	if err != nil {
		t.Fatal(err)
	}
	k.h = h
	ts := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var buf bytes.Buffer
		if _, err := buf.ReadFrom(r.Body); err != nil {
			t.Errorf("read a delivery: %v", err)
		}
		k.mu.Lock()
		k.deliveries = append(k.deliveries, buf.Bytes())
		k.mu.Unlock()
		r.Body = httpBody(buf.Bytes())
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != http.StatusNoContent {
			t.Errorf("the handler answered %d to a delivery of versitygw: %s\n%s", rec.Code, rec.Body, buf.Bytes())
		}
		rw.WriteHeader(rec.Code)
	}))
	t.Cleanup(ts.Close)
	// The receiver listens first: versitygw posts a test event at start-up.
	gw, err := s3test.StartGateway(ctx, s3test.GatewayConfig{
		Bin:             rc.GatewayBin,
		Dir:             filepath.Join(t.TempDir(), "root"),
		EventWebhookURL: ts.URL + "/?token=" + hookToken,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Stop() })
	k.gw = gw
	if k.bucket, err = s3test.NewBucket(ctx, gw.Client(), "events"); err != nil {
		t.Fatal(err)
	}
	return k
}

// replay posts every delivery so far again, three times, the newest first.
func (k *hooked) replay(t *testing.T) int {
	t.Helper()
	k.mu.Lock()
	again := slices.Clone(k.deliveries)
	k.mu.Unlock()
	slices.Reverse(again)
	for range 3 {
		for _, body := range again {
			rec := httptest.NewRecorder()
			k.h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/?token="+hookToken, bytes.NewReader(body)))
			if rec.Code != http.StatusNoContent {
				t.Fatalf("a replayed delivery: %d %s", rec.Code, rec.Body)
			}
		}
	}
	return len(again)
}

var quiet = &s3task.StoreOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
