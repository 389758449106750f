package sim

import (
	"slices"
	"testing"
	"time"

	"github.com/s3task/s3task"
)

// TestCheckPause: checkPause on the clean story, in which w1's claim of
// the untyped task lands at 2s, with Pause and Resume calls around it.
func TestCheckPause(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	tests := []struct {
		why   string
		want  bool // a violation of kind pause
		spoil func(s *story)
	}{
		{"the claim begins 2.1s after the Pause returned (PollInterval 2s)", true, func(s *story) {
			s.call("op2", CallPause, "", 100*ms, 400*ms, "")
			s.h.Writes[wClaim].Began = s.at(2500 * ms)
		}},
		{"the claim begins 1.9s after the Pause returned", false, func(s *story) {
			s.call("op2", CallPause, "", 100*ms, 400*ms, "")
			s.h.Writes[wClaim].Began = s.at(2300 * ms)
		}},
		{"the claim's marker at its lease's end began in time, and the claim landed late", false, func(s *story) {
			s.call("op2", CallPause, "", 100*ms, 400*ms, "")
			s.h.Writes[wClaim].Began = s.at(2500 * ms)
			s.marker(1900*ms, 2*time.Second, "w1", 0)
		}},
		{"a marker w1 wrote in time that the claim does not call for (Reconcile's) is not the claim's", true, func(s *story) {
			s.call("op2", CallPause, "", 100*ms, 400*ms, "")
			s.h.Writes[wClaim].Began = s.at(2500 * ms)
			s.marker(1900*ms, 2*time.Second, "w1", time.Second)
		}},
		{"a marker PUT of w1 begun before the record it claims from was written is not the claim's", true, func(s *story) {
			s.call("op2", CallPause, "", 100*ms, 400*ms, "")
			s.h.Writes[wClaim].Began = s.at(2500 * ms)
			s.marker(500*ms, 2*time.Second, "w1", 0) // before the queued record, at 1s
		}},
		{"a Resume started before the claim", false, func(s *story) {
			s.call("op2", CallPause, "", 100*ms, 400*ms, "")
			s.call("op2", CallResume, "", time.Second, 3*time.Second, "")
			s.h.Writes[wClaim].Began = s.at(2500 * ms)
		}},
		{"a Resume that failed, started before the claim: it may have landed", false, func(s *story) {
			s.call("op2", CallPause, "", 100*ms, 400*ms, "")
			s.call("op2", CallResume, "", time.Second, 3*time.Second, "503")
			s.h.Writes[wClaim].Began = s.at(2500 * ms)
		}},
		{"a Resume under way when the Pause started may have landed after it", false, func(s *story) {
			s.call("op3", CallResume, "", 0, 200*ms, "")
			s.call("op2", CallPause, "", 100*ms, 400*ms, "")
			s.h.Writes[wClaim].Began = s.at(2500 * ms)
		}},
		{"a Resume that ended before the Pause started does not end it", true, func(s *story) {
			s.call("op3", CallResume, "", 0, 50*ms, "")
			s.call("op2", CallPause, "", 100*ms, 400*ms, "")
			s.h.Writes[wClaim].Began = s.at(2500 * ms)
		}},
		{"a Pause that failed promises nothing", false, func(s *story) {
			s.call("op2", CallPause, "", 100*ms, 400*ms, "context deadline exceeded")
			s.h.Writes[wClaim].Began = s.at(2500 * ms)
		}},
		{"a Pause of another type", false, func(s *story) {
			s.call("op2", CallPause, "pdf", 100*ms, 400*ms, "")
			s.h.Writes[wClaim].Began = s.at(2500 * ms)
		}},
		{"a worker fed events has MaxPollInterval for its PollInterval", false, func(s *story) {
			s.h.Workers[0].Events = true
			s.call("op2", CallPause, "", 100*ms, 400*ms, "")
			s.h.Writes[wClaim].Began = s.at(2500 * ms)
		}},
		{"a renewal is no claim", false, func(s *story) {
			s.call("op2", CallPause, "", 3*time.Second, 4*time.Second, "")
		}},
	}
	for _, tc := range tests {
		t.Run(tc.why, func(t *testing.T) {
			t.Parallel()
			s, _ := clean()
			tc.spoil(s)
			vs := checkPause(newIndex(s.h))
			if got := len(vs) > 0; got != tc.want {
				t.Errorf("%s: violations %v; want some: %v", tc.why, vs, tc.want)
			}
			for _, v := range vs {
				if v.Kind != KindPause {
					t.Errorf("kind %s, want %s", v.Kind, KindPause)
				}
			}
		})
	}
}

// TestCheckPauseLiveness: a task that waited while its type was paused
// is held to the pickup and claim-delay bounds from the end of the Resume,
// not from when it was queued.
func TestCheckPauseLiveness(t *testing.T) {
	t.Parallel()
	tests := []struct {
		why   string
		kinds []Kind // of pickup, claim-delay and pause
		spoil func(s *story)
	}{
		{"queued at 71s while paused; resumed at 100s; claimed at 105s", nil, func(s *story) {
			s.call("op2", CallPause, "", 60*time.Second, 60*time.Second, "")
			s.call("op2", CallResume, "", 99*time.Second, 100*time.Second, "")
			s.later(105 * time.Second)
		}},
		{"queued at 71s while paused; resumed at 100s; claimed at 2m, w1 idle", []Kind{KindPickup}, func(s *story) {
			s.call("op2", CallPause, "", 60*time.Second, 60*time.Second, "")
			s.call("op2", CallResume, "", 99*time.Second, 100*time.Second, "")
			s.later(2 * time.Minute)
		}},
		{"queued at 71s while paused; the Resume fails; claimed at 2m", nil, func(s *story) {
			s.call("op2", CallPause, "", 60*time.Second, 60*time.Second, "")
			s.call("op2", CallResume, "", 99*time.Second, 100*time.Second, "503")
			s.call("op2", CallResume, "", 110*time.Second, 119*time.Second, "")
			s.later(2 * time.Minute)
		}},
		{"a Pause that failed may have landed too", nil, func(s *story) {
			s.call("op2", CallPause, "", 60*time.Second, 60*time.Second, "500")
			s.later(2 * time.Minute)
		}},
		{"paused from 60s to 9m: claimed at 9m5s", nil, func(s *story) {
			s.call("op2", CallPause, "", 60*time.Second, 60*time.Second, "")
			s.call("op2", CallResume, "", 9*time.Minute, 9*time.Minute, "")
			s.later(9*time.Minute + 5*time.Second)
		}},
		{"paused from 60s to 100s: claimed at 10m", []Kind{KindPickup, KindClaimDelay}, func(s *story) {
			s.call("op2", CallPause, "", 60*time.Second, 60*time.Second, "")
			s.call("op2", CallResume, "", 99*time.Second, 100*time.Second, "")
			s.later(10 * time.Minute)
		}},
		{"w1, fed events, is told of the marker 5s after the Resume and claims at 2m: it may not know of the Resume yet", nil, func(s *story) {
			s.h.Workers[0].Events = true
			s.call("op2", CallPause, "", 60*time.Second, 60*time.Second, "")
			s.call("op2", CallResume, "", 99*time.Second, 100*time.Second, "")
			s.later(2 * time.Minute)
			s.h.Deliveries = append(s.h.Deliveries, Delivery{Seq: s.next(), Time: s.at(105 * time.Second), Worker: "w1", Key: laterMarker})
		}},
		{"w1, fed events, is told of the marker 70s after the Resume and claims 40s later", []Kind{KindPickup}, func(s *story) {
			s.h.Workers[0].Events = true
			s.call("op2", CallPause, "", 60*time.Second, 60*time.Second, "")
			s.call("op2", CallResume, "", 99*time.Second, 100*time.Second, "")
			s.later(210 * time.Second)
			s.h.Deliveries = append(s.h.Deliveries, Delivery{Seq: s.next(), Time: s.at(170 * time.Second), Worker: "w1", Key: laterMarker})
		}},
		{"w1 has a second slot; resumed at 100s; claimed at 112s", []Kind{KindPickup}, func(s *story) {
			s.h.Workers[0].Concurrency = 2
			s.call("op2", CallPause, "", 60*time.Second, 60*time.Second, "")
			s.call("op2", CallResume, "", 99*time.Second, 100*time.Second, "")
			s.later(112 * time.Second)
		}},
		{"w1 has a second slot; resumed at 100s; claimed at 112s, w1's requests held 4.5s in between", nil, func(s *story) {
			s.h.Workers[0].Concurrency = 2
			s.call("op2", CallPause, "", 60*time.Second, 60*time.Second, "")
			s.call("op2", CallResume, "", 99*time.Second, 100*time.Second, "")
			s.later(112 * time.Second)
			s.event("w1", EventDelayed, 101*time.Second, 103500*time.Millisecond)
			s.event("w1", EventDelayed, 105*time.Second, 107*time.Second)
		}},
		{"w1 has a second slot; resumed at 100s; claimed at 112.5s, two held requests of w1 at once, 3s in all", []Kind{KindPickup}, func(s *story) {
			s.h.Workers[0].Concurrency = 2
			s.call("op2", CallPause, "", 60*time.Second, 60*time.Second, "")
			s.call("op2", CallResume, "", 99*time.Second, 100*time.Second, "")
			s.later(112500 * time.Millisecond)
			s.event("w1", EventDelayed, 101*time.Second, 104*time.Second)
			s.event("w1", EventDelayed, 102*time.Second, 104*time.Second)
		}},
		{"w1 has a second slot; resumed at 100s; claimed at 112s, another process's requests held", []Kind{KindPickup}, func(s *story) {
			s.h.Workers[0].Concurrency = 2
			s.call("op2", CallPause, "", 60*time.Second, 60*time.Second, "")
			s.call("op2", CallResume, "", 99*time.Second, 100*time.Second, "")
			s.later(112 * time.Second)
			s.event("op2", EventDelayed, 101*time.Second, 107*time.Second)
		}},
		{"another type paused: claimed at 2m", []Kind{KindPickup}, func(s *story) {
			s.call("op2", CallPause, "pdf", 60*time.Second, 60*time.Second, "")
			s.later(2 * time.Minute)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.why, func(t *testing.T) {
			t.Parallel()
			s, _ := clean()
			tc.spoil(s)
			ks := kinds(Check(s.h))
			for _, k := range []Kind{KindPickup, KindClaimDelay, KindPause} {
				if got, want := slices.Contains(ks, k), slices.Contains(tc.kinds, k); got != want {
					t.Errorf("%s: violations of kinds %v; want one of kind %s: %v", tc.why, ks, k, want)
				}
			}
		})
	}
}

// marker adds a PUT of a marker of the story's task by proc, begun at
// began and applied at at, before the claim's record (whose Seq it takes,
// less one).
// It goes just before the claim, as S3 applied it. With due zero, it is
// the marker the claim calls for, due at its lease's end and the clock
// margin (67s).
func (s *story) marker(began, at time.Duration, proc string, due time.Duration) {
	claim := s.h.Writes[wClaim].Record
	if due == 0 {
		claim.DueAt = s.at(67 * time.Second)
		due = 67 * time.Second
	}
	m := Write{Seq: s.h.Writes[wClaim].Seq - 1, Time: s.at(at), Began: s.at(began), Proc: proc, Method: "PUT",
		Key: "p/active/" + s.at(due).Format(markerTimeLayout) + "_" + storyTask}
	s.h.Writes = slices.Insert(s.h.Writes, wClaim, m)
}

// laterMarker is the marker of the task later adds, due at 71s.
const laterMarker = "p/active/20000101T000111.000Z_" + storyOther

// later adds a second task to the story, queued and announced by op1 at
// 71s, and claimed by w1 at claim, which it runs for 5s.
func (s *story) later(claim time.Duration) {
	s.record(70*time.Second, "op1", storyOther, func(t *Record) {})
	s.object(71*time.Second, "op1", "PUT", laterMarker, "")
	s.record(71*time.Second, "op1", storyOther, func(t *Record) { t.Status = s3task.StatusQueued })
	s.object(71*time.Second, "op1", "PUT", "p/_wake", "")
	s.record(claim, "w1", storyOther, func(t *Record) {
		t.Status, t.Attempt, t.WorkerID, t.LeaseExpiresAt = s3task.StatusRunning, 1, "w1", s.at(claim+time.Minute)
	})
	s.h.Runs = append(s.h.Runs, &HandlerRun{Task: storyOther, Attempt: 1, Worker: "w1", Start: s.at(claim), StartSeq: s.next(),
		Returned: true, Return: s.at(claim + 5*time.Second), ReturnSeq: s.next(), OK: true})
	s.record(claim+5*time.Second, "w1", storyOther, func(t *Record) {
		t.Status, t.LeaseExpiresAt, t.NotifyPending = s3task.StatusCompleted, time.Time{}, true
	})
	r := s.h.Runs[len(s.h.Runs)-1]
	r.CtxEnd, r.CtxEndSeq, r.Cause = s.at(claim+5*time.Second), s.next(), CauseOther
	s.h.Notices = append(s.h.Notices, Notice{Proc: "w1", TaskID: storyOther, Status: s3task.StatusCompleted, Attempt: 1,
		Start: s.at(claim + 5*time.Second), End: s.at(claim + 6*time.Second), StartSeq: s.next(), OK: true})
	done := s.record(claim+6*time.Second, "w1", storyOther, func(t *Record) { t.NotifyPending = false })
	s.object(claim+6*time.Second, "w1", "DELETE", laterMarker, "")
	s.h.Snapshots[len(s.h.Snapshots)-1].Tasks[storyOther] = stateOf(done.Record)
}
