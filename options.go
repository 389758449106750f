package s3task

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	mrand "math/rand/v2"
	"mime"
	"os"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Store defaults. A zero field in [StoreOptions] means the default.
const (
	DefaultPrefix          = "batch-tasks/"
	DefaultMaxAttempts     = 3
	DefaultMaxInputSize    = 100 << 20 // 100 MiB
	DefaultMaxPayloadSize  = 64 << 10  // 64 KiB
	DefaultListConcurrency = 8
	DefaultConflictRetries = 5
	DefaultListLimit       = 50
	MaxListLimit           = 1000
)

// StoreOptions configures a [Store]. A nil *StoreOptions, and every zero
// field, means the documented default. NewStore copies the struct; changing it
// afterwards has no effect.
type StoreOptions struct {
	// Prefix is where tasks live in the bucket. It must end in "/" and must
	// not start with one. Default [DefaultPrefix].
	Prefix string

	// InputExt and OutputExt are appended to the input and output object
	// names, e.g. ".csv" gives input.csv and output-attempt-1.csv. They may
	// hold letters, digits, '.', '-' and '_'. Default: none. A task type
	// with an entry in Files takes the entry's instead.
	InputExt  string
	OutputExt string // see InputExt

	// Files gives task types file names and an upload type of their own: a
	// task whose type is a key here takes the entry's extensions and input
	// Content-Type instead of the Store's InputExt, OutputExt and
	// InputContentType, an empty field meaning none (not the Store's). The
	// key "" stands for untyped tasks. So one Store and one Worker serve
	// image tasks (input.png, output-attempt-1.webp) beside CSV tasks
	// (input.csv). A task's input key is fixed when it is created, in
	// Task.InputPath, and its output's when it completes, in
	// Task.OutputPath: a Store with other Files (an operator's tool, the
	// next release) finds both from the record, which it trusts only for
	// an input or an output in the task's own folder with a valid
	// extension. Default: none, every type takes the Store's.
	Files map[string]FileOptions

	// MaxAttempts is the number of attempts a new task gets when
	// CreateParams.MaxAttempts is zero. Default [DefaultMaxAttempts].
	MaxAttempts int

	// MaxInputSize is the largest input Submit accepts, in bytes. It also caps
	// presigned POST uploads and what a worker will read. Default
	// [DefaultMaxInputSize].
	MaxInputSize int64

	// MaxPayloadSize caps CreateParams.Payload, in bytes. Default
	// [DefaultMaxPayloadSize].
	MaxPayloadSize int

	// ListConcurrency bounds the record reads one List page runs at once.
	// Default [DefaultListConcurrency].
	ListConcurrency int

	// ConflictRetries is how many times an operator call (Submit, Retry,
	// Cancel) re-reads and re-decides after losing a compare-and-set before
	// it returns [ErrConflict]. Default [DefaultConflictRetries].
	ConflictRetries int

	// AbandonCreatedAfter is how long a created task may wait for its input
	// to be submitted. Older ones are abandoned, with a cancel_reason that
	// says so, by [Store.Reconcile] and so by the fleet's reconciler
	// (WorkerOptions.ReconcileInterval); [Stats] counts them. Zero means
	// [DefaultAbandonCreatedAfter]; negative means never.
	AbandonCreatedAfter time.Duration

	// SpoolDir is the folder of the temporary files the library makes: the
	// output a handler writes through [Job.CreateOutput], and a copy of a
	// reader that cannot seek given to [Job.WriteOutput] or
	// [Store.UploadInput]. Their names start with "s3task-". Where the system
	// allows it (Linux, macOS and other Unix systems), each is unlinked right
	// after it is created and lives on only through its open descriptor, so
	// nothing is left behind, even by a process that is killed; elsewhere it
	// is removed when it is closed. A [Worker] that starts running removes
	// the s3task-* files in it older than an hour ([SpoolStaleAfter]), left
	// where unlinking is not possible or by earlier versions. NewStore checks
	// that it exists and is a folder (one stat, no request). Default:
	// os.TempDir(), as it is when a file is made.
	SpoolDir string

	// InputContentType, if set, pins the Content-Type of an input uploaded
	// through a presigned URL: it is signed into the presigned PUT (the
	// client must send the header as given in PresignedRequest.Header) and
	// made a condition of the POST form's policy (PresignedForm.Fields holds
	// the Content-Type field, which the client sends like every other), so
	// a store that checks signatures and policies refuses an upload with
	// another type. [Store.UploadInput] stores the input with it too. It
	// must be a valid media type, e.g. "text/csv". Default: not pinned.
	InputContentType string

	// Types, if set, are the task types the fleet serves: Create refuses
	// any other (CreateParams.Type, or the type its Args name) with an error
	// wrapping both [ErrInvalidArgument] and [ErrUnknownTaskType], so a
	// misspelt type fails at once instead of waiting in the queue for a
	// worker that never comes. The empty type counts like any other: list ""
	// for a fleet whose handler serves untyped tasks too. Give it the
	// workers' Mux's types ([Mux.Types]). Ingest is refused too. Default:
	// every type is accepted, as a fleet with a handler for every type
	// needs.
	Types []string

	// Clock returns the local time. The library corrects it by the offset it
	// observes from the S3 server's Date headers, so leases are judged by the
	// server's clock. Default time.Now. Meant for tests.
	Clock func() time.Time

	// Logger receives the library's logs. Default: slog.Default().
	Logger *slog.Logger

	// Periodic declares the tasks the fleet makes on a schedule (see
	// [Periodic]). The Workers on this Store make their runs, one worker
	// at a time: the holder of the fleet's reconciler lease, which a
	// Worker with Periodic declared asks for as soon as it starts. Give
	// the API's Store the same list, so that it can show them. Each
	// Periodic's type must be declared without input (Files[type].NoInput)
	// and, if Types is set, be one of them; names are unique.
	Periodic []Periodic

	// Middleware wraps the Store's calls, outermost first: those that
	// create or change a task, those that read one (Get, the presigned
	// URLs, OpenOutput), the listings, Stats and Workers, and pausing and
	// resuming a task type; [Op] lists them, and [StoreMiddleware] says how
	// they pass.
	Middleware []StoreMiddleware

	// OnTerminal, if set, is called once a task is finished (completed,
	// abandoned, or failed with no retry left), so the host can call a
	// webhook or send a message instead of making clients poll. Delivery is
	// at least once: the process that finished the task calls it right after
	// its write (a worker, or the Store whose Cancel it was); if that process
	// dies first, or the hook returns an error, a worker that has the hook
	// calls it when it next lists the task's marker, which stays until a
	// call succeeds. A worker calls the hook on a goroutine of its own, one
	// notice at a time, retrying a failed one after 5 seconds, doubling up
	// to 10 minutes, so a slow or failing hook delays no claim; a panic in
	// it counts as a failure. A notice left to the workers waits its turn
	// in the queue: a fleet whose slots are all busy lists no markers. A
	// task retried before its notice went out is not notified for the
	// failure; one that failed for good and is then cancelled is notified
	// again, as abandoned. Duplicates are possible: key the receiver on
	// the task ID and status. Set the same hook on every Store sharing the
	// bucket; a worker without it leaves pending notices to one with it. The
	// hook gets a copy of the record and should return quickly.
	OnTerminal func(ctx context.Context, t *Task) error
}

// FileOptions are the file names and upload type of one task type's tasks;
// see StoreOptions.Files.
type FileOptions struct {
	InputExt         string // as StoreOptions.InputExt: "" means none
	OutputExt        string // as StoreOptions.OutputExt: "" means none
	InputContentType string // as StoreOptions.InputContentType: "" means not pinned
	// NoInput declares that the type's tasks take no input, as a nightly
	// export from a database does: [Store.Enqueue] queues one without
	// any, Submit checks none, an upload is refused (a *TransitionError),
	// and the handler's [Job.OpenInput] returns [ErrNoInput]. It is
	// recorded in each task as it is created (Task.NoInput).
	NoInput bool
}

// validExt reports whether ext may end an input or output object's name:
// letters, digits, '.', '-' and '_', at most 32.
func validExt(ext string) bool {
	return len(ext) <= 32 && strings.Trim(ext, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_") == ""
}

// validContentType reports whether ct may be pinned as an input's
// Content-Type: empty, or a media type of at most 256 bytes.
func validContentType(ct string) bool {
	if ct == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	typ, sub, _ := strings.Cut(mt, "/")
	return err == nil && typ != "" && sub != "" && !strings.ContainsAny(ct, "\r\n") && len(ct) <= 256
}

// withDefaults returns a validated copy with every default filled in.
func (o *StoreOptions) withDefaults() (StoreOptions, error) {
	var c StoreOptions
	if o != nil {
		c = *o
	}
	bad := func(field, format string, args ...any) (StoreOptions, error) {
		return StoreOptions{}, fmt.Errorf("%w: StoreOptions.%s %s", ErrInvalidOptions, field, fmt.Sprintf(format, args...))
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if !strings.HasSuffix(c.Prefix, "/") || strings.HasPrefix(c.Prefix, "/") || strings.Contains(c.Prefix, "//") {
		return bad("Prefix", "%q must end in '/' and not start with it or contain '//'", c.Prefix)
	}
	for name, ext := range map[string]string{"InputExt": c.InputExt, "OutputExt": c.OutputExt} {
		if !validExt(ext) {
			return bad(name, "%q may hold only letters, digits, '.', '-' and '_' (at most 32)", ext)
		}
	}
	ints := []struct {
		name string
		v    *int
		def  int
	}{
		{"MaxAttempts", &c.MaxAttempts, DefaultMaxAttempts},
		{"MaxPayloadSize", &c.MaxPayloadSize, DefaultMaxPayloadSize},
		{"ListConcurrency", &c.ListConcurrency, DefaultListConcurrency},
		{"ConflictRetries", &c.ConflictRetries, DefaultConflictRetries},
	}
	for _, f := range ints {
		if *f.v < 0 {
			return bad(f.name, "is %d, must not be negative", *f.v)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if c.MaxPayloadSize > maxRecordSize/2 {
		return bad("MaxPayloadSize", "is %d, at most %d", c.MaxPayloadSize, maxRecordSize/2)
	}
	switch {
	case c.MaxInputSize < 0:
		return bad("MaxInputSize", "is %d, must not be negative", c.MaxInputSize)
	case c.MaxInputSize == 0:
		c.MaxInputSize = DefaultMaxInputSize
	}
	if c.SpoolDir != "" {
		fi, err := os.Stat(c.SpoolDir)
		switch {
		case err != nil:
			return bad("SpoolDir", "%q: %v", c.SpoolDir, err)
		case !fi.IsDir():
			return bad("SpoolDir", "%q is not a folder", c.SpoolDir)
		}
	}
	if !validContentType(c.InputContentType) {
		return bad("InputContentType", "%q is not a media type such as text/csv", c.InputContentType)
	}
	for typ, f := range c.Files {
		what := fmt.Sprintf("Files[%q]", truncate(typ, 64))
		switch {
		case len(typ) > maxTypeLen || !utf8.ValidString(typ):
			return bad("Files", "key %q must be at most %d bytes of UTF-8", truncate(typ, 64), maxTypeLen)
		case !validExt(f.InputExt):
			return bad(what+".InputExt", "%q may hold only letters, digits, '.', '-' and '_' (at most 32)", f.InputExt)
		case !validExt(f.OutputExt):
			return bad(what+".OutputExt", "%q may hold only letters, digits, '.', '-' and '_' (at most 32)", f.OutputExt)
		case !validContentType(f.InputContentType):
			return bad(what+".InputContentType", "%q is not a media type such as image/png", f.InputContentType)
		}
	}
	c.Files = maps.Clone(c.Files)
	for i, typ := range c.Types {
		if len(typ) > maxTypeLen || !utf8.ValidString(typ) {
			return bad("Types", "[%d] must be at most %d bytes of UTF-8", i, maxTypeLen)
		}
	}
	c.Types = slices.Clone(c.Types)
	names := map[string]bool{}
	c.Periodic = slices.Clone(c.Periodic)
	for i := range c.Periodic {
		p := &c.Periodic[i]
		if err := p.validate(); err != nil {
			return bad("Periodic", "[%d]: %v", i, err)
		}
		if err := p.Params.typeFromArgs(); err != nil {
			return bad("Periodic", "[%d]: %v", i, err)
		}
		if names[p.Name] {
			return bad("Periodic", "[%d]: a second periodic task named %q", i, p.Name)
		}
		names[p.Name] = true
		if !c.Files[p.Params.Type].NoInput {
			return bad("Periodic", "[%d]: type %q is not declared without input (Files[%q].NoInput): a run has no file", i, p.Params.Type, p.Params.Type)
		}
		if c.Types != nil && !slices.Contains(c.Types, p.Params.Type) {
			return bad("Periodic", "[%d]: type %q is not one of Types", i, p.Params.Type)
		}
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// Worker defaults. A zero field in [WorkerOptions] means the default.
const (
	DefaultConcurrency       = 1
	DefaultPollInterval      = 2 * time.Second
	DefaultMaxPollInterval   = 60 * time.Second
	DefaultLeaseDuration     = 60 * time.Second
	DefaultClockMargin       = 5 * time.Second
	DefaultShutdownTimeout   = 30 * time.Second
	DefaultReconcileInterval = time.Hour
	DefaultReconcileWindow   = 24 * time.Hour
	DefaultPresenceInterval  = 2 * time.Minute
)

// WorkerOptions configures a [Worker]. A nil *WorkerOptions, and every zero
// field, means the documented default. NewWorker copies the struct.
type WorkerOptions struct {
	// ID names the worker in task records (worker_id) and logs. Default:
	// host name, process ID and a random suffix, e.g. "web-3.4121.9f2c".
	// Give each running worker an ID of its own: workers that share one
	// share a presence object (the first to stop removes it while the
	// other runs) and the reconciler lease (both reconcile), and task
	// histories cannot tell them apart.
	ID string

	// Concurrency is how many tasks the worker runs at once. Default
	// [DefaultConcurrency].
	Concurrency int

	// PollInterval is how soon a worker notices new work. An idle worker
	// checks the wake object, which Submit and Retry touch, once per
	// interval (one conditional GET), and lists the markers only when it
	// changed. Each wait is shortened by up to 25% at random so workers drift
	// apart. Default [DefaultPollInterval]. A worker fed S3 event
	// notifications ([Worker.Notify]) learns of new work from them, and
	// can poll every few minutes: an event it is told of does not count
	// as a check, nor does it move the next one.
	PollInterval time.Duration

	// MaxPollInterval is the longest a worker goes without listing the
	// markers, whatever the wake object says: the safety net for a lost wake
	// write or a marker repaired by hand. Retries falling due and other
	// workers' expiring leases are listed for when they come, without
	// waiting for it. It must be at least PollInterval. Default
	// [DefaultMaxPollInterval].
	MaxPollInterval time.Duration

	// LeaseDuration is how long a claim or a heartbeat keeps the task the
	// worker's. Default [DefaultLeaseDuration].
	LeaseDuration time.Duration

	// HeartbeatInterval is the time between lease renewals, which also carry
	// progress. It must be at most a third of LeaseDuration, so two
	// heartbeats can fail before the lease runs out. Default LeaseDuration/3.
	HeartbeatInterval time.Duration

	// ClockMargin is how long after a lease's end, by the S3 server's clock,
	// another worker waits before taking the task over. It absorbs the
	// one-second resolution of Date headers and network delay. It must be
	// less than LeaseDuration. A holder trusts its lease for LeaseDuration
	// less ClockMargin, less up to a second by which Date headers leave the
	// server's clock unsure; keep that at least two HeartbeatIntervals (a
	// shorter trust is renewed at a quarter of the time left at the least,
	// more often than the interval). Default [DefaultClockMargin].
	ClockMargin time.Duration

	// Backoff returns the wait before retrying after attempt n (from 1)
	// failed. Default [DefaultBackoff]. A handler can ask for a specific wait
	// with [RetryAfter].
	Backoff func(attempt int) time.Duration

	// ShutdownTimeout is how long Run, once its context is done, lets
	// running handlers finish before it cancels them with
	// [ErrWorkerStopping] and puts their tasks back in the queue. Default
	// [DefaultShutdownTimeout].
	ShutdownTimeout time.Duration

	// ReleaseLimit is how many attempts of a task in a row workers may give
	// back unfinished (on shutdown: see ShutdownTimeout). The give-back
	// past it fails the task for good instead, with error_category
	// [CategoryTimeout] and a last_error that says so, and that attempt
	// counts against MaxAttempts. An attempt that ended otherwise
	// (completed, failed, its lease expired) starts the count again, and
	// so does [Store.Retry] of the failed task. The count is read from
	// the task's attempt history ([Task.History]), so the limit is at
	// most [HistoryLimit]-1, the most earlier attempts the history keeps
	// beside the running one. Without a limit (zero or negative, the
	// default), a graceful shutdown never fails a task, and a task that
	// always needs longer than its workers stay up (a function's timeout:
	// see package s3tasklambda, which sets a limit) is started and given
	// back forever. With one, a fleet restarted that many times in a row
	// while a task runs fails the task too.
	ReleaseLimit int

	// ReconcileInterval is how often the worker runs [Store.Reconcile] over
	// the tasks of the last ReconcileWindow, so a lost marker heals without
	// an operator. The first run comes at a random point of the first
	// interval, so workers started together spread out. Negative disables
	// it. Default [DefaultReconcileInterval].
	ReconcileInterval time.Duration

	// ReconcileWindow is how far back the worker's own reconcile looks.
	// Default [DefaultReconcileWindow].
	ReconcileWindow time.Duration

	// PresenceInterval is how often the worker rewrites its presence
	// object, the small JSON object under <prefix>_workers/ through which
	// [Store.Workers] lists it: its ID, host, concurrency, the task types it
	// claims, the tasks it holds and when it last polled. It is written
	// as the poll loop first looks for work (within a PollInterval of
	// Run's start), and every interval while Run runs, and deleted when
	// Run returns, once its tasks are settled. What it says is as old as
	// its last write: up to an interval. Store.Workers calls the
	// worker live while its object was written within two intervals plus
	// ClockMargin, by the S3 server's clock; the fleet's reconciler deletes
	// the object of a worker that died without returning from Run once it
	// has gone unwritten for [PresenceStaleAfter]. Each write is one PUT
	// (at the default, 21,900 a month: $0.11 at S3 Standard prices), sent
	// apart from the poll loop with a request deadline of its own, so a
	// write that fails or hangs is logged and delays nothing else. Workers
	// that meet one another in the head of the marker folder (more tasks
	// due than free slots, a task taken by another) list the folder to
	// learn who else polls it, and then each take tasks of their own
	// rather than race: one LIST at the first such poll, then at most
	// once a minute while contention lasts. Negative turns presence off:
	// no request, the worker is not in Store.Workers, and it races its
	// fleet at random as before. At most [MaxPresenceInterval]. Default
	// [DefaultPresenceInterval], or MaxPollInterval if that is longer (up
	// to MaxPresenceInterval): a worker told to list rarely, as one fed S3
	// events is, announces itself as rarely, and presence never adds more
	// requests than its safety-net listings.
	PresenceInterval time.Duration

	// Logger receives the worker's logs, with task_id, attempt and worker_id
	// attributes. Default: the Store's logger.
	Logger *slog.Logger

	// Hooks observe what the worker does.
	Hooks Hooks

	// Middleware wraps the handler of every attempt, outermost first. See
	// [Middleware].
	Middleware []Middleware
}

// Hooks are optional callbacks that observe a worker, e.g. to feed metrics.
// They run synchronously on the worker's goroutines, possibly several at
// once: keep them fast and safe for concurrent use. A panic in a hook is
// recovered and logged. The *Task they get is a
// copy of the record as written.
type Hooks struct {
	// OnClaim runs after the worker claimed a task, before its handler
	// starts, on the goroutine that made the claim (the poll loop's, or
	// that of Worker.RunTask's caller): so a poll's claims come before its
	// OnPoll.
	OnClaim func(t *Task)
	// OnComplete runs after a task's completed record is written.
	OnComplete func(t *Task)
	// OnFail runs after a failed record is written; t.Terminal() tells
	// whether a retry is scheduled. err is what the handler returned, or,
	// for a task failed by a give-back past WorkerOptions.ReleaseLimit, a
	// permanent error of category [CategoryTimeout].
	OnFail func(t *Task, err error)
	// OnLeaseLost runs when the worker stops holding a task before its handler
	// returned: cause is [ErrTaskCanceled] or [ErrLeaseLost]. t is the record
	// as last read, or nil if it could not be read.
	OnLeaseLost func(taskID string, t *Task, cause error)
	// OnRelease runs after a task interrupted by shutdown went back to the
	// queue.
	OnRelease func(t *Task)
	// OnPoll runs after each listing of the markers: how many markers it
	// found and how many tasks it started.
	OnPoll func(p PollStats)
	// OnReconcile runs after each of the worker's own reconcile runs.
	OnReconcile func(r *ReconcileReport)
}

// PollStats describes one listing of the markers by a worker.
type PollStats struct {
	Markers int           // markers listed
	Started int           // tasks claimed and started
	Took    time.Duration // from the LIST to the last visit
}

func (o *WorkerOptions) withDefaults(storeLog *slog.Logger) (WorkerOptions, error) {
	var c WorkerOptions
	if o != nil {
		c = *o
	}
	bad := func(format string, args ...any) (WorkerOptions, error) {
		return WorkerOptions{}, fmt.Errorf("%w: WorkerOptions.%s", ErrInvalidOptions, fmt.Sprintf(format, args...))
	}
	durations := []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"PollInterval", &c.PollInterval, DefaultPollInterval},
		{"MaxPollInterval", &c.MaxPollInterval, max(DefaultMaxPollInterval, c.PollInterval)},
		{"LeaseDuration", &c.LeaseDuration, DefaultLeaseDuration},
		{"HeartbeatInterval", &c.HeartbeatInterval, 0}, // LeaseDuration/3, set below
		{"ClockMargin", &c.ClockMargin, DefaultClockMargin},
		{"ShutdownTimeout", &c.ShutdownTimeout, DefaultShutdownTimeout},
		{"ReconcileWindow", &c.ReconcileWindow, DefaultReconcileWindow},
	}
	for _, d := range durations {
		if *d.v < 0 {
			return bad("%s is %s, must not be negative", d.name, *d.v)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if c.ReconcileInterval == 0 {
		c.ReconcileInterval = DefaultReconcileInterval
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = c.LeaseDuration / 3
	}
	switch {
	case c.PresenceInterval == 0:
		c.PresenceInterval = min(max(DefaultPresenceInterval, c.MaxPollInterval), MaxPresenceInterval)
	case c.PresenceInterval > MaxPresenceInterval:
		return bad("PresenceInterval is %s, at most %s (negative turns presence off)", c.PresenceInterval, MaxPresenceInterval)
	}
	switch {
	case c.Concurrency < 0:
		return bad("Concurrency is %d, must not be negative", c.Concurrency)
	case c.Concurrency == 0:
		c.Concurrency = DefaultConcurrency
	}
	if c.MaxPollInterval < c.PollInterval {
		return bad("MaxPollInterval (%s) is shorter than PollInterval (%s)", c.MaxPollInterval, c.PollInterval)
	}
	if c.HeartbeatInterval > c.LeaseDuration/3 {
		return bad("HeartbeatInterval (%s) must be at most a third of LeaseDuration (%s)", c.HeartbeatInterval, c.LeaseDuration)
	}
	if c.ClockMargin >= c.LeaseDuration {
		return bad("ClockMargin (%s) must be shorter than LeaseDuration (%s)", c.ClockMargin, c.LeaseDuration)
	}
	switch {
	case c.ReleaseLimit > HistoryLimit-1:
		return bad("ReleaseLimit is %d, at most %d: the attempt history, which the count is read from, keeps %d attempts, the running one among them", c.ReleaseLimit, HistoryLimit-1, HistoryLimit)
	case c.ReleaseLimit < 0:
		c.ReleaseLimit = 0
	}
	if len(c.ID) > maxWorkerIDLen || !utf8.ValidString(c.ID) {
		return bad("ID must be at most %d bytes of UTF-8", maxWorkerIDLen)
	}
	if c.ID == "" {
		c.ID = defaultWorkerID()
	}
	if c.Logger == nil {
		c.Logger = storeLog
	}
	return c, nil
}

// defaultWorkerID returns "host.pid.random".
func defaultWorkerID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "worker"
	}
	return fmt.Sprintf("%s.%d.%s", host, os.Getpid(), newRevision()[:6])
}

// DefaultBackoff waits about 10s after the first failed attempt, doubling
// each time up to 10 minutes, with the second half of each wait random
// ("equal jitter"), so tasks that failed together do not retry together.
func DefaultBackoff(attempt int) time.Duration { return backoffFor(attempt, jitter) }

// backoffFor is DefaultBackoff with the jitter drawn from jitter.
func backoffFor(attempt int, jitter func(time.Duration) time.Duration) time.Duration {
	d := 10 * time.Second
	for i := 1; i < attempt && d < 10*time.Minute; i++ {
		d *= 2
	}
	d = min(d, 10*time.Minute)
	return d/2 + jitter(d/2)
}

// jitter returns a random duration in [0, d).
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(mrand.Int64N(int64(d)))
}

// jitter returns a random duration in [0, d) from the store's randomness;
// label names what it is for (see package internal/entropy).
func (s *Store) jitter(label string, d time.Duration) time.Duration {
	if d <= 0 || s.rnd == nil {
		return jitter(d)
	}
	return time.Duration(s.rnd.Int64N(label, int64(d)))
}

// shuffle shuffles n elements with swap, from the store's randomness.
func (s *Store) shuffle(label string, n int, swap func(i, j int)) {
	if s.rnd == nil {
		mrand.Shuffle(n, swap)
		return
	}
	s.rnd.Shuffle(label, n, swap)
}
