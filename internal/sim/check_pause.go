package sim

import (
	"fmt"
	"time"

	"github.com/s3task/s3task"
)

// checkPause: once a Pause of a task type has returned, no worker begins a
// claim of a task of that type later than its own PollInterval after (the
// library's promise: the read of the wake object that allows a claim was
// sent less than PollInterval before the claim began), until a Resume of
// the type starts. A Resume that had not ended when the Pause started may
// have landed after it, and ends the promise at once. A claim is the
// record write that makes the task running with its next attempt (a first
// attempt, a retry or a take-over); it began when its first request began
// (Write.Began): the marker at the lease's end, written before the
// record, or the record's PUT itself. A claim begun before the bound may
// land after it. Workers relying on events (WorkerInfo.Events) have a
// PollInterval of MaxPollInterval.
func checkPause(x *index) []Violation {
	windows := x.pauseWindows()
	if len(windows) == 0 {
		return nil
	}
	var vs []Violation
	for _, id := range x.tasks {
		t := x.last(id)
		if t == nil {
			continue
		}
		ws := x.records[id]
		for i := 1; i < len(ws); i++ {
			prev, next, w := ws[i-1], ws[i].Record, ws[i]
			if prev.Record == nil || next == nil || next.Status != s3task.StatusRunning ||
				next.Attempt != prev.Record.Attempt+1 || next.WorkerID != w.Proc {
				continue
			}
			began := x.claimBegan(id, prev, w)
			poll := x.pollInterval(w.Proc)
			for _, win := range windows[t.Type] {
				bound := win.returned.Add(poll)
				if began.Before(bound) || !began.Before(win.until) {
					continue
				}
				vs = append(vs, Violation{Kind: KindPause, Task: id, Time: began, Msg: fmt.Sprintf(
					"task %s (type %q): %s began its claim of attempt %d at %s (landed %s), though %s's Pause of the type returned at %s: over its PollInterval (%s) before, and no Resume started until %s",
					id, t.Type, w.Proc, next.Attempt, x.at(began), x.at(w.Time), win.by, x.at(win.returned), poll, x.at(win.until))})
				break
			}
		}
	}
	return vs
}

// pauseWindow is a stretch in which a type stayed paused for sure: from
// the return of a successful Pause to the start of the first Resume that
// had not ended when the Pause started.
type pauseWindow struct {
	by              string // the process that paused
	returned, until time.Time
}

// pauseWindows returns the windows of every paused type, by type.
func (x *index) pauseWindows() map[string][]pauseWindow {
	out := map[string][]pauseWindow{}
	for _, p := range x.h.Calls {
		if p.Kind != CallPause || p.Err != "" {
			continue
		}
		until := x.h.End
		for _, r := range x.h.Calls {
			if r.Kind == CallResume && r.Type == p.Type && !r.End.Before(p.Start) && r.Start.Before(until) {
				until = r.Start
			}
		}
		if p.End.Before(until) {
			out[p.Type] = append(out[p.Type], pauseWindow{by: p.Proc, returned: p.End, until: until})
		}
	}
	return out
}

// pausedSpans returns, by type, when a type may have been paused, for the
// checks of liveness: from the start of every Pause, whatever it returned
// (one that failed may have landed), to the end of the first Resume that
// succeeded and started after that Pause ended; to the end of the run if
// none did. After that Resume, idle workers learn of it within
// PollInterval, and list: its waiting tasks are due from its end.
func (x *index) pausedSpans() map[string][]span {
	out := map[string][]span{}
	for _, p := range x.h.Calls {
		if p.Kind != CallPause {
			continue
		}
		to := x.h.End
		for _, r := range x.h.Calls {
			if r.Kind == CallResume && r.Type == p.Type && r.Err == "" && !r.Start.Before(p.End) && r.End.Before(to) {
				to = r.End
			}
		}
		out[p.Type] = append(out[p.Type], span{p.Start, to})
	}
	for typ, spans := range out {
		out[typ] = merge(spans)
	}
	return out
}

// claimBegan returns when the claim that wrote w began: the start of the
// first of its requests, the marker the claimed record calls for (due at
// its lease's end and the clock margin), which its writer wrote after it
// read the record as prev left it (and so after prev), or of the record's
// PUT if that marker is not found. Another marker its writer wrote (one
// Reconcile restored, say) is not the claim's.
func (x *index) claimBegan(id string, prev, w *Write) time.Time {
	began := w.Began
	if began.IsZero() {
		began = w.Time
	}
	key := x.h.Prefix + "active/" + w.Record.DueAt.UTC().Format(markerTimeLayout) + "_" + id
	for _, m := range x.markers[id] {
		if m.Seq >= w.Seq {
			break
		}
		if m.Method == "PUT" && m.Key == key && m.Proc == w.Proc && !m.Began.IsZero() && !m.Began.Before(prev.Time) && m.Began.Before(began) {
			began = m.Began
		}
	}
	return began
}

// pollInterval returns worker name's PollInterval: MaxPollInterval for one
// that relies on events.
func (x *index) pollInterval(name string) time.Duration {
	if x.workers[name].Events {
		return x.p.MaxPollInterval
	}
	return x.p.PollInterval
}

// pausedAt returns the span of spans that holds t, if one does.
func pausedAt(spans []span, t time.Time) (span, bool) {
	for _, s := range spans {
		if !t.Before(s.From) && t.Before(s.To) {
			return s, true
		}
	}
	return span{}, false
}

// pausedWithin reports whether spans meet [from, to].
func pausedWithin(spans []span, from, to time.Time) bool {
	for _, s := range spans {
		if s.From.Before(to) && s.To.After(from) {
			return true
		}
	}
	return false
}
