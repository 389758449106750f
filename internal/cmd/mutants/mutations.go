package main

// mutation is one small, deliberate breakage of the library: Old, which
// must occur exactly once in File, is replaced by New, and so is each edit
// of Also, for a breakage that takes more than one place (a rule the
// library keeps in two).
type mutation struct {
	Name    string // short, kebab-case
	Promise string // the guarantee of the docs it breaks, in one sentence
	File    string // relative to the repository root
	Old     string // exact code, found exactly once in File
	New     string // what replaces it
	Also    []edit
}

// edit is one more replacement of a mutation.
type edit struct{ File, Old, New string }

// edits returns every replacement of m.
func (m mutation) edits() []edit { return append([]edit{{m.File, m.Old, m.New}}, m.Also...) }

// mutations breaks the library, never the simulation: each one is a bug the
// simulation's checker should find.
var mutations = []mutation{
	{
		Name:    "lease-margin",
		Promise: "The holder stops trusting its lease ClockMargin before the lease's end, so no two handlers of one task run at once.",
		File:    "lease.go",
		Old:     `left := t.LeaseExpiresAt.Sub(l.w.store.serverLatest()) - l.w.opts.ClockMargin`,
		New:     `left := t.LeaseExpiresAt.Sub(l.w.store.serverLatest())`,
	},
	{
		Name:    "late-output",
		Promise: "Once the handler's context has ended, Job.WriteOutput writes nothing, and an upload under way is cancelled.",
		File:    "job.go",
		Old: `	if j.attempt != nil {
		if j.attempt.Err() != nil {
			return fmt.Errorf("s3task: write output %s: the attempt has ended: %w", key, context.Cause(j.attempt))
		}
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		defer cancel(nil)
		defer context.AfterFunc(j.attempt, func() { cancel(context.Cause(j.attempt)) })()
	}
`,
		New: ``,
	},
	{
		Name:    "release-counts",
		Promise: "An attempt given back on shutdown is counted in released_attempts, apart from the cap, so shutdown never uses up an attempt.",
		File:    "task.go",
		Old:     `n.ReleasedAttempts++ // the interrupted attempt does not count`,
		New:     `// the interrupted attempt counts`,
	},
	{
		Name:    "retry-no-marker",
		Promise: "A change writes the marker of the phase it starts before the record, so a task waiting for its retry always has a marker for a worker to find it by.",
		File:    "marker.go",
		Old:     `	if want != "" && want != old {`,
		New:     `	if want != "" && want != old && next.RetryAt.IsZero() {`,
	},
	{
		Name:    "refused-put-wins",
		Promise: "Every write is a compare-and-set, so a writer whose conditional PUT was refused (412/409) never takes the change as made nor overwrites newer state.",
		File:    "record.go",
		Old:     `return now, nowETag, errLost`,
		New:     `return n, nowETag, nil`,
	},
	{
		Name:    "overtaken-unchecked",
		Promise: "After a doubtful answer the library tells from the prior revisions whether its write landed, even when others wrote after it, and reports one that did not land as such.",
		File:    "task.go",
		Old: `	case k > 0 && k <= int64(len(cur.PriorRevisions)):
		if cur.PriorRevisions[k-1] == mine.Revision {
			return overtaken
		}
		return notLanded
`,
		New: `	case k > 0:
		return overtaken
`,
	},
	{
		Name:    "claim-before-runat",
		Promise: "No worker claims a scheduled task before its RunAt by the server's clock: here the task falls due, and may be claimed, a second early.",
		File:    "task.go",
		Old:     `case t.Status == StatusQueued && due.Before(t.RunAt):`,
		New:     `case t.Status == StatusQueued && due.Add(time.Second).Before(t.RunAt):`,
		Also: []edit{
			{"task.go", `n.DueAt = ceilMS(later(now, t.RunAt))`, `n.DueAt = ceilMS(later(now, t.RunAt.Add(-time.Second)))`},
			{"task.go", `n.DueAt = ceilMS(later(now, e.at))`, `n.DueAt = ceilMS(later(now, e.at.Add(-time.Second)))`},
		},
	},
	{
		Name:    "clock-upper-edge",
		Promise: "A worker's sense of the server's clock never runs ahead of it once the Date headers rule it out, and a claim judges RunAt and a retry's time by the lower edge of what they allow, so no claim lands before them.",
		File:    "clock.go",
		Old: `		s.skew.Store(least)
	}
}`,
		New: `		s.skew.Store(most)
	}
}`,
		Also: []edit{
			{"clock.go", `s.opts.Clock().Add(time.Duration(s.skewLeast.Load())).UnixMilli()`, `s.opts.Clock().Add(time.Duration(s.skewMost.Load())).UnixMilli()`},
		},
	},
	{
		Name:    "unserved-claimed",
		Promise: "A worker claims only tasks of the types its handler serves, and leaves the others to a worker that does.",
		File:    "poll.go",
		Old:     `	case !serves(w.h, t.Type):`,
		New:     `	case false:`,
	},
	{
		Name:    "unreadable-hides",
		Promise: "Unreadable records (corrupt, or of a newer schema) never hide a due task behind them: a poll goes on past the few it visited first.",
		File:    "poll.go",
		Old:     `		for len(rest) > 0 && started == 0 && ctx.Err() == nil {`,
		New:     `		for len(rest) == len(todo) && len(rest) > 0 && started == 0 && ctx.Err() == nil {`,
	},
	{
		Name:    "submit-no-wake",
		Promise: "Submit tells idle workers through the wake object, so one starts the task within PollInterval, not at its next listing (MaxPollInterval).",
		File:    "store.go",
		Old: `	got, changed, err := s.apply(ctx, t, etag, e)
	if changed || announceFound(got, err) {
		s.wake(ctx, s.MarkerKey(&got.Task))
	}
	if adopted && err == nil {`,
		New: `	got, _, err := s.apply(ctx, t, etag, e)
	if adopted && err == nil {`,
	},
	{
		Name:    "schedule-silent",
		Promise: "Schedule tells idle workers of the new start, so the task starts within PollInterval of its new RunAt.",
		File:    "store.go",
		Old:     `	if changed && got.Status == StatusQueued {`,
		New:     `	if changed && got.Status == StatusQueued && t.DueAt.IsZero() {`,
	},
	{
		Name:    "cancel-notice-waits",
		Promise: "A cancel that leaves an OnTerminal notice pending makes the task due now, so its notice does not wait for the start or retry it was scheduled for.",
		File:    "task.go",
		Old:     `		if (t.NotifyPending || e.notify) && (t.DueAt.IsZero() || t.DueAt.After(now) || !t.needsMarker()) {`,
		New:     `		if (t.NotifyPending || e.notify) && (t.DueAt.IsZero() || !t.needsMarker()) {`,
	},
	{
		Name:    "notice-of-purged-retried",
		Promise: "The notice of a task deleted before it went out is dropped, not tried again for as long as the worker runs.",
		File:    "notify.go",
		Old: `		if errors.Is(err, ErrNotFound) {
			n.w.gone.note(no.t.ID)`,
		New: `		if false {
			n.w.gone.note(no.t.ID)`,
	},
	{
		Name:    "purge-settle-from-creation",
		Promise: "Purge leaves a task until a minute after its last change, so an output write sent before the task finished cannot land in a folder Purge emptied.",
		File:    "task.go",
		Old:     `		if now.Sub(t.UpdatedAt) < purgeSettle {`,
		New:     `		if now.Sub(t.CreatedAt) < purgeSettle {`,
	},
	{
		Name:    "purge-settle-second",
		Promise: "Purge leaves a task until a minute after its last change, so an output write sent before the task finished cannot land in a folder Purge emptied.",
		File:    "maintenance.go",
		Old:     `const purgeSettle = keyAdoptWithin`,
		New:     `const purgeSettle = time.Second`,
	},
	{
		Name:    "periodic-key-from-now",
		Promise: "A periodic run's key names its period's start, so a run is made once however many workers try, at whatever moment of the period.",
		File:    "periodic.go",
		Old:     `	t, err := s.enqueueRun(cctx, p, start)`,
		New:     `	t, err := s.enqueueRun(cctx, p, now)`,
	},
	{
		Name:    "periodic-within-period",
		Promise: "Under SkipMissed, a run not made within Periodic.Within of its period's start is skipped.",
		File:    "periodic.go",
		Old:     `	if p.Missed == SkipMissed && now.Sub(start) > p.within() {`,
		New:     `	if p.Missed == SkipMissed && now.Sub(start) >= p.Schedule.Next(start).Sub(start) {`,
	},
	{
		Name:    "periodic-settle-next",
		Promise: "The lease's holder makes the run of every period while it holds the lease.",
		File:    "periodic.go",
		Old: `		s.reached("periodic/made")
		r.w.log.Debug("s3task: periodic run", "periodic", p.Name, "period", start, "task_id", t.ID)
		pr.settled[p.Name] = later(pr.settled[p.Name], start)`,
		New: `		s.reached("periodic/made")
		r.w.log.Debug("s3task: periodic run", "periodic", p.Name, "period", start, "task_id", t.ID)
		pr.settled[p.Name] = later(pr.settled[p.Name], p.Schedule.Next(start))`,
	},
	{
		Name:    "stop-ignores-deadline",
		Promise: "Once the context given to Worker.Stop ends, running handlers are cancelled at once.",
		File:    "worker.go",
		Old: `	case <-rs.hurry:
		w.store.reached("stop/hurry")`,
		New: `	case <-make(chan struct{}):
		w.store.reached("stop/hurry")`,
	},
	{
		Name:    "reconcile-no-restore",
		Promise: "Reconcile restores the marker of every task that needs a worker, so a lost marker never strands a task.",
		File:    "maintenance.go",
		Old:     `			note(s.putMarker(ctx, want))`,
		New:     `			_ = want`,
	},
	{
		Name:    "recancel-no-notice",
		Promise: "Every result of a task is notified: a final failure that is then cancelled gets a notice as abandoned.",
		File:    "task.go",
		Old:     `	if write && next.Terminal() && (!t.Terminal() || next.Status != t.Status) {`,
		New:     `	if write && next.Terminal() && !t.Terminal() {`,
	},
	{
		Name:    "watch-forgotten",
		Promise: "A reconciler turn that walks only recent tasks still rechecks the older waiting tasks an earlier walk found, so any lost marker is restored within about an interval.",
		File:    "reconciler.go",
		Old:     `rep, pending, err := s.reconcile(ctx, ReconcileOptions{Since: since}, r.pending, &w.gone)`,
		New:     `rep, pending, err := s.reconcile(ctx, ReconcileOptions{Since: since}, nil, &w.gone)`,
	},
	{
		Name:    "event-ignored",
		Promise: "A worker told by an event that a task's marker was written visits that task at once, with no LIST.",
		File:    "event.go",
		Old:     `w.marked[m.key] = noted{m: m, at: at}`,
		New:     `_ = noted{m: m, at: at}`,
	},
	{
		Name:    "ingest-version-blind",
		Promise: "Ingest makes one task per object version: a new version of a file makes a new task.",
		File:    "ingest.go",
		Old:     "if etag := strings.Trim(o.ETag, `\"`); etag != \"\" {\n\t\treturn \"e:\" + etag\n\t}\n\treturn \"v:\" + o.VersionID",
		New:     `return ""`,
	},
	{
		Name:    "found-blind",
		Promise: "CreateOrGet (and Call.Found) says a keyed call found the task when an earlier call made it: of all the calls with one key, only the one whose write made the task says it made it.",
		File:    "idempotency.go",
		Old: `			case err == nil:
				return got, gotETag, true, nil`,
		New: `			case err == nil:
				return got, gotETag, false, nil`,
	},
	{
		Name:    "expiry-leaves-attempt-open",
		Promise: "Task.History says how each attempt ended: an expired lease closes its attempt's entry, at the lease's end, in the write that recovers the task (a takeover's claim included).",
		File:    "task.go",
		Old:     `		endAttempt(n, t, OutcomeLeaseExpired, ended, CategoryLeaseExpired, n.LastError)`,
		New:     `		_ = ended`,
	},
	{
		Name:    "ingest-unkeyed",
		Promise: "Every Ingest of the same object version returns the one task the first made, however many events and sweeps name it.",
		File:    "ingest.go",
		Old:     `p.Key = IngestKey(o, s.bucket)`,
		New:     `p.Key = ""`,
	},
	{
		Name:    "form-addresses-input",
		Promise: "An input is written once: a presigned POST form, which S3 lets replace its object until it expires, never addresses the input Submit verifies.",
		File:    "transfer.go",
		Old: `func (s *Store) presignForm(ctx context.Context, t *Task, ttl time.Duration) (*PresignedForm, error) {
	key := s.uploadKeyOf(t)`,
		New: `func (s *Store) presignForm(ctx context.Context, t *Task, ttl time.Duration) (*PresignedForm, error) {
	key := s.inputOf(t)`,
	},
	{
		Name:    "pause-ignored",
		Promise: "Once Store.Pause has returned, no worker begins a claim of a task of the paused type later than its PollInterval after, until a Resume.",
		File:    "pause.go",
		Old:     `	return slices.Contains(seen.types, typ), nil`,
		New:     `	return false, nil`,
	},
	{
		Name:    "wake-drops-paused",
		Promise: "Every writer of the wake object carries the paused types it read over to what it writes, so no announcement (a Submit, a Retry) drops a pause.",
		File:    "wake.go",
		Old:     `		newETag, err := s.putWake(ctx, formatWakeBody(b), etag)`,
		New:     `		newETag, err := s.putWake(ctx, formatWakeBody(wakeBody{notes: b.notes, paused: pausedSet{known: true}}), etag)`,
	},
	{
		Name:    "wake-batch-drops-last",
		Promise: "The calls of a Store that announce while its write of the wake object is under way gather into its next write, every one of them: no Submit's announcement is lost to another call of the same process.",
		File:    "wake.go",
		Old:     `	notes := b.notes // no call joins b once its turn has come`,
		New:     `	notes := b.notes[:max(len(b.notes)-1, 1)]`,
	},
	{
		Name:    "wake-copy-blind",
		Promise: "A Store writes an announcement over its copy of the wake object only if no one changed the object since it wrote it (If-Match on the copy's ETag), so no other process's announcement or pause is overwritten: here the write over the copy is blind.",
		File:    "wake.go",
		Old:     `		newETag, err := s.putWake(ctx, formatWakeBody(b), etag)`,
		New:     `		newETag, err := s.putWake(ctx, formatWakeBody(b), map[bool]string{true: "-", false: etag}[copied])`,
	},
	{
		Name:    "wake-visit-drops-last",
		Promise: "An idle worker that sees the wake object announce markers due now visits every one of them, with no LIST: here it visits all but the last, and neither lists for it.",
		File:    "wake.go",
		Old:     `	for _, m := range visit {`,
		New:     `	for _, m := range visit[:max(len(visit)-1, 0)] {`,
	},
	{
		Name:    "poll-leave-renewed",
		Promise: "While workers race, a worker leaves the last task of another worker in the head of its listing to that worker for one PollInterval from when it first did, then takes it: a task whose worker is busy, stopped or does not serve its type waits a PollInterval at most. Here each poll starts the PollInterval again, so the task waits for its worker as long as the race lasts.",
		File:    "poll.go",
		Old:     `			since, ok := w.passed[m.key]`,
		New:     `			since, ok := now, false`,
	},
	{
		Name:    "fallback-states-none",
		Promise: "The fallback of a Pause or Resume that keeps losing its compare-and-set on the wake object, which writes it blind, says the paused types are unknown, so workers read them from the paused object and no pause is lost.",
		File:    "wake.go",
		Old:     `	body := formatWakeBody(wakeBody{notes: []wakeNote{{rev: s.revision(s.wakeKey()), key: "*"}}})`,
		New:     `	body := formatWakeBody(wakeBody{notes: []wakeNote{{rev: s.revision(s.wakeKey()), key: "*"}}, paused: pausedSet{known: true}})`,
	},
	{
		Name:    "tombstone-ignored",
		Promise: "An Ingest never takes over the key of a task Purge deleted: a restarted Ingester's first sweep makes no second task of a version whose task was purged.",
		File:    "idempotency.go",
		Old:     `		purged := k.purged`,
		New:     `		purged := false`,
	},
	{
		Name:    "failure-settles",
		Promise: "A version whose ingest failed for a passing reason waits, and every sweep tries it again while it is listed: an S3 outage longer than two sweeps loses nothing.",
		File:    "ingester.go",
		Old: `	case waits(err):
		in.waiting[k] = o`,
		New: `	case waits(err):
		in.settled[k] = true`,
	},
	{
		Name:    "renew-checks-input",
		Promise: "A version whose task was abandoned before it was submitted (its source went before the copy) is ingested anew once the same bytes are back.",
		File:    "ingest.go",
		Old:     `r.SubmittedAt.IsZero() && r.InputETag == ""`,
		New:     `r.SubmittedAt.IsZero() && r.InputETag != ""`,
	},
	{
		Name:    "moved-on-refused",
		Promise: "Ingests of one version at once all return its task: one that finds the task moved on by another returns it, not an error.",
		File:    "ingest.go",
		Old: `	case errors.As(err, &te):
		// Another Ingest of the version (or an operator) moved the task on
		// since it was found created: it is the task all the same.
		s.reached("ingest/moved-on")
		return s.Get(ctx, t.ID)`,
		New: `	case errors.As(err, &te):
		return nil, err`,
	},
	{
		Name:    "ingest-unlooked",
		Promise: "An event for an object that does not exist makes no task: Ingest looks at the source before it makes one.",
		File:    "ingest.go",
		Old: `	case s3x.NotFound(err) || s3x.Lost(err): // gone, or no longer that version (412)
		return absent()`,
		New: `	case s3x.NotFound(err) || s3x.Lost(err): // gone, or no longer that version (412)
		h, err = &s3.HeadObjectOutput{}, nil`,
	},
	{
		Name:    "release-limit-late",
		Promise: "A worker with a ReleaseLimit fails a task for good at the give-back past the limit: a task too long for any invocation is started at most ReleaseLimit+1 times in a row.",
		File:    "task.go",
		Old:     `e.releaseLimit > 0 && run >= e.releaseLimit`,
		New:     `e.releaseLimit > 0 && run > e.releaseLimit`,
	},
	{
		Name:    "release-limit-early",
		Promise: "A worker with a ReleaseLimit gives a task back ReleaseLimit times in a row before it fails it for timeout, not fewer.",
		File:    "task.go",
		Old:     `e.releaseLimit > 0 && run >= e.releaseLimit`,
		New:     `e.releaseLimit > 0 && run >= e.releaseLimit-1`,
	},
	{
		Name:    "watch-trusts-far-marker",
		Promise: "The reconciler's watch of the older waiting tasks reads again a task whose marker is not yet due, so an old marker a change left behind (its outcome unknown, its DELETE failed) is removed within an interval, not on the day it was due.",
		File:    "maintenance.go",
		Old:     `return m.key == was && !m.due.After(now)`,
		New:     `return m.key == was`,
	},
	{
		Name:    "settle-gives-up",
		Promise: "Cancel, Retry, Schedule and Submit settle a doubt the record cannot tell by deciding again, and return ErrOutcomeUnknown only when S3 does not answer: a Cancel racing a running task's heartbeats does not hand its doubt to the caller.",
		File:    "record.go",
		Old:     `case errors.Is(err, errUntold) && hasGoal(e.kind):`,
		New:     `case errors.Is(err, errUntold) && false:`,
	},
	{
		Name:    "horizon-forgets-start",
		Promise: "A worker visits a marker named within ClockMargin of now at once, and when its record shows a start or a retry still ahead it comes back at that time: here the visit judges \"ahead\" by the horizon too, so a start that close is left to the safety listing.",
		File:    "poll.go",
		Old:     `if at := t.DueAt.Add(s.dueLead()); at.After(now) {`,
		New:     `if at := t.DueAt.Add(s.dueLead()); at.After(w.soon(now)) {`,
	},
	{
		Name:    "stagger-unbounded",
		Promise: "Told of a due task with the rest of a fleet, a worker waits for its turn a few measured record reads per worker ranked ahead, 1 s at most in all: here each rank ahead costs 10 s, unbounded, so a worker ranked behind busy ones, or behind one that missed the event, leaves a task it was told of waiting while it is idle.",
		File:    "fanout.go",
		Old: `	step := min(max(staggerRTTs*w.rtt, minStaggerStep), maxStaggerStep)
	return min(time.Duration(n)*step, maxStagger)`,
		New: `	return time.Duration(n) * 10 * time.Second`,
	},
}
