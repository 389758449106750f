package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/s3task/s3task/examples/internal/taskview"
)

// TestStats: GET /stats counts the tasks of its span by status and type,
// the failed ones by category and whether a retry is due, the scheduled
// ones, names the oldest unfinished task and the one that has waited
// longest for a worker, and cuts the span into a timeline of whole
// buckets, oldest first, whose counts add up.
func TestStats(t *testing.T) {
	t.Parallel()
	s, ids := viewsSetup(t)
	var st statsResponse
	s.call("GET", "/stats", nil, http.StatusOK, &st)
	wantStatus := map[string]int{"created": 1, "queued": 2, "running": 0, "completed": 1, "failed": 3, "abandoned": 1}
	if diff := cmp.Diff(wantStatus, st.ByStatus); diff != "" {
		t.Errorf("by_status (-want +got):\n%s", diff)
	}
	wantType := map[string]map[string]int{
		typeEnrich: {"created": 1, "queued": 1, "running": 0, "completed": 0, "failed": 1, "abandoned": 0},
		typeStats:  {"created": 0, "queued": 1, "running": 0, "completed": 1, "failed": 2, "abandoned": 1},
	}
	if diff := cmp.Diff(wantType, st.ByType); diff != "" {
		t.Errorf("by_type (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{catIO: 2, catBadInput: 1}, st.Failures); diff != "" {
		t.Errorf("failures (-want +got):\n%s", diff)
	}
	if st.Span != "24h" || st.IntervalSeconds != 3600 || st.Tasks != 8 || st.Truncated || st.MaxTasks != 1000 ||
		st.Unfinished != 3 || st.WaitingRetry != 1 || st.Dead != 2 || st.Scheduled != 1 || st.AwaitingInput != 1 || st.Broken != 0 {
		t.Errorf("stats: %+v", st)
	}
	if o := st.OldestUnfinished; o == nil || o.ID != ids["queued"] || o.Name != "queued" || o.Status != "queued" || o.Type != typeStats {
		t.Errorf("oldest_unfinished: %+v, want the queued task %s", o, ids["queued"])
	}
	// No worker runs here. The queued task waits from its submit; the
	// scheduled one starts in an hour and the retrying one retries in an
	// hour, so neither waits yet, and only the queued task's type has a
	// wait.
	if o := st.OldestWaiting; o == nil || o.ID != ids["queued"] || o.Status != "queued" || o.Type != typeStats {
		t.Errorf("oldest_waiting: %+v, want the queued task %s", o, ids["queued"])
	}
	if _, ok := st.WaitByType[typeStats]; !ok || len(st.WaitByType) != 1 || st.OldestWaitingAgeSeconds > 600 || st.OldestWaitingAgeSeconds != st.WaitByType[typeStats] {
		t.Errorf("oldest_waiting_age_seconds %d, wait_by_type %v; want the queued task's wait, under the test's length, for %s alone",
			st.OldestWaitingAgeSeconds, st.WaitByType, typeStats)
	}
	if len(st.Timeline) != 24 {
		t.Fatalf("%d buckets over 24h, want 24", len(st.Timeline))
	}
	last := st.Timeline[len(st.Timeline)-1]
	if !st.Since.Equal(st.Timeline[0].Start) || !last.Start.Equal(time.Now().UTC().Truncate(time.Hour)) ||
		!st.Timeline[1].Start.Equal(st.Timeline[0].Start.Add(time.Hour)) {
		t.Errorf("timeline from %v to %v, since %v: want 24 hours ending with this one, oldest first", st.Timeline[0].Start, last.Start, st.Since)
	}
	var sum statsBucket
	for _, b := range st.Timeline {
		sum.Created += b.Created
		sum.Completed += b.Completed
		sum.Failed += b.Failed
		sum.Abandoned += b.Abandoned
	}
	if want := (statsBucket{Created: 8, Completed: 1, Failed: 2, Abandoned: 1}); sum != want {
		t.Errorf("timeline totals %+v, want %+v", sum, want)
	}

	// The other spans, and a bound on the records read.
	for _, tc := range []struct {
		span     string
		buckets  int
		interval time.Duration
	}{{"1h", 12, 5 * time.Minute}, {"7d", 7, 24 * time.Hour}, {"30d", 30, 24 * time.Hour}} {
		s.call("GET", "/stats?span="+tc.span, nil, http.StatusOK, &st)
		if len(st.Timeline) != tc.buckets || st.IntervalSeconds != int64(tc.interval/time.Second) || st.Tasks != 8 ||
			!st.Timeline[len(st.Timeline)-1].Start.Equal(time.Now().UTC().Truncate(tc.interval)) {
			t.Errorf("span %s: %d buckets of %d s, %d tasks", tc.span, len(st.Timeline), st.IntervalSeconds, st.Tasks)
		}
	}
	s.call("GET", "/stats?span=7d&max_tasks=3", nil, http.StatusOK, &st)
	if st.Tasks != 3 || !st.Truncated || st.MaxTasks != 3 {
		t.Errorf("max_tasks=3: %d tasks, truncated %v", st.Tasks, st.Truncated)
	}

	for _, query := range []string{"span=2h", "span=24H", "span=1h&span=7d", "max_tasks=0", "max_tasks=10001", "max_tasks=many", "span=%zz"} {
		s.callError("GET", "/stats?"+query, nil, http.StatusBadRequest, "invalid_query")
	}
	if status, _ := s.as("", nil).request("GET", "/stats", nil); status != http.StatusUnauthorized {
		t.Errorf("/stats without a token: %d, want 401", status)
	}
}

// TestStatsEmpty: a bucket without tasks answers zeros, empty maps and a
// null oldest task, not nulls a client must guard against.
func TestStatsEmpty(t *testing.T) {
	t.Parallel()
	s := startService(t, svcOptions{mode: modeAPI})
	status, body := s.request("GET", "/stats?span=1h", nil)
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, body)
	}
	for _, want := range []string{`"by_status": {`, `"by_type": {}`, `"failures": {}`, `"unfinished_by_type": {}`, `"oldest_unfinished": null`,
		`"oldest_waiting": null`, `"oldest_waiting_age_seconds": 0`, `"wait_by_type": {}`, `"scheduled": 0`, `"tasks": 0`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("answer lacks %s:\n%s", want, body)
		}
	}
	var st statsResponse
	if err := json.Unmarshal(body, &st); err != nil || len(st.Timeline) != 12 || st.ByStatus["queued"] != 0 || len(st.ByStatus) != 6 {
		t.Errorf("%v: %+v", err, st)
	}
}

// TestWorkers: GET /workers lists the service's own worker, live, with
// what it announces; a worker that stopped writing is listed not live,
// with the tasks it held; an unreadable presence object is listed apart.
func TestWorkers(t *testing.T) {
	t.Parallel()
	s := startService(t, svcOptions{})
	self := s.app.worker.ID()
	list := s.waitWorkers("the service's worker", func(l taskview.Workers) bool {
		return slices.ContainsFunc(l.Workers, func(w taskview.Worker) bool { return w.ID == self })
	})
	w := list.Workers[slices.IndexFunc(list.Workers, func(w taskview.Worker) bool { return w.ID == self })]
	if !w.Live || w.Concurrency != s.app.cfg.concurrency || w.Host == "" || w.StartedAt.IsZero() || w.LastSeen.IsZero() ||
		w.Running == nil || w.PresenceIntervalSeconds <= 0 || list.Live != 1 || list.ReadAt.IsZero() {
		t.Errorf("the service's worker: %+v in %+v", w, list)
	}
	if want := slices.Sorted(slices.Values(typeNames())); !slices.Equal(w.Types, want) {
		t.Errorf("types %v, want %v", w.Types, want)
	}

	// A worker killed while it held a task: its object stays, unwritten.
	held := s.create("held by a dead worker", typeStats, nil).Task.ID
	prefix := s.app.store.Prefix() + "_workers/"
	gone := fmt.Sprintf(`{"kind":"s3task-worker","schema_version":1,"worker_id":"worker-gone","host":"old-host","concurrency":4,`+
		`"types":null,"library_version":"v0.9.0","started_at":%q,"last_poll_at":%q,"running":[%q],`+
		`"presence_interval_ms":1,"clock_margin_ms":0,"written_at":%q}`,
		rfc3339(time.Now().Add(-time.Hour)), rfc3339(time.Now().Add(-time.Minute)), held, rfc3339(time.Now()))
	for key, body := range map[string]string{prefix + "worker-gone.json": gone, prefix + "junk.json": "{"} {
		if _, err := s.objects().Put(t.Context(), key, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	list = s.waitWorkers("the dead worker, not live", func(l taskview.Workers) bool {
		i := slices.IndexFunc(l.Workers, func(w taskview.Worker) bool { return w.ID == "worker-gone" })
		return i >= 0 && !l.Workers[i].Live
	})
	g := list.Workers[slices.IndexFunc(list.Workers, func(w taskview.Worker) bool { return w.ID == "worker-gone" })]
	if g.Host != "old-host" || g.Concurrency != 4 || g.Types != nil || g.Version != "v0.9.0" || !slices.Equal(g.Running, []string{held}) || g.LastPollAt == nil {
		t.Errorf("the dead worker: %+v", g)
	}
	if len(list.Broken) != 1 || list.Broken[0].Key != prefix+"junk.json" || list.Broken[0].Error == "" || list.Live != 1 {
		t.Errorf("broken %+v, live %d", list.Broken, list.Live)
	}
	status, body := s.request("GET", "/workers", nil)
	if status != http.StatusOK || !strings.Contains(string(body), `"types": null`) {
		t.Errorf("a worker offered every type has null types: %d %s", status, body)
	}

	s.callError("GET", "/workers?%zz", nil, http.StatusBadRequest, "invalid_query")
	if status, _ := s.as("", nil).request("GET", "/workers", nil); status != http.StatusUnauthorized {
		t.Errorf("/workers without a token: %d, want 401", status)
	}
	api := startService(t, svcOptions{mode: modeAPI})
	var none taskview.Workers
	api.call("GET", "/workers", nil, http.StatusOK, &none)
	if len(none.Workers) != 0 || none.Workers == nil || none.Broken == nil {
		t.Errorf("without workers: %+v", none)
	}
}

// waitWorkers polls GET /workers until cond holds, failing the test after
// a deadline.
func (s *service) waitWorkers(what string, cond func(taskview.Workers) bool) taskview.Workers {
	s.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		var l taskview.Workers
		s.call("GET", "/workers", nil, http.StatusOK, &l)
		if cond(l) {
			return l
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("workers: still not %s after 30s: %+v", what, l)
		}
		<-tick.C
	}
}

// TestOverviewRoutes: the new paths answer a method they do not take with
// a JSON 405 and an Allow header, and a path under them they do not have
// with the API's JSON 404.
func TestOverviewRoutes(t *testing.T) {
	t.Parallel()
	s := startService(t, svcOptions{mode: modeAPI})
	id := s.create("x", typeStats, nil).Task.ID
	for _, tc := range []struct{ method, path, allow string }{
		{"POST", "/stats", "GET, HEAD"},
		{"DELETE", "/workers", "GET, HEAD"},
		{"GET", "/tasks/" + id + "/schedule", "POST"},
	} {
		resp, data := s.send(tc.method, tc.path, "")
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != tc.allow || !strings.Contains(string(data), "method_not_allowed") {
			t.Errorf("%s %s: %d, Allow %q, %s; want 405, Allow %q", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Allow"), data, tc.allow)
		}
	}
	if status, _ := s.as("", nil).request("POST", "/stats", nil); status != http.StatusUnauthorized {
		t.Errorf("POST /stats without a token: %d, want 401", status)
	}
}
