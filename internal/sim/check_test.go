package sim

import (
	"fmt"
	"slices"
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
func (s *story) record(d time.Duration, proc, id string, change func(t *s3task.Task)) *Write {
	t := &s3task.Task{SchemaVersion: 1, ID: id, Status: s3task.StatusCreated, MaxAttempts: 3}
	for i := len(s.h.Writes) - 1; i >= 0; i-- {
		if w := s.h.Writes[i]; w.Record != nil && w.Record.ID == id {
			c := *w.Record
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

func (s *story) snapshot(d time.Duration, tasks map[string]s3task.Task, markers ...string) {
	snap := Snapshot{Time: s.at(d), Tasks: map[string]TaskState{}, Markers: map[string]bool{}}
	for id, t := range tasks {
		snap.Tasks[id] = stateOf(&t)
	}
	for _, id := range markers {
		snap.Markers[id] = true
	}
	s.h.Snapshots = append(s.h.Snapshots, snap)
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
	wClaim
	wRenew
	wOutput
	wDone
	wNotified
	wUnmarked
)

// clean is one task's uneventful life: created by op1 at 0s, submitted at
// 1s, claimed by w1 at 2s, renewed at 22s, completed with an output at 30s
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
	created := s.record(0, "op1", id, func(t *s3task.Task) {})
	call(CallCreate, from, 0, created.Record)
	from = s.next()
	s.object(time.Second, "op1", "PUT", "p/active/"+id, "")
	queued := s.record(time.Second, "op1", id, func(t *s3task.Task) { t.Status = s3task.StatusQueued })
	call(CallSubmit, from, time.Second, queued.Record)
	s.record(2*time.Second, "w1", id, func(t *s3task.Task) {
		t.Status, t.Attempt, t.WorkerID, t.LeaseExpiresAt = s3task.StatusRunning, 1, "w1", s.at(62*time.Second)
	})
	run := &HandlerRun{Task: id, Attempt: 1, Worker: "w1", Start: s.at(2 * time.Second), StartSeq: s.next()}
	s.h.Runs = append(s.h.Runs, run)
	s.record(22*time.Second, "w1", id, func(t *s3task.Task) { t.LeaseExpiresAt = s.at(82 * time.Second) })
	key := "p/" + id + "/output-attempt-1"
	s.object(29*time.Second, "w1", "PUT", key, "out")
	run.Output, run.Wrote = "out", true
	run.Returned, run.Return, run.ReturnSeq, run.OK = true, s.at(30*time.Second), s.next(), true
	s.record(30*time.Second, "w1", id, func(t *s3task.Task) {
		t.Status, t.OutputPath, t.LeaseExpiresAt, t.NotifyPending = s3task.StatusCompleted, key, time.Time{}, true
	})
	run.CtxEnd, run.CtxEndSeq, run.Cause = s.at(30*time.Second), s.next(), CauseOther
	s.h.Notices = append(s.h.Notices, Notice{Proc: "w1", TaskID: id, Status: s3task.StatusCompleted, Attempt: 1,
		Start: s.at(30 * time.Second), End: s.at(31 * time.Second), StartSeq: s.next(), OK: true})
	done := s.record(31*time.Second, "w1", id, func(t *s3task.Task) { t.NotifyPending = false })
	s.object(31*time.Second, "w1", "DELETE", "p/active/"+id, "")
	s.snapshot(time.Hour, map[string]s3task.Task{id: *done.Record})
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
			s.record(50*time.Second, "w1", id, func(t *s3task.Task) {
				t.Status, t.Attempt, t.WorkerID, t.LeaseExpiresAt, t.RetryAt = s3task.StatusRunning, 2, "w1", s.at(110*time.Second), time.Time{}
			})
		}},
		{KindAPI, "a Cancel reports a failure although its abandon landed", func(s *story, run *HandlerRun) {
			from := s.next()
			s.record(40*time.Second, "op1", id, func(t *s3task.Task) { t.Status = s3task.StatusAbandoned })
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
			q := s3task.Task{ID: storyOther, Status: s3task.StatusQueued}
			snaps := s.h.Snapshots
			s.h.Snapshots = nil
			for m := time.Duration(0); m <= 3*time.Hour; m += 10 * time.Minute {
				s.snapshot(m, map[string]s3task.Task{storyOther: q})
			}
			s.h.Snapshots = append(s.h.Snapshots, snaps...)
		}},
		{KindNotice, "the finished task's notice never went out", func(s *story, run *HandlerRun) {
			s.h.Notices[0].OK = false
		}},
		{KindClaimDelay, "a queued task waits minutes while its worker has a free slot", func(s *story, run *HandlerRun) {
			s.h.Writes = s.h.Writes[:wClaim] // queued at 1s, marked, claimed only at 5m
			s.h.Runs, s.h.Notices = nil, nil
			s.record(5*time.Minute, "w1", id, func(t *s3task.Task) {
				t.Status, t.Attempt, t.WorkerID, t.LeaseExpiresAt = s3task.StatusRunning, 1, "w1", s.at(6*time.Minute)
			})
		}},
		{KindTransition, "a completed task runs again", func(s *story, run *HandlerRun) {
			s.record(50*time.Second, "w1", id, func(t *s3task.Task) {
				t.Status, t.Attempt, t.WorkerID, t.LeaseExpiresAt = s3task.StatusRunning, 2, "w1", s.at(110*time.Second)
			})
		}},
		{KindTransition, "a release raises max_attempts", func(s *story, run *HandlerRun) {
			w := s.h.Writes[wRenew].Record // the renewal becomes a release
			w.Status, w.ErrorCategory, w.MaxAttempts, w.WorkerID, w.LeaseExpiresAt = s3task.StatusQueued, "shutdown", 4, "", time.Time{}
		}},
		{KindExpiry, "the lease runs out under a live handler and another worker takes over", func(s *story, run *HandlerRun) {
			s.h.Writes = s.h.Writes[:wRenew] // w1's lease ends at 62s; w2 takes over at 70s
			s.record(70*time.Second, "w2", id, func(t *s3task.Task) {
				t.Attempt, t.WorkerID, t.LeaseExpiresAt, t.ErrorCategory = 2, "w2", s.at(130*time.Second), "lease_expired"
			})
			run.Return = s.at(100 * time.Second) // while w1's handler runs to 100s
		}},
		{KindStuck, "a task is still running at the end", func(s *story, run *HandlerRun) {
			s.h.Snapshots[len(s.h.Snapshots)-1].Tasks[id] = TaskState{Status: s3task.StatusRunning, Pending: true}
		}},
		{KindKey, "a second task is created with the key of a live one", func(s *story, run *HandlerRun) {
			s.key(id, "invoice-2000-01")
			s.record(10*time.Second, "op2", storyOther, func(t *s3task.Task) { t.IdempotencyKey = "invoice-2000-01" })
		}},
		{KindKey, "a keyed Create returns the key's task although it was marked for purging", func(s *story, run *HandlerRun) {
			s.key(id, "invoice-2000-01")
			marked := s.record(40*time.Minute, "op1", id, func(t *s3task.Task) { t.Purging = true })
			from := s.next()
			s.h.Calls = append(s.h.Calls, Call{Proc: "op2", Kind: CallCreate, TaskID: id, Key: "invoice-2000-01",
				Start: s.at(40*time.Minute + time.Second), End: s.at(40*time.Minute + 2*time.Second), StartSeq: from, EndSeq: s.next(), Task: marked.Record})
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
			s.record(70*time.Second, "op1", storyOther, func(t *s3task.Task) {})
			s.object(71*time.Second, "op1", "PUT", "p/active/"+storyOther, "")
			s.record(71*time.Second, "op1", storyOther, func(t *s3task.Task) { t.Status = s3task.StatusQueued })
			s.object(71*time.Second, "op1", "PUT", "p/_wake", "")
			s.record(2*time.Minute, "w1", storyOther, func(t *s3task.Task) {
				t.Status, t.Attempt, t.WorkerID, t.LeaseExpiresAt = s3task.StatusRunning, 1, "w1", s.at(3*time.Minute)
			})
			s.h.Runs = append(s.h.Runs, &HandlerRun{Task: storyOther, Attempt: 1, Worker: "w1", Start: s.at(2 * time.Minute), StartSeq: s.next(),
				Returned: true, Return: s.at(125 * time.Second), ReturnSeq: s.next(), OK: true})
			s.record(125*time.Second, "w1", storyOther, func(t *s3task.Task) {
				t.Status, t.LeaseExpiresAt, t.NotifyPending = s3task.StatusCompleted, time.Time{}, true
			})
			r := s.h.Runs[len(s.h.Runs)-1]
			r.CtxEnd, r.CtxEndSeq, r.Cause = s.at(125*time.Second), s.next(), CauseOther
			s.h.Notices = append(s.h.Notices, Notice{Proc: "w1", TaskID: storyOther, Status: s3task.StatusCompleted, Attempt: 1,
				Start: s.at(125 * time.Second), End: s.at(126 * time.Second), StartSeq: s.next(), OK: true})
			done := s.record(126*time.Second, "w1", storyOther, func(t *s3task.Task) { t.NotifyPending = false })
			s.object(126*time.Second, "w1", "DELETE", "p/active/"+storyOther, "")
			s.h.Snapshots[len(s.h.Snapshots)-1].Tasks[storyOther] = stateOf(done.Record)
		}},
		{KindCost, "w1 reads the record of a purged task again and again", func(s *story, run *HandlerRun) {
			s.record(40*time.Minute, "op1", id, func(t *s3task.Task) { t.Purging = true })
			s.object(40*time.Minute, "op1", "DELETE", "p/"+id+"/status.json", "")
			delete(s.h.Snapshots[len(s.h.Snapshots)-1].Tasks, id)
			s.h.GoneReads = map[string]int{id + " w1": 12}
		}},
		{KindIngest, "two tasks name one version of a file as their source", func(s *story, run *HandlerRun) {
			s.object(time.Second, "partner", "PUT", "incoming/a.csv", "v1")
			s.record(2*time.Second, "i1", storyOther, func(t *s3task.Task) { t.Metadata = source("incoming/a.csv", "v1") })
			s.record(3*time.Second, "i2", storyThird, func(t *s3task.Task) { t.Metadata = source("incoming/a.csv", "v1") })
		}},
		{KindIngest, "the current version of a file has no task at the end", func(s *story, run *HandlerRun) {
			s.object(time.Second, "partner", "PUT", "incoming/b.csv", "v1")
			s.record(2*time.Second, "i1", storyOther, func(t *s3task.Task) { t.Metadata = source("incoming/b.csv", "v1") })
			s.object(3*time.Second, "partner", "PUT", "incoming/b.csv", "v2")
		}},
		{KindIngest, "a task's input is another version than its source", func(s *story, run *HandlerRun) {
			s.object(time.Second, "partner", "PUT", "incoming/c.csv", "v1")
			s.record(2*time.Second, "i1", storyOther, func(t *s3task.Task) { t.Metadata = source("incoming/c.csv", "v1") })
			s.object(3*time.Second, "i1", "PUT", "p/"+storyOther+"/input", "v2")
		}},
		{KindPause, "op2's Pause of the task's type returns at 0.4s and w1 begins its claim at 2.5s", func(s *story, run *HandlerRun) {
			s.call("op2", CallPause, "", 100*time.Millisecond, 400*time.Millisecond, "")
			s.h.Writes[wClaim].Began = s.at(2500 * time.Millisecond)
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

// TestAnnounces: a write of the wake object announces only the note it
// added, its last line; the notes kept from earlier writes, a "*" among
// them, are not its announcement.
func TestAnnounces(t *testing.T) {
	const id = "7Z4EAJKXPAN0C14P3RWX2WTNMN"
	for _, tc := range []struct {
		body string
		want bool
	}{
		{"s3task-wake 1\nr1 t/active/20000101T000657.488Z_" + id + "\n", true},
		{"s3task-wake 1\nr0 *\nr1 t/active/20000101T000657.488Z_7Z4EAJW2656WX6BTPB3E18XE0S\n", false},
		{"s3task-wake 1\nr0 t/active/20000101T000657.488Z_" + id + "\nr1 t/active/20000101T000700.000Z_7Z4EAJW2656WX6BTPB3E18XE0S\n", false},
		{"s3task-wake 1\nr1 *\n", true},
		{"s3task-wake 1\nr1 *", true},
		{"", false},
	} {
		if got := announces([]byte(tc.body), id); got != tc.want {
			t.Errorf("announces(%q) = %v, want %v", tc.body, got, tc.want)
		}
	}
}

// storyThird is a third task of the stories, for those that need one.
const storyThird = "7Z4EAJKXPAN0C14P3RWX2WTNMN"

// source is the metadata of a task ingested from version body of key.
func source(key, body string) map[string]string {
	return map[string]string{s3task.MetaSourceKey: key, s3task.MetaSourceETag: md5hex([]byte(body))}
}
