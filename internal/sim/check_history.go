package sim

import (
	"fmt"
	"strings"
	"time"

	"github.com/s3task/s3task"
)

// seenAttempt is an attempt as the run's writes show it, what a record's
// attempt_history entry for it must say.
type seenAttempt struct {
	// Number, WorkerID (the process that wrote the claim), StartedAt (the
	// claim's started_at), HeartbeatInterval (the workers' option),
	// Outcome and ErrorCategory are what the entry must hold exactly;
	// EndedAt too when exactEnd is set (the lease's end, for an expiry).
	s3task.Attempt
	exactEnd bool
	// endWrite is when S3 applied the write that ended the attempt: an
	// ending stamped by its writer cannot be later than that, nor before
	// the attempt began, by more than the writers' clocks may err.
	endWrite time.Time
	// lastError is the record's last_error after the ending, of which the
	// entry's error must be the whole or a cut, "" when it must be empty.
	lastError string
}

// checkHistories: every record's attempt_history is what the run's writes
// show of the task's attempts, the latest s3task.HistoryLimit of them, in
// order: each attempt claimed, by the worker whose claim it was, from the
// claim's time, with the claiming worker's heartbeat interval; and each
// attempt that ended, how it ended, as the write that ended it says
// (completed; failed, with its category and error; its lease expired,
// at the lease's end, whether it was found out by a takeover or by a
// final failure; released on shutdown; cancelled). The first write that
// breaks it is reported, once per task.
func checkHistories(x *index) []Violation {
	var vs []Violation
	for _, id := range x.tasks {
		var seen []seenAttempt
		var prev *Record
		for _, w := range x.records[id] {
			n := w.Record
			if n == nil {
				break // purged: nothing is written after
			}
			if prev != nil {
				seen = x.attemptsAfter(seen, prev, n, w)
			}
			prev = n
			if why := x.historyDiffers(seen, n); why != "" {
				vs = append(vs, Violation{Kind: KindHistory, Task: id, Time: w.Time, Msg: fmt.Sprintf(
					"task %s: %s wrote %s at %s with an attempt history that %s", id, w.Proc, describe(n), x.at(w.Time), why)})
				break
			}
		}
	}
	return vs
}

// attemptsAfter returns seen updated with the step of the record from p
// to n, written by w: the running attempt of p ended, and a new attempt
// was claimed, or neither.
func (x *index) attemptsAfter(seen []seenAttempt, p, n *Record, w *Write) []seenAttempt {
	claim := n.Status == s3task.StatusRunning && n.Attempt == p.Attempt+1
	if p.Status == s3task.StatusRunning && (n.Status != s3task.StatusRunning || claim) && len(seen) > 0 && seen[len(seen)-1].Number == p.Attempt {
		a := &seen[len(seen)-1]
		a.endWrite = w.Time
		expired := n.ErrorCategory == s3task.CategoryLeaseExpired
		switch {
		case claim || (expired && (n.Status == s3task.StatusQueued || n.Status == s3task.StatusFailed)):
			a.Outcome, a.ErrorCategory, a.lastError = s3task.OutcomeLeaseExpired, n.ErrorCategory, n.LastError
			a.EndedAt, a.exactEnd = p.LeaseExpiresAt, true
		case n.Status == s3task.StatusCompleted:
			a.Outcome = s3task.OutcomeCompleted
		case n.Status == s3task.StatusFailed:
			a.Outcome, a.ErrorCategory, a.lastError = s3task.OutcomeFailed, n.ErrorCategory, n.LastError
		case n.Status == s3task.StatusQueued && n.ErrorCategory == s3task.CategoryShutdown:
			a.Outcome, a.ErrorCategory, a.lastError = s3task.OutcomeReleased, n.ErrorCategory, n.LastError
		case n.Status == s3task.StatusAbandoned:
			a.Outcome = s3task.OutcomeCanceled
		default:
			a.Outcome = "(not a step of the lifecycle)" // checkTransitions says what
		}
	}
	if claim {
		seen = append(seen, seenAttempt{Attempt: s3task.Attempt{
			Number: n.Attempt, WorkerID: w.Proc, StartedAt: n.StartedAt,
			Outcome: s3task.OutcomeRunning, HeartbeatInterval: x.p.HeartbeatInterval,
		}})
	}
	return seen
}

// historyDiffers says how n's attempt_history differs from what seen
// shows, or "" if it does not.
func (x *index) historyDiffers(seen []seenAttempt, n *Record) string {
	h := n.History
	if len(h) > s3task.HistoryLimit {
		return fmt.Sprintf("has %d entries, more than the %d promised", len(h), s3task.HistoryLimit)
	}
	want := seen[max(len(seen)-s3task.HistoryLimit, 0):]
	if len(h) != len(want) {
		return fmt.Sprintf("names attempts %v; the run's writes show attempts %v", entryNumbers(h), seenNumbers(want))
	}
	// The writers' sense of the server's clock may lag it or lead it.
	tolerance := x.p.Lag() + x.p.ClockSlack
	for i, a := range h {
		s := want[i]
		bad := func(format string, args ...any) string {
			return fmt.Sprintf("says of attempt %d (claimed by %s at %s) ", s.Number, s.WorkerID, x.at(s.StartedAt)) + fmt.Sprintf(format, args...)
		}
		switch {
		case a.Number != s.Number:
			return fmt.Sprintf("names attempts %v; the run's writes show attempts %v", entryNumbers(h), seenNumbers(want))
		case a.WorkerID != s.WorkerID:
			return bad("that worker %q claimed it", a.WorkerID)
		case !a.StartedAt.Equal(s.StartedAt):
			return bad("that it started at %s", x.at(a.StartedAt))
		case x.p.HeartbeatInterval > 0 && a.HeartbeatInterval != s.HeartbeatInterval:
			return bad("that its worker heartbeats every %s, not %s", a.HeartbeatInterval, s.HeartbeatInterval)
		case a.Outcome != s.Outcome:
			return bad("that its outcome is %q, not %q", a.Outcome, s.Outcome)
		case a.ErrorCategory != s.ErrorCategory:
			return bad("that its error category is %q, not %q", a.ErrorCategory, s.ErrorCategory)
		case !cutFrom(a.Error, s.lastError):
			return bad("that its error is %q (%d bytes), which is not last_error %q cut to %d bytes", a.Error, len(a.Error), s.lastError, s3task.HistoryErrorLimit)
		case s.Outcome == s3task.OutcomeRunning && !a.EndedAt.IsZero():
			return bad("that it ended at %s, though it runs", x.at(a.EndedAt))
		case s.exactEnd && !a.EndedAt.Equal(s.EndedAt):
			return bad("that it ended at %s, not at the end of its lease, %s", x.at(a.EndedAt), x.at(s.EndedAt))
		case s.Outcome != s3task.OutcomeRunning && !s.exactEnd && (a.EndedAt.Before(s.StartedAt.Add(-tolerance)) || a.EndedAt.After(s.endWrite.Add(tolerance))):
			return bad("that it ended at %s, not between its start and the write that ended it at %s", x.at(a.EndedAt), x.at(s.endWrite))
		}
	}
	return ""
}

// cutFrom reports whether an entry's error e is what the history keeps of
// last error full: all of it, or, for a longer one, a start of it cut to
// HistoryErrorLimit bytes and ended with "…".
func cutFrom(e, full string) bool {
	if len(e) > s3task.HistoryErrorLimit {
		return false
	}
	if e == full {
		return true
	}
	cut, ok := strings.CutSuffix(e, "…")
	return ok && len(full) > s3task.HistoryErrorLimit && strings.HasPrefix(full, cut)
}

func entryNumbers(h []s3task.Attempt) []int {
	out := []int{}
	for _, a := range h {
		out = append(out, a.Number)
	}
	return out
}

func seenNumbers(h []seenAttempt) []int {
	out := []int{}
	for _, a := range h {
		out = append(out, a.Number)
	}
	return out
}
