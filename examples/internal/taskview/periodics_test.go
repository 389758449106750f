package taskview

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/s3task/s3task"
)

// TestPeriodicsOf: each periodic task with its periods, and its latest run
// as the task's status or what stands in for one: purged, unrecorded,
// unreadable; none when no run was found.
func TestPeriodicsOf(t *testing.T) {
	t.Parallel()
	berlin := time.FixedZone("CET", 3600)
	at := time.Date(2026, 12, 7, 10, 7, 0, 0, berlin)
	hour := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	p := func(name string) s3task.Periodic {
		return s3task.Periodic{Name: name, Schedule: s3task.Every(time.Hour), Params: s3task.CreateParams{Type: "export"}}
	}
	task := &s3task.Task{ID: "7ZZZX5Q2M4Y7D6N2J3K8H9G0FA", Status: s3task.StatusCompleted}
	list := &s3task.PeriodicList{At: at, Periodics: []s3task.PeriodicStatus{
		{Periodic: p("none"), Prev: hour, Next: hour.Add(time.Hour)},
		{Periodic: p("done"), Prev: hour, Next: hour.Add(time.Hour), LastPeriod: hour, LastID: task.ID, Last: task},
		{Periodic: p("purged"), Prev: hour, Next: hour.Add(time.Hour), LastPeriod: hour.Add(-time.Hour), LastID: task.ID, Purged: true},
		{Periodic: p("unrecorded"), Prev: hour, Next: hour.Add(time.Hour), LastPeriod: hour, LastID: task.ID},
		{Periodic: p("unreadable"), Prev: hour, Next: hour.Add(time.Hour), LastPeriod: hour, Err: errors.New("damaged")},
	}}
	list.Periodics[0].Periodic.Missed = s3task.RunMissedOnce
	doc := PeriodicsOf(list, Of)
	if !doc.ReadAt.Equal(at) || doc.ReadAt.Location() != time.UTC || len(doc.Periodics) != 5 {
		t.Fatalf("PeriodicsOf: %+v", doc)
	}
	none := doc.Periodics[0]
	if want := (Periodic{Name: "none", Type: "export", Schedule: "every 1h0m0s", Missed: "run-once", PeriodStart: hour, NextRunAt: hour.Add(time.Hour)}); !cmp.Equal(want, none) {
		t.Errorf("no run (-want +got):\n%s", cmp.Diff(want, none))
	}
	for i, want := range []PeriodicRun{
		{Period: hour, TaskID: task.ID, Status: "completed"},
		{Period: hour.Add(-time.Hour), TaskID: task.ID, Status: RunPurged},
		{Period: hour, TaskID: task.ID, Status: RunUnrecorded},
		{Period: hour, Status: RunUnreadable, Error: "damaged"},
	} {
		got := doc.Periodics[i+1]
		if got.LastRun == nil {
			t.Errorf("%s: no last run", got.Name)
			continue
		}
		run := *got.LastRun
		if (run.Task != nil) != (want.Status == "completed") || run.Task != nil && run.Task.ID != task.ID {
			t.Errorf("%s: task %+v", got.Name, run.Task)
		}
		run.Task = nil
		if diff := cmp.Diff(want, run); diff != "" {
			t.Errorf("%s (-want +got):\n%s", got.Name, diff)
		}
	}
	b, err := json.Marshal(doc.Periodics[0])
	if err != nil {
		t.Fatal(err)
	}
	var keys map[string]any
	if err := json.Unmarshal(b, &keys); err != nil || keys["last_run"] != nil || len(keys) != 7 {
		t.Errorf("JSON of a periodic without a run: %s", b)
	}
}
