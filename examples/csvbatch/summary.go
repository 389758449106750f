package main

import (
	"context"
	"encoding/csv"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/s3task/s3task"
)

// The periodic summary: a task_summary task, made by the fleet on the
// schedule of -summary-schedule (s3task.Periodic: the worker holding the
// fleet's reconciler lease makes each period's run, once), writes a CSV of
// the tasks created in the day before it was made, counted by type and
// status. It takes no file (s3task.FileOptions.NoInput). GET /periodics
// and "s3taskctl periodics" show when it runs next and its latest run.

// summaryName names the periodic task, and so its runs' keys.
const summaryName = "task-summary"

// summarySpan is how far back a summary counts: the tasks created in the
// day before its task was made.
const summarySpan = 24 * time.Hour

// summaryPeriodics returns the periodic tasks of the Store: the summary
// on schedule, or none when schedule is the zero Schedule (off).
func summaryPeriodics(schedule s3task.Schedule) []s3task.Periodic {
	if schedule.IsZero() {
		return nil
	}
	return []s3task.Periodic{{
		Name:     summaryName,
		Schedule: schedule,
		Params:   s3task.CreateParams{Type: typeSummary, CreatedBy: "schedule"},
	}}
}

// handleSummary registers the handler of task_summary on mux: it counts
// the tasks with Store.Stats (at most s3task.DefaultStatsMaxTasks
// records, newest first) and writes one row per type and status with
// tasks, "type,status,tasks", the untyped tasks under "". Its progress
// says how many tasks it counted (processed_count) in how many rows
// (row_count).
func handleSummary(mux *s3task.Mux, store *s3task.Store) error {
	return mux.HandleFunc(typeSummary, func(ctx context.Context, job *s3task.Job) error {
		st, err := store.Stats(ctx, s3task.StatsOptions{Since: job.Task.CreatedAt.Add(-summarySpan)})
		if err != nil {
			return categorize(err)
		}
		out, err := job.CreateOutput(ctx)
		if err != nil {
			return categorize(err)
		}
		w := csv.NewWriter(out)
		_ = w.Write([]string{"type", "status", "tasks"})
		rows := int64(0)
		for _, typ := range slices.Sorted(maps.Keys(st.ByType)) {
			for _, status := range allStatuses {
				if n := st.ByType[typ][status]; n > 0 {
					_ = w.Write([]string{typ, string(status), strconv.Itoa(n)})
					rows++
				}
			}
		}
		w.Flush()
		job.SetProgress(s3task.Progress{RowCount: rows, ProcessedCount: int64(st.Tasks), SuccessCount: int64(st.Tasks)})
		if err := w.Error(); err != nil {
			return categorize(err)
		}
		return categorize(out.Close())
	})
}
