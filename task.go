package s3task

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"
)

// SchemaVersion is the status.json schema this code reads and writes. A record
// with a higher version is refused with [ErrUnsupportedSchema] and never
// rewritten.
const SchemaVersion = 1

// Status is where a task is in its lifecycle.
type Status string

// The statuses. See the package documentation for the diagram.
const (
	// StatusCreated: the record exists and an upload may be under way; no
	// worker looks at it until Submit.
	StatusCreated Status = "created"
	// StatusQueued: the input is verified and the task waits for a worker.
	StatusQueued Status = "queued"
	// StatusRunning: a worker holds a lease on the task until
	// Task.LeaseExpiresAt.
	StatusRunning Status = "running"
	// StatusCompleted: the output is written. Terminal.
	StatusCompleted Status = "completed"
	// StatusFailed: the last attempt failed. If Task.RetryAt is set a worker
	// retries it from then on; otherwise the failure is final (terminal) until
	// an operator calls Store.Retry.
	StatusFailed Status = "failed"
	// StatusAbandoned: cancelled. Terminal.
	StatusAbandoned Status = "abandoned"
)

// Valid reports whether s is one of the defined statuses.
func (s Status) Valid() bool {
	switch s {
	case StatusCreated, StatusQueued, StatusRunning, StatusCompleted, StatusFailed, StatusAbandoned:
		return true
	}
	return false
}

// State is where a task stands, one step finer than its [Status]: it
// tells a queued task that waits for its start (scheduled) from one that
// waits for a worker (ready), and a failed task that will be retried
// (retrying) from one that will not (dead). Every task is in exactly one
// state, and every state belongs to one status. [Task.State] says which;
// [ListOptions.States] and [BulkOptions.States] select by it.
//
// A state depends on the time as well as on the record: a scheduled task
// becomes ready when its RunAt comes, by the S3 server's clock, without a
// write. The Store judges it by its estimate of that clock ([Store.Now]),
// as its workers judge whether a task may start.
type State string

// The states, by the status they belong to.
const (
	// StateCreated: status created, waiting for its input and Submit.
	StateCreated State = "created"
	// StateScheduled: status queued, with a start (Task.RunAt) still to
	// come: see [Task.Scheduled].
	StateScheduled State = "scheduled"
	// StateReady: status queued and due: it waits for a worker.
	StateReady State = "ready"
	// StateRunning: status running.
	StateRunning State = "running"
	// StateCompleted: status completed.
	StateCompleted State = "completed"
	// StateRetrying: status failed, with a retry to come (Task.RetryAt is
	// set, due or not yet): a worker runs it again.
	StateRetrying State = "retrying"
	// StateDead: status failed for good: no attempt left, or a failure no
	// retry can fix ([Permanent]). Only [Store.Retry] runs it again. Such
	// a task is [Task.Terminal].
	StateDead State = "dead"
	// StateAbandoned: status abandoned.
	StateAbandoned State = "abandoned"
)

// states are the states, in the order of the lifecycle.
var states = []State{StateCreated, StateScheduled, StateReady, StateRunning, StateCompleted, StateRetrying, StateDead, StateAbandoned}

// Valid reports whether s is one of the defined states.
func (s State) Valid() bool { return slices.Contains(states, s) }

// Status returns the status the state belongs to, or "" for a state that
// is not one.
func (s State) Status() Status {
	switch s {
	case StateCreated:
		return StatusCreated
	case StateScheduled, StateReady:
		return StatusQueued
	case StateRunning:
		return StatusRunning
	case StateCompleted:
		return StatusCompleted
	case StateRetrying, StateDead:
		return StatusFailed
	case StateAbandoned:
		return StatusAbandoned
	}
	return ""
}

// ParseState returns the state named s, or a *[StateError] (which wraps
// [ErrInvalidArgument]) if s names none. It is for a state a user typed:
// a query parameter, a flag.
func ParseState(s string) (State, error) {
	if st := State(s); st.Valid() {
		return st, nil
	}
	return "", &StateError{Value: s}
}

// State returns the task's state at now, a time by the S3 server's clock
// ([Store.Now]): its Status, with a queued task told scheduled or ready,
// and a failed one retrying or dead.
func (t *Task) State(now time.Time) State {
	switch t.Status {
	case StatusQueued:
		if t.Scheduled(now) {
			return StateScheduled
		}
		return StateReady
	case StatusFailed:
		if t.RetryAt.IsZero() {
			return StateDead
		}
		return StateRetrying
	}
	return State(t.Status)
}

// Progress holds the counters a handler reports. They reach the record with
// each heartbeat and at completion. A new attempt starts them at zero.
type Progress struct {
	RowCount       int64 `json:"row_count"`       // rows in the input, if known
	ProcessedCount int64 `json:"processed_count"` // rows handled so far
	SuccessCount   int64 `json:"success_count"`   // rows handled well
	ErrorCount     int64 `json:"error_count"`     // rows rejected
}

// Task is a task's state as hosts see it: the decoded status.json, less the
// bookkeeping the protocol keeps beside it there (the verified input's
// ETag, whether a notice is owed, the write count and the latest prior
// revisions). Values returned by the library are copies; changing one
// changes nothing in S3.
type Task struct {
	// Identity.
	SchemaVersion int             `json:"schema_version"`
	ID            string          `json:"task_id"`             // an inverted ULID: see [NewID]
	Type          string          `json:"task_type,omitempty"` // dispatch key for a Mux
	Name          string          `json:"task_name"`           // the host's label, as given to Create
	Payload       json.RawMessage `json:"payload,omitempty"`   // free JSON for the handler

	// Lifecycle.
	Status      Status `json:"status"`
	Attempt     int    `json:"attempt_id"`   // number of the latest attempt; 0 before the first claim
	MaxAttempts int    `json:"max_attempts"` // how many attempts the task may use up
	// ReleasedAttempts counts the attempts a worker gave back on shutdown.
	// They do not count against MaxAttempts: Attempt - ReleasedAttempts is
	// the number used up (see [Task.AttemptsUsed]).
	ReleasedAttempts int    `json:"released_attempts,omitempty"`
	LastError        string `json:"last_error,omitempty"` // the latest failed attempt's error, cut to 4 KiB
	// ErrorCategory classifies LastError: a handler's [WithCategory], or
	// one of the library's: [CategoryTransient], [CategoryPermanent],
	// [CategoryPanic], [CategoryLeaseExpired], [CategoryShutdown],
	// [CategoryTimeout], [CategoryBadPayload], [CategoryUnknownType],
	// [CategoryInputChanged].
	ErrorCategory string `json:"error_category,omitempty"`
	// RetryAt is set on a failed task that will be retried, not before
	// this time: the end of the failed attempt (when the worker recorded
	// the failure, by the server's clock, its History entry's end) plus
	// the backoff ([WorkerOptions.Backoff], or [RetryAfter]'s wait). It
	// does not count from UpdatedAt, which a later change of the record
	// (a notice delivered, a Schedule) moves.
	RetryAt time.Time `json:"retry_at,omitzero"`
	// RunAt, if set, is the earliest time (by the S3 server's clock) the
	// task may start: see [CreateParams.RunAt] and [Store.Schedule]. A
	// queued task waiting for it is scheduled ([Task.Scheduled]).
	RunAt time.Time `json:"run_at,omitzero"`
	// DueAt is when the task next needs a worker, by the server's clock: a
	// queued task's start, a failed task's retry, a running task's lease
	// check. Its active marker is named after it.
	DueAt        time.Time `json:"due_at,omitzero"`
	CancelReason string    `json:"cancel_reason,omitempty"` // the reason given to Cancel
	// Purging is set on a finished task that Store.Purge is deleting. No
	// change is allowed after it, so a Retry racing with the purge cannot
	// bring the task back while its files go.
	Purging bool `json:"purging,omitempty"`

	// Ownership: set while running.
	WorkerID       string    `json:"worker_id,omitempty"`
	LeaseExpiresAt time.Time `json:"lease_expires_at,omitzero"` // by the server's clock; heartbeats move it on

	// History holds the latest attempts, oldest first, at most
	// [HistoryLimit] of them: who ran each, when, and how it ended (see
	// [Attempt]). Attempt 1's error stays here after attempt 2 succeeds,
	// while LastError and ErrorCategory describe only the latest failure.
	// The claim adds an entry and the write that ends the attempt closes
	// it, so it costs no request of its own. The record grows by a few
	// hundred bytes per attempt (about 750 for an error of plain text at
	// [HistoryErrorLimit]; under 8 KB in all). Empty in
	// records written before it existed; a writer of such an earlier
	// version drops it when it writes the record.
	History []Attempt `json:"attempt_history,omitempty"`

	// Progress of the latest attempt.
	Progress
	// Counters are the latest attempt's own counters, for work not counted
	// in rows (pages rendered, images resized), as its handler set them
	// with [Job.SetCounter]; nil until it sets one. They reach the record
	// with the progress counters, and a new attempt starts with none.
	Counters map[string]int64 `json:"counters,omitempty"`

	// Artifacts.
	InputPath  string `json:"input_object_path"`
	InputSize  int64  `json:"input_size,omitempty"`         // the input's size in bytes, as Submit verified it
	OutputPath string `json:"output_object_path,omitempty"` // set when completed

	// Audit.
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"` // the latest write, a heartbeat included
	// SubmittedAt is when Submit queued the task; StartedAt is when its
	// latest attempt was claimed. Both are by the S3 server's clock, and
	// zero until then (and in records written before they existed). The
	// first attempt waited in the queue from the later of SubmittedAt and
	// RunAt until StartedAt.
	SubmittedAt time.Time `json:"submitted_at,omitzero"`
	StartedAt   time.Time `json:"started_at,omitzero"`  // see SubmittedAt
	CreatedBy   string    `json:"created_by,omitempty"` // [CreateParams.CreatedBy]
	// IdempotencyKey is the caller's key the task was created with, if any
	// (see [CreateParams.Key]).
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// KeyScope is the scope of IdempotencyKey, if any (see
	// [CreateParams.KeyScope]).
	KeyScope string `json:"key_scope,omitempty"`
	// NoInput says the task has no input: its type was declared so
	// ([FileOptions.NoInput]) when it was created. Its InputPath is empty,
	// Submit checks no input, and [Job.OpenInput] returns [ErrNoInput].
	NoInput bool `json:"no_input,omitempty"`
	// Metadata is the host's context for the task, as given at create time
	// ([CreateParams.Metadata]); nil if none. No change of the task alters
	// it.
	Metadata map[string]string `json:"metadata,omitempty"`
	// Revision is random and new on every write of the record, a heartbeat
	// included: two reads returned the same record exactly when their
	// revisions are equal, so it serves as an HTTP ETag for the task.
	Revision string `json:"revision"`
}

// record is a task's status.json: the Task that hosts see, and the
// bookkeeping the protocol keeps beside it, which hosts have no use for.
type record struct {
	Task

	// InputETag is the ETag of the input Submit verified; an attempt
	// refuses an input that changed since.
	InputETag string `json:"input_etag,omitempty"`
	// NotifyPending is set on a task that became terminal while the writer
	// had a StoreOptions.OnTerminal hook, until the hook has run for it.
	NotifyPending bool `json:"notify_pending,omitempty"`
	// Writes counts the writes of this record, and PriorRevisions holds the
	// revisions of the latest ones before it, newest first (at most
	// priorRevisions). A writer whose answer was lost reads them to prove
	// whether its write landed, even when others wrote after it.
	Writes         int64    `json:"writes,omitempty"`
	PriorRevisions []string `json:"prior_revisions,omitempty"`
}

// Scheduled reports whether the task is queued to start no earlier than
// RunAt, a time still to come at now (the server's clock).
func (t *Task) Scheduled(now time.Time) bool {
	return t.Status == StatusQueued && t.RunAt.After(now)
}

// AttemptsUsed returns the number of attempts that count against
// MaxAttempts: every claimed attempt except those given back on shutdown.
func (t *Task) AttemptsUsed() int { return t.Attempt - t.ReleasedAttempts }

// attemptsLeft reports whether another attempt may be claimed.
func (t *Task) attemptsLeft() bool { return t.AttemptsUsed() < t.MaxAttempts }

// Terminal reports whether the task is finished: completed, abandoned, or
// failed with no retry scheduled. Workers never touch a terminal task, and an
// operator can only Retry a failed one.
func (t *Task) Terminal() bool {
	switch t.Status {
	case StatusCompleted, StatusAbandoned:
		return true
	case StatusFailed:
		return t.RetryAt.IsZero()
	}
	return false
}

// Retryable reports whether [Store.Retry] would accept the task now: it is
// failed, finally or while waiting for its automatic retry. A UI can show a
// retry button from it.
func (t *Task) Retryable() bool { return t.Status == StatusFailed && !t.Purging }

// Silent reports, for a running task, how long its worker has not written
// the record by now (the server's clock), and whether that is overdue. A
// live worker writes the record at its claim and at every heartbeat, one
// WorkerOptions.HeartbeatInterval apart, and the claim keeps that interval
// in the attempt's entry of [Task.History]: a silence of two intervals or
// more means a heartbeat was missed, and the worker may have died. So a
// worker killed (or cut off from S3) is flagged within two heartbeat
// intervals of its last write, and a live one, whose next write comes one
// interval after the last, is not. A record without the interval (its
// attempt was claimed by an earlier version of the library) is judged by
// its lease instead: each write sets the lease from that moment, so
// LeaseExpiresAt - UpdatedAt is the lease's length, and heartbeats come at
// least every third of it, so a silence longer than half of it is
// overdue. A slow heartbeat write can make a task overdue for a moment; a
// dead worker keeps it so, until another worker takes the task over at
// [Task.RecoversAt]. For any other status Silent returns 0, false.
func (t *Task) Silent(now time.Time) (silence time.Duration, overdue bool) {
	if t.Status != StatusRunning || t.UpdatedAt.IsZero() {
		return 0, false
	}
	silence = max(now.Sub(t.UpdatedAt), 0)
	if every := t.heartbeatInterval(); every > 0 {
		return silence, silence >= 2*every
	}
	lease := t.LeaseExpiresAt.Sub(t.UpdatedAt)
	if lease <= 0 {
		return silence, silence > 0 // the lease was out at the last write: a record edited by hand
	}
	return silence, silence > lease/2
}

// RecoversAt returns when another worker may take a running task over if
// its worker stays silent: the lease's end plus margin, the workers'
// WorkerOptions.ClockMargin. It is zero for a task that is not running.
func (t *Task) RecoversAt(margin time.Duration) time.Time {
	if t.Status != StatusRunning || t.LeaseExpiresAt.IsZero() {
		return time.Time{}
	}
	return t.LeaseExpiresAt.Add(margin)
}

// Cancelable reports whether [Store.Cancel] would change the task now.
func (t *Task) Cancelable() bool {
	return t.Status != StatusCompleted && t.Status != StatusAbandoned && !t.Purging
}

// pending reports whether a worker may have something to run for the task.
func (t *Task) pending() bool {
	return t.Status == StatusQueued || t.Status == StatusRunning ||
		(t.Status == StatusFailed && !t.RetryAt.IsZero())
}

// needsMarker reports whether the task should have an active marker: it is
// pending, or finished with its OnTerminal notice not yet delivered.
func (r *record) needsMarker() bool { return r.pending() || r.NotifyPending }

// clone returns a deep copy.
func (t *Task) clone() *Task {
	c := *t
	if t.Payload != nil {
		c.Payload = append(json.RawMessage(nil), t.Payload...)
	}
	c.Metadata = maps.Clone(t.Metadata)
	c.Counters = maps.Clone(t.Counters)
	c.History = slices.Clone(t.History)
	return &c
}

// task returns the Task of r, the part hosts see; nil for nil.
func (r *record) task() *Task {
	if r == nil {
		return nil
	}
	return &r.Task
}

// clone returns a deep copy.
func (r *record) clone() *record {
	c := *r
	c.Task = *r.Task.clone()
	c.PriorRevisions = append([]string(nil), r.PriorRevisions...)
	return &c
}

// eventKind names a request to change a task.
type eventKind int

const (
	evUpload       eventKind = iota + 1 // an input upload is about to be allowed; changes nothing
	evSubmit                            // created -> queued
	evClaim                             // queued, or failed and due -> running
	evHeartbeat                         // running -> running, lease extended
	evComplete                          // running -> completed
	evFail                              // running -> failed
	evLeaseExpired                      // running -> queued or failed, by another party
	evRelease                           // running -> queued, attempt given back
	evRetry                             // failed -> queued, by an operator
	evCancel                            // anything unfinished -> abandoned
	evPurge                             // finished -> locked for deletion
	evNotified                          // finished: its notice was delivered
	evSchedule                          // created or queued: start no earlier than a time
	evNoInput                           // created before a cutoff, input never submitted -> abandoned
)

var eventNames = map[eventKind]string{
	evUpload: "upload input", evSubmit: "submit", evClaim: "claim",
	evHeartbeat: "heartbeat", evComplete: "complete", evFail: "fail",
	evLeaseExpired: "expire lease", evRelease: "release",
	evRetry: "retry", evCancel: "cancel", evPurge: "purge",
	evNotified: "record the notice of", evSchedule: "schedule",
	evNoInput: "abandon for want of input",
}

func (k eventKind) String() string { return eventNames[k] }

// event is a request to change a task, with what the change needs.
type event struct {
	kind eventKind

	worker  string        // claim, heartbeat, complete, fail, release: the acting worker
	attempt int           // heartbeat, complete, fail, release: the attempt it holds; notified: the result's
	status  Status        // notified: the result whose notice went out (empty: any)
	lease   time.Duration // claim, heartbeat: lease length from now
	margin  time.Duration // claim, heartbeat: how long after the lease's end others may take the task
	move    bool          // heartbeat: move the marker to the new lease's end
	at      time.Time     // schedule: the earliest start (zero: now); abandon-unsent: created before this
	// states, for a retry, a cancel or a purge of a bulk action, are the
	// states its selection holds (BulkOptions.States): a task no longer in
	// one of them is left alone. Nil: any state.
	states map[State]bool

	// earliest, for a claim, is the earliest the server's clock may read
	// (zero: now), by which RunAt and RetryAt are judged: now, the
	// estimate, may run ahead of the server by up to a second, and no
	// margin covers a start.
	earliest time.Time

	// heartbeat, for a claim, is the claiming worker's heartbeat interval,
	// kept in the attempt's history entry (see Task.Silent).
	heartbeat time.Duration

	progress   *Progress        // heartbeat, complete, fail: counters to record
	counters   map[string]int64 // with progress: the handler's own counters
	output     string           // complete: the attempt's output key
	errMsg     string           // fail: what went wrong
	category   string           // fail: its category
	permanent  bool             // fail: do not retry
	retryDelay time.Duration    // fail: wait this long before the next attempt

	// releaseLimit, for a release, is WorkerOptions.ReleaseLimit: once
	// that many attempts in a row before this one were given back, this
	// give-back fails the task for good instead (0: no limit).
	releaseLimit int

	notify    bool   // complete, fail, lease-expired, cancel, abandon-unsent, release: a terminal result awaits OnTerminal
	inputETag string // submit, retry: the verified input
	inputSize int64
	reason    string // cancel, abandon-unsent
	force     bool   // purge: even with a notice pending

	// unsure, for an operator's change (submit, retry, cancel, schedule),
	// says that an earlier write of it may have landed unseen: its answer
	// was lost, and the record, read back, could not tell (more writes
	// followed than it remembers). A state that write leads to then counts
	// as the change made (see reached). For submit and retry, attempt is
	// the attempt of the record that write was made over.
	unsure bool
}

// transition is the whole state machine: it decides what event e does to
// task t at time now. It returns the new record and write=true, or write=false
// when the event is a repeat that changes nothing (submitting a queued task,
// cancelling an abandoned one, checking an upload), or a *TransitionError.
// It is pure: no I/O, no clock, no randomness; t is not modified.
func transition(t *record, e event, now time.Time) (next *record, write bool, err error) {
	next, write, err = decide(t, e, now)
	if write && next.Terminal() && (!t.Terminal() || next.Status != t.Status) {
		// A new result: finished, or finished otherwise (a final failure
		// cancelled). Its notice replaces one still owed for the last,
		// even if this writer has no hook.
		next.NotifyPending = e.notify || t.NotifyPending
	}
	return next, write, err
}

// decide is transition without the notice bookkeeping common to every
// event that finishes a task.
func decide(t *record, e event, now time.Time) (next *record, write bool, err error) {
	deny := func(reason string, args ...any) (*record, bool, error) {
		return nil, false, &TransitionError{ID: t.ID, From: t.Status, Event: e.kind.String(), Reason: fmt.Sprintf(reason, args...)}
	}
	owns := func() (string, bool) {
		if t.Status != StatusRunning {
			return "it is not running", false
		}
		if t.WorkerID != e.worker || t.Attempt != e.attempt {
			return fmt.Sprintf("attempt %d is held by worker %q, not attempt %d by %q", t.Attempt, t.WorkerID, e.attempt, e.worker), false
		}
		return "", true
	}
	n := t.clone()
	if e.unsure && reached(t, e) {
		return t, false, nil // made, by the write in doubt or by another's
	}
	if t.Purging {
		if e.kind == evPurge {
			return t, false, nil
		}
		return deny("it is being purged")
	}
	if st := t.State(now); e.states != nil && !e.states[st] {
		return deny("it is %s now, a state the selection does not hold", st)
	}

	switch e.kind {
	case evUpload:
		if t.NoInput {
			return deny("its type takes no input (FileOptions.NoInput)")
		}
		if t.Status != StatusCreated {
			return deny("the input is fixed once a task is submitted")
		}
		return t, false, nil

	case evSubmit:
		switch t.Status {
		case StatusQueued:
			return t, false, nil
		case StatusCreated:
			n.Status = StatusQueued
			n.InputETag, n.InputSize = e.inputETag, e.inputSize
			n.SubmittedAt = now
			n.DueAt = ceilMS(later(now, t.RunAt))
			return n, true, nil
		}
		return deny("only a created task can be submitted")

	case evClaim:
		due := now // the time RunAt and RetryAt are judged by
		if !e.earliest.IsZero() && e.earliest.Before(now) {
			due = e.earliest
		}
		switch {
		case t.Status == StatusQueued && due.Before(t.RunAt):
			return deny("it is scheduled to start at %s", t.RunAt.Format(time.RFC3339))
		case t.Status == StatusQueued:
		case t.Status == StatusFailed && t.RetryAt.IsZero():
			return deny("its failure is final")
		case t.Status == StatusFailed && due.Before(t.RetryAt):
			return deny("its retry is not due until %s", t.RetryAt.Format(time.RFC3339))
		case t.Status == StatusFailed:
		default:
			return deny("only a queued task or a failed one due for retry can be claimed")
		}
		if !t.attemptsLeft() {
			return deny("all %d attempts are used", t.MaxAttempts)
		}
		n.Status = StatusRunning
		n.Attempt++
		n.StartedAt = now
		n.WorkerID = e.worker
		n.LeaseExpiresAt = now.Add(e.lease)
		n.DueAt = ceilMS(n.LeaseExpiresAt.Add(e.margin))
		n.RetryAt = time.Time{}
		n.Progress, n.Counters = Progress{}, nil
		startAttempt(n, e.worker, e.heartbeat, now)
		return n, true, nil

	case evHeartbeat:
		if why, ok := owns(); !ok {
			return deny("%s", why)
		}
		n.LeaseExpiresAt = now.Add(e.lease)
		if e.move {
			n.DueAt = ceilMS(n.LeaseExpiresAt.Add(e.margin))
		}
		if e.progress != nil {
			n.Progress, n.Counters = *e.progress, maps.Clone(e.counters)
		}
		return n, true, nil

	case evComplete:
		if why, ok := owns(); !ok {
			return deny("%s", why)
		}
		n.Status = StatusCompleted
		n.OutputPath = e.output
		if e.progress != nil {
			n.Progress, n.Counters = *e.progress, maps.Clone(e.counters)
		}
		n.LastError, n.ErrorCategory = "", ""
		n.LeaseExpiresAt = time.Time{}
		endAttempt(n, t, OutcomeCompleted, now, "", "")
		return n, true, nil

	case evFail:
		if why, ok := owns(); !ok {
			return deny("%s", why)
		}
		n.Status = StatusFailed
		n.LastError, n.ErrorCategory = e.errMsg, e.category
		endAttempt(n, t, OutcomeFailed, now, e.category, e.errMsg)
		if e.progress != nil {
			n.Progress, n.Counters = *e.progress, maps.Clone(e.counters)
		}
		n.LeaseExpiresAt = time.Time{}
		n.RetryAt = time.Time{}
		if !e.permanent && t.attemptsLeft() {
			n.RetryAt = now.Add(max(e.retryDelay, 0))
			n.DueAt = ceilMS(n.RetryAt)
		}
		return n, true, nil

	case evLeaseExpired:
		if t.Status != StatusRunning {
			return deny("it is not running")
		}
		if !now.After(t.LeaseExpiresAt) {
			return deny("its lease is live until %s", t.LeaseExpiresAt.Format(time.RFC3339Nano))
		}
		n.LastError = fmt.Sprintf("attempt %d: lease of worker %q expired at %s", t.Attempt, t.WorkerID, t.LeaseExpiresAt.Format(time.RFC3339))
		n.ErrorCategory = CategoryLeaseExpired
		// The attempt ended when its lease did, whenever that is found out.
		ended := t.LeaseExpiresAt
		if ended.IsZero() {
			ended = now // a running record without a lease: edited by hand
		}
		endAttempt(n, t, OutcomeLeaseExpired, ended, CategoryLeaseExpired, n.LastError)
		n.WorkerID, n.LeaseExpiresAt = "", time.Time{}
		n.Status = StatusQueued
		n.DueAt = now
		if !t.attemptsLeft() {
			n.Status = StatusFailed
		}
		return n, true, nil

	case evRelease:
		if why, ok := owns(); !ok {
			return deny("%s", why)
		}
		if run := releasedInARow(t); e.releaseLimit > 0 && run >= e.releaseLimit {
			// Given back once more than the limit allows: the task takes
			// longer than its workers can hold it, and would be started
			// and given back forever. This attempt counts, as a failure's.
			n.Status = StatusFailed
			n.LastError = fmt.Sprintf("attempt %d: given back unfinished, after %d attempts in a row given back (the limit is %d): the task needs longer than its workers hold it", t.Attempt, run, e.releaseLimit)
			n.ErrorCategory = CategoryTimeout
			endAttempt(n, t, OutcomeFailed, now, CategoryTimeout, n.LastError)
			n.LeaseExpiresAt, n.RetryAt = time.Time{}, time.Time{}
			return n, true, nil
		}
		n.Status = StatusQueued
		n.ReleasedAttempts++ // the interrupted attempt does not count
		n.LastError = fmt.Sprintf("attempt %d: interrupted by worker shutdown", t.Attempt)
		n.ErrorCategory = CategoryShutdown
		endAttempt(n, t, OutcomeReleased, now, CategoryShutdown, n.LastError)
		n.WorkerID, n.LeaseExpiresAt = "", time.Time{}
		n.DueAt = now
		return n, true, nil

	case evRetry:
		if t.Status != StatusFailed {
			return deny("only a failed task can be retried")
		}
		n.Status = StatusQueued
		n.RetryAt = time.Time{}
		n.NotifyPending = false // it is not finished after all
		n.MaxAttempts = max(t.MaxAttempts, t.AttemptsUsed()+1)
		n.DueAt = now
		if e.inputETag != "" { // the input as it is now, verified again
			n.InputETag, n.InputSize = e.inputETag, e.inputSize
		}
		return n, true, nil

	case evCancel:
		switch t.Status {
		case StatusAbandoned:
			return t, false, nil
		case StatusCompleted:
			return deny("it is already completed")
		}
		n.Status = StatusAbandoned
		n.CancelReason = e.reason
		n.RetryAt, n.LeaseExpiresAt = time.Time{}, time.Time{}
		if t.Status == StatusRunning {
			endAttempt(n, t, OutcomeCanceled, now, "", "")
		}
		// A notice left pending (asked for now, the abandonment being a new
		// result even of a task that had failed for good, or one of an
		// earlier result) is due now, and needs a marker named so: not the
		// one of a start, a retry or a lease's end still ahead, which no
		// worker visits before then. A created task has none at all. Nor
		// does a task that failed for good with its notice delivered: the
		// marker its DueAt names is that of a phase over, which a worker
		// that reads the record before this write lands deletes as the
		// marker of a finished task; the new one needs a name of its own.
		if (t.NotifyPending || e.notify) && (t.DueAt.IsZero() || t.DueAt.After(now) || !t.needsMarker()) {
			n.DueAt = now
		}
		return n, true, nil

	case evNoInput:
		// Unlike a cancel, this one is decided against the record as it is
		// at the write: a task submitted meanwhile is left alone.
		if t.Status != StatusCreated {
			return deny("only a task still waiting for its input is abandoned for want of it")
		}
		if !t.CreatedAt.Before(e.at) {
			return deny("it was created at %s, not before %s", t.CreatedAt.Format(time.RFC3339), e.at.Format(time.RFC3339))
		}
		n.Status = StatusAbandoned
		n.CancelReason = e.reason
		if e.notify {
			n.DueAt = now // its notice is due now, and needs a marker
		}
		return n, true, nil

	case evPurge:
		if !t.Terminal() {
			return deny("only a finished task can be purged")
		}
		if t.NotifyPending && !e.force {
			return deny("its OnTerminal notice is not delivered yet")
		}
		if now.Sub(t.UpdatedAt) < purgeSettle {
			// A write sent before the last change (an output whose answer
			// was lost, say) may still land: deleted now, its object would
			// come back into a folder with no record.
			return deny("it changed less than %s ago: a write sent before may still land", purgeSettle)
		}
		n.Purging = true
		n.NotifyPending = false // delivered, or given up by the caller
		return n, true, nil

	case evSchedule:
		switch {
		case t.Status == StatusCreated:
		case t.Status != StatusQueued:
			return deny("only a created or queued task can be scheduled")
		case !t.RunAt.After(now) && !e.at.After(now):
			return t, false, nil // it may run now already: keep its place
		default:
			n.DueAt = ceilMS(later(now, e.at))
		}
		n.RunAt = e.at
		if n.RunAt.Equal(t.RunAt) {
			return t, false, nil
		}
		return n, true, nil

	case evNotified:
		if !t.Terminal() {
			return deny("it is not finished")
		}
		if e.status != "" && (t.Status != e.status || t.Attempt != e.attempt) {
			return deny("the notice was for an earlier result (%s at attempt %d)", e.status, e.attempt)
		}
		if !t.NotifyPending {
			return t, false, nil
		}
		n.NotifyPending = false
		return n, true, nil
	}
	return deny("unknown event")
}

// releasedInARow returns how many attempts in a row, right before the
// running one, were given back, as t's history shows them: the entries of
// attempts t.Attempt-1, t.Attempt-2, ... while each says OutcomeReleased.
// An entry of another outcome ends the run, and so does a gap (attempts
// claimed by an earlier version of the library, which kept no history), so
// the count never exceeds what happened. The history keeps HistoryLimit
// entries, the running attempt's among them: it shows at most
// HistoryLimit-1 earlier ones.
func releasedInARow(t *record) int {
	run, want := 0, t.Attempt-1
	for i := len(t.History) - 1; i >= 0; i-- {
		a := t.History[i]
		if a.Number == t.Attempt {
			continue // the running attempt's own entry
		}
		if a.Number != want || a.Outcome != OutcomeReleased {
			break
		}
		run++
		want--
	}
	return run
}

// reached reports whether t shows the goal of e reached, e being an
// operator's change an earlier write of which may have landed unseen
// (e.unsure). The goal is a state that write would have made and that
// nothing but the change itself, or the task moving on from it, makes:
//
//   - submit and retry: the task is queued, or an attempt was claimed
//     since the record the write was made over (attempt e.attempt): only a
//     claim, which follows the queue, counts an attempt up, and a failed
//     task goes back to failed no other way;
//   - cancel: the task is abandoned, a state no change leaves;
//   - schedule: its start is the time asked for, which only a Schedule sets.
//
// A state short of the goal proves the write did not land, or was undone by
// a later change (a Schedule's time replaced by another Schedule, a
// retried task cancelled), and the change is decided afresh against it.
func reached(t *record, e event) bool {
	switch e.kind {
	case evSubmit, evRetry:
		return t.Status == StatusQueued || t.Attempt > e.attempt
	case evCancel:
		return t.Status == StatusAbandoned
	case evSchedule:
		return t.RunAt.Equal(e.at)
	}
	return false
}

// ceilMS rounds t up to a whole millisecond, the resolution of marker names
// and of the server's clock as the library reads it, so that a task is
// never due before the time its marker names.
func ceilMS(t time.Time) time.Time {
	if r := t.Truncate(time.Millisecond); !r.Equal(t) {
		return r.Add(time.Millisecond)
	}
	return t
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// maxRecordSize bounds how much of a status.json is read. Real records are a
// few hundred bytes plus the payload.
const maxRecordSize = 1 << 20

// decodeTask decodes the status.json stored at key for task id. It refuses a
// newer schema (ErrUnsupportedSchema) and anything that is not a
// self-consistent version-1 record for that ID (ErrCorruptRecord), an
// attempt history longer than HistoryLimit, out of order or with text over
// its bounds included. A record without max_attempts, such as one written
// by hand, gets defaultMax.
func decodeTask(key, id string, data []byte, defaultMax int) (*record, error) {
	bad := func(format string, args ...any) error {
		return &RecordError{Key: key, Err: fmt.Errorf("%w: "+format, append([]any{ErrCorruptRecord}, args...)...)}
	}
	var head struct {
		SchemaVersion *int `json:"schema_version"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, &RecordError{Key: key, Err: fmt.Errorf("%w: %w", ErrCorruptRecord, err)}
	}
	switch {
	case head.SchemaVersion == nil:
		return nil, bad("no schema_version")
	case *head.SchemaVersion > SchemaVersion:
		return nil, &RecordError{Key: key, Err: fmt.Errorf("%w: schema_version %d, this code knows up to %d", ErrUnsupportedSchema, *head.SchemaVersion, SchemaVersion)}
	case *head.SchemaVersion < 1:
		return nil, bad("schema_version %d", *head.SchemaVersion)
	}
	var t record
	if err := json.Unmarshal(data, &t); err != nil {
		return nil, &RecordError{Key: key, Err: fmt.Errorf("%w: %w", ErrCorruptRecord, err)}
	}
	switch {
	case t.ID != id:
		return nil, bad("task_id %q does not match its key", t.ID)
	case !t.Status.Valid():
		return nil, bad("unknown status %q", t.Status)
	case t.Attempt < 0 || t.MaxAttempts < 0 || t.ReleasedAttempts < 0 || t.ReleasedAttempts > t.Attempt || t.Writes < 0:
		return nil, bad("attempt or write counters out of range")
	}
	if why := checkHistory(&t); why != "" {
		return nil, bad("%s", why)
	}
	if t.MaxAttempts == 0 {
		t.MaxAttempts = max(defaultMax, t.AttemptsUsed())
	}
	if string(t.Payload) == "null" {
		t.Payload = nil // written as null when unset
	}
	return &t, nil
}

// encodeRecord encodes t as its status.json. Every field of the seed's
// record format is there, null when unset, so that a script in another
// language that looks a key up finds it; the library's own additions are
// left out when unset.
func encodeRecord(t *record) ([]byte, error) {
	type plain record // the record's fields, without this function's overrides

	// str returns t's own field, or nil (null) for an empty one.
	str := func(s *string) *string {
		if *s == "" {
			return nil
		}
		return s
	}
	var payload json.RawMessage // nil encodes as null
	if len(t.Payload) > 0 {
		payload = t.Payload
	}
	var lease *time.Time
	if !t.LeaseExpiresAt.IsZero() {
		lease = &t.LeaseExpiresAt
	}
	return json.Marshal(struct {
		*plain
		Type           *string         `json:"task_type"`
		Payload        json.RawMessage `json:"payload"`
		LastError      *string         `json:"last_error"`
		WorkerID       *string         `json:"worker_id"`
		LeaseExpiresAt *time.Time      `json:"lease_expires_at"`
		OutputPath     *string         `json:"output_object_path"`
		CreatedBy      *string         `json:"created_by"`
	}{(*plain)(t), str(&t.Type), payload, str(&t.LastError), str(&t.WorkerID), lease, str(&t.OutputPath), str(&t.CreatedBy)})
}

// priorRevisions is how many earlier revisions a record remembers.
const priorRevisions = 8

// succeed fills in next's write bookkeeping as the write that follows cur
// (nil for a create): a fresh revision, the write count, and cur's revision
// at the head of the prior ones.
func succeed(cur, next *record, revision string) {
	next.Revision = revision
	next.Writes, next.PriorRevisions = 1, nil
	if cur != nil {
		next.Writes = cur.Writes + 1
		prior := append([]string{cur.Revision}, cur.PriorRevisions...)
		next.PriorRevisions = prior[:min(len(prior), priorRevisions)]
	}
}

// landing is what a record read after a doubtful write says about it.
type landing int

const (
	notLanded  landing = iota // the write did not take effect
	landedHere                // the write is the record now
	overtaken                 // the write took effect, and others wrote after it
	unknown                   // the record cannot tell
)

// landed judges, from the record cur read after a doubtful write, whether
// the write of mine (a record with mine.Writes and mine.Revision, made over
// base) took effect. Write counts only grow, so the write numbered
// mine.Writes is either mine or another's; the last priorRevisions
// revisions tell which. Further back, or when a writer that keeps no count
// wrote in between, it cannot tell.
func landed(base, mine, cur *record) landing {
	k := cur.Writes - mine.Writes
	switch {
	case cur.Revision == mine.Revision:
		return landedHere
	case base != nil && cur.Revision == base.Revision:
		return notLanded // nothing was written since we read it
	case k == 0 && cur.Writes > 0:
		return notLanded // another's write took the number ours would have
	case k > 0 && k <= int64(len(cur.PriorRevisions)):
		if cur.PriorRevisions[k-1] == mine.Revision {
			return overtaken
		}
		return notLanded
	}
	return unknown
}
