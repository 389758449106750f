package sim

import (
	"fmt"

	"github.com/s3task/s3task"
)

// checkTransitions: every record write is a legal step of the lifecycle
// from the record it replaced.
func checkTransitions(x *index) []Violation {
	var vs []Violation
	for _, id := range x.tasks {
		var prev *Write
		for _, w := range x.records[id] {
			if why := x.illegal(prev, w); why != "" {
				var from *Record
				if prev != nil {
					from = prev.Record
				}
				vs = append(vs, Violation{Kind: KindTransition, Task: id, Time: w.Time, Msg: fmt.Sprintf(
					"task %s: %s %s -> %s at %s: %s", id, w.Proc, describe(from), describeWrite(w), x.at(w.Time), why)})
			}
			prev = w
		}
	}
	return vs
}

// describeWrite summarizes a record write, a deletion included.
func describeWrite(w *Write) string {
	if w.Record == nil {
		return "deleted"
	}
	return describe(w.Record)
}

// illegal returns why write w cannot follow prev (nil: nothing before),
// or "" if it can.
func (x *index) illegal(prev, w *Write) string {
	if w.Record == nil { // a DELETE
		if prev != nil && prev.Record != nil && !prev.Record.Purging {
			return "the record was deleted without being marked for purging"
		}
		return ""
	}
	n := w.Record
	if prev == nil || prev.Record == nil {
		switch {
		case prev != nil:
			return "a deleted record was written again"
		case n.Status != s3task.StatusCreated || n.Attempt != 0:
			return "a record must be created as created with no attempt"
		}
		return ""
	}
	p := prev.Record
	switch {
	case p.Purging:
		return "the record was changed after it was marked for purging"
	case n.Revision == p.Revision:
		return "the revision did not change"
	case n.NotifyPending && !n.Terminal():
		return "notify_pending is set on a task that is not finished"
	case n.NotifyPending && !p.NotifyPending && p.Terminal() && p.Status == n.Status:
		return "notify_pending was set again on a task already finished"
	case n.Purging && (!n.Terminal() || n.NotifyPending):
		return "purging is set on a task that is not finished or not notified"
	}
	if p.Status == n.Status && p.Status != s3task.StatusRunning {
		// Only the notice and purge flags may change.
		if same := p.Attempt == n.Attempt && p.MaxAttempts == n.MaxAttempts && w.Released == prev.Released &&
			p.WorkerID == n.WorkerID && p.RetryAt.Equal(n.RetryAt) && p.OutputPath == n.OutputPath &&
			p.ErrorCategory == n.ErrorCategory && p.LastError == n.LastError; !same {
			return fmt.Sprintf("%s -> %s may change only the notice and purge flags", p.Status, n.Status)
		}
		schedule := (p.Status == s3task.StatusCreated || p.Status == s3task.StatusQueued) && !p.RunAt.Equal(n.RunAt)
		if p.NotifyPending == n.NotifyPending && p.Purging == n.Purging && !schedule {
			return fmt.Sprintf("%s -> %s changes nothing", p.Status, n.Status)
		}
		return ""
	}

	// A change of status, or of a running attempt.
	retry := p.Status == s3task.StatusFailed && n.Status == s3task.StatusQueued
	release := p.Status == s3task.StatusRunning && n.Status == s3task.StatusQueued && n.ErrorCategory == "shutdown"
	claim := n.Status == s3task.StatusRunning && n.Attempt == p.Attempt+1
	switch {
	case retry:
		if want := max(p.MaxAttempts, used(prev)+1); n.MaxAttempts != want {
			return fmt.Sprintf("a retry must set max_attempts to %d, not %d", want, n.MaxAttempts)
		}
	case n.MaxAttempts != p.MaxAttempts:
		return fmt.Sprintf("max_attempts changed from %d to %d on %s -> %s", p.MaxAttempts, n.MaxAttempts, p.Status, n.Status)
	}
	if release && w.Released != prev.Released+1 {
		return fmt.Sprintf("a release must raise released_attempts by one, not from %d to %d", prev.Released, w.Released)
	}
	if !release && w.Released != prev.Released {
		return fmt.Sprintf("released_attempts changed from %d to %d on %s -> %s", prev.Released, w.Released, p.Status, n.Status)
	}
	if !claim && n.Attempt != p.Attempt {
		return fmt.Sprintf("attempt_id changed from %d to %d on %s -> %s", p.Attempt, n.Attempt, p.Status, n.Status)
	}

	expired := func() string {
		if d := w.Time.Sub(p.LeaseExpiresAt); d < x.p.ClockMargin-x.p.ClockSlack {
			return fmt.Sprintf("the lease of %s ran until %s, only %s before (less than the clock margin)", p.WorkerID, x.at(p.LeaseExpiresAt), d)
		}
		return ""
	}
	switch from, to := p.Status, n.Status; {
	case claim:
		switch {
		case from == s3task.StatusQueued && w.Time.Add(x.p.DateSpread).Before(p.RunAt):
			return fmt.Sprintf("claimed %s before its scheduled start at %s (the spread of S3's clocks allows %s)", p.RunAt.Sub(w.Time), x.at(p.RunAt), x.p.DateSpread)
		case from == s3task.StatusQueued:
		case from == s3task.StatusFailed && p.RetryAt.IsZero():
			return "a final failure was claimed"
		case from == s3task.StatusFailed && w.Time.Add(x.p.DateSpread).Before(p.RetryAt):
			return fmt.Sprintf("claimed %s before its retry was due at %s (the spread of S3's clocks allows %s)", p.RetryAt.Sub(w.Time), x.at(p.RetryAt), x.p.DateSpread)
		case from == s3task.StatusFailed:
		case from == s3task.StatusRunning:
			if why := expired(); why != "" {
				return "taken over while its lease was live: " + why
			}
		default:
			return fmt.Sprintf("%s -> running is not a claim", from)
		}
		switch {
		case n.WorkerID == "" || n.WorkerID != w.Proc:
			return fmt.Sprintf("the claim names worker %q but was written by %s", n.WorkerID, w.Proc)
		case !x.workers[w.Proc].Serves(n.Type):
			return fmt.Sprintf("claimed by %s, which does not serve type %q (it serves %v)", w.Proc, n.Type, x.workers[w.Proc].Types)
		case used(w) > n.MaxAttempts:
			return fmt.Sprintf("attempt %d uses %d of %d attempts", n.Attempt, used(w), n.MaxAttempts)
		case !n.LeaseExpiresAt.After(w.Time.Add(-x.p.ClockSlack)):
			return "the claim's lease is already over"
		}
	case from == s3task.StatusRunning && to == s3task.StatusRunning:
		if n.WorkerID != p.WorkerID || w.Proc != p.WorkerID {
			return fmt.Sprintf("attempt %d of %s renewed by %s as %s", p.Attempt, p.WorkerID, w.Proc, n.WorkerID)
		}
	case from == s3task.StatusRunning && to == s3task.StatusCompleted:
		if w.Proc != p.WorkerID || n.WorkerID != p.WorkerID {
			return fmt.Sprintf("attempt %d of %s completed by %s", p.Attempt, p.WorkerID, w.Proc)
		}
	case from == s3task.StatusRunning && to == s3task.StatusFailed:
		if n.ErrorCategory == "lease_expired" {
			if why := expired(); why != "" {
				return why
			}
			if used(w) < n.MaxAttempts {
				return "a lease expiry failed a task with attempts left"
			}
			break
		}
		if w.Proc != p.WorkerID {
			return fmt.Sprintf("attempt %d of %s failed by %s", p.Attempt, p.WorkerID, w.Proc)
		}
		if !n.RetryAt.IsZero() && used(w) >= n.MaxAttempts {
			return "a retry was scheduled with no attempt left"
		}
	case from == s3task.StatusRunning && to == s3task.StatusQueued:
		switch n.ErrorCategory {
		case "shutdown":
			if w.Proc != p.WorkerID {
				return fmt.Sprintf("attempt %d of %s released by %s", p.Attempt, p.WorkerID, w.Proc)
			}
		case "lease_expired":
			if why := expired(); why != "" {
				return why
			}
			if used(w) >= n.MaxAttempts {
				return "a lease expiry queued a task with no attempt left"
			}
		default:
			return fmt.Sprintf("running -> queued with error_category %q is neither a release nor a lease expiry", n.ErrorCategory)
		}
	case to == s3task.StatusAbandoned && from != s3task.StatusCompleted:
	case from == s3task.StatusCreated && to == s3task.StatusQueued:
	case retry:
	default:
		return fmt.Sprintf("%s -> %s is not a step of the lifecycle", from, to)
	}
	return ""
}
