package s3task

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// ReconcileOptions selects what [Store.Reconcile] walks.
type ReconcileOptions struct {
	// Since limits the walk to tasks created at or after this time; zero
	// walks every task.
	Since time.Time
	// DryRun reports what would change and changes nothing.
	DryRun bool
}

// ReconcileReport says what [Store.Reconcile] found and did.
type ReconcileReport struct {
	// Tasks is the number of task records read.
	Tasks int
	// Restored lists the tasks that needed a worker but had no marker; their
	// markers were written (unless DryRun).
	Restored []string
	// Removed lists the keys of stale markers that were deleted (unless
	// DryRun): markers of finished tasks, of tasks that no longer exist, of
	// created tasks whose Submit evidently never finished, and objects in
	// the marker folder that are not task IDs.
	Removed []string
	// Broken lists the records that could not be read, with their keys. They
	// are left as they are.
	Broken []*RecordError
	// Abandoned lists the created tasks abandoned (unless DryRun) because
	// their input was not submitted within StoreOptions.AbandonCreatedAfter.
	Abandoned []string
}

// Clean reports whether the run found nothing to repair or abandon.
func (r *ReconcileReport) Clean() bool {
	return len(r.Restored) == 0 && len(r.Removed) == 0 && len(r.Broken) == 0 && len(r.Abandoned) == 0
}

// DefaultAbandonCreatedAfter is how long a created task waits for its input
// before maintenance abandons it (StoreOptions.AbandonCreatedAfter).
const DefaultAbandonCreatedAfter = 24 * time.Hour

// abandonAfter returns StoreOptions.AbandonCreatedAfter with its default
// filled in; zero means never.
func (s *Store) abandonAfter() time.Duration {
	switch d := s.opts.AbandonCreatedAfter; {
	case d < 0:
		return 0
	case d == 0:
		return DefaultAbandonCreatedAfter
	default:
		return d
	}
}

// unsentCutoff returns the creation time before which a created task is
// abandoned at now, and false if none ever is.
func (s *Store) unsentCutoff(now time.Time) (time.Time, bool) {
	d := s.abandonAfter()
	return now.Add(-d), d > 0
}

// unsentReason is the cancel_reason of a task abandoned for want of input.
func (s *Store) unsentReason() string {
	return "no input submitted within " + fmtAge(s.abandonAfter())
}

// fmtAge formats d briefly: "24h", "90m", "45s".
func fmtAge(d time.Duration) string {
	switch {
	case d >= time.Hour && d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d >= time.Minute && d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return d.String()
}

// abandonUnsent abandons created task t if it was created before cutoff,
// reading its record again (one GET, then a PUT),
// through the state machine, which decides again against the stored record
// (a task submitted meanwhile is left alone). It reports whether it did.
func (s *Store) abandonUnsent(ctx context.Context, t *record, cutoff time.Time) (bool, error) {
	got, changed, err := s.change(ctx, t.ID, event{kind: evNoInput, at: cutoff, reason: s.unsentReason(), notify: s.opts.OnTerminal != nil})
	if errors.Is(err, ErrInvalidTransition) {
		return false, nil // submitted, cancelled or purged since it was read
	}
	if err != nil || !changed {
		return false, err
	}
	if got.NotifyPending {
		s.settle(ctx, got, "")
	}
	return true, nil
}

// Reconcile repairs the marker index against the records, the only truth:
// it writes the missing marker of every task a worker should look at (queued,
// running, failed with a retry scheduled) and removes stale markers. It
// changes no other object, so it is safe to run at any time from any number
// of processes, next to running workers; a marker removed while a Retry
// makes the task pending again is put back. The one record it changes is
// that of a created task whose input was never submitted within
// StoreOptions.AbandonCreatedAfter: it abandons it, with a cancel_reason
// saying so, by a compare-and-set that leaves a task submitted meanwhile
// alone. Workers run it on their own (WorkerOptions.ReconcileInterval).
//
// Requests: one LIST per 1,000 task folders walked and one GET per task,
// the LISTs of the marker folder, one PUT per restored marker, and a DELETE
// (with a GET to recheck a failed task) per stale one.
//
// Errors: S3 errors from the listings and ctx's, with no report; if some
// repair failed, the report with the first such error (the next run retries
// it). Unreadable records are reported, not returned.
func (s *Store) Reconcile(ctx context.Context, opts ReconcileOptions) (*ReconcileReport, error) {
	r, _, err := s.reconcile(ctx, opts, nil, nil)
	return r, err
}

// reconcile is Reconcile that also rechecks the tasks of watch (an ID and
// the marker key its record called for when last read, "" if it could not
// be read) that the walk does not meet, created before opts.Since: a task
// whose marker was listed as it was, and is due, is left alone; any other
// is read again, its stale markers removed and its marker restored if it
// needs one. It returns, beside the report,
// the tasks to watch at the next run: those met or rechecked that need a
// marker, and those whose record could not be read for a reason that may
// pass. The fleet's reconciler walks only recent tasks at most turns, and
// this is how the older tasks that wait for a worker keep their markers
// from one turn to the next: one GET per such task that changed or waits
// for a time ahead. gone, if
// not nil, is a worker's memory of the tasks found deleted: their folders
// are not read again, and every record a read finds deleted joins it.
func (s *Store) reconcile(ctx context.Context, opts ReconcileOptions, watch map[string]string, gone *goneTasks) (*ReconcileReport, map[string]string, error) {
	markers, stray, err := s.allMarkers(ctx)
	if err != nil {
		return nil, nil, err
	}
	byID := map[string][]marker{}
	for _, m := range markers {
		byID[m.id] = append(byID[m.id], m)
	}
	now := s.serverNow()
	r := &ReconcileReport{}
	var firstErr error
	note := func(err error) {
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	// undropped holds the tasks of which a stale marker could not be
	// deleted: the next turn reads them again, in range or not.
	undropped := map[string]bool{}
	drop := func(id, key string) {
		s.reached("reconcile/removed")
		r.Removed = append(r.Removed, key)
		if !opts.DryRun {
			if err := s.dropMarker(ctx, key); err != nil {
				note(err)
				undropped[id] = true
			}
		}
	}
	restore := func(id, want string) {
		s.reached("reconcile/restored")
		r.Restored = append(r.Restored, id)
		if !opts.DryRun {
			note(s.putMarker(ctx, want))
		}
	}
	// settle drops the stale markers of task t, just read, and restores
	// the one it calls for (want) if it was not listed.
	settle := func(t *record, want string) {
		has := false
		for _, m := range byID[t.ID] {
			switch {
			case m.key == want:
				has = true
			case staleMarker(m, t, now):
				drop(t.ID, m.key)
			}
		}
		if want != "" && !has {
			restore(t.ID, want)
		}
	}
	cutoff, abandons := s.unsentCutoff(now)
	pending, met := map[string]string{}, map[string]bool{}
	_, err = s.walk(ctx, time.Time{}, opts.Since, 0, gone, func(t *record) bool {
		r.Tasks++
		met[t.ID] = true
		if abandons && t.Status == StatusCreated && t.CreatedAt.Before(cutoff) {
			if opts.DryRun {
				r.Abandoned = append(r.Abandoned, t.ID)
				return true
			}
			done, err := s.abandonUnsent(ctx, t, cutoff)
			note(err)
			if done {
				r.Abandoned = append(r.Abandoned, t.ID)
				return true // its marker, if a notice needs one, is in place
			}
		}
		want := s.markerOf(t)
		settle(t, want)
		delete(byID, t.ID)
		if want != "" {
			pending[t.ID] = want
		}
		return true
	}, func(re *RecordError) {
		r.Broken = append(r.Broken, re)
		if id, ok := s.recordID(re.Key); ok && passing(re) {
			pending[id] = ""
		}
	})
	if err != nil {
		return nil, nil, err
	}
	for _, id := range slices.Sorted(maps.Keys(watch)) {
		was := watch[id]
		if at, _ := IDTime(id); met[id] || !at.Before(opts.Since) {
			continue // met by the walk, or in its range and gone
		}
		// The marker the record called for vouches that the record is as
		// it was only while it is due: a change whose old marker stayed
		// (its outcome unknown, its DELETE failed) leaves a due one to the
		// next poll, which reads the record and removes it, but one due
		// later to no one until its time.
		if was != "" && slices.ContainsFunc(byID[id], func(m marker) bool { return m.key == was && !m.due.After(now) }) {
			pending[id] = was // as it was
			continue
		}
		t, _, err := s.read(ctx, id)
		var re *RecordError
		switch {
		case errors.Is(err, ErrNotFound):
			// Purged. Purge deletes the marker the record called for; one
			// an earlier change left behind (not yet due, so no poll has
			// read it) goes here, or it would stay until its time.
			gone.note(id)
			for _, m := range byID[id] {
				drop(id, m.key)
			}
			delete(byID, id)
			continue
		case errors.As(err, &re):
			r.Broken = append(r.Broken, re)
			continue
		case err != nil:
			r.Broken = append(r.Broken, &RecordError{Key: s.recordKey(id), Err: err})
			pending[id] = was // the next run reads it again
			continue
		}
		r.Tasks++
		want := s.markerOf(t)
		settle(t, want)
		if want != "" {
			pending[id] = want // else finished: out of the watch
		}
	}
	// Markers whose task the walk did not meet: in range, the task has no
	// record (a folder without status.json was reported as broken).
	for _, id := range slices.Sorted(maps.Keys(byID)) {
		ms := byID[id]
		if at, _ := IDTime(id); at.Before(opts.Since) || brokenID(r.Broken, s.recordKey(id)) {
			continue
		}
		if !gone.has(id) {
			if _, _, err := s.read(ctx, id); !errors.Is(err, ErrNotFound) {
				continue // created since the walk passed it, or unreadable now
			}
			gone.note(id)
		}
		for _, m := range ms {
			drop(id, m.key)
		}
	}
	for _, key := range stray {
		r.Removed = append(r.Removed, key)
		if !opts.DryRun {
			_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: &key})
			note(err)
		}
	}
	for id := range undropped {
		if _, ok := pending[id]; !ok {
			// A finished task leaves the watch, and an old one is out of
			// the range of the turns that walk recent tasks: the stale
			// marker would wait for a full turn (soak seed 63912).
			pending[id] = ""
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	if len(r.Restored) > 0 && !opts.DryRun {
		s.wake(ctx, "") // the restored tasks are new to idle workers
	}
	return r, pending, firstErr
}

// recordID returns the task ID of a record key.
func (s *Store) recordID(key string) (string, bool) {
	id, ok := strings.CutSuffix(strings.TrimPrefix(key, s.opts.Prefix), "/status.json")
	return id, ok && ParseID(id) == nil
}

// passing reports whether re may read well on a later try: the GET failed,
// rather than the record being corrupt, of an unknown schema, or missing.
func passing(re *RecordError) bool {
	return !errors.Is(re, ErrCorruptRecord) && !errors.Is(re, ErrUnsupportedSchema) && !errors.Is(re, ErrNotFound)
}

// abandonUnsentSince abandons the created tasks created before the
// abandonment cutoff and at or after oldest: the fleet's reconciler sweeps
// with it the tasks that came of age since its last turns, which its walk
// of recent tasks does not reach. Requests: one LIST per 1,000 task
// folders walked and one GET per task; a GET and a PUT per task abandoned.
func (s *Store) abandonUnsentSince(ctx context.Context, oldest time.Time, gone *goneTasks) ([]string, error) {
	cutoff, ok := s.unsentCutoff(s.serverNow())
	if !ok {
		return nil, nil
	}
	var done []string
	var firstErr error
	_, err := s.walk(ctx, cutoff, oldest, 0, gone, func(t *record) bool {
		if t.Status != StatusCreated || !t.CreatedAt.Before(cutoff) {
			return true
		}
		ok, err := s.abandonUnsent(ctx, t, cutoff)
		if err != nil && firstErr == nil {
			firstErr = err
		}
		if ok {
			done = append(done, t.ID)
		}
		return ctx.Err() == nil
	}, func(*RecordError) {})
	return done, errors.Join(err, firstErr)
}

func brokenID(broken []*RecordError, key string) bool {
	for _, re := range broken {
		if re.Key == key {
			return true
		}
	}
	return false
}

// StatsOptions bounds what [Store.Stats] reads.
type StatsOptions struct {
	// Since limits the count to tasks created at or after this time; zero
	// means no limit.
	Since time.Time
	// MaxTasks caps the records read, newest first. Zero means
	// [DefaultStatsMaxTasks]; negative means no cap.
	MaxTasks int
	// AttemptsOver counts tasks whose attempt number is above it. Zero means
	// 1: tasks that needed more than one attempt.
	AttemptsOver int
	// Interval, if set, makes a timeline of the tasks read (Stats.Timeline):
	// buckets of this length, aligned as time.Truncate aligns (a minute, an
	// hour or a day starts on the minute, hour or UTC midnight), from the
	// one holding the server's now back to the one holding
	// Since, or the oldest task read when Since is zero, at most
	// MaxStatsBuckets of them. It must be at least a second.
	Interval time.Duration
}

// MaxStatsBuckets bounds the buckets of Stats.Timeline.
const MaxStatsBuckets = 1000

// StatsBucket is one interval of Stats.Timeline: what happened to the
// tasks Stats read, in [Start, Start+StatsOptions.Interval) by the S3
// server's clock.
type StatsBucket struct {
	Start     time.Time // the interval's start
	Created   int       // tasks created
	Completed int       // tasks that completed
	Failed    int       // tasks that failed for good (no retry left or wanted)
	Abandoned int       // tasks cancelled, or abandoned without input
}

// DefaultStatsMaxTasks is the default cap on the records Stats reads.
const DefaultStatsMaxTasks = 1000

// Stats describes the tasks [Store.Stats] read. It tells apart a quiet
// system from a stuck one: what is waiting, for how long, and why things
// failed.
type Stats struct {
	// Tasks is the number of records read.
	Tasks int
	// Truncated says MaxTasks stopped the count before the tasks (or Since)
	// ended: the figures cover the newest Tasks tasks only.
	Truncated bool
	// ByStatus counts the tasks by status.
	ByStatus map[Status]int
	// Unfinished counts the tasks that are not terminal: queued, running, or
	// failed with a retry scheduled. Created tasks, which wait for their
	// upload rather than for a worker, are not counted.
	Unfinished int
	// UnfinishedByType counts the unfinished tasks by Task.Type: a type
	// that grows here and never shrinks is one no running worker serves
	// (see [TypedHandler]).
	UnfinishedByType map[string]int
	// AwaitingInput counts the created tasks: waiting for their input to be
	// uploaded and submitted. AwaitingInputExpired counts those of them
	// created longer ago than StoreOptions.AbandonCreatedAfter, which the
	// next reconcile abandons.
	AwaitingInput        int
	AwaitingInputExpired int // of AwaitingInput, those the next reconcile abandons
	// OldestUnfinished is the oldest unfinished task, nil if none, and
	// OldestUnfinishedAge its age by the S3 server's clock. Both count
	// from the task's creation: a task scheduled to start tomorrow, one
	// waiting for its retry and one of a paused type all grow old here
	// while nothing is wrong. Alert on OldestWaitingAge instead; these stay
	// for compatibility.
	OldestUnfinished    *Task
	OldestUnfinishedAge time.Duration // by the server's clock, from creation
	// OldestWaiting is the task that has waited longest for a worker, nil
	// if none, and OldestWaitingAge how long it has waited, by the S3
	// server's clock. A task waits from the moment it is due, which is
	// when a worker may first take it: for a queued task its Task.DueAt
	// (its submit, or its RunAt if later, or the moment a lost lease, a
	// shutdown's release or a Retry queued it again), for a failed task
	// with a retry scheduled its Task.RetryAt. A task whose start or retry
	// is still to come does not wait yet (see Scheduled and WaitingRetry);
	// running and created tasks do not wait for a worker. Tasks of a
	// paused type ([Store.Pause]) are left out: they wait on purpose.
	// Whether a task waits is judged by the server's clock as Stats reads
	// its record; how long, as OldestUnfinishedAge, once it has read all.
	//
	// Unlike OldestUnfinishedAge, this grows only while due work finds no
	// worker, which makes it the figure to alert on.
	OldestWaiting    *Task
	OldestWaitingAge time.Duration // by the server's clock, from the task's due time
	// WaitByType is OldestWaitingAge per Task.Type ("" for untyped
	// tasks): for each type with a task waiting, as OldestWaiting
	// defines it, how long its oldest one has waited. A type with no
	// waiting task, and a paused type, has no entry. It shows which
	// type's due tasks find no worker.
	WaitByType map[string]time.Duration
	// Scheduled counts the queued tasks whose RunAt is still to come
	// ([StateScheduled]), paused types included. They are not waiting;
	// they become so when RunAt comes. Failed tasks whose retry is still
	// to come are counted in WaitingRetry, not here.
	Scheduled int
	// WaitingRetry counts failed tasks with a retry scheduled, whether the
	// retry time has come or not ([StateRetrying]).
	WaitingRetry int
	// OverAttempts counts the tasks whose attempt number is above
	// StatsOptions.AttemptsOver.
	OverAttempts int
	// Failures counts failed tasks, final or waiting for a retry, by
	// error_category ("permanent", "transient", a handler's own, ...).
	Failures map[string]int
	// Broken counts the records that could not be read.
	Broken int
	// ByType counts the tasks by Task.Type ("" for untyped tasks) and
	// status.
	ByType map[string]map[Status]int
	// Timeline, with StatsOptions.Interval, counts per interval, newest
	// first, the tasks read that were created and those that finished
	// (completed, failed for good, or abandoned) in it; a finished task is
	// dated by its record's last write, which is its finish (or the record
	// of its OnTerminal notice, written right after). Tasks created before
	// Since, or beyond MaxTasks, are not read and not counted. Nil
	// without Interval.
	Timeline []StatsBucket
}

// Stats counts the tasks, newest first, within the bounds of opts. Requests:
// one GET of the paused object (<prefix>_paused, see [Store.Paused]), so
// that Stats.OldestWaiting leaves out the paused types, then one LIST per
// 1,000 task folders and one GET per task read: at most MaxTasks+1 GETs
// and MaxTasks/1000+2 LISTs.
//
// Errors: [ErrInvalidArgument] for a negative AttemptsOver, an Interval
// under a second, or one that cuts the span from Since to now into more
// than MaxStatsBuckets; S3 errors and ctx's. A paused object this version
// cannot read is no error: Stats takes it to name no type, as workers do,
// so the tasks it would pause count as waiting.
func (s *Store) Stats(ctx context.Context, opts StatsOptions) (*Stats, error) {
	c := &Call{Op: OpStats, stats: opts}
	_, err := s.call(ctx, c)
	return result[*Stats](c, err)
}

func (s *Store) stats(ctx context.Context, opts StatsOptions) (*Stats, error) {
	if opts.AttemptsOver < 0 {
		return nil, invalidArg("AttemptsOver %d, must not be negative", opts.AttemptsOver)
	}
	switch {
	case opts.Interval < 0 || opts.Interval > 0 && opts.Interval < time.Second:
		return nil, invalidArg("Interval %s, must be at least a second", opts.Interval)
	case opts.Interval > 0 && !opts.Since.IsZero() && s.serverNow().Sub(opts.Since)/opts.Interval >= MaxStatsBuckets:
		return nil, invalidArg("Interval %s cuts the span since %s into more than %d buckets", opts.Interval, opts.Since.Format(time.RFC3339), MaxStatsBuckets)
	}
	over := cmp(opts.AttemptsOver, 1)
	limit := cmp(opts.MaxTasks, DefaultStatsMaxTasks)
	paused, _, err := s.readPaused(ctx)
	if err != nil && !errors.Is(err, errPausedUnreadable) {
		return nil, err
	}
	st := &Stats{ByStatus: map[Status]int{}, Failures: map[string]int{}, UnfinishedByType: map[string]int{}, ByType: map[string]map[Status]int{}, WaitByType: map[string]time.Duration{}}
	var waitedSince time.Time           // the due time of OldestWaiting
	dueByType := map[string]time.Time{} // the earliest due time of a waiting task, by type
	var line timeline
	if opts.Interval > 0 {
		line = timeline{every: opts.Interval, buckets: map[int64]*StatsBucket{}}
	}
	var awaiting []time.Time // creation times of the created tasks
	more, err := s.walk(ctx, time.Time{}, opts.Since, max(limit, 0), nil, func(t *record) bool {
		st.Tasks++
		st.ByStatus[t.Status]++
		if st.ByType[t.Type] == nil {
			st.ByType[t.Type] = map[Status]int{}
		}
		st.ByType[t.Type][t.Status]++
		line.add(&t.Task)
		if t.Status == StatusCreated {
			awaiting = append(awaiting, t.CreatedAt)
		}
		if t.Attempt > over {
			st.OverAttempts++
		}
		if t.Status == StatusFailed {
			st.Failures[cmpString(t.ErrorCategory, "unknown")]++
		}
		if t.Status == StatusFailed && !t.Terminal() {
			st.WaitingRetry++
		}
		if t.pending() {
			st.Unfinished++
			st.UnfinishedByType[t.Type]++
			st.OldestUnfinished = &t.Task // newest first: the last one seen is the oldest
		}
		now := s.serverNow() // the clock as this record's answer set it
		if t.Scheduled(now) {
			st.Scheduled++
		}
		if due, ok := waitingSince(&t.Task, now); ok && !slices.Contains(paused, t.Type) {
			if first, ok := dueByType[t.Type]; !ok || due.Before(first) {
				dueByType[t.Type] = due
			}
			if st.OldestWaiting == nil || !due.After(waitedSince) { // a tie goes to the older task, seen later
				st.OldestWaiting, waitedSince = &t.Task, due
			}
		}
		return true
	}, func(*RecordError) { st.Broken++ })
	if err != nil {
		return nil, err
	}
	st.Truncated = more
	st.AwaitingInput = len(awaiting)
	if cutoff, ok := s.unsentCutoff(s.serverNow()); ok { // the clock as the walk's answers set it
		for _, at := range awaiting {
			if at.Before(cutoff) {
				st.AwaitingInputExpired++
			}
		}
	}
	if st.OldestUnfinished != nil {
		st.OldestUnfinishedAge = s.serverNow().Sub(st.OldestUnfinished.CreatedAt)
	}
	if st.OldestWaiting != nil {
		st.OldestWaitingAge = max(s.serverNow().Sub(waitedSince), 0)
	}
	for typ, due := range dueByType {
		st.WaitByType[typ] = max(s.serverNow().Sub(due), 0)
	}
	st.Timeline = line.series(s.serverNow(), opts.Since)
	return st, nil
}

// waitingSince returns when t became due, if it waits for a worker at
// now (by the server's clock): it is queued with no RunAt still to come,
// or failed with a retry time that has come. A queued task is due from
// its DueAt, which every write that queues it sets (to the submit, the
// RunAt if later, or the moment it was queued again); a record written
// before DueAt existed falls back to its submit or RunAt, then to its
// creation. A failed task is due from its RetryAt, the time the claim
// judges it by. The due time may lie up to a millisecond after now, as
// DueAt is rounded up to one.
func waitingSince(t *Task, now time.Time) (time.Time, bool) {
	var due time.Time
	switch {
	case t.Status == StatusQueued && !t.Scheduled(now):
		due = t.DueAt
		if due.IsZero() {
			due = later(t.SubmittedAt, t.RunAt)
		}
		if due.IsZero() {
			due = t.CreatedAt
		}
	case t.Status == StatusFailed && !t.RetryAt.IsZero() && !t.RetryAt.After(now):
		due = t.RetryAt
	default:
		return time.Time{}, false
	}
	return due, true
}

// timeline gathers Stats.Timeline; the zero value gathers nothing.
type timeline struct {
	every   time.Duration
	buckets map[int64]*StatsBucket // by Start in Unix nanoseconds
	oldest  time.Time              // the oldest creation seen
}

// bucket returns the bucket holding at.
func (l *timeline) bucket(at time.Time) *StatsBucket {
	start := at.Truncate(l.every)
	b := l.buckets[start.UnixNano()]
	if b == nil {
		b = &StatsBucket{Start: start}
		l.buckets[start.UnixNano()] = b
	}
	return b
}

// add counts t's creation and, if it is finished, its finish.
func (l *timeline) add(t *Task) {
	if l.every == 0 {
		return
	}
	l.bucket(t.CreatedAt).Created++
	if l.oldest.IsZero() || t.CreatedAt.Before(l.oldest) {
		l.oldest = t.CreatedAt
	}
	if !t.Terminal() {
		return
	}
	switch b := l.bucket(t.UpdatedAt); t.Status {
	case StatusCompleted:
		b.Completed++
	case StatusFailed:
		b.Failed++
	case StatusAbandoned:
		b.Abandoned++
	}
}

// series returns the buckets from the one holding now back to the one
// holding since (or the oldest creation seen), newest first, at most
// MaxStatsBuckets; nil if the timeline gathers nothing.
func (l *timeline) series(now, since time.Time) []StatsBucket {
	if l.every == 0 {
		return nil
	}
	from := since
	if from.IsZero() {
		from = l.oldest
	}
	if from.IsZero() || from.After(now) {
		from = now
	}
	var out []StatsBucket
	for at := now.Truncate(l.every); !at.Before(from.Truncate(l.every)) && len(out) < MaxStatsBuckets; at = at.Add(-l.every) {
		b := StatsBucket{Start: at}
		if got := l.buckets[at.UnixNano()]; got != nil {
			b = *got
		}
		out = append(out, b)
	}
	return out
}

func cmpString(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// PurgeOptions controls [Store.Purge].
type PurgeOptions struct {
	// DryRun reports what would be deleted and deletes nothing.
	DryRun bool
	// Limit caps the tasks deleted by one call; zero means no cap.
	Limit int
	// DropPendingNotices purges finished tasks whose OnTerminal notice was
	// never delivered too (the hook keeps failing, or was removed from the
	// configuration); those notices are then lost. By default such tasks are
	// kept until their notice goes out.
	DropPendingNotices bool
}

// PurgeReport says what [Store.Purge] found and did.
type PurgeReport struct {
	// Tasks is the number of task records read (all created before the
	// cutoff).
	Tasks int
	// Purged lists the tasks deleted (or, with DryRun, that would be).
	Purged []string
	// Objects is the number of objects deleted, records included.
	Objects int
	// Kept is the number of tasks left because Purge may not delete them
	// yet: not finished, their notice still to go out, their key held, or
	// changed less than a minute ago.
	Kept int
	// Broken lists the records that could not be read; their folders are
	// left alone.
	Broken []*RecordError
}

// purgeSettle is how long after a task's last change Purge leaves it: a
// request sent before that change is applied by S3 within it, or never
// (the bound the library assumes, as for keys: keyAdoptWithin), so no
// late write brings an object back into a folder Purge emptied.
const purgeSettle = keyAdoptWithin

// Purge deletes the finished tasks (completed, abandoned, or failed with no
// retry scheduled) created before olderThan, newest first: every object in
// the task's folder, then its marker if any, then the record last. It never
// deletes a task that is queued, running, or waiting for a retry, nor a
// task created with a key ([CreateParams.Key]) until 10 minutes after the
// key was written, nor any task until a minute after its last change (a
// write sent before it, such as an output whose answer was lost, may still
// land within that minute). Before
// deleting anything it marks the record as purging with a compare-and-set,
// after which no transition is allowed, so a Retry that races with it either
// wins first (and the task is kept) or is refused. A purge cut short is
// completed by the next one.
//
// An S3 lifecycle rule can expire the objects under the prefix instead, with
// no requests from here; but a rule goes by object age, not by task status,
// so it would delete a long-waiting task's record as readily as a finished
// one. Use it only with an expiry well beyond any task's life.
//
// Requests: one LIST per 1,000 task folders walked and one GET per task;
// per task deleted, a PUT (the purging mark), a LIST of its folder, one
// DeleteObjects per 1,000 objects, a DELETE of the marker and one of the
// record; for a task created with a key, a GET of the key's object and a
// PUT that leaves it as a tombstone: the next Create with the key takes it
// over and makes a new task, while [Store.Ingest] never ingests the
// version again (see [CreateParams.Key]).
//
// Errors: [ErrInvalidArgument] for a zero cutoff or a negative limit; S3
// errors and ctx's, with the report of what was done so far.
func (s *Store) Purge(ctx context.Context, olderThan time.Time, opts PurgeOptions) (*PurgeReport, error) {
	if olderThan.IsZero() {
		return nil, invalidArg("purge needs a cutoff time")
	}
	if opts.Limit < 0 {
		return nil, invalidArg("purge limit %d, must not be negative", opts.Limit)
	}
	r := &PurgeReport{}
	var err error
	_, werr := s.walk(ctx, olderThan.Add(-time.Millisecond), time.Time{}, 0, nil, func(t *record) bool {
		r.Tasks++
		var k keyRef
		if k, err = s.purgeable(ctx, t, event{kind: evPurge, force: opts.DropPendingNotices}); err != nil {
			if errors.Is(err, ErrInvalidTransition) {
				r.Kept++ // not finished, its notice not out yet, its key held, or not settled
				err = nil
				return true
			}
			return false
		}
		if opts.DryRun {
			r.Purged = append(r.Purged, t.ID)
			return opts.Limit == 0 || len(r.Purged) < opts.Limit
		}
		var n int
		_, n, err = s.purgeTask(ctx, t, "", event{kind: evPurge, force: opts.DropPendingNotices}, k)
		r.Objects += n
		switch {
		case errors.Is(err, ErrInvalidTransition):
			r.Kept++ // a Retry got there first
			err = nil
		case err != nil:
			return false
		default:
			r.Purged = append(r.Purged, t.ID)
		}
		return opts.Limit == 0 || len(r.Purged) < opts.Limit
	}, func(re *RecordError) { r.Broken = append(r.Broken, re) })
	return r, errors.Join(werr, err)
}

// purgeable applies Purge's rules to t, a task's record as read, with
// lock the evPurge event that would lock it: it returns nil if the task
// may be purged now, a *TransitionError saying why not (it is not
// finished; its OnTerminal notice is still to go out, unless lock.force;
// it is not in the states of a bulk action's selection, lock.states; it
// was created with a key written less than keyHold ago, so a
// Create of the key may still be under way: see CreateParams.Key), or the
// error of the read of its key's object. For a task created with a key it
// returns the key's object as read, for purgeTask to entomb. Requests: for
// a task created with a key, one GET.
func (s *Store) purgeable(ctx context.Context, t *record, lock event) (keyRef, error) {
	if _, _, err := transition(t, lock, s.serverNow()); err != nil {
		return keyRef{}, err
	}
	if t.IdempotencyKey == "" {
		return keyRef{}, nil
	}
	held, k, err := s.keyHolds(ctx, t)
	if err != nil {
		return keyRef{}, err
	}
	if held {
		s.reached("purge/key-held")
		return keyRef{}, &TransitionError{ID: t.ID, From: t.Status, Event: evPurge.String(),
			Reason: fmt.Sprintf("its key was written less than %s ago, and a Create of the key may still be under way", fmtAge(keyHold))}
	}
	return k, nil
}

// purgeTask locks a finished task's record for deletion, makes its key's
// object (k, as purgeable read it) a tombstone if it was created with a
// key, and deletes its folder, marker and record, in that order. t is the
// record as read, with its ETag, or "" to read it again first; lock is
// the evPurge event that locks it. It returns the record as locked and the
// number of objects deleted.
func (s *Store) purgeTask(ctx context.Context, t *record, etag string, lock event, k keyRef) (*record, int, error) {
	id := t.ID
	var err error
	if etag == "" {
		t, _, err = s.change(ctx, id, lock)
	} else {
		t, _, err = s.apply(ctx, t, etag, lock)
	}
	if err != nil {
		return nil, 0, err
	}
	if t.IdempotencyKey != "" {
		if err := s.entomb(ctx, t, k); err != nil {
			return t, 0, err
		}
	}
	dir, record := s.taskDir(id), s.recordKey(id)
	deleted := 0
	in := &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: &dir}
	for {
		out, err := s.client.ListObjectsV2(ctx, in)
		if err != nil {
			return t, deleted, fmt.Errorf("s3task: list %s: %w", dir, err)
		}
		var objs []types.ObjectIdentifier
		for _, obj := range out.Contents {
			if aws.ToString(obj.Key) != record {
				objs = append(objs, types.ObjectIdentifier{Key: obj.Key})
			}
		}
		if len(objs) > 0 {
			res, err := s.client.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: &s.bucket, Delete: &types.Delete{Objects: objs, Quiet: aws.Bool(true)}})
			if err != nil {
				return t, deleted, fmt.Errorf("s3task: delete objects of %s: %w", dir, err)
			}
			if len(res.Errors) > 0 {
				e := res.Errors[0]
				return t, deleted, fmt.Errorf("s3task: delete %s: %s: %s", aws.ToString(e.Key), aws.ToString(e.Code), aws.ToString(e.Message))
			}
			deleted += len(objs)
		}
		if !aws.ToBool(out.IsTruncated) || out.NextContinuationToken == nil {
			break
		}
		in.ContinuationToken = out.NextContinuationToken
	}
	for _, key := range []string{s.MarkerKey(&t.Task), record} {
		if _, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: &key}); err != nil {
			return t, deleted, fmt.Errorf("s3task: delete %s: %w", key, err)
		}
	}
	return t, deleted + 1, nil
}

// purgeOne is an OpPurge call's work, a task of [Store.PurgeMany]: it
// applies Purge's rules to the record read for the call and, unless the
// call is a dry run, locks the task and deletes it as Purge does, deciding
// the lock against the record as stored (a Retry that got there first
// keeps it). It returns the task as it was read, or as locked, and sets
// c.result to true once the task is (or, in a dry run, would be) purged.
// Requests: beside the call's GET, for a task created with a key, a GET of
// the key's object; then what Purge spends on each task it deletes.
func (s *Store) purgeOne(ctx context.Context, c *Call) (*Task, error) {
	t, etag, err := s.current(ctx, c)
	if err != nil {
		return nil, err
	}
	lock := event{kind: evPurge, force: c.force, states: c.states}
	k, err := s.purgeable(ctx, t, lock)
	if err != nil {
		return nil, err
	}
	if !c.dry {
		if t, _, err = s.purgeTask(ctx, t, etag, lock, k); err != nil {
			return nil, err
		}
	}
	c.result = true
	return t.task(), nil
}
