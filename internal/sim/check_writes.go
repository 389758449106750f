package sim

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/s3task/s3task"
)

// used returns the attempts a record counts against max_attempts.
func used(w *Write) int {
	if w.Record == nil {
		return 0
	}
	return w.Record.Attempt - w.Released
}

// isCreateCall reports whether a call kind creates a task.
func isCreateCall(k CallKind) bool { return k == CallCreate || k == CallCreateForUpload }

// checkAPI: a call that failed (other than with ErrOutcomeUnknown) changed
// nothing in the record, and a call that succeeded did what it promises (a
// Retry, once); a call that settles its doubts itself (Submit, Retry,
// Cancel, Schedule, Pause, Resume) returned ErrOutcomeUnknown only with a
// deadline of its own, its task purged meanwhile, or its process paused
// (its requests hung for a minute or more) or crashed during the call.
func checkAPI(x *index) []Violation {
	var vs []Violation
	for i := range x.h.Calls {
		c := &x.h.Calls[i]
		if c.Kind == CallPutInput || c.Kind == CallPostInput || c.Kind == CallUploadInput {
			continue
		}
		bad := func(format string, args ...any) {
			vs = append(vs, Violation{Kind: KindAPI, Task: c.TaskID, Time: c.End, Msg: fmt.Sprintf(
				"%s %s(%s) from %s to %s: ", c.Proc, c.Kind, c.TaskID, x.at(c.Start), x.at(c.End)) + fmt.Sprintf(format, args...)})
		}
		if c.Kind == CallPurge {
			vs = append(vs, x.checkPurge(c)...)
			continue
		}
		mine := x.callWrites(c)
		if c.OutcomeUnknown && settles(c.Kind) && !c.Deadline && !x.purgedDuring(c) {
			// A pause hangs the read-back past the 30 s it may take; the
			// other troubles are shorter than that.
			if _, troubled := x.during(c.Proc, c.Start, c.End, EventPause, EventCrash); !troubled {
				bad("returned ErrOutcomeUnknown (%s), though its context had no deadline, the task was not purged, and S3 answered it all along", c.Err)
			}
		}
		if c.Err != "" {
			// A zombie landed after the call was told its request failed:
			// the call cannot know of it (see Params.MaxZombieDelay).
			mine = slices.DeleteFunc(mine, func(w *Write) bool { return w.Zombie })
			if c.OutcomeUnknown || len(mine) == 0 {
				continue
			}
			w := mine[0]
			bad("returned %q (not ErrOutcomeUnknown), but its write %s -> %s of task %s landed at %s",
				c.Err, describe(x.prevRecord(w)), describe(w.Record), w.TaskID(x.h.Prefix), x.at(w.Time))
			continue
		}
		switch c.Kind {
		case CallCreate, CallCreateForUpload:
			if c.Key != "" {
				continue // see checkKeys
			}
			found := false
			for _, w := range mine {
				found = found || (w.TaskID(x.h.Prefix) == c.TaskID && w.Record.Status == s3task.StatusCreated)
			}
			if !found {
				bad("succeeded but wrote no created record for it")
			}
		case CallSubmit:
			if t := x.lastPutBefore(c.TaskID, c.EndSeq); t == nil || t.Status == s3task.StatusCreated {
				bad("succeeded but the record is %s", describe(t))
			}
		case CallCancel:
			if t := x.lastPutBefore(c.TaskID, c.EndSeq); t == nil || t.Status != s3task.StatusAbandoned {
				bad("succeeded but the record is %s", describe(t))
			}
		case CallRetry:
			found := false
			for _, w := range mine {
				if p := x.prevRecord(w); p != nil && p.Status == s3task.StatusFailed && w.Record.Status == s3task.StatusQueued {
					found = true
				}
			}
			if !found {
				bad("succeeded but wrote no failed -> queued change of its own; the record is %s", describe(x.lastPutBefore(c.TaskID, c.EndSeq)))
			}
			if n := retries(x, mine); n > 1 {
				bad("retried the task %d times", n)
			}
		}
	}
	return vs
}

// checkPurge: every task a Purge reports deleted had its record marked for
// purging and then deleted by the Purge's process during the call, and
// nothing it deleted was unfinished (checkTransitions sees to that).
func (x *index) checkPurge(c *Call) []Violation {
	var vs []Violation
	for _, id := range c.Purged {
		var marked, deleted bool
		for _, w := range x.records[id] {
			switch {
			case w.Seq >= c.EndSeq:
			case w.Record != nil && w.Record.Purging:
				marked = true
			case w.Record == nil && w.Proc == c.Proc && w.Seq > c.StartSeq:
				deleted = true
			}
		}
		if !marked || !deleted {
			vs = append(vs, Violation{Kind: KindAPI, Task: id, Time: c.End, Msg: fmt.Sprintf(
				"%s Purge from %s to %s reported task %s purged, but its record was %s (marked for purging: %v, deleted by it: %v)",
				c.Proc, x.at(c.Start), x.at(c.End), id, describe(x.lastPutBefore(id, c.EndSeq)), marked, deleted)})
		}
	}
	return vs
}

// callWrites returns the record PUTs the call's process made during the
// call: to the call's task, or to any record for a Create, whose task is
// not known when it fails.
func (x *index) callWrites(c *Call) []*Write {
	var out []*Write
	mine := func(w *Write) bool {
		return w.Proc == c.Proc && w.Record != nil && w.Seq > c.StartSeq && w.Seq < c.EndSeq
	}
	if isCreateCall(c.Kind) {
		for i := range x.h.Writes {
			if w := &x.h.Writes[i]; mine(w) {
				out = append(out, w)
			}
		}
		return out
	}
	for _, w := range x.records[c.TaskID] {
		if mine(w) {
			out = append(out, w)
		}
	}
	return out
}

// prevRecord returns the record a record write replaced, nil for a create.
func (x *index) prevRecord(w *Write) *Record {
	var prev *Record
	for _, o := range x.records[w.TaskID(x.h.Prefix)] {
		if o == w {
			return prev
		}
		prev = o.Record
	}
	return nil
}

// lastPutBefore returns the last record written before sequence number
// seq, nil if none.
func (x *index) lastPutBefore(id string, seq int64) *Record {
	var t *Record
	for _, w := range x.records[id] {
		if w.Seq >= seq {
			break
		}
		if w.Record != nil {
			t = w.Record
		}
	}
	return t
}

// outputAttempt returns the task and attempt of an output key.
func outputAttempt(prefix, key string) (string, int) {
	id := keyTask(prefix, key)
	_, rest, _ := strings.Cut(key, "/output-attempt-")
	end := 0
	for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
		end++
	}
	n, _ := strconv.Atoi(rest[:end])
	return id, n
}

// checkLateWrites: nothing of an attempt lands after its handler's context
// ended: no output at all, and no record write once the lease was lost or
// the task cancelled.
func checkLateWrites(x *index) []Violation {
	var vs []Violation
	for _, key := range sortedKeys(x.outputs) {
		id, n := outputAttempt(x.h.Prefix, key)
		r := x.run[runKey{id, n}]
		if r == nil {
			continue
		}
		for _, w := range x.outputs[key] {
			// A write racing with the end, at the same instant, may be one
			// sent before it; a late writer's write is late anyway. A zombie
			// was sent before it, and held up in the network.
			if !w.Zombie && r.CtxEndSeq > 0 && w.Seq > r.CtxEndSeq && (w.Time.After(r.CtxEnd) || r.Late) {
				vs = append(vs, Violation{Kind: KindLateWrite, Task: id, Time: w.Time, Msg: fmt.Sprintf(
					"task %s: %s was written by %s at %s, after attempt %d's handler context ended (%s) at %s",
					id, key, w.Proc, x.at(w.Time), n, r.Cause, x.at(r.CtxEnd))})
			}
		}
	}
	for s := range x.steps() {
		id, prev, next, w := s.id, s.prev, s.next, s.w
		if prev.Status != s3task.StatusRunning || w.Proc != prev.WorkerID || next.Attempt != prev.Attempt {
			continue
		}
		ours := (next.Status == s3task.StatusRunning && next.WorkerID == prev.WorkerID) ||
			next.Status == s3task.StatusCompleted ||
			(next.Status == s3task.StatusFailed && next.ErrorCategory != "lease_expired") ||
			(next.Status == s3task.StatusQueued && next.ErrorCategory == "shutdown")
		r := x.run[runKey{id, prev.Attempt}]
		if !ours || w.Zombie || r == nil || !r.Cause.Ends() || w.Seq < r.CtxEndSeq || !w.Time.After(r.CtxEnd) {
			continue
		}
		vs = append(vs, Violation{Kind: KindLateWrite, Task: id, Time: w.Time, Msg: fmt.Sprintf(
			"task %s: %s wrote %s -> %s at %s, after attempt %d's handler context ended (%s) at %s",
			id, w.Proc, describe(prev), describe(next), x.at(w.Time), prev.Attempt, r.Cause, x.at(r.CtxEnd))})
	}
	return vs
}

// settles reports whether calls of kind k settle a doubt themselves: they
// return ErrOutcomeUnknown only when S3 does not answer, or the task is
// purged (see Store.Cancel and the others).
func settles(k CallKind) bool {
	switch k {
	case CallSubmit, CallRetry, CallCancel, CallSchedule, CallPause, CallResume:
		return true
	}
	return false
}

// purgedDuring reports whether the record of c's task was deleted during c.
func (x *index) purgedDuring(c *Call) bool {
	for _, w := range x.records[c.TaskID] {
		if w.Method == "DELETE" && w.Seq >= c.StartSeq && w.Seq <= c.EndSeq {
			return true
		}
	}
	return false
}

// retries counts the failed -> queued changes among writes.
func retries(x *index, writes []*Write) int {
	n := 0
	for _, w := range writes {
		if p := x.prevRecord(w); p != nil && w.Record != nil && p.Status == s3task.StatusFailed && w.Record.Status == s3task.StatusQueued {
			n++
		}
	}
	return n
}
