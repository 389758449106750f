package sim

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/s3task/s3task"
)

// span is a stretch of virtual time, [From, To).
type span struct{ From, To time.Time }

func (s span) len() time.Duration { return s.To.Sub(s.From) }

// merge returns the union of spans, sorted and disjoint.
func merge(spans []span) []span {
	s := slices.Clone(spans)
	slices.SortFunc(s, func(a, b span) int { return a.From.Compare(b.From) })
	var out []span
	for _, x := range s {
		if !x.From.Before(x.To) {
			continue
		}
		if n := len(out); n > 0 && !x.From.After(out[n-1].To) {
			out[n-1].To = later(out[n-1].To, x.To)
			continue
		}
		out = append(out, x)
	}
	return out
}

// after returns the moment at which d of the time covered by spans (sorted
// and disjoint) has passed since from; the far future if it never does.
func after(spans []span, from time.Time, d time.Duration) time.Time {
	for _, s := range spans {
		if !s.To.After(from) {
			continue
		}
		start := later(s.From, from)
		if left := s.To.Sub(start); d <= left {
			return start.Add(d)
		} else {
			d -= left
		}
	}
	return time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
}

// intersect returns the common parts of two sorted disjoint span lists.
func intersect(a, b []span) []span {
	var out []span
	for i, j := 0, 0; i < len(a) && j < len(b); {
		from, to := later(a[i].From, b[j].From), earlier(a[i].To, b[j].To)
		if from.Before(to) {
			out = append(out, span{from, to})
		}
		if a[i].To.Before(b[j].To) {
			i++
		} else {
			j++
		}
	}
	return out
}

// subtract returns a without the parts covered by b; both sorted and
// disjoint.
func subtract(a, b []span) []span {
	var out []span
	for _, s := range a {
		cur := s
		for _, c := range b {
			if !c.To.After(cur.From) || !c.From.Before(cur.To) {
				continue
			}
			if c.From.After(cur.From) {
				out = append(out, span{cur.From, c.From})
			}
			cur.From = c.To
			if !cur.From.Before(cur.To) {
				break
			}
		}
		if cur.From.Before(cur.To) {
			out = append(out, cur)
		}
	}
	return out
}

// available returns when worker name was up (started, not stopped or
// crashed), neither paused, cut off nor slowed down (nor just after: its
// requests were catching up), and had a free slot. A run holds its slot from a little
// before its handler started until FinishGrace after it returned, and
// after the worker's own OnTerminal call for it.
func (x *index) available(name string) []span {
	info, ok := x.workers[name]
	if !ok {
		return nil
	}
	const startGrace = 10 * time.Second
	var up span
	var down []span
	for _, e := range x.events[name] {
		switch e.Kind {
		case EventStart:
			up = span{e.Start.Add(startGrace), x.h.End}
		case EventStop, EventCrash, EventExit:
			if e.Start.Before(up.To) {
				up.To = e.Start
			}
		case EventPause, EventOutage, EventSlow, EventFreeze:
			down = append(down, span{e.Start, e.End.Add(x.p.FinishGrace)})
		}
	}
	// Slots: +1 at a run's start, -1 at its end; busy where all are taken.
	type edge struct {
		at time.Time
		d  int
	}
	var edges []edge
	for _, r := range x.h.Runs {
		if r.Worker != name {
			continue
		}
		end := x.h.End
		if r.Returned {
			end = r.Return
		}
		for _, n := range x.h.Notices {
			if n.Proc == name && n.TaskID == r.Task && !n.Start.Before(end.Add(-time.Second)) && !n.Start.After(end.Add(x.p.FinishGrace)) {
				end = later(end, n.End)
			}
		}
		edges = append(edges, edge{r.Start.Add(-startGrace), +1}, edge{end.Add(x.p.FinishGrace), -1})
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.d - b.d // ends first
	})
	busy, from := 0, time.Time{}
	for _, e := range edges {
		before := busy
		busy += e.d
		switch {
		case before < info.Concurrency && busy >= info.Concurrency:
			from = e.at
		case before >= info.Concurrency && busy < info.Concurrency:
			down = append(down, span{from, e.at})
		}
	}
	if busy >= info.Concurrency {
		down = append(down, span{from, x.h.End})
	}
	if !up.From.Before(up.To) {
		return nil
	}
	return subtract([]span{up}, merge(down))
}

// claimable returns when a task could have been claimed: queued with
// attempts left, failed with its retry due, or running with its lease over
// by the clock margin; with its marker in place and not being purged.
func (x *index) claimable(id string) []span {
	ws := x.records[id]
	var spans []span
	for i, w := range ws {
		t := w.Record
		if t == nil || t.Purging {
			continue
		}
		to := x.h.End
		if i+1 < len(ws) {
			to = ws[i+1].Time
		}
		var from time.Time
		switch {
		case t.Status == s3task.StatusQueued && used(w) < t.MaxAttempts:
			from = later(w.Time, t.RunAt.Add(x.p.ClockSlack))
		case t.Status == s3task.StatusFailed && !t.RetryAt.IsZero():
			from = later(w.Time, t.RetryAt.Add(x.p.ClockSlack))
		case t.Status == s3task.StatusRunning:
			from = later(w.Time, t.LeaseExpiresAt.Add(x.p.ClockMargin+x.p.ClockSlack))
		default:
			continue
		}
		spans = append(spans, span{from, to})
	}
	return intersect(merge(spans), x.markedSpans(id))
}

// markedSpans returns when task id had a marker, sorted and disjoint. A
// task may have several markers at once (one per phase, while a change
// moves it): it is marked while any of them is there.
func (x *index) markedSpans(id string) []span {
	var marked []span
	since := map[string]time.Time{}
	for _, w := range x.markers[id] {
		from, on := since[w.Key]
		switch {
		case w.Method == "PUT" && !on:
			since[w.Key] = w.Time
		case w.Method == "DELETE" && on:
			delete(since, w.Key)
			marked = append(marked, span{from, w.Time})
		}
	}
	for _, from := range since {
		marked = append(marked, span{from, x.h.End})
	}
	return merge(marked)
}

// checkClaimDelay: while a worker is up, unpaused and has a free slot, no
// task of a type it serves stays claimable for longer than
// Params.ClaimBound. One violation is reported per stretch of such a
// worker's time, naming the tasks it left. A task is not claimable while
// its type may be paused (Store.Pause; see pausedSpans): once the Resume
// has returned, its waiting tasks must be claimed within the bound too.
//
// The bound is sound for a worker whose poll loop is never held up: an idle
// worker lists the markers at least every MaxPollInterval (sooner when the
// wake object changes or a retry or lease deadline it saw comes), and one
// listing with a free slot claims a claimable task unless its read or claim
// request fails. Two listings in a row must fail, and the requests take
// seconds at most, before ClaimBound (two MaxPollIntervals plus 30 s)
// passes. A slow or failing OnTerminal hook must not hold the loop up.
func checkClaimDelay(x *index) []Violation {
	claimable := map[string][]span{}
	paused := x.pausedSpans()
	for _, id := range x.tasks {
		spans := x.claimable(id)
		if t := x.last(id); t != nil {
			spans = subtract(spans, paused[t.Type]) // see pausedSpans
		}
		for _, c := range spans {
			if c.len() >= x.p.ClaimBound {
				claimable[id] = append(claimable[id], c)
			}
		}
	}
	var vs []Violation
	for _, wi := range x.h.Workers {
		for _, s := range x.available(wi.Name) {
			if s.len() < x.p.ClaimBound {
				continue
			}
			var left []string
			var first time.Time
			for _, id := range x.tasks {
				if t := x.last(id); t == nil || !wi.Serves(t.Type) {
					continue
				}
				for _, c := range intersect(claimable[id], []span{s}) {
					if c.len() < x.p.ClaimBound {
						continue
					}
					if len(left) == 0 || c.From.Before(first) {
						first = c.From
					}
					left = append(left, fmt.Sprintf("%s (%s from %s)", id, describe(x.stateBefore(id, c.To)), x.at(c.From)))
					break
				}
			}
			if len(left) == 0 {
				continue
			}
			task := strings.SplitN(left[0], " ", 2)[0]
			vs = append(vs, Violation{Kind: KindClaimDelay, Task: task, Time: first.Add(x.p.ClaimBound), Msg: fmt.Sprintf(
				"%s was up, unpaused and had a free slot from %s to %s, yet %d claimable tasks waited over %s: %s%s",
				wi.Name, x.at(s.From), x.at(s.To), len(left), x.p.ClaimBound, listSome(left, 3), x.busyWith(wi.Name, s))})
		}
	}
	return vs
}

// stateBefore returns the task's record as written last before t.
func (x *index) stateBefore(id string, t time.Time) *Record {
	var cur *Record
	for _, w := range x.records[id] {
		if !w.Time.Before(t) {
			break
		}
		cur = w.Record
	}
	return cur
}

// busyWith lists the OnTerminal calls of a second or more that worker
// name made during s.
func (x *index) busyWith(name string, s span) string {
	var calls []string
	for _, n := range x.h.Notices {
		if n.Proc == name && n.Start.Before(s.To) && n.End.After(s.From) && n.End.Sub(n.Start) >= time.Second {
			calls = append(calls, fmt.Sprintf("OnTerminal(%s) from %s to %s", n.TaskID, x.at(n.Start), x.at(n.End)))
		}
	}
	if len(calls) == 0 {
		return ""
	}
	return "; meanwhile it ran " + listSome(calls, 3)
}

// listSome joins the first n items and says how many more there are.
func listSome(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, ", ")
	}
	return strings.Join(items[:n], ", ") + fmt.Sprintf(" and %d more", len(items)-n)
}
