// Package taskview is a task as the example programs show it in JSON: the
// record's own snake_case fields (as in status.json) plus what they work
// out for their clients. csvbatch's API answers with it and s3taskctl's
// -json prints it, so a script reads one shape from both.
package taskview

import "github.com/s3task/s3task"

// Task is a task record with three fields computed from it.
type Task struct {
	*s3task.Task
	// Terminal says the task is finished: nothing more happens to it
	// without an operator.
	Terminal bool `json:"terminal"`
	// Retryable and Cancelable say whether Retry and Cancel would be
	// accepted now: hints for a UI, since the calls decide again against
	// the stored record.
	Retryable  bool `json:"retryable"`
	Cancelable bool `json:"cancelable"`
}

// Of returns the view of t.
func Of(t *s3task.Task) Task {
	return Task{Task: t, Terminal: t.Terminal(), Retryable: t.Retryable(), Cancelable: t.Cancelable()}
}

// Broken is a task folder whose record cannot be read.
type Broken struct {
	Key   string `json:"key"`
	Error string `json:"error"`
}

// BrokenOf returns the views of unreadable records: an empty list, not
// nil, when there are none.
func BrokenOf(errs []*s3task.RecordError) []Broken {
	out := []Broken{}
	for _, e := range errs {
		out = append(out, Broken{Key: e.Key, Error: e.Err.Error()})
	}
	return out
}
