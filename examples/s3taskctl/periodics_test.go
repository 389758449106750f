package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/examples/internal/taskview"
	"github.com/s3task/s3task/s3tasktest"
)

// TestPeriodicsCommand: periodics shows the periodic tasks -periodic
// declares, with the latest run a worker of the fleet made and its task,
// and "none yet" for one without a run; -json prints the shape README.md
// documents, csvbatch's GET /periodics; a declaration that cannot be read,
// or that the library refuses, is a usage error, and so is none at all.
func TestPeriodicsCommand(t *testing.T) {
	t.Parallel()
	f := newFixture(t, buildCommand(t))

	// The fleet: one worker, which makes the run of the hour that has
	// begun as soon as it holds the reconciler lease.
	fleet, err := s3task.NewStore(f.srv.Client(), f.srv.Bucket, &s3task.StoreOptions{
		Files:    map[string]s3task.FileOptions{"report": {NoInput: true}},
		Periodic: []s3task.Periodic{{Name: "hourly-report", Schedule: s3task.Every(time.Hour), Params: s3task.CreateParams{Type: "report"}}},
		Logger:   s3tasktest.Logger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	var mux s3task.Mux
	if err := mux.HandleFunc("report", func(context.Context, *s3task.Job) error { return nil }); err != nil {
		t.Fatal(err)
	}
	w, err := s3task.NewWorker(fleet, &mux, &s3task.WorkerOptions{PollInterval: 10 * time.Millisecond, Logger: s3tasktest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var made s3task.PeriodicStatus
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		list, err := fleet.Periodics(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if made = list.Periodics[0]; made.Last != nil && made.Last.Status == s3task.StatusCompleted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker made no run in 30s: %+v", made)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}

	declared := []string{"-periodic", "hourly-report:report:every:1h", "-periodic", "nightly:export:daily:02:00:UTC,missed=run-once"}
	var doc taskview.Periodics
	r := f.want(exitOK, &doc, append([]string{"periodics", "-json"}, declared...)...)
	checkShape(t, "`periodics`", r.stdout)
	if len(doc.Periodics) != 2 || doc.ReadAt.IsZero() {
		t.Fatalf("periodics -json: %+v", doc)
	}
	hourly, nightly := doc.Periodics[0], doc.Periodics[1]
	hour := doc.ReadAt.Truncate(time.Hour)
	if hourly.Name != "hourly-report" || hourly.Type != "report" || hourly.Schedule != "every 1h0m0s" || hourly.Missed != "skip" ||
		!hourly.PeriodStart.Equal(hour) || !hourly.NextRunAt.Equal(hour.Add(time.Hour)) {
		t.Errorf("the hourly report at %s: %+v", doc.ReadAt, hourly)
	}
	if run := hourly.LastRun; run == nil || run.TaskID != made.LastID || !run.Period.Equal(made.LastPeriod) || run.Status != "completed" ||
		run.Task == nil || run.Task.ID != made.LastID || run.Error != "" {
		t.Errorf("the hourly report's latest run: %+v; want %s of %s, completed", run, made.LastID, made.LastPeriod)
	}
	if nightly.Name != "nightly" || nightly.Schedule != "daily at 02:00 UTC" || nightly.Missed != "run-once" || nightly.LastRun != nil ||
		!nightly.NextRunAt.After(doc.ReadAt) || nightly.NextRunAt.Sub(nightly.PeriodStart) != 24*time.Hour {
		t.Errorf("the nightly export, never run: %+v", nightly)
	}

	r = f.want(exitOK, nil, append([]string{"periodics"}, declared...)...)
	for _, want := range [][]string{
		{"2 periodic tasks"},
		{"NAME", "TYPE", "SCHEDULE", "MISSED", "NEXT", "RUN", "LAST", "PERIOD", "TASK", "STATUS"},
		{"hourly-report", "report", "every", "1h0m0s", "skip"},
		{"nightly", "export", "daily", "at", "02:00", "UTC", "run-once"},
	} {
		if !hasRow(r.stdout, want...) {
			t.Errorf("periodics table has no row %q\n%s", want, r.stdout)
		}
	}
	for _, line := range strings.Split(r.stdout, "\n") {
		words := strings.Join(strings.Fields(line), " ")
		switch {
		case strings.HasPrefix(line, "hourly-report ") && !strings.HasSuffix(words, made.LastPeriod.UTC().Format("2006-01-02 15:04:05Z")+" "+made.LastID+" completed"):
			t.Errorf("the hourly report's row does not end with its run's period, task and status, %s %s completed: %q", made.LastPeriod, made.LastID, line)
		case strings.HasPrefix(line, "nightly ") && !strings.HasSuffix(words, " - - none yet"):
			t.Errorf("the nightly export's row does not say it has no run yet: %q", line)
		}
	}

	for _, args := range [][]string{
		{"periodics"},
		{"periodics", "-periodic", "hourly-report"},
		{"periodics", "-periodic", "hourly-report:report:hourly"},
		{"periodics", "-periodic", "hourly-report:report:every:10s"},
		{"periodics", "-periodic", "hourly-report:report:daily:02:00:Mars/Olympus"},
		{"periodics", "-periodic", "hourly-report:report:every:1h,missed=never"},
		{"periodics", "-periodic", "hourly report:report:every:1h"},                          // the library refuses the name
		{"periodics", "-periodic", "a:report:every:1h", "-periodic", "a:report:daily:02:00"}, // two of one name
		{"periodics", "-periodic", "hourly-report:report:every:1h", "extra"},                 // an argument
	} {
		f.wantError(exitUsage, "usage", args...)
	}
}
