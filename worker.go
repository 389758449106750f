package s3task

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// Worker finds, claims and runs tasks. Run it in a goroutine of the host
// application; any number of workers on any number of machines can share a
// bucket. See the package documentation for how claims, leases, retries and
// shutdown work.
type Worker struct {
	store   *Store
	h       Handler
	work    Handler // h inside WorkerOptions.Middleware: what an attempt runs
	opts    WorkerOptions
	log     *slog.Logger
	notices *notifier

	running atomic.Bool
	slots   chan struct{} // one token per running task

	dueMu sync.Mutex
	due   time.Time     // server clock: a retry this worker scheduled falls due
	freed chan struct{} // pinged when a slot frees
	wg    sync.WaitGroup

	skip   map[string]time.Time // poll loop only: markers not to visit before a time (server clock)
	gone   goneTasks            // tasks found deleted
	spread int                  // poll loop only: how many of the markers due first to pick among, per free slot
	legacy bool                 // poll loop only: markers named as earlier versions did may be left

	wakeSeen map[string]bool // poll loop only: the wake object's announcements seen last
	pause    workerPause     // the paused task types as the worker knows them (see pause.go)

	noteMu    sync.Mutex
	notes     []ObjectEvent        // what Notify was told since the loop last took it
	notesLost bool                 // Notify dropped events: too many waited
	noted     chan struct{}        // pinged by Notify
	marked    map[string]noted     // poll loop only: markers named by events, to visit
	rivals    map[string]rival     // poll loop only: workers told of the same tasks (see fanout.go)
	met       int                  // poll loop only: how many of the rivals this worker met
	contended bool                 // poll loop only: another worker took a task this one went for, since learnFleet last listed
	fleetAt   time.Time            // poll loop only: when learnFleet last listed the presence objects, by the server's clock
	fleetGap  time.Duration        // poll loop only: how long after fleetAt learnFleet may list again
	passed    map[string]time.Time // poll loop only: markers of another worker's last task in the head, left to it since (see pick)
	racedAt   time.Time            // poll loop only: when another worker last took a task this one went for, by the server's clock
	rtt       time.Duration        // poll loop only: a record read's round trip, averaged

	kickMu    sync.Mutex
	kickETag  string        // the wake object's ETag as the latest local Submit left it
	kickNotes []wakeNote    // what local Submits announced since the loop last woke
	kickList  bool          // a kick without a marker (Wake, news without one): list
	kicked    chan struct{} // pinged by Wake and by local Submits

	stopMu sync.Mutex
	run    *runState // the current Run, nil when not running

	presence presence // what the presence object says; see presence.go

	claims context.Context // poll loop only: claims' parent; ends with Run, or when a Stop's ctx ends
}

// runState lets Stop reach a running Run.
type runState struct {
	cancel context.CancelFunc // ends the poll loop, as Run's ctx would
	hurry  chan struct{}      // closed by a Stop whose ctx ended: stop handlers now
	done   chan struct{}      // closed when Run returns
	once   sync.Once
}

// NewWorker returns a worker that runs h for the tasks of store. It makes no
// requests. It returns an error wrapping [ErrInvalidOptions] for a nil store
// or handler or an invalid option; the message names the field.
func NewWorker(store *Store, h Handler, opts *WorkerOptions) (*Worker, error) {
	if f, ok := h.(HandlerFunc); ok && f == nil {
		h = nil
	}
	if store == nil || h == nil {
		return nil, fmt.Errorf("%w: nil store or handler", ErrInvalidOptions)
	}
	o, err := opts.withDefaults(store.log)
	if err != nil {
		return nil, err
	}
	work, err := wrap(h, o.Middleware)
	if err != nil {
		return nil, err
	}
	w := &Worker{
		store:  store,
		h:      h,
		work:   work,
		opts:   o,
		log:    o.Logger.With("worker_id", o.ID),
		slots:  make(chan struct{}, o.Concurrency),
		freed:  make(chan struct{}, 1),
		skip:   map[string]time.Time{},
		legacy: true,
		spread: pickSpread,
		kicked: make(chan struct{}, 1),
		noted:  make(chan struct{}, 1),
		marked: map[string]noted{}, rivals: map[string]rival{},
	}
	w.notices = newNotifier(w)
	return w, nil
}

// backoff returns the wait before task id is retried after its attempt n
// failed: WorkerOptions.Backoff, or DefaultBackoff with the store's
// randomness.
func (w *Worker) backoff(id string, n int) time.Duration {
	if w.opts.Backoff != nil {
		return w.opts.Backoff(n)
	}
	return backoffFor(n, func(d time.Duration) time.Duration { return w.store.jitter("retry/"+id, d) })
}

// ID returns the worker's ID, as written in worker_id.
func (w *Worker) ID() string { return w.opts.ID }

// Wake makes a running worker look for work now instead of at its next
// check of the wake object, as if that had changed. Hosts that learn of new
// tasks by their own means (S3 event notifications through a queue they
// already run, a message from the producer) call it to start them within
// a round trip; Submit and Retry through the worker's own Store do so by
// themselves, and name the task, so that the worker visits it with no
// LIST. Wake costs the worker one LIST when it has a free slot, and
// nothing when called on a worker that is not running or while one is
// pending.
func (w *Worker) Wake() { w.kick("", wakeNote{}) }

// kick wakes the poll loop; etag, if not "", is the wake object's new ETag,
// written by a Submit of this process, so that the loop need not look at
// it again when it sees it, and note, if its key is not "", what the
// write announced: the loop visits the marker as if it had read the
// announcement (see wakeNews). A note without a key, or "*", makes it
// list.
func (w *Worker) kick(etag string, note wakeNote) {
	w.kickMu.Lock()
	if etag != "" {
		w.kickETag = etag
	}
	switch {
	case note.key == "" || note.key == "*" || len(w.kickNotes) >= wakeKeep:
		w.kickList = true
	default:
		w.kickNotes = append(w.kickNotes, note)
	}
	w.kickMu.Unlock()
	select {
	case w.kicked <- struct{}{}:
	default:
	}
}

// announced forgets, for the poll loop, that it left marker key alone: a
// change that has landed announced it (see wakeNews), so the next listing
// visits it, even if the task's notice is held here.
func (w *Worker) announced(key string) {
	delete(w.skip, key)
	w.notices.lift(key)
}

// takeKick returns the ETag left by the latest local kick, if any, what
// the kicks announced, and whether one asked for a listing.
func (w *Worker) takeKick() (string, []wakeNote, bool) {
	w.kickMu.Lock()
	defer w.kickMu.Unlock()
	etag, notes, list := w.kickETag, w.kickNotes, w.kickList
	w.kickETag, w.kickNotes, w.kickList = "", nil, false
	return etag, notes, list
}

// errAlreadyRunning is returned by a second concurrent Run.
var errAlreadyRunning = errors.New("s3task: worker is already running")

// Run polls for tasks and runs them until ctx is done or [Worker.Stop] is
// called, then shuts down gracefully: it claims nothing more, lets running
// handlers finish for up to ShutdownTimeout, then cancels their contexts
// with [ErrWorkerStopping]. Until a handler returns, its lease is kept
// alive; then its task goes back to the queue without using up an attempt
// (or completes, if the handler returned nil). Run returns nil once every
// handler has returned and its task is settled, and an OnTerminal call
// under way has returned (it gets a context that ends with ctx; notices
// still pending are left to other workers). Handlers and the hook must
// honour their context, or Run waits for them; [Worker.Stop] bounds the
// wait.
//
// While it runs, the worker announces itself in the bucket, for
// [Store.Workers] (see WorkerOptions.PresenceInterval); it deletes its
// presence object before it returns.
//
// Errors in one poll (S3 unreachable, a corrupt record) are logged and the
// loop goes on. Run returns an error only if the worker is already running.
func (w *Worker) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return errAlreadyRunning
	}
	defer w.running.Store(false)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rs := &runState{cancel: cancel, hurry: make(chan struct{}), done: make(chan struct{})}
	w.stopMu.Lock()
	w.run = rs
	w.stopMu.Unlock()
	defer func() {
		w.stopMu.Lock()
		w.run = nil
		w.stopMu.Unlock()
		close(rs.done)
	}()

	// Handlers run under base, which outlives ctx by the shutdown timeout.
	base, stop := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stop(nil)

	// A claim is not cut short by shutdown (see claim), but it is when a
	// Stop's ctx ends: the host wants out now.
	claims, cutClaims := context.WithCancel(base)
	defer cutClaims()
	go func() {
		select {
		case <-rs.hurry:
			cutClaims()
		case <-claims.Done():
		}
	}()
	w.claims = claims
	// The presence object: written now and every PresenceInterval apart
	// from the loop, and deleted once the handlers are settled.
	defer w.announce(ctx)()

	var notifying sync.WaitGroup
	notifying.Go(func() { w.notices.run(ctx) })
	notifying.Go(w.store.sweepSpool) // leftovers of killed processes; see StoreOptions.SpoolDir
	// Run returns once the notifier too is done: a hook that ignores its
	// context holds Run, though never the handlers' shutdown below.
	defer notifying.Wait()
	w.loop(ctx, base)

	done := make(chan struct{})
	go func() { w.wg.Wait(); close(done) }()
	grace := time.NewTimer(w.opts.ShutdownTimeout)
	defer grace.Stop()
	select {
	case <-done:
		return nil
	case <-grace.C:
		w.log.Info("s3task: shutdown timeout: stopping running handlers")
	case <-rs.hurry:
		w.store.reached("stop/hurry")
		w.log.Info("s3task: stop deadline: stopping running handlers")
	}
	stop(ErrWorkerStopping)
	<-done
	return nil
}

// Stop shuts a running worker down as cancelling Run's context does, and
// waits until Run has returned or ctx ends. If ctx ends first, Stop cancels
// the running handlers' contexts at once with [ErrWorkerStopping] (without
// waiting for the rest of ShutdownTimeout), gives up a claim under way, and
// returns ctx's error, even on an S3 that stopped answering; a
// handler that ignores its context keeps its task's lease alive until it
// returns, and its task then goes back to the queue. If the process exits
// before that, the task is recovered once its lease expires, and that
// attempt counts as used. Stop on a worker that is not running returns nil.
func (w *Worker) Stop(ctx context.Context) error {
	w.stopMu.Lock()
	rs := w.run
	w.stopMu.Unlock()
	if rs == nil {
		return nil
	}
	rs.cancel()
	select {
	case <-rs.done:
		return nil
	case <-ctx.Done():
		rs.once.Do(func() { close(rs.hurry) })
		return ctx.Err()
	}
}

// loop is the poll loop of Run. Listing the markers costs a LIST, the
// dearest kind of request, so an idle worker lists only when there is a
// reason to:
//   - the wake object changed (Submit, Retry and a released task write it),
//     which it checks with one conditional GET every PollInterval;
//   - a Submit or Retry through its own Store, or [Worker.Wake], kicked it;
//   - the first marker not yet due in its last listing fell due: a
//     scheduled start, a retry, another worker's lease running out;
//   - it had more work than free slots and a slot freed;
//   - MaxPollInterval passed since the last listing, as a safety net.
func (w *Worker) loop(ctx, base context.Context) {
	s := w.store
	s.local.add(w)
	defer s.local.remove(w)
	var (
		wakeETag string
		listNow  = true
		lastList time.Time // local clock
		due      time.Time // server clock; zero means none
	)
	// Read the wake object before the first listing, so that the first
	// check after it does not take the wake it already covers for news.
	// Every request of the loop has a deadline (requestTimeout), so a
	// stalled S3 costs a poll, never the loop.
	bctx, cancel := w.bounded(ctx)
	if etag, body, _, err := w.checkWake(bctx, ""); err == nil {
		wakeETag = etag
		w.wakeNews(body) // notes what was announced so far
	}
	cancel()
	rec := w.newReconciler()
	defer func() {
		// The lease goes back off the way of the shutdown: Run waits for
		// it as for a handler, which no Stop's deadline waits for.
		rec.wait()
		w.wg.Go(rec.release)
	}()
	kicked := func() {
		etag, notes, list := w.takeKick()
		if etag != "" {
			wakeETag = etag
		}
		listNow = w.told(notes, &due) || list || listNow
	}
	var (
		checkAt time.Time // local clock: when the wake object is next checked
		woke    bool      // by an event, or for a marker one named: no check of the wake object for it
	)
	for ctx.Err() == nil {
		rec.maybeRun(ctx)
		rec.maybePeriodic(ctx)
		if len(w.slots) == cap(w.slots) {
			// Every slot is busy: nothing to poll for until one frees, or
			// the reconciler has work.
			var tick <-chan time.Time
			var timer *time.Timer
			if d := rec.dueIn(); d > 0 {
				timer = time.NewTimer(d)
				tick = timer.C
			}
			u := w.await(ctx, tick, rec.took, w.freed)
			if timer != nil {
				timer.Stop()
			}
			if u.kicked {
				kicked()
			}
			if u.noted && ctx.Err() == nil { // see below
				listNow, woke = w.takeNotes() || listNow, true
			}
			continue
		}
		w.notePoll()
		if len(w.marked) > 0 {
			if failed := w.visitNoted(ctx, base); failed {
				due = sooner(due, s.serverNow().Add(w.opts.PollInterval))
			}
			if len(w.slots) == cap(w.slots) {
				continue
			}
		}
		due = sooner(due, w.takeDue())
		checked := false // the wake object, in this round
		if !listNow {
			switch {
			case time.Since(lastList) >= w.opts.MaxPollInterval:
				listNow = true
			case !due.IsZero() && !s.serverNow().Before(due):
				listNow = true
			case woke:
				// Woken by an event, or for a marker one named: the wake
				// object waits for its time.
			default:
				checked = true
				bctx, cancel := w.bounded(ctx)
				etag, body, changed, err := w.checkWake(bctx, wakeETag)
				if err != nil && ctx.Err() == nil {
					w.log.Warn("s3task: poll", "err", err)
				}
				wakeETag = etag
				if changed {
					var later time.Time
					listNow, later = w.wakeNews(body)
					due = sooner(due, later)
				}
				cancel()
			}
		}
		listNow = w.beforeList(ctx, listNow, checked)
		if listNow {
			var saturated bool
			saturated, due = w.poll(ctx, base, due)
			lastList, listNow = time.Now(), saturated
			if saturated {
				continue // poll again as soon as a slot frees
			}
		}
		var wait time.Duration
		if woke && time.Now().Before(checkAt) {
			wait = time.Until(checkAt) // as planned before the event
		} else {
			// Jitter only shortens the wait, so pickup stays within
			// PollInterval.
			wait = w.opts.PollInterval*3/4 + s.jitter("poll", w.opts.PollInterval/4)
			checkAt = time.Now().Add(wait)
		}
		woke = false
		visitAt := w.nextNoted() // the poll may have taken events
		if at := sooner(sooner(due, visitAt), rec.nextPeriodic(s.serverNow())); !at.IsZero() {
			// The server's clock as read here is whole milliseconds: wait
			// at least one, or a due time within it would spin the loop.
			wait = max(min(wait, at.Sub(s.serverClock())), time.Millisecond)
		}
		timer := time.NewTimer(wait)
		u := w.await(ctx, timer.C, rec.took, nil)
		timer.Stop()
		if u.timer {
			woke = !visitAt.IsZero() && !s.serverNow().Before(visitAt)
		}
		if u.kicked {
			kicked()
		}
		// Not once Run is ending: what the notes would start is not
		// started anyway.
		if u.noted && ctx.Err() == nil {
			listNow, woke = w.takeNotes() || listNow, true
		}
	}
}

// wakeups are what woke the poll loop.
type wakeups struct{ timer, took, freed, kicked, noted bool }

// await waits until ctx ends or the loop is woken: by timer, by took (the
// reconciler lease newly held), by freed (a slot given back; nil when the
// loop is not waiting for one), by a kick or by a note. It returns every
// wake-up that is ready, not only the first: when several are ready at
// once select picks one at random, and the loop, which handles them in
// one order, must not depend on the pick (a simulated seed replays
// exactly).
func (w *Worker) await(ctx context.Context, timer <-chan time.Time, took, freed <-chan struct{}) (u wakeups) {
	select {
	case <-ctx.Done():
	case <-timer:
		u.timer = true
	case <-took:
		u.took = true
	case <-freed:
		u.freed = true
	case <-w.kicked:
		u.kicked = true
	case <-w.noted:
		u.noted = true
	}
	ready := func(c <-chan struct{}) bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	}
	if !u.timer {
		select {
		case <-timer:
			u.timer = true
		default:
		}
	}
	u.took = u.took || ready(took)
	u.freed = u.freed || ready(freed)
	u.kicked = u.kicked || ready(w.kicked)
	u.noted = u.noted || ready(w.noted)
	return u
}

// freeSlot gives back the slot of a settled attempt.
func (w *Worker) freeSlot() {
	<-w.slots
	select {
	case w.freed <- struct{}{}:
	default:
	}
}

// noteDue tells the poll loop that a task will need a worker at t (server
// clock): a retry this worker scheduled, which no wake object announces.
func (w *Worker) noteDue(t time.Time) {
	w.dueMu.Lock()
	if w.due.IsZero() || t.Before(w.due) {
		w.due = t
	}
	w.dueMu.Unlock()
}

// sooner returns the earlier of two times, a zero one meaning none.
func sooner(a, b time.Time) time.Time {
	if a.IsZero() || !b.IsZero() && b.Before(a) {
		return b
	}
	return a
}

func (w *Worker) takeDue() time.Time {
	w.dueMu.Lock()
	defer w.dueMu.Unlock()
	t := w.due
	w.due = time.Time{}
	return t
}

// RunTask claims the task id now and runs the worker's handler on it, then
// returns the record as the attempt left it: completed, failed (with or
// without a retry to come), or queued again if the attempt was given back.
// It takes one of the worker's Concurrency slots, waiting for one if Run
// holds them all, and works whether or not Run is running; it reads the
// task once it has the slot, so a Pause, a Cancel or another worker's
// claim made while it waited is honoured, and the lease starts then. The attempt is
// held, renewed and settled as one Run starts; only the finding differs.
// Use it to run a task on demand, and in tests (package s3tasktest does).
//
// Requests: one GET to read the task, a conditional GET of the wake object
// unless the worker read it less than PollInterval ago (to learn whether
// the task's type is paused; always, before it refuses a paused type), then
// the claim's and the attempt's own, and one GET to return the record.
//
// Errors: [ErrInvalidID]; [ErrNotFound]; [ErrUnknownTaskType] if the
// worker's handler does not serve the task's type; a *[TransitionError]
// if the task is not due (created, scheduled, waiting for a retry,
// running under a live lease, or finished); [ErrTypePaused] if its type
// is paused ([Store.Pause]); [ErrConflict] if another writer changed it
// first; ctx's error while it waits for a slot.
func (w *Worker) RunTask(ctx context.Context, id string) (*Task, error) {
	if err := ParseID(id); err != nil {
		return nil, err
	}
	// The slot first: what the task is, whether its type is paused and
	// when the claim's lease ends are decided once it may run at once.
	select {
	case w.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	got, gotETag, err := w.claimNamed(ctx, id)
	if err != nil {
		<-w.slots
		return nil, err
	}
	<-w.begin(ctx, got, gotETag)
	gctx, cancel := w.bounded(context.WithoutCancel(ctx))
	defer cancel()
	t, _, err := w.store.read(gctx, id) // the worker's own read: no StoreMiddleware
	return t.task(), err
}

// claimNamed reads task id and claims it for RunTask, holding a slot.
func (w *Worker) claimNamed(ctx context.Context, id string) (*record, string, error) {
	s := w.store
	t, etag, err := s.read(ctx, id)
	if err != nil {
		return nil, "", err
	}
	if !serves(w.h, t.Type) {
		return nil, "", fmt.Errorf("%w %q: task %s", ErrUnknownTaskType, t.Type, id)
	}
	cur := t
	next, _, err := transition(t, w.claimEvent(), s.serverNow())
	if t.Status == StatusRunning {
		// Take over an expired lease as a poll would.
		cur, _, err = transition(t, event{kind: evLeaseExpired}, s.serverNow().Add(-w.opts.ClockMargin))
		if err == nil {
			next, _, err = transition(cur, w.claimEvent(), s.serverNow())
		}
	}
	if err != nil {
		return nil, "", err
	}
	if err := w.refusePaused(ctx, t); err != nil {
		return nil, "", err
	}
	got, gotETag, err := s.commitMarked(ctx, t, etag, next)
	if errors.Is(err, errLost) || errors.Is(err, errOvertaken) {
		err = fmt.Errorf("%w: task %s changed while it was claimed", ErrConflict, id)
	}
	return got, gotETag, err
}

// requestTimeout bounds each S3 request of the poll loop (wake object
// checks, listings, record reads, marker deletes), of the notifier's
// record reads, and the response headers of the input's GET: a third of a
// lease (HeartbeatInterval), and at least PollInterval and one second. A
// request not answered by then is given up, and tried again at the next
// poll, so an S3 that stops answering never wedges the worker.
func (w *Worker) requestTimeout() time.Duration {
	return max(w.opts.HeartbeatInterval, w.opts.PollInterval, time.Second)
}

// bounded returns ctx with the deadline of one request; see requestTimeout.
func (w *Worker) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, w.requestTimeout())
}

// notifyIfPending hands the task, just made terminal by this worker (its
// marker already gone unless a notice is due), to the notifier if its
// OnTerminal notice is pending.
func (w *Worker) notifyIfPending(t *record, etag string) {
	if t.NotifyPending {
		w.notices.add(t, etag)
	}
}

func (w *Worker) hookFail(t *Task, err error) {
	w.hook("OnFail", func(h *Hooks) {
		if h.OnFail != nil {
			h.OnFail(t.clone(), err)
		}
	})
}

// hook calls one of the Hooks, named name, recovering a panic in it: a
// broken metrics callback must not take the worker down.
func (w *Worker) hook(name string, call func(h *Hooks)) {
	defer func() {
		if r := recover(); r != nil {
			w.log.Error("s3task: hook panicked", "hook", name, "panic", r, "stack", string(debug.Stack()))
		}
	}()
	call(&w.opts.Hooks)
}
