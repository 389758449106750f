package sim

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/s3task/s3task"
)

// periodicStory is a history of a world with one periodic task every 5
// minutes (its first period begins 5 minutes in), made within missed's
// bounds, whose lease w1 holds all along.
func periodicStory(missed s3task.MissedRuns) *story {
	s := newStory()
	p := s3task.Periodic{Name: "tick", Schedule: s3task.Every(5 * time.Minute), Params: s3task.CreateParams{Type: periodicType}, Missed: missed}
	if missed == s3task.SkipMissed {
		p.Within = 2 * time.Minute
	}
	s.h.Periodics = []s3task.Periodic{p}
	s.h.End = s.h.Start.Add(23 * time.Minute)
	for at := time.Duration(0); at < 23*time.Minute; at += 3 * time.Minute {
		exp := s.at(at + 4*time.Minute).Format(time.RFC3339Nano)
		s.object(at, "w1", "PUT", "p/_reconciler", `{"holder":"w1","expires_at":"`+exp+`"}`)
	}
	return s
}

// run adds the run of the period that begins at period, made by proc at
// d, as task id.
func (s *story) run(d time.Duration, proc, id string, period time.Duration) {
	key := "tick@" + s.at(period).UTC().Format(time.RFC3339)
	s.record(d, proc, id, func(t *Record) {
		t.Type, t.IdempotencyKey, t.KeyScope, t.NoInput = periodicType, key, PeriodicScope, true
	})
}

// periodicID returns the n-th task ID of the periodic stories.
func periodicID(n int) string { return fmt.Sprintf("01PERIODIC00000000000000%02d", n) }

func TestCheckPeriodic(t *testing.T) {
	t.Parallel()
	every := func(s *story) {
		for i, at := range []time.Duration{5, 10, 15, 20} {
			s.run(at*time.Minute+time.Second, "w1", periodicID(i), at*time.Minute)
		}
	}
	for _, tc := range []struct {
		name   string
		missed s3task.MissedRuns
		build  func(s *story)
		want   string // in the one violation; "" for none
	}{
		{"one run per period", s3task.SkipMissed, every, ""},
		{"run once: one run per period", s3task.RunMissedOnce, every, ""},
		{"two runs for one period", s3task.SkipMissed, func(s *story) {
			every(s)
			s.run(10*time.Minute+3*time.Second, "w2", periodicID(9), 10*time.Minute)
		}, "2 tasks for one period"},
		{"a run for no period", s3task.SkipMissed, func(s *story) {
			every(s)
			s.run(12*time.Minute, "w1", periodicID(9), 12*time.Minute)
		}, "not the start of a period"},
		{"made before its period", s3task.RunMissedOnce, func(s *story) {
			s.run(5*time.Minute+time.Second, "w1", periodicID(0), 5*time.Minute)
			s.run(9*time.Minute, "w1", periodicID(1), 10*time.Minute)
			s.run(15*time.Minute+time.Second, "w1", periodicID(2), 15*time.Minute)
			s.run(20*time.Minute+time.Second, "w1", periodicID(3), 20*time.Minute)
		}, "before its period began"},
		{"made past Within", s3task.SkipMissed, func(s *story) {
			s.run(5*time.Minute+time.Second, "w1", periodicID(0), 5*time.Minute)
			s.run(13*time.Minute, "w1", periodicID(1), 10*time.Minute)
			s.run(15*time.Minute+time.Second, "w1", periodicID(2), 15*time.Minute)
			s.run(20*time.Minute+time.Second, "w1", periodicID(3), 20*time.Minute)
		}, "later than skip allows"},
		{"made past Within while held up", s3task.SkipMissed, func(s *story) {
			s.run(5*time.Minute+time.Second, "w1", periodicID(0), 5*time.Minute)
			s.event("w1", EventPause, 10*time.Minute, 12*time.Minute+50*time.Second)
			s.run(13*time.Minute, "w1", periodicID(1), 10*time.Minute)
			s.run(15*time.Minute+time.Second, "w1", periodicID(2), 15*time.Minute)
			s.run(20*time.Minute+time.Second, "w1", periodicID(3), 20*time.Minute)
		}, ""},
		{"run once: an earlier period made late", s3task.RunMissedOnce, func(s *story) {
			s.run(5*time.Minute+time.Second, "w1", periodicID(0), 5*time.Minute)
			s.run(16*time.Minute, "w1", periodicID(1), 10*time.Minute)
			s.run(15*time.Minute+time.Second, "w1", periodicID(2), 15*time.Minute)
			s.run(20*time.Minute+time.Second, "w1", periodicID(3), 20*time.Minute)
		}, "later than run once allows"},
		{"a period missed by a steady holder", s3task.SkipMissed, func(s *story) {
			s.run(5*time.Minute+time.Second, "w1", periodicID(0), 5*time.Minute)
			s.run(15*time.Minute+time.Second, "w1", periodicID(2), 15*time.Minute)
			s.run(20*time.Minute+time.Second, "w1", periodicID(3), 20*time.Minute)
		}, "began at +10m0s has no run"},
		{"a period missed by a crashed holder", s3task.SkipMissed, func(s *story) {
			s.run(5*time.Minute+time.Second, "w1", periodicID(0), 5*time.Minute)
			s.event("w1", EventCrash, 7*time.Minute, 7*time.Minute)
			s.run(15*time.Minute+time.Second, "w1", periodicID(2), 15*time.Minute)
			s.run(20*time.Minute+time.Second, "w1", periodicID(3), 20*time.Minute)
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := periodicStory(tc.missed)
			tc.build(s)
			vs := checkPeriodic(newIndex(s.h))
			switch {
			case tc.want == "" && len(vs) != 0:
				t.Errorf("violations: %v, want none", vs)
			case tc.want != "" && (len(vs) != 1 || !strings.Contains(vs[0].Msg, tc.want)):
				t.Errorf("violations: %v, want one saying %q", vs, tc.want)
			}
		})
	}
}
