package s3task

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"
)

// poll reads the marker index from its head, where the markers due first
// are, and visits those due while a slot is free, a few at a time (pickSpread
// per free slot, more when it meets tasks others took), each few in random
// order, so that workers polling at once spread over the oldest tasks. When
// the visits of a few started nothing (records that cannot be read, tasks
// of types its handler does not serve, tasks others took), and none failed
// for a passing reason, it goes on with the next few, and with the next
// page once the page is done: so the markers of tasks it cannot run, which
// it then leaves alone for a while (unreadableRecheck, unservedRecheck),
// never hide a task behind them, however many there are; that task starts
// in the same poll. Each of them costs a GET once per recheck period. It
// stops at the page that started a task, or reached markers not yet due,
// or whose visits failed for a passing reason. It reports whether it ran
// out of slots with markers left to visit, and the earliest time, by the
// server's clock, at which a task it saw will need a worker (zero if
// none). A poll that started tasks from a page full of due markers reports
// itself saturated too: more are due behind that page.
//
// known is the earliest due time the worker knew of before. A poll whose
// listing fails lists again at the next poll (a PollInterval later), or
// at known if that comes sooner: what the worker learnt is kept, as a
// listing then sees it.
func (w *Worker) poll(ctx, base context.Context, known time.Time) (saturated bool, due time.Time) {
	s := w.store
	start, started, seen := time.Now(), 0, 0
	soonest := func(t time.Time) { due = sooner(due, t) }
	now := s.serverNow()
	if w.contended && w.present() && now.Sub(w.fleetAt) >= w.fleetGap {
		w.learnFleet(ctx)
	}
	for at, until := range w.skip {
		if !now.Before(until) {
			delete(w.skip, at)
		}
	}
	relist := false // events were dropped during the scan
	between := func() {
		listNow, failed := w.notesBetween(ctx, base)
		relist = relist || listNow
		if failed {
			soonest(s.serverNow().Add(w.opts.PollInterval))
		}
	}
	serve := func(todo []marker) (full, failed bool) {
		full, failed, n := w.serve(ctx, base, todo, soonest, between)
		started += n
		return full, failed
	}
	after, listed := "", false
	defer func() {
		saturated = saturated || relist
		if listed {
			w.hook("OnPoll", func(h *Hooks) {
				if h.OnPoll != nil {
					h.OnPoll(PollStats{Markers: seen, Started: started, Took: time.Since(start)})
				}
			})
		}
	}()
	for {
		lctx, cancel := w.bounded(ctx)
		ms, stray, more, err := s.listMarkers(lctx, after, w.pageSize())
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn("s3task: poll", "err", err)
			}
			// Listed again at the next poll, not at the next news: the
			// news that made this poll list (a wake, a due time) is
			// spent, and the safety net is a minute away. A due time
			// that has come is not kept, or an S3 that does not answer
			// would be listed at once, again and again.
			retry := s.serverNow().Add(w.opts.PollInterval)
			if d := sooner(due, known); d.After(now) && d.Before(retry) {
				return false, d
			}
			return false, retry
		}
		listed = true
		if !more && !slices.ContainsFunc(ms, func(m marker) bool { return m.due.IsZero() }) {
			// The folder's last page, and no marker of an earlier version
			// on it, where they sort: there are none to look for apart.
			w.legacy = false
		}
		for _, key := range stray {
			w.log.Warn("s3task: ignoring an object in the marker folder that is not a marker", "key", key)
		}
		seen += len(ms)
		var todo []marker
		ahead := false // the page reached markers not yet due
		for _, m := range ms {
			if m.due.After(w.soon(now)) {
				soonest(m.due.Add(s.dueLead())) // a start is judged by serverEarliest
				ahead = true
				break
			}
			if w.notices.holds(m) {
				continue // a finished task whose notice is on its way
			}
			if until, ok := w.skip[m.key]; ok {
				soonest(until)
				continue
			}
			todo = append(todo, m)
		}
		if w.fleetAt.IsZero() && len(todo) > cap(w.slots)-len(w.slots) && w.present() {
			// More due than this worker can take: if others poll the same
			// head, they had better know one another before they pick.
			w.learnFleet(ctx)
		}
		// A head at a time, in the order pick gives: going on in order
		// through a listing that others read too would have every worker
		// reach for the same markers. A head that started nothing gives
		// way to the next one, unless a visit failed for a passing reason
		// (S3 not answering), which the next ones would meet too.
		rest := todo
		for len(rest) > 0 && started == 0 && ctx.Err() == nil {
			head := min(len(rest), w.head())
			if head == 0 {
				return true, due // every slot taken (RunTask) with markers left
			}
			full, failed := serve(w.pick(rest[:head], now, soonest))
			if full {
				return true, due
			}
			rest = rest[head:]
			if failed {
				break
			}
			if len(rest) > 0 {
				s.reached("poll/next-head")
			}
		}
		if (len(rest) > 0 || more && !ahead) && started > 0 {
			// Due markers are left behind the head this poll worked
			// through while slots freed: list again now.
			return true, due
		}
		if ahead || !more || started > 0 || len(rest) > 0 {
			break // a page left to do (a visit failed) is done next time
		}
		after = max(lastKey(ms), lastString(stray))
		s.reached("poll/next-page")
	}
	if w.legacy && ctx.Err() == nil {
		// Markers named active/<id> by earlier versions sort after every
		// dated one (IDs start with a letter or a digit above 2), so the
		// head of the folder never reaches them: look for them apart
		// until none is left.
		lctx, cancel := w.bounded(ctx)
		ms, _, _, err := s.listMarkers(lctx, s.markerDir()+"3", markerPageSize)
		cancel()
		if err == nil {
			seen += len(ms)
			w.legacy = len(ms) > 0
			var todo []marker
			for _, m := range ms {
				if _, skip := w.skip[m.key]; m.due.IsZero() && !skip && !w.notices.holds(m) {
					todo = append(todo, m)
				}
			}
			if full, _ := serve(todo); full {
				return true, due
			}
		}
	}
	return false, due
}

// serve visits the markers of todo while a slot is free, noting in w.skip
// when to look again at those that started nothing, and passing every time
// a task will next need a worker to soonest. between, if not nil, runs
// before each visit. It reports whether the slots ran out first, whether a
// visit failed for a passing reason, and how many tasks it started.
func (w *Worker) serve(ctx, base context.Context, todo []marker, soonest func(time.Time), between func()) (full, failed bool, started int) {
	for _, m := range todo {
		if between != nil {
			between()
		}
		if ctx.Err() != nil {
			return false, failed, started
		}
		select {
		case w.slots <- struct{}{}:
		default:
			return true, failed, started
		}
		vctx, cancel := w.bounded(ctx) // the reads and deletes; a claim has its own deadline
		ok, when, taken, vfailed := w.visit(vctx, base, m)
		cancel()
		w.adapt(taken)
		if vfailed {
			// A read or a claim that failed for a passing reason is
			// tried again at the next poll, not at the next news.
			failed = true
			soonest(w.store.serverNow().Add(w.opts.PollInterval))
		}
		if ok {
			started++
			continue
		}
		<-w.slots
		if !when.IsZero() {
			w.skip[m.key] = when
			soonest(when)
		}
	}
	return false, failed, started
}

// maxGone is how many tasks found deleted a worker remembers. A task ID
// never names a new task once its record is deleted, so the memory only
// saves reads: of the markers a purge left behind, by the poll loop, and of
// the tasks the reconciler watches; forgetting costs a read each.
const maxGone = 1024

// goneTasks is a worker's memory of the tasks whose records it found
// deleted, shared by its poll loop, its notifier and its reconciler (walks
// included): the first to find a record gone tells the others, which need
// not read it again. Reads already under way are not held back, so each of
// the three may read a deleted record once (all three after a pause of the
// process woke them together). A nil *goneTasks remembers nothing.
type goneTasks struct {
	mu  sync.Mutex
	ids map[string]struct{}
}

// note remembers that task id's record was found deleted.
func (g *goneTasks) note(id string) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ids == nil || len(g.ids) >= maxGone {
		g.ids = map[string]struct{}{}
	}
	g.ids[id] = struct{}{}
}

// has reports whether task id's record was found deleted.
func (g *goneTasks) has(id string) bool {
	if g == nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	_, ok := g.ids[id]
	return ok
}

// visit reads the task behind marker m and does what it needs: claim it,
// recover it from an expired lease, or settle a finished one. It reports
// whether it started running the task; otherwise when the task will next
// need a worker (a retry falling due, a lease running out), if it knows,
// or when to look at it again (a record that cannot be read, a type not
// served); whether another worker had taken the task since the listing (or
// took it first), which tells the poll loop that workers crowd the head of
// the queue; and whether it failed for a passing reason (S3 did not
// answer). A marker of a phase that is over goes once the record is read,
// unless the change that ended it is so recent that its writer is still
// removing it; so does one of a task that no longer exists.
func (w *Worker) visit(ctx, base context.Context, m marker) (started bool, due time.Time, taken, failed bool) {
	s := w.store
	log := w.log.With("task_id", m.id)
	if w.gone.has(m.id) {
		// Another marker of a task already found deleted (a purge leaves
		// the markers of earlier phases that were never removed): it goes
		// without reading the record again.
		s.dropMarker(ctx, m.key)
		return false, due, false, false
	}
	read := time.Now()
	t, etag, err := s.read(ctx, m.id)
	if err == nil {
		w.noteRTT(time.Since(read))
	}
	var unreadable *RecordError
	switch {
	case errors.Is(err, ErrNotFound):
		log.Warn("s3task: marker without a task record; removing it", "key", m.key)
		s.dropMarker(ctx, m.key)
		w.forget(m.id)
		w.gone.note(m.id)
		return false, due, false, false
	case errors.As(err, &unreadable):
		// Corrupt, or of a newer schema: nothing to do with it until
		// someone mends it or a newer worker comes, so it is read again
		// only now and then, not at every poll.
		log.Warn("s3task: cannot read task; leaving it alone for a while", "err", err, "for", unreadableRecheck)
		s.reached("poll/unreadable")
		return false, s.serverNow().Add(unreadableRecheck + s.jitter("unreadable", unreadableRecheck/2)), false, false
	case err != nil:
		if ctx.Err() == nil {
			log.Warn("s3task: cannot read task; skipping it", "err", err)
		}
		return false, due, false, true
	}
	var stale []string
	now := s.serverNow()
	if m.key != s.MarkerKey(&t.Task) {
		switch {
		case m.event && (t.Terminal() || t.Status == StatusRunning):
			// An event named a marker of a phase that is over, or of a
			// change another worker's claim overtook: nothing to do, and
			// nothing to look at again. Its writer deletes it, or a
			// listing does; the task's own marker has events of its own.
			// Told of it while due, the claimer was told too: a rival.
			if m.rush && t.Status == StatusRunning {
				w.rivalSeen(t.WorkerID, true)
			}
			return false, due, false, false
		case staleMarker(m, t, now) && now.Sub(t.UpdatedAt) < cleanupGrace:
			// The change that ended this marker's phase was just made
			// (another worker claimed the task, and may have finished it
			// already); its writer deletes the marker itself. That worker
			// reads the same head of the folder: a rival.
			w.rivalSeen(t.WorkerID, false)
			return false, t.UpdatedAt.Add(cleanupGrace), true, false
		case staleMarker(m, t, now):
			s.reached("poll/stale-marker")
			stale = append(stale, m.key)
		default:
			// Newer than the record: a change under way (a submit, a
			// claim, a release, a retry) writes its marker first. Look
			// again soon, not when the record as it is now says (its
			// lease's end, say), and less often the longer it stays;
			// Reconcile removes a leftover.
			defer func() {
				if !started {
					due = now.Add(min(max(now.Sub(m.written), time.Second), time.Minute))
				}
			}()
		}
	}
	drop := func() {
		for _, key := range stale {
			s.dropMarker(ctx, key)
		}
	}
	switch {
	case t.Terminal():
		w.settle(ctx, t, etag, stale...)
		return false, due, false, false
	case !serves(w.h, t.Type):
		// Left for a worker that serves the type; a task's type never
		// changes, so this one looks again only now and then.
		s.reached("poll/unserved")
		drop()
		return false, now.Add(unservedRecheck), false, false
	case t.Status == StatusRunning:
		// The lease counts as expired only ClockMargin after its end by the
		// server's clock, so a live holder is never overtaken.
		expired, _, err := transition(t, event{kind: evLeaseExpired, notify: s.opts.OnTerminal != nil}, now.Add(-w.opts.ClockMargin))
		if err != nil {
			drop()
			// Expired means past the end by more than the margin.
			return false, t.LeaseExpiresAt.Add(w.opts.ClockMargin + time.Millisecond), len(stale) > 0, false
		}
		log.Info("s3task: recovering task from an expired lease", "attempt", t.Attempt, "holder", t.WorkerID)
		if expired.Status == StatusFailed { // no attempts left
			s.reached("poll/expired-final")
			got, gotETag, err := s.commitMarked(ctx, t, etag, expired, stale...)
			if err == nil {
				w.notifyIfPending(got, gotETag)
				w.hookFail(&got.Task, errors.New(got.LastError))
			}
			lost := errors.Is(err, errLost) || errors.Is(err, errOvertaken)
			return false, due, false, err != nil && !lost
		}
		next, _, err := transition(expired, w.claimEvent(), now)
		if err != nil {
			return false, due, false, false
		}
		if until, hold, failed := w.holdPaused(ctx, m.key, t); hold {
			drop()
			return false, until, false, failed
		}
		s.reached("poll/takeover")
		ok, lost := w.claim(ctx, base, m, t, etag, next, stale)
		return ok, due, lost, !ok && !lost
	}
	next, _, err := transition(t, w.claimEvent(), now)
	if err != nil {
		// Not due yet (a scheduled start, a retry): the state machine
		// decides, and the record says when it will be; or created, and
		// Submit's wake will bring us back. A start or a retry is judged
		// by serverEarliest, which lags now by up to dueLead.
		drop()
		if at := t.DueAt.Add(s.dueLead()); at.After(now) {
			return false, at, false, false
		}
		return false, due, false, false
	}
	if until, hold, failed := w.holdPaused(ctx, m.key, t); hold {
		drop()
		return false, until, false, failed
	}
	ok, lost := w.claim(ctx, base, m, t, etag, next, stale)
	return ok, due, lost, !ok && !lost
}

// unservedRecheck is how long a worker leaves the marker of a task whose
// type its handler does not serve before it reads the record again.
const unservedRecheck = 10 * time.Minute

// unreadableRecheck is how long a worker leaves the marker of a task whose
// record it cannot read (corrupt, or of a newer schema) before it reads the
// record again, and half of it the most that is added at random: many such
// records met in one poll (a rolling upgrade) are read again spread over
// minutes, not all in one poll ahead of the valid tasks behind them.
const unreadableRecheck = 10 * time.Minute

// cleanupGrace is how long after a change a worker leaves the marker of
// the phase it ended to the change's writer, who deletes it a round trip
// later.
const cleanupGrace = 5 * time.Second

// adapt widens the worker's pick among the markers due first after it met
// a task another worker had taken (workers crowd the head of the queue),
// and narrows it back, slowly, while it does not: so pickup stays close to
// oldest first when there is no contention, and wasted visits stay rare
// when there is.
func (w *Worker) adapt(taken bool) {
	if taken {
		w.spread = min(w.spread*2, maxSpread)
	} else if w.spread > pickSpread {
		w.spread--
	}
}

// maxSpread bounds how wide a worker's pick may grow.
const maxSpread = 512

// head is how many of the markers due first a poll picks among, per free
// slot: spread, or pickPerWorker for each worker of the fleet it knows
// (itself and its rivals) if that is more.
func (w *Worker) head() int {
	return max(w.spread, pickPerWorker*(len(w.rivals)+1)) * (cap(w.slots) - len(w.slots))
}

// pickPerWorker is how many markers of the head a poll picks among per
// worker it knows of, itself included: enough that a worker is seldom
// first for none of them.
const pickPerWorker = 8

// pick returns the markers of a head the poll visits, in the order it
// visits them. A worker that knows no rival shuffles them. One that does
// ranks itself for each task among itself and its rivals (see rank): the
// tasks it ranks first for, its own, come first, oldest first, so that
// workers that know the same fleet work through tasks of their own instead
// of racing for the same ones; every task of the head is some worker's
// own. A worker with none of its own left in the head (the others' tasks
// filled it while it took its own) helps out: first with the tasks it
// ranks second for, which no other worker ranks second for, then third,
// and so on; within a rank those of the worker with the most tasks of its
// own in the head first, newest first, which that worker, working oldest
// first, reaches last. Within fleetRelist of a race (another worker took a
// task this one went for), it leaves another worker's last task in the head
// to that worker for a PollInterval from when it first did (the tail of a
// queue, where every idle worker would race the owner for it), passing
// the time it may help to soonest. So a task whose worker is busy, stopped,
// serves other types or is unknown to this one waits a PollInterval at
// most, and only while workers race; and the help seldom races the owner.
// now is the server's time.
func (w *Worker) pick(head []marker, now time.Time, soonest func(time.Time)) []marker {
	if len(w.rivals) == 0 {
		w.store.shuffle("poll", len(head), func(i, j int) { head[i], head[j] = head[j], head[i] })
		return head
	}
	type place struct {
		rank  int
		owner string // the worker ranked first
	}
	places := make(map[string]place, len(head))
	owns := make(map[string]int, len(w.rivals)+1) // tasks of the head each worker ranks first for
	for _, m := range head {
		p := place{owner: w.opts.ID}
		own := staggerHash(w.opts.ID, m.id)
		best := own
		p.rank = w.rank(m.id, func(r string) {
			if h := staggerHash(r, m.id); h < best || h == best && r < p.owner {
				best, p.owner = h, r
			}
		})
		places[m.key] = p
		owns[p.owner]++
	}
	slices.SortStableFunc(head, func(a, b marker) int {
		pa, pb := places[a.key], places[b.key]
		if c := pa.rank - pb.rank; c != 0 || pa.rank == 0 {
			return c // its own: in the listing's order, oldest first
		}
		if c := owns[pb.owner] - owns[pa.owner]; c != 0 {
			return c
		}
		return strings.Compare(b.key, a.key)
	})
	// While workers race, the last task of its worker in the head is left
	// to that worker for a PollInterval, which it takes next (the tail of a
	// queue, where every idle worker would race its owner for it) unless
	// it is busy or gone.
	raced := now.Sub(w.racedAt) < fleetRelist
	passed := make(map[string]time.Time, len(w.passed))
	visit := head[:0:0]
	for _, m := range head {
		p := places[m.key]
		if raced && p.rank > 0 && owns[p.owner] == 1 {
			since, ok := w.passed[m.key]
			if !ok {
				since = now
			}
			if until := since.Add(w.opts.PollInterval); now.Before(until) {
				w.store.reached("poll/leave")
				passed[m.key] = since
				soonest(until)
				continue
			}
		}
		visit = append(visit, m)
	}
	w.passed = passed
	if len(visit) > 0 && places[visit[0].key].rank > 0 {
		w.store.reached("poll/help")
	}
	return visit
}

// pageSize is how many markers a poll lists: enough for the pick, and the
// first not yet due behind it, without decoding a thousand keys per claim.
func (w *Worker) pageSize() int {
	return min(max(4*w.head(), 100), markerPageSize)
}

// soon is the server time up to which this worker takes a marker for due
// now. A marker is named after the time its task needs a worker by the
// clock of the process that wrote it: for a change that makes a task due
// at once (a Submit, a Retry, a release), that process's estimate of the
// server's clock, which may lead this worker's by the errors of both (a
// second or two of Date headers, more behind a proxy that shifts them).
// A worker that waited for its own estimate to reach that name would sit
// idle, told of a task it could claim. So a marker due within ClockMargin
// is visited now, and its record decides: a start, a retry and a lease's
// end are judged by the server's clock (serverEarliest) in the claim, and
// a visit that finds one still ahead looks again at its time. What that
// costs is one early read of a task whose start or retry falls due within
// ClockMargin of a visit.
func (w *Worker) soon(now time.Time) time.Time { return now.Add(w.opts.ClockMargin) }

func (w *Worker) claimEvent() event {
	return event{kind: evClaim, worker: w.opts.ID, lease: w.opts.LeaseDuration, margin: w.opts.ClockMargin,
		heartbeat: w.opts.HeartbeatInterval, earliest: w.store.serverEarliest()}
}

// claim writes the claim, which moves the task's marker to the end of the
// lease, and, if it won, starts the handler. stale are markers of the task
// to delete as well. It reports whether it started the task, and whether
// it lost the task to another writer. m is the marker visited: a claim of a
// task told of by an event while due, lost to another worker, tells the
// worker of a rival (see fanout.go).
func (w *Worker) claim(ctx, base context.Context, m marker, t *record, etag string, next *record, stale []string) (started, lost bool) {
	if ctx.Err() != nil {
		return false, false
	}
	// The write itself must not be cut short by shutdown: a claim that
	// landed unseen would hold the task until its lease expired. A doubtful
	// answer is settled by re-reading, with backoff, while the lease lasts;
	// an S3 that does not answer at all is given up at the lease's end less
	// the margin, or when a Stop's ctx ends.
	parent := base
	if w.claims != nil {
		parent = w.claims // as base, but cut when a Stop's ctx ends
	}
	cctx, cancel := context.WithTimeout(parent, w.opts.LeaseDuration-w.opts.ClockMargin)
	defer cancel()
	got, gotETag, err := w.store.commitMarked(cctx, t, etag, next, stale...)
	if err != nil {
		// Refused although nobody wrote the record since it was read (a
		// 409 ConditionalRequestConflict): not lost to another worker,
		// and tried again at the next poll.
		lost := (errors.Is(err, errLost) || errors.Is(err, errOvertaken)) && (got == nil || got.Revision != t.Revision)
		if !lost {
			w.log.Warn("s3task: claim", "task_id", t.ID, "err", err)
		}
		if !lost && errors.Is(err, errLost) {
			w.store.reached("poll/claim-refused")
		}
		if lost {
			w.store.reached("poll/claim-lost")
			if got != nil && got.Status == StatusRunning && (m.rush || !m.event) {
				w.rivalSeen(got.WorkerID, m.rush)
			}
		}
		return false, lost
	}
	w.claimed(m)
	w.begin(base, got, gotETag)
	return true, false
}

// settle finishes the bookkeeping of a finished task found by a poll: its
// marker goes, with the stale ones listed, unless an OnTerminal notice is
// pending, which the notifier delivers first, off the poll loop. A delete
// that does not happen (ctx ended) is only a stale marker, removed by the
// next visit.
func (w *Worker) settle(ctx context.Context, t *record, etag string, stale ...string) {
	for _, key := range stale {
		_ = w.store.dropMarker(ctx, key)
	}
	if t.NotifyPending {
		w.notices.add(t, etag)
		return
	}
	_ = w.store.dropMarker(ctx, w.store.MarkerKey(&t.Task))
}
