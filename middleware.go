package s3task

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/s3task/s3task/internal/kit"
)

// Middleware wraps the [Handler] of every attempt a [Worker] runs, the way
// net/http middleware wraps an http.Handler: it gets the next handler and
// returns one that calls it, with the host's own code around the call, such
// as a trace span, log attributes from the task's metadata, a timer, or a
// credential put into the context.
//
// WorkerOptions.Middleware lists them outermost first: for [m1, m2] an
// attempt runs m1's code, then m2's, then the handler, and the handler's
// error comes back through m2, then m1; the error m1 returns is the
// attempt's result, as the worker records it. All of it runs inside the
// attempt: after the claim, under the lease and its heartbeats, with the
// attempt's context, which ends as the handler's would. A panic, in the
// handler or in a middleware, passes up through the middleware outside it
// (a deferred recover there sees it) and is recovered by the worker,
// outside them all, as the handler's panic.
//
// Middleware does not change which tasks a worker claims: that is decided
// by the handler given to [NewWorker] (see [TypedHandler]).
type Middleware func(next Handler) Handler

// wrap returns h inside mw, mw[0] outermost.
func wrap(h Handler, mw []Middleware) (Handler, error) {
	for i := len(mw) - 1; i >= 0; i-- {
		if mw[i] == nil {
			return nil, fmt.Errorf("%w: WorkerOptions.Middleware[%d] is nil", ErrInvalidOptions, i)
		}
		if h = mw[i](h); h == nil {
			return nil, fmt.Errorf("%w: WorkerOptions.Middleware[%d] returned a nil Handler", ErrInvalidOptions, i)
		}
	}
	return h, nil
}

// Op names a [Store] call that passes through [StoreMiddleware].
type Op string

// The Store calls that pass through StoreMiddleware: every call on a task,
// those that create or change one and those that read one, the listings
// (of tasks, workers and periodic tasks), and pausing and resuming a task
// type. [Store.CreateForUpload] and
// [Store.Ingest] are an OpCreate; [Store.PresignUploadForm] is an
// OpPresignUpload. A keyed create that finds its key's task (see
// [CreateParams.Key]) then passes that task through as an OpGet, with
// Call.Task set, and returns it only if the middleware lets the read by. The bulk actions pass each of their tasks through as
// the single call would: [Store.RetryMany] as an OpRetry,
// [Store.CancelMany] as an OpCancel, [Store.PurgeMany] as an OpPurge, and
// their listing, when they select by a filter, as an OpList.
// [Store.Purge], a maintenance sweep of the whole prefix as
// [Store.Reconcile] is, does not pass through middleware.
const (
	OpCreate          Op = "create"           // Store.Create
	OpSubmit          Op = "submit"           // Store.Submit
	OpCancel          Op = "cancel"           // Store.Cancel, and each task of Store.CancelMany
	OpRetry           Op = "retry"            // Store.Retry, and each task of Store.RetryMany
	OpPurge           Op = "purge"            // each task of Store.PurgeMany
	OpSchedule        Op = "schedule"         // Store.Schedule
	OpUploadInput     Op = "upload_input"     // Store.UploadInput
	OpGet             Op = "get"              // Store.Get
	OpPresignUpload   Op = "presign_upload"   // Store.PresignUpload, Store.PresignUploadForm
	OpPresignDownload Op = "presign_download" // Store.PresignDownload
	OpOpenOutput      Op = "open_output"      // Store.OpenOutput
	OpList            Op = "list"             // Store.List
	OpStats           Op = "stats"            // Store.Stats
	OpWorkers         Op = "workers"          // Store.Workers
	OpPeriodics       Op = "periodics"        // Store.Periodics
	OpPause           Op = "pause"            // Store.Pause
	OpResume          Op = "resume"           // Store.Resume
	OpPaused          Op = "paused"           // Store.Paused
)

// Writes reports whether o creates a task or changes one (its record or
// its input), or changes which task types workers claim (OpPause,
// OpResume); the others only read.
func (o Op) Writes() bool {
	switch o {
	case OpCreate, OpSubmit, OpCancel, OpRetry, OpPurge, OpSchedule, OpUploadInput, OpPause, OpResume:
		return true
	}
	return false
}

// Call is one Store call as [StoreMiddleware] sees it: the call's name and
// arguments, and the task's record as it stands. A middleware may change
// the arguments before it passes the call on, e.g. add entries to a copy of
// Params.Metadata or a filter to List; the Store validates them after every
// middleware has run.
type Call struct {
	// Op is the Store method called.
	Op Op
	// TaskID is the task the call is for; empty for OpCreate, whose task's
	// ID is that of the Task returned, and for OpList, OpStats, OpWorkers,
	// OpPeriodics, OpPause, OpResume and OpPaused.
	TaskID string
	// Task is the task's record as the Store read it for this call, before
	// any middleware ran, for every Op with a TaskID: a tenant or permission
	// check reads its Metadata, its Type or its CreatedBy here, once, for
	// reads and writes alike. It is nil when the ID is invalid, no such task
	// exists, or its record cannot be read; the call then fails with that
	// error once the middleware passes it on. It is the Store's own read,
	// reused by the call (no request more): a middleware must not change
	// it, nor TaskID.
	Task *Task
	// Params are OpCreate's parameters; nil for every other Op. Params.Metadata
	// is the caller's own map: copy it before adding to it.
	Params *CreateParams
	// List is OpList's options, a copy of the caller's: a middleware may
	// narrow it (add a status, type or metadata filter, such as the
	// caller's tenant), and the Store filters as it reads, so pages stay
	// full. Nil for every other Op.
	List *ListOptions
	// Reason is OpCancel's reason.
	Reason string
	// At is OpSchedule's start time.
	At time.Time
	// Type is the task type OpPause and OpResume pause or resume; a
	// middleware may check it (a permission per type) or change it, and
	// the Store validates it after.
	Type string
	// TTL is how long the URLs of OpPresignUpload and OpPresignDownload
	// stay valid.
	TTL time.Duration
	// Found is set by the Store when an OpCreate returns: true when its
	// Params.Key named a task an earlier call made, which the call returned
	// as it is, writing nothing (see [Store.CreateOrGet]). A middleware
	// reads it after next returns, to log a repeat as a repeat.
	Found bool

	// The record read for the call before the middleware ran (see Task).
	read    bool
	readID  string
	rec     *record
	etag    string
	readErr error

	made     *record // OpCreate: the record it wrote, if it made the task
	madeETag string  // and its ETag

	form   bool         // OpPresignUpload: a POST form rather than a PUT
	keys   keyPolicy    // OpCreate with a key: Ingest's rules for its key
	stats  StatsOptions // OpStats's options
	input  io.Reader    // OpUploadInput's body
	result any          // what a call that returns more than a Task returns

	// A bulk action's call (see bulk.go).
	dry    bool           // OpRetry, OpCancel, OpPurge: judge only, write nothing
	force  bool           // OpPurge: PurgeOptions.DropPendingNotices
	states map[State]bool // OpRetry, OpCancel, OpPurge: BulkOptions.States (nil: any)
	recs   []*record      // OpList: the records of the page's tasks, in order
}

// DryRun reports whether the call is one task of a bulk action's dry run
// (BulkOptions.DryRun): the Store decides it against the task's record
// as the call would, and writes nothing, whatever the middleware does. Its
// Op still names the change it stands for, so that a check refuses it as
// it would refuse the change ([Op.Writes] is still true); a middleware that
// records changes, such as an audit log, should not record a dry run as
// one.
func (c *Call) DryRun() bool { return c.dry }

// CallFunc performs a [Call] and returns what the Store method returns.
type CallFunc func(ctx context.Context, c *Call) (*Task, error)

// StoreMiddleware wraps the Store's calls (see [Op]), those that read as
// well as those that create or change a task, as [Middleware] wraps a
// worker's attempts: it gets the next CallFunc and returns one that calls
// it, for a trace span, an audit log ([Op.Writes] tells the changes
// apart), metadata every task should carry, or an authorisation check
// written once for every call: the task's record is in [Call.Task], and a
// listing's filters in [Call.List]. It runs on the caller's goroutine,
// with the caller's context; a panic is not recovered. (The bulk actions,
// such as [Store.RetryMany], make their single calls on goroutines of
// their own, BulkConcurrency at a time: a panic there stops the action and
// is raised again on the caller's goroutine once the calls under way end.) A middleware that
// returns without calling next refuses the call, and the Store method
// returns its error.
//
// The CallFunc returns the task the call returned or, for a call that
// returns something else (a URL, an output, a page), the task's record, or
// nil for OpList, OpStats, OpWorkers, OpPeriodics, OpPause, OpResume and
// OpPaused.
//
// StoreOptions.Middleware lists them outermost first, as for Middleware.
type StoreMiddleware func(next CallFunc) CallFunc

// chainCalls returns do inside mw, mw[0] outermost.
func chainCalls(do CallFunc, mw []StoreMiddleware) (CallFunc, error) {
	for i := len(mw) - 1; i >= 0; i-- {
		if mw[i] == nil {
			return nil, fmt.Errorf("%w: StoreOptions.Middleware[%d] is nil", ErrInvalidOptions, i)
		}
		if do = mw[i](do); do == nil {
			return nil, fmt.Errorf("%w: StoreOptions.Middleware[%d] returned a nil CallFunc", ErrInvalidOptions, i)
		}
	}
	return do, nil
}

// call runs c through the middleware: first, for a call on a task, it
// reads the task's record, which the middleware sees (Call.Task) and the
// call then uses.
func (s *Store) call(ctx context.Context, c *Call) (*Task, error) {
	if kit.Bypassed(ctx) {
		return s.perform(ctx, c) // the test kit's own reads
	}
	if c.TaskID != "" && c.Op != OpCreate {
		c.read, c.readID = true, c.TaskID
		if c.readErr = ParseID(c.TaskID); c.readErr == nil {
			c.rec, c.etag, c.readErr = s.read(ctx, c.TaskID)
		}
		if c.rec != nil {
			c.Task = c.rec.Task.clone()
		}
	}
	return s.do(ctx, c)
}

// current returns the record of c's task and its ETag: the one read before
// the middleware ran, or a fresh read if a middleware changed TaskID.
func (s *Store) current(ctx context.Context, c *Call) (*record, string, error) {
	if c.read && c.readID == c.TaskID {
		return c.rec, c.etag, c.readErr
	}
	if err := ParseID(c.TaskID); err != nil {
		return nil, "", err
	}
	return s.read(ctx, c.TaskID)
}

// perform carries out a call once every middleware has passed it on.
func (s *Store) perform(ctx context.Context, c *Call) (*Task, error) {
	switch c.Op {
	case OpCreate:
		if c.Params == nil {
			return nil, invalidArg("create call without Params")
		}
		return s.create(ctx, c)
	case OpSubmit:
		return s.submit(ctx, c)
	case OpCancel:
		if c.dry {
			if err := checkReason(c.Reason); err != nil {
				return nil, err // a middleware's change
			}
			return s.judge(ctx, c, event{kind: evCancel, reason: c.Reason, notify: s.opts.OnTerminal != nil, states: c.states})
		}
		return s.cancel(ctx, c)
	case OpRetry:
		if c.dry {
			return s.judge(ctx, c, event{kind: evRetry, states: c.states})
		}
		return s.retry(ctx, c)
	case OpPurge:
		return s.purgeOne(ctx, c)
	case OpSchedule:
		return s.schedule(ctx, c)
	case OpUploadInput:
		return s.uploadInput(ctx, c)
	case OpGet:
		t, _, err := s.current(ctx, c)
		return t.task(), err
	case OpPresignUpload:
		return s.presignUpload(ctx, c)
	case OpPresignDownload, OpOpenOutput:
		return s.output(ctx, c)
	case OpList:
		if c.List == nil {
			return nil, invalidArg("list call without List")
		}
		page, recs, err := s.list(ctx, *c.List)
		c.result, c.recs = page, recs
		return nil, err
	case OpStats:
		stats, err := s.stats(ctx, c.stats)
		c.result = stats
		return nil, err
	case OpWorkers:
		list, err := s.workers(ctx)
		c.result = list
		return nil, err
	case OpPeriodics:
		list, err := s.periodics(ctx)
		c.result = list
		return nil, err
	case OpPause, OpResume:
		return nil, s.setPaused(ctx, c.Type, c.Op == OpPause)
	case OpPaused:
		types, err := s.paused(ctx)
		c.result = types
		return nil, err
	}
	return nil, invalidArg("unknown store call %q", c.Op)
}
