package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/examples/internal/taskview"
)

func init() {
	commands = []*command{
		{name: "list", synopsis: "[-limit N] [-cursor C] [-status S[,S...]]", setup: listCmd,
			summary: "list tasks, newest first, a page at a time (-status filters client-side)",
			help: `Lists tasks, newest first, one page per call: one LIST and one GET per
task, whatever the bucket holds. The output ends with the -cursor that
continues the listing.

-status keeps only the tasks in the given statuses (created, queued,
running, completed, failed, abandoned) or states, the parts of a status:
scheduled (queued, its start to come by the S3 server's clock) and ready
(queued and due), retrying (failed, a retry to come) and dead (failed for
good). S3 cannot filter, so the filter is
client-side, page by page: the command reads one page of -limit tasks and
shows those that match, which may be fewer than -limit, or none at all
while more matches lie further on. The output then says so and gives the
cursor of the next page. Finding a rare status costs one GET per task
scanned, like any listing; "s3taskctl stats" counts statuses instead.`},
		{name: "show", synopsis: "ID", setup: showCmd, args: []string{"ID"},
			summary: "a task's record, its attempts and the objects in its folder (unreadable records too)",
			help: `Shows a task's record, its attempts (for the latest 10, from the record's
attempt history: which worker ran each, when, for how long, how it ended
and with what error; and the output of each attempt that wrote one),
whether its active marker exists, and every object in its folder.
Requests: a GET of the record, a LIST of the folder, a HEAD of the marker.

A record it cannot read (corrupt, a newer schema_version than this build
knows, or missing from a folder that still holds objects) is shown as far
as it goes: its key, the problem, its first 4096 bytes escaped, and the
objects in the folder; then show exits 1, and -json prints that as one
document whose error member says which (corrupt_record, unsupported_record,
missing_record). Exit 3 only when the folder holds nothing at all.`},
		{name: "watch", synopsis: "ID [-interval D]", setup: watchCmd, args: []string{"ID"},
			summary: "follow a task with a progress bar until it finishes",
			help: `Follows a task until it is finished, redrawing a progress bar from the
counters its worker reports with each heartbeat (one GET per -interval).
Exits 0 if the task completed, 1 if it failed for good or was abandoned, or
if -timeout ran out first (no limit by default). A failure that will be
retried is not the end: watch keeps following.`},
		{name: "retry", synopsis: "ID | ID... | -failed [-type T] [-status S] [-meta K=V] [-dry-run] [-limit N] [-max-scan N] [-cursor C]",
			setup: retryCmd, args: []string{"ID"}, variadic: true,
			summary: "put failed tasks back in the queue: one, several by ID, or by filter (-failed -type T), with -dry-run",
			help: `Puts a failed task back in the queue at once, whether its failure was final
or it was waiting for an automatic retry; a task that used every attempt
gets one more. Exit 4 if the task is not failed.

With several IDs, or a filter instead of IDs, it retries each failed task
of the selection and reports every task: done, skipped and why (not
failed), or failed and the error. -failed -type T retries every failed task
of type T, and -status dead every task failed for good, leaving those
waiting for their backoff alone (-status retrying picks those); -status
takes the statuses and states list does. -status, -type and -meta
(key=value, repeatable) combine, and the selection is read newest first,
one GET per task folder scanned.
-dry-run reports what would be retried and changes nothing. One run acts on
at most -limit tasks (default 100) and scans at most -max-scan task folders
(default 1000); when it stops before the end it prints the -cursor that goes
on. Exit 0 when every task was retried or skipped, 1 if any failed.`},
		{name: "schedule", synopsis: "ID WHEN", setup: scheduleCmd, args: []string{"ID", "WHEN"},
			summary: "hold a created or queued task back until a time, or run it now",
			help: `Sets the earliest time a created or queued task may start, by the S3
server's clock. WHEN is an RFC 3339 time, a delay from now such as +90m, or
"now" to run a scheduled task at once. Exit 4 if the task is neither created
nor queued.`},
		{name: "cancel", synopsis: "ID | ID... | -status S [-type T] [-meta K=V] [-reason TEXT] [-dry-run] [-limit N] [-max-scan N] [-cursor C]",
			setup: cancelCmd, args: []string{"ID"}, variadic: true,
			summary: "abandon unfinished tasks: one, several by ID, or by filter (-status, -type, -meta), with -dry-run",
			help: `Abandons a task that is not finished; a running task's worker stops it at
its next heartbeat. Cancelling an abandoned task changes nothing. Exit 4 for
a completed task.

With several IDs, or a filter instead of IDs (-status, -failed, -type, -meta,
as for retry), it abandons each unfinished task of the selection and
reports every task: done, skipped and why (finished already), or failed and
the error. -dry-run reports what would be abandoned and changes nothing;
-limit, -max-scan and -cursor bound and continue a run as for retry. Exit 0
when every task was abandoned or skipped, 1 if any failed.`},
		{name: "stats", synopsis: "[-since D|TIME] [-max-tasks N] [-attempts-over N]", setup: statsCmd,
			summary: "count tasks by status: what waits, for how long, and why things failed",
			help: `Reads the newest tasks (at most -max-tasks, one GET each) and counts them by
status: how many are unfinished (queued, running, or failed waiting for a
retry) and of which type, the oldest of those and its age, how many needed
more than -attempts-over attempts, and the failures by error category. A
quiet system has few unfinished tasks and a young oldest one; a stuck one
has an oldest unfinished task that keeps getting older, and a type whose
count only grows is one no running worker serves.

-since limits the count to tasks created in that window: a duration back
from now (24h, 7d) or an RFC 3339 time. If -max-tasks stopped the count
first, the output says so: the figures cover the newest tasks only.`},
		{name: "workers", synopsis: "[-live]", setup: workersCmd,
			summary: "the workers that announce themselves: which are alive, what each serves and runs",
			help: `Lists the workers that announce themselves in the bucket: each running
worker rewrites a small presence object under the prefix's _workers/
folder every PresenceInterval (2 minutes by default) and deletes it when it
stops. For each: its ID, whether it is live (written within two intervals
plus the clock margin, by the S3 server's clock), its host, how many tasks
it runs of its concurrency, the task types it claims (* for every type),
when it was last seen, last polled and started, its library version, and
the IDs of the tasks it runs.

A worker killed without a stop stays listed, not live, until the fleet's
reconciler deletes its object 24 hours after its last write. An object
that cannot be read is listed as UNREADABLE, with its key. Requests: one
LIST and one GET per worker (at most 1000). -live shows only the live
workers.`},
		{name: "periodics", synopsis: "-periodic NAME:TYPE:SCHEDULE [-periodic ...]", setup: periodicsCmd,
			summary: "the fleet's periodic tasks: when each runs next, and its latest run",
			help: `Shows the periodic tasks of the fleet (StoreOptions.Periodic): for each, its
schedule, what becomes of a run not made in time (skip, or run-once), when
its next run is due, and its latest run: the period it is the run of, its
task's ID and status. The bucket does not record the declarations, only
the runs, whose keys name the task and the period: give each periodic task
as the fleet declares it, with -periodic NAME:TYPE:SCHEDULE, where SCHEDULE
is

  every:<duration>              every:15m, every:1h (at least 1m)
  daily:HH:MM[:<zone>]          daily:02:00, daily:02:00:Europe/Berlin
  weekly:<day>:HH:MM[:<zone>]   weekly:mon:06:30, weekly:sunday:23:00:UTC

the zone an IANA name (default UTC), and add ,missed=run-once for a task
declared with RunMissedOnce. csvbatch's summary is
-periodic task-summary:task_summary:daily:00:05 with its default
-summary-schedule. Repeat -periodic for each task. A declaration that
cannot be read is a usage error.

The latest run is looked for in the latest period and, if that has none
yet, the one before; further back, none is shown ("none yet"). A run made
and then purged shows as purged; one whose key names a task with no record
yet as being made; one that cannot be read as UNREADABLE, with the reason
below the table. Requests: at most two GETs of a key and one of a record
per periodic task. It writes nothing.`},
		{name: "pause", synopsis: "TYPE", setup: pauseCmd(true), args: []string{"TYPE"},
			summary: "stop the workers claiming the tasks of a type",
			help: `Pauses a task type: within a PollInterval no worker claims a task of it
(first attempts, retries and take-overs alike); attempts already running
finish, and new tasks of the type are accepted and wait, queued. Pausing
a paused type changes nothing. Prints the types paused afterwards.
Workers of library versions before pausing existed do not honour it.
Requests: 2 GETs and 2 PUTs (2 GETs when nothing changes), then the GET
of the list. TYPE "" pauses the untyped tasks.`},
		{name: "resume", synopsis: "TYPE", setup: pauseCmd(false), args: []string{"TYPE"},
			summary: "let the workers claim the tasks of a paused type again",
			help: `Resumes a paused task type and announces its waiting tasks, so idle
workers list them within a PollInterval. Resuming a type that is not
paused changes nothing. Prints the types paused afterwards. Requests: as
pause.`},
		{name: "paused", synopsis: "", setup: pausedCmd,
			summary: "the task types paused now",
			help:    `Lists the task types paused now, sorted. Requests: one GET.`},
		{name: "reconcile", synopsis: "[-since D|TIME] [-dry-run]", setup: reconcileCmd,
			summary: "repair the marker index workers find tasks by",
			help: `Workers find work through small marker objects, an index kept next to the
records. reconcile compares the index with the records: it writes the
missing marker of every task a worker should look at, removes stale ones
(finished tasks, tasks that no longer exist, objects that are not task IDs)
and lists the records it cannot read. It changes no record, so it is safe
to run at any time, next to running workers. -dry-run reports and changes
nothing. Requests: a LIST per 1000 tasks, a GET per task, and one write per
repair.`},
		{name: "purge", synopsis: "-older-than D | ID... | -status S [-type T] [-meta K=V] [-yes] [-limit N] [-max-scan N] [-cursor C]",
			setup: purgeCmd, args: []string{"ID"}, variadic: true,
			summary: "delete finished tasks: created before a cutoff, by ID or by filter (a dry run unless -yes)",
			help: `Deletes the finished tasks (completed, abandoned, or failed for good)
created more than -older-than ago (36h, 30d): every object in the task's
folder, its marker, then its record. Unfinished tasks are never deleted.

Without -yes it is a dry run: it lists what it would delete and deletes
nothing. Run it that way first. -limit caps the tasks deleted in one run.

Instead of -older-than, task IDs or a filter (-status, -failed, -type,
-meta, as for retry) select the tasks, whatever their age: each finished
one is deleted by the same rules, and every task is reported: done, skipped
and why (not finished, its notice still to go out, its key still held), or
failed and the error. -limit (default 100, at most 1000), -max-scan and
-cursor bound and continue a run as for retry. Exit 0 when every task was
deleted or skipped, 1 if any failed.

An S3 lifecycle rule on the prefix can expire old objects with no requests
from here, but it goes by object age, not task status: give it an expiry
far beyond any task's life, or use purge.`},
		{name: "check", synopsis: "", setup: checkCmd,
			summary: "check the store is reachable and enforces conditional writes",
			help: `Proves the store enforces the conditional writes s3task relies on: it
creates a scratch object under the prefix with If-None-Match: *, checks a
second such create is refused and a write with a wrong If-Match ETag is
refused, then deletes it; and it lists the tasks. Exit 5 if the store
cannot be reached or lets a refused write through: then two workers could
both claim one task.`},
	}
}

// ---- list ----

func listCmd(fs *flag.FlagSet) runFunc {
	limit := intFlag(fs, "limit", 20, 1, s3task.MaxListLimit, "tasks per page, 1 to 1000")
	cursor := fs.String("cursor", "", "continue from this cursor (printed by the previous page)")
	var status string
	var want statusFilter
	fs.Func("status", "show only these statuses or states (scheduled, ready, retrying, dead), comma-separated; filtered client-side, page by page", func(v string) error {
		status, want = v, statusFilter{}
		return want.add(v)
	})
	return func(ctx context.Context, c *cli, _ []string) error {
		store, err := c.open(ctx)
		if err != nil {
			return err
		}
		page, err := store.List(ctx, s3task.ListOptions{Limit: *limit, Cursor: *cursor})
		if err != nil {
			return err
		}
		doc := listDoc{Tasks: []taskview.Task{}, Broken: taskview.BrokenOf(page.Broken), NextCursor: page.NextCursor, Read: len(page.Tasks)}
		serverNow := store.Now() // a state is judged by the server's clock, as workers judge it
		for _, t := range page.Tasks {
			if want.empty() || want.match(t, serverNow) {
				doc.Tasks = append(doc.Tasks, taskview.Of(t))
			}
		}
		if !want.empty() {
			doc.StatusFilter = want.names()
			if len(doc.Tasks) < *limit {
				doc.Note = fmt.Sprintf("-status is applied here, not by S3: this page read %d tasks and %d matched", doc.Read, len(doc.Tasks))
				if page.NextCursor != "" {
					doc.Note += "; more may match further on (-cursor " + page.NextCursor + ")"
				} else {
					doc.Note += "; that is the end of the listing"
				}
			}
		}
		if c.set.json {
			c.writeJSON(doc)
			return nil
		}
		tw := newTable(c.stdout)
		tw.row("ID", "STATUS", "ATTEMPT", "PROGRESS", "CREATED", "TYPE", "NAME")
		now := time.Now()
		for _, t := range doc.Tasks {
			tw.row(t.ID, statusText(t.Task, now), attemptText(t.Task), progressText(t.Task), ago(t.CreatedAt, now), clean(t.Type, 20), clean(t.Name, 40))
		}
		tw.flush()
		if len(doc.Tasks) == 0 {
			fmt.Fprintln(c.stdout, "(no tasks)")
		}
		for _, b := range doc.Broken {
			fmt.Fprintf(c.stdout, "UNREADABLE %s: %s\n", b.Key, b.Error)
		}
		if doc.Note != "" {
			fmt.Fprintln(c.stdout, "note: "+doc.Note)
		}
		if page.NextCursor != "" {
			fmt.Fprintf(c.stdout, "next page: s3taskctl list -cursor %s%s\n", page.NextCursor, repeatFlags(*limit, status))
		}
		return nil
	}
}

func repeatFlags(limit int, status string) string {
	var b strings.Builder
	if limit != 20 {
		b.WriteString(" -limit " + strconv.Itoa(limit))
	}
	if status != "" {
		b.WriteString(" -status " + status)
	}
	return b.String()
}

// ---- show ----

// objectDoc is an object in a task's folder.
type objectDoc struct {
	Key          string    `json:"key"`
	Size         int64     `json:"size"`
	LastModified time.Time `json:"last_modified"`
	Kind         string    `json:"kind"`              // record, input, output, other
	Attempt      int       `json:"attempt,omitempty"` // for outputs
}

// attemptDoc is one attempt: what it left behind, and what the record's
// attempt history (s3task.Task.History) says of it, for the attempts it
// still keeps.
type attemptDoc struct {
	Attempt int    `json:"attempt"`
	Output  string `json:"output,omitempty"` // the key of its output, if it wrote one
	Latest  bool   `json:"latest"`           // the attempt the record describes

	WorkerID      string     `json:"worker_id,omitempty"`
	StartedAt     *time.Time `json:"started_at,omitempty"`
	EndedAt       *time.Time `json:"ended_at,omitempty"`       // none while it runs
	Outcome       string     `json:"outcome,omitempty"`        // s3task.AttemptOutcome
	ErrorCategory string     `json:"error_category,omitempty"` // of a failure, an expired lease, a release
	Error         string     `json:"error,omitempty"`          // cut to s3task.HistoryErrorLimit bytes
}

type showDoc struct {
	Task     taskview.Task `json:"task"`
	Marker   bool          `json:"marker"`
	Attempts []attemptDoc  `json:"attempts"`
	Objects  []objectDoc   `json:"objects"`
}

func showCmd(fs *flag.FlagSet) runFunc {

	return func(ctx context.Context, c *cli, pos []string) error {
		id := pos[0]
		store, err := c.open(ctx)
		if err != nil {
			return err
		}
		var t *s3task.Task
		for try := 0; ; try++ {
			t, err = store.Get(ctx, id)
			if err == nil {
				break
			}
			var re *s3task.RecordError
			if !errors.Is(err, s3task.ErrNotFound) && !errors.As(err, &re) {
				return err
			}
			// An unreadable record, or none: show what the folder holds.
			retry, uerr := c.showUnreadable(ctx, store, id, err)
			switch {
			case !retry:
				return uerr
			case try > 0:
				return err // listed twice, yet not there to GET
			}
		}
		dir := store.Prefix() + id + "/"
		objects, outputs, err := c.folderObjects(ctx, store, dir)
		if err != nil {
			return err
		}
		doc := showDoc{Task: taskview.Of(t), Attempts: []attemptDoc{}, Objects: objects}
		last := t.Attempt
		for n := range outputs {
			last = max(last, n)
		}
		ran := map[int]s3task.Attempt{}
		for _, a := range t.History {
			ran[a.Number] = a
		}
		for n := 1; n <= last; n++ {
			a := attemptDoc{Attempt: n, Output: outputs[n], Latest: n == t.Attempt}
			if h, ok := ran[n]; ok {
				a.WorkerID, a.Outcome, a.ErrorCategory, a.Error = h.WorkerID, string(h.Outcome), h.ErrorCategory, h.Error
				if !h.StartedAt.IsZero() {
					a.StartedAt = &h.StartedAt
				}
				if !h.EndedAt.IsZero() {
					a.EndedAt = &h.EndedAt
				}
			}
			doc.Attempts = append(doc.Attempts, a)
		}
		marker := store.MarkerKey(t)
		_, err = c.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(store.Bucket()), Key: &marker})
		switch {
		case err == nil:
			doc.Marker = true
		case !isNotFound(err):
			return fmt.Errorf("check marker %s: %w", marker, err)
		}

		if c.set.json {
			c.writeJSON(doc)
			return nil
		}
		now := time.Now()
		tw := newTable(c.stdout)
		field := func(name, value string) {
			if value != "" {
				tw.row(name, value)
			}
		}
		field("ID", t.ID)
		field("Name", clean(t.Name, 200))
		field("Type", t.Type)
		field("Status", statusText(t, now))
		field("Attempt", fmt.Sprintf("%d of %d", t.Attempt, t.MaxAttempts))
		if t.Status == s3task.StatusRunning {
			field("Worker", t.WorkerID)
			field("Lease until", stamp(t.LeaseExpiresAt, now))
		}
		field("Last error", clean(t.LastError, 300))
		field("Error category", t.ErrorCategory)
		field("Cancel reason", clean(t.CancelReason, 200))
		if t.Purging {
			field("Purging", "yes: a purge is deleting this task; no change is allowed")
		}
		field("Progress", progressText(t))
		field("Input", fmt.Sprintf("%s (%d bytes)", t.InputPath, t.InputSize))
		field("Output", t.OutputPath)
		field("Created", stamp(t.CreatedAt, now)+byWhom(t.CreatedBy))
		if !t.SubmittedAt.IsZero() {
			field("Submitted", stamp(t.SubmittedAt, now))
		}
		if !t.StartedAt.IsZero() {
			field("Started", stamp(t.StartedAt, now)+fmt.Sprintf(" (attempt %d)", t.Attempt))
		}
		field("Updated", stamp(t.UpdatedAt, now))
		field("Marker", markerText(t, doc.Marker))
		field("Payload", clean(string(t.Payload), 200))
		for _, k := range slices.Sorted(maps.Keys(t.Metadata)) {
			field("Metadata "+clean(k, 64), clean(t.Metadata[k], 200))
		}
		tw.flush()

		fmt.Fprintln(c.stdout, "\nAttempts:")
		if len(doc.Attempts) == 0 {
			fmt.Fprintln(c.stdout, "  none yet")
		}
		tw = newTable(c.stdout)
		if len(doc.Attempts) > 0 {
			tw.row("  #", "OUTCOME", "WORKER", "STARTED", "TOOK", "OUTPUT", "ERROR")
		}
		for _, a := range doc.Attempts {
			out := "no output"
			if a.Output != "" {
				out = "output " + a.Output
			}
			if a.Latest {
				out += " (latest)"
			}
			tw.row("  "+strconv.Itoa(a.Attempt), outcomeText(a), orDash(clean(a.WorkerID, 64)), orDash(stampPtr(a.StartedAt, now)), tookText(a, now), out, errorText(a))
		}
		tw.flush()
		if len(t.History) > 0 && t.History[0].Number > 1 {
			fmt.Fprintf(c.stdout, "  (the record keeps the latest %d attempts; earlier ones show their outputs only)\n", s3task.HistoryLimit)
		}

		fmt.Fprintf(c.stdout, "\nObjects in %s:\n", dir)
		tw = newTable(c.stdout)
		tw.row("  KEY", "SIZE", "MODIFIED", "KIND")
		for _, o := range doc.Objects {
			tw.row("  "+strings.TrimPrefix(o.Key, dir), strconv.FormatInt(o.Size, 10), stamp(o.LastModified, now), o.Kind)
		}
		tw.flush()
		return nil
	}
}

// outcomeText is how an attempt ended, or "-" where the record's history
// does not say (an attempt before the latest HistoryLimit, or one from
// before the history existed).
func outcomeText(a attemptDoc) string {
	if a.Outcome == "" {
		return "-"
	}
	return clean(a.Outcome, 32)
}

// tookText is how long an attempt ran: so far, for one that runs.
func tookText(a attemptDoc, now time.Time) string {
	switch {
	case a.StartedAt == nil:
		return "-"
	case a.EndedAt != nil:
		return span(max(a.EndedAt.Sub(*a.StartedAt), 0))
	case a.Outcome == string(s3task.OutcomeRunning):
		return span(max(now.Sub(*a.StartedAt), 0)) + " so far"
	}
	return "-"
}

// errorText is an attempt's error with its category, on one line.
func errorText(a attemptDoc) string {
	text := clean(a.Error, 120)
	if a.ErrorCategory != "" {
		text = "[" + clean(a.ErrorCategory, 64) + "] " + text
	}
	return strings.TrimSpace(text)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func stampPtr(t *time.Time, now time.Time) string {
	if t == nil {
		return ""
	}
	return stamp(*t, now)
}

// markerText explains the marker's state for the task's status.
func markerText(t *s3task.Task, present bool) string {
	pending := t.Status == s3task.StatusQueued || t.Status == s3task.StatusRunning ||
		(t.Status == s3task.StatusFailed && !t.RetryAt.IsZero())
	switch {
	case pending && present:
		return "present"
	case pending:
		return "MISSING: no worker will find this task; run s3taskctl reconcile"
	case present && t.Terminal():
		return "present but stale (harmless: workers and reconcile remove it)"
	case present:
		return "present"
	}
	return "none"
}

// ---- watch ----

func watchCmd(fs *flag.FlagSet) runFunc {
	interval := time.Second
	fs.Func("interval", "time between reads of the record (default 1s)", func(s string) error {
		d, err := time.ParseDuration(s)
		if err != nil || d < 10*time.Millisecond {
			return errors.New("want a duration of at least 10ms")
		}
		interval = d
		return nil
	})
	return func(ctx context.Context, c *cli, pos []string) error {
		id := pos[0]
		store, err := c.open(ctx)
		if err != nil {
			return err
		}
		tty := isTerminal(c.stdout)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		var t *s3task.Task
		lastLine, failures := "", 0
		for {
			got, err := store.Get(ctx, id)
			switch {
			case err == nil:
				t, failures = got, 0
			case errors.Is(err, s3task.ErrNotFound), errors.Is(err, s3task.ErrCorruptRecord), errors.Is(err, s3task.ErrUnsupportedSchema):
				c.endLine(tty, lastLine)
				return err
			case ctx.Err() != nil:
			default:
				// One failed read is not the end of a long watch.
				if failures++; failures >= 5 {
					c.endLine(tty, lastLine)
					return err
				}
				fmt.Fprintf(c.stderr, "s3taskctl: read %s: %v (retrying)\n", id, err)
			}
			if t != nil && !c.set.json {
				if line := progressLine(t); line != lastLine {
					if tty {
						fmt.Fprintf(c.stdout, "\r%s\x1b[K", line)
					} else {
						fmt.Fprintln(c.stdout, line)
					}
					lastLine = line
				}
			}
			if t != nil && t.Terminal() {
				c.endLine(tty, lastLine)
				return c.watchResult(t)
			}
			if ctx.Err() != nil {
				c.endLine(tty, lastLine)
				status := "unknown"
				if t != nil {
					status = string(t.Status)
				}
				return &cmdError{exit: exitFailed, code: "timeout", err: fmt.Errorf("task %s is still %s: %w", id, status, context.Cause(ctx))}
			}
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
		}
	}
}

// endLine ends a progress bar drawn in place.
func (c *cli) endLine(tty bool, last string) {
	if tty && last != "" {
		fmt.Fprintln(c.stdout)
	}
}

// watchResult prints the finished task and turns its outcome into the exit
// code.
func (c *cli) watchResult(t *s3task.Task) error {
	var failed *cmdError
	if t.Status != s3task.StatusCompleted {
		why := t.LastError
		if t.Status == s3task.StatusAbandoned {
			why = t.CancelReason
		}
		failed = &cmdError{exit: exitFailed, code: "task_" + string(t.Status), documented: true,
			err: fmt.Errorf("task %s %s: %s", t.ID, t.Status, why)}
	}
	if c.set.json {
		doc := watchDoc{Task: taskview.Of(t)}
		if failed != nil {
			doc.Error = failed.body()
		}
		c.writeJSON(doc)
	} else {
		fmt.Fprintf(c.stdout, "task %s %s\n", t.ID, t.Status)
	}
	if failed != nil {
		return failed
	}
	return nil
}

// watchDoc is what watch -json prints: the task, and the error object of
// a task that did not complete.
type watchDoc struct {
	taskview.Task
	Error *errorBody `json:"error,omitempty"`
}

// ---- retry, cancel ----

func retryCmd(fs *flag.FlagSet) runFunc {
	var b bulkFlags
	b.register(fs, "retried", true, true)
	return func(ctx context.Context, c *cli, pos []string) error {
		if len(pos) != 1 || b.set {
			return c.bulk(ctx, "retry", &b, pos, "", func(store *s3task.Store, opts s3task.BulkOptions) (*s3task.BulkReport, error) {
				return store.RetryMany(ctx, opts)
			})
		}
		store, err := c.open(ctx)
		if err != nil {
			return err
		}
		t, err := store.Retry(ctx, pos[0])
		if err != nil {
			return err
		}
		return c.printTask(t, fmt.Sprintf("task %s queued for attempt %d of %d", t.ID, t.Attempt+1, t.MaxAttempts))
	}
}

func scheduleCmd(fs *flag.FlagSet) runFunc {
	return func(ctx context.Context, c *cli, pos []string) error {
		at, err := parseWhen(pos[1], time.Now())
		if err != nil {
			return usageErr(err)
		}
		store, err := c.open(ctx)
		if err != nil {
			return err
		}
		t, err := store.Schedule(ctx, pos[0], at)
		if err != nil {
			return err
		}
		line := fmt.Sprintf("task %s runs as soon as a worker is free", t.ID)
		if !t.RunAt.IsZero() {
			line = fmt.Sprintf("task %s starts no earlier than %s", t.ID, t.RunAt.Format(time.RFC3339))
		}
		return c.printTask(t, line)
	}
}

// parseWhen reads schedule's WHEN: "now", +<duration> or an RFC 3339 time.
func parseWhen(s string, now time.Time) (time.Time, error) {
	switch {
	case s == "now":
		return time.Time{}, nil
	case strings.HasPrefix(s, "+"):
		d, err := time.ParseDuration(s[1:])
		if err != nil || d < 0 {
			return time.Time{}, fmt.Errorf("WHEN %q: want now, +DURATION (like +90m) or an RFC 3339 time", s)
		}
		return now.Add(d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("WHEN %q: want now, +DURATION (like +90m) or an RFC 3339 time", s)
	}
	return t, nil
}

func cancelCmd(fs *flag.FlagSet) runFunc {
	reason := fs.String("reason", "cancelled with s3taskctl", "why, kept in the record (at most 1024 bytes)")
	var b bulkFlags
	b.register(fs, "abandoned", true, true)
	return func(ctx context.Context, c *cli, pos []string) error {
		if len(pos) != 1 || b.set {
			return c.bulk(ctx, "cancel", &b, pos, "", func(store *s3task.Store, opts s3task.BulkOptions) (*s3task.BulkReport, error) {
				return store.CancelMany(ctx, *reason, opts)
			})
		}
		store, err := c.open(ctx)
		if err != nil {
			return err
		}
		// CancelMany judges the one task as the bulk path does, and says
		// whether the call changed it: Cancel answers a task abandoned
		// already as if it had abandoned it. So both paths skip it, and
		// both exit 4.
		r, err := store.CancelMany(ctx, *reason, s3task.BulkOptions{IDs: pos})
		if err != nil {
			return err
		}
		if len(r.Results) != 1 {
			return fmt.Errorf("cancel %s: %d results, want 1", pos[0], len(r.Results))
		}
		res := r.Results[0]
		if res.Outcome != s3task.BulkDone {
			return res.Err
		}
		t := res.Task
		return c.printTask(t, fmt.Sprintf("task %s abandoned: %s", t.ID, t.CancelReason))
	}
}

func (c *cli) printTask(t *s3task.Task, line string) error {
	if c.set.json {
		c.writeJSON(taskview.Of(t))
	} else {
		fmt.Fprintln(c.stdout, line)
	}
	return nil
}

// ---- stats ----

type statsDoc struct {
	ReadAt    time.Time  `json:"read_at"`
	Since     *time.Time `json:"since,omitempty"`
	MaxTasks  int        `json:"max_tasks"`
	Tasks     int        `json:"tasks"`
	Truncated bool       `json:"truncated"`
	// ByStatus has every status, zero or not.
	ByStatus         map[string]int `json:"by_status"`
	Unfinished       int            `json:"unfinished"`
	UnfinishedByType map[string]int `json:"unfinished_by_type"`
	WaitingRetry     int            `json:"waiting_retry"`
	Scheduled        int            `json:"scheduled"`
	// OldestWaiting is Stats.OldestWaiting: the task due longest ago that
	// no worker has taken, its age counted from when it fell due;
	// WaitByType the same wait per type. Both in seconds.
	OldestWaiting           *oldestDoc         `json:"oldest_waiting"`
	OldestWaitingAgeSeconds float64            `json:"oldest_waiting_age_seconds"`
	WaitByType              map[string]float64 `json:"wait_by_type"`
	// OldestUnfinished is Stats.OldestUnfinished, its age counted from its
	// creation.
	OldestUnfinished           *oldestDoc     `json:"oldest_unfinished"`
	OldestUnfinishedAgeSeconds float64        `json:"oldest_unfinished_age_seconds"`
	AttemptsOver               int            `json:"attempts_over"`
	OverAttempts               int            `json:"over_attempts"`
	Failures                   map[string]int `json:"failures"`
	Broken                     int            `json:"broken"`
}

type oldestDoc struct {
	ID        string    `json:"task_id"`
	Status    string    `json:"status"`
	Name      string    `json:"task_name"`
	CreatedAt time.Time `json:"created_at"`
}

func statsCmd(fs *flag.FlagSet) runFunc {
	from := sinceFlag(fs, "count only tasks created in this window")
	maxTasks := intFlag(fs, "max-tasks", s3task.DefaultStatsMaxTasks, 1, math.MaxInt, "read at most this many records, newest first (one GET each)")
	over := intFlag(fs, "attempts-over", 1, 1, math.MaxInt, "count the tasks whose attempt number is above this")
	return func(ctx context.Context, c *cli, _ []string) error {
		store, err := c.open(ctx)
		if err != nil {
			return err
		}
		st, err := store.Stats(ctx, s3task.StatsOptions{Since: *from, MaxTasks: *maxTasks, AttemptsOver: *over})
		if err != nil {
			return err
		}
		doc := statsDoc{
			Tasks: st.Tasks, Truncated: st.Truncated, ByStatus: map[string]int{},
			Unfinished: st.Unfinished, UnfinishedByType: st.UnfinishedByType, WaitingRetry: st.WaitingRetry, AttemptsOver: *over,
			Scheduled: st.Scheduled, WaitByType: map[string]float64{},
			OverAttempts: st.OverAttempts, Failures: st.Failures, Broken: st.Broken,
			MaxTasks: *maxTasks, ReadAt: time.Now().UTC(),
		}
		if !from.IsZero() {
			f := from.UTC()
			doc.Since = &f
		}
		for _, s := range allStatuses {
			doc.ByStatus[string(s)] = st.ByStatus[s]
		}
		if o := st.OldestUnfinished; o != nil {
			doc.OldestUnfinished = &oldestDoc{ID: o.ID, Status: string(o.Status), Name: o.Name, CreatedAt: o.CreatedAt}
			doc.OldestUnfinishedAgeSeconds = st.OldestUnfinishedAge.Seconds()
		}
		if o := st.OldestWaiting; o != nil {
			doc.OldestWaiting = &oldestDoc{ID: o.ID, Status: string(o.Status), Name: o.Name, CreatedAt: o.CreatedAt}
			doc.OldestWaitingAgeSeconds = st.OldestWaitingAge.Seconds()
		}
		for typ, wait := range st.WaitByType {
			doc.WaitByType[typ] = wait.Seconds()
		}
		if c.set.json {
			c.writeJSON(doc)
			return nil
		}
		scope := ""
		if doc.Since != nil {
			scope = " created since " + doc.Since.Format(time.RFC3339)
		}
		fmt.Fprintf(c.stdout, "%s%s read, newest first\n", plural(st.Tasks, "task"), scope)
		if st.Truncated {
			fmt.Fprintf(c.stdout, "note: -max-tasks %d stopped the count: the figures cover the newest %d records only\n", *maxTasks, *maxTasks)
		}
		tw := newTable(c.stdout)
		for _, s := range allStatuses {
			tw.row("  "+string(s), strconv.Itoa(st.ByStatus[s]))
		}
		tw.row("unfinished", strconv.Itoa(st.Unfinished), "queued, running, or failed waiting for a retry")
		tw.row("waiting retry", strconv.Itoa(st.WaitingRetry))
		tw.row("scheduled", strconv.Itoa(st.Scheduled), "queued, to start later")
		// The oldest waiting task is the one to watch: the oldest
		// unfinished one counts from creation, so a task scheduled for
		// tomorrow makes it old while nothing is wrong.
		if o := st.OldestWaiting; o != nil {
			tw.row("oldest waiting", o.ID, fmt.Sprintf("%s, due %s ago", o.Status, st.OldestWaitingAge.Round(time.Second)))
		} else {
			tw.row("oldest waiting", "none")
		}
		if o := st.OldestUnfinished; o != nil {
			tw.row("oldest unfinished", o.ID, fmt.Sprintf("%s, created %s ago", o.Status, st.OldestUnfinishedAge.Round(time.Second)))
		} else {
			tw.row("oldest unfinished", "none")
		}
		tw.row(fmt.Sprintf("over %d attempt(s)", *over), strconv.Itoa(st.OverAttempts))
		tw.row("unreadable records", strconv.Itoa(st.Broken))
		tw.flush()
		// A type that stays here while others pass is one no running
		// worker serves.
		c.counts("unfinished tasks by type:", st.UnfinishedByType, "(no type)")
		c.waits("longest wait by type:", st.WaitByType, "(no type)")
		c.counts("failed tasks by error category:", st.Failures, "")
		return nil
	}
}

// counts prints the counts in m under title, in key order, if m has any;
// the key "" is shown as the text empty.
func (c *cli) counts(title string, m map[string]int, empty string) {
	byKey(c, title, m, empty, strconv.Itoa)
}

// waits prints the waits in m under title, as counts does, to the second.
func (c *cli) waits(title string, m map[string]time.Duration, empty string) {
	byKey(c, title, m, empty, func(d time.Duration) string { return d.Round(time.Second).String() })
}

// byKey prints m under title, a row per key in key order with its value
// as text says, if m has any; the key "" is shown as the text empty.
func byKey[V any](c *cli, title string, m map[string]V, empty string, text func(V) string) {
	if len(m) == 0 {
		return
	}
	fmt.Fprintln(c.stdout, title)
	tw := newTable(c.stdout)
	for _, k := range slices.Sorted(maps.Keys(m)) {
		name := clean(k, 40)
		if k == "" {
			name = empty
		}
		tw.row("  "+name, text(m[k]))
	}
	tw.flush()
}

var allStatuses = []s3task.Status{
	s3task.StatusCreated, s3task.StatusQueued, s3task.StatusRunning,
	s3task.StatusCompleted, s3task.StatusFailed, s3task.StatusAbandoned,
}

// ---- reconcile ----

type reconcileDoc struct {
	DryRun   bool              `json:"dry_run"`
	Tasks    int               `json:"tasks"`
	Restored []string          `json:"restored"`
	Removed  []string          `json:"removed"`
	Broken   []taskview.Broken `json:"broken"`
	Clean    bool              `json:"clean"`
	Error    *errorBody        `json:"error,omitempty"`
}

func reconcileCmd(fs *flag.FlagSet) runFunc {
	from := sinceFlag(fs, "look only at tasks created in this window")
	dry := fs.Bool("dry-run", false, "report what would be repaired and change nothing")
	return func(ctx context.Context, c *cli, _ []string) error {
		store, err := c.open(ctx)
		if err != nil {
			return err
		}
		r, err := store.Reconcile(ctx, s3task.ReconcileOptions{Since: *from, DryRun: *dry})
		if r == nil {
			return err
		}
		doc := reconcileDoc{DryRun: *dry, Tasks: r.Tasks, Restored: orEmpty(r.Restored), Removed: orEmpty(r.Removed),
			Broken: taskview.BrokenOf(r.Broken), Clean: r.Clean()}
		var failed *cmdError
		if err != nil {
			failed = &cmdError{exit: exitFailed, code: "repair_failed", documented: true, err: fmt.Errorf("some repairs failed (run reconcile again): %w", err)}
			doc.Error = failed.body()
		}
		if c.set.json {
			c.writeJSON(doc)
		} else {
			verb := map[bool]string{false: "", true: "would be "}[*dry]
			fmt.Fprintf(c.stdout, "%s read\n", plural(r.Tasks, "task"))
			fmt.Fprintf(c.stdout, "%s %srestored\n", plural(len(r.Restored), "missing marker"), verb)
			for _, id := range r.Restored {
				fmt.Fprintln(c.stdout, "  "+id)
			}
			fmt.Fprintf(c.stdout, "%s %sremoved\n", plural(len(r.Removed), "stale marker"), verb)
			for _, key := range r.Removed {
				fmt.Fprintln(c.stdout, "  "+key)
			}
			fmt.Fprintf(c.stdout, "%s (left as they are)\n", plural(len(r.Broken), "unreadable record"))
			for _, b := range doc.Broken {
				fmt.Fprintf(c.stdout, "  %s: %s\n", b.Key, b.Error)
			}
			switch {
			case *dry:
				fmt.Fprintln(c.stdout, "dry run: nothing was changed")
			case r.Clean():
				fmt.Fprintln(c.stdout, "clean: the index matches the records")
			}
		}
		if failed != nil {
			return failed
		}
		return nil
	}
}

// ---- purge ----

// purgeDoc is what purge -json prints. Exactly one of WouldPurge (a dry
// run) and Purged (-yes) is there, a list, empty or not: a script that
// reads purged never mistakes a dry run's list for deleted tasks.
type purgeDoc struct {
	DryRun     bool      `json:"dry_run"`
	Cutoff     time.Time `json:"cutoff"`
	Tasks      int       `json:"tasks"`
	WouldPurge *[]string `json:"would_purge,omitempty"`
	Purged     *[]string `json:"purged,omitempty"`
	// Objects is how many objects were deleted: 0 in a dry run.
	Objects int               `json:"objects"`
	Kept    int               `json:"kept"`
	Broken  []taskview.Broken `json:"broken"`
	Error   *errorBody        `json:"error,omitempty"`
}

func purgeCmd(fs *flag.FlagSet) runFunc {
	var age time.Duration
	fs.Func("older-than", "purge finished tasks created more than this long ago, e.g. 30d or 720h (required)", func(s string) error {
		d, err := parseAge(s)
		if err == nil && d <= 0 {
			err = errors.New("want a positive duration")
		}
		age = d
		return err
	})
	yes := fs.Bool("yes", false, "really delete; without it purge is a dry run")
	limit := intFlag(fs, "limit", 0, 0, math.MaxInt, "delete at most this many tasks (0: no limit with -older-than, 100 with IDs or a filter)")
	var b bulkFlags
	b.register(fs, "deleted", false, false)
	return func(ctx context.Context, c *cli, pos []string) error {
		selected := len(pos) > 0 || b.set
		switch {
		case age != 0 && selected:
			return usageErr(errors.New("purge takes -older-than, or task IDs or a filter (-status, -type, -meta), not both"))
		case selected && *limit > s3task.MaxBulkLimit:
			return usageErr(fmt.Errorf("-limit %d: with task IDs or a filter, a run deletes at most %d tasks", *limit, s3task.MaxBulkLimit))
		case selected:
			b.dryRun, b.limit = !*yes, *limit
			return c.bulk(ctx, "purge", &b, pos, "; run again with -yes to delete", func(store *s3task.Store, opts s3task.BulkOptions) (*s3task.BulkReport, error) {
				return store.PurgeMany(ctx, opts)
			})
		case age == 0:
			return usageErr(errors.New("purge needs -older-than (e.g. -older-than 30d), task IDs or a filter (-status, -type, -meta)"))
		}
		store, err := c.open(ctx)
		if err != nil {
			return err
		}
		cutoff := time.Now().Add(-age).UTC().Truncate(time.Millisecond)
		r, err := store.Purge(ctx, cutoff, s3task.PurgeOptions{DryRun: !*yes, Limit: *limit})
		if r == nil {
			return err
		}
		ids := orEmpty(r.Purged)
		doc := purgeDoc{DryRun: !*yes, Cutoff: cutoff, Tasks: r.Tasks, Objects: r.Objects, Kept: r.Kept, Broken: taskview.BrokenOf(r.Broken)}
		if doc.DryRun {
			doc.WouldPurge = &ids
		} else {
			doc.Purged = &ids
		}
		var failed *cmdError
		if err != nil {
			failed = &cmdError{exit: exitFailed, code: "purge_failed", documented: true, err: fmt.Errorf("purge stopped (run it again to finish): %w", err)}
			doc.Error = failed.body()
		}
		if c.set.json {
			c.writeJSON(doc)
		} else {
			fmt.Fprintf(c.stdout, "%s created before %s read; %d kept (not finished, or changed within the last minute)\n", plural(r.Tasks, "task"), cutoff.Format(time.RFC3339), r.Kept)
			if doc.DryRun {
				fmt.Fprintf(c.stdout, "dry run: %s would be deleted; run again with -yes to delete\n", plural(len(r.Purged), "finished task"))
			} else {
				fmt.Fprintf(c.stdout, "%s deleted (%s)\n", plural(len(r.Purged), "finished task"), plural(r.Objects, "object"))
			}
			for _, id := range r.Purged {
				fmt.Fprintln(c.stdout, "  "+id)
			}
			for _, b := range doc.Broken {
				fmt.Fprintf(c.stdout, "unreadable, left alone: %s: %s\n", b.Key, b.Error)
			}
		}
		if failed != nil {
			return failed
		}
		return nil
	}
}

// ---- check ----

type checkDoc struct {
	Bucket            string `json:"bucket"`
	Prefix            string `json:"prefix"`
	Endpoint          string `json:"endpoint"` // "" for AWS
	Reachable         bool   `json:"reachable"`
	ConditionalWrites bool   `json:"conditional_writes"`
	Listing           bool   `json:"listing"`
	Detail            string `json:"detail,omitempty"`
	// Report is what Store.CheckBackend measured; absent when the store
	// could not be reached.
	Report *s3task.BackendReport `json:"report,omitempty"`
	// Error is there when the check failed, as in any failure's document.
	Error *errorBody `json:"error,omitempty"`
}

// checkCleanup is the time check keeps, within -timeout, for
// Store.CheckBackend to delete its scratch objects: the library gives
// those deletes up to 2 s of their own after the context it is given
// ends, and every S3 call of the command ends by the command's deadline
// (see boundCalls), so the check itself gets the deadline less this, or
// less a quarter of the time left, whichever is shorter.
const checkCleanup = 2 * time.Second

// checkContext returns the context of Store.CheckBackend within ctx: the
// same, with a deadline earlier by the clean-up's share.
func checkContext(ctx context.Context) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	reserve := min(checkCleanup, time.Until(deadline)/4)
	return context.WithDeadline(ctx, deadline.Add(-reserve))
}

func checkCmd(fs *flag.FlagSet) runFunc {

	return func(ctx context.Context, c *cli, _ []string) error {
		store, err := c.open(ctx)
		if err != nil {
			return err
		}
		doc := checkDoc{Bucket: store.Bucket(), Prefix: store.Prefix(), Endpoint: c.endpoint}
		cctx, cancel := checkContext(ctx)
		report, checkErr := store.CheckBackend(cctx)
		cancel()
		switch {
		case checkErr == nil:
			doc.Reachable, doc.ConditionalWrites = true, true
			doc.Report = report
		case errors.Is(checkErr, s3task.ErrConditionalWritesUnsupported):
			doc.Reachable = true
			doc.Detail = checkErr.Error()
			doc.Report = report
		default:
			doc.Detail = checkErr.Error()
		}
		if doc.Reachable {
			if _, err := store.List(ctx, s3task.ListOptions{Limit: 1}); err != nil {
				doc.Detail = strings.TrimPrefix(doc.Detail+"; ", "; ") + "list: " + err.Error()
				if checkErr == nil {
					checkErr = err
				}
			} else {
				doc.Listing = true
			}
		}
		var failed *cmdError
		if checkErr != nil {
			exit, code := classify(checkErr)
			if exit != exitUnavailable && errors.Is(checkErr, s3task.ErrConditionalWritesUnsupported) {
				exit = exitUnavailable
			}
			failed = &cmdError{exit: exit, code: code, documented: true, err: checkErr}
			doc.Error = failed.body()
		}
		if c.set.json {
			c.writeJSON(doc)
		} else {
			where := "AWS S3"
			if doc.Endpoint != "" {
				where = doc.Endpoint
			}
			tw := newTable(c.stdout)
			tw.row("store", where)
			tw.row("bucket", doc.Bucket)
			tw.row("prefix", doc.Prefix)
			tw.row("reachable", yesNo(doc.Reachable))
			if r := doc.Report; r != nil {
				const unsafe = "two workers could both claim one task"
				tw.row("If-None-Match: * create", verdict(r.ConditionalCreate, "refused as it must be", unsafe))
				tw.row("If-Match with a stale ETag", verdict(r.ConditionalUpdate, "refused as it must be", unsafe))
				tw.row("If-Match on a missing key", verdict(r.IfMatchMissingKey, "refused ("+r.IfMatchMissingKeyAnswer+")", "it created the key"))
				tw.row(fmt.Sprintf("%d If-Match writes racing", checkRacers), verdict(r.AtomicUpdate,
					fmt.Sprintf("%d won, as it must", r.RaceWinners), fmt.Sprintf("%d won: %s", r.RaceWinners, unsafe)))
				tw.row("presigned URL, altered signature", verdict(r.PresignSignature, "refused", "served: anybody can forge a URL"))
				tw.row("presigned URL, expired", verdict(r.PresignExpiry, "refused", "served: URLs never expire"))
				tw.row("server clock offset", r.ServerClockOffset.Round(time.Second).String())
			}
			if doc.Reachable {
				tw.row("listing tasks", yesNo(doc.Listing))
			}
			tw.flush()
			if doc.Report != nil {
				for _, n := range doc.Report.Notes {
					fmt.Fprintln(c.stdout, "note: "+n)
				}
			}
			if checkErr == nil {
				fmt.Fprintln(c.stdout, "OK: s3task can run on this store")
			}
		}
		if failed != nil {
			return failed
		}
		return nil
	}
}

// plural is "1 task", "2 tasks".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

func yesNo(b bool) string { return map[bool]string{true: "yes", false: "NO"}[b] }

// checkRacers is how many writes race in Store.CheckBackend.
const checkRacers = 4

// verdict words what CheckBackend found about one rule: yes when the store
// enforces it, no (after NOT ENFORCED) when it does not.
func verdict(e s3task.Enforcement, yes, no string) string {
	switch e {
	case s3task.Enforced:
		return yes
	case s3task.NotEnforced:
		return "NOT ENFORCED: " + no
	}
	return "not checked (see the notes)"
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// intFlag defines an int flag that takes lo to hi only: any other value is
// a usage error when the flags are parsed.
func intFlag(fs *flag.FlagSet, name string, value, lo, hi int, usage string) *int {
	p := &value
	fs.Func(name, fmt.Sprintf("%s (default %d)", usage, value), func(s string) error {
		n, err := strconv.Atoi(s)
		switch {
		case err != nil:
			return errors.New("not a whole number")
		case n < lo:
			return fmt.Errorf("want at least %d", lo)
		case n > hi:
			return fmt.Errorf("want at most %d", hi)
		}
		*p = n
		return nil
	})
	return p
}

// sinceFlag defines -since, a window back from now: a duration (24h, 7d)
// or an RFC 3339 time. Unset, it is the zero time: no limit.
func sinceFlag(fs *flag.FlagSet, usage string) *time.Time {
	var since time.Time
	fs.Func("since", usage+": a duration back from now (24h, 7d) or an RFC 3339 time", func(s string) (err error) {
		since, err = parseSince(s, time.Now())
		return err
	})
	return &since
}
