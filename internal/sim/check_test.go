package sim

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/s3task/s3task"
)

// story builds small histories by hand, in time order.
type story struct {
	h   *History
	seq int64
}

const (
	storyTask  = "01TASK0000000000000000000A"
	storyOther = "01TASK0000000000000000000B"
)

func newStory() *story {
	start := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	return &story{h: &History{
		Seed: 1, Params: DefaultParams(), Prefix: "p/", Start: start, End: start.Add(time.Hour),
		Hooked: true, Stats: map[string]int{},
	}}
}

func (s *story) at(d time.Duration) time.Time { return s.h.Start.Add(d) }

func (s *story) next() int64 { s.seq++; return s.seq }

// record appends a write of task id's record, derived from the last one.
func (s *story) record(d time.Duration, proc, id string, change func(t *Record)) *Write {
	t := &Record{Task: s3task.Task{SchemaVersion: 1, ID: id, Status: s3task.StatusCreated, MaxAttempts: 3}}
	for i := len(s.h.Writes) - 1; i >= 0; i-- {
		if w := s.h.Writes[i]; w.Record != nil && w.Record.ID == id {
			c := *w.Record
			c.History = slices.Clone(c.History) // each record its own
			t = &c
			break
		}
	}
	change(t)
	t.Revision = fmt.Sprintf("rev%d", s.seq+1)
	s.h.Writes = append(s.h.Writes, Write{Seq: s.next(), Time: s.at(d), Proc: proc, Method: "PUT", Key: "p/" + id + "/status.json", Record: t})
	return &s.h.Writes[len(s.h.Writes)-1]
}

func (s *story) object(d time.Duration, proc, method, key, body string) {
	s.h.Writes = append(s.h.Writes, Write{Seq: s.next(), Time: s.at(d), Proc: proc, Method: method, Key: key, Body: []byte(body)})
}

// call appends a Pause or Resume of typ by proc from from to to, failed
// with err unless it is "".
func (s *story) call(proc string, kind CallKind, typ string, from, to time.Duration, err string) {
	s.h.Calls = append(s.h.Calls, Call{Proc: proc, Kind: kind, Type: typ, Start: s.at(from), End: s.at(to), StartSeq: s.next(), EndSeq: s.next(), Err: err})
}

func (s *story) event(proc string, kind EventKind, from, to time.Duration) {
	s.h.Events = append(s.h.Events, ProcEvent{Proc: proc, Kind: kind, Start: s.at(from), End: s.at(to)})
}

func (s *story) snapshot(d time.Duration, tasks map[string]Record, markers ...string) {
	snap := Snapshot{Time: s.at(d), Tasks: map[string]TaskState{}, Markers: map[string]bool{}}
	for id, t := range tasks {
		snap.Tasks[id] = stateOf(&t)
	}
	for _, id := range markers {
		snap.Markers[id] = true
	}
	s.h.Snapshots = append(s.h.Snapshots, snap)
}

// claimed gives t, just claimed at d by its WorkerID, its start and the
// attempt's entry in its history, as the library writes them.
func (s *story) claimed(t *Record, d time.Duration) {
	t.StartedAt = s.at(d)
	t.History = append(t.History, s3task.Attempt{Number: t.Attempt, WorkerID: t.WorkerID, StartedAt: t.StartedAt,
		Outcome: s3task.OutcomeRunning, HeartbeatInterval: s.h.Params.HeartbeatInterval})
}

// ended closes the entry of t's latest attempt: it ended at d with
// outcome, and t's category and last error, if it failed, expired or was
// released.
func (s *story) ended(t *Record, d time.Duration, outcome s3task.AttemptOutcome) {
	a := &t.History[len(t.History)-1]
	a.EndedAt, a.Outcome = s.at(d), outcome
	switch outcome {
	case s3task.OutcomeFailed, s3task.OutcomeLeaseExpired, s3task.OutcomeReleased:
		a.ErrorCategory, a.Error = t.ErrorCategory, t.LastError
	}
}

// key gives task id idempotency key k, in each of its records and its
// Create call, as a Create with that key would have.
func (s *story) key(id, k string) {
	for i := range s.h.Writes {
		if r := s.h.Writes[i].Record; r != nil && r.ID == id {
			r.IdempotencyKey = k
		}
	}
	for i := range s.h.Calls {
		if c := &s.h.Calls[i]; isCreateCall(c.Kind) && c.TaskID == id {
			c.Key = k
		}
	}
}

// The writes of clean, by index.
const (
	wCreated = iota
	wMarked
	wQueued
	wWake
	wClaim
	wRenew
	wOutput
	wDone
	wNotified
	wUnmarked
)

// clean is one task's uneventful life: created by op1 at 0s, submitted at
// 1s (and announced), claimed by w1 at 2s, renewed at 22s, completed with an output at 30s
// and notified at 31s. It holds no violation.
func clean() (*story, *HandlerRun) {
	s := newStory()
	s.h.Workers = []WorkerInfo{{Name: "w1", Concurrency: 1}}
	s.event("w1", EventStart, 0, 0)
	id := storyTask
	call := func(kind CallKind, from int64, d time.Duration, t *s3task.Task) {
		s.h.Calls = append(s.h.Calls, Call{Proc: "op1", Kind: kind, TaskID: id, Start: s.at(d), End: s.at(d), StartSeq: from, EndSeq: s.next(), Task: t})
	}
	from := s.next()
	created := s.record(0, "op1", id, func(t *Record) {})
	call(CallCreate, from, 0, &created.Record.Task)
	from = s.next()
	s.object(time.Second, "op1", "PUT", "p/active/"+id, "")
	queued := s.record(time.Second, "op1", id, func(t *Record) { t.Status = s3task.StatusQueued })
	s.object(time.Second, "op1", "PUT", "p/_wake", "s3task-wake 3\npaused []\nr1 p/active/"+id+"\n")
	call(CallSubmit, from, time.Second, &queued.Record.Task)
	s.record(2*time.Second, "w1", id, func(t *Record) {
		t.Status, t.Attempt, t.WorkerID, t.LeaseExpiresAt = s3task.StatusRunning, 1, "w1", s.at(62*time.Second)
		s.claimed(t, 2*time.Second)
	})
	run := &HandlerRun{Task: id, Attempt: 1, Worker: "w1", Start: s.at(2 * time.Second), StartSeq: s.next()}
	s.h.Runs = append(s.h.Runs, run)
	s.record(22*time.Second, "w1", id, func(t *Record) { t.LeaseExpiresAt = s.at(82 * time.Second) })
	key := "p/" + id + "/output-attempt-1"
	s.object(29*time.Second, "w1", "PUT", key, "out")
	run.Output, run.Wrote = "out", true
	run.Returned, run.Return, run.ReturnSeq, run.OK = true, s.at(30*time.Second), s.next(), true
	s.record(30*time.Second, "w1", id, func(t *Record) {
		t.Status, t.OutputPath, t.LeaseExpiresAt, t.NotifyPending = s3task.StatusCompleted, key, time.Time{}, true
		s.ended(t, 30*time.Second, s3task.OutcomeCompleted)
	})
	run.CtxEnd, run.CtxEndSeq, run.Cause = s.at(30*time.Second), s.next(), CauseOther
	s.h.Notices = append(s.h.Notices, Notice{Proc: "w1", TaskID: id, Status: s3task.StatusCompleted, Attempt: 1,
		Start: s.at(30 * time.Second), End: s.at(31 * time.Second), StartSeq: s.next(), OK: true})
	done := s.record(31*time.Second, "w1", id, func(t *Record) { t.NotifyPending = false })
	s.object(31*time.Second, "w1", "DELETE", "p/active/"+id, "")
	s.snapshot(time.Hour, map[string]Record{id: *done.Record})
	return s, run
}

func kinds(vs []Violation) []Kind {
	var ks []Kind
	for _, v := range vs {
		if !slices.Contains(ks, v.Kind) {
			ks = append(ks, v.Kind)
		}
	}
	return ks
}

func TestCheckClean(t *testing.T) {
	t.Parallel()
	s, _ := clean()
	if vs := Check(s.h); len(vs) != 0 {
		t.Errorf("a clean history has violations:\n%v", vs)
	}
}

func TestCheckFindsEachKind(t *testing.T) {
	t.Parallel()
	id := storyTask
	tests := []struct {
		kind  Kind
		why   string
		spoil func(s *story, run *HandlerRun)
	}{
		{KindOverlap, "a second handler of the task starts while the first still runs", func(s *story, run *HandlerRun) {
			s.h.Runs = append(s.h.Runs, &HandlerRun{Task: id, Attempt: 2, Worker: "w2", Start: s.at(10 * time.Second), StartSeq: s.next(),
				Returned: true, Return: s.at(20 * time.Second), ReturnSeq: s.next()})
		}},
		{KindOverlap, "a handler whose context ended with ErrWorkerStopping still holds the task", func(s *story, run *HandlerRun) {
			run.CtxEnd, run.Cause = s.at(5*time.Second), CauseStopping
			s.h.Runs = append(s.h.Runs, &HandlerRun{Task: id, Attempt: 2, Worker: "w2", Start: s.at(10 * time.Second), StartSeq: s.next()})
		}},
		{KindCompletion, "the output holds other bytes than the completing attempt wrote", func(s *story, run *HandlerRun) {
			run.Output = "something else"
		}},
		{KindCompletion, "the completing attempt's handler failed", func(s *story, run *HandlerRun) {
			run.OK, run.Err = false, "boom"
		}},
		{KindAttempts, "a claim uses an attempt with no handler and no crash, pause or stop", func(s *story, run *HandlerRun) {
			s.h.Writes[wDone].Record.Status = s3task.StatusFailed // failed, retry due at 40s
			s.h.Writes[wDone].Record.RetryAt = s.at(40 * time.Second)
			s.h.Writes = s.h.Writes[:wNotified]
			s.record(50*time.Second, "w1", id, func(t *Record) {
				t.Status, t.Attempt, t.WorkerID, t.LeaseExpiresAt, t.RetryAt = s3task.StatusRunning, 2, "w1", s.at(110*time.Second), time.Time{}
			})
		}},
		{KindAPI, "a Cancel reports a failure although its abandon landed", func(s *story, run *HandlerRun) {
			from := s.next()
			s.record(40*time.Second, "op1", id, func(t *Record) { t.Status = s3task.StatusAbandoned })
			s.h.Calls = append(s.h.Calls, Call{Proc: "op1", Kind: CallCancel, TaskID: id, Start: s.at(40 * time.Second), End: s.at(41 * time.Second),
				StartSeq: from, EndSeq: s.next(), Err: "s3task: write p/x/status.json: 500"})
		}},
		{KindAPI, "a Submit reports success but the task is still created", func(s *story, run *HandlerRun) {
			s.h.Calls[1].StartSeq, s.h.Calls[1].EndSeq = 0, 1 // before its own write
		}},
		{KindLateWrite, "the output lands after the handler's context ended", func(s *story, run *HandlerRun) {
			run.CtxEnd, run.CtxEndSeq, run.Cause = s.at(25*time.Second), s.h.Writes[wOutput].Seq-1, CauseLeaseLost
		}},
		{KindLateWrite, "a renewal lands after the lease was lost", func(s *story, run *HandlerRun) {
			run.CtxEnd, run.CtxEndSeq, run.Cause = s.at(21*time.Second), s.h.Writes[wRenew].Seq-1, CauseLeaseLost
		}},
		{KindMarker, "a finished, notified task keeps its marker at the end", func(s *story, run *HandlerRun) {
			s.h.Snapshots[len(s.h.Snapshots)-1].Markers[id] = true
		}},
		{KindMarker, "a queued task goes without its marker for over the reconciler's bound", func(s *story, run *HandlerRun) {
			q := Record{Task: s3task.Task{ID: storyOther, Status: s3task.StatusQueued}}
			snaps := s.h.Snapshots
			s.h.Snapshots = nil
			for m := time.Duration(0); m <= 3*time.Hour; m += 10 * time.Minute {
				s.snapshot(m, map[string]Record{storyOther: q})
			}
			s.h.Snapshots = append(s.h.Snapshots, snaps...)
		}},
		{KindNotice, "the finished task's notice never went out", func(s *story, run *HandlerRun) {
			s.h.Notices[0].OK = false
		}},
		{KindNotice, "a failed notice is tried again only 25 minutes later", func(s *story, run *HandlerRun) {
			s.h.Notices[0].OK = false
			s.h.Notices = append(s.h.Notices, Notice{Proc: "w1", TaskID: id, Status: s3task.StatusCompleted, Attempt: 1,
				Start: s.at(25*time.Minute + 31*time.Second), End: s.at(25*time.Minute + 31*time.Second), StartSeq: s.next(), OK: true})
		}},
		{KindClaimDelay, "a queued task waits minutes while its worker has a free slot", func(s *story, run *HandlerRun) {
			s.h.Writes = s.h.Writes[:wClaim] // queued at 1s, marked, claimed only at 5m
			s.h.Runs, s.h.Notices = nil, nil
			s.record(5*time.Minute, "w1", id, func(t *Record) {
				t.Status, t.Attempt, t.WorkerID, t.LeaseExpiresAt = s3task.StatusRunning, 1, "w1", s.at(6*time.Minute)
			})
		}},
		{KindTransition, "a completed task runs again", func(s *story, run *HandlerRun) {
			s.record(50*time.Second, "w1", id, func(t *Record) {
				t.Status, t.Attempt, t.WorkerID, t.LeaseExpiresAt = s3task.StatusRunning, 2, "w1", s.at(110*time.Second)
			})
		}},
		{KindTransition, "a release raises max_attempts", func(s *story, run *HandlerRun) {
			w := s.h.Writes[wRenew].Record // the renewal becomes a release
			w.Status, w.ErrorCategory, w.MaxAttempts, w.WorkerID, w.LeaseExpiresAt = s3task.StatusQueued, "shutdown", 4, "", time.Time{}
		}},
		{KindExpiry, "the lease runs out under a live handler and another worker takes over", func(s *story, run *HandlerRun) {
			s.h.Writes = s.h.Writes[:wRenew] // w1's lease ends at 62s; w2 takes over at 70s
			s.record(70*time.Second, "w2", id, func(t *Record) {
				t.Attempt, t.WorkerID, t.LeaseExpiresAt, t.ErrorCategory = 2, "w2", s.at(130*time.Second), "lease_expired"
			})
			run.Return = s.at(100 * time.Second) // while w1's handler runs to 100s
		}},
		{KindStuck, "a task is still running at the end", func(s *story, run *HandlerRun) {
			s.h.Snapshots[len(s.h.Snapshots)-1].Tasks[id] = TaskState{Status: s3task.StatusRunning, Pending: true}
		}},
		{KindKey, "a second task is created with the key of a live one", func(s *story, run *HandlerRun) {
			s.key(id, "invoice-2000-01")
			s.record(10*time.Second, "op2", storyOther, func(t *Record) { t.IdempotencyKey = "invoice-2000-01" })
		}},
		{KindKey, "a keyed Create returns the key's task although it was marked for purging", func(s *story, run *HandlerRun) {
			s.key(id, "invoice-2000-01")
			marked := s.record(40*time.Minute, "op1", id, func(t *Record) { t.Purging = true })
			from := s.next()
			s.h.Calls = append(s.h.Calls, Call{Proc: "op2", Kind: CallCreate, TaskID: id, Key: "invoice-2000-01",
				Start: s.at(40*time.Minute + time.Second), End: s.at(40*time.Minute + 2*time.Second), StartSeq: from, EndSeq: s.next(), Task: &marked.Record.Task})
		}},
		{KindOverrun, "the handler runs to 90s, past the lease it renewed at 22s (to 82s), renewing it no more", func(s *story, run *HandlerRun) {
			for i := wOutput; i < len(s.h.Writes); i++ { // the output, the completion and what follows come a minute later
				s.h.Writes[i].Time = s.h.Writes[i].Time.Add(time.Minute)
			}
			run.Return, run.CtxEnd = run.Return.Add(time.Minute), run.CtxEnd.Add(time.Minute)
			n := &s.h.Notices[0]
			n.Start, n.End = n.Start.Add(time.Minute), n.End.Add(time.Minute)
		}},
		{KindPickup, "a second task, queued and announced at 71s, waits for the next listing at 2m while w1 idles", func(s *story, run *HandlerRun) {
			// w1 is free from 61s (30s after its notice of the first task).
			s.record(70*time.Second, "op1", storyOther, func(t *Record) {})
			s.object(71*time.Second, "op1", "PUT", "p/active/"+storyOther, "")
			s.record(71*time.Second, "op1", storyOther, func(t *Record) { t.Status = s3task.StatusQueued })
			s.object(71*time.Second, "op1", "PUT", "p/_wake", "")
			s.record(2*time.Minute, "w1", storyOther, func(t *Record) {
				t.Status, t.Attempt, t.WorkerID, t.LeaseExpiresAt = s3task.StatusRunning, 1, "w1", s.at(3*time.Minute)
			})
			s.h.Runs = append(s.h.Runs, &HandlerRun{Task: storyOther, Attempt: 1, Worker: "w1", Start: s.at(2 * time.Minute), StartSeq: s.next(),
				Returned: true, Return: s.at(125 * time.Second), ReturnSeq: s.next(), OK: true})
			s.record(125*time.Second, "w1", storyOther, func(t *Record) {
				t.Status, t.LeaseExpiresAt, t.NotifyPending = s3task.StatusCompleted, time.Time{}, true
			})
			r := s.h.Runs[len(s.h.Runs)-1]
			r.CtxEnd, r.CtxEndSeq, r.Cause = s.at(125*time.Second), s.next(), CauseOther
			s.h.Notices = append(s.h.Notices, Notice{Proc: "w1", TaskID: storyOther, Status: s3task.StatusCompleted, Attempt: 1,
				Start: s.at(125 * time.Second), End: s.at(126 * time.Second), StartSeq: s.next(), OK: true})
			done := s.record(126*time.Second, "w1", storyOther, func(t *Record) { t.NotifyPending = false })
			s.object(126*time.Second, "w1", "DELETE", "p/active/"+storyOther, "")
			s.h.Snapshots[len(s.h.Snapshots)-1].Tasks[storyOther] = stateOf(done.Record)
		}},
		{KindCost, "w1 reads the record of a purged task again and again", func(s *story, run *HandlerRun) {
			s.record(40*time.Minute, "op1", id, func(t *Record) { t.Purging = true })
			s.object(40*time.Minute, "op1", "DELETE", "p/"+id+"/status.json", "")
			delete(s.h.Snapshots[len(s.h.Snapshots)-1].Tasks, id)
			s.h.GoneReads = map[string]int{id + " w1": 12}
		}},
		{KindIngest, "two tasks name one version of a file as their source", func(s *story, run *HandlerRun) {
			s.object(time.Second, "partner", "PUT", "incoming/a.csv", "v1")
			s.record(2*time.Second, "i1", storyOther, func(t *Record) { t.Metadata = source("incoming/a.csv", "v1") })
			s.record(3*time.Second, "i2", storyThird, func(t *Record) { t.Metadata = source("incoming/a.csv", "v1") })
		}},
		{KindIngest, "the current version of a file has no task at the end", func(s *story, run *HandlerRun) {
			s.object(time.Second, "partner", "PUT", "incoming/b.csv", "v1")
			s.record(2*time.Second, "i1", storyOther, func(t *Record) { t.Metadata = source("incoming/b.csv", "v1") })
			s.object(3*time.Second, "partner", "PUT", "incoming/b.csv", "v2")
		}},
		{KindIngest, "a task's input is another version than its source", func(s *story, run *HandlerRun) {
			s.object(time.Second, "partner", "PUT", "incoming/c.csv", "v1")
			s.record(2*time.Second, "i1", storyOther, func(t *Record) { t.Metadata = source("incoming/c.csv", "v1") })
			s.object(3*time.Second, "i1", "PUT", "p/"+storyOther+"/input", "v2")
		}},
		{KindIngest, "a task is made of a version of a file S3 never held", func(s *story, run *HandlerRun) {
			s.record(2*time.Second, "i1", storyOther, func(t *Record) { t.Metadata = source("incoming/junk.csv", "nothing") })
		}},
		{KindIngest, "a version stays in place for 20 minutes with no task submitted", func(s *story, run *HandlerRun) {
			s.object(time.Second, "partner", "PUT", "incoming/d.csv", "v1")
			s.object(20*time.Minute, "partner", "DELETE", "incoming/d.csv", "")
		}},
		{KindIngest, "a direct Ingest fails with a transition error", func(s *story, run *HandlerRun) {
			s.h.Calls = append(s.h.Calls, Call{Proc: "d1", Kind: CallIngest, Key: "incoming/e.csv etag", Start: s.at(time.Second), End: s.at(2 * time.Second),
				StartSeq: s.next(), EndSeq: s.next(), Err: "s3task: cannot upload input", Transition: true})
		}},
		{KindRelease, "f5 gives a task back after three attempts in a row given back", func(s *story, run *HandlerRun) {
			s.h.Params.ReleaseLimit = 3
			for n := 1; n <= 4; n++ {
				worker := fmt.Sprintf("f%d", n+1)
				d := time.Duration(n) * time.Minute
				s.record(d, worker, storyOther, func(t *Record) {
					t.Status, t.Attempt, t.WorkerID = s3task.StatusRunning, n, worker
					s.claimed(t, d)
				}).Released = n - 1
				s.record(d+50*time.Second, worker, storyOther, func(t *Record) {
					t.Status, t.WorkerID, t.ErrorCategory, t.LastError = s3task.StatusQueued, "", s3task.CategoryShutdown, "interrupted"
					s.ended(t, d+50*time.Second, s3task.OutcomeReleased)
				}).Released = n
			}
		}},
		{KindRelease, "f2 fails a task for timeout after one attempt given back", func(s *story, run *HandlerRun) {
			s.h.Params.ReleaseLimit = 3
			s.record(time.Minute, "f1", storyOther, func(t *Record) {
				t.Status, t.Attempt, t.WorkerID = s3task.StatusRunning, 1, "f1"
				s.claimed(t, time.Minute)
			})
			s.record(2*time.Minute, "f1", storyOther, func(t *Record) {
				t.Status, t.WorkerID, t.ErrorCategory = s3task.StatusQueued, "", s3task.CategoryShutdown
				s.ended(t, 2*time.Minute, s3task.OutcomeReleased)
			}).Released = 1
			s.record(3*time.Minute, "f2", storyOther, func(t *Record) {
				t.Status, t.Attempt, t.WorkerID = s3task.StatusRunning, 2, "f2"
				s.claimed(t, 3*time.Minute)
			}).Released = 1
			s.record(4*time.Minute, "f2", storyOther, func(t *Record) {
				t.Status, t.WorkerID, t.ErrorCategory = s3task.StatusFailed, "", s3task.CategoryTimeout
				s.ended(t, 4*time.Minute, s3task.OutcomeFailed)
			}).Released = 1
		}},
		{KindAPI, "a Cancel returns ErrOutcomeUnknown though S3 answered it all along", func(s *story, run *HandlerRun) {
			s.h.Calls = append(s.h.Calls, Call{Proc: "op2", Kind: CallCancel, TaskID: storyTask, Start: s.at(30 * time.Second), End: s.at(31 * time.Second),
				StartSeq: s.next(), EndSeq: s.next(), Err: "s3task: outcome of the write unknown", OutcomeUnknown: true})
		}},
		{KindAPI, "one Retry retries its task twice", func(s *story, run *HandlerRun) {
			start := s.next()
			s.record(time.Minute, "w1", storyOther, func(t *Record) { t.Status = s3task.StatusFailed })
			s.record(61*time.Second, "op2", storyOther, func(t *Record) { t.Status = s3task.StatusQueued })
			s.record(62*time.Second, "w1", storyOther, func(t *Record) { t.Status = s3task.StatusFailed })
			s.record(63*time.Second, "op2", storyOther, func(t *Record) { t.Status = s3task.StatusQueued })
			s.h.Calls = append(s.h.Calls, Call{Proc: "op2", Kind: CallRetry, TaskID: storyOther, Start: s.at(61 * time.Second), End: s.at(64 * time.Second),
				StartSeq: start, EndSeq: s.next()})
		}},
		{KindInput, "a form posted again after Submit replaces the input", func(s *story, run *HandlerRun) {
			s.object(500*time.Millisecond, "op1", "PUT", "p/"+id+"/input", "the input")
			s.object(45*time.Second, "browser", "PUT", "p/"+id+"/input", "another input")
		}},
		{KindHistory, "the completion leaves the attempt's entry running", func(s *story, run *HandlerRun) {
			for _, i := range []int{wDone, wNotified} {
				a := &s.h.Writes[i].Record.History[0]
				a.Outcome, a.EndedAt = s3task.OutcomeRunning, time.Time{}
			}
		}},
		{KindPause, "op2's Pause of the task's type returns at 0.4s and w1 begins its claim at 2.5s", func(s *story, run *HandlerRun) {
			s.call("op2", CallPause, "", 100*time.Millisecond, 400*time.Millisecond, "")
			s.h.Writes[wClaim].Began = s.at(2500 * time.Millisecond)
		}},
		{KindPeriodic, "two workers make a run of one period of a periodic task", func(s *story, run *HandlerRun) {
			s.h.Periodics = []s3task.Periodic{{Name: "tick", Schedule: s3task.Every(5 * time.Minute), Params: s3task.CreateParams{Type: periodicType}, Missed: s3task.RunMissedOnce}}
			s.run(5*time.Second, "w1", periodicID(0), 0)
			s.run(6*time.Second, "w2", periodicID(1), 0)
		}},
		{KindStop, "w1 is stopped at 10s with 5s to finish, but its handler's context lives on to 30s", func(s *story, run *HandlerRun) {
			s.event("w1", EventStop, 10*time.Second, 10*time.Second)
			s.event("w1", EventStopBy, 10*time.Second, 15*time.Second)
		}},
	}
	// Every kind has a story, so a new kind cannot come without one.
	told := map[Kind]bool{}
	for _, tc := range tests {
		told[tc.kind] = true
		if !slices.Contains(Kinds(), tc.kind) {
			t.Errorf("a story of kind %s, which Kinds does not list", tc.kind)
		}
	}
	for _, k := range Kinds() {
		if !told[k] {
			t.Errorf("kind %s has no story in TestCheckFindsEachKind", k)
		}
	}
	for _, tc := range tests {
		t.Run(string(tc.kind)+"/"+tc.why, func(t *testing.T) {
			t.Parallel()
			s, run := clean()
			tc.spoil(s, run)
			vs := Check(s.h)
			if !slices.Contains(kinds(vs), tc.kind) {
				t.Errorf("%s: no %s violation; got %v", tc.why, tc.kind, vs)
			}
		})
	}
}

// TestCheckNoticeOfFlakyHook: a hook that fails at every call for 45
// minutes, called again at most 10 minutes after each failure as the
// library promises, breaks no bound: the delivery has none.
func TestCheckNoticeOfFlakyHook(t *testing.T) {
	t.Parallel()
	s, _ := clean()
	s.h.Notices[0].OK = false
	for _, m := range []time.Duration{5 * time.Minute, 15 * time.Minute, 25 * time.Minute, 35 * time.Minute, 45 * time.Minute} {
		s.h.Notices = append(s.h.Notices, Notice{Proc: "w1", TaskID: storyTask, Status: s3task.StatusCompleted, Attempt: 1,
			Start: s.at(m), End: s.at(m), StartSeq: s.next(), OK: m == 45*time.Minute})
	}
	if vs := Check(s.h); len(vs) != 0 {
		t.Errorf("a notice retried every 10 minutes until it went out has violations:\n%v", vs)
	}
}

// TestAnnounces: a write of the wake object announces the notes it added
// to those of the write before it, one or several (a Store's calls
// announce together); the notes kept from earlier writes, a "*" among
// them, are not its announcements.
func TestAnnounces(t *testing.T) {
	const id = "7Z4EAJKXPAN0C14P3RWX2WTNMN"
	const head = "s3task-wake 3\npaused []\n"
	mine := "t/active/20000101T000657.488Z_" + id
	other := "t/active/20000101T000700.000Z_7Z4EAJW2656WX6BTPB3E18XE0S"
	for _, tc := range []struct {
		name       string
		prev, body string
		want       bool
	}{
		{"its one note", "", head + "r1 " + mine + "\n", true},
		{"a kept list-now note", head + "r0 *\n", head + "r0 *\nr1 " + other + "\n", false},
		{"a kept note of the task", head + "r0 " + mine + "\n", head + "r0 " + mine + "\nr1 " + other + "\n", false},
		{"one of the notes it added together", head + "r0 *\n", head + "r0 *\nr1 " + mine + "\nr2 " + other + "\n", true},
		{"its list-now note", head, head + "r1 *\n", true},
		{"its list-now note, no newline", "", head + "r1 *", true},
		{"the paused line changed only", head + "r0 " + mine + "\n", "s3task-wake 3\npaused [\"a\"]\nr0 " + mine + "\n", false},
		{"nothing", "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &History{Prefix: "t/"}
			if tc.prev != "" {
				h.Writes = append(h.Writes, Write{Seq: 1, Method: "PUT", Key: "t/_wake", Body: []byte(tc.prev)})
			}
			h.Writes = append(h.Writes, Write{Seq: 2, Method: "PUT", Key: "t/_wake", Body: []byte(tc.body)})
			x := &index{h: h}
			if got := announces(x.added(len(h.Writes)-1), id); got != tc.want {
				t.Errorf("announces(added(%q after %q)) = %v, want %v", tc.body, tc.prev, got, tc.want)
			}
		})
	}
}

// TestCheckAnnounced: a Submit that returned success without its process
// announcing the task in the wake object is a pickup violation, unless a
// request of the process for the wake object failed meanwhile.
func TestCheckAnnounced(t *testing.T) {
	t.Parallel()
	s, _ := clean()
	s.h.Writes[wWake].Body = []byte("s3task-wake 3\npaused []\nr1 p/active/" + storyOther + "\n")
	if got := kinds(Check(s.h)); !slices.Equal(got, []Kind{KindPickup}) {
		t.Errorf("a Submit whose announcement named another task: violations of kinds %v, want pickup", got)
	}
	s.event("op1", EventWakeFailed, time.Second, time.Second)
	if vs := Check(s.h); len(vs) != 0 {
		t.Errorf("a Submit whose wake request failed has violations:\n%v", vs)
	}
}

// storyThird is a third task of the stories, for those that need one.
const storyThird = "7Z4EAJKXPAN0C14P3RWX2WTNMN"

// source is the metadata of a task ingested from version body of key.
func source(key, body string) map[string]string {
	return map[string]string{s3task.MetaSourceKey: key, s3task.MetaSourceETag: md5hex([]byte(body))}
}

// historyLife is one task's life of four attempts, each ending otherwise,
// with the attempt history the library writes: claimed by w1 at 2s and
// renewed to 82s, w1 dies; w2 takes it over at 90s (the expiry and its
// claim in one write) and fails at 100s with an error longer than an
// entry keeps; w3 claims the retry at 111s and releases it on shutdown at
// 120s; w1 claims it again at 121s, and an operator cancels it at 130s.
// It returns the story and the index in its writes of each record write.
func historyLife() (*story, []int) {
	s := newStory()
	id := storyTask
	var at []int
	rec := func(d time.Duration, proc string, change func(t *Record)) {
		s.record(d, proc, id, change)
		at = append(at, len(s.h.Writes)-1)
	}
	claim := func(d time.Duration, worker string, lease time.Duration) func(t *Record) {
		return func(t *Record) {
			t.Status, t.Attempt, t.WorkerID, t.LeaseExpiresAt, t.RetryAt = s3task.StatusRunning, t.Attempt+1, worker, s.at(d+lease), time.Time{}
			s.claimed(t, d)
		}
	}
	long := strings.Repeat("row 7 is malformed; ", 40) // 800 bytes
	rec(0, "op1", func(t *Record) {})
	rec(time.Second, "op1", func(t *Record) { t.Status = s3task.StatusQueued })
	rec(2*time.Second, "w1", claim(2*time.Second, "w1", time.Minute))
	rec(22*time.Second, "w1", func(t *Record) { t.LeaseExpiresAt = s.at(82 * time.Second) })
	rec(90*time.Second, "w2", func(t *Record) {
		t.ErrorCategory, t.LastError = s3task.CategoryLeaseExpired, `attempt 1: lease of worker "w1" expired`
		s.ended(t, 82*time.Second, s3task.OutcomeLeaseExpired) // at the lease's end
		claim(90*time.Second, "w2", time.Minute)(t)
	})
	rec(100*time.Second, "w2", func(t *Record) {
		t.Status, t.LeaseExpiresAt, t.RetryAt = s3task.StatusFailed, time.Time{}, s.at(110*time.Second)
		t.ErrorCategory, t.LastError = "bad_input", long
		s.ended(t, 100*time.Second, s3task.OutcomeFailed)
		t.History[1].Error = long[:s3task.HistoryErrorLimit-len("…")] + "…"
	})
	rec(111*time.Second, "w3", claim(111*time.Second, "w3", time.Minute))
	rec(120*time.Second, "w3", func(t *Record) {
		t.Status, t.WorkerID, t.LeaseExpiresAt = s3task.StatusQueued, "", time.Time{}
		t.ErrorCategory, t.LastError = s3task.CategoryShutdown, "attempt 3: interrupted by worker shutdown"
		s.ended(t, 120*time.Second, s3task.OutcomeReleased)
	})
	rec(121*time.Second, "w1", claim(121*time.Second, "w1", time.Minute))
	rec(130*time.Second, "op1", func(t *Record) {
		t.Status, t.LeaseExpiresAt, t.CancelReason = s3task.StatusAbandoned, time.Time{}, "not needed"
		s.ended(t, 130*time.Second, s3task.OutcomeCanceled)
		a := &t.History[len(t.History)-1]
		a.ErrorCategory, a.Error = "", "" // a cancel names no error
	})
	return s, at
}

// manyAttempts is a life of HistoryLimit+2 attempts, each released on
// shutdown, with the history the library writes: the latest HistoryLimit
// of them.
func manyAttempts() *story {
	s := newStory()
	id := storyTask
	s.record(0, "op1", id, func(t *Record) { t.Status = s3task.StatusQueued })
	for n := 1; n <= s3task.HistoryLimit+2; n++ {
		d := time.Duration(n) * time.Minute
		s.record(d, "w1", id, func(t *Record) {
			t.Status, t.Attempt, t.WorkerID, t.LeaseExpiresAt = s3task.StatusRunning, n, "w1", s.at(d+time.Minute)
			s.claimed(t, d)
			if len(t.History) > s3task.HistoryLimit {
				t.History = t.History[1:]
			}
		})
		s.record(d+time.Second, "w1", id, func(t *Record) {
			t.Status, t.WorkerID, t.LeaseExpiresAt = s3task.StatusQueued, "", time.Time{}
			t.ErrorCategory, t.LastError = s3task.CategoryShutdown, fmt.Sprintf("attempt %d: interrupted by worker shutdown", n)
			s.ended(t, d+time.Second, s3task.OutcomeReleased)
		})
	}
	return s
}

// TestCheckHistory: the history oracle passes the lives the library
// writes, and finds each way a history can go wrong.
func TestCheckHistory(t *testing.T) {
	t.Parallel()
	// The record writes of historyLife, by index: 0 create, 1 submit,
	// 2 claim of attempt 1, 3 its renewal, 4 the takeover (attempt 1
	// expired, 2 claimed), 5 attempt 2 failed, 6 claim of attempt 3, 7 its
	// release, 8 claim of attempt 4, 9 the cancel.
	entry := func(s *story, w, n int) *s3task.Attempt {
		h := s.h.Writes[w].Record.History
		for i := range h {
			if h[i].Number == n {
				return &h[i]
			}
		}
		panic(fmt.Sprintf("write %d has no entry for attempt %d", w, n))
	}
	// from applies edit to the entry of attempt n in the record writes
	// from index i on, as a writer that got it wrong would have, and
	// every writer after it carried on.
	from := func(s *story, at []int, i, n int, edit func(a *s3task.Attempt)) {
		for _, w := range at[i:] {
			edit(entry(s, w, n))
		}
	}
	tests := []struct {
		name  string
		story func() *story
		want  string // part of the violation's message; "" for none
	}{
		{"a life of four attempts, each ending otherwise", func() *story { s, _ := historyLife(); return s }, ""},
		{"more attempts than the history keeps", manyAttempts, ""},
		{"the clean life", func() *story { s, _ := clean(); return s }, ""},
		{"a takeover leaves the expired attempt running", func() *story {
			s, at := historyLife()
			from(s, at, 4, 1, func(a *s3task.Attempt) {
				a.Outcome, a.EndedAt, a.ErrorCategory, a.Error = s3task.OutcomeRunning, time.Time{}, "", ""
			})
			return s
		}, `attempt 1 (claimed by w1 at +2s) that its outcome is "running", not "lease_expired"`},
		{"the expired attempt ends when it was found out, not at its lease's end", func() *story {
			s, at := historyLife()
			from(s, at, 4, 1, func(a *s3task.Attempt) { a.EndedAt = s.at(90 * time.Second) })
			return s
		}, "not at the end of its lease, +1m22s"},
		{"the history is not trimmed", func() *story {
			s := manyAttempts()
			last := &s.h.Writes[len(s.h.Writes)-1]
			last.Record.History = append([]s3task.Attempt{{Number: 1, WorkerID: "w1", StartedAt: s.at(time.Minute), Outcome: s3task.OutcomeReleased}}, last.Record.History...)
			return s
		}, "more than the 10 promised"},
		{"the claim's entry names another worker", func() *story {
			s, at := historyLife()
			from(s, at, 6, 3, func(a *s3task.Attempt) { a.WorkerID = "w1" })
			return s
		}, `worker "w1" claimed it`},
		{"the claim's entry has another start", func() *story {
			s, at := historyLife()
			from(s, at, 2, 1, func(a *s3task.Attempt) { a.StartedAt = a.StartedAt.Add(-time.Second) })
			return s
		}, "that it started at +1s"},
		{"the claim's entry has another heartbeat interval", func() *story {
			s, at := historyLife()
			from(s, at, 8, 4, func(a *s3task.Attempt) { a.HeartbeatInterval = time.Minute })
			return s
		}, "heartbeats every 1m0s"},
		{"the failure's error is kept whole", func() *story {
			s, at := historyLife()
			from(s, at, 5, 2, func(a *s3task.Attempt) { a.Error = s.h.Writes[at[5]].Record.LastError })
			return s
		}, "not last_error"},
		{"the failure keeps another category", func() *story {
			s, at := historyLife()
			from(s, at, 5, 2, func(a *s3task.Attempt) { a.ErrorCategory = s3task.CategoryTransient })
			return s
		}, `error category is "transient", not "bad_input"`},
		{"the release is recorded as a failure", func() *story {
			s, at := historyLife()
			from(s, at, 7, 3, func(a *s3task.Attempt) { a.Outcome = s3task.OutcomeFailed })
			return s
		}, `outcome is "failed", not "released"`},
		{"the cancel leaves the attempt running", func() *story {
			s, at := historyLife()
			from(s, at, 9, 4, func(a *s3task.Attempt) { a.Outcome, a.EndedAt = s3task.OutcomeRunning, time.Time{} })
			return s
		}, `outcome is "running", not "canceled"`},
		{"the completion's end is stamped a minute late", func() *story {
			s, _ := clean()
			for _, w := range []int{wDone, wNotified} {
				s.h.Writes[w].Record.History[0].EndedAt = s.at(90 * time.Second)
			}
			return s
		}, "not between its start and the write that ended it"},
		{"a claim writes no entry", func() *story {
			s, at := historyLife()
			for _, w := range at[6:] {
				r := s.h.Writes[w].Record
				r.History = slices.DeleteFunc(r.History, func(a s3task.Attempt) bool { return a.Number == 3 })
			}
			return s
		}, "names attempts [1 2]; the run's writes show attempts [1 2 3]"},
		{"a heartbeat drops the history", func() *story {
			s, at := historyLife()
			s.h.Writes[at[3]].Record.History = nil
			return s
		}, "names attempts []"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			vs := checkHistories(newIndex(tt.story().h))
			switch {
			case tt.want == "" && len(vs) > 0:
				t.Errorf("violations in a history the library would write:\n%v", vs)
			case tt.want != "" && len(vs) != 1:
				t.Errorf("%d violations, want one saying %q: %v", len(vs), tt.want, vs)
			case tt.want != "" && !strings.Contains(vs[0].Msg, tt.want):
				t.Errorf("violation %q does not say %q", vs[0].Msg, tt.want)
			}
		})
	}
}
