package sim

import (
	"fmt"
	"time"

	"github.com/s3task/s3task"
)

// periodicType is the task type of the periodic runs (Config.Periodic),
// declared without input.
const periodicType = "p"

// PeriodicScope is the key scope of the periodic runs' tasks.
const PeriodicScope = "s3task-periodic"

// declarePeriodics draws the periodic tasks of a world that starts at
// start, and the reconciler interval of its workers.
func declarePeriodics(seed uint64, start time.Time) ([]s3task.Periodic, time.Duration) {
	rng := NewRand(seed, "periodic/decl")
	every := rng.Dur(2*time.Minute, 6*time.Minute).Truncate(time.Second)
	tick := s3task.Periodic{
		Name:     "tick",
		Schedule: s3task.Every(every),
		Params:   s3task.CreateParams{Type: periodicType},
		Within:   rng.Dur(time.Minute, max(every/2, time.Minute)).Truncate(time.Second),
	}
	if rng.Chance(0.5) {
		tick.Missed, tick.Within = s3task.RunMissedOnce, 0
	}
	ps := []s3task.Periodic{tick}
	if rng.Chance(0.5) {
		// East of UTC, so that its day is not the server's.
		zone := time.FixedZone("UTC+3", 3*60*60)
		at := start.In(zone).Add(rng.Dur(5*time.Minute, 30*time.Minute))
		ps = append(ps, s3task.Periodic{
			Name:     "nightly",
			Schedule: s3task.Daily(at.Hour(), at.Minute(), zone),
			Params:   s3task.CreateParams{Type: periodicType, Metadata: map[string]string{"report": "daily"}},
			Within:   rng.Dur(time.Minute, 10*time.Minute).Truncate(time.Second),
		})
	}
	return ps, rng.Dur(2*time.Minute, 5*time.Minute).Truncate(time.Second)
}

// describePeriodic names p's schedule and policy for messages.
func describePeriodic(p s3task.Periodic) string {
	if p.Missed == s3task.RunMissedOnce {
		return fmt.Sprintf("%s (%s, missed runs: run once)", p.Name, p.Schedule)
	}
	return fmt.Sprintf("%s (%s, made within %s)", p.Name, p.Schedule, p.Within)
}
