package sim

// Required lists the branches of the library (internal/probe.Branches)
// that a run of the simulation over many seeds must reach: a promise the
// simulation never puts to the test is one nobody checks. TestSimulation
// fails a run of 100 seeds or more that misses one. The branches left out
// are reached too rarely to require at that size (see the coverage report
// of a run); a soak reaches them.
var Required = []string{
	"event/visit",
	"event/record",
	"event/retry",
	"event/removed",
	"event/during-scan",
	"commit/landed-after-doubt",
	"commit/overtaken",
	"commit/not-landed",
	"lease/still-ours",
	"lease/deadline",
	"lease/lost",
	"lease/cancelled",
	"lease/release",
	"submit/adopt-upload",
	"poll/takeover",
	"poll/expired-final",
	"poll/unreadable",
	"poll/unserved",
	"poll/paused",
	"pause/refresh",
	"pause/read-record",
	"poll/stale-marker",
	"poll/next-head",
	"poll/next-page",
	"poll/claim-refused",
	"key/adopt",
	"key/takeover",
	"key/purged",
	"key/renew",
	"purge/key-held",
	"purge/tombstone",
	"ingest/source-gone",
	"ingest/moved-on",
	"apply/settle",
	"notify/retry",
	"notify/gone",
	"reconcile/restored",
	"reconcile/removed",
	"reconciler/taken",
	"reconciler/renewed",
	"reconciler/released",
	"schedule/announced",
	"stop/hurry",
	"clock/lower-edge",
}
