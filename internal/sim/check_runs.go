package sim

import (
	"fmt"
	"slices"
	"time"

	"github.com/s3task/s3task"
)

// checkOverlap: no two runs of one task at once.
func checkOverlap(x *index) []Violation {
	var vs []Violation
	for _, id := range sortedKeys(x.runs) {
		runs := slices.Clone(x.runs[id])
		slices.SortFunc(runs, func(a, b *HandlerRun) int { return a.Start.Compare(b.Start) })
		for i, a := range runs {
			ea := a.End(x.h.End)
			for _, b := range runs[i+1:] {
				if !b.Start.Before(ea) {
					break
				}
				eb := b.End(x.h.End)
				d := earlier(ea, eb).Sub(b.Start)
				if d <= 0 {
					continue
				}
				// A handler already told to stop cannot be told again that the
				// lease is gone: if its worker could not reach S3 to keep the
				// lease, the overlap is the handler's, not the worker's.
				if a.Cause == CauseStopping && a.CtxEnd.Before(b.Start) {
					if _, ok := x.during(a.Worker, b.Start.Add(-x.p.LeaseDuration-x.p.ClockMargin), b.Start, EventPause, EventOutage, EventFreeze); ok {
						continue
					}
				}
				vs = append(vs, Violation{Kind: KindOverlap, Task: id, Time: b.Start, Msg: fmt.Sprintf(
					"task %s: attempt %d on %s (%s to %s, %s) and attempt %d on %s (from %s) ran at once for %s",
					id, a.Attempt, a.Worker, x.at(a.Start), x.at(ea), runEnding(a), b.Attempt, b.Worker, x.at(b.Start), d)})
			}
		}
	}
	return vs
}

// runEnding says how a run ended, for messages.
func runEnding(r *HandlerRun) string {
	switch {
	case r.Dead:
		return "its worker crashed"
	case r.Cause != CauseNone && r.Cause != CauseOther && (!r.Returned || r.CtxEnd.Before(r.Return)):
		s := fmt.Sprintf("context ended (%s) at %s", r.Cause, r.CtxEnd.Format("15:04:05.0"))
		if r.Returned {
			s += ", returned " + r.Return.Format("15:04:05.0")
		}
		return s
	case r.Returned:
		return "returned"
	}
	return "never returned"
}

// checkCompletion: a completed task's final attempt succeeded and its
// output is the one that attempt wrote.
func checkCompletion(x *index) []Violation {
	var vs []Violation
	for _, id := range x.tasks {
		var done *Write
		for _, w := range x.records[id] {
			if w.Record != nil {
				done = w
			}
		}
		if done == nil || done.Record.Status != s3task.StatusCompleted {
			continue
		}
		t := done.Record
		bad := func(format string, args ...any) {
			vs = append(vs, Violation{Kind: KindCompletion, Task: id, Time: done.Time,
				Msg: fmt.Sprintf("task %s completed by attempt %d: ", id, t.Attempt) + fmt.Sprintf(format, args...)})
		}
		r := x.run[runKey{id, t.Attempt}]
		switch {
		case r == nil:
			bad("no handler of that attempt ran")
			continue
		case !r.OK:
			bad("its handler on %s returned %q", r.Worker, r.Err)
			continue
		}
		key := x.outputKey(id, t.Attempt)
		puts := x.outputs[key]
		switch {
		case r.Wrote && t.OutputPath != key:
			bad("the record's output is %q, not %q, which the attempt wrote", t.OutputPath, key)
		case r.Wrote && len(puts) != 1:
			bad("%s was written %d times", key, len(puts))
		case r.Wrote && string(puts[0].Body) != r.Output:
			bad("%s holds %q, not what the attempt wrote (%q)", key, puts[0].Body, r.Output)
		case !r.Wrote && t.OutputPath != "":
			bad("the record names output %q but the attempt wrote none", t.OutputPath)
		}
	}
	return vs
}

// checkAttempts: every attempt that counts had a handler, or its worker
// crashed, was paused or was stopped while it held the claim.
func checkAttempts(x *index) []Violation {
	var vs []Violation
	for s := range x.steps() {
		id, prev, next := s.id, s.prev, s.next
		if next.Status != s3task.StatusRunning || next.Attempt != prev.Attempt+1 {
			continue
		}
		a, holder, claimed := next.Attempt, next.WorkerID, s.w.Time
		end, released := x.h.End, false
		var after *Record
		for _, w := range s.later {
			if r := w.Record; r != nil && r.Status == s3task.StatusRunning && r.Attempt == a && r.WorkerID == holder {
				continue
			}
			end, after = w.Time, w.Record
			released = after != nil && after.Status == s3task.StatusQueued && after.ErrorCategory == "shutdown" && w.Proc == holder
			break
		}
		// An attempt given back, or cancelled before its handler could
		// start (the claim's answer was still being settled), uses
		// nothing up: a released one is not counted, and an abandoned
		// task has no attempts left to spend.
		cancelled := after != nil && after.Status == s3task.StatusAbandoned
		if released || cancelled || s.w.Zombie || x.run[runKey{id, a}] != nil {
			continue // a zombie claim landed after its worker was told it failed
		}
		if _, ok := x.during(holder, claimed.Add(-5*time.Second), end.Add(time.Second), EventCrash, EventStop); ok {
			continue
		}
		if _, ok := x.during(holder, claimed.Add(-x.p.LeaseDuration), end, EventPause, EventOutage, EventFreeze); ok {
			continue
		}
		vs = append(vs, Violation{Kind: KindAttempts, Task: id, Time: claimed, Msg: fmt.Sprintf(
			"task %s: attempt %d was claimed by %s at %s and counts against max_attempts, but no handler started and %s was not crashed, paused, cut off or stopped while it held the claim (until %s, then %s)",
			id, a, holder, x.at(claimed), holder, x.at(end), describe(after))})
	}
	return vs
}

// checkOverrun: no handler runs past the earliest moment another worker
// may take its task over: the end of the last lease its worker wrote, plus
// ClockMargin, less the spread of S3's clocks (a taker's sense of the
// server's time may lead by that much). This holds whether or not a taker
// came, so a worker that trusts its lease too long is found even when no
// other worker happened to be there to overlap with it. A handler already
// told to stop (ErrWorkerStopping), which its worker can tell nothing
// more, is excused while its worker is paused, frozen or cut off, as in
// checkOverlap, and so is one whose task was cancelled by then: nobody
// takes an abandoned task over.
func checkOverrun(x *index) []Violation {
	var vs []Violation
	for _, id := range sortedKeys(x.runs) {
		for _, r := range x.runs[id] {
			end := r.End(x.h.End)
			var lease time.Time
			for _, w := range x.records[id] {
				if t := w.Record; t != nil && w.Time.Before(end) && t.Status == s3task.StatusRunning && t.Attempt == r.Attempt && t.WorkerID == r.Worker {
					lease = later(lease, t.LeaseExpiresAt)
				}
			}
			limit := lease.Add(x.p.ClockMargin - x.p.DateSpread)
			if lease.IsZero() || !end.After(limit) {
				continue
			}
			if t := x.stateBefore(id, limit); t == nil || t.Status == s3task.StatusAbandoned {
				continue
			}
			if r.Cause == CauseStopping && r.CtxEnd.Before(limit) {
				if _, ok := x.during(r.Worker, limit.Add(-x.p.LeaseDuration-x.p.ClockMargin), end, EventPause, EventOutage, EventFreeze); ok {
					continue
				}
			}
			vs = append(vs, Violation{Kind: KindOverrun, Task: id, Time: limit, Msg: fmt.Sprintf(
				"task %s: attempt %d on %s ran until %s (%s), %s past %s, when its lease (until %s) could be taken over",
				id, r.Attempt, r.Worker, x.at(end), runEnding(r), end.Sub(limit), x.at(limit), x.at(lease))})
		}
	}
	return vs
}

// checkStopBy: once the context given to Worker.Stop ends, the worker's
// running handlers have their contexts cancelled at once (within
// Params.StopGrace), whatever else the worker is waiting for, such as a
// slow OnTerminal hook. A process frozen at the time learns of it when it
// thaws.
func checkStopBy(x *index) []Violation {
	var vs []Violation
	for _, e := range x.h.Events {
		if e.Kind != EventStopBy {
			continue
		}
		limit := e.End.Add(x.p.StopGrace)
		if f, ok := x.during(e.Proc, e.End, limit, EventFreeze); ok {
			limit = later(limit, f.End.Add(x.p.StopGrace))
		}
		for _, r := range x.h.Runs {
			if r.Worker != e.Proc || r.Start.After(e.End) || (r.Returned && !r.Return.After(e.End)) || (r.CtxEndSeq > 0 && !r.CtxEnd.After(limit)) {
				continue
			}
			if r.Dead && !r.Return.After(limit) {
				continue
			}
			end := "never"
			if r.CtxEndSeq > 0 {
				end = x.at(r.CtxEnd)
			}
			vs = append(vs, Violation{Kind: KindStop, Task: r.Task, Time: limit, Msg: fmt.Sprintf(
				"task %s: %s's Stop context ended at %s, but attempt %d's handler context ended %s (%s)",
				r.Task, e.Proc, x.at(e.End), r.Attempt, end, r.Plan)})
		}
	}
	return vs
}
