package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/s3task/s3task"
)

// verify reads every task in the bucket and checks it against what the
// clients saw.
func verify(ctx context.Context, store *s3task.Store, rec *recorder, completions int, res *Result) {
	var all []*s3task.Task
	cursor := ""
	for {
		page, err := store.List(ctx, s3task.ListOptions{Limit: s3task.MaxListLimit, Cursor: cursor})
		if err != nil {
			rec.errorf("verify: list: %v", err)
			return
		}
		for _, b := range page.Broken {
			rec.errorf("verify: unreadable record %s: %v", b.Key, b.Err)
		}
		all = append(all, page.Tasks...)
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	v := &res.Verify
	v.Checked = true
	v.TasksInBucket = len(all)
	v.WorkerCompletions = completions
	v.Attempts = map[string]int{}
	seen := map[string]bool{}
	for _, t := range all {
		seen[t.ID] = true
		info, ok := rec.tasks[t.ID]
		if !ok {
			rec.errorLocked("verify: a task no client created (a duplicate create?)")
			continue
		}
		if t.Status == s3task.StatusCompleted {
			v.Completed++
		}
		v.Attempts[strconv.Itoa(t.Attempt)]++
		switch {
		case t.Status != s3task.StatusCompleted:
			if info.verified {
				rec.errorLocked("verify: a task the client saw completed is now " + string(t.Status))
			} else if !info.abandoned {
				rec.errorLocked("verify: task left " + string(t.Status))
			} else {
				v.LeftUnfinished++
			}
		case !info.verified && !info.abandoned:
			rec.errorLocked("verify: a completed task whose output no client checked")
		case t.RowCount != int64(res.Rows):
			rec.errorLocked("verify: completed with a wrong row_count")
		case t.Attempt-t.ReleasedAttempts < 1 || t.Attempt-t.ReleasedAttempts > t.MaxAttempts:
			rec.errorLocked(fmt.Sprintf("verify: completed after %d attempts (%d released, at most %d)", t.Attempt, t.ReleasedAttempts, t.MaxAttempts))
		}
	}
	for id := range rec.tasks {
		if !seen[id] {
			rec.errorLocked("verify: a task a client created is missing from the bucket")
		}
	}
	if completions != v.Completed {
		rec.errorLocked(fmt.Sprintf("verify: the workers counted %d completions for %d completed tasks (want one each)", completions, v.Completed))
	}
}

var errStopped = errors.New("stopped")
