package s3task

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// transitionNow is the clock reading the transition tests decide at.
var transitionNow = time.Date(2026, 6, 21, 10, 0, 0, 0, time.UTC)

// recordKey is where the record of knownGoodID lives under the default prefix.
const recordKey = "batch-tasks/" + knownGoodID + "/status.json"

// baseRecord is a freshly created task with every identity and audit field
// filled in, so that a transition which clears one of them shows up.
func baseRecord() *record {
	return &record{Task: Task{
		SchemaVersion: SchemaVersion,
		ID:            knownGoodID,
		Type:          "import",
		Name:          "June batch import",
		Payload:       json.RawMessage(`{"sheet":"june"}`),
		Status:        StatusCreated,
		MaxAttempts:   3,
		InputPath:     "batch-tasks/" + knownGoodID + "/input.csv",
		CreatedAt:     transitionNow.Add(-time.Hour),
		UpdatedAt:     transitionNow.Add(-time.Minute),
		CreatedBy:     "john.doe",
		Revision:      "rev-1",
		// No event may change it: every expected record below keeps it.
		Metadata: map[string]string{"tenant": "acme", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
	}}
}

// startState is a record in one of the situations a transition can meet.
type startState struct {
	name  string
	build func() *record
}

// startRunAt is the start time of the scheduled start states: after
// transitionNow, before evRunAt.
var startRunAt = transitionNow.Add(30 * time.Minute)

// partDone is the progress of an attempt cut short.
var partDone = Progress{RowCount: 10, ProcessedCount: 4, SuccessCount: 3, ErrorCount: 1}

// fresh builds baseRecord changed by more.
func fresh(more func(t *record)) func() *record {
	return func() *record {
		t := baseRecord()
		more(t)
		return t
	}
}

// submittedAs builds baseRecord once Submit verified its input, in status s
// at attempt n, last held by worker, changed by more.
func submittedAs(s Status, n int, worker string, more func(t *record)) func() *record {
	return fresh(func(t *record) {
		t.Status, t.Attempt, t.WorkerID = s, n, worker
		t.InputETag, t.InputSize = evETag, evSize
		more(t)
	})
}

// startStates lists every situation the transition table starts from. The
// two flavours of failed are separate rows because they behave differently,
// and so are the scheduled flavours of created and queued. Every record past
// created carries the DueAt its last transition gave it, so that a
// transition which should keep it shows up if it does not.
func startStates() []startState {
	return []startState{
		{"created", fresh(func(*record) {})},
		{"created, scheduled", fresh(func(t *record) { t.RunAt = startRunAt })},
		{"created, without input", fresh(func(t *record) { t.NoInput, t.InputPath = true, "" })},
		{"queued", submittedAs(StatusQueued, 1, "", func(t *record) { // back in the queue after a lost lease
			t.LastError = "attempt 1: lease expired"
			t.Progress = Progress{RowCount: 10, ProcessedCount: 4, SuccessCount: 4}
			t.DueAt = t.UpdatedAt // the moment the lease was found expired
			t.History = []Attempt{ranAttempt(1, "worker-z", OutcomeLeaseExpired, CategoryLeaseExpired, "attempt 1: lease expired")}
		})},
		{"queued, scheduled", submittedAs(StatusQueued, 0, "", func(t *record) { t.RunAt, t.DueAt = startRunAt, startRunAt })},
		{"running", submittedAs(StatusRunning, 2, "worker-a", func(t *record) {
			t.LastError, t.Progress = "attempt 1: lease expired", partDone
			t.LeaseExpiresAt = transitionNow.Add(10 * time.Second)
			t.DueAt = t.LeaseExpiresAt.Add(evMargin)
			t.StartedAt = historyStart.Add(time.Minute) // as its entry says
			t.History = []Attempt{
				ranAttempt(1, "worker-z", OutcomeLeaseExpired, CategoryLeaseExpired, "attempt 1: lease expired"),
				ranAttempt(2, "worker-a", OutcomeRunning, "", ""),
			}
		})},
		{"completed", submittedAs(StatusCompleted, 2, "worker-a", func(t *record) {
			t.OutputPath = "batch-tasks/" + knownGoodID + "/output-attempt-2.csv"
			t.Progress = Progress{RowCount: 10, ProcessedCount: 10, SuccessCount: 9, ErrorCount: 1}
			t.DueAt = transitionNow.Add(-10 * time.Minute) // the end of its last lease
			t.History = []Attempt{
				ranAttempt(1, "worker-z", OutcomeLeaseExpired, CategoryLeaseExpired, "attempt 1: lease expired"),
				ranAttempt(2, "worker-a", OutcomeCompleted, "", ""),
			}
		})},
		{"failed, retry scheduled", submittedAs(StatusFailed, 1, "worker-z", func(t *record) {
			t.LastError, t.Progress = "attempt 1: timeout", partDone
			t.RetryAt = transitionNow.Add(-time.Second) // due
			t.DueAt = t.RetryAt
			t.History = []Attempt{ranAttempt(1, "worker-z", OutcomeFailed, CategoryTransient, "attempt 1: timeout")}
		})},
		{"failed, final", submittedAs(StatusFailed, 3, "worker-z", func(t *record) {
			t.LastError, t.Progress = "attempt 3: timeout", partDone
			t.DueAt = transitionNow.Add(-10 * time.Minute) // the end of its last lease
			t.History = []Attempt{
				ranAttempt(1, "worker-x", OutcomeFailed, CategoryTransient, "attempt 1: timeout"),
				ranAttempt(2, "worker-y", OutcomeFailed, CategoryTransient, "attempt 2: timeout"),
				ranAttempt(3, "worker-z", OutcomeFailed, CategoryTransient, "attempt 3: timeout"),
			}
		})},
		{"abandoned", submittedAs(StatusAbandoned, 1, "worker-z", func(t *record) {
			t.CancelReason = "no longer needed"
			t.DueAt = transitionNow.Add(-20 * time.Minute) // when it was queued
			t.History = []Attempt{ranAttempt(1, "worker-z", OutcomeCanceled, "", "")}
		})},
		{"completed, being purged", submittedAs(StatusCompleted, 1, "worker-a", func(t *record) {
			t.OutputPath = "batch-tasks/" + knownGoodID + "/output-attempt-1.csv"
			t.Purging = true
			t.DueAt = transitionNow.Add(-10 * time.Minute)
			t.History = []Attempt{ranAttempt(1, "worker-a", OutcomeCompleted, "", "")}
		})},
	}
}

// historyStart is when attempt 1 of the start states began; attempt n
// began n-1 minutes later, and each ended a minute after its start.
var historyStart = transitionNow.Add(-10 * time.Minute)

// ranAttempt is attempt n's entry in a start state's history: run by
// worker, with outcome, category and msg.
func ranAttempt(n int, worker string, outcome AttemptOutcome, category, msg string) Attempt {
	a := Attempt{Number: n, WorkerID: worker, StartedAt: historyStart.Add(time.Duration(n-1) * time.Minute),
		Outcome: outcome, ErrorCategory: category, Error: msg, HeartbeatInterval: evHeartbeatEvery}
	if outcome != OutcomeRunning {
		a.EndedAt = a.StartedAt.Add(time.Minute)
	}
	return a
}

// ended closes the entry of t's latest attempt as the state machine
// should: it ended at at with outcome, category and msg.
func ended(t *record, outcome AttemptOutcome, at time.Time, category, msg string) {
	a := &t.History[len(t.History)-1]
	a.EndedAt, a.Outcome, a.ErrorCategory, a.Error = at, outcome, category, msg
}

// allEventKinds lists every event, in declaration order.
var allEventKinds = []eventKind{
	evUpload, evSubmit, evClaim, evHeartbeat, evComplete,
	evFail, evLeaseExpired, evRelease, evRetry, evCancel, evPurge, evNotified,
	evSchedule, evNoInput,
}

// statusConsts and eventConsts name every constant the table knows about.
// TestTransitionTableCoversDeclarations compares them with task.go, so a
// new status or event fails until it has rows.
var (
	statusConsts = map[string]Status{
		"StatusCreated": StatusCreated, "StatusQueued": StatusQueued,
		"StatusRunning": StatusRunning, "StatusCompleted": StatusCompleted,
		"StatusFailed": StatusFailed, "StatusAbandoned": StatusAbandoned,
	}
	eventConsts = map[string]eventKind{
		"evUpload": evUpload, "evSubmit": evSubmit, "evClaim": evClaim,
		"evHeartbeat": evHeartbeat, "evComplete": evComplete, "evFail": evFail,
		"evLeaseExpired": evLeaseExpired, "evRelease": evRelease,
		"evRetry": evRetry, "evCancel": evCancel, "evPurge": evPurge,
		"evNotified": evNotified, "evSchedule": evSchedule,
		"evNoInput": evNoInput,
	}
)

// The fields of the event the table sends; each kind reads what it needs.
const (
	evWorker   = "worker-a"
	evAttempt  = 2 // the attempt the running row holds
	evLease    = time.Minute
	evMargin   = 2 * time.Second
	evOutput   = "batch-tasks/" + knownGoodID + "/output-attempt-2.csv"
	evErrMsg   = "attempt 2: row 7 is malformed"
	evDelay    = 5 * time.Minute
	evETag     = `"etag-1"`
	evSize     = 2048
	evReason   = "user cancelled"
	evCategory = "bad_input"
)

// evHeartbeatEvery is the heartbeat interval of the table's claiming
// worker.
const evHeartbeatEvery = 20 * time.Second

var evProgress = Progress{RowCount: 10, ProcessedCount: 7, SuccessCount: 6, ErrorCount: 1}

// evRunAt is the start time the table's schedule event asks for: an hour
// after transitionNow, later than startRunAt.
var evRunAt = transitionNow.Add(time.Hour)

func tableEvent(k eventKind) event {
	p := evProgress
	return event{
		kind:       k,
		worker:     evWorker,
		attempt:    evAttempt,
		lease:      evLease,
		heartbeat:  evHeartbeatEvery,
		margin:     evMargin,
		move:       true,
		at:         evRunAt,
		progress:   &p,
		output:     evOutput,
		errMsg:     evErrMsg,
		category:   evCategory,
		retryDelay: evDelay,
		inputETag:  evETag,
		inputSize:  evSize,
		reason:     evReason,
	}
}

// outcome is what a transition should do: deny the event, ignore it, or
// write the start record changed by change (a write that step.check alone
// judges when change is nil).
type outcome struct {
	deny   bool
	noop   bool
	change func(t *record)
}

var (
	denied    = outcome{deny: true}
	unchanged = outcome{noop: true}
	written   = outcome{}
)

func becomes(change func(t *record)) outcome { return outcome{change: change} }

// except is a row of the transition table: every event denied but those
// given.
func except(allowed map[eventKind]outcome) map[eventKind]outcome {
	row := make(map[eventKind]outcome)
	for _, k := range allEventKinds {
		row[k] = denied
	}
	maps.Copy(row, allowed)
	return row
}

// copyTask is a deep copy made without the code under test.
func copyTask(t *record) *record {
	c := *t
	c.Payload = bytes.Clone(t.Payload)
	c.History = slices.Clone(t.History)
	return &c
}

// checkDenied fails t unless err is a *TransitionError for start and event k.
func checkDenied(t *testing.T, start *record, k eventKind, next *record, write bool, err error) {
	t.Helper()

	if !errors.Is(err, ErrInvalidTransition) {
		t.Fatalf("transition(%s, %s) = %v, want an error wrapping ErrInvalidTransition", start.Status, k, err)
	}
	var te *TransitionError
	if !errors.As(err, &te) {
		t.Fatalf("transition(%s, %s) error is %T, want *TransitionError", start.Status, k, err)
	}
	if te.From != start.Status || te.Event != k.String() || te.ID != start.ID {
		t.Errorf("TransitionError{ID: %q, From: %q, Event: %q}, want {%q, %q, %q}", te.ID, te.From, te.Event, start.ID, start.Status, k.String())
	}
	if te.Event == "" || te.Reason == "" {
		t.Errorf("TransitionError has an empty Event (%q) or Reason (%q)", te.Event, te.Reason)
	}
	if next != nil || write {
		t.Errorf("a denied transition returned next = %v, write = %v; want nil, false", next, write)
	}
}

// step is one call of transition and what it should do.
type step struct {
	name   string
	start  *record
	ev     event
	at     time.Time // the clock reading; zero means transitionNow
	want   outcome
	ignore gocmp.Option                     // fields the comparison with the wanted record leaves out
	check  func(t *testing.T, next *record) // what else must hold afterwards (next is nil if denied)
	why    string                           // what the step shows, for the messages
}

// run calls transition for s and fails t unless it does what s wants; it
// returns the next record (nil if denied).
func (s step) run(t *testing.T) *record {
	t.Helper()
	at := s.at
	if at.IsZero() {
		at = transitionNow
	}
	before := copyTask(s.start)
	next, write, err := transition(s.start, s.ev, at)
	if diff := gocmp.Diff(before, s.start); diff != "" {
		t.Errorf("transition modified its input (-before +after):\n%s", diff)
	}
	switch {
	case s.want.deny:
		checkDenied(t, s.start, s.ev.kind, next, write, err)
	case s.want.noop:
		if err != nil || write || next != s.start {
			t.Errorf("%s = (%p, %v, %v), want the same task %p, false, nil (%s)", s.ev.kind, next, write, err, s.start, s.why)
		}
	default:
		if err != nil || !write {
			t.Fatalf("%s = (_, %v, %v), want a write and no error (%s)", s.ev.kind, write, err, s.why)
		}
		if s.want.change != nil {
			want := copyTask(before)
			s.want.change(want)
			if diff := gocmp.Diff(want, next, s.ignore); diff != "" {
				t.Errorf("next record differs (-want +got) (%s):\n%s", s.why, diff)
			}
		}
		if next == s.start {
			t.Errorf("transition returned its input for a write; want a new record")
		}
		// What the state machine writes, the decoder accepts.
		if data, err := encodeRecord(next); err != nil {
			t.Errorf("encodeRecord(next) = %v", err)
		} else if _, err := decodeTask(recordKey, next.ID, data, 3); err != nil {
			t.Errorf("the record written is refused when read back (%s): %v", s.why, err)
		}
		if len(next.Payload) > 0 && &next.Payload[0] == &s.start.Payload[0] {
			t.Errorf("next record shares its payload bytes with the input")
		}
	}
	if s.check != nil {
		s.check(t, next)
	}
	return next
}

// runSteps runs each step in a parallel subtest of its name.
func runSteps(t *testing.T, steps []step) {
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			s.run(t)
		})
	}
}

func TestTransitionEveryPair(t *testing.T) {
	t.Parallel()
	created, queued, running, completed := "created", "queued", "running", "completed"
	createdScheduled, queuedScheduled := "created, scheduled", "queued, scheduled"
	failedRetry, failedFinal, abandoned := "failed, retry scheduled", "failed, final", "abandoned"
	purging := "completed, being purged"
	toPurging := becomes(func(t *record) { t.Purging = true })
	toAbandoned := becomes(func(t *record) {
		if t.Status == StatusRunning { // the attempt ends with the task
			ended(t, OutcomeCanceled, transitionNow, "", "")
		}
		t.Status = StatusAbandoned
		t.CancelReason = evReason
		t.RetryAt, t.LeaseExpiresAt = time.Time{}, time.Time{}
	})
	claimed := becomes(claimedBy(evWorker, transitionNow, evLease, evMargin, evHeartbeatEvery))
	// A created task only remembers its start; a queued one's marker moves
	// to it.
	scheduledCreated := becomes(func(t *record) { t.RunAt = evRunAt })
	scheduledQueued := becomes(func(t *record) { t.RunAt, t.DueAt = evRunAt, evRunAt })
	toQueued := func(due time.Time) outcome {
		return becomes(func(t *record) {
			t.Status = StatusQueued
			t.InputETag, t.InputSize = evETag, evSize
			t.SubmittedAt = transitionNow
			t.DueAt = due
		})
	}

	expect := map[string]map[eventKind]outcome{
		created: except(map[eventKind]outcome{
			evUpload:   unchanged,
			evSubmit:   toQueued(transitionNow), // no start set: due at once
			evCancel:   toAbandoned,             // no notice asked for: no marker, no DueAt
			evSchedule: scheduledCreated,
			// created an hour before the table's cutoff (evRunAt)
			evNoInput: toAbandoned,
		}),
		"created, without input": except(map[eventKind]outcome{ // its type takes none: no upload
			evSubmit:   toQueued(transitionNow),
			evCancel:   toAbandoned,
			evSchedule: scheduledCreated,
			evNoInput:  toAbandoned, // never submitted, as any created task
		}),
		createdScheduled: except(map[eventKind]outcome{
			evUpload:   unchanged,
			evSubmit:   toQueued(startRunAt), // due at its start, not now
			evCancel:   toAbandoned,
			evSchedule: scheduledCreated,
			evNoInput:  toAbandoned,
		}),
		queued: except(map[eventKind]outcome{
			evSubmit:   unchanged,
			evClaim:    claimed,
			evCancel:   toAbandoned,
			evSchedule: scheduledQueued,
		}),
		queuedScheduled: except(map[eventKind]outcome{ // no claim before startRunAt
			evSubmit:   unchanged,
			evCancel:   toAbandoned,
			evSchedule: scheduledQueued, // moved later
		}),
		running: except(map[eventKind]outcome{ // no lease expiry: the lease runs 10s past now
			evHeartbeat: becomes(func(t *record) {
				t.LeaseExpiresAt = transitionNow.Add(evLease)
				t.DueAt = transitionNow.Add(evLease + evMargin) // the table's heartbeat moves the marker
				t.Progress = evProgress
			}),
			evComplete: becomes(func(t *record) {
				t.Status = StatusCompleted
				t.OutputPath = evOutput
				t.Progress = evProgress
				t.LastError = ""
				t.LeaseExpiresAt = time.Time{}
				ended(t, OutcomeCompleted, transitionNow, "", "")
			}),
			evFail: becomes(func(t *record) {
				t.Status = StatusFailed
				t.LastError = evErrMsg
				t.ErrorCategory = evCategory
				t.Progress = evProgress
				t.LeaseExpiresAt = time.Time{}
				t.RetryAt = transitionNow.Add(evDelay)
				t.DueAt = t.RetryAt
				ended(t, OutcomeFailed, transitionNow, evCategory, evErrMsg)
			}),
			evRelease: becomes(func(t *record) {
				t.Status = StatusQueued
				t.ReleasedAttempts = 1
				t.LastError = "attempt 2: interrupted by worker shutdown"
				t.ErrorCategory = CategoryShutdown
				t.WorkerID, t.LeaseExpiresAt = "", time.Time{}
				t.DueAt = transitionNow
				ended(t, OutcomeReleased, transitionNow, CategoryShutdown, t.LastError)
			}),
			evCancel: toAbandoned, // keeps DueAt: no notice asked for (TestTransitionCancel has those)
		}),
		completed: except(map[eventKind]outcome{
			evPurge:    toPurging,
			evNotified: unchanged, // no notice pending
		}),
		failedRetry: except(map[eventKind]outcome{ // no purge: a retry is scheduled, not finished
			evClaim: claimed,
			evRetry: becomes(func(t *record) {
				t.Status = StatusQueued
				t.RetryAt = time.Time{}
				t.DueAt = transitionNow
			}),
			evCancel: toAbandoned,
		}),
		failedFinal: except(map[eventKind]outcome{
			evRetry: becomes(func(t *record) {
				t.Status = StatusQueued
				t.MaxAttempts = 4 // one more than the attempts used
				t.DueAt = transitionNow
			}),
			evCancel:   toAbandoned,
			evPurge:    toPurging,
			evNotified: unchanged,
		}),
		abandoned: except(map[eventKind]outcome{
			evCancel:   unchanged,
			evPurge:    toPurging,
			evNotified: unchanged,
		}),
		purging: except(map[eventKind]outcome{ // even cancel is denied: the record is about to go
			evPurge: unchanged,
		}),
	}

	var steps []step
	for _, st := range startStates() {
		row, ok := expect[st.name]
		if !ok {
			t.Errorf("start state %q has no row of expectations", st.name)
			continue
		}
		for _, k := range allEventKinds {
			steps = append(steps, step{name: st.name + "/" + k.String(), start: st.build(), ev: tableEvent(k), want: row[k]})
		}
	}
	if want := len(startStates()) * len(allEventKinds); len(steps) != want || want != 154 {
		t.Errorf("checking %d pairs, want %d (11 start states x 14 events)", len(steps), want)
	}
	for name, row := range expect {
		if !slices.ContainsFunc(startStates(), func(s startState) bool { return s.name == name }) {
			t.Errorf("expectations for unknown start state %q", name)
		}
		for k := range row {
			if !slices.Contains(allEventKinds, k) {
				t.Errorf("%s: expectation for event %d that allEventKinds lacks", name, k)
			}
		}
	}
	runSteps(t, steps)
}

// declaredConsts returns the names of the constants of type typ that file
// declares, following implicit repetition in iota groups.
func declaredConsts(t *testing.T, file, typ string) []string {
	t.Helper()

	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		current := ""
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			switch {
			case vs.Type != nil:
				current = ""
				if id, ok := vs.Type.(*ast.Ident); ok {
					current = id.Name
				}
			case len(vs.Values) > 0:
				current = "" // an untyped constant ends the implicit run
			}
			if current == typ {
				for _, n := range vs.Names {
					names = append(names, n.Name)
				}
			}
		}
	}
	return names
}

func TestTransitionTableCoversDeclarations(t *testing.T) {
	t.Parallel()

	tests := []struct {
		typ   string
		known []string
	}{
		{typ: "Status", known: slices.Sorted(maps.Keys(statusConsts))},
		{typ: "eventKind", known: slices.Sorted(maps.Keys(eventConsts))},
	}
	for _, tt := range tests {
		declared := declaredConsts(t, "task.go", tt.typ)
		slices.Sort(declared)
		if diff := gocmp.Diff(tt.known, declared); diff != "" {
			t.Errorf("constants of type %s in task.go differ from the ones the transition table knows (-table +task.go):\n%s", tt.typ, diff)
		}
	}

	var startStatuses []Status
	for _, st := range startStates() {
		startStatuses = append(startStatuses, st.build().Status)
	}
	for name, s := range statusConsts {
		if !slices.Contains(startStatuses, s) {
			t.Errorf("%s is never a start state of the transition table", name)
		}
	}
	for name, k := range eventConsts {
		if !slices.Contains(allEventKinds, k) {
			t.Errorf("%s is missing from allEventKinds", name)
		}
	}

	seen := map[string]eventKind{}
	for _, k := range allEventKinds {
		name := k.String()
		if name == "" {
			t.Errorf("event %d has no name", k)
		}
		if prev, ok := seen[name]; ok {
			t.Errorf("events %d and %d share the name %q", prev, k, name)
		}
		seen[name] = k
	}
}

// runningTask is a task whose attempt 2 of 3 is held by worker-a, with its
// lease ending at lease.
func runningTask(lease time.Time) *record { return holding(2, lease) }

// holding is a task whose attempt n of 3 is held by worker-a since a
// minute before transitionNow, with its lease ending at lease, and its
// history saying so.
func holding(n int, lease time.Time) *record {
	t := baseRecord()
	t.Status = StatusRunning
	t.Attempt = n
	t.WorkerID = "worker-a"
	t.LeaseExpiresAt = lease
	t.StartedAt = transitionNow.Add(-time.Minute)
	t.History = []Attempt{{Number: n, WorkerID: "worker-a", StartedAt: t.StartedAt, Outcome: OutcomeRunning, HeartbeatInterval: evHeartbeatEvery}}
	return t
}

// claimedBy is what a claim by worker at now, for lease and margin, with
// heartbeats every heartbeat, makes of a task.
func claimedBy(worker string, now time.Time, lease, margin, heartbeat time.Duration) func(t *record) {
	return func(t *record) {
		t.Status = StatusRunning
		t.Attempt++
		t.StartedAt = now
		t.WorkerID = worker
		t.LeaseExpiresAt = now.Add(lease)
		t.DueAt = t.LeaseExpiresAt.Add(margin) // the marker moves past the lease
		t.RetryAt = time.Time{}
		t.Progress = Progress{} // a new attempt counts from zero
		t.History = append(t.History, Attempt{Number: t.Attempt, WorkerID: worker, StartedAt: now, Outcome: OutcomeRunning, HeartbeatInterval: heartbeat})
	}
}

// TestTransitionClaimWaitsForDueTime: a failed task cannot be claimed
// before its RetryAt, nor a queued one scheduled to start later before its
// RunAt; both can from then on.
func TestTransitionClaimWaitsForDueTime(t *testing.T) {
	t.Parallel()

	at := transitionNow.Add(time.Minute)
	starts := map[string]func() *record{
		"failed, retry at": fresh(func(t *record) { t.Status, t.Attempt, t.RetryAt, t.DueAt = StatusFailed, 1, at, at }),
		"queued, run at":   fresh(func(t *record) { t.Status, t.RunAt, t.DueAt = StatusQueued, at, at }),
	}
	tests := []struct {
		name    string
		now     time.Time
		allowed bool
	}{
		{name: "an hour early", now: at.Add(-time.Hour), allowed: false},
		{name: "1ns early", now: at.Add(-time.Nanosecond), allowed: false},
		{name: "at the time", now: at, allowed: true},
		{name: "later", now: at.Add(time.Hour), allowed: true},
	}
	var steps []step
	for kind, build := range starts {
		for _, tt := range tests {
			start := build()
			s := step{name: kind + "/" + tt.name, start: start, at: tt.now, want: denied,
				ev: event{kind: evClaim, worker: "worker-b", lease: time.Minute, margin: evMargin}}
			if tt.allowed {
				s.want = becomes(claimedBy("worker-b", tt.now, time.Minute, evMargin, 0))
			}
			s.check = func(t *testing.T, next *record) {
				if scheduled := start.Status == StatusQueued && !tt.allowed; start.Scheduled(tt.now) != scheduled {
					t.Errorf("Scheduled(%v) = %v, want %v", tt.now, !scheduled, scheduled)
				}
				if next != nil && next.Scheduled(tt.now) {
					t.Errorf("a running task reports Scheduled")
				}
			}
			steps = append(steps, s)
		}
	}
	runSteps(t, steps)
}

func TestTransitionSchedule(t *testing.T) {
	t.Parallel()

	later, earlier := transitionNow.Add(time.Hour), transitionNow.Add(-time.Hour)
	created := fresh(func(*record) {})
	queued := fresh(func(t *record) { t.Status, t.DueAt = StatusQueued, transitionNow.Add(-time.Minute) })
	withRunAt := func(build func() *record, at time.Time) func() *record {
		return func() *record {
			t := build()
			t.RunAt = at
			if t.Status == StatusQueued && at.After(transitionNow) {
				t.DueAt = at
			}
			return t
		}
	}
	scheduled := withRunAt(queued, later)
	tests := []struct {
		name      string
		start     func() *record
		at        time.Time
		noop      bool
		wantRunAt time.Time
		wantDueAt time.Time
		wantSched bool // Scheduled(transitionNow) afterwards
		reason    string
	}{
		{name: "created, later", start: created, at: later, wantRunAt: later, reason: "a created task has no marker: only RunAt is kept"},
		{name: "created, past", start: created, at: earlier, wantRunAt: earlier},
		{name: "created, same time again", start: withRunAt(created, later), at: later, noop: true},
		{name: "created, cleared", start: withRunAt(created, later), at: time.Time{}, wantRunAt: time.Time{}},
		{name: "queued, later", start: queued, at: later, wantRunAt: later, wantDueAt: later, wantSched: true, reason: "the marker moves to the start"},
		{name: "queued, past", start: queued, at: earlier, noop: true, reason: "it may run now already: it keeps its place in the queue"},
		{name: "queued, now", start: queued, at: time.Time{}, noop: true, reason: "as above"},
		{name: "queued, past RunAt, later", start: withRunAt(queued, earlier), at: later, wantRunAt: later, wantDueAt: later, wantSched: true},
		{name: "queued, past RunAt, now", start: withRunAt(queued, earlier), at: time.Time{}, noop: true, reason: "due already: keeps its place"},
		{name: "scheduled, run now", start: scheduled, at: time.Time{}, wantRunAt: time.Time{}, wantDueAt: transitionNow, reason: "zero starts a scheduled task at once"},
		{name: "scheduled, past", start: scheduled, at: earlier, wantRunAt: earlier, wantDueAt: transitionNow, reason: "a time past starts it at once, not backdated"},
		{name: "scheduled, earlier", start: scheduled, at: transitionNow.Add(time.Minute), wantRunAt: transitionNow.Add(time.Minute), wantDueAt: transitionNow.Add(time.Minute), wantSched: true},
		{name: "scheduled, same time again", start: scheduled, at: later, noop: true, reason: "nothing to write"},
	}
	var steps []step
	for _, tt := range tests {
		s := step{name: tt.name, start: tt.start(), ev: event{kind: evSchedule, at: tt.at}, want: unchanged, why: tt.reason}
		if !tt.noop {
			s.want = becomes(func(t *record) {
				t.RunAt = tt.wantRunAt
				if t.Status == StatusQueued {
					t.DueAt = tt.wantDueAt
				}
			})
			s.check = func(t *testing.T, next *record) {
				if got := next.Scheduled(transitionNow); got != tt.wantSched {
					t.Errorf("Scheduled(now) = %v, want %v (%s)", got, tt.wantSched, tt.reason)
				}
				// A queued task is claimable exactly when it is not scheduled.
				if next.Status == StatusQueued {
					_, _, err := transition(next, event{kind: evClaim, worker: "w", lease: time.Minute}, transitionNow)
					if claimable := err == nil; claimable == tt.wantSched {
						t.Errorf("claim after schedule: err %v, want claimable = %v", err, !tt.wantSched)
					}
				}
			}
		}
		steps = append(steps, s)
	}
	runSteps(t, steps)

	// Submit of a created task carries its RunAt into DueAt.
	next, _, err := transition(created(), event{kind: evSchedule, at: later}, transitionNow)
	if err != nil {
		t.Fatal(err)
	}
	queuedNext, _, err := transition(next, event{kind: evSubmit, inputETag: evETag, inputSize: evSize}, transitionNow)
	if err != nil {
		t.Fatal(err)
	}
	if !queuedNext.DueAt.Equal(later) || !queuedNext.Scheduled(transitionNow) || queuedNext.Scheduled(later) {
		t.Errorf("submitted after schedule: DueAt %v, Scheduled(now) %v, Scheduled(RunAt) %v; want %v, true, false", queuedNext.DueAt, queuedNext.Scheduled(transitionNow), queuedNext.Scheduled(later), later)
	}
}

// A heartbeat moves the marker's due time only when asked to.
func TestTransitionHeartbeatMovesDueAt(t *testing.T) {
	t.Parallel()

	var steps []step
	for _, move := range []bool{false, true} {
		start := runningTask(transitionNow.Add(10 * time.Second))
		start.DueAt = start.LeaseExpiresAt.Add(evMargin)
		steps = append(steps, step{name: fmt.Sprintf("move=%v", move), start: start,
			ev: event{kind: evHeartbeat, worker: "worker-a", attempt: 2, lease: time.Minute, margin: evMargin, move: move},
			want: becomes(func(t *record) {
				t.LeaseExpiresAt = transitionNow.Add(time.Minute)
				if move {
					t.DueAt = t.LeaseExpiresAt.Add(evMargin)
				}
			})})
	}
	runSteps(t, steps)
}

func TestTransitionClaimNeedsAttemptLeft(t *testing.T) {
	t.Parallel()

	claim := func(name string, status Status, attempt, maxAttempts int, allowed bool, why string) step {
		start := fresh(func(t *record) {
			t.Status, t.Attempt, t.MaxAttempts = status, attempt, maxAttempts
			if status == StatusFailed {
				t.RetryAt = transitionNow.Add(-time.Minute)
			}
		})()
		s := step{name: name, start: start, ev: event{kind: evClaim, worker: "w", lease: time.Minute}, want: denied, why: why}
		if allowed {
			s.want = written
			s.check = func(t *testing.T, next *record) {
				if next.Attempt != attempt+1 {
					t.Errorf("claim = %+v, want attempt %d written (%s)", next, attempt+1, why)
				}
			}
		}
		return s
	}
	runSteps(t, []step{
		claim("queued, last attempt left", StatusQueued, 2, 3, true, ""),
		claim("queued, all used", StatusQueued, 3, 3, false, "a lost lease on the last attempt must not start a fourth"),
		claim("queued, more than all used", StatusQueued, 5, 3, false, ""),
		claim("failed and due, all used", StatusFailed, 3, 3, false, "RetryAt set by hand or by an older version"),
	})
}

func TestTransitionRequiresLeaseHolder(t *testing.T) {
	t.Parallel()

	// Attempt 2 is held by worker-a; none of these holds it.
	others := map[string]event{
		"other worker":             {worker: "worker-b", attempt: 2},
		"no worker":                {worker: "", attempt: 2},
		"earlier attempt":          {worker: "worker-a", attempt: 1},
		"later attempt":            {worker: "worker-a", attempt: 3},
		"other worker and attempt": {worker: "worker-b", attempt: 3},
	}
	var steps []step
	for _, k := range []eventKind{evHeartbeat, evComplete, evFail, evRelease} {
		by := func(name string, ev event, want outcome) step {
			ev.kind, ev.lease, ev.errMsg, ev.output = k, time.Minute, "x", "o"
			return step{name: k.String() + "/" + name, start: runningTask(transitionNow.Add(time.Minute)), ev: ev, want: want, why: name}
		}
		steps = append(steps, by("holder", event{worker: "worker-a", attempt: 2}, written))
		for name, ev := range others {
			steps = append(steps, by(name, ev, denied))
		}
	}
	runSteps(t, steps)
}

func TestTransitionFail(t *testing.T) {
	t.Parallel()

	fail := func(name string, attempt int, permanent bool, delay time.Duration, retryAt time.Time, why string) step {
		start := holding(attempt, transitionNow.Add(time.Minute))
		start.DueAt = start.LeaseExpiresAt.Add(evMargin)
		final := retryAt.IsZero()
		return step{name: name, start: start, why: why,
			ev: event{kind: evFail, worker: "worker-a", attempt: attempt, errMsg: "boom", permanent: permanent, retryDelay: delay},
			want: becomes(func(t *record) {
				t.Status = StatusFailed
				t.LastError = "boom"
				t.LeaseExpiresAt = time.Time{}
				t.RetryAt = retryAt
				ended(t, OutcomeFailed, transitionNow, "", "boom")
				if !final {
					t.DueAt = retryAt // the marker moves to the retry
				} // a final failure keeps DueAt: it has no marker, or its notice's
			}),
			check: func(t *testing.T, next *record) {
				if next.Terminal() != final || next.pending() == final || !next.Retryable() {
					t.Errorf("Terminal() = %v, pending() = %v, Retryable() = %v; want %v, %v, true (%s)", next.Terminal(), next.pending(), next.Retryable(), final, !final, why)
				}
			}}
	}
	runSteps(t, []step{
		fail("attempts left", 2, false, 5*time.Minute, transitionNow.Add(5*time.Minute), ""),
		fail("attempts left, no delay", 1, false, 0, transitionNow, "due at once but still scheduled"),
		fail("attempts left, negative delay", 2, false, -time.Hour, transitionNow, "a negative delay counts as zero"),
		fail("last attempt", 3, false, 5*time.Minute, time.Time{}, "no attempt left: final"),
		fail("permanent error", 1, true, 5*time.Minute, time.Time{}, "the handler asked not to retry"),
	})
}

func TestTransitionLeaseExpired(t *testing.T) {
	t.Parallel()

	lease := transitionNow
	// expire expires the lease of attempt at now; status is what the task
	// becomes, "" if the lease is live.
	expire := func(name string, attempt int, now time.Time, status Status, why string) step {
		start := holding(attempt, lease)
		start.DueAt = lease.Add(evMargin)
		s := step{name: name, start: start, ev: event{kind: evLeaseExpired}, at: now, want: denied, why: why}
		if status == "" {
			return s
		}
		s.want = becomes(func(t *record) {
			t.Status = status
			t.WorkerID, t.LeaseExpiresAt = "", time.Time{}
			t.ErrorCategory = CategoryLeaseExpired
			t.DueAt = now                                                  // due at once: for a new attempt, or its notice
			ended(t, OutcomeLeaseExpired, lease, CategoryLeaseExpired, "") // when the lease ran out, not when it was found
		})
		s.ignore = gocmp.Options{cmpopts.IgnoreFields(Task{}, "LastError"), cmpopts.IgnoreFields(Attempt{}, "Error")}
		s.check = func(t *testing.T, next *record) {
			if got := next.History[len(next.History)-1].Error; got != next.LastError {
				t.Errorf("history entry's error %q, want the record's last error %q", got, next.LastError)
			}
			for _, part := range []string{"worker-a", fmt.Sprintf("attempt %d", attempt)} {
				if !strings.Contains(next.LastError, part) {
					t.Errorf("LastError = %q, want it to mention %q", next.LastError, part)
				}
			}
			if wantFinal := status == StatusFailed; next.Terminal() != wantFinal || !next.RetryAt.IsZero() {
				t.Errorf("Terminal() = %v, RetryAt = %v; want %v and no retry scheduled (%s)", next.Terminal(), next.RetryAt, wantFinal, why)
			}
		}
		return s
	}
	runSteps(t, []step{
		expire("lease live", 2, lease.Add(-time.Second), "", ""),
		expire("last instant of the lease", 2, lease, "", "expiry needs a clock past the lease end"),
		expire("expired, attempts left", 2, lease.Add(time.Nanosecond), StatusQueued, ""),
		expire("expired long ago, attempts left", 1, lease.Add(24*time.Hour), StatusQueued, ""),
		expire("expired, no attempt left", 3, lease.Add(time.Second), StatusFailed, "final, not scheduled"),
	})
}

func TestTransitionReleaseGivesAttemptBack(t *testing.T) {
	t.Parallel()

	start := holding(3, transitionNow.Add(time.Minute)) // the last attempt
	start.DueAt = start.LeaseExpiresAt.Add(evMargin)
	next := step{start: start, ev: event{kind: evRelease, worker: "worker-a", attempt: 3},
		want: becomes(func(t *record) {
			t.Status = StatusQueued
			t.ReleasedAttempts = 1 // max_attempts stays as created
			t.WorkerID, t.LeaseExpiresAt = "", time.Time{}
			t.ErrorCategory = CategoryShutdown
			t.DueAt = transitionNow // another worker may take it at once
			ended(t, OutcomeReleased, transitionNow, CategoryShutdown, "")
		}),
		ignore: gocmp.Options{cmpopts.IgnoreFields(Task{}, "LastError"), cmpopts.IgnoreFields(Attempt{}, "Error")},
	}.run(t)
	if next.LastError == "" || next.History[0].Error != next.LastError {
		t.Errorf("LastError %q, history's error %q; want a note that the attempt was interrupted, in both", next.LastError, next.History[0].Error)
	}

	// The interrupted attempt did not count: the task can run once more.
	again, write, err := transition(next, event{kind: evClaim, worker: "worker-b", lease: time.Minute}, transitionNow)
	if err != nil || !write || again.Attempt != 4 || again.AttemptsUsed() != 3 || again.MaxAttempts != 3 {
		t.Errorf("claim after release = (%+v, %v, %v), want attempt 4 running", again, write, err)
	}
}

// afterRun is a task whose attempt n of 3 is held by worker-a, as holding
// makes it, whose history shows before it the attempts n-len(earlier) to
// n-1 with the outcomes earlier, oldest first (each attempt that was given
// back uncounted, as ReleasedAttempts keeps them).
func afterRun(n int, earlier ...AttemptOutcome) *record {
	t := holding(n, transitionNow.Add(time.Minute))
	t.DueAt = t.LeaseExpiresAt.Add(evMargin)
	var h []Attempt
	for i, o := range earlier {
		num := n - len(earlier) + i
		category := ""
		switch o {
		case OutcomeReleased:
			category = CategoryShutdown
			t.ReleasedAttempts++
		case OutcomeFailed:
			category = CategoryTransient
		case OutcomeLeaseExpired:
			category = CategoryLeaseExpired
		}
		h = append(h, ranAttempt(num, "worker-z", o, category, ""))
	}
	t.History = append(h, t.History...)
	return t
}

// releasedTimes is n outcomes OutcomeReleased.
func releasedTimes(n int) []AttemptOutcome {
	return slices.Repeat([]AttemptOutcome{OutcomeReleased}, n)
}

// TestTransitionReleaseLimit: a give-back of an attempt that follows
// releaseLimit attempts in a row given back fails the task for good, with
// CategoryTimeout; one that follows fewer goes back to the queue, as does
// any give-back without a limit. Only the attempts right before it count:
// an attempt that ended otherwise, or an attempt the history has no entry
// for, ends the run.
func TestTransitionReleaseLimit(t *testing.T) {
	t.Parallel()

	type row struct {
		name  string
		start *record
		limit int
		fails bool
		why   string
	}
	rows := []row{
		{"first give-back", afterRun(1), 3, false, "no attempt before it"},
		{"cap-1 give-backs", afterRun(3, releasedTimes(1)...), 2, false, "the second in a row of a limit of 2"},
		{"cap give-backs", afterRun(3, releasedTimes(2)...), 3, false, "the third in a row of a limit of 3: the last allowed"},
		{"cap+1 give-backs", afterRun(4, releasedTimes(3)...), 3, true, "the fourth in a row of a limit of 3"},
		{"well past the cap", afterRun(7, releasedTimes(6)...), 3, true, "a limit lowered since: still past it"},
		{"limit of 1, second give-back", afterRun(2, releasedTimes(1)...), 1, true, ""},
		{"no limit", afterRun(10, releasedTimes(9)...), 0, false, "a long-lived worker's shutdown never fails a task by default"},
		{"failed attempt in between", afterRun(6, OutcomeReleased, OutcomeReleased, OutcomeFailed, OutcomeReleased, OutcomeReleased), 3, false, "the run since the failure is 2"},
		{"expired lease in between", afterRun(5, OutcomeReleased, OutcomeReleased, OutcomeReleased, OutcomeLeaseExpired), 3, false, "the attempt just before counted against MaxAttempts"},
		{"completed attempt in between", afterRun(5, OutcomeReleased, OutcomeReleased, OutcomeReleased, OutcomeCompleted), 3, false, "any outcome but released ends the run (a hand-edited record)"},
		{"outcome of a later version", afterRun(5, OutcomeReleased, OutcomeReleased, OutcomeReleased, "paused"), 3, false, "an outcome this version does not name is not a give-back"},
		{"run right before the failure", afterRun(7, OutcomeFailed, OutcomeReleased, OutcomeReleased, OutcomeReleased, OutcomeReleased, OutcomeReleased), 3, true, "five in a row since the failure"},
		{"history trimmed at the limit, all given back", afterRun(15, releasedTimes(HistoryLimit-1)...), HistoryLimit - 1, true, "attempts 6 to 14 of 15: the largest run the history can show"},
		{"history trimmed at the limit, one short", afterRun(15, append([]AttemptOutcome{OutcomeFailed}, releasedTimes(HistoryLimit-2)...)...), HistoryLimit - 1, false, "attempt 6 failed: 8 in a row"},
	}

	// A record whose running attempt has no entry (claimed by an earlier
	// version of the library): the earlier entries still count.
	unlisted := afterRun(4, releasedTimes(3)...)
	unlisted.History = unlisted.History[:3]
	rows = append(rows, row{"running attempt not in the history", unlisted, 3, true, "attempts 1 to 3 given back"})

	// A gap in the history: attempt 3 has no entry, so the run cannot be
	// told past it.
	gap := afterRun(6, releasedTimes(5)...)
	gap.History = slices.Delete(gap.History, 2, 3)
	rows = append(rows, row{"gap in the history", gap, 3, false, "attempts 4 and 5 in a row, then an attempt the history does not show"})

	var steps []step
	for _, r := range rows {
		if len(r.start.History) > HistoryLimit {
			t.Fatalf("%s: the start record has %d history entries, over HistoryLimit", r.name, len(r.start.History))
		}
		s := step{name: r.name, start: r.start, why: r.why,
			ev:     event{kind: evRelease, worker: "worker-a", attempt: r.start.Attempt, releaseLimit: r.limit},
			ignore: gocmp.Options{cmpopts.IgnoreFields(Task{}, "LastError"), cmpopts.IgnoreFields(Attempt{}, "Error")},
		}
		if r.fails {
			s.want = becomes(func(t *record) {
				t.Status = StatusFailed
				t.ErrorCategory = CategoryTimeout
				t.LeaseExpiresAt = time.Time{} // DueAt and WorkerID stay, as a final failure's do
				if t.History[len(t.History)-1].Number != t.Attempt {
					t.History = append(t.History, Attempt{Number: t.Attempt, WorkerID: t.WorkerID, StartedAt: t.StartedAt})
				}
				ended(t, OutcomeFailed, transitionNow, CategoryTimeout, "")
			})
			s.check = func(t *testing.T, next *record) {
				// The running attempt counts, as a failed one does: the
				// attempts used stay as they were while it ran.
				if !next.Terminal() || !next.Retryable() || next.ReleasedAttempts != r.start.ReleasedAttempts {
					t.Errorf("Terminal() %v, Retryable() %v, ReleasedAttempts %d; want a final failure whose attempt counts (%d released before) (%s)",
						next.Terminal(), next.Retryable(), next.ReleasedAttempts, r.start.ReleasedAttempts, r.why)
				}
				for _, part := range []string{fmt.Sprintf("attempt %d", r.start.Attempt), fmt.Sprintf("limit is %d", r.limit)} {
					if !strings.Contains(next.LastError, part) {
						t.Errorf("LastError %q does not say %q", next.LastError, part)
					}
				}
				if got := next.History[len(next.History)-1].Error; got != next.LastError {
					t.Errorf("the attempt's entry says %q; want the record's last error %q", got, next.LastError)
				}
			}
		} else {
			s.want = becomes(func(t *record) {
				t.Status = StatusQueued
				t.ReleasedAttempts++
				t.ErrorCategory = CategoryShutdown
				t.WorkerID, t.LeaseExpiresAt = "", time.Time{}
				t.DueAt = transitionNow
				ended(t, OutcomeReleased, transitionNow, CategoryShutdown, "")
			})
		}
		steps = append(steps, s)
	}
	runSteps(t, steps)
}

// TestTransitionReleaseLimitCycle: claimed and given back again and again
// with a limit of 3, a task goes back to the queue three times and fails
// at the fourth give-back, using one attempt; an operator's Retry starts
// the count again. With the largest limit, the run fills the history as
// it is trimmed.
func TestTransitionReleaseLimitCycle(t *testing.T) {
	t.Parallel()

	for _, limit := range []int{1, 3, HistoryLimit - 1} {
		t.Run(fmt.Sprint("limit ", limit), func(t *testing.T) {
			task := baseRecord()
			task.Status, task.DueAt = StatusQueued, transitionNow
			now := transitionNow
			// cycle claims task and gives it back, and returns how many
			// give-backs went back to the queue before one failed it.
			cycle := func() int {
				for queued := 0; ; queued++ {
					now = now.Add(time.Minute)
					next, _, err := transition(task, event{kind: evClaim, worker: "fn", lease: time.Minute, margin: time.Second}, now)
					if err != nil {
						t.Fatalf("claim after %d give-backs: %v", queued, err)
					}
					task = next
					if next, _, err = transition(task, event{kind: evRelease, worker: "fn", attempt: task.Attempt, releaseLimit: limit}, now.Add(time.Second)); err != nil {
						t.Fatalf("give-back %d: %v", queued+1, err)
					}
					task = next
					if task.Status == StatusFailed {
						return queued
					}
					if task.Status != StatusQueued || queued > 2*HistoryLimit {
						t.Fatalf("give-back %d left the task %s", queued+1, task.Status)
					}
				}
			}
			if got := cycle(); got != limit {
				t.Fatalf("%d give-backs went back to the queue before one failed the task; want %d", got, limit)
			}
			if task.ErrorCategory != CategoryTimeout || task.AttemptsUsed() != 1 || !task.Terminal() {
				t.Errorf("failed with category %q, %d attempts used, terminal %v; want %q, 1, true", task.ErrorCategory, task.AttemptsUsed(), task.Terminal(), CategoryTimeout)
			}
			retried, _, err := transition(task, event{kind: evRetry}, now)
			if err != nil {
				t.Fatal(err)
			}
			task = retried
			if got := cycle(); got != limit {
				t.Errorf("after a Retry, %d give-backs went back to the queue; want %d again", got, limit)
			}
		})
	}
}

func TestTransitionRetry(t *testing.T) {
	t.Parallel()

	retry := func(name string, attempt, maxAttempts int, retryAt time.Time, wantMax int, why string) step {
		start := fresh(func(t *record) {
			t.Status, t.Attempt, t.MaxAttempts = StatusFailed, attempt, maxAttempts
			t.RetryAt, t.DueAt = retryAt, retryAt
			if retryAt.IsZero() {
				t.DueAt = transitionNow.Add(-time.Hour) // the end of the failed attempt's lease
			}
			t.LastError = "boom"
		})()
		return step{name: name, start: start, ev: event{kind: evRetry}, why: why,
			want: becomes(func(t *record) {
				t.Status = StatusQueued
				t.RetryAt = time.Time{}
				t.MaxAttempts = wantMax
				t.DueAt = transitionNow // due at once, whatever the retry was scheduled for
			}),
			check: func(t *testing.T, next *record) {
				if _, _, err := transition(next, event{kind: evClaim, worker: "w", lease: time.Minute}, transitionNow); err != nil {
					t.Errorf("claim right after retry = %v, want it allowed (%s)", err, why)
				}
			}}
	}
	runSteps(t, []step{
		retry("final at max attempts", 3, 3, time.Time{}, 4, "one more attempt than used"),
		retry("final past max attempts", 5, 3, time.Time{}, 6, "as above; never below Attempt+1"),
		retry("final by permanent error", 1, 3, time.Time{}, 3, "attempts are left; nothing to raise"),
		retry("scheduled retry", 1, 3, transitionNow.Add(time.Hour), 3, "the operator skips the wait"),
	})
}

func TestTransitionCancel(t *testing.T) {
	t.Parallel()

	cancel := func(reason string, notify bool) event { return event{kind: evCancel, reason: reason, notify: notify} }
	queued := fresh(func(t *record) { t.Status, t.DueAt = StatusQueued, transitionNow.Add(-time.Minute) })()
	steps := []step{{
		name:  "abandoned is a no-op",
		start: fresh(func(t *record) { t.Status, t.CancelReason = StatusAbandoned, "first" })(),
		ev:    cancel("second", false), want: unchanged,
		check: func(t *testing.T, next *record) {
			if next.CancelReason != "first" {
				t.Errorf("cancel of abandoned changed the reason to %q", next.CancelReason)
			}
		},
	}, {
		name:  "completed is denied",
		start: fresh(func(t *record) { t.Status = StatusCompleted })(),
		ev:    cancel("", false), want: denied,
	}, {
		name:  "scheduled retry is dropped",
		start: fresh(func(t *record) { t.Status, t.Attempt, t.RetryAt = StatusFailed, 1, transitionNow.Add(time.Hour) })(),
		ev:    cancel("r", false), want: written,
		check: func(t *testing.T, next *record) {
			if !next.RetryAt.IsZero() || next.pending() || !next.Terminal() {
				t.Errorf("cancelled: RetryAt = %v, pending() = %v, Terminal() = %v; want zero, false, true", next.RetryAt, next.pending(), next.Terminal())
			}
		},
	}, {
		name:  "queued with a notice keeps its due time",
		start: queued,
		ev:    cancel("r", true), want: written,
		check: func(t *testing.T, next *record) {
			if !next.DueAt.Equal(queued.DueAt) || !next.NotifyPending {
				t.Errorf("cancel of queued with a notice: DueAt %v, NotifyPending %v; want %v (its marker stays), true", next.DueAt, next.NotifyPending, queued.DueAt)
			}
		},
	}}
	// With a notice, from every start state: a notice left pending is due
	// now, so a task due later (a start or a retry still ahead, a lease's
	// end) is due now; one due already keeps its marker; a final failure
	// cancelled is a new result, with a notice of its own, and a marker
	// due now: the one its due time names went with its own notice, and a
	// worker that reads the record before the cancel lands deletes it.
	abandonedWith := func(pending bool, due time.Time) outcome {
		return becomes(func(t *record) {
			if t.Status == StatusRunning { // the attempt ends with the task
				ended(t, OutcomeCanceled, transitionNow, "", "")
			}
			t.Status = StatusAbandoned
			t.CancelReason = "r"
			t.RetryAt, t.LeaseExpiresAt = time.Time{}, time.Time{}
			t.NotifyPending = pending
			if !due.IsZero() {
				t.DueAt = due
			}
		})
	}
	withNotice := map[string]outcome{
		"created":                 abandonedWith(true, transitionNow), // had no due time at all
		"created, scheduled":      abandonedWith(true, transitionNow), // nor this one: it was never queued
		"created, without input":  abandonedWith(true, transitionNow), // as created
		"queued":                  abandonedWith(true, time.Time{}),   // due already: keeps its marker
		"queued, scheduled":       abandonedWith(true, transitionNow), // not at its start, half an hour ahead
		"running":                 abandonedWith(true, transitionNow), // not at its lease's end
		"completed":               denied,
		"failed, retry scheduled": abandonedWith(true, time.Time{}),   // the retry fell due already
		"failed, final":           abandonedWith(true, transitionNow), // a new result; its marker went with the notice, and the new one needs a name of its own
		"abandoned":               unchanged,
		"completed, being purged": denied,
	}
	for _, st := range startStates() {
		want, ok := withNotice[st.name]
		if !ok {
			t.Errorf("start state %q has no expectation for a cancel with a notice", st.name)
			continue
		}
		steps = append(steps, step{name: "with a notice/" + st.name, start: st.build(), ev: cancel("r", true), want: want})
	}
	steps = append(steps, step{
		name: "with a notice/failed, retry ahead",
		start: submittedAs(StatusFailed, 1, "worker-z", func(t *record) {
			t.RetryAt = transitionNow.Add(time.Hour)
			t.DueAt = t.RetryAt
		})(),
		ev: cancel("r", true), want: abandonedWith(true, transitionNow),
		why: "the notice is due now, not at the retry an hour ahead",
	}, step{
		name: "with an earlier notice pending/failed, final, lease end ahead",
		start: submittedAs(StatusFailed, 1, "worker-z", func(t *record) {
			t.NotifyPending = true                   // the failure's notice, not delivered yet
			t.DueAt = transitionNow.Add(time.Minute) // the end of the lease it failed in
		})(),
		ev: cancel("r", false), want: abandonedWith(true, transitionNow),
		why: "the pending notice is due now, whoever cancels",
	}, step{
		name: "without a notice/failed, retry ahead",
		start: submittedAs(StatusFailed, 1, "worker-z", func(t *record) {
			t.RetryAt = transitionNow.Add(time.Hour)
			t.DueAt = t.RetryAt
		})(),
		ev: cancel("r", false), want: abandonedWith(false, time.Time{}),
		why: "no notice: nothing is due, and the marker just goes",
	})
	// A created task has no marker, nor a DueAt; its cancel gives it one
	// only when a notice is to go out, due at once.
	for _, notify := range []bool{false, true} {
		wantDue := time.Time{}
		if notify {
			wantDue = transitionNow
		}
		steps = append(steps, step{
			name:  fmt.Sprintf("created with a notice is due now/notify=%v", notify),
			start: baseRecord(),
			ev:    cancel("r", notify), want: written,
			check: func(t *testing.T, next *record) {
				if !next.DueAt.Equal(wantDue) || next.NotifyPending != notify || next.needsMarker() != notify {
					t.Errorf("cancel of created (notify %v): DueAt %v, NotifyPending %v, needsMarker %v; want %v, %v, %v", notify, next.DueAt, next.NotifyPending, next.needsMarker(), wantDue, notify, notify)
				}
			},
		})
	}
	runSteps(t, steps)
}

func TestTransitionUnknownEvent(t *testing.T) {
	t.Parallel()

	for _, k := range []eventKind{0, slices.Max(allEventKinds) + 1, -1} {
		start := baseRecord()
		next, write, err := transition(start, event{kind: k}, transitionNow)
		if !errors.Is(err, ErrInvalidTransition) || next != nil || write {
			t.Errorf("transition with event kind %d = (%v, %v, %v), want an ErrInvalidTransition", k, next, write, err)
		}
	}
}

func TestTransitionLifecycle(t *testing.T) {
	t.Parallel()

	// One task through a failed attempt and a successful one, checking the
	// marker and terminal predicates after each step.
	// It also checks DueAt, which names the task's marker, after each step.
	const margin = 3 * time.Second
	steps := []struct {
		ev          event
		at          time.Duration // after transitionNow
		wantStatus  Status
		wantPending bool
		wantDue     time.Duration // after transitionNow
	}{
		{ev: event{kind: evSubmit, inputETag: "e", inputSize: 1}, wantStatus: StatusQueued, wantPending: true, wantDue: 0},
		{ev: event{kind: evClaim, worker: "w1", lease: time.Minute, margin: margin}, wantStatus: StatusRunning, wantPending: true, wantDue: time.Minute + margin},
		{ev: event{kind: evHeartbeat, worker: "w1", attempt: 1, lease: time.Minute, margin: margin, progress: &Progress{ProcessedCount: 1}}, at: 20 * time.Second, wantStatus: StatusRunning, wantPending: true, wantDue: time.Minute + margin},
		{ev: event{kind: evHeartbeat, worker: "w1", attempt: 1, lease: time.Minute, margin: margin, move: true, progress: &Progress{ProcessedCount: 2}}, at: 40 * time.Second, wantStatus: StatusRunning, wantPending: true, wantDue: 100*time.Second + margin},
		{ev: event{kind: evFail, worker: "w1", attempt: 1, errMsg: "boom", retryDelay: time.Minute}, at: time.Minute, wantStatus: StatusFailed, wantPending: true, wantDue: 2 * time.Minute},
		{ev: event{kind: evClaim, worker: "w2", lease: time.Minute, margin: margin}, at: 2 * time.Minute, wantStatus: StatusRunning, wantPending: true, wantDue: 3*time.Minute + margin},
		{ev: event{kind: evComplete, worker: "w2", attempt: 2, output: "out"}, at: 150 * time.Second, wantStatus: StatusCompleted, wantDue: 3*time.Minute + margin},
	}
	task := baseRecord()
	for i, s := range steps {
		next, write, err := transition(task, s.ev, transitionNow.Add(s.at))
		if err != nil || !write {
			t.Fatalf("step %d (%s) = (_, %v, %v), want a write", i, s.ev.kind, write, err)
		}
		if next.Status != s.wantStatus || next.pending() != s.wantPending || next.Terminal() == s.wantPending {
			t.Errorf("step %d (%s): status %s, pending() %v, Terminal() %v; want %s, %v, %v", i, s.ev.kind, next.Status, next.pending(), next.Terminal(), s.wantStatus, s.wantPending, !s.wantPending)
		}
		if want := transitionNow.Add(s.wantDue); !next.DueAt.Equal(want) {
			t.Errorf("step %d (%s): DueAt %v, want %v", i, s.ev.kind, next.DueAt, want)
		}
		task = next
	}
	if task.Attempt != 2 || task.OutputPath != "out" || task.LastError != "" || task.Progress != (Progress{}) {
		t.Errorf("final record: attempt %d, output %q, last error %q, progress %+v; want 2, \"out\", \"\", zero", task.Attempt, task.OutputPath, task.LastError, task.Progress)
	}
	// Attempt 1's error outlives LastError, in the history.
	wantHistory := []Attempt{
		{Number: 1, WorkerID: "w1", StartedAt: transitionNow, EndedAt: transitionNow.Add(time.Minute), Outcome: OutcomeFailed, Error: "boom"},
		{Number: 2, WorkerID: "w2", StartedAt: transitionNow.Add(2 * time.Minute), EndedAt: transitionNow.Add(150 * time.Second), Outcome: OutcomeCompleted},
	}
	if diff := gocmp.Diff(wantHistory, task.History); diff != "" {
		t.Errorf("final history (-want +got):\n%s", diff)
	}
}

func TestTaskPredicates(t *testing.T) {
	t.Parallel()

	type preds struct{ Terminal, Retryable, Cancelable, Pending, Scheduled bool }
	want := map[string]preds{
		"created":                 {Cancelable: true},
		"created, scheduled":      {Cancelable: true}, // not queued yet
		"created, without input":  {Cancelable: true},
		"queued":                  {Cancelable: true, Pending: true},
		"queued, scheduled":       {Cancelable: true, Pending: true, Scheduled: true},
		"running":                 {Cancelable: true, Pending: true},
		"completed":               {Terminal: true},
		"failed, retry scheduled": {Retryable: true, Cancelable: true, Pending: true},
		"failed, final":           {Terminal: true, Retryable: true, Cancelable: true},
		"abandoned":               {Terminal: true},
		"completed, being purged": {Terminal: true},
	}
	for _, st := range startStates() {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()

			task := st.build()
			w, ok := want[st.name]
			if !ok {
				t.Fatalf("no expected predicates for %q", st.name)
			}
			got := preds{task.Terminal(), task.Retryable(), task.Cancelable(), task.pending(), task.Scheduled(transitionNow)}
			if diff := gocmp.Diff(w, got); diff != "" {
				t.Errorf("predicates differ (-want +got):\n%s", diff)
			}

			// The predicates promise what transition does; check they agree.
			_, write, err := transition(task, tableEvent(evCancel), transitionNow)
			if canceled := err == nil && write; canceled != task.Cancelable() {
				t.Errorf("Cancelable() = %v, but cancel writes = %v", task.Cancelable(), canceled)
			}
			_, _, err = transition(task, tableEvent(evRetry), transitionNow)
			if retried := err == nil; retried != task.Retryable() {
				t.Errorf("Retryable() = %v, but retry allowed = %v", task.Retryable(), retried)
			}
			_, _, err = transition(task, tableEvent(evClaim), transitionNow.Add(24*time.Hour))
			if claimable := err == nil || task.Status == StatusRunning; claimable != task.pending() {
				t.Errorf("pending() = %v, but claimable or running = %v", task.pending(), claimable)
			}
			_, _, err = transition(task, tableEvent(evClaim), transitionNow)
			if task.Scheduled(transitionNow) && err == nil {
				t.Errorf("Scheduled(now) = true, but claim now allowed")
			}
			_, _, err = transition(task, tableEvent(evSchedule), transitionNow)
			if schedulable := err == nil; schedulable != (!task.Purging && (task.Status == StatusCreated || task.Status == StatusQueued)) {
				t.Errorf("schedule allowed = %v, want it allowed exactly for a created or queued task", schedulable)
			}
			if task.Terminal() {
				for _, k := range []eventKind{evClaim, evHeartbeat, evComplete, evFail, evLeaseExpired, evRelease} {
					if _, _, err := transition(task, tableEvent(k), transitionNow.Add(24*time.Hour)); err == nil {
						t.Errorf("terminal task accepted worker event %s", k)
					}
				}
			}
		})
	}
}

func TestStatusValid(t *testing.T) {
	t.Parallel()

	for name, s := range statusConsts { // every status declared
		if !s.Valid() {
			t.Errorf("%s (%q).Valid() = false, want true", name, s)
		}
	}
	for _, s := range []Status{"", "Queued", "queued ", "cancelled", "pending"} {
		if s.Valid() {
			t.Errorf("Status(%q).Valid() = true, want false", s)
		}
	}
}

// seedRecordID is the task_id of the seed article's example record: 27
// characters, so not a valid task ID.
const seedRecordID = "7ZZZZZZZY1F801XTH00MY7XF09K"

func readSeedRecord(t testing.TB) []byte {
	t.Helper()

	data, err := os.ReadFile(filepath.Join("testdata", "seed_record.json"))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func seedRecordTask() Task {
	return Task{
		SchemaVersion:  1,
		ID:             seedRecordID,
		Name:           "June batch import",
		Status:         StatusQueued,
		Attempt:        0,
		Progress:       Progress{RowCount: 1000, ProcessedCount: 250, SuccessCount: 245, ErrorCount: 5},
		InputPath:      "batch-tasks/" + seedRecordID + "/input.csv",
		OutputPath:     "", // null in the record
		WorkerID:       "worker-8",
		LeaseExpiresAt: time.Date(2026, 6, 21, 10, 15, 0, 0, time.UTC),
		LastError:      "", // null in the record
		CreatedAt:      time.Date(2026, 6, 21, 10, 0, 0, 0, time.UTC),
		UpdatedAt:      time.Date(2026, 6, 21, 10, 5, 0, 0, time.UTC),
		CreatedBy:      "john.doe",
	}
}

func TestSeedRecordDecodes(t *testing.T) {
	t.Parallel()

	var got Task
	if err := json.Unmarshal(readSeedRecord(t), &got); err != nil {
		t.Fatalf("json.Unmarshal(seed record) = %v", err)
	}
	if diff := gocmp.Diff(seedRecordTask(), got); diff != "" {
		t.Errorf("seed record decoded differently (-want +got):\n%s", diff)
	}
}

func TestSeedRecordThroughDecodeTask(t *testing.T) {
	t.Parallel()

	data := readSeedRecord(t)
	if err := ParseID(seedRecordID); !errors.Is(err, ErrInvalidID) {
		t.Errorf("ParseID(%q) = %v, want ErrInvalidID", seedRecordID, err)
	}

	// Under a valid ID's key, the seed's own task_id does not match.
	task, err := decodeTask(recordKey, knownGoodID, data, 3)
	checkRecordError(t, task, err, ErrCorruptRecord)

	// With a valid task_id, the rest of the seed is a good version-1 record;
	// it has no max_attempts, so it gets the default.
	fixed := bytes.ReplaceAll(data, []byte(seedRecordID), []byte(knownGoodID))
	task, err = decodeTask(recordKey, knownGoodID, fixed, 3)
	if err != nil {
		t.Fatalf("decodeTask(seed with a valid ID) = %v", err)
	}
	want := seedRecordTask()
	want.ID = knownGoodID
	want.InputPath = "batch-tasks/" + knownGoodID + "/input.csv"
	want.MaxAttempts = 3
	if diff := gocmp.Diff(&want, &task.Task); diff != "" {
		t.Errorf("decodeTask(seed) differs (-want +got):\n%s", diff)
	}
}

// goldenTask has every field set, at fixed UTC times.
func goldenTask() *record {
	return &record{Task: Task{
		SchemaVersion:    SchemaVersion,
		ID:               knownGoodID,
		Type:             "csv-import",
		Name:             "June batch import",
		Payload:          json.RawMessage(`{"delimiter":";","sheet":"june"}`),
		Status:           StatusFailed,
		Attempt:          2,
		MaxAttempts:      5,
		LastError:        "attempt 2: row 7 is malformed",
		RetryAt:          time.Date(2026, 6, 21, 10, 20, 0, 0, time.UTC),
		RunAt:            time.Date(2026, 6, 21, 10, 1, 0, 0, time.UTC),
		DueAt:            time.Date(2026, 6, 21, 10, 20, 0, 0, time.UTC),
		CancelReason:     "kept from an earlier cancel",
		ErrorCategory:    "bad_input",
		Purging:          true,
		WorkerID:         "worker-8",
		LeaseExpiresAt:   time.Date(2026, 6, 21, 10, 15, 0, 500_000_000, time.UTC),
		Progress:         Progress{RowCount: 1000, ProcessedCount: 250, SuccessCount: 245, ErrorCount: 5},
		Counters:         map[string]int64{"pages": 40, "images.resized": 3},
		InputPath:        "batch-tasks/" + knownGoodID + "/input.csv",
		InputSize:        123456,
		OutputPath:       "batch-tasks/" + knownGoodID + "/output-attempt-1.csv",
		CreatedAt:        time.Date(2026, 6, 21, 10, 0, 0, 0, time.UTC),
		UpdatedAt:        time.Date(2026, 6, 21, 10, 5, 0, 0, time.UTC),
		CreatedBy:        "john.doe",
		SubmittedAt:      time.Date(2026, 6, 21, 10, 0, 30, 0, time.UTC),
		StartedAt:        time.Date(2026, 6, 21, 10, 4, 0, 0, time.UTC),
		Metadata:         map[string]string{"tenant": "acme", "request_id": "req-7"},
		IdempotencyKey:   "june-import-2026",
		KeyScope:         "acme",
		NoInput:          true, // pinned here with the rest; a real task without input has no InputPath
		Revision:         "6b1f0c2e9a7d4e58",
		ReleasedAttempts: 1,
		History: []Attempt{{
			Number: 1, WorkerID: "worker-7", StartedAt: time.Date(2026, 6, 21, 10, 1, 0, 0, time.UTC), EndedAt: time.Date(2026, 6, 21, 10, 3, 0, 0, time.UTC),
			Outcome: OutcomeReleased, ErrorCategory: CategoryShutdown, Error: "attempt 1: interrupted by worker shutdown", HeartbeatInterval: 20 * time.Second,
		}, {
			Number: 2, WorkerID: "worker-8", StartedAt: time.Date(2026, 6, 21, 10, 4, 0, 0, time.UTC), EndedAt: time.Date(2026, 6, 21, 10, 5, 0, 0, time.UTC),
			Outcome: OutcomeFailed, ErrorCategory: "bad_input", Error: "attempt 2: row 7 is malformed", HeartbeatInterval: 2500 * time.Millisecond,
		}},
	},
		InputETag:      `"d41d8cd98f00b204e9800998ecf8427e"`,
		NotifyPending:  true,
		Writes:         9,
		PriorRevisions: []string{"0c4d5e6f7a8b9c0d", "1e2f3a4b5c6d7e8f"},
	}
}

// zeroFields returns the names of v's zero fields, looking inside embedded
// structs.
func zeroFields(v reflect.Value) []string {
	var zero []string
	for i := range v.NumField() {
		f, sf := v.Field(i), v.Type().Field(i)
		if sf.Anonymous && f.Kind() == reflect.Struct {
			zero = append(zero, zeroFields(f)...)
			continue
		}
		if f.IsZero() {
			zero = append(zero, sf.Name)
		}
	}
	return zero
}

func TestTaskGolden(t *testing.T) {
	t.Parallel()

	task := goldenTask()
	if zero := zeroFields(reflect.ValueOf(*task)); len(zero) > 0 {
		t.Fatalf("goldenTask leaves fields zero: %v; set them so the golden file pins their encoding", zero)
	}
	enc, err := encodeRecord(task)
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if err := json.Indent(&got, enc, "", "  "); err != nil {
		t.Fatal(err)
	}
	got.WriteByte('\n')

	path := filepath.Join("testdata", "task_golden.json")
	if *update {
		if err := os.WriteFile(path, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run TestTaskGolden -update to create it)", err)
	}
	if diff := gocmp.Diff(string(want), got.String()); diff != "" {
		t.Errorf("encoding of the full record changed (-%s +got); run with -update if intended:\n%s", path, diff)
	}

	// The golden file is also a record the decoder accepts as it is.
	decoded, err := decodeTask(recordKey, knownGoodID, want, 1)
	if err != nil {
		t.Fatalf("decodeTask(golden) = %v", err)
	}
	if diff := gocmp.Diff(task, decoded, payloadMeaning); diff != "" {
		t.Errorf("decodeTask(golden) differs (-want +got):\n%s", diff)
	}
}

func TestTaskJSONRoundTrip(t *testing.T) {
	t.Parallel()

	tasks := map[string]*record{"golden": goldenTask()}
	for _, st := range startStates() {
		tasks[st.name] = st.build()
	}
	empty := baseRecord()
	empty.Payload = nil
	tasks["no payload"] = empty

	for name, want := range tasks {
		t.Run(name, func(t *testing.T) {
			t.Parallel()

			data, err := json.Marshal(want)
			if err != nil {
				t.Fatal(err)
			}
			var plain record
			if err := json.Unmarshal(data, &plain); err != nil {
				t.Fatal(err)
			}
			if diff := gocmp.Diff(want, &plain); diff != "" {
				t.Errorf("json round trip differs (-want +got):\n%s", diff)
			}
			got, err := decodeTask(recordKey, want.ID, data, 1)
			if err != nil {
				t.Fatal(err)
			}
			if diff := gocmp.Diff(want, got); diff != "" {
				t.Errorf("decodeTask round trip differs (-want +got):\n%s", diff)
			}
		})
	}
}

// recordJSON returns a valid version-1 record for knownGoodID, changed by
// edit (nil deletes a field).
func recordJSON(t testing.TB, edit map[string]any) []byte {
	t.Helper()

	m := map[string]any{
		"schema_version":    1,
		"task_id":           knownGoodID,
		"task_name":         "n",
		"status":            "queued",
		"attempt_id":        1,
		"max_attempts":      3,
		"input_object_path": "batch-tasks/" + knownGoodID + "/input.csv",
		"created_at":        "2026-06-21T10:00:00Z",
		"updated_at":        "2026-06-21T10:00:00Z",
		"revision":          "r",
	}
	for k, v := range edit {
		if v == nil {
			delete(m, k)
			continue
		}
		m[k] = v
	}
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// entryJSON returns an attempt_history entry for attempt 1, failed,
// changed by edit (nil deletes a field).
func entryJSON(edit map[string]any) map[string]any {
	m := map[string]any{
		"attempt": 1, "worker_id": "worker-a", "started_at": "2026-06-21T10:00:00Z", "ended_at": "2026-06-21T10:01:00Z",
		"outcome": "failed", "error_category": "transient", "error": "boom", "heartbeat_interval_ms": 20000,
	}
	for k, v := range edit {
		if v == nil {
			delete(m, k)
			continue
		}
		m[k] = v
	}
	return m
}

// entriesJSON returns an attempt_history of n failed attempts.
func entriesJSON(n int) []any {
	var out []any
	for i := range n {
		out = append(out, entryJSON(map[string]any{"attempt": i + 1}))
	}
	return out
}

// checkRecordError fails t unless err is a *RecordError for recordKey
// wrapping sentinel (and not the other record sentinel), and task is nil.
func checkRecordError(t *testing.T, task *record, err, sentinel error) {
	t.Helper()

	if task != nil {
		t.Errorf("decodeTask returned a task %+v with error %v", task, err)
	}
	if !errors.Is(err, sentinel) {
		t.Fatalf("decodeTask error = %v, want one wrapping %v", err, sentinel)
	}
	other := ErrCorruptRecord
	if sentinel == ErrCorruptRecord {
		other = ErrUnsupportedSchema
	}
	if errors.Is(err, other) {
		t.Errorf("decodeTask error %v wraps both %v and %v", err, sentinel, other)
	}
	var re *RecordError
	if !errors.As(err, &re) {
		t.Fatalf("decodeTask error is %T, want *RecordError", err)
	}
	if re.Key != recordKey || !strings.Contains(err.Error(), recordKey) {
		t.Errorf("RecordError key %q, message %q; want both to name %q", re.Key, err.Error(), recordKey)
	}
}

func TestDecodeTaskRefuses(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		data []byte
		want error
		msg  string // part of the message, beyond the key
	}{
		{name: "newer schema", data: recordJSON(t, map[string]any{"schema_version": 2}), want: ErrUnsupportedSchema, msg: "schema_version 2"},
		{name: "much newer schema, other fields unknown", data: []byte(`{"schema_version": 40, "id": 7, "state": ["x"]}`), want: ErrUnsupportedSchema, msg: "schema_version 40"},
		{name: "missing schema_version", data: recordJSON(t, map[string]any{"schema_version": nil}), want: ErrCorruptRecord},
		{name: "null schema_version", data: []byte(`{"schema_version": null, "task_id": "` + knownGoodID + `", "status": "queued"}`), want: ErrCorruptRecord},
		{name: "schema 0", data: recordJSON(t, map[string]any{"schema_version": 0}), want: ErrCorruptRecord},
		{name: "negative schema", data: recordJSON(t, map[string]any{"schema_version": -1}), want: ErrCorruptRecord},
		{name: "schema as a string", data: recordJSON(t, map[string]any{"schema_version": "1"}), want: ErrCorruptRecord},
		{name: "schema as a fraction", data: recordJSON(t, map[string]any{"schema_version": 1.5}), want: ErrCorruptRecord},
		{name: "truncated", data: recordJSON(t, nil)[:40], want: ErrCorruptRecord},
		{name: "empty", data: []byte{}, want: ErrCorruptRecord},
		{name: "not JSON", data: []byte("status: queued\n"), want: ErrCorruptRecord},
		{name: "JSON null", data: []byte("null"), want: ErrCorruptRecord},
		{name: "JSON array", data: []byte("[1]"), want: ErrCorruptRecord},
		{name: "unknown status", data: recordJSON(t, map[string]any{"status": "paused"}), want: ErrCorruptRecord, msg: "paused"},
		{name: "upper-case status", data: recordJSON(t, map[string]any{"status": "QUEUED"}), want: ErrCorruptRecord},
		{name: "missing status", data: recordJSON(t, map[string]any{"status": nil}), want: ErrCorruptRecord},
		{name: "task_id of another task", data: recordJSON(t, map[string]any{"task_id": "7YC4B614QZ0000000000000000"}), want: ErrCorruptRecord},
		{name: "missing task_id", data: recordJSON(t, map[string]any{"task_id": nil}), want: ErrCorruptRecord},
		{name: "lower-case task_id", data: recordJSON(t, map[string]any{"task_id": strings.ToLower(knownGoodID)}), want: ErrCorruptRecord},
		{name: "negative attempts", data: recordJSON(t, map[string]any{"attempt_id": -1}), want: ErrCorruptRecord},
		{name: "negative max attempts", data: recordJSON(t, map[string]any{"max_attempts": -3}), want: ErrCorruptRecord},
		{name: "attempts as a string", data: recordJSON(t, map[string]any{"attempt_id": "1"}), want: ErrCorruptRecord},
		{name: "bad time", data: recordJSON(t, map[string]any{"created_at": "yesterday"}), want: ErrCorruptRecord},
		{name: "trailing garbage", data: append(recordJSON(t, nil), []byte(" {}")...), want: ErrCorruptRecord},
		{name: "history not a list", data: recordJSON(t, map[string]any{"attempt_history": "attempt 1 failed"}), want: ErrCorruptRecord},
		{name: "history entry not an object", data: recordJSON(t, map[string]any{"attempt_history": []any{1}}), want: ErrCorruptRecord},
		{name: "history entry's attempt a string", data: recordJSON(t, map[string]any{"attempt_history": []any{entryJSON(map[string]any{"attempt": "1"})}}), want: ErrCorruptRecord},
		{name: "history entry's time not a time", data: recordJSON(t, map[string]any{"attempt_history": []any{entryJSON(map[string]any{"started_at": "noon"})}}), want: ErrCorruptRecord},
		{name: "history longer than the limit", data: recordJSON(t, map[string]any{"attempt_id": HistoryLimit + 1, "attempt_history": entriesJSON(HistoryLimit + 1)}), want: ErrCorruptRecord, msg: "more than 10"},
		{name: "history entry for a later attempt", data: recordJSON(t, map[string]any{"attempt_history": entriesJSON(2)}), want: ErrCorruptRecord, msg: "attempt 2"},
		{name: "history entry for attempt 0", data: recordJSON(t, map[string]any{"attempt_history": []any{entryJSON(map[string]any{"attempt": 0})}}), want: ErrCorruptRecord},
		{name: "history out of order", data: recordJSON(t, map[string]any{"attempt_id": 2, "attempt_history": []any{entryJSON(map[string]any{"attempt": 2}), entryJSON(nil)}}), want: ErrCorruptRecord, msg: "out of order"},
		{name: "history entry repeated", data: recordJSON(t, map[string]any{"attempt_history": []any{entryJSON(nil), entryJSON(nil)}}), want: ErrCorruptRecord},
		{name: "history entry without outcome", data: recordJSON(t, map[string]any{"attempt_history": []any{entryJSON(map[string]any{"outcome": nil})}}), want: ErrCorruptRecord},
		{name: "history error over the limit", data: recordJSON(t, map[string]any{"attempt_history": []any{entryJSON(map[string]any{"error": strings.Repeat("x", HistoryErrorLimit+1)})}}), want: ErrCorruptRecord, msg: "513 bytes"},
		{name: "history worker over the limit", data: recordJSON(t, map[string]any{"attempt_history": []any{entryJSON(map[string]any{"worker_id": strings.Repeat("w", 129)})}}), want: ErrCorruptRecord},
		{name: "history category over the limit", data: recordJSON(t, map[string]any{"attempt_history": []any{entryJSON(map[string]any{"error_category": strings.Repeat("c", 129)})}}), want: ErrCorruptRecord},
		{name: "history negative heartbeat", data: recordJSON(t, map[string]any{"attempt_history": []any{entryJSON(map[string]any{"heartbeat_interval_ms": -1})}}), want: ErrCorruptRecord, msg: "out of range"},
		{name: "history heartbeat past a Duration", data: recordJSON(t, map[string]any{"attempt_history": []any{entryJSON(map[string]any{"heartbeat_interval_ms": int64(1) << 60})}}), want: ErrCorruptRecord, msg: "out of range"},
		{name: "history heartbeat a fraction", data: recordJSON(t, map[string]any{"attempt_history": []any{entryJSON(map[string]any{"heartbeat_interval_ms": 1.5})}}), want: ErrCorruptRecord},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			task, err := decodeTask(recordKey, knownGoodID, tt.data, 3)
			checkRecordError(t, task, err, tt.want)
			if err != nil && !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q does not mention %q", err, tt.msg)
			}
		})
	}
}

func TestDecodeTaskAccepts(t *testing.T) {
	t.Parallel()

	created := time.Date(2026, 6, 21, 10, 0, 0, 0, time.UTC)
	base := record{Task: Task{
		SchemaVersion: 1,
		ID:            knownGoodID,
		Name:          "n",
		Status:        StatusQueued,
		Attempt:       1,
		MaxAttempts:   3,
		InputPath:     "batch-tasks/" + knownGoodID + "/input.csv",
		CreatedAt:     created,
		UpdatedAt:     created,
		Revision:      "r",
	}}
	tests := []struct {
		name   string
		data   []byte
		change func(t *record)
		reason string
	}{
		{name: "complete", data: recordJSON(t, nil), change: func(*record) {}},
		{name: "no max_attempts", data: recordJSON(t, map[string]any{"max_attempts": nil}), change: func(t *record) { t.MaxAttempts = 5 }, reason: "gets the default"},
		{name: "max_attempts 0", data: recordJSON(t, map[string]any{"max_attempts": 0}), change: func(t *record) { t.MaxAttempts = 5 }, reason: "zero means unset"},
		{name: "max_attempts 0 after many attempts", data: recordJSON(t, map[string]any{"max_attempts": 0, "attempt_id": 7}), change: func(t *record) { t.Attempt, t.MaxAttempts = 7, 7 }, reason: "the default never falls below the attempts made"},
		{name: "unknown field", data: recordJSON(t, map[string]any{"shard": "eu-1"}), change: func(*record) {}, reason: "fields a version-1 writer added are ignored"},
		{name: "payload", data: recordJSON(t, map[string]any{"payload": map[string]any{"a": 1}}), change: func(t *record) { t.Payload = json.RawMessage(`{"a":1}`) }},
		{name: "each status", data: recordJSON(t, map[string]any{"status": "abandoned"}), change: func(t *record) { t.Status = StatusAbandoned }},
		{name: "run_at and due_at", data: recordJSON(t, map[string]any{"run_at": "2026-06-21T11:00:00Z", "due_at": "2026-06-21T11:00:00.25Z"}), change: func(t *record) {
			t.RunAt = created.Add(time.Hour)
			t.DueAt = created.Add(time.Hour + 250*time.Millisecond)
		}, reason: "a record of this version"},
		{name: "no attempt_history", data: recordJSON(t, map[string]any{"attempt_history": nil}), change: func(*record) {}, reason: "a record written before the history: an empty one"},
		{name: "attempt_history null", data: recordJSON(t, map[string]any{"attempt_history": json.RawMessage("null")}), change: func(*record) {}},
		{name: "attempt_history empty", data: recordJSON(t, map[string]any{"attempt_history": []any{}}), change: func(t *record) { t.History = []Attempt{} }},
		{name: "attempt_history", data: recordJSON(t, map[string]any{"attempt_id": HistoryLimit + 2, "attempt_history": entriesJSON(HistoryLimit)}), change: func(t *record) {
			t.Attempt = HistoryLimit + 2
			for i := range HistoryLimit {
				t.History = append(t.History, Attempt{Number: i + 1, WorkerID: "worker-a", StartedAt: created, EndedAt: created.Add(time.Minute),
					Outcome: OutcomeFailed, ErrorCategory: CategoryTransient, Error: "boom", HeartbeatInterval: 20 * time.Second})
			}
		}, reason: "as many entries as the limit, not necessarily from attempt 1"},
		{name: "attempt_history, minimal entry", data: recordJSON(t, map[string]any{"attempt_history": []any{map[string]any{"attempt": 1, "outcome": "running"}}}), change: func(t *record) {
			t.History = []Attempt{{Number: 1, Outcome: OutcomeRunning}}
		}, reason: "an attempt claimed by an earlier version, closed by this one, has no start nor heartbeat"},
		{name: "attempt_history, outcome of a later version", data: recordJSON(t, map[string]any{"attempt_history": []any{entryJSON(map[string]any{"outcome": "preempted"})}}), change: func(t *record) {
			t.History = []Attempt{{Number: 1, WorkerID: "worker-a", StartedAt: created, EndedAt: created.Add(time.Minute),
				Outcome: "preempted", ErrorCategory: CategoryTransient, Error: "boom", HeartbeatInterval: 20 * time.Second}}
		}, reason: "shown as it is, not refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			got, err := decodeTask(recordKey, knownGoodID, tt.data, 5)
			if err != nil {
				t.Fatalf("decodeTask = %v (%s)", err, tt.reason)
			}
			want := base
			tt.change(&want)
			if diff := gocmp.Diff(&want, got); diff != "" {
				t.Errorf("decoded record differs (-want +got) (%s):\n%s", tt.reason, diff)
			}
		})
	}
}

func TestDecodeTaskWrapsDecodingError(t *testing.T) {
	t.Parallel()

	// RecordError's documentation promises it wraps "the decoding error if
	// there is one", so a caller can inspect it with errors.As.
	t.Run("syntax", func(t *testing.T) {
		t.Parallel()

		_, err := decodeTask(recordKey, knownGoodID, recordJSON(t, nil)[:40], 3)
		var syntax *json.SyntaxError
		if !errors.As(err, &syntax) {
			t.Errorf("decodeTask(truncated) = %v; errors.As(*json.SyntaxError) = false, want true", err)
		}
	})
	t.Run("type", func(t *testing.T) {
		t.Parallel()

		_, err := decodeTask(recordKey, knownGoodID, recordJSON(t, map[string]any{"attempt_id": "1"}), 3)
		var typeErr *json.UnmarshalTypeError
		if !errors.As(err, &typeErr) {
			t.Errorf("decodeTask(attempt_id string) = %v; errors.As(*json.UnmarshalTypeError) = false, want true", err)
		}
	})
}

// payloadMeaning compares payloads by the JSON they hold, not their bytes:
// encoding compacts a RawMessage.
var payloadMeaning = gocmp.Transformer("payloadMeaning", func(r json.RawMessage) any {
	if r == nil {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(r))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "invalid: " + string(r)
	}
	return []any{v}
})

func FuzzDecodeTask(f *testing.F) {
	seed, err := os.ReadFile(filepath.Join("testdata", "seed_record.json"))
	if err != nil {
		f.Fatal(err)
	}
	golden, err := json.Marshal(goldenTask())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seedRecordID, seed)
	f.Add(knownGoodID, seed)
	f.Add(knownGoodID, bytes.ReplaceAll(seed, []byte(seedRecordID), []byte(knownGoodID)))
	f.Add(knownGoodID, golden)
	f.Add(knownGoodID, recordJSON(f, nil))
	f.Add(knownGoodID, recordJSON(f, map[string]any{"max_attempts": nil, "payload": []any{1, "x", nil}}))
	f.Add(knownGoodID, recordJSON(f, map[string]any{"schema_version": 2}))
	f.Add(knownGoodID, recordJSON(f, map[string]any{"attempt_id": -1}))
	f.Add(knownGoodID, recordJSON(f, map[string]any{"attempt_id": 3, "attempt_history": entriesJSON(3)}))
	f.Add(knownGoodID, recordJSON(f, map[string]any{"attempt_history": []any{entryJSON(map[string]any{"error": "\xff\xfe", "heartbeat_interval_ms": 1})}}))
	f.Add(knownGoodID, []byte(`{"schema_version":1,"task_id":"`+knownGoodID+`","status":"running","lease_expires_at":"2026-06-21T10:00:00.123+05:30","payload":null}`))
	f.Add("", []byte(`{"schema_version":1,"status":"created"}`))
	f.Add(knownGoodID, []byte(`{"schema_version":1`))
	f.Add(knownGoodID, []byte(`null`))

	f.Fuzz(func(t *testing.T, id string, data []byte) {
		const defaultMax = 3
		task, err := decodeTask(recordKey, id, data, defaultMax)
		if err != nil {
			if task != nil {
				t.Fatalf("decodeTask returned both a task and %v", err)
			}
			var re *RecordError
			if !errors.As(err, &re) || re.Key != recordKey {
				t.Fatalf("decodeTask error %v is not a *RecordError for %q", err, recordKey)
			}
			if errors.Is(err, ErrCorruptRecord) == errors.Is(err, ErrUnsupportedSchema) {
				t.Fatalf("decodeTask error %v wraps neither or both record sentinels", err)
			}
			return
		}
		if task.ID != id {
			t.Fatalf("decodeTask(id %q) returned task %q", id, task.ID)
		}
		if !task.Status.Valid() {
			t.Fatalf("decodeTask returned status %q", task.Status)
		}
		if task.SchemaVersion != SchemaVersion || task.Attempt < 0 || task.MaxAttempts <= 0 {
			t.Fatalf("decodeTask returned schema %d, attempt %d of %d", task.SchemaVersion, task.Attempt, task.MaxAttempts)
		}

		// Whatever is accepted can be written back and reads the same.
		again, err := json.Marshal(task)
		if err != nil {
			t.Fatalf("accepted record cannot be encoded: %v", err)
		}
		reread, err := decodeTask(recordKey, id, again, defaultMax)
		if err != nil {
			t.Fatalf("re-encoded record is refused: %v\n%s", err, again)
		}
		if diff := gocmp.Diff(task, reread, payloadMeaning); diff != "" {
			t.Fatalf("re-encoded record reads differently (-first +second):\n%s", diff)
		}
	})
}

func BenchmarkTransition(b *testing.B) {
	start := baseRecord()
	start.Status = StatusQueued
	ev := event{kind: evClaim, worker: "worker-a", lease: time.Minute}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := transition(start, ev, transitionNow); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeDecodeTask(b *testing.B) {
	task := goldenTask()
	b.ReportAllocs()
	for b.Loop() {
		data, err := encodeRecord(task) // what Store.commit writes
		if err != nil {
			b.Fatal(err)
		}
		if _, err := decodeTask(recordKey, task.ID, data, 3); err != nil {
			b.Fatal(err)
		}
	}
}

// TestTransitionNotice covers the OnTerminal bookkeeping: an event that
// finishes a task sets NotifyPending when the writer asks for a notice, and
// only then; evNotified clears it; Retry drops an undelivered notice; Purge
// waits for it.
func TestTransitionNotice(t *testing.T) {
	t.Parallel()
	byName := map[string]*record{}
	for _, st := range startStates() {
		byName[st.name] = st.build()
	}
	tests := []struct {
		name       string
		start      string
		kind       eventKind
		notify     bool
		wantNotice bool
	}{
		{"complete with a hook", "running", evComplete, true, true},
		{"complete without a hook", "running", evComplete, false, false},
		{"fail with retries left: not finished", "running", evFail, true, false},
		{"cancel with a hook", "queued", evCancel, true, true},
		{"cancel of a final failure: a new result, with its notice", "failed, final", evCancel, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := tableEvent(tt.kind)
			e.notify = tt.notify
			next, _, err := transition(byName[tt.start], e, transitionNow)
			if err != nil {
				t.Fatal(err)
			}
			if next.NotifyPending != tt.wantNotice {
				t.Errorf("NotifyPending = %v, want %v", next.NotifyPending, tt.wantNotice)
			}
		})
	}

	final := copyTask(byName["failed, final"])
	final.NotifyPending = true
	if !final.needsMarker() || final.pending() {
		t.Errorf("a finished task with a notice pending: needsMarker %v, pending %v; want true, false", final.needsMarker(), final.pending())
	}
	if _, _, err := transition(final, tableEvent(evPurge), transitionNow); !errors.Is(err, ErrInvalidTransition) {
		t.Errorf("purge with a notice pending: %v, want ErrInvalidTransition", err)
	}
	done, write, err := transition(final, tableEvent(evNotified), transitionNow)
	if err != nil || !write || done.NotifyPending {
		t.Errorf("notified: (%v, %v, %v), want the notice cleared", done, write, err)
	}
	retried, _, err := transition(final, tableEvent(evRetry), transitionNow)
	if err != nil || retried.NotifyPending {
		t.Errorf("retry: (%v, %v), want queued with no notice pending", retried, err)
	}
}

// TestTransitionPurgeSettles: Purge leaves a finished task until
// purgeSettle after its last change, to the millisecond, whatever the
// task's age (soak seed 60975: an output PUT told it failed landed 4.5 s
// later, after a Purge had emptied the folder).
func TestTransitionPurgeSettles(t *testing.T) {
	t.Parallel()
	judged := 0
	for _, st := range startStates() {
		if st.name != "completed" && st.name != "failed, final" && st.name != "abandoned" {
			continue
		}
		judged++
		r := st.build()
		r.CreatedAt = transitionNow.Add(-24 * time.Hour)
		for _, c := range []struct {
			since time.Duration
			ok    bool
		}{{0, false}, {purgeSettle - time.Millisecond, false}, {purgeSettle, true}, {time.Hour, true}} {
			r.UpdatedAt = transitionNow.Add(-c.since)
			next, write, err := transition(copyTask(r), tableEvent(evPurge), transitionNow)
			if c.ok != (err == nil) || c.ok && (!write || !next.Purging) {
				t.Errorf("%s, changed %s ago: purge = (write %v, %v); want allowed %v", st.name, c.since, write, err, c.ok)
			}
			if !c.ok && !errors.Is(err, ErrInvalidTransition) {
				t.Errorf("%s, changed %s ago: %v, want ErrInvalidTransition", st.name, c.since, err)
			}
		}
	}
	if judged != 3 {
		t.Errorf("judged %d finished start states, want 3", judged)
	}
}

func TestLanded(t *testing.T) {
	t.Parallel()

	// rec builds a record with a write count, a revision and prior ones.
	rec := func(writes int64, rev string, prior ...string) *record {
		return &record{Task: Task{Revision: rev}, Writes: writes, PriorRevisions: prior}
	}
	base := rec(4, "base", "r3", "r2", "r1")
	mine := rec(5, "mine", "base", "r3", "r2", "r1")
	full := []string{"p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8"}
	tests := []struct {
		name   string
		base   *record
		cur    *record
		want   landing
		reason string
	}{
		{"ours is the record", base, rec(5, "mine", "base"), landedHere, ""},
		{"nothing written since", base, rec(4, "base", "r3"), notLanded, "the base itself is still there"},
		{"another took our number", base, rec(5, "other", "base"), notLanded, "counts only grow, so write 5 was theirs"},
		{"ours, then one more", base, rec(6, "later", "mine", "base"), overtaken, ""},
		{"ours, then eight more", base, rec(13, "later", "p1", "p2", "p3", "p4", "p5", "p6", "p7", "mine"), overtaken, "the oldest revision remembered"},
		{"theirs, then one more", base, rec(6, "later", "other", "base"), notLanded, ""},
		{"nine more: too far back", base, rec(14, "later", full...), unknown, "the record forgets past eight"},
		{"count lost by a writer that keeps none", base, rec(0, "old-code"), unknown, ""},
		{"create, then one more", nil, rec(2, "later", "mine1"), overtaken, ""},
		{"create that lost", nil, rec(1, "other"), notLanded, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := mine
			if tc.base == nil {
				m = rec(1, "mine1")
			}
			if got := landed(tc.base, m, tc.cur); got != tc.want {
				t.Errorf("landed = %d, want %d (%s)", got, tc.want, tc.reason)
			}
		})
	}
}

func TestSucceedKeepsEightPriorRevisions(t *testing.T) {
	t.Parallel()

	cur := &record{}
	succeed(nil, cur, "r0")
	for i := 1; i <= 12; i++ {
		next := cur.clone()
		succeed(cur, next, fmt.Sprintf("r%d", i))
		cur = next
	}
	want := []string{"r11", "r10", "r9", "r8", "r7", "r6", "r5", "r4"}
	if cur.Writes != 13 || cur.Revision != "r12" || !slices.Equal(cur.PriorRevisions, want) {
		t.Errorf("after 13 writes: writes %d, revision %s, prior %v; want 13, r12, %v", cur.Writes, cur.Revision, cur.PriorRevisions, want)
	}
}

// A delivered notice is recorded only against the result it was for: once
// the task was retried and finished again, the new result keeps its own
// notice pending.
func TestTransitionNotifiedIsForOneResult(t *testing.T) {
	t.Parallel()

	done := &record{Task: Task{ID: knownGoodID, Status: StatusCompleted, Attempt: 2, MaxAttempts: 3}, NotifyPending: true}
	if _, _, err := transition(done, event{kind: evNotified, status: StatusFailed, attempt: 1}, transitionNow); !errors.Is(err, ErrInvalidTransition) {
		t.Errorf("notice of failed/1 recorded on completed/2: err %v, want ErrInvalidTransition", err)
	}
	next, write, err := transition(done, event{kind: evNotified, status: StatusCompleted, attempt: 2}, transitionNow)
	if err != nil || !write || next.NotifyPending {
		t.Errorf("notice of completed/2 = (%+v, %v, %v), want it recorded", next, write, err)
	}
}

// TestTransitionClaimJudgesStartByEarliest: a claim judges RunAt and
// RetryAt by the earliest the server's clock may read, not by the estimate
// (now), which may lead the server's clock by up to a second: a worker
// whose clock leads the server's by less than its Date headers show must
// not start a task before its RunAt, nor a retry before its time.
func TestTransitionClaimJudgesStartByEarliest(t *testing.T) {
	t.Parallel()
	at := transitionNow.Add(-100 * time.Millisecond) // due by the estimate, not yet by the earliest
	claim := event{kind: evClaim, worker: evWorker, lease: evLease, margin: evMargin, earliest: transitionNow.Add(-300 * time.Millisecond)}
	for name, task := range map[string]*record{
		"scheduled": fresh(func(t *record) { t.Status, t.RunAt, t.DueAt = StatusQueued, at, at })(),
		"retry":     submittedAs(StatusFailed, 1, "worker-z", func(t *record) { t.RetryAt, t.DueAt = at, at })(),
	} {
		if _, _, err := transition(task, claim, transitionNow); !errors.Is(err, ErrInvalidTransition) {
			t.Errorf("%s: claim at %s, earliest %s, due %s: err %v, want a refusal", name, transitionNow, claim.earliest, at, err)
		}
		late := claim
		late.earliest = at
		if _, _, err := transition(task, late, transitionNow); err != nil {
			t.Errorf("%s: claim with the earliest at its due time: %v", name, err)
		}
	}
}

// The handler's own counters travel with the progress counters: a heartbeat
// or a result records a copy of them, and a claim starts the new attempt
// with none.
func TestTransitionCounters(t *testing.T) {
	task := baseRecord()
	task.Status = StatusQueued
	margin := 5 * time.Second
	claimed, _, err := transition(task, event{kind: evClaim, worker: "w1", lease: time.Minute, margin: margin}, transitionNow)
	if err != nil {
		t.Fatal(err)
	}
	counters := map[string]int64{"pages": 3}
	beat, _, err := transition(claimed, event{kind: evHeartbeat, worker: "w1", attempt: 1, lease: time.Minute, margin: margin, progress: &Progress{}, counters: counters}, transitionNow.Add(time.Second))
	if err != nil || beat.Counters["pages"] != 3 {
		t.Fatalf("heartbeat: counters %v, %v; want pages 3", beat.Counters, err)
	}
	counters["pages"] = 99
	if beat.Counters["pages"] != 3 {
		t.Errorf("the record shares the event's map: %v", beat.Counters)
	}
	failed, _, err := transition(beat, event{kind: evFail, worker: "w1", attempt: 1, errMsg: "boom", progress: &Progress{}, counters: map[string]int64{"pages": 4}}, transitionNow.Add(2*time.Second))
	if err != nil || failed.Counters["pages"] != 4 {
		t.Fatalf("fail: counters %v, %v; want pages 4", failed.Counters, err)
	}
	again, _, err := transition(failed, event{kind: evClaim, worker: "w2", lease: time.Minute, margin: margin}, transitionNow.Add(time.Hour))
	if err != nil || again.Counters != nil {
		t.Errorf("second claim: counters %v, %v; want none", again.Counters, err)
	}
}
