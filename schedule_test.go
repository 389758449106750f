package s3task

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the zones below, whatever the machine has
)

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func TestSchedulePrevNext(t *testing.T) {
	berlin := mustZone(t, "Europe/Berlin")
	at := func(loc *time.Location, y int, m time.Month, d, h, min int) time.Time {
		return time.Date(y, m, d, h, min, 0, 0, loc)
	}
	utc := time.UTC
	for _, c := range []struct {
		name       string
		s          Schedule
		t          time.Time
		prev, next time.Time
	}{
		{"every 5m, inside", Every(5 * time.Minute), at(utc, 2026, 12, 7, 12, 7).Add(30 * time.Second), at(utc, 2026, 12, 7, 12, 5), at(utc, 2026, 12, 7, 12, 10)},
		{"every 5m, at a start", Every(5 * time.Minute), at(utc, 2026, 12, 7, 12, 5), at(utc, 2026, 12, 7, 12, 5), at(utc, 2026, 12, 7, 12, 10)},
		{"every day, any zone", Every(24 * time.Hour), at(berlin, 2026, 12, 7, 0, 30), at(utc, 2026, 12, 6, 0, 0), at(utc, 2026, 12, 7, 0, 0)},
		{"daily, before today's", Daily(2, 0, berlin), at(berlin, 2026, 12, 7, 1, 0), at(berlin, 2026, 12, 6, 2, 0), at(berlin, 2026, 12, 7, 2, 0)},
		{"daily, after today's", Daily(2, 0, berlin), at(berlin, 2026, 12, 7, 2, 1), at(berlin, 2026, 12, 7, 2, 0), at(berlin, 2026, 12, 8, 2, 0)},
		{"daily, at a start", Daily(2, 0, berlin), at(berlin, 2026, 12, 7, 2, 0), at(berlin, 2026, 12, 7, 2, 0), at(berlin, 2026, 12, 8, 2, 0)},
		{"daily, across a month", Daily(23, 30, nil), at(utc, 2026, 12, 31, 23, 45), at(utc, 2026, 12, 31, 23, 30), at(utc, 2027, 1, 1, 23, 30)},
		{"weekly, on the day, at the start", Weekly(time.Monday, 6, 30, nil), at(utc, 2026, 12, 7, 6, 30), at(utc, 2026, 12, 7, 6, 30), at(utc, 2026, 12, 14, 6, 30)},
		{"weekly, the day before", Weekly(time.Monday, 6, 30, nil), at(utc, 2026, 12, 6, 23, 0), at(utc, 2026, 11, 30, 6, 30), at(utc, 2026, 12, 7, 6, 30)},
		{"weekly, the day, earlier", Weekly(time.Monday, 6, 30, nil), at(utc, 2026, 12, 7, 6, 0), at(utc, 2026, 11, 30, 6, 30), at(utc, 2026, 12, 7, 6, 30)},
	} {
		if got := c.s.Prev(c.t); !got.Equal(c.prev) {
			t.Errorf("%s: %s.Prev(%s) = %s, want %s", c.name, c.s, c.t, got, c.prev)
		}
		if got := c.s.Next(c.t); !got.Equal(c.next) {
			t.Errorf("%s: %s.Next(%s) = %s, want %s", c.name, c.s, c.t, got, c.next)
		}
	}
}

// Across daylight saving changes a daily schedule still starts once a
// local day, at the time of day it names where that time exists.
func TestScheduleDaylightSaving(t *testing.T) {
	berlin := mustZone(t, "Europe/Berlin")
	for _, c := range []struct {
		name string
		from time.Time
	}{
		{"spring forward (02:30 does not exist on 29 March)", time.Date(2026, 3, 27, 12, 0, 0, 0, berlin)},
		{"fall back (02:30 happens twice on 25 October)", time.Date(2026, 10, 23, 12, 0, 0, 0, berlin)},
	} {
		s := Daily(2, 30, berlin)
		at, days := c.from, map[string]int{}
		for range 5 {
			next := s.Next(at)
			if !next.After(at) {
				t.Fatalf("%s: Next(%s) = %s, not after", c.name, at, next)
			}
			if prev := s.Prev(next); !prev.Equal(next) {
				t.Errorf("%s: Prev(%s) = %s, want the start itself", c.name, next, prev)
			}
			days[next.In(berlin).Format(time.DateOnly)]++
			at = next
		}
		if len(days) != 5 {
			t.Errorf("%s: five starts fell on %d local days (%v), want one a day", c.name, len(days), days)
		}
	}
}

// For any time: Prev(t) <= t < Next(t), and no period starts between them.
func TestScheduleBrackets(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	zones := []*time.Location{time.UTC, mustZone(t, "Europe/Berlin"), mustZone(t, "America/New_York"), mustZone(t, "Asia/Kolkata")}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 2000 {
		loc := zones[i%len(zones)]
		var s Schedule
		switch i % 3 {
		case 0:
			s = Every(time.Duration(1+rng.IntN(180)) * time.Minute)
		case 1:
			s = Daily(rng.IntN(24), rng.IntN(60), loc)
		default:
			s = Weekly(time.Weekday(rng.IntN(7)), rng.IntN(24), rng.IntN(60), loc)
		}
		tm := base.Add(time.Duration(rng.Int64N(int64(365 * 24 * time.Hour))))
		prev, next := s.Prev(tm), s.Next(tm)
		if prev.After(tm) || !next.After(tm) {
			t.Fatalf("%s at %s: Prev %s, Next %s; want Prev <= t < Next", s, tm, prev, next)
		}
		if got := s.Next(prev); !got.Equal(next) {
			t.Fatalf("%s at %s: Next(Prev) = %s, want Next = %s: a start between them", s, tm, got, next)
		}
		if got := s.Prev(next); !got.Equal(next) {
			t.Fatalf("%s at %s: Prev(Next) = %s, want %s", s, tm, got, next)
		}
	}
}

func TestScheduleValidate(t *testing.T) {
	for _, c := range []struct {
		s    Schedule
		want string // "" for valid
	}{
		{Every(time.Minute), ""},
		{Every(90 * time.Second), ""},
		{Every(59 * time.Second), "at least"},
		{Every(time.Minute + time.Millisecond), "whole number of seconds"},
		{Daily(0, 0, nil), ""},
		{Daily(24, 0, nil), "hour is 0 to 23"},
		{Daily(3, 60, nil), "minute 0 to 59"},
		{Weekly(time.Saturday, 23, 59, nil), ""},
		{Weekly(7, 1, 0, nil), "not a weekday"},
		{Schedule{}, "no schedule"},
	} {
		err := c.s.validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v, want valid", c.s, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want an error saying %q", c.s, err, c.want)
		}
	}
	if !(Schedule{}).Prev(time.Now()).IsZero() || Daily(0, 0, nil).IsZero() {
		t.Error("the zero Schedule names periods, or midnight UTC is taken for it")
	}
}
