package main

import (
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/examples/internal/taskview"
	"github.com/s3task/s3task/s3tasktest"
)

// TestSummaryHandler: a task_summary task counts the tasks of the day
// before it, by type and status, itself included (running as it counts).
func TestSummaryHandler(t *testing.T) {
	t.Parallel()
	store := s3tasktest.NewStore(t, &s3task.StoreOptions{Files: fileOptions()})
	mux, err := newMux(store)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		s3tasktest.Submit(t, store, s3task.CreateParams{Type: typeStats}, []byte("a\n1\n"))
	}
	if _, err := store.Create(t.Context(), s3task.CreateParams{Type: typeEnrich}); err != nil {
		t.Fatal(err)
	}
	task, err := store.Enqueue(t.Context(), s3task.CreateParams{Type: typeSummary}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res := s3tasktest.Run(t, store, mux, task.ID)
	want := "type,status,tasks\ncsv_enrich,created,1\ncsv_stats,queued,2\ntask_summary,running,1\n"
	if res.Err != nil || string(res.Output) != want {
		t.Errorf("the summary: %v, output %q; want %q", res.Err, res.Output, want)
	}
	if p := res.Task.Progress; p.RowCount != 3 || p.ProcessedCount != 4 {
		t.Errorf("the summary's progress: %+v; want 3 rows of 4 tasks", p)
	}
}

// TestPeriodics: GET /periodics shows the periodic summary with its
// schedule and next run, and its latest run once the worker holding the
// fleet's reconciler lease has made it (at once: the hour's run is due
// within the hour), with the run's task; its output counts the tasks.
// Without -summary-schedule it lists none. The API does not create a
// task_summary task, which takes no file. Auth and strictness as for the
// other calls.
func TestPeriodics(t *testing.T) {
	t.Parallel()
	s := startService(t, svcOptions{args: []string{"-summary-schedule", "every:1h"}})
	var doc taskview.Periodics
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, body := s.request("GET", "/periodics", nil)
		dec := json.NewDecoder(strings.NewReader(string(body)))
		dec.DisallowUnknownFields()
		doc = taskview.Periodics{}
		if err := dec.Decode(&doc); err != nil {
			t.Fatalf("GET /periodics: %v\n%s", err, body)
		}
		if len(doc.Periodics) == 1 && doc.Periodics[0].LastRun != nil && doc.Periodics[0].LastRun.Status == string(s3task.StatusCompleted) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the summary's run was not listed completed after 30s: %s", body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	p := doc.Periodics[0]
	run := p.LastRun
	hour := doc.ReadAt.Truncate(time.Hour)
	if p.Name != summaryName || p.Type != typeSummary || p.Schedule != "every 1h0m0s" || p.Missed != "skip" ||
		!p.PeriodStart.Equal(hour) || !p.NextRunAt.Equal(hour.Add(time.Hour)) {
		t.Errorf("the periodic summary at %s: %+v", doc.ReadAt, p)
	}
	// Made in the hour the service started in: this one, or the one before
	// if the hour turned since.
	if !run.Period.Equal(hour) && !run.Period.Equal(hour.Add(-time.Hour)) || run.Task == nil || run.TaskID != run.Task.ID || run.Error != "" {
		t.Errorf("the latest run: %+v; want the run of %s or the hour before, with its task", run, hour)
	}
	if task := run.Task; task.Type != typeSummary || !task.NoInput || task.CreatedBy != "schedule" {
		t.Errorf("the run's task: %+v", task)
	}
	if diff := cmp.Diff([][]string{{"type", "status", "tasks"}, {typeSummary, "running", "1"}}, s.download(run.TaskID)); diff != "" {
		t.Errorf("the run's output (-want +got):\n%s", diff)
	}

	var raw map[string]json.RawMessage
	s.call("GET", "/periodics", nil, http.StatusOK, &raw)
	if keys := slices.Sorted(maps.Keys(raw)); !slices.Equal(keys, []string{"periodics", "read_at"}) {
		t.Errorf("GET /periodics keys %v", keys)
	}
	s.callError("GET", "/periodics?all=1", nil, http.StatusBadRequest, codeUnknownParameter)
	if status, _ := s.as("", nil).request("GET", "/periodics", nil); status != http.StatusUnauthorized {
		t.Errorf("/periodics without a token: %d, want 401", status)
	}
	resp, data := s.send("POST", "/periodics", "")
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST /periodics: %d, Allow %q, %s", resp.StatusCode, resp.Header.Get("Allow"), data)
	}
	if e := s.callError("POST", "/tasks", map[string]any{"name": "now", "type": typeSummary}, http.StatusBadRequest, "invalid_body"); !strings.Contains(e.Error.Message, "takes no file") {
		t.Errorf("creating a %s task: %s", typeSummary, e.Error.Message)
	}

	off := startService(t, svcOptions{mode: modeAPI})
	var none taskview.Periodics
	_, body := off.request("GET", "/periodics", nil)
	if err := json.Unmarshal(body, &none); err != nil || none.Periodics == nil || len(none.Periodics) != 0 || none.ReadAt.IsZero() {
		t.Errorf("with the summary off: %v, %s", err, body)
	}
}
