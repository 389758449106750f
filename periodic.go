package s3task

import (
	"fmt"
	"time"
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
	// input ([FileOptions.NoInput]): a run has no file.
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
