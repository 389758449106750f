package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/examples/internal/periodicspec"
	"github.com/s3task/s3task/examples/internal/taskview"
)

// periodicsCmd is periodics: the fleet's periodic tasks, as -periodic
// declares them, when each runs next, and its latest run.
func periodicsCmd(fs *flag.FlagSet) runFunc {
	var declared []s3task.Periodic
	fs.Func("periodic", "a periodic `task` of the fleet, NAME:TYPE:SCHEDULE[,missed=run-once], SCHEDULE being every:<duration>, daily:HH:MM[:<zone>] or weekly:<day>:HH:MM[:<zone>]; repeat it for each", func(v string) error {
		p, err := periodicspec.Periodic(v)
		if err != nil {
			return err
		}
		declared = append(declared, p)
		return nil
	})
	return func(ctx context.Context, c *cli, _ []string) error {
		if len(declared) == 0 {
			return usageErr(errors.New("periodics needs the fleet's periodic tasks, as the fleet declares them: give each with -periodic NAME:TYPE:SCHEDULE, such as -periodic task-summary:task_summary:daily:00:05"))
		}
		c.periodic = declared
		store, err := c.open(ctx)
		if err != nil {
			return err
		}
		list, err := store.Periodics(ctx)
		if err != nil {
			return err
		}
		now := list.At
		doc := taskview.PeriodicsOf(list, func(t *s3task.Task) taskview.Task { return taskview.At(t, now, s3task.DefaultClockMargin) })
		if c.set.json {
			c.writeJSON(doc)
			return nil
		}
		fmt.Fprintf(c.stdout, "%s (by the S3 server's clock, %s)\n", plural(len(doc.Periodics), "periodic task"), now.UTC().Format("2006-01-02 15:04:05Z"))
		tw := newTable(c.stdout)
		tw.row("NAME", "TYPE", "SCHEDULE", "MISSED", "NEXT RUN", "LAST PERIOD", "TASK", "STATUS")
		var unreadable []string
		for i, p := range doc.Periodics {
			period, id, status := "-", "-", "none yet"
			if run := p.LastRun; run != nil {
				period, id, status = run.Period.Format("2006-01-02 15:04:05Z"), orDash(run.TaskID), run.Status
				switch run.Status {
				case taskview.RunUnreadable:
					status = "UNREADABLE"
					unreadable = append(unreadable, fmt.Sprintf("UNREADABLE %s: %s", clean(p.Name, 64), clean(run.Error, 300)))
				case taskview.RunUnrecorded:
					status = "being made (no record yet)"
				case taskview.RunPurged:
				default:
					status = statusText(list.Periodics[i].Last, now)
				}
			}
			tw.row(clean(p.Name, 64), orDash(clean(p.Type, 32)), p.Schedule, p.Missed, stamp(p.NextRunAt, now), period, id, status)
		}
		tw.flush()
		for _, line := range unreadable {
			fmt.Fprintln(c.stdout, line)
		}
		return nil
	}
}
