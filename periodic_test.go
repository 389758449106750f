package s3task

import (
	"strings"
	"testing"
	"time"
)

// dueRun: one run per period, the latest only; under SkipMissed only
// within Within of its time; under RunMissedOnce however late, once.
func TestPeriodicDueRun(t *testing.T) {
	base := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	every10 := Every(10 * time.Minute)
	for _, c := range []struct {
		name      string
		p         Periodic
		now, made time.Time
		start     time.Time
		due       bool
	}{
		{"on time", Periodic{Schedule: every10}, base.Add(time.Second), time.Time{}, base, true},
		{"made already", Periodic{Schedule: every10}, base.Add(time.Minute), base, base, false},
		{"the next period", Periodic{Schedule: every10}, base.Add(10 * time.Minute), base, base.Add(10 * time.Minute), true},
		{"skip: within the period (Within defaults to it)", Periodic{Schedule: every10}, base.Add(10*time.Minute - time.Second), base.Add(-10 * time.Minute), base, true},
		{"skip: later than Within", Periodic{Schedule: every10, Within: time.Minute}, base.Add(61 * time.Second), time.Time{}, base, false},
		{"skip: at Within exactly", Periodic{Schedule: every10, Within: time.Minute}, base.Add(time.Minute), time.Time{}, base, true},
		{"skip: daily, an hour by default", Periodic{Schedule: Daily(12, 0, nil)}, base.Add(61 * time.Minute), time.Time{}, base, false},
		{"run once: hours late, the latest period only", Periodic{Schedule: every10, Missed: RunMissedOnce}, base.Add(3*time.Hour + 5*time.Minute), base.Add(-time.Hour), base.Add(3 * time.Hour), true},
		{"run once: made already", Periodic{Schedule: every10, Missed: RunMissedOnce}, base.Add(3*time.Hour + 5*time.Minute), base.Add(3 * time.Hour), base.Add(3 * time.Hour), false},
	} {
		start, due := c.p.dueRun(c.now, c.made)
		if !start.Equal(c.start) || due != c.due {
			t.Errorf("%s: dueRun(%s, made %s) = %s, %t; want %s, %t", c.name, c.now, c.made, start, due, c.start, c.due)
		}
	}
}

func TestPeriodicValidate(t *testing.T) {
	ok := Periodic{Name: "nightly-export", Schedule: Daily(2, 0, nil), Params: CreateParams{Type: "export"}}
	if err := ok.validate(); err != nil {
		t.Fatalf("a valid Periodic: %v", err)
	}
	for _, c := range []struct {
		change func(p *Periodic)
		want   string
	}{
		{func(p *Periodic) { p.Name = "" }, "the name"},
		{func(p *Periodic) { p.Name = "night/ly" }, "the name"},
		{func(p *Periodic) { p.Name = strings.Repeat("n", 65) }, "the name"},
		{func(p *Periodic) { p.Schedule = Schedule{} }, "no schedule"},
		{func(p *Periodic) { p.Params.Key = "k" }, "Key and KeyScope"},
		{func(p *Periodic) { p.Params.RunAt = time.Now() }, "RunAt"},
		{func(p *Periodic) { p.Missed = 7 }, "Missed"},
		{func(p *Periodic) { p.Within = -time.Second }, "negative"},
	} {
		p := ok
		c.change(&p)
		if err := p.validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error saying %q", p, err, c.want)
		}
	}
	if got := ok.runKey(time.Date(2026, 12, 7, 1, 0, 0, 0, time.FixedZone("CET", 3600))); got != "nightly-export@2026-12-07T00:00:00Z" {
		t.Errorf("runKey = %q", got)
	}
}
