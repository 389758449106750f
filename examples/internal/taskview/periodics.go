package taskview

import (
	"time"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/examples/internal/periodicspec"
)

// Periodics is the periodic tasks a Store declares, each with its latest
// run, as the example service's GET /periodics and "s3taskctl periodics
// -json" show them.
type Periodics struct {
	ReadAt    time.Time  `json:"read_at"` // the S3 server's time, by which the periods were told
	Periodics []Periodic `json:"periodics"`
}

// Periodic is one periodic task: its declaration, its periods, and its
// latest run.
type Periodic struct {
	Name     string `json:"name"`
	Type     string `json:"task_type"`
	Schedule string `json:"schedule"` // as s3task.Schedule's String says it: "daily at 02:00 UTC"
	Missed   string `json:"missed"`   // what becomes of a run not made in time: "skip" or "run-once"
	// PeriodStart is the start of the latest period, NextRunAt that of
	// the next, when its run is due.
	PeriodStart time.Time `json:"period_start"`
	NextRunAt   time.Time `json:"next_run_at"`
	// LastRun is the latest run, found in the latest period or the one
	// before it; null when neither has one.
	LastRun *PeriodicRun `json:"last_run"`
}

// PeriodicRun is the run of one period of a periodic task.
type PeriodicRun struct {
	Period time.Time `json:"period"`  // the start of the period it is the run of
	TaskID string    `json:"task_id"` // "" when it could not be read
	// Status is the task's status, or what stands in for one:
	// RunPurged, RunUnrecorded or RunUnreadable.
	Status string `json:"status"`
	Task   *Task  `json:"task"`            // null unless Status is the task's
	Error  string `json:"error,omitempty"` // why it could not be read (RunUnreadable)
}

// The statuses of a PeriodicRun that are not a task's.
const (
	RunPurged     = "purged"     // made, then purged: it is not made again
	RunUnrecorded = "unrecorded" // its key names a task with no record yet: being made, or its maker stopped midway
	RunUnreadable = "unreadable" // its key's object or its record could not be read
)

// PeriodicsOf returns the view of list, its times in UTC, each run's task
// shown by view.
func PeriodicsOf(list *s3task.PeriodicList, view func(*s3task.Task) Task) Periodics {
	doc := Periodics{ReadAt: list.At.UTC(), Periodics: []Periodic{}}
	for _, p := range list.Periodics {
		v := Periodic{
			Name: p.Periodic.Name, Type: p.Periodic.Params.Type, Schedule: p.Periodic.Schedule.String(),
			Missed: periodicspec.MissedName(p.Periodic.Missed), PeriodStart: p.Prev.UTC(), NextRunAt: p.Next.UTC(),
		}
		if !p.LastPeriod.IsZero() {
			run := &PeriodicRun{Period: p.LastPeriod.UTC(), TaskID: p.LastID}
			switch {
			case p.Err != nil:
				run.Status, run.Error = RunUnreadable, p.Err.Error()
			case p.Purged:
				run.Status = RunPurged
			case p.Last == nil:
				run.Status = RunUnrecorded
			default:
				t := view(p.Last)
				run.Status, run.Task = string(p.Last.Status), &t
			}
			v.LastRun = run
		}
		doc.Periodics = append(doc.Periodics, v)
	}
	return doc
}
