package sim

import (
	"fmt"
	"sort"
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
// until the bound. The wake object is a hint: if the writer that made the
// task due could not get its announcement written (a request for the wake
// object failed within seconds), workers learn of the task at their next
// listing (MaxPollInterval, the safety net), which checkClaimDelay covers;
// unless the start was so far ahead that they have listed since.
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
			told := x.announced(d.by)
			if _, trouble := x.during(d.by.Proc, d.by.Time, d.by.Time.Add(30*time.Second), EventWakeFailed); told.IsZero() && trouble &&
				d.From.Before(d.by.Time.Add(x.p.MaxPollInterval+x.p.PollInterval)) {
				continue
			}
			// Workers learn of it when it is announced, or listed.
			d.From = later(d.From, told)
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

// due is a stretch in which a task was queued and due, and the write that
// made it so.
type due struct {
	span
	by *Write
}

// announced returns when the process that wrote w got a wake
// announcement written after it, if it did within half a minute (its
// requests may be slow); zero if not.
func (x *index) announced(w *Write) time.Time {
	key := x.h.Prefix + "_wake"
	for i := sort.Search(len(x.h.Writes), func(i int) bool { return x.h.Writes[i].Seq > w.Seq }); i < len(x.h.Writes); i++ {
		o := &x.h.Writes[i]
		if o.Time.After(w.Time.Add(30 * time.Second)) {
			break
		}
		if o.Key == key && o.Proc == w.Proc {
			return o.Time
		}
	}
	return time.Time{}
}

// dues returns the stretches in which task id was queued and due: from
// the later of the write that queued it (or changed its start) and its
// start, to its next write.
func (x *index) dues(id string) []due {
	ws := x.records[id]
	var out []due
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
			out = append(out, due{span{from, to}, w})
		}
	}
	return out
}

// marked reports whether task id had a marker all through [from, to].
func (x *index) marked(id string, from, to time.Time) bool {
	return len(subtract([]span{{from, to}}, x.markedSpans(id))) == 0
}
