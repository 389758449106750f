package periodicspec

import (
	"strings"
	"testing"
	"time"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/s3test"
)

func TestSchedule(t *testing.T) {
	t.Parallel()
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]s3task.Schedule{
		"every:15m":                      s3task.Every(15 * time.Minute),
		"every:1h30m":                    s3task.Every(90 * time.Minute),
		"EVERY:60s":                      s3task.Every(time.Minute),
		"daily:02:00":                    s3task.Daily(2, 0, time.UTC),
		"daily:23:59:UTC":                s3task.Daily(23, 59, time.UTC),
		"daily:02:30:Europe/Berlin":      s3task.Daily(2, 30, berlin),
		"weekly:mon:06:30":               s3task.Weekly(time.Monday, 6, 30, time.UTC),
		"weekly:Sunday:00:00":            s3task.Weekly(time.Sunday, 0, 0, time.UTC),
		"weekly:SAT:12:05:Europe/Berlin": s3task.Weekly(time.Saturday, 12, 5, berlin),
	} {
		got, err := Schedule(in)
		if err != nil {
			t.Errorf("Schedule(%q): %v", in, err)
			continue
		}
		// Schedules compare by the periods they name and how they read.
		at := time.Date(2026, 3, 29, 1, 30, 0, 0, time.UTC) // a daylight saving change in Berlin
		if got.String() != want.String() || !got.Prev(at).Equal(want.Prev(at)) || !got.Next(at).Equal(want.Next(at)) {
			t.Errorf("Schedule(%q) = %s, want %s", in, got, want)
		}
	}
	for in, why := range map[string]string{
		"":                         "want every:",
		"hourly":                   "want every:",
		"every:":                   "whole number of seconds",
		"every:30s":                "at least 1m0s",
		"every:90500ms":            "whole number of seconds",
		"every:-1h":                "at least",
		"daily:2:00":               "not a time of day",
		"daily:24:00":              "not a time of day",
		"daily:12:60":              "not a time of day",
		"daily:+1:00":              "not a time of day",
		"daily:02":                 "no HH:MM",
		"daily:02:00:Mars/Olympus": "zone",
		"daily:02:00:Local":        "name one",
		"daily:02:00:":             "name one",
		"weekly:someday:06:30":     "not a weekday",
		"weekly:mon":               "no HH:MM",
		"weekly:06:30":             "not a weekday",
	} {
		if got, err := Schedule(in); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("Schedule(%q) = %s, %v; want an error saying %q", in, got, err, why)
		}
	}
}

func TestPeriodic(t *testing.T) {
	t.Parallel()
	p, err := Periodic("nightly:export:daily:02:00:Europe/Berlin,missed=run-once")
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "nightly" || p.Params.Type != "export" || p.Schedule.String() != "daily at 02:00 Europe/Berlin" || p.Missed != s3task.RunMissedOnce {
		t.Errorf("Periodic: %+v", p)
	}
	if p, err := Periodic("often:ping:every:5m"); err != nil || p.Missed != s3task.SkipMissed || p.Schedule.String() != "every 5m0s" {
		t.Errorf("Periodic without missed=: %+v, %v", p, err)
	}
	if p, err := Periodic("often:ping:every:5m,missed=skip"); err != nil || p.Missed != s3task.SkipMissed {
		t.Errorf("Periodic with missed=skip: %+v, %v", p, err)
	}
	for in, why := range map[string]string{
		"":                                     "want <name>:<type>:<schedule>",
		"nightly":                              "want <name>:<type>:<schedule>",
		"nightly:export":                       "want <name>:<type>:<schedule>",
		":export:every:1h":                     "want <name>:<type>:<schedule>",
		"nightly::every:1h":                    "want <name>:<type>:<schedule>",
		"nightly:export:every:1s":              "periodic task nightly: schedule",
		"nightly:export:every:1h,late":         "want missed=skip or missed=run-once",
		"nightly:export:every:1h,missed=never": "want missed=skip or missed=run-once",
	} {
		if got, err := Periodic(in); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("Periodic(%q) = %+v, %v; want an error saying %q", in, got, err, why)
		}
	}
	// The Store takes what Periodic read.
	mem, err := s3test.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s3task.NewStore(mem.Client(), mem.Bucket, &s3task.StoreOptions{
		Files: map[string]s3task.FileOptions{"export": {NoInput: true}}, Periodic: []s3task.Periodic{p},
	}); err != nil {
		t.Errorf("the Store refuses the parsed declaration: %v", err)
	}
}

func TestMissedName(t *testing.T) {
	t.Parallel()
	for _, m := range []s3task.MissedRuns{s3task.SkipMissed, s3task.RunMissedOnce} {
		if got, err := Missed(MissedName(m)); err != nil || got != m {
			t.Errorf("Missed(MissedName(%s)) = %s, %v", m, got, err)
		}
	}
}
