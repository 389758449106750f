// Package probe lets the simulation see which branches of the protocol a
// run reached: the rare ones (an answer lost and a competitor's write
// after it, a lease still ours after a doubtful write, a key taken over)
// are where defects hide, and a run that never reached one says nothing
// about it. A Store given a probe reports each branch of Branches as it
// takes it; without one (always, outside this module) it reports nothing
// and pays one nil check.
package probe

// Use makes store, a *s3task.Store, report every branch it reaches, and
// those of the Workers on it, to f, which must be safe for concurrent
// use. Package s3task sets it when it is initialised.
var Use func(store any, f func(branch string))

// Branches names every branch the library reports, with what taking it
// means.
var Branches = map[string]string{
	"commit/landed-after-doubt": "a write whose answer was unclear (lost, 409, 412 to a resend, 5xx) proved by its revision to have landed",
	"commit/overtaken":          "a write whose answer was unclear proved by the prior revisions to have landed, with others' writes after it",
	"commit/not-landed":         "a write whose answer was unclear proved not to have landed",
	"commit/unknown":            "a write whose outcome the record could not tell (ErrOutcomeUnknown)",
	"apply/settle":              "an operator's change whose write the record could not tell landed, decided again against the record as read",
	"commit/gone":               "a write whose record was deleted (purged) before it could be told",
	"lease/still-ours":          "a lease write refused because an earlier write of the same attempt had landed unseen, decided again and written",
	"lease/deadline":            "a lease given up at its deadline, the renewals having failed",
	"lease/lost":                "a lease write that found the task taken over",
	"lease/cancelled":           "a lease write that found the task cancelled",
	"lease/release":             "an attempt given back on shutdown",
	"poll/takeover":             "a task taken over from an expired lease",
	"poll/expired-final":        "a task failed for good by an expired lease with no attempt left",
	"poll/unreadable":           "an unreadable record (corrupt, or of a newer schema) left alone for a while",
	"poll/unserved":             "a task of a type the worker does not serve left alone for a while",
	"poll/paused":               "a claim held back because the task's type is paused",
	"pause/refresh":             "a claim that read the wake object first, the worker's last read of it being a PollInterval old",
	"pause/read-record":         "a worker that read the paused object, the wake object's body not naming the paused types",
	"poll/stale-marker":         "a marker of a phase that is over deleted by a visit",
	"poll/next-head":            "a poll going on to the next few due markers, the first few having started nothing",
	"poll/next-page":            "a poll going on to the next page, the first having held nothing to start",
	"event/visit":               "a marker named by an event visited directly, with no listing",
	"event/record":              "a marker named by an event, found ahead of its record, visited again at once on the record's event",
	"event/retry":               "an event's visit that failed for a passing reason, tried again within seconds",
	"event/removed":             "a marker named by an event forgotten on an event of its deletion",
	"event/during-scan":         "a marker named by an event visited between two visits of a poll's scan",
	"fanout/rival":              "a worker told of a due task found another told of it too (it had claimed the task first)",
	"fanout/stagger":            "a visit of a task told of by an event put off for the rivals ranked ahead (fan-out)",
	"fanout/forget":             "a rival ranked ahead forgotten after it left the worker the claim several times in a row",
	"poll/claim-refused":        "a claim refused though nobody had written the record (409), tried again at the next poll",
	"periodic/made":             "a periodic task's run made by the reconciler lease's holder",
	"periodic/skipped":          "a periodic task's run let go: later than Within under SkipMissed",
	"poll/claim-lost":           "a claim lost to another writer of the record (a rival's claim, an operator's change)",
	"poll/rival":                "a listed marker whose task another worker had claimed since the listing: a rival",
	"poll/fleet":                "the presence objects listed to learn the workers that poll the same head (contention)",
	"poll/fleet-forget":         "a rival forgotten because a listing of the presence objects no longer shows it fresh",
	"poll/help":                 "a poll that found none of its own tasks in the head and went for a rival's",
	"poll/leave":                "the last task of another worker in the head left to that worker for a PollInterval",
	"key/adopt":                 "a keyed Create writing the task its key names, whose writer had not",
	"key/takeover":              "a keyed Create taking over a key whose task was purged or never written",
	"key/purged":                "an Ingest refused because its version's task was purged (a tombstone, or a record being purged)",
	"key/renew":                 "an Ingest replacing under its key a task abandoned before it was submitted, its source being there again",
	"purge/tombstone":           "a purged task's key object rewritten as a tombstone",
	"ingest/source-gone":        "an Ingest that found no version to ingest, and made no task",
	"ingest/moved-on":           "an Ingest that found the task it took up moved on by another (a concurrent Ingest), and returned it",
	"key/conflict":              "a keyed Create refused between the adoption window and the takeover",
	"purge/key-held":            "a keyed task kept by Purge because its key was written less than 10 minutes ago",
	"notify/retry":              "a failed OnTerminal call left for a later try",
	"notify/gone":               "the notice of a task purged before it went out dropped",
	"notify/gone-after-call":    "a delivered notice not recorded, the task having been purged while the hook ran",
	"notify/superseded":         "a delivered notice not recorded, the task having been retried meanwhile",
	"reconcile/restored":        "a missing marker restored by Reconcile",
	"reconcile/removed":         "a stale marker removed by Reconcile",
	"reconciler/taken":          "the reconciler lease taken over from another worker, or first written",
	"reconciler/renewed":        "the reconciler lease renewed by its holder",
	"reconciler/released":       "the reconciler lease handed back by a worker that stops",
	"reconciler/answer-lost":    "a reconciler lease write whose answer was lost, found to be the holder's own",
	"submit/adopt-upload":       "a Submit that copied a form's upload object to the input, create-only",
	"schedule/announced":        "a start moved, nearer or later, announced to idle workers",
	"wake/fallback":             "a Pause or Resume that kept losing its compare-and-set on the wake object, written blind as 'list now, paused types unknown'",
	"wake/batched":              "an announcement written by another call of the same Store, in one write with its own (group commit)",
	"wake/lost":                 "an announcement's compare-and-set on the wake object lost to another writer, tried again after a jittered wait",
	"wake/stale-copy":           "an announcement written over the Store's copy of the wake object, refused because another writer had changed it, read and written again",
	"wake/visit":                "a marker the wake object announced, visited directly, with no LIST",
	"stop/hurry":                "running handlers cancelled at once because a Stop's context ended",
	"clock/lower-edge":          "a server-clock estimate the Date headers ruled out moved to their lower edge",
}
