package sim

import (
	"slices"
	"strings"
	"time"

	"github.com/s3task/s3task"
)

// History is what one simulated run recorded. [Check] reads nothing else.
// Seq numbers order the events of one run; events with a larger Seq were
// recorded later. Writes take their Seq in the order S3 applied them.
type History struct {
	Seed   uint64 // the seed of the world
	Params Params // the settings and bounds to judge by
	// Prefix is the key prefix of the tasks, e.g. "batch-tasks/".
	Prefix string
	// Start and End bound the run in virtual time. End is when the run
	// stopped waiting for the tasks to finish; the fleet is stopped after it.
	Start, End time.Time
	// Capped says the run reached its time cap before every task was done.
	Capped bool
	// Hooked says every store of the fleet had an OnTerminal hook, so every
	// finished task must be notified.
	Hooked bool

	// Planted lists the tasks whose records were planted unreadable at the
	// start (see Config.Planted); the checks leave them out.
	Planted []string

	Writes    []Write       // every write S3 applied, in order
	Runs      []*HandlerRun // every handler call
	Workers   []WorkerInfo  // every worker process, replacements included
	Events    []ProcEvent   // starts, stops, crashes, pauses, outages, slow spells
	Calls     []Call        // every operator call
	Notices   []Notice      // every OnTerminal call
	Snapshots []Snapshot    // the bucket every virtual minute, and at the end
	// Stats counts the requests sent ("req:GET", ...) and the faults the
	// adversary injected, by kind, for reports.
	Stats map[string]int
	// GoneReads counts, by "<task> <process>", the reads of a deleted
	// record.
	GoneReads map[string]int
	// Reached counts the branches of the library the run reached, by name
	// (see internal/probe).
	Reached map[string]int
	// Requests lists every request and what became of it, if
	// Config.Requests asked for them.
	Requests []Request
	// Deliveries lists every event notification handed to a worker
	// (Config.Events), in order.
	Deliveries []Delivery
	// Periodics are the periodic tasks every Store declared
	// (Config.Periodic); their runs are the tasks of key scope
	// PeriodicScope.
	Periodics []s3task.Periodic
}

// Delivery is an S3 event notification handed to a worker's Notify.
type Delivery struct {
	Seq     int64
	Time    time.Time
	Worker  string
	Key     string
	Removed bool // the object was deleted; else written
}

// Params are the protocol settings and bounds the checker judges with.
type Params struct {
	// The workers' options (the library's defaults).
	LeaseDuration     time.Duration
	HeartbeatInterval time.Duration // zero: not checked
	ClockMargin       time.Duration
	MaxPollInterval   time.Duration
	ReconcileInterval time.Duration
	PollInterval      time.Duration

	// PickupBound is how soon a task that falls due must be claimed while
	// a worker serving its type is idle, not counting the time in which
	// the adversary held a request of that worker (EventDelayed). See
	// KindPickup.
	PickupBound time.Duration
	// ClaimBound is how long a task may stay claimable while some worker is
	// up, unpaused and has a free slot. See KindClaimDelay.
	ClaimBound time.Duration
	// FinishGrace is how long after its handler returned a run may still
	// hold its worker's slot (the final write and settling the task).
	FinishGrace time.Duration
	// ClockSlack absorbs the one-second resolution of Date headers when a
	// record's time stamps are compared with the time a write was applied.
	ClockSlack time.Duration
	// NoticeBound is how long after a task finished its OnTerminal notice
	// may wait for its first call, and after a failed call for the next:
	// the notifier backs off up to 10 minutes between calls, and a hook
	// may take minutes, holding up the notices queued behind it. The
	// delivery itself has no bound: the hook may fail any number of times.
	NoticeBound time.Duration
	// StopGrace is how soon after the context given to Worker.Stop ends
	// the handlers' contexts must be cancelled.
	StopGrace time.Duration
	// GoneReads is how often a worker may read a record once it was
	// deleted: once by each of its three loops (poll, notifier,
	// reconciler), whose reads may all be under way before the first
	// comes back and tells the others.
	GoneReads int
	// ReleaseLimit is the WorkerOptions.ReleaseLimit of the function
	// invocations (Config.Functions, processes "f…"); zero: none ran.
	ReleaseLimit int
	// CutOff is how long an outage must last to count as the worker being
	// cut off from S3, which may legitimately cost it its lease and the
	// attempt. Shorter blips must be ridden out.
	CutOff time.Duration

	// The timing adversary, within the limits the library documents for
	// ClockMargin (see [Params.Lag]): S3's servers' clocks disagree by up
	// to DateSpread either way; an answer may reach its client up to
	// MaxAnswerDelay after S3 stamped its Date; a process may be frozen
	// (its goroutines and timers stopped) for up to MaxFreeze; and a write
	// may be applied up to MaxZombieDelay after its client was told it
	// failed.
	DateSpread     time.Duration
	MaxAnswerDelay time.Duration
	MaxFreeze      time.Duration
	MaxZombieDelay time.Duration
}

// Lag is the most a worker's sense of the server's clock may lag it in
// this world: the one-second resolution of Date headers, the delay of the
// answer it read one from, and the spread of the servers' clocks. A
// worker's lease is safe as long as its lag, plus a freeze of its process,
// plus the lead of the worker that takes over (the spread, at most) stays
// under twice ClockMargin.
func (p Params) Lag() time.Duration { return time.Second + p.MaxAnswerDelay + p.DateSpread }

// DefaultParams returns the bounds for the library's default options.
func DefaultParams() Params {
	return Params{
		LeaseDuration:     s3task.DefaultLeaseDuration,
		HeartbeatInterval: s3task.DefaultLeaseDuration / 3, // WorkerOptions' default
		PollInterval:      s3task.DefaultPollInterval,
		PickupBound:       2*s3task.DefaultPollInterval + 5*time.Second,
		ClockMargin:       s3task.DefaultClockMargin,
		MaxPollInterval:   s3task.DefaultMaxPollInterval,
		ReconcileInterval: s3task.DefaultReconcileInterval,
		ClaimBound:        s3task.DefaultMaxPollInterval*2 + 30*time.Second,
		FinishGrace:       30 * time.Second,
		ClockSlack:        2 * time.Second,
		CutOff:            40 * time.Second,
		NoticeBound:       20 * time.Minute,
		GoneReads:         3,
		StopGrace:         time.Second,
		DateSpread:        250 * time.Millisecond,
		MaxAnswerDelay:    1500 * time.Millisecond,
		MaxFreeze:         6500 * time.Millisecond,
		MaxZombieDelay:    5 * time.Second,
	}
}

// Write is one request that changed the bucket, as S3 applied it.
type Write struct {
	Seq  int64     // its place in the history's order
	Time time.Time // when S3 applied it (S3's clock)
	// Began is when the client call that sent it began (its SDK
	// operation, before any of the SDK's retries): when the library
	// decided to make it.
	Began  time.Time
	Proc   string // the process whose client sent it
	Method string // PUT, POST or DELETE
	Key    string // the object key, without the bucket
	// Body is kept for outputs, the wake object and the reconciler's
	// lease only.
	Body []byte
	// Record is the decoded status.json of a PUT of a record; nil otherwise
	// (and for a record that does not decode).
	Record *Record
	// Zombie says S3 applied the write after its client had been told it
	// failed (see Params.MaxZombieDelay).
	Zombie bool
	// Released is the record's released_attempts: attempts given back on
	// shutdown, which do not count against max_attempts. Decoded apart from
	// Record, so the checker also reads records of code without the field.
	Released int
}

// TaskID returns the task a key of a task's folder belongs to, or "".
func (w *Write) TaskID(prefix string) string { return keyTask(prefix, w.Key) }

// keyTask returns the task ID in "<prefix><id>/...", or "".
func keyTask(prefix, key string) string {
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok {
		return ""
	}
	id, _, ok := strings.Cut(rest, "/")
	if !ok || id == "active" {
		return ""
	}
	return id
}

// Request is one request a process sent.
type Request struct {
	Proc       string
	Op         string // GET, LIST, HEAD, PUT, POST, DELETE
	Key        string // the object key or listing prefix, with the bucket
	Sent, Done time.Time
	Status     int    // the answer's status, 0 if none
	Err        string // what the client got instead of an answer
}

// Cause is why a handler's context ended.
type Cause string

// The causes of a handler context's end.
const (
	CauseNone      Cause = ""         // not ended
	CauseLeaseLost Cause = "lease"    // s3task.ErrLeaseLost
	CauseCanceled  Cause = "canceled" // s3task.ErrTaskCanceled
	CauseStopping  Cause = "stopping" // s3task.ErrWorkerStopping
	CauseOther     Cause = "other"    // anything else, usually the end of the run
)

// Ends reports whether a run whose context ended with c counts as over at
// that moment, whatever its handler still does: the worker no longer holds
// the task.
func (c Cause) Ends() bool { return c == CauseLeaseLost || c == CauseCanceled }

// HandlerRun is one call of a worker's handler.
type HandlerRun struct {
	Task    string // the task's ID
	Attempt int    // the attempt it ran
	Worker  string // the worker that ran it
	Plan    string // what the handler meant to do, for messages

	// Start is when the handler was called.
	Start    time.Time
	StartSeq int64

	// CtxEnd is when the handler's context ended, with its cause.
	CtxEnd    time.Time
	CtxEndSeq int64
	Cause     Cause

	// Returned says the handler returned, at Return.
	Returned  bool
	Return    time.Time
	ReturnSeq int64
	// OK says the handler returned nil; Err is what it returned otherwise
	// ("panic" for a panic).
	OK  bool
	Err string
	// Dead says the worker crashed while the handler ran: the run ended at
	// the crash (Return).
	Dead bool

	// Output is what the run wrote as its output, and Wrote whether
	// WriteOutput returned nil.
	Output string
	Wrote  bool
	// Late says the handler tried a WriteOutput with a background context
	// after its own had ended; LateErr is what it got.
	Late    bool
	LateErr string
}

// End returns when the run stopped holding its task: at the crash for a
// dead run, when its context ended if it lost the lease or the task was
// cancelled, else when its handler returned (or end if it never did).
func (r *HandlerRun) End(end time.Time) time.Time {
	e := end
	if r.Returned {
		e = r.Return
	}
	if r.Cause.Ends() && r.CtxEnd.Before(e) {
		e = r.CtxEnd
	}
	return e
}

// WorkerInfo describes one worker process.
type WorkerInfo struct {
	Name        string   // its process name, also its worker ID
	Concurrency int      // its slots
	Types       []string // the task types it serves; nil: every type
	// Events says the worker relies on event notifications: it polls only
	// every MaxPollInterval (PollInterval = MaxPollInterval).
	Events bool `json:",omitempty"`
}

// Serves reports whether the worker serves tasks of type typ.
func (wi WorkerInfo) Serves(typ string) bool {
	return wi.Types == nil || slices.Contains(wi.Types, typ)
}

// EventKind is a kind of process event.
type EventKind string

// The process events.
const (
	EventStart      EventKind = "start"       // a worker's Run began
	EventStop       EventKind = "stop"        // a worker's Run context was cancelled (graceful stop)
	EventCrash      EventKind = "crash"       // a process died: client cut, handlers dead
	EventExit       EventKind = "exit"        // a worker's Run returned
	EventPause      EventKind = "pause"       // a process's requests hung from Start to End
	EventOutage     EventKind = "outage"      // a process's requests failed from Start to End
	EventSlow       EventKind = "slow"        // a process's requests took seconds longer from Start to End
	EventFreeze     EventKind = "freeze"      // a process stood still from Start to End: requests, handlers, timers
	EventStopBy     EventKind = "stop-by"     // Worker.Stop was called at Start with a context that ended at End
	EventWakeFailed EventKind = "wake-failed" // a request for the wake object, or the paused object an announcement may read, failed from Start to End (a refused compare-and-set, 412, is no failure)
	// EventWakeSlow: a request for the wake object, or the paused object,
	// took from Start to End, over a tenth of the 5 seconds an
	// announcement has (wakeWithin in the library), in which it may then
	// not get its compare-and-set through.
	EventWakeSlow EventKind = "wake-slow"
	// EventBrownout: every request of the ingesting processes (Ingesters
	// and direct callers of Ingest) but the listings failed from Start to
	// End, as when S3 refuses writes and reads for a while.
	EventBrownout EventKind = "brownout"
	// EventDelayed: the adversary held one request of the process from
	// Start to End (latency, or an answer delivered late), as a congested
	// network now and then does; a bound stated in round trips does not
	// count that time (see checkPickup).
	EventDelayed EventKind = "delayed"
)

// ProcEvent is something that happened to a process. Start, stop, crash
// and exit are instants (End == Start).
type ProcEvent struct {
	Proc       string    // the process
	Kind       EventKind // what happened
	Start, End time.Time // when
}

// CallKind names an operator call.
type CallKind string

// The operator calls.
const (
	CallCreate          CallKind = "Create"
	CallCreateForUpload CallKind = "CreateForUpload"
	CallUploadInput     CallKind = "UploadInput"
	CallPutInput        CallKind = "PutObject(input)"   // the upload a CreateForUpload caller makes with the presigned PUT
	CallPostInput       CallKind = "PostObject(upload)" // the same with the presigned POST form: a PUT of the form's key
	CallSubmit          CallKind = "Submit"
	CallCancel          CallKind = "Cancel"
	CallRetry           CallKind = "Retry"
	CallSchedule        CallKind = "Schedule"
	CallPurge           CallKind = "Purge"
	CallPause           CallKind = "Pause"  // Store.Pause of Call.Type
	CallResume          CallKind = "Resume" // Store.Resume of Call.Type
	// CallIngest is a direct Store.Ingest of the version Call.Key names
	// ("<key> <etag>"), as a function an event invokes makes it.
	CallIngest CallKind = "Ingest"
)

// Call is one operator call.
type Call struct {
	Proc   string   // the operator
	Kind   CallKind // the call
	TaskID string   // the task it was about; "" for a failed Create and for Purge
	// Start and End bound the call; the events recorded between StartSeq
	// and EndSeq happened during it.
	Start    time.Time
	End      time.Time
	StartSeq int64
	EndSeq   int64
	Task     *s3task.Task // what it returned
	Err      string       // "" on success
	// OutcomeUnknown says the error wraps s3task.ErrOutcomeUnknown: the call
	// does not know whether its write landed.
	OutcomeUnknown bool
	Note           string // what else it said, such as the tasks a Purge deleted
	// Key is the idempotency key a Create was given, if any.
	Key string
	// Found is what a successful Create told its middleware (Call.Found):
	// that its key named a task an earlier call made.
	Found bool
	// Purged lists the tasks a Purge reported deleted.
	Purged []string
	// Type is the task type a Pause or Resume was given.
	Type string
	// Transition says the error is (or wraps) a *s3task.TransitionError.
	Transition bool `json:",omitempty"`
	// Deadline says the call's context had a deadline of its own.
	Deadline bool `json:",omitempty"`
}

// Notice is one call of an OnTerminal hook.
type Notice struct {
	Proc     string        // the process whose store called the hook
	TaskID   string        // the task
	Status   s3task.Status // the status of the record the hook was given
	Attempt  int           // the attempt of the record the hook was given
	Start    time.Time     // when the hook was called
	End      time.Time     // when it returned
	StartSeq int64
	OK       bool // the hook returned nil
}

// Record is a decoded status.json: the Task a host sees, and the
// bookkeeping the library keeps beside it, which the oracles check too.
type Record struct {
	s3task.Task
	InputETag      string   `json:"input_etag"`
	NotifyPending  bool     `json:"notify_pending"`
	Writes         int64    `json:"writes"`
	PriorRevisions []string `json:"prior_revisions"`
}

// Snapshot is the state of the bucket at one moment, read without requests.
type Snapshot struct {
	Time    time.Time            // when it was taken
	Tasks   map[string]TaskState // every record, by task ID
	Markers map[string]bool      // the task IDs that have a marker
}

// TaskState is a task's record in a snapshot.
type TaskState struct {
	Status        s3task.Status
	Pending       bool // queued, running, or failed with a retry scheduled
	Terminal      bool // completed, abandoned, or failed for good
	NotifyPending bool // its OnTerminal notice is still owed
}

// stateOf summarizes a record.
func stateOf(t *Record) TaskState {
	pending := t.Status == s3task.StatusQueued || t.Status == s3task.StatusRunning ||
		(t.Status == s3task.StatusFailed && !t.RetryAt.IsZero())
	return TaskState{Status: t.Status, Pending: pending, Terminal: t.Terminal(), NotifyPending: t.NotifyPending}
}

// TaskLives returns the number of tasks whose record was created.
func (h *History) TaskLives() int {
	seen := map[string]bool{}
	for i := range h.Writes {
		w := &h.Writes[i]
		if w.Record != nil {
			seen[w.Key] = true
		}
	}
	return len(seen)
}
