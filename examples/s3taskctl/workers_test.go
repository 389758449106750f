package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/examples/internal/taskview"
	"github.com/s3task/s3task/internal/s3test"
	"github.com/s3task/s3task/s3tasktest"
)

// TestWorkersCommand runs workers in process on the test kit's S3: a
// running worker is listed live, with its host, types, concurrency and the
// task it runs; a dead one's leftover object is listed not live; an object
// that cannot be read is reported with its key; -live keeps the live ones;
// a stopped worker is gone; exit codes as for the other commands.
func TestWorkersCommand(t *testing.T) {
	t.Parallel()
	srv := s3tasktest.NewS3(t)
	store := srv.NewStore(t, nil)
	objs := s3test.Objects{Client: srv.Client(), Bucket: srv.Bucket()}
	dir := store.Prefix() + "_workers/"

	// A dead worker's object, its last write long past its interval, and
	// an object that is not a presence object.
	dead, _ := json.Marshal(map[string]any{
		"kind": "s3task-worker", "schema_version": 1, "worker_id": "old-1", "host": "gone-host", "concurrency": 1,
		"types": nil, "started_at": srv.Now().Add(-time.Hour).UTC(), "running": []string{}, "presence_interval_ms": 1,
		"clock_margin_ms": 0, "written_at": srv.Now().UTC(),
	})
	for key, body := range map[string][]byte{dir + "old-1.json": dead, dir + "broken.json": []byte("{")} {
		if _, err := objs.Put(t.Context(), key, body); err != nil {
			t.Fatal(err)
		}
	}

	release := make(chan struct{})
	started := make(chan string, 1)
	var mux s3task.Mux
	if err := mux.HandleFunc("csv_enrich", func(ctx context.Context, job *s3task.Job) error {
		started <- job.Task.ID
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	w, err := s3task.NewWorker(store, &mux, &s3task.WorkerOptions{
		ID: "web-1", Concurrency: 2, PresenceInterval: 20 * time.Millisecond, PollInterval: 10 * time.Millisecond,
		ReconcileInterval: -1, Logger: s3tasktest.Logger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			close(release)
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	}
	t.Cleanup(stop)
	task := s3tasktest.Submit(t, store, s3task.CreateParams{Type: "csv_enrich"}, []byte("a\n"))
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the task did not start")
	}

	run := func(args ...string) (int, string) {
		t.Helper()
		var out bytes.Buffer
		c := newCLI(&out, io.Discard, func(string) (string, bool) { return "", false })
		c.store = store
		return c.run(t.Context(), append([]string{"workers"}, args...)), out.String()
	}
	listed := func(args ...string) taskview.Workers {
		t.Helper()
		code, out := run(append(args, "-json")...)
		var doc taskview.Workers
		dec := json.NewDecoder(strings.NewReader(out))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&doc); code != exitOK || err != nil {
			t.Fatalf("workers -json: exit %d, %v\n%s", code, err, out)
		}
		checkShape(t, "`workers`", out)
		return doc
	}

	// The running worker's next write names its task.
	var doc taskview.Workers
	deadline := time.Now().Add(20 * time.Second)
	for doc = listed(); ; doc = listed() {
		if i := slices.IndexFunc(doc.Workers, func(w taskview.Worker) bool { return w.ID == "web-1" }); i >= 0 && len(doc.Workers[i].Running) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("web-1 was not listed running its task: %+v", doc)
		}
		time.Sleep(20 * time.Millisecond)
	}
	host, _ := os.Hostname()
	if len(doc.Workers) != 2 || doc.Live != 1 || doc.Truncated || doc.ReadAt.IsZero() {
		t.Fatalf("workers: %+v; want web-1 live and old-1 not", doc)
	}
	web, old := doc.Workers[1], doc.Workers[0] // by ID
	if web.ID != "web-1" || !web.Live || web.Host != host || web.Concurrency != 2 || !slices.Equal(web.Types, []string{"csv_enrich"}) ||
		!slices.Equal(web.Running, []string{task.ID}) || web.LastPollAt == nil || web.StartedAt.IsZero() || web.PresenceIntervalSeconds != 0.02 {
		t.Errorf("the running worker: %+v", web)
	}
	if want := web.LastSeen.Add(2*20*time.Millisecond + s3task.DefaultClockMargin); !web.LiveUntil.Equal(want) {
		t.Errorf("the running worker is live until %s, want %s (its last write, two intervals and the margin)", web.LiveUntil, want)
	}
	if old.ID != "old-1" || old.Live || old.Host != "gone-host" || old.Types != nil || old.LastPollAt != nil || len(old.Running) != 0 {
		t.Errorf("the dead worker: %+v", old)
	}
	if len(doc.Broken) != 1 || doc.Broken[0].Key != dir+"broken.json" || doc.Broken[0].Error == "" {
		t.Errorf("unreadable objects: %+v, want %s", doc.Broken, dir+"broken.json")
	}

	if live := listed("-live"); len(live.Workers) != 1 || live.Workers[0].ID != "web-1" || live.Live != 1 {
		t.Errorf("workers -live: %+v, want web-1 only", live.Workers)
	}

	code, out := run()
	for _, want := range [][]string{
		{"2 workers listed, 1 live"},
		{"BUSY, LAST POLL and RUNNING are each worker's word as of its LAST SEEN write"},
		{"WORKER", "LIVE", "HOST", "BUSY", "TYPES"},
		{"web-1", "yes", host, "1/2", "csv_enrich"},
		{"old-1", "NO", "gone-host", "0/1", "*"},
		{"UNREADABLE " + dir + "broken.json"},
	} {
		if code != exitOK || !hasRow(out, want...) {
			t.Errorf("workers table has no row %q (exit %d)\n%s", want, code, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "web-1 ") && !strings.HasSuffix(line, task.ID):
			t.Errorf("web-1's row does not end with the task it runs, %s: %q", task.ID, line)
		case strings.HasPrefix(line, "old-1 ") && !strings.Contains(line, " never "):
			t.Errorf("old-1's row does not say it never polled: %q", line)
		}
	}

	if code, _ := run("extra"); code != exitUsage {
		t.Errorf("workers with an argument: exit %d, want %d", code, exitUsage)
	}
	var cut s3test.Cutter
	cut.Cut()
	var errOut bytes.Buffer
	c := newCLI(io.Discard, &errOut, func(string) (string, bool) { return "", false })
	c.store = srv.NewStore(t, nil, cut.Wrap)
	if code := c.run(t.Context(), []string{"workers"}); code != exitUnavailable {
		t.Errorf("workers with S3 unreachable: exit %d, want %d\n%s", code, exitUnavailable, errOut.String())
	}

	stop()
	if after := listed(); slices.ContainsFunc(after.Workers, func(w taskview.Worker) bool { return w.ID == "web-1" }) {
		t.Errorf("after its Run returned, web-1 is still listed: %+v", after.Workers)
	}
}
