package s3tasknats_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/s3test"
	"github.com/s3task/s3task/s3tasknats"
)

var quiet = &s3task.StoreOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}

// fleet is versitygw publishing its event notifications on a NATS server.
type fleet struct {
	t        *testing.T
	ctx      context.Context
	gw       *s3test.Gateway
	nats     *s3test.NATS
	bucket   string
	producer *s3task.Store
}

func newFleet(t *testing.T) *fleet {
	rc := s3test.RemoteT(t) // a real S3 server is around: so are its binaries
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	t.Cleanup(cancel)
	f := &fleet{t: t, ctx: ctx, nats: s3test.StartNATST(t)}
	gw, err := s3test.StartGateway(ctx, s3test.GatewayConfig{
		Bin:            rc.GatewayBin,
		Dir:            filepath.Join(t.TempDir(), "root"),
		EventNATSURL:   f.nats.URL,
		EventNATSTopic: "s3-events",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Stop() })
	f.gw = gw
	if f.bucket, err = s3test.NewBucket(ctx, gw.Client(), "nats"); err != nil {
		t.Fatal(err)
	}
	if f.producer, err = s3task.NewStore(gw.Client(), f.bucket, quiet); err != nil {
		t.Fatal(err)
	}
	return f
}

// worker runs a worker woken through NATS (polling every ten minutes) and
// returns its handler's starts and how many times it listed the markers.
func (f *fleet) worker(id string, opts *s3tasknats.Options, runs *sync.Map) (<-chan string, *atomic.Int32) {
	t := f.t
	store, err := s3task.NewStore(f.gw.Client(), f.bucket, quiet)
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan string, 64)
	polls := new(atomic.Int32)
	w, err := s3task.NewWorker(store, s3task.HandlerFunc(func(_ context.Context, j *s3task.Job) error {
		n, _ := runs.LoadOrStore(j.Task.ID, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
		started <- j.Task.ID
		return nil
	}), &s3task.WorkerOptions{
		ID: id, PollInterval: 10 * time.Minute, MaxPollInterval: 10 * time.Minute, ReconcileInterval: -1,
		Hooks: s3task.Hooks{OnPoll: func(s3task.PollStats) { polls.Add(1) }},
	})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(f.nats.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if _, err := s3tasknats.Subscribe(nc, "s3-events", w, opts); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	for polls.Load() == 0 {
		time.Sleep(10 * time.Millisecond) // the first listing
	}
	return started, polls
}

func (f *fleet) submit() string {
	t := f.t
	task, err := f.producer.Create(f.ctx, s3task.CreateParams{Name: "woken through NATS"})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.producer.UploadInput(f.ctx, task.ID, bytes.NewReader([]byte("a,b\n"))); err != nil {
		t.Fatal(err)
	}
	if _, err := f.producer.Submit(f.ctx, task.ID); err != nil {
		t.Fatal(err)
	}
	return task.ID
}

// awaitCompleted returns task id's record once it says completed (its
// handler has returned, and the worker writes it next).
func (f *fleet) awaitCompleted(id string) *s3task.Task {
	f.t.Helper()
	for {
		task, err := f.producer.Get(f.ctx, id)
		if err != nil {
			f.t.Fatal(err)
		}
		if task.Status == s3task.StatusCompleted {
			return task
		}
		if task.Terminal() {
			f.t.Fatalf("task %s is %s; want completed", id, task.Status)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestVersitygwThroughNATS: versitygw publishes its notifications on NATS,
// and a worker subscribed to them starts each submitted task long before
// its ten-minute poll could, listing the markers only once, at start-up.
func TestVersitygwThroughNATS(t *testing.T) {
	f := newFleet(t)
	var runs sync.Map
	started, polls := f.worker("w", nil, &runs)
	for i := range 5 {
		id := f.submit()
		select {
		case got := <-started:
			if got != id {
				t.Fatalf("task %d: started %s, want %s", i, got, id)
			}
		case <-time.After(time.Minute):
			t.Fatalf("task %d was not started within a minute of its Submit, with the worker polling every ten", i)
		}
	}
	if n := polls.Load(); n != 1 {
		t.Errorf("the worker listed the markers %d times; want once, at start-up", n)
	}
}

// TestQueueGroup: two workers in one queue group share the notifications;
// every task runs once, and none waits for a poll.
func TestQueueGroup(t *testing.T) {
	f := newFleet(t)
	var runs sync.Map
	a, pa := f.worker("a", &s3tasknats.Options{Queue: "workers"}, &runs)
	b, pb := f.worker("b", &s3tasknats.Options{Queue: "workers"}, &runs)
	var ids []string
	for range 10 {
		ids = append(ids, f.submit())
	}
	seen := map[string]string{}
	for len(seen) < len(ids) {
		select {
		case id := <-a:
			seen[id] = "a"
		case id := <-b:
			seen[id] = "b"
		case <-time.After(time.Minute):
			t.Fatalf("%d of %d tasks started within a minute, with both workers polling every ten", len(seen), len(ids))
		}
	}
	// Once a task's record says completed, no worker can claim it again:
	// its handler's runs are all counted.
	for _, id := range ids {
		task := f.awaitCompleted(id)
		n, _ := runs.Load(id)
		if got := n.(*atomic.Int32).Load(); got != 1 || task.Attempt != 1 {
			t.Errorf("task %s ran %d times, completed at attempt %d; want once, at attempt 1", id, got, task.Attempt)
		}
	}
	if n := pa.Load() + pb.Load(); n != 2 {
		t.Errorf("the workers listed the markers %d times; want once each, at start-up", n)
	}
	t.Logf("tasks per worker: %v", count(seen))
}

func count(m map[string]string) string {
	c := map[string]int{}
	for _, v := range m {
		c[v]++
	}
	return fmt.Sprint(c)
}

// TestSubscribeArguments: a clear error for each bad argument, and a
// message that is not a notification goes to OnError, nowhere else.
func TestSubscribeArguments(t *testing.T) {
	n := s3test.StartNATST(t)
	nc, err := nats.Connect(n.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	got := make(chan s3task.ObjectEvent, 8)
	notifier := notifierFunc(func(e s3task.ObjectEvent) bool {
		got <- e
		return true
	})
	for _, c := range []struct {
		nc      *nats.Conn
		subject string
		n       notifierFunc
	}{{nil, "s", notifier}, {nc, "", notifier}, {nc, "s", nil}} {
		var nn s3eventNotifier
		if c.n != nil {
			nn = c.n
		}
		if _, err := s3tasknats.Subscribe(c.nc, c.subject, nn, nil); err == nil {
			t.Errorf("Subscribe(%v, %q, %v): no error", c.nc != nil, c.subject, c.n != nil)
		}
	}
	bad := make(chan error, 1)
	if _, err := s3tasknats.Subscribe(nc, "s3-events", notifier, &s3tasknats.Options{OnError: func(_ *nats.Msg, err error) { bad <- err }}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("s3-events", []byte("not an event")); err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("s3-events", []byte(`{"Records":[{"eventName":"s3:ObjectCreated:Put","s3":{"bucket":{"name":"b"},"object":{"key":"tasks/x"}}}]}`)); err != nil {
		t.Fatal(err)
	}
	// One subscription gets its messages in the order they were published:
	// the first event to reach the notifier is the second message's, unless
	// the first made one too.
	ctx := t.Context()
	select {
	case err := <-bad:
		if err == nil {
			t.Error("OnError got a nil error")
		}
	case <-ctx.Done():
		t.Fatal("OnError was not called for a message that is not an event")
	}
	select {
	case e := <-got:
		if e != (s3task.ObjectEvent{Bucket: "b", Key: "tasks/x", Size: -1}) {
			t.Errorf("the notifier got %+v first; want the event of tasks/x", e)
		}
	case <-ctx.Done():
		t.Fatal("the notifier got nothing")
	}
}
