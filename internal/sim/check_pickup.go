package sim

import (
	"fmt"
	"time"

	"github.com/s3task/s3task"
)

// checkPickup: a task that becomes due while a worker serving its type is
// idle (up, with a free slot, its network fine) is claimed within
// Params.PickupBound: PollInterval, and a few round trips. It becomes due
// when it is queued (Submit, Retry, a release on shutdown), or when its
// scheduled start comes, however it was scheduled or moved; idle workers
// learn of it from the wake object, and of a later start from the time its
// marker is named after. The worker must have been idle for a PollInterval
// before (so that it has looked at the wake object since) and stay idle
// until the bound.
func checkPickup(x *index) []Violation {
	avail := map[string][]span{}
	for _, wi := range x.h.Workers {
		avail[wi.Name] = x.available(wi.Name)
	}
	var vs []Violation
	for _, id := range x.tasks {
		t := x.last(id)
		if t == nil {
			continue
		}
		for _, d := range x.dues(id) {
			deadline := d.From.Add(x.p.PickupBound)
			if d.To.Before(deadline) || !x.marked(id, d.From, deadline) {
				continue // claimed (or changed) in time, or without a marker
			}
			need := []span{{d.From.Add(-x.p.PollInterval), deadline}}
			for _, wi := range x.h.Workers {
				if !wi.Serves(t.Type) || len(subtract(need, avail[wi.Name])) > 0 {
					continue
				}
				vs = append(vs, Violation{Kind: KindPickup, Task: id, Time: deadline, Msg: fmt.Sprintf(
					"task %s (type %q) was due from %s and still %s at %s, over %s later, while %s was idle from %s",
					id, t.Type, x.at(d.From), describe(x.stateBefore(id, deadline)), x.at(deadline), x.p.PickupBound, wi.Name, x.at(need[0].From))})
				break
			}
		}
	}
	return vs
}

// dues returns the stretches in which task id was queued and due: from
// the later of the write that queued it (or changed its start) and its
// start, to its next write.
func (x *index) dues(id string) []span {
	ws := x.records[id]
	var out []span
	for i, w := range ws {
		t := w.Record
		if t == nil || t.Purging || t.Status != s3task.StatusQueued || used(w) >= t.MaxAttempts {
			continue
		}
		if i > 0 && ws[i-1].Record != nil && ws[i-1].Record.Status == s3task.StatusQueued && ws[i-1].Record.RunAt.Equal(t.RunAt) {
			continue // the same stretch, written again (a notice, a no-op)
		}
		to := x.h.End
		for _, n := range ws[i+1:] {
			if n.Record == nil || n.Record.Status != s3task.StatusQueued || !n.Record.RunAt.Equal(t.RunAt) {
				to = n.Time
				break
			}
		}
		if from := later(w.Time, t.RunAt); from.Before(to) {
			out = append(out, span{from, to})
		}
	}
	return out
}

// marked reports whether task id had a marker all through [from, to].
func (x *index) marked(id string, from, to time.Time) bool {
	since := map[string]time.Time{}
	var spans []span
	for _, w := range x.markers[id] {
		start, on := since[w.Key]
		switch {
		case w.Method == "PUT" && !on:
			since[w.Key] = w.Time
		case w.Method == "DELETE" && on:
			delete(since, w.Key)
			spans = append(spans, span{start, w.Time})
		}
	}
	for _, start := range since {
		spans = append(spans, span{start, x.h.End})
	}
	return len(subtract([]span{{from, to}}, merge(spans))) == 0
}
