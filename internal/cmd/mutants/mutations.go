package main

// mutation is one small, deliberate breakage of the library: Old, which
// must occur exactly once in File, is replaced by New.
type mutation struct {
	Name    string // short, kebab-case
	Promise string // the guarantee of the docs it breaks, in one sentence
	File    string // relative to the repository root
	Old     string // exact code, found exactly once in File
	New     string // what replaces it
}

// mutations breaks the library, never the simulation: each one is a bug the
// simulation's checker should find.
var mutations = []mutation{
	{
		Name:    "lease-margin",
		Promise: "The holder stops trusting its lease ClockMargin before the lease's end, so no two handlers of one task run at once.",
		File:    "lease.go",
		Old:     `left := t.LeaseExpiresAt.Sub(l.w.store.serverClock()) - l.w.opts.ClockMargin`,
		New:     `left := t.LeaseExpiresAt.Sub(l.w.store.serverClock())`,
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
		Promise: "Each phase of a task that needs a worker has a marker of its own, a failed task's named after its retry time, so deleting the marker of a phase that is over never deletes the next one's.",
		File:    "task.go",
		Old: `			n.RetryAt = now.Add(max(e.retryDelay, 0))
			n.DueAt = ceilMS(n.RetryAt)
`,
		New: `			n.RetryAt = now.Add(max(e.retryDelay, 0))
`,
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
		Promise: "No worker claims a scheduled task before its RunAt by the server's clock; this breaks the state machine's check, which a poll never reaches early (its visit checks RunAt first, and the marker is named after RunAt), so only Worker.RunTask could claim a second early.",
		File:    "task.go",
		Old:     `case t.Status == StatusQueued && now.Before(t.RunAt):`,
		New:     `case t.Status == StatusQueued && now.Add(time.Second).Before(t.RunAt):`,
	},
}
