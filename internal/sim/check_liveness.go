package sim

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/s3task/s3task"
)

// checkMarkers: no pending task lacks its marker for longer than the
// documented bound of the fleet's reconciler, two intervals and a quarter
// (its holder may die just after its turn) and an interval and a quarter
// more for each further worker that dies meanwhile (the next holder may
// die before its turn ends), plus ten minutes for the reconcile run
// itself; and at the end no finished, notified task, and no task without a
// record, has one.
func checkMarkers(x *index) []Violation {
	var vs []Violation
	base, lease := x.p.ReconcileInterval*9/4+10*time.Minute, x.p.ReconcileInterval*5/4
	// limitFrom is the bound for a marker lost at from: each crash of a
	// worker from a lease before the loss to the end of the bound, past
	// the first, moves the end on by a lease.
	limitFrom := func(from time.Time) time.Duration {
		limit := base
		for {
			deaths := 0
			for _, e := range x.h.Events {
				if e.Kind == EventCrash && strings.HasPrefix(e.Proc, "w") && !e.Start.Before(from.Add(-lease)) && !e.Start.After(from.Add(limit)) {
					deaths++
				}
			}
			next := base + time.Duration(max(deaths-1, 0))*lease
			if next == limit {
				return limit
			}
			limit = next
		}
	}
	since := map[string]time.Time{}
	reported := map[string]bool{}
	for _, s := range x.h.Snapshots {
		for _, id := range sortedKeys(s.Tasks) {
			st := s.Tasks[id]
			if !st.Pending || s.Markers[id] {
				delete(since, id)
				continue
			}
			from, ok := since[id]
			if !ok {
				since[id] = s.Time
				continue
			}
			if limit := limitFrom(from); s.Time.Sub(from) > limit && !reported[id] {
				reported[id] = true
				vs = append(vs, Violation{Kind: KindMarker, Task: id, Time: s.Time, Msg: fmt.Sprintf(
					"task %s has been %s without a marker since %s (over %s)", id, st.Status, x.at(from), limit)})
			}
		}
		for id := range since {
			if _, ok := s.Tasks[id]; !ok {
				delete(since, id)
			}
		}
	}
	if len(x.h.Snapshots) == 0 {
		return vs
	}
	final := x.h.Snapshots[len(x.h.Snapshots)-1]
	for _, id := range sortedKeys(final.Markers) {
		st, ok := final.Tasks[id]
		switch {
		case !ok:
			vs = append(vs, Violation{Kind: KindMarker, Task: id, Time: final.Time, Msg: fmt.Sprintf(
				"at the end, task %s has a marker but no record", id)})
		case st.Terminal && !st.NotifyPending:
			vs = append(vs, Violation{Kind: KindMarker, Task: id, Time: final.Time, Msg: fmt.Sprintf(
				"at the end, task %s is %s and notified but still has its marker", id, st.Status)})
		}
	}
	return vs
}

// checkNotices: when every store has the hook, every result of a task
// (each write that finished it, or changed how it finished: a final
// failure cancelled) is delivered to OnTerminal, as the record of that
// result (its status and attempt), unless the task was retried or
// finished otherwise first (then the next result has a notice of its own)
// or a Purge dropped the notice on purpose; and no hook call that
// succeeded was given a result the task never had. The hook may fail any
// number of times in a row (a flaky receiver), and the library promises
// no time for the delivery, only that a failed call is made again, 5 s
// doubling up to 10 minutes later (StoreOptions.OnTerminal): so the first
// call must follow the result, and each call the end of the failed calls
// before it, within Params.NoticeBound, until one succeeds. A notice left
// to the fleet waits its turn in the queue: the bound counts only the time
// in which some worker was available (up, with a free slot, its network
// fine), and so polling.
func checkNotices(x *index) []Violation {
	if !x.h.Hooked {
		return nil
	}
	var spans []span
	for _, wi := range x.h.Workers {
		spans = append(spans, x.available(wi.Name)...)
	}
	avail := merge(spans)
	delivered := map[string][]Notice{}
	for _, n := range x.h.Notices {
		delivered[n.TaskID] = append(delivered[n.TaskID], n)
	}
	var vs []Violation
	for _, id := range x.tasks {
		type result struct {
			w       *Write
			dropped bool // retried, or purged, before its notice went out
		}
		var results []*result
		var prev *Record
		for _, w := range x.records[id] {
			t := w.Record
			if t == nil {
				continue
			}
			next := t.Terminal() && (prev == nil || !prev.Terminal() || prev.Status != t.Status)
			if len(results) > 0 && prev.NotifyPending && (!t.Terminal() || next || t.Purging && !t.NotifyPending) {
				results[len(results)-1].dropped = true
			}
			if next {
				results = append(results, &result{w: w})
			}
			prev = t
		}
		for _, n := range delivered[id] {
			if !n.OK || slices.ContainsFunc(results, func(r *result) bool {
				return r.w.Seq < n.StartSeq && r.w.Record.Status == n.Status && r.w.Record.Attempt == n.Attempt
			}) {
				continue
			}
			vs = append(vs, Violation{Kind: KindNotice, Task: id, Time: n.Start, Msg: fmt.Sprintf(
				"task %s: %s's OnTerminal call at %s was given %s at attempt %d, a result the task did not have",
				id, n.Proc, x.at(n.Start), n.Status, n.Attempt)})
		}
		for _, r := range results {
			if r.dropped {
				continue
			}
			f := r.w
			var calls []Notice
			for _, n := range delivered[id] {
				if n.StartSeq >= f.Seq && n.Status == f.Record.Status && n.Attempt == f.Record.Attempt {
					calls = append(calls, n)
				}
			}
			slices.SortStableFunc(calls, func(a, b Notice) int { return a.Start.Compare(b.Start) })
			// from: the result, then the end of the failed calls so far.
			from, failed, ok := f.Time, 0, false
			var late *Notice
			for i := range calls {
				n := &calls[i]
				if n.Start.After(after(avail, from, x.p.NoticeBound)) {
					late = n
					break
				}
				if n.OK {
					ok = true
					break
				}
				failed++
				from = later(from, n.End)
			}
			due := after(avail, from, x.p.NoticeBound)
			switch {
			case ok:
			case late != nil && failed == 0:
				vs = append(vs, Violation{Kind: KindNotice, Task: id, Time: due, Msg: fmt.Sprintf(
					"task %s finished (%s) at %s and its OnTerminal notice was first tried only at %s (ok=%v), over %s of available workers later",
					id, describe(f.Record), x.at(f.Time), x.at(late.Start), late.OK, x.p.NoticeBound)})
			case late != nil:
				vs = append(vs, Violation{Kind: KindNotice, Task: id, Time: due, Msg: fmt.Sprintf(
					"task %s finished (%s) at %s; its OnTerminal call that ended at %s failed and the next came only at %s (ok=%v), over %s of available workers later (%d failed calls before)",
					id, describe(f.Record), x.at(f.Time), x.at(from), x.at(late.Start), late.OK, x.p.NoticeBound, failed)})
			case x.h.Capped && due.After(x.h.End):
				// the run ended before the bound: nothing to say
			default:
				vs = append(vs, Violation{Kind: KindNotice, Task: id, Time: due, Msg: fmt.Sprintf(
					"task %s finished (%s) at %s but its OnTerminal notice was never delivered (%d failed calls since, none within %s of available workers after the last)",
					id, describe(f.Record), x.at(f.Time), failed, x.p.NoticeBound)})
			}
		}
	}
	return vs
}

// checkStuck: at the end, every task a service knows of is finished.
func checkStuck(x *index) []Violation {
	if len(x.h.Snapshots) == 0 {
		return nil
	}
	known := map[string]bool{}
	for _, c := range x.h.Calls {
		if isCreateCall(c.Kind) && c.Err == "" {
			known[c.TaskID] = true
		}
	}
	final := x.h.Snapshots[len(x.h.Snapshots)-1]
	var vs []Violation
	for _, id := range sortedKeys(final.Tasks) {
		st := final.Tasks[id]
		if st.Terminal || (st.Status == s3task.StatusCreated && !known[id]) {
			continue
		}
		vs = append(vs, Violation{Kind: KindStuck, Task: id, Time: final.Time, Msg: fmt.Sprintf(
			"task %s is still %s at the end of the run, %s after it began", id, describe(x.last(id)), final.Time.Sub(x.h.Start))})
	}
	return vs
}

// checkExpiry: a worker that is neither crashed, paused nor cut off keeps its lease
// while it holds the task: no takeover of a lease that ran out while its
// holder's handler still ran with its context alive.
func checkExpiry(x *index) []Violation {
	var vs []Violation
	for s := range x.steps() {
		id, p, n, w := s.id, s.prev, s.next, s.w
		if p.Status != s3task.StatusRunning || w.Proc == p.WorkerID {
			continue
		}
		takeover := (n.ErrorCategory == "lease_expired" && n.Attempt == p.Attempt &&
			(n.Status == s3task.StatusQueued || n.Status == s3task.StatusFailed)) ||
			(n.Status == s3task.StatusRunning && n.Attempt == p.Attempt+1)
		r := x.run[runKey{id, p.Attempt}]
		if !takeover || r == nil || !r.End(x.h.End).After(p.LeaseExpiresAt) {
			continue
		}
		holder, lease := p.WorkerID, p.LeaseExpiresAt
		if _, ok := x.during(holder, lease.Add(-x.p.LeaseDuration), w.Time, EventPause, EventCrash, EventOutage, EventFreeze); ok {
			continue
		}
		stopping := ""
		if e, ok := x.during(holder, x.h.Start, lease, EventStop); ok {
			stopping = fmt.Sprintf(" (stopping gracefully since %s)", x.at(e.Start))
		}
		vs = append(vs, Violation{Kind: KindExpiry, Task: id, Time: lease, Msg: fmt.Sprintf(
			"task %s: the lease of %s on attempt %d ran out at %s while its handler still held the task (%s, until %s)%s, and was neither crashed, paused nor cut off; %s took it over at %s -> %s",
			id, holder, p.Attempt, x.at(lease), r.Plan, x.at(r.End(x.h.End)), stopping, w.Proc, x.at(w.Time), describe(n))})
	}
	return vs
}
