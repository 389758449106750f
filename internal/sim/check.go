package sim

import (
	"fmt"
	"iter"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/s3task/s3task"
)

// Kind is a kind of violation.
type Kind string

// The kinds of violation [Check] finds.
const (
	// KindOverlap: two handler runs of one task overlapped in time. A run
	// lasts from its start to its return, except that it ends when its
	// context ended with ErrLeaseLost or ErrTaskCanceled, and at the crash
	// of its worker. A handler that keeps going after ErrWorkerStopping
	// while its worker is paused or cut off (and so loses the lease) is
	// excused: nothing more can tell it.
	KindOverlap Kind = "overlap"
	// KindCompletion: a completed task's final attempt had no handler that
	// returned nil, or its output is not what that attempt wrote.
	KindCompletion Kind = "completion"
	// KindAttempts: an attempt counted against max_attempts without a
	// handler start, and its worker neither crashed, nor was paused, cut off
	// (Params.CutOff) or stopped while it held the claim.
	KindAttempts Kind = "attempts"
	// KindAPI: an operator call reported a failure (other than
	// ErrOutcomeUnknown) although a write of its own to the task's record
	// landed, or reported success without the effect it promises, or a
	// call that settles its doubts returned ErrOutcomeUnknown while S3
	// answered it (see checkAPI).
	KindAPI Kind = "api"
	// KindLateWrite: an attempt's output or record was written after the
	// attempt's handler context ended (its record: after it ended with
	// ErrLeaseLost or ErrTaskCanceled).
	KindLateWrite Kind = "late-write"
	// KindMarker: a pending task went without its marker for longer than
	// the reconcile interval, or a finished and notified task kept its
	// marker at the end.
	KindMarker Kind = "marker"
	// KindNotice: a finished task's OnTerminal notice was never delivered
	// although every store had the hook.
	KindNotice Kind = "notice"
	// KindClaimDelay: a task stayed claimable for longer than
	// Params.ClaimBound while a worker was up, not paused or cut off, and
	// had a free slot all along: something (such as a slow hook) held up its
	// poll loop.
	KindClaimDelay Kind = "claim-delay"
	// KindTransition: two consecutive records of a task are not a legal
	// step of the lifecycle.
	KindTransition Kind = "transition"
	// KindExpiry: a worker let its lease run out while it still held the
	// task (its handler running, its context not ended), though it was
	// neither crashed, paused nor cut off, and the task was taken over.
	KindExpiry Kind = "expiry"
	// KindStuck: a task was not finished when the run hit its time cap.
	KindStuck Kind = "stuck"
	// KindOverrun: a handler ran past the earliest moment another worker
	// could take its task over (see checkOverrun), whether or not one did.
	KindOverrun Kind = "overrun"
	// KindPickup: a task that fell due while a worker serving its type was
	// idle waited longer than Params.PickupBound (see checkPickup), or
	// longer than that after an idle worker relying on events was told of
	// its marker (see checkEventPickup), or a Submit or Retry returned
	// success without its process announcing the task in the wake object
	// (see checkAnnounced).
	KindPickup Kind = "pickup"
	// KindStop: a handler's context outlived the context given to
	// Worker.Stop (see checkStopBy).
	KindStop Kind = "stop"
	// KindCost: a worker kept paying for something it should have let go,
	// such as reading a deleted record again and again.
	KindCost Kind = "cost"
	// KindKey: two live tasks (records not marked for purging) carried one
	// idempotency key at once, or a Create with a key succeeded but
	// returned a task that was not live, with that key, at some moment of
	// the call.
	KindKey Kind = "key"
	// KindIngest: a version of a file under the ingest folder got two
	// tasks, or the current version of one got none, or a task got an
	// input other than its source (see checkIngest).
	KindIngest Kind = "ingest"
	// KindInput: S3 applied two writes of one task's input; an input is
	// written once, whatever uploads, resends and forms posted again came
	// (see checkInputOnce).
	KindInput Kind = "input"
	// KindHistory: a record's attempt_history is not what the run's writes
	// show of the task's attempts (who claimed each and when, how each
	// ended, in order), or keeps more than s3task.HistoryLimit of them
	// (see checkHistories).
	KindHistory Kind = "history"
	// KindPause: a worker began a claim of a task of a paused type more
	// than its PollInterval after the Pause returned, before any Resume of
	// the type started (see checkPause).
	KindPause Kind = "pause"
	// KindRelease: a function invocation gave a task back past its
	// ReleaseLimit, or failed it for timeout short of it (see
	// checkReleases).
	KindRelease Kind = "release"
	// KindPeriodic: a period of a periodic task got two runs, a run for no
	// period, a run made before its period or later than its policy
	// allows, or no run while a worker held the reconciler's lease, up and
	// reachable, from before the period began until well within the time
	// its run could be made (see checkPeriodic).
	KindPeriodic Kind = "periodic"
)

// Kinds lists every kind, in the order of the checks.
func Kinds() []Kind {
	return []Kind{KindOverlap, KindCompletion, KindAttempts, KindAPI, KindLateWrite, KindMarker,
		KindNotice, KindClaimDelay, KindTransition, KindExpiry, KindStuck, KindKey, KindOverrun, KindCost, KindPickup, KindStop, KindIngest, KindInput, KindHistory, KindPause, KindRelease, KindPeriodic}
}

// Violation is one broken guarantee found in a history.
type Violation struct {
	Kind Kind      // what broke
	Task string    // the task concerned, if one
	Time time.Time // when it happened, roughly
	Msg  string    // what happened, with times relative to the start of the run
}

// String returns "kind: message".
func (v Violation) String() string { return fmt.Sprintf("%s: %s", v.Kind, v.Msg) }

// Check returns every violation in h, in time order. It is pure: it reads
// h and nothing else.
func Check(h *History) []Violation {
	x := newIndex(h)
	var vs []Violation
	for _, check := range []func(*index) []Violation{
		checkOverlap, checkCompletion, checkAttempts, checkAPI, checkLateWrites, checkMarkers,
		checkNotices, checkClaimDelay, checkTransitions, checkExpiry, checkStuck, checkKeys, checkOverrun, checkGoneReads, checkPickup, checkEventPickup, checkAnnounced, checkStopBy, checkIngest, checkInputOnce, checkHistories, checkPause, checkReleases, checkPeriodic,
	} {
		vs = append(vs, check(x)...)
	}
	slices.SortStableFunc(vs, func(a, b Violation) int { return a.Time.Compare(b.Time) })
	return vs
}

// index is the history arranged for the checks.
type index struct {
	h       *History
	p       Params
	records map[string][]*Write // per task: its record's PUTs and DELETEs, in order
	markers map[string][]*Write // per task: its marker's PUTs and DELETEs, in order
	outputs map[string][]*Write // per output key: its PUTs
	runs    map[string][]*HandlerRun
	run     map[runKey]*HandlerRun
	events  map[string][]ProcEvent // but EventDelayed
	delayed map[string][]span      // per process: when the adversary held a request of it (EventDelayed), merged
	workers map[string]WorkerInfo
	tasks   []string // every task with a record, in order of creation
}

type runKey struct {
	task    string
	attempt int
}

func newIndex(h *History) *index {
	x := &index{
		h: h, p: h.Params,
		records: map[string][]*Write{}, markers: map[string][]*Write{}, outputs: map[string][]*Write{},
		runs: map[string][]*HandlerRun{}, run: map[runKey]*HandlerRun{},
		events: map[string][]ProcEvent{}, delayed: map[string][]span{}, workers: map[string]WorkerInfo{},
	}
	active := h.Prefix + "active/"
	planted := map[string]bool{}
	for _, id := range h.Planted {
		planted[id] = true
	}
	for i := range h.Writes {
		w := &h.Writes[i]
		switch {
		case planted[markerTask(strings.TrimPrefix(w.Key, active))] || planted[w.TaskID(h.Prefix)]:
		case strings.HasPrefix(w.Key, active):
			id := markerTask(strings.TrimPrefix(w.Key, active))
			x.markers[id] = append(x.markers[id], w)
		case strings.HasSuffix(w.Key, "/status.json") && (w.Record != nil || w.Method == "DELETE"):
			id := w.TaskID(h.Prefix)
			if len(x.records[id]) == 0 {
				x.tasks = append(x.tasks, id)
			}
			x.records[id] = append(x.records[id], w)
		case strings.Contains(w.Key, "/output-attempt-") && w.Method == "PUT":
			x.outputs[w.Key] = append(x.outputs[w.Key], w)
		}
	}
	for _, r := range h.Runs {
		x.runs[r.Task] = append(x.runs[r.Task], r)
		k := runKey{r.Task, r.Attempt}
		if x.run[k] == nil {
			x.run[k] = r
		}
	}
	for _, e := range h.Events {
		if e.Kind == EventDelayed {
			x.delayed[e.Proc] = append(x.delayed[e.Proc], span{e.Start, e.End})
			continue
		}
		x.events[e.Proc] = append(x.events[e.Proc], e)
	}
	for proc, spans := range x.delayed {
		x.delayed[proc] = merge(spans)
	}
	for _, wi := range h.Workers {
		x.workers[wi.Name] = wi
	}
	return x
}

// at formats t relative to the start of the run.
func (x *index) at(t time.Time) string {
	return "+" + t.Sub(x.h.Start).Truncate(100*time.Millisecond).String()
}

// last returns the task's last record as written (nil if none).
func (x *index) last(id string) *Record {
	ws := x.records[id]
	for i := len(ws) - 1; i >= 0; i-- {
		if ws[i].Record != nil {
			return ws[i].Record
		}
	}
	return nil
}

// outputKey returns the key of attempt n's output of task id.
func (x *index) outputKey(id string, n int) string {
	return x.h.Prefix + id + "/output-attempt-" + strconv.Itoa(n)
}

// during reports whether process proc had an event of one of kinds
// overlapping [from, to]. An outage counts only if it lasted CutOff.
func (x *index) during(proc string, from, to time.Time, kinds ...EventKind) (ProcEvent, bool) {
	for _, e := range x.events[proc] {
		if e.Kind == EventOutage && e.End.Sub(e.Start) < x.p.CutOff {
			continue
		}
		if slices.Contains(kinds, e.Kind) && !e.Start.After(to) && !e.End.Before(from) {
			return e, true
		}
	}
	return ProcEvent{}, false
}

// asRecord wraps a task a call returned as a record without bookkeeping;
// nil for nil.
func asRecord(t *s3task.Task) *Record {
	if t == nil {
		return nil
	}
	return &Record{Task: *t}
}

// describe summarizes a record for messages.
func describe(t *Record) string {
	if t == nil {
		return "none"
	}
	s := string(t.Status)
	if t.Status == s3task.StatusRunning {
		s += fmt.Sprintf("(%s, attempt %d)", t.WorkerID, t.Attempt)
	} else if t.Attempt > 0 {
		s += fmt.Sprintf("(attempt %d)", t.Attempt)
	}
	if t.ErrorCategory != "" && t.Status != s3task.StatusCompleted {
		s += " [" + t.ErrorCategory + "]"
	}
	return s
}

// step is one change of a task's record from one record to another: a PUT
// over an existing record.
type step struct {
	id         string
	prev, next *Record  // the record before and after; never nil
	w          *Write   // the PUT of next
	later      []*Write // the record's writes after w
}

// steps yields the steps of every task's record, task by task in order of
// creation, each in order; deletions and the writes next to them are
// passed over.
func (x *index) steps() iter.Seq[step] {
	return func(yield func(step) bool) {
		for _, id := range x.tasks {
			ws := x.records[id]
			for i := 1; i < len(ws); i++ {
				prev, next := ws[i-1].Record, ws[i].Record
				if prev == nil || next == nil {
					continue
				}
				if !yield(step{id: id, prev: prev, next: next, w: ws[i], later: ws[i+1:]}) {
					return
				}
			}
		}
	}
}

// earlier returns the earlier of two times.
func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// later returns the later of two times.
// markerTask returns the task ID in the name of a marker: <due>_<id>, or
// a bare <id> as earlier versions wrote.
func markerTask(name string) string {
	if _, id, ok := strings.Cut(name, "_"); ok {
		return id
	}
	return name
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// sortedKeys returns the keys of m in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
