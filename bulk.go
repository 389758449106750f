package s3task

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"

	"github.com/s3task/s3task/internal/kit"
)

// Bounds of a bulk action ([Store.RetryMany], [Store.CancelMany],
// [Store.PurgeMany]).
const (
	// MaxBulkIDs is the most task IDs one call takes in BulkOptions.IDs.
	MaxBulkIDs = 1000
	// DefaultBulkLimit is the most tasks one call acts on when
	// BulkOptions.Limit is zero.
	DefaultBulkLimit = 100
	// MaxBulkLimit is the largest BulkOptions.Limit.
	MaxBulkLimit = 1000
	// BulkConcurrency is how many tasks one call acts on at once.
	BulkConcurrency = 4
)

// BulkOptions selects the tasks of a bulk action and bounds one call. The
// tasks are selected either by ID (IDs) or by a filter (Statuses, States,
// Types, Metadata), never both: a call that sets neither is refused, so that no
// call acts on every task by mistake.
//
// Either way the tasks are taken in listing order, newest first, each
// once, and one call goes through them until it has acted on Limit tasks,
// scanned MaxScan entries of the listing (a filter only), or reached the
// end of the selection; BulkReport.NextCursor then continues from where it
// stopped. Pass the same selection with the cursor to go on.
type BulkOptions struct {
	// IDs selects these tasks, at most [MaxBulkIDs] of them: a selection
	// made in a user interface. Repeated IDs count once. An ID that is not
	// a task ID is reported as failed, with its *[IDError], by the call
	// without a Cursor (not again by the calls that continue it).
	IDs []string

	// Statuses, States, Types and Metadata select the tasks that pass
	// them, as the filters of [ListOptions] do (and with their rules), by
	// listing the tasks newest first and reading their records. A filter
	// that selects few tasks among many reads through many records to find
	// them: MaxScan bounds how far one call reads.
	Statuses []Status
	// States selects by [State], as ListOptions.States does. A state can
	// change without a write (a scheduled task becomes ready), and by
	// another's write between the listing and the action, so each task is
	// judged against States again when its turn comes, by its record as it
	// is then: one no longer in them is skipped, with a *[TransitionError]
	// that names its state. So RetryMany with States [StateDead] retries
	// the tasks failed for good and never pulls forward one that is only
	// waiting for its backoff.
	States   []State
	Types    []string          // see Statuses
	Metadata map[string]string // see Statuses
	// MaxScan is the most entries of the listing one call scans, as
	// [ListOptions.MaxScan]: zero means [DefaultListScan], at most
	// [MaxListScan]. Only with a filter.
	MaxScan int

	// Cursor continues the selection from BulkReport.NextCursor; empty
	// starts at the newest task. A List cursor is a position in the same
	// listing, and serves as well.
	Cursor string
	// Limit is the most tasks one call acts on (or, in a dry run, would
	// act on), 1 to [MaxBulkLimit]; zero means [DefaultBulkLimit]. Tasks
	// skipped or failed do not count.
	Limit int
	// DryRun decides each task's action against its record, as the call
	// would, and writes nothing: the report says what would be done. With
	// a filter, the records the listing read are judged as they are, at no
	// request more; with IDs, each record is read once (one GET). A dry run
	// checks the record only: a Retry the dry run expects may still fail
	// for an input that is gone or now too large.
	DryRun bool
	// DropPendingNotices is PurgeMany's: it purges finished tasks whose
	// OnTerminal notice is still to go out, as [PurgeOptions] has it.
	// RetryMany and CancelMany refuse it.
	DropPendingNotices bool
}

// BulkOutcome is what a bulk action did with one task.
type BulkOutcome string

// The outcomes of a task in a [BulkReport].
const (
	// BulkDone: the action was carried out.
	BulkDone BulkOutcome = "done"
	// BulkWouldDo: in a dry run, the action would be carried out.
	BulkWouldDo BulkOutcome = "would_do"
	// BulkSkipped: the task is not one the action applies to, judged
	// against its record as it stands (not as the listing saw it):
	// BulkResult.Err is a *[TransitionError] whose Reason says why (not
	// failed, for a Retry; finished, for a Cancel; not finished, its
	// notice still to go out, or its key still held, for a Purge; no
	// longer in BulkOptions.States, for any of them), or
	// wraps [ErrNotFound] for a task that does not exist (or no longer
	// does).
	BulkSkipped BulkOutcome = "skipped"
	// BulkFailed: the action was refused or failed: BulkResult.Err says
	// why (an invalid ID, a middleware's refusal, an unreadable record,
	// [ErrConflict], [ErrOutcomeUnknown], an S3 error, the context's end).
	BulkFailed BulkOutcome = "failed"
)

// BulkResult is what a bulk action did with one task. In JSON (see
// [BulkResult.MarshalJSON]) it is an object with task_id, outcome, task
// and error, the message of Err.
type BulkResult struct {
	// ID is the task's ID, as given.
	ID string `json:"task_id"`
	// Outcome is what was done with it.
	Outcome BulkOutcome `json:"outcome"`
	// Err says why a task was skipped or failed; nil otherwise.
	Err error `json:"-"`
	// Task is the task as the call returned it: as the action left it
	// (done; for a purged task, its record as locked before the delete),
	// or as it was judged (would_do). Nil for a task skipped or failed.
	Task *Task `json:"task,omitempty"`
}

// MarshalJSON encodes r as a JSON object: task_id, outcome, task (left
// out when nil) and error, Err's message (left out when Err is nil). An
// error value has no JSON form of its own; its message is what a client
// of an API or a log can use.
func (r BulkResult) MarshalJSON() ([]byte, error) {
	type plain BulkResult // r's fields, without this method
	return json.Marshal(struct {
		plain
		Error string `json:"error,omitempty"`
	}{plain(r), errorText(r.Err)})
}

// UnmarshalJSON decodes what MarshalJSON encodes. Err is then an error
// with the message encoded, nil if there was none; it wraps none of the
// package's errors, so errors.Is and errors.As do not see through it.
func (r *BulkResult) UnmarshalJSON(data []byte) error {
	type plain BulkResult
	v := struct {
		*plain
		Error string `json:"error"`
	}{plain: (*plain)(r)}
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	r.Err = textError(v.Error)
	return nil
}

// BulkReport says what a bulk action found and did. It encodes to JSON
// with the snake_case names of its tags, each result as
// [BulkResult.MarshalJSON] has it and each broken record as
// [RecordError.MarshalJSON] does, so a host can answer with it as it is.
type BulkReport struct {
	// DryRun is BulkOptions.DryRun: nothing was written.
	DryRun bool `json:"dry_run"`
	// Results holds each task the call reached, in the order it took
	// them: newest first (the IDs that are not task IDs first).
	Results []BulkResult `json:"results"`
	// Acted, Skipped and Failed count Results by outcome; Acted counts
	// the tasks done, or in a dry run those that would be.
	Acted   int `json:"acted"`
	Skipped int `json:"skipped"` // see Acted
	Failed  int `json:"failed"`  // see Acted
	// Broken holds the records the listing scanned and could not read
	// (a filter only); they are left alone.
	Broken []*RecordError `json:"broken,omitempty"`
	// Scanned is how many entries of the listing the call went through (a
	// filter only; see Page.Scanned).
	Scanned int `json:"scanned"`
	// ScanLimited reports that the call stopped at MaxScan before acting
	// on Limit tasks, with more of the listing left (a filter only).
	ScanLimited bool `json:"scan_limited"`
	// NextCursor continues the selection right after the last task the
	// call reached (see BulkOptions.Cursor): a task it skipped or failed
	// is behind it, to be acted on again by ID. It is empty once the call
	// has gone through the whole selection. A call that ends with an error
	// (the listing failed, or ctx ended) returns the report of what it did
	// and a NextCursor to resume from: empty there means it had reached no
	// task, and resuming starts over.
	NextCursor string `json:"next_cursor,omitempty"`
}

// add appends results to r and counts them.
func (r *BulkReport) add(results ...BulkResult) {
	for _, res := range results {
		switch res.Outcome {
		case BulkDone, BulkWouldDo:
			r.Acted++
		case BulkSkipped:
			r.Skipped++
		default:
			r.Failed++
		}
	}
	r.Results = append(r.Results, results...)
}

// RetryMany puts the selected failed tasks back in the queue, each as
// [Store.Retry] does and through the same StoreMiddleware (an [OpRetry]
// call per task), and reports what it did with each. A task that is not
// failed when its turn comes (retried or cancelled since it was listed) is
// skipped. The selection, the bounds of one call and the cursor are those
// of opts (see [BulkOptions]); it acts on [BulkConcurrency] tasks at once.
//
// Requests. With a filter, the listing costs what [Store.List] with the
// same filter costs (one LIST per 1,000 entries and one GET per task
// folder scanned), once per page it takes: a page holds at most the tasks
// still to act on, so a call whose tasks are all retried lists once. With
// IDs there is no listing. A dry run adds nothing to the listing with a
// filter, and one GET per task with IDs. A run adds, per task it
// retries, what Retry costs: GET, HEAD, PUT marker, PUT record, the wake
// object's PUT (its GET too, once, unless this Store wrote it last; the
// Retries in flight share its writes), and
// a DELETE of the old marker of a task that was waiting for its retry; per
// task it skips, the GET that finds it so.
//
// Errors: [ErrInvalidArgument] for options out of range, with no request;
// [ErrInvalidCursor]; S3 errors of the listing and the context's error,
// with the report of what was done. A task's own error is in its result,
// never the call's.
func (s *Store) RetryMany(ctx context.Context, opts BulkOptions) (*BulkReport, error) {
	if opts.DropPendingNotices {
		return nil, invalidArg("BulkOptions.DropPendingNotices is for PurgeMany only")
	}
	return s.bulk(ctx, bulkAction{op: OpRetry}, opts)
}

// CancelMany abandons the selected tasks that are not finished, each as
// [Store.Cancel] does with reason and through the same StoreMiddleware (an
// [OpCancel] call per task), and reports what it did with each. A finished
// task (completed, or abandoned already) is skipped. The selection, the
// bounds of one call and the cursor are those of opts (see [BulkOptions]);
// it acts on [BulkConcurrency] tasks at once.
//
// Requests: the listing or the dry run as for [Store.RetryMany]; a run
// adds, per task it abandons, what Cancel costs: GET, PUT record, and a
// DELETE of the marker of a task that had one (more with an OnTerminal
// hook; see Cancel); per task it skips, one GET.
//
// Errors: [ErrInvalidArgument] for a reason over 1024 bytes or options out
// of range, with no request; otherwise as [Store.RetryMany].
func (s *Store) CancelMany(ctx context.Context, reason string, opts BulkOptions) (*BulkReport, error) {
	if err := checkReason(reason); err != nil {
		return nil, err
	}
	if opts.DropPendingNotices {
		return nil, invalidArg("BulkOptions.DropPendingNotices is for PurgeMany only")
	}
	return s.bulk(ctx, bulkAction{op: OpCancel, reason: reason}, opts)
}

// PurgeMany deletes the selected finished tasks by the rules of
// [Store.Purge], whatever their age, each through StoreMiddleware as an
// [OpPurge] call, and reports what it did with each. A task Purge would
// keep is skipped, with the reason: not finished (queued, running, waiting
// for a retry), its OnTerminal notice still to go out (unless
// DropPendingNotices), created with a key written less than 10 minutes
// ago, or changed less than a minute ago. As with Purge, the record is locked by a compare-and-set before
// anything is deleted, so a Retry that races with it either wins first
// (and the task is skipped) or is refused. The selection, the bounds of
// one call and the cursor are those of opts (see [BulkOptions]); it acts
// on [BulkConcurrency] tasks at once.
//
// Requests: the listing or the dry run as for [Store.RetryMany], and a GET
// of the key's object for a task created with a key (a dry run too); a run
// adds, per task deleted, a GET of the record, the PUT that locks it, a
// LIST of its folder, one DeleteObjects per 1,000 objects, and DELETEs of
// its marker and of the record; per task it skips, one GET.
//
// Errors: as [Store.RetryMany].
func (s *Store) PurgeMany(ctx context.Context, opts BulkOptions) (*BulkReport, error) {
	return s.bulk(ctx, bulkAction{op: OpPurge, force: opts.DropPendingNotices}, opts)
}

// bulkAction is the single call a bulk action makes for each task.
type bulkAction struct {
	op     Op             // OpRetry, OpCancel or OpPurge
	reason string         // OpCancel's reason
	force  bool           // OpPurge: BulkOptions.DropPendingNotices
	states map[State]bool // BulkOptions.States, checked again per task (nil: any)
}

// bulk runs action a over the selection of opts.
func (s *Store) bulk(ctx context.Context, a bulkAction, opts BulkOptions) (*BulkReport, error) {
	limit := cmp(opts.Limit, DefaultBulkLimit)
	if limit < 0 || limit > MaxBulkLimit {
		return nil, invalidArg("BulkOptions.Limit %d, want 1 to %d", limit, MaxBulkLimit)
	}
	after := ""
	if opts.Cursor != "" {
		var err error
		if after, err = decodeCursor(opts.Cursor); err != nil {
			return nil, err
		}
	}
	filter := ListOptions{Statuses: opts.Statuses, States: opts.States, Types: opts.Types, Metadata: opts.Metadata, MaxScan: opts.MaxScan}
	filtered := len(opts.Statuses) > 0 || len(opts.States) > 0 || len(opts.Types) > 0 || len(opts.Metadata) > 0
	switch {
	case len(opts.IDs) > 0 && (filtered || opts.MaxScan != 0):
		return nil, invalidArg("BulkOptions selects by IDs or by a filter (Statuses, States, Types, Metadata, MaxScan), not both")
	case len(opts.IDs) > MaxBulkIDs:
		return nil, invalidArg("BulkOptions.IDs holds %d IDs, want at most %d", len(opts.IDs), MaxBulkIDs)
	case len(opts.IDs) > 0:
		return s.bulkIDs(ctx, a, opts, after, limit)
	case !filtered:
		return nil, invalidArg("BulkOptions selects no task: set IDs, or a filter (Statuses, States, Types or Metadata)")
	}
	q, err := newListQuery(filter)
	if err != nil {
		return nil, err
	}
	a.states = q.states
	return s.bulkFilter(ctx, a, opts, filter, limit)
}

// bulkIDs runs a over the tasks opts.IDs names, after position after.
func (s *Store) bulkIDs(ctx context.Context, a bulkAction, opts BulkOptions, after string, limit int) (*BulkReport, error) {
	r := &BulkReport{DryRun: opts.DryRun}
	var ids []string
	seen := make(map[string]bool, len(opts.IDs))
	for _, id := range opts.IDs {
		if seen[id] {
			continue
		}
		seen[id] = true
		if err := ParseID(id); err != nil {
			if opts.Cursor == "" {
				r.add(BulkResult{ID: id, Outcome: BulkFailed, Err: err})
			}
			continue
		}
		if id > after { // the position after a task is its ID and "0"
			ids = append(ids, id)
		}
	}
	slices.Sort(ids) // listing order: newest first
	results := s.actAll(ctx, a, opts.DryRun, ids, nil, limit)
	r.add(results...)
	if n := len(results); n < len(ids) {
		// Stopped before the end: the limit, or ctx's end.
		r.NextCursor = opts.Cursor
		if n > 0 {
			r.NextCursor = encodeCursor(ids[n-1] + "0")
		}
		return r, ctx.Err()
	}
	return r, nil
}

// bulkFilter runs a over the tasks that pass filter, listing them page by
// page through the Store's middleware (an OpList call each), as List does.
func (s *Store) bulkFilter(ctx context.Context, a bulkAction, opts BulkOptions, filter ListOptions, limit int) (*BulkReport, error) {
	r := &BulkReport{DryRun: opts.DryRun}
	scan := cmp(opts.MaxScan, DefaultListScan)
	cursor := opts.Cursor
	for {
		lo := filter
		lo.Limit, lo.Cursor, lo.MaxScan = min(limit-r.Acted, MaxListLimit), cursor, scan-r.Scanned
		c := &Call{Op: OpList, List: &lo}
		_, err := s.call(ctx, c)
		page, err := result[*Page](c, err)
		if err != nil {
			r.NextCursor = cursor
			return r, err
		}
		r.Scanned += page.Scanned
		r.Broken = append(r.Broken, page.Broken...)
		ids := make([]string, len(page.Tasks))
		for i, t := range page.Tasks {
			ids[i] = t.ID
		}
		var recs []*record
		if opts.DryRun && len(c.recs) == len(ids) {
			recs = c.recs // judged as listed: no read more
		}
		results := s.actAll(ctx, a, opts.DryRun, ids, recs, limit-r.Acted)
		r.add(results...)
		if n := len(results); n < len(ids) {
			// Stopped inside the page: the limit, or ctx's end.
			if n > 0 {
				cursor = encodeCursor(ids[n-1] + "0")
			}
			r.NextCursor = cursor
			return r, ctx.Err()
		}
		cursor = page.NextCursor
		switch {
		case cursor == "", r.Acted >= limit:
		case r.Scanned >= scan:
			r.ScanLimited = true
		default:
			continue
		}
		r.NextCursor = cursor
		return r, nil
	}
}

// actAll acts on the tasks ids in order, BulkConcurrency at a time, until
// room of them were acted on, ctx ends, or the tasks end. recs, if not nil,
// holds the record a listing read for each, for a dry run to judge. It
// returns the results of the tasks it started, which are the first of ids,
// in their order: a task is started only while the tasks in flight, were
// they all acted on, would leave room for it. A panic in a task's call (a
// middleware's) starts no more tasks and is raised again on the caller's
// goroutine once those in flight are done, as the single call would raise
// it.
func (s *Store) actAll(ctx context.Context, a bulkAction, dry bool, ids []string, recs []*record, room int) []BulkResult {
	results := make([]BulkResult, len(ids))
	var (
		mu       sync.Mutex
		wake     = sync.NewCond(&mu)
		acted    int
		inFlight int
		panicked any // the first panic of a task's call, if any
		wg       sync.WaitGroup
	)
	started := 0
	for i, id := range ids {
		mu.Lock()
		for inFlight > 0 && (inFlight >= BulkConcurrency || acted+inFlight >= room) {
			wake.Wait()
		}
		if acted >= room || ctx.Err() != nil || panicked != nil {
			mu.Unlock()
			break
		}
		inFlight++
		mu.Unlock()
		var rec *record
		if recs != nil {
			rec = recs[i]
		}
		started++
		wg.Go(func() {
			var res BulkResult
			defer func() {
				p := recover()
				mu.Lock()
				defer mu.Unlock()
				results[i] = res
				inFlight--
				if p != nil && panicked == nil {
					panicked = p
				}
				if p == nil && (res.Outcome == BulkDone || res.Outcome == BulkWouldDo) {
					acted++
				}
				wake.Broadcast()
			}()
			res = s.act(ctx, a, dry, id, rec)
		})
	}
	wg.Wait()
	if panicked != nil {
		panic(panicked)
	}
	return results[:started]
}

// act makes a's single call for task id, through the Store's middleware as
// that call would go, and reports its outcome. rec, if not nil, is the
// task's record as a listing read it, which a dry run judges instead of
// reading it again.
func (s *Store) act(ctx context.Context, a bulkAction, dry bool, id string, rec *record) BulkResult {
	c := &Call{Op: a.op, TaskID: id, Reason: a.reason, dry: dry, force: a.force, states: a.states}
	var task *Task
	var err error
	if rec != nil && dry {
		task, err = s.callOn(ctx, c, rec)
	} else {
		task, err = s.call(ctx, c)
	}
	changed, err := result[bool](c, err)
	res := BulkResult{ID: id}
	switch {
	case err == nil && changed && dry:
		res.Outcome, res.Task = BulkWouldDo, task
	case err == nil && changed:
		res.Outcome, res.Task = BulkDone, task
	case err == nil:
		// Nothing to change: a Cancel of a task abandoned already.
		from := Status("")
		if task != nil {
			from = task.Status
		}
		res.Outcome, res.Err = BulkSkipped, &TransitionError{ID: id, From: from, Event: string(a.op), Reason: "it is " + string(from) + " already"}
	case errors.Is(err, ErrInvalidTransition), errors.Is(err, ErrNotFound):
		res.Outcome, res.Err = BulkSkipped, err
	default:
		res.Outcome, res.Err = BulkFailed, err
	}
	return res
}

// callOn runs c, a call on a task, through the middleware as [Store.call]
// does, with rec as the task's record read for it: no request more.
func (s *Store) callOn(ctx context.Context, c *Call, rec *record) (*Task, error) {
	c.read, c.readID, c.rec = true, c.TaskID, rec
	c.Task = rec.Task.clone()
	if kit.Bypassed(ctx) {
		return s.perform(ctx, c)
	}
	return s.do(ctx, c)
}

// judge decides event e against the record of c's task and writes
// nothing: a task of a bulk action's dry run. It returns the task as it
// stands and sets c.result to whether the call would change it.
func (s *Store) judge(ctx context.Context, c *Call, e event) (*Task, error) {
	t, _, err := s.current(ctx, c)
	if err != nil {
		return nil, err
	}
	_, write, err := transition(t, e, s.serverNow())
	if err != nil {
		return nil, err
	}
	c.result = write
	return t.task(), nil
}
