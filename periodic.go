package s3task

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/s3task/s3task/internal/kit"
)

// Periodic declares a task the fleet makes on a schedule, such as "every
// night at 02:00 Europe/Berlin, export yesterday's orders". Each period of
// its Schedule has one run: one task, made with Params, whose key names
// the Periodic and the period's start, so the run is made once however
// many processes try.
type Periodic struct {
	// Name names the periodic task and its runs' keys: 1 to 64 ASCII
	// letters, digits, '.', '-' and '_'. Two Periodics of one Store may
	// not share it.
	Name string
	// Schedule says when its periods start.
	Schedule Schedule
	// Params describe each run's task. Its Key, KeyScope and RunAt are
	// the run's own and must be empty; its type must be declared without
	// input ([FileOptions.NoInput]): a run has no file. The worker makes
	// the run as its own write, as it claims a task: StoreOptions.Middleware
	// does not see it.
	Params CreateParams
	// Missed says what becomes of a run not made in time: [SkipMissed]
	// (the default) or [RunMissedOnce].
	Missed MissedRuns
	// Within is how late a run may still be made under SkipMissed: a run
	// not made within Within of its period's start is skipped. Zero means
	// the shorter of the period (a day for Daily, a week for Weekly) and
	// an hour.
	Within time.Duration
}

// MissedRuns says what a Periodic does about runs not made in time, when
// no worker held the fleet's reconciler lease at their time (the fleet was
// down, or its holder died and the lease had not run out yet).
type MissedRuns int

const (
	// SkipMissed makes a run only within Periodic.Within of its time: a
	// fleet back after an outage waits for the next period.
	SkipMissed MissedRuns = iota
	// RunMissedOnce makes the latest missed run however late, once: a
	// fleet back after an outage of several periods makes one run, for
	// the last of them.
	RunMissedOnce
)

// String names m.
func (m MissedRuns) String() string {
	switch m {
	case SkipMissed:
		return "skip"
	case RunMissedOnce:
		return "run once"
	}
	return fmt.Sprintf("MissedRuns(%d)", int(m))
}

// maxPeriodicName bounds Periodic.Name.
const maxPeriodicName = 64

// periodicKeyScope is the key scope of periodic runs (CreateParams.KeyScope),
// which no host's middleware should use.
const periodicKeyScope = "s3task-periodic"

// validate reports what makes p unusable, if anything.
func (p *Periodic) validate() error {
	if p.Name == "" || len(p.Name) > maxPeriodicName || !plainName(p.Name) {
		return fmt.Errorf("periodic task %q: the name is 1 to %d ASCII letters, digits, '.', '-' and '_'", p.Name, maxPeriodicName)
	}
	if err := p.Schedule.validate(); err != nil {
		return fmt.Errorf("periodic task %q: %w", p.Name, err)
	}
	switch {
	case p.Params.Key != "" || p.Params.KeyScope != "":
		return fmt.Errorf("periodic task %q: Params.Key and KeyScope are the run's own", p.Name)
	case !p.Params.RunAt.IsZero():
		return fmt.Errorf("periodic task %q: Params.RunAt is the run's own", p.Name)
	case p.Missed != SkipMissed && p.Missed != RunMissedOnce:
		return fmt.Errorf("periodic task %q: Missed is %s", p.Name, p.Missed)
	case p.Within < 0:
		return fmt.Errorf("periodic task %q: Within is %s, negative", p.Name, p.Within)
	}
	return nil
}

// within returns how late a run of p may still be made under SkipMissed.
func (p *Periodic) within() time.Duration {
	if p.Within > 0 {
		return p.Within
	}
	period := p.Schedule.every
	switch p.Schedule.kind {
	case dailySchedule:
		period = 24 * time.Hour
	case weeklySchedule:
		period = 7 * 24 * time.Hour
	}
	return min(period, time.Hour)
}

// runKey returns the idempotency key of p's run for the period that starts
// at start: the name and the start, to the second, in UTC.
func (p *Periodic) runKey(start time.Time) string {
	return p.Name + "@" + start.UTC().Format(time.RFC3339)
}

// enqueueRun makes p's run for the period that starts at start, or finds it
// made: a keyed Enqueue of p.Params under the run's key, in
// periodicKeyScope, named after the period unless Params name it. A run
// that was made and purged is not made again: that is a *PurgedError.
func (s *Store) enqueueRun(ctx context.Context, p *Periodic, start time.Time) (*Task, error) {
	// The fleet's own write, as a claim or a completion is: a host's
	// middleware, which checks callers, has none to check.
	ctx = kit.Bypass(ctx)
	params := p.Params
	params.Key, params.KeyScope = p.runKey(start), periodicKeyScope
	if params.Name == "" {
		params.Name = p.Name + " " + start.Format(time.RFC3339)
	}
	return s.enqueue(ctx, params, nil, keyPolicy{keepPurged: true})
}

// dueRun decides, at now by the server's clock, whether to make p's run
// for its latest period: it returns that period's start and whether to
// make it. made is the start of the latest period whose run this process
// made or decided against (zero: none): a period at or before it is not
// looked at again. Under SkipMissed a run later than Within is not made;
// under RunMissedOnce the latest period's run is made however late, and
// the earlier periods it missed are not.
func (p *Periodic) dueRun(now, made time.Time) (start time.Time, due bool) {
	start = p.Schedule.Prev(now)
	if !start.After(made) {
		return start, false
	}
	if p.Missed == SkipMissed && now.Sub(start) > p.within() {
		return start, false
	}
	return start, true
}

// periodicRuns is a worker's bookkeeping of the Store's periodic tasks,
// while it holds the reconciler lease.
type periodicRuns struct {
	settled map[string]time.Time // by name: the latest period made or let go
	retry   time.Time            // server clock: after a run that failed, not before
	busy    atomic.Bool          // a goroutine is making runs
	mu      sync.Mutex           // settled and retry, between the loop and that goroutine
}

// periodicRetry is how long after a run that failed to be made the holder
// tries again.
const periodicRetry = 10 * time.Second

// holding reports whether the worker holds the reconciler lease at now,
// by the server's clock, with ClockMargin to spare.
func (r *reconciler) holding(now time.Time) bool {
	until := r.held.Load()
	return until != 0 && now.Add(r.w.opts.ClockMargin).Before(time.Unix(0, until))
}

// maybePeriodic makes, in a goroutine of its own, the runs of the Store's
// periodic tasks that are due, if this worker holds the reconciler lease
// (loop goroutine only).
func (r *reconciler) maybePeriodic(ctx context.Context) {
	s := r.w.store
	if len(s.opts.Periodic) == 0 {
		return
	}
	now := s.serverNow()
	pr := &r.periodic
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if !r.holding(now) || now.Before(pr.retry) {
		return
	}
	if pr.settled == nil {
		pr.settled = map[string]time.Time{}
	}
	var todo []int
	for i := range s.opts.Periodic {
		p := &s.opts.Periodic[i]
		start, due := p.dueRun(now, pr.settled[p.Name])
		switch {
		case due:
			todo = append(todo, i)
		case start.After(pr.settled[p.Name]):
			s.reached("periodic/skipped")
			r.w.log.Info("s3task: periodic run skipped: made too late", "periodic", p.Name, "period", start, "within", p.within())
			pr.settled[p.Name] = start
		}
	}
	if len(todo) == 0 || !pr.busy.CompareAndSwap(false, true) {
		return
	}
	r.wg.Go(func() {
		defer pr.busy.Store(false)
		for _, i := range todo {
			r.makeRun(ctx, &s.opts.Periodic[i], now)
		}
	})
}

// makeRun makes p's run for its latest period at now, and settles it.
func (r *reconciler) makeRun(ctx context.Context, p *Periodic, now time.Time) {
	s := r.w.store
	start := p.Schedule.Prev(now)
	cctx, cancel := r.w.bounded(ctx)
	defer cancel()
	t, err := s.enqueueRun(cctx, p, start)
	pr := &r.periodic
	pr.mu.Lock()
	defer pr.mu.Unlock()
	var purged *PurgedError
	switch {
	case errors.As(err, &purged):
		// Made, run and purged long ago: never made again.
		pr.settled[p.Name] = later(pr.settled[p.Name], start)
	case err != nil:
		if ctx.Err() == nil {
			r.w.log.Warn("s3task: periodic run", "periodic", p.Name, "period", start, "err", err)
		}
		pr.retry = s.serverNow().Add(periodicRetry)
	default:
		s.reached("periodic/made")
		r.w.log.Debug("s3task: periodic run", "periodic", p.Name, "period", start, "task_id", t.ID)
		pr.settled[p.Name] = later(pr.settled[p.Name], start)
	}
}

// nextPeriodic returns when, by the server's clock, the loop should look
// at the periodic tasks again: the next period's start, while this worker
// holds the lease; zero otherwise (loop goroutine only).
func (r *reconciler) nextPeriodic(now time.Time) time.Time {
	s := r.w.store
	if len(s.opts.Periodic) == 0 || !r.holding(now) {
		return time.Time{}
	}
	pr := &r.periodic
	pr.mu.Lock()
	defer pr.mu.Unlock()
	var next time.Time
	for i := range s.opts.Periodic {
		next = sooner(next, s.opts.Periodic[i].Schedule.Next(now))
	}
	if now.Before(pr.retry) {
		next = sooner(next, pr.retry)
	}
	if pr.busy.Load() {
		// Runs are being made: a period that began meanwhile is looked
		// at once they are, not at the next period.
		next = sooner(next, now.Add(time.Second))
	}
	return next
}
