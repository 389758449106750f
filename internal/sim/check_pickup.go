package sim

import (
	"bytes"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/s3task/s3task"
)

// checkPickup: a task that becomes due while a worker serving its type is
// idle (up, with a free slot, its network fine) is claimed within
// Params.PickupBound: PollInterval, and a few round trips, not counting the
// time the adversary held the worker's requests (see pickupBy). It becomes due
// when it is queued (Submit, Retry, a release on shutdown), or when its
// scheduled start comes, however it was scheduled or moved; idle workers
// learn of it from the wake object, and of a later start from the time its
// marker is named after. The worker must have been idle for a PollInterval
// before (so that it has looked at the wake object since) and stay idle
// until the bound. The wake object is a hint: if the writer that made the
// task due did not get an announcement of it written within half a minute,
// and had a reason (a request for the wake object failed, its requests hung,
// or the call that wrote did not know its write landed, or failed, and so
// announced nothing), workers learn of the task at their next listing
// (MaxPollInterval, the safety net), which checkClaimDelay covers; unless
// the start was so far ahead that they have listed since.
//
// A task whose type is paused (Store.Pause) is not due: one that fell
// due while its type may have been paused (see pausedSpans) is due from
// the end of the Resume, which tells idle workers to list; none is held
// to the bound if its type may be paused again before it.
func checkPickup(x *index) []Violation {
	avail := map[string][]span{}
	for _, wi := range x.h.Workers {
		avail[wi.Name] = x.available(wi.Name)
	}
	paused := x.pausedSpans()
	var vs []Violation
	for _, id := range x.tasks {
		t := x.last(id)
		if t == nil {
			continue
		}
		for _, d := range x.dues(id) {
			told := x.announced(d.by, id)
			if told.IsZero() && x.unannounced(d.by, id) &&
				d.From.Before(d.by.Time.Add(x.p.MaxPollInterval+x.p.PollInterval)) {
				continue
			}
			// Workers learn of it when it is announced, or listed.
			d.From = later(d.From, told)
			if s, ok := pausedAt(paused[t.Type], d.From); ok {
				d.From = s.To // the Resume's end: it tells idle workers to list
			}
			for _, wi := range x.h.Workers {
				if wi.Events || !wi.Serves(t.Type) {
					continue
				}
				deadline := x.pickupBy(wi.Name, d.From)
				if pausedWithin(paused[t.Type], d.From, deadline) {
					continue // paused (again) before the bound, or never resumed
				}
				if d.To.Before(deadline) || !x.marked(id, d.From, deadline) {
					continue // claimed (or changed) in time, or without a marker
				}
				need := []span{{d.From.Add(-x.p.PollInterval), deadline}}
				if len(subtract(need, avail[wi.Name])) > 0 {
					continue
				}
				vs = append(vs, Violation{Kind: KindPickup, Task: id, Time: deadline, Msg: fmt.Sprintf(
					"task %s (type %q) was due from %s and still %s at %s, over %s later%s, while %s was idle from %s",
					id, t.Type, x.at(d.From), describe(x.stateBefore(id, deadline)), x.at(deadline), x.p.PickupBound, x.heldFor(wi.Name, d.From, deadline), wi.Name, x.at(need[0].From))})
				break
			}
		}
	}
	return vs
}

// checkEventPickup: a worker that relies on events (WorkerInfo.Events),
// told while it is idle that a marker of a task of a type it serves was
// written, the marker due and the task queued and due, claims the task
// within Params.PickupBound, unless another worker does or the task
// changes first, or the worker is told before then that the marker was
// deleted (a late notification of an earlier delete of the same key).
// The polling rule of checkPickup does not hold for such a worker: it
// lists only every MaxPollInterval, which checkClaimDelay covers. Nor is
// it held to the bound while the task's type may be paused, or within its
// PollInterval (MaxPollInterval) after the Resume, which it learns of at
// its next look at the wake object.
func checkEventPickup(x *index) []Violation {
	active := x.h.Prefix + "active/"
	avail := map[string][]span{}
	paused := x.pausedSpans()
	var vs []Violation
	for i, d := range x.h.Deliveries {
		wi, ok := x.workers[d.Worker]
		name, isMarker := strings.CutPrefix(d.Key, active)
		if !ok || !wi.Events || d.Removed || !isMarker {
			continue
		}
		at, id, ok := strings.Cut(name, "_")
		markerDue, err := time.Parse(markerTimeLayout, at)
		if !ok || err != nil || markerDue.After(d.Time) {
			continue
		}
		t := x.last(id)
		if t == nil || !wi.Serves(t.Type) {
			continue
		}
		deadline := x.pickupBy(wi.Name, d.Time)
		if pausedWithin(paused[t.Type], d.Time.Add(-x.pollInterval(wi.Name)), deadline) {
			continue // its type may be paused, or the worker not know yet of its Resume
		}
		var stretch *due
		for _, du := range x.dues(id) {
			if !du.From.After(d.Time) && d.Time.Before(du.To) {
				stretch = &du
				break
			}
		}
		if stretch == nil || stretch.To.Before(deadline) {
			continue // not due when told, or claimed (or changed) in time
		}
		if _, ok := avail[wi.Name]; !ok {
			avail[wi.Name] = x.available(wi.Name)
		}
		if len(subtract([]span{{d.Time, deadline}}, avail[wi.Name])) > 0 {
			continue // not idle all along
		}
		undone := false
		for _, e := range x.h.Deliveries[i+1:] {
			if e.Time.After(deadline) {
				break
			}
			undone = undone || e.Worker == d.Worker && e.Key == d.Key && e.Removed
		}
		if undone {
			continue
		}
		vs = append(vs, Violation{Kind: KindPickup, Task: id, Time: deadline, Msg: fmt.Sprintf(
			"%s was told at %s that task %s's marker %s was written, the task due (type %q) and %s idle, yet it was still %s at %s, over %s later%s",
			wi.Name, x.at(d.Time), id, name, t.Type, wi.Name, describe(x.stateBefore(id, deadline)), x.at(deadline), x.p.PickupBound, x.heldFor(wi.Name, d.Time, deadline))})
	}
	return vs
}

// pickupBy returns when a task that worker name should pick up from from
// on must be claimed by: once Params.PickupBound has passed, not counting
// the time in which the adversary held a request of the worker
// (EventDelayed). The bound is a PollInterval and a few round trips, and
// the worker's way to a claim is one request after another (the wake
// object, the listing, then for each marker it visits first the record,
// the wake object again if its last look is a PollInterval old, the
// claim's marker, record and the old marker's delete): the seconds the
// adversary adds to some of them, up to maxLatency each, make the round
// trips longer, not the worker slower. (Seed 20644 of f4b2b0c: after a
// Resume, the one worker serving the type listed, and claimed the two
// tasks that had waited, one after the other, 9.3 s after the Resume, 8.8
// s of it in five held requests.)
func (x *index) pickupBy(name string, from time.Time) time.Time {
	free := subtract([]span{{from, time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)}}, x.delayed[name])
	return after(free, from, x.p.PickupBound)
}

// heldFor says, for a violation's message, how long of [from, to] the
// adversary held a request of process name; "" if not at all.
func (x *index) heldFor(name string, from, to time.Time) string {
	var held time.Duration
	for _, s := range intersect([]span{{from, to}}, x.delayed[name]) {
		held += s.len()
	}
	if held == 0 {
		return ""
	}
	return fmt.Sprintf(" (%s of it with a request held)", held.Truncate(time.Millisecond))
}

// due is a stretch in which a task was queued and due, and the write that
// made it so.
type due struct {
	span
	by *Write
}

// announced returns when the process that wrote w, which made task id
// due, got a wake announcement of it written after it (one naming the
// task, or telling every worker to list), if it did within half a minute
// (its requests may be slow); zero if not. Announcements of other tasks
// by the same process do not count: a worker that finds their markers
// gone, or due later, does not list.
func (x *index) announced(w *Write, id string) time.Time {
	key := x.h.Prefix + "_wake"
	for i := sort.Search(len(x.h.Writes), func(i int) bool { return x.h.Writes[i].Seq > w.Seq }); i < len(x.h.Writes); i++ {
		o := &x.h.Writes[i]
		if o.Time.After(w.Time.Add(30 * time.Second)) {
			break
		}
		if o.Key == key && o.Proc == w.Proc && announces(x.added(i), id) {
			return o.Time
		}
	}
	return time.Time{}
}

// added returns the announcements that the write of the wake object at
// x.h.Writes[i] added: the lines of its body that the body of the write of
// it before did not have (the others are kept from earlier writes). A
// writer adds one line per announcement it makes, or several at once
// (the calls of a Store announce together, see wakeGroup), after those it
// keeps.
func (x *index) added(i int) [][]byte {
	o := &x.h.Writes[i]
	var prev [][]byte
	for j := i - 1; j >= 0; j-- {
		if p := &x.h.Writes[j]; p.Key == o.Key {
			if p.Method != "DELETE" {
				prev = bytes.Split(p.Body, []byte("\n"))
			}
			break
		}
	}
	var lines [][]byte
	for _, line := range bytes.Split(bytes.TrimRight(o.Body, "\n"), []byte("\n")) {
		if !slices.ContainsFunc(prev, func(p []byte) bool { return bytes.Equal(p, line) }) {
			lines = append(lines, line)
		}
	}
	return lines
}

// announces reports whether lines, the announcements a write of the wake
// object added (see added), announce task id: one of them names the
// task's marker or tells every worker to list.
func announces(lines [][]byte, id string) bool {
	for _, line := range lines {
		if bytes.Contains(line, []byte(id)) || bytes.HasSuffix(line, []byte(" *")) {
			return true
		}
	}
	return false
}

// checkAnnounced: a Submit or Retry that returned success, having queued
// its task with a write of its own, got the task announced in the wake
// object before it returned (a write of the wake object by its process
// that added a line naming the task, or telling every worker to list),
// unless a request of its process for the wake or the paused object failed
// or was slow meanwhile, or its process was paused or frozen (see
// unannounced). The
// announcement is a hint, but the promise that no announcement is lost to
// other writers (those of the same Store among them) is the library's:
// the pickup bound rests on it. Reported as KindPickup.
func checkAnnounced(x *index) []Violation {
	var vs []Violation
	for i := range x.h.Calls {
		c := &x.h.Calls[i]
		if c.Kind != CallSubmit && c.Kind != CallRetry || c.Err != "" || c.TaskID == "" {
			continue
		}
		for _, d := range x.dues(c.TaskID) {
			w := d.by
			if w.Proc != c.Proc || w.Seq <= c.StartSeq || w.Seq >= c.EndSeq {
				continue
			}
			if _, ok := x.during(c.Proc, w.Time, c.End, EventWakeFailed, EventWakeSlow, EventPause, EventFreeze); ok {
				continue
			}
			if told := x.announced(w, c.TaskID); told.IsZero() || told.After(c.End) {
				vs = append(vs, Violation{Kind: KindPickup, Task: c.TaskID, Time: c.End, Msg: fmt.Sprintf(
					"%s's %s of task %s queued it at %s and returned success at %s, yet no write of the wake object by %s in between announced it, and none of its requests for the wake object failed",
					c.Proc, c.Kind, c.TaskID, x.at(w.Time), x.at(c.End), c.Proc)})
			}
		}
	}
	return vs
}

// unannounced reports whether the writer of w, which made task id due, had
// a reason not to announce it: a request of it for the wake object (or for
// the paused object, which an announcement reads when the wake object does
// not name the paused types) failed within half a minute, or took so long
// that the announcement's time may have run out (EventWakeSlow), or its
// requests hung (a pause, a freeze), or the
// operator call that wrote w failed or did not know whether its write
// landed (a write applied after its client gave up on it), and so
// announced nothing; repeating the call then finds the task queued, which
// changes nothing and announces nothing.
func (x *index) unannounced(w *Write, id string) bool {
	if _, ok := x.during(w.Proc, w.Time, w.Time.Add(30*time.Second), EventWakeFailed, EventWakeSlow, EventPause, EventFreeze); ok {
		return true
	}
	var call *Call
	for i := range x.h.Calls {
		c := &x.h.Calls[i]
		if c.Proc == w.Proc && c.TaskID == id && c.StartSeq < w.Seq && (call == nil || c.StartSeq > call.StartSeq) {
			call = c
		}
	}
	return call != nil && call.Err != ""
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
