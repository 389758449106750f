// Package periodicspec reads periodic tasks and their schedules written as
// flag values: csvbatch's -summary-schedule takes a schedule, and
// "s3taskctl periodics -periodic" a whole declaration, so an operator
// writes the same schedule the same way to both.
//
// A schedule is one of
//
//	every:<duration>              s3task.Every: every:15m, every:1h
//	daily:HH:MM[:<zone>]          s3task.Daily: daily:02:00, daily:02:00:Europe/Berlin
//	weekly:<day>:HH:MM[:<zone>]   s3task.Weekly: weekly:mon:06:30, weekly:sunday:23:00:UTC
//
// where the zone is an IANA time zone name (default UTC) and the day a
// weekday, its name or its first three letters, in any case. A periodic
// task is
//
//	<name>:<type>:<schedule>[,missed=skip|run-once]
//
// such as nightly:export:daily:02:00,missed=run-once. The name and the
// type hold no ':'; the Store checks the rest (the name's characters, a
// period of at least s3task.MinPeriod) when it is made.
package periodicspec

import (
	"errors"
	"fmt"
	"strings"
	"time"
	_ "time/tzdata" // a zone name works where the system has no zone database

	"github.com/s3task/s3task"
)

// Schedule reads a schedule (see the package documentation).
func Schedule(s string) (s3task.Schedule, error) {
	kind, rest, _ := strings.Cut(s, ":")
	fail := func(format string, args ...any) (s3task.Schedule, error) {
		return s3task.Schedule{}, fmt.Errorf("schedule %q: "+format, append([]any{s}, args...)...)
	}
	switch strings.ToLower(kind) {
	case "every":
		d, err := time.ParseDuration(rest)
		if err != nil || d < s3task.MinPeriod || d%time.Second != 0 {
			return fail("want every:<duration>, a whole number of seconds of at least %s, such as every:15m", s3task.MinPeriod)
		}
		return s3task.Every(d), nil
	case "daily":
		hour, minute, loc, err := timeOfDay(rest)
		if err != nil {
			return fail("want daily:HH:MM or daily:HH:MM:<zone>, such as daily:02:00:Europe/Berlin: %v", err)
		}
		return s3task.Daily(hour, minute, loc), nil
	case "weekly":
		name, at, _ := strings.Cut(rest, ":")
		day, ok := weekday(name)
		if !ok {
			return fail("want weekly:<day>:HH:MM[:<zone>], such as weekly:mon:06:30: %q is not a weekday", name)
		}
		hour, minute, loc, err := timeOfDay(at)
		if err != nil {
			return fail("want weekly:<day>:HH:MM[:<zone>], such as weekly:mon:06:30: %v", err)
		}
		return s3task.Weekly(day, hour, minute, loc), nil
	}
	return fail("want every:<duration>, daily:HH:MM[:<zone>] or weekly:<day>:HH:MM[:<zone>]")
}

// timeOfDay reads HH:MM[:<zone>].
func timeOfDay(s string) (hour, minute int, loc *time.Location, _ error) {
	parts := strings.SplitN(s, ":", 3)
	if len(parts) < 2 {
		return 0, 0, nil, errors.New("no HH:MM")
	}
	hour, hok := twoDigits(parts[0])
	minute, mok := twoDigits(parts[1])
	if !hok || !mok || hour > 23 || minute > 59 {
		return 0, 0, nil, fmt.Errorf("%q is not a time of day from 00:00 to 23:59", parts[0]+":"+parts[1])
	}
	loc = time.UTC
	if len(parts) == 3 {
		if parts[2] == "" || parts[2] == "Local" {
			return 0, 0, nil, fmt.Errorf("zone %q: name one, such as UTC or Europe/Berlin (every process must compute the same periods)", parts[2])
		}
		var err error
		if loc, err = time.LoadLocation(parts[2]); err != nil {
			return 0, 0, nil, fmt.Errorf("zone %q: %v", parts[2], err)
		}
	}
	return hour, minute, loc, nil
}

// twoDigits reads a number written with two digits, 00 to 99.
func twoDigits(s string) (int, bool) {
	if len(s) != 2 || s[0] < '0' || s[0] > '9' || s[1] < '0' || s[1] > '9' {
		return 0, false
	}
	return int(s[0]-'0')*10 + int(s[1]-'0'), true
}

// weekday reads a weekday's name or its first three letters.
func weekday(s string) (time.Weekday, bool) {
	s = strings.ToLower(s)
	for d := time.Sunday; d <= time.Saturday; d++ {
		name := strings.ToLower(d.String())
		if s == name || s == name[:3] {
			return d, true
		}
	}
	return 0, false
}

// Periodic reads a periodic task (see the package documentation). Its
// Params name only its type.
func Periodic(s string) (s3task.Periodic, error) {
	spec, option, hasOption := strings.Cut(s, ",")
	name, rest, _ := strings.Cut(spec, ":")
	typ, sched, ok := strings.Cut(rest, ":")
	if !ok || name == "" || typ == "" {
		return s3task.Periodic{}, fmt.Errorf("periodic task %q: want <name>:<type>:<schedule>[,missed=skip|run-once], such as nightly:export:daily:02:00", s)
	}
	schedule, err := Schedule(sched)
	if err != nil {
		return s3task.Periodic{}, fmt.Errorf("periodic task %s: %w", name, err)
	}
	p := s3task.Periodic{Name: name, Schedule: schedule, Params: s3task.CreateParams{Type: typ}}
	if hasOption {
		missed, ok := strings.CutPrefix(option, "missed=")
		if p.Missed, err = Missed(missed); !ok || err != nil {
			return s3task.Periodic{}, fmt.Errorf("periodic task %s: %q: want missed=skip or missed=run-once after the schedule", name, option)
		}
	}
	return p, nil
}

// Missed reads a policy for missed runs: "skip" or "run-once".
func Missed(s string) (s3task.MissedRuns, error) {
	switch s {
	case "skip":
		return s3task.SkipMissed, nil
	case "run-once":
		return s3task.RunMissedOnce, nil
	}
	return 0, fmt.Errorf("missed runs %q: want skip or run-once", s)
}

// MissedName returns the word Missed reads as m: "skip" or "run-once".
func MissedName(m s3task.MissedRuns) string {
	if m == s3task.RunMissedOnce {
		return "run-once"
	}
	return m.String()
}
