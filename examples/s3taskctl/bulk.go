package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/examples/internal/taskview"
)

// bulkFlags select the tasks of retry, cancel and purge over several tasks
// (Store.RetryMany, CancelMany, PurgeMany): task IDs, or a filter.
type bulkFlags struct {
	status  statusFilter
	types   []string
	meta    map[string]string
	dryRun  bool
	limit   int
	maxScan int
	cursor  string
	set     bool // a flag that only a bulk action takes was given
}

// register adds the selection flags to fs; dryRun adds -dry-run, and
// limit -limit (purge has a -limit of its own).
func (b *bulkFlags) register(fs *flag.FlagSet, verb string, dryRun, limit bool) {
	fs.Func("status", "act on the tasks in these statuses or states (scheduled, ready, retrying, dead), comma-separated", func(v string) error {
		b.set = true
		return b.status.add(v)
	})
	fs.BoolFunc("failed", "act on the failed tasks (the same as -status failed)", func(v string) error {
		if v != "true" {
			return errors.New("-failed takes no value")
		}
		b.set = true
		b.status.statuses = append(b.status.statuses, s3task.StatusFailed)
		return nil
	})
	fs.Func("type", "act on the tasks of these types, comma-separated", func(v string) error {
		b.set = true
		for s := range strings.SplitSeq(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				b.types = append(b.types, s)
			}
		}
		return nil
	})
	fs.Func("meta", "act on the tasks whose metadata has `key=value` (repeat for more)", func(v string) error {
		k, val, ok := strings.Cut(v, "=")
		if !ok || k == "" {
			return fmt.Errorf("%q: want key=value", v)
		}
		b.set = true
		if b.meta == nil {
			b.meta = map[string]string{}
		}
		b.meta[k] = val
		return nil
	})
	if dryRun {
		fs.BoolFunc("dry-run", "report what would be "+verb+" and change nothing", func(v string) error {
			if v != "true" {
				return errors.New("-dry-run takes no value")
			}
			b.set, b.dryRun = true, true
			return nil
		})
	}
	if limit {
		fs.Func("limit", fmt.Sprintf("with several tasks, act on at most this many in one run, 1 to %d (default %d)", s3task.MaxBulkLimit, s3task.DefaultBulkLimit), func(v string) error {
			n, err := parseCount(v, 1, s3task.MaxBulkLimit)
			b.set, b.limit = true, n
			return err
		})
	}
	fs.Func("max-scan", fmt.Sprintf("with a filter, read at most this many task folders in one run, 1 to %d (default %d)", s3task.MaxListScan, s3task.DefaultListScan), func(v string) error {
		n, err := parseCount(v, 1, s3task.MaxListScan)
		b.set, b.maxScan = true, n
		return err
	})
	fs.Func("cursor", "go on from where the last run stopped (printed by it)", func(v string) error {
		b.set, b.cursor = true, v
		return nil
	})
}

// filtered reports whether a filter was given.
func (b *bulkFlags) filtered() bool {
	return !b.status.empty() || len(b.types) > 0 || len(b.meta) > 0
}

// options returns the library's options for the tasks ids or the filter.
func (b *bulkFlags) options(ids []string) (s3task.BulkOptions, error) {
	switch {
	case len(ids) > 0 && b.filtered():
		return s3task.BulkOptions{}, usageErr(errors.New("give task IDs or a filter (-failed, -status, -type, -meta), not both"))
	case len(ids) == 0 && !b.filtered():
		return s3task.BulkOptions{}, usageErr(errors.New("no task selected: give task IDs or a filter (-failed, -status, -type, -meta)"))
	case len(ids) > 0 && b.maxScan > 0:
		return s3task.BulkOptions{}, usageErr(errors.New("-max-scan bounds a filter's listing; it does not apply to task IDs"))
	}
	statuses, states := b.status.filters()
	return s3task.BulkOptions{
		IDs: ids, Statuses: statuses, States: states, Types: b.types, Metadata: b.meta,
		MaxScan: b.maxScan, Cursor: b.cursor, Limit: b.limit, DryRun: b.dryRun,
	}, nil
}

// statusFilter is what -status names: statuses, and states, the parts of
// a status the library tells apart (s3task.State: scheduled and ready for
// queued, retrying and dead for failed). A task passes if it is in any of
// them.
type statusFilter struct {
	statuses []s3task.Status
	states   []s3task.State
}

// allStates are the library's states, each the part of one status.
var allStates = []s3task.State{s3task.StateCreated, s3task.StateScheduled, s3task.StateReady, s3task.StateRunning,
	s3task.StateCompleted, s3task.StateRetrying, s3task.StateDead, s3task.StateAbandoned}

// add adds the statuses and states of v, comma-separated.
func (f *statusFilter) add(v string) error {
	for s := range strings.SplitSeq(v, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if st := s3task.Status(s); st.Valid() {
			f.statuses = append(f.statuses, st)
			continue
		}
		st, err := s3task.ParseState(s)
		if err != nil {
			return fmt.Errorf("%q: want created, queued, running, completed, failed or abandoned, or a part of one: scheduled, ready, retrying or dead", s)
		}
		f.states = append(f.states, st)
	}
	return nil
}

// empty reports whether f names nothing.
func (f statusFilter) empty() bool { return len(f.statuses) == 0 && len(f.states) == 0 }

// filters returns f as the library's filters. The library keeps a task
// only if it passes both Statuses and States, so f, which keeps a task
// in any of its statuses or states, is Statuses alone, or, with a state
// among them, States alone, each status given as its states.
func (f statusFilter) filters() ([]s3task.Status, []s3task.State) {
	if len(f.states) == 0 {
		return f.statuses, nil
	}
	states := slices.Clone(f.states)
	for _, st := range allStates {
		if slices.Contains(f.statuses, st.Status()) && !slices.Contains(states, st) {
			states = append(states, st)
		}
	}
	return nil, states
}

// match reports whether t passes f at now, the server's time (Store.Now).
func (f statusFilter) match(t *s3task.Task, now time.Time) bool {
	return slices.Contains(f.statuses, t.Status) || slices.Contains(f.states, t.State(now))
}

// names returns the statuses and states of f, as given.
func (f statusFilter) names() []string {
	var out []string
	for _, s := range f.statuses {
		out = append(out, string(s))
	}
	for _, s := range f.states {
		out = append(out, string(s))
	}
	return out
}

// bulkDoc is what retry, cancel and purge over several tasks print with
// -json.
type bulkDoc struct {
	Action      string            `json:"action"` // retry, cancel or purge
	DryRun      bool              `json:"dry_run"`
	Results     []bulkResultDoc   `json:"results"`
	Acted       int               `json:"acted"` // done, or in a dry run would be
	Skipped     int               `json:"skipped"`
	Failed      int               `json:"failed"`
	Scanned     int               `json:"scanned"`
	ScanLimited bool              `json:"scan_limited"`
	Broken      []taskview.Broken `json:"broken"`
	NextCursor  string            `json:"next_cursor,omitempty"`
	Error       *errorBody        `json:"error,omitempty"`
}

// bulkResultDoc is one task in bulkDoc.
type bulkResultDoc struct {
	ID      string `json:"task_id"`
	Outcome string `json:"outcome"`          // done, would_do, skipped, failed
	Status  string `json:"status,omitempty"` // done, would_do: the task's status after, or as judged
	Code    string `json:"code,omitempty"`   // skipped, failed: the code of the error, as in {"error": {...}}
	Reason  string `json:"reason,omitempty"` // skipped, failed: why
}

// bulkVerbs are the words for what an action did to a task, and would do.
var bulkVerbs = map[string][2]string{
	"retry":  {"retried", "would be retried"},
	"cancel": {"abandoned", "would be abandoned"},
	"purge":  {"deleted", "would be deleted"},
}

// report prints what a bulk action did and returns the command's error
// (see bulkError), which the report's "error" object says too.
func (c *cli) report(action string, r *s3task.BulkReport, err error, again string, byID bool) error {
	doc := bulkDoc{
		Action: action, DryRun: r.DryRun, Results: []bulkResultDoc{},
		Acted: r.Acted, Skipped: r.Skipped, Failed: r.Failed, Scanned: r.Scanned, ScanLimited: r.ScanLimited,
		Broken: taskview.BrokenOf(r.Broken), NextCursor: r.NextCursor,
	}
	failed := bulkError(action, r, err, byID)
	if failed != nil {
		doc.Error = failed.body()
	}
	for _, res := range r.Results {
		d := bulkResultDoc{ID: res.ID, Outcome: string(res.Outcome)}
		if res.Task != nil {
			d.Status = string(res.Task.Status)
		}
		if res.Err != nil {
			_, d.Code = classify(res.Err)
			d.Reason = res.Err.Error()
			var te *s3task.TransitionError
			if errors.As(res.Err, &te) {
				d.Reason = te.Reason
			}
		}
		doc.Results = append(doc.Results, d)
	}
	if c.set.json {
		c.writeJSON(doc)
	} else {
		verb := bulkVerbs[action][0]
		if r.DryRun {
			verb = bulkVerbs[action][1]
		}
		scanned := ""
		if r.Scanned > 0 {
			scanned = fmt.Sprintf(" (%s scanned)", plural(r.Scanned, "task folder"))
		}
		fmt.Fprintf(c.stdout, "%s %s, %d skipped, %d failed%s\n", plural(r.Acted, "task"), verb, r.Skipped, r.Failed, scanned)
		if len(doc.Results) > 0 {
			tw := newTable(c.stdout)
			tw.row("  ID", "OUTCOME", "WHY")
			for _, d := range doc.Results {
				why := d.Status
				if d.Reason != "" {
					why = d.Reason
				}
				tw.row("  "+clean(d.ID, 40), d.Outcome, clean(why, 120))
			}
			tw.flush()
		}
		for _, b := range doc.Broken {
			fmt.Fprintf(c.stdout, "unreadable, left alone: %s: %s\n", b.Key, b.Error)
		}
		if r.ScanLimited {
			fmt.Fprintln(c.stdout, "note: the run stopped at -max-scan before -limit tasks were acted on; more may match further on")
		}
		if r.NextCursor != "" {
			fmt.Fprintf(c.stdout, "more: run the same command with -cursor %s to go on\n", r.NextCursor)
		}
		if r.DryRun {
			fmt.Fprintln(c.stdout, "dry run: nothing was changed"+again)
		}
	}
	if failed != nil {
		return failed
	}
	return nil
}

// bulkError is how a bulk action ends: nil if every task was done (or in
// a dry run would be); the error's exit code if the run stopped on err;
// exit 1 if a task failed. A task skipped is no failure when a filter
// chose it (the filter reads what the action does not fit too); a task
// named by ID and skipped ends the command as the one-task command ends
// for it: exit 4 for a status the action does not fit (a cancel of a task
// abandoned already), 3 for a task that does not exist, the higher if
// both.
func bulkError(action string, r *s3task.BulkReport, err error, byID bool) *cmdError {
	switch {
	case err != nil:
		exit, code := classify(err)
		return &cmdError{exit: exit, code: code, documented: true, err: fmt.Errorf("%s stopped (the report says what was done): %w", action, err)}
	case r.Failed > 0:
		return &cmdError{exit: exitFailed, code: "some_failed", documented: true, err: fmt.Errorf("%s failed for %s (see the report)", action, plural(r.Failed, "task"))}
	case !byID || r.Skipped == 0:
		return nil
	}
	var worst *cmdError
	for _, res := range r.Results {
		if res.Outcome != s3task.BulkSkipped || res.Err == nil {
			continue
		}
		exit, code := classify(res.Err)
		if worst == nil || exit > worst.exit {
			worst = &cmdError{exit: exit, code: code, documented: true,
				err: fmt.Errorf("%s skipped %s named by ID (see the report); %s: %w", action, plural(r.Skipped, "task"), res.ID, res.Err)}
		}
	}
	return worst
}

// bulk runs a bulk action for the command: IDs or flags select the tasks,
// call acts on them.
func (c *cli) bulk(ctx context.Context, action string, b *bulkFlags, ids []string, again string,
	call func(store *s3task.Store, opts s3task.BulkOptions) (*s3task.BulkReport, error)) error {
	opts, err := b.options(ids)
	if err != nil {
		return err
	}
	store, err := c.open(ctx)
	if err != nil {
		return err
	}
	r, err := call(store, opts)
	if r == nil {
		return err
	}
	return c.report(action, r, err, again, len(opts.IDs) > 0)
}

// parseCount reads a whole number from lo to hi.
func parseCount(s string, lo, hi int) (int, error) {
	n, err := strconv.Atoi(s)
	switch {
	case err != nil:
		return 0, errors.New("not a whole number")
	case n < lo:
		return 0, fmt.Errorf("want at least %d", lo)
	case n > hi:
		return 0, fmt.Errorf("want at most %d", hi)
	}
	return n, nil
}
