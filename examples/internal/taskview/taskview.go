// Package taskview is a task as the example programs show it in JSON: the
// record's own snake_case fields (as in status.json) plus what they work
// out for their clients. csvbatch's API answers with it and s3taskctl's
// -json prints it, so a script reads one shape from both.
package taskview

import (
	"strings"
	"time"

	"github.com/s3task/s3task"
)

// Task is a task record with fields computed from it.
type Task struct {
	*s3task.Task
	// Terminal says the task is finished: nothing more happens to it
	// without an operator.
	Terminal bool `json:"terminal"`
	// Retryable and Cancelable say whether Retry and Cancel would be
	// accepted now: hints for a UI, since the calls decide again against
	// the stored record. Retryable is false for a failed task whose retry
	// Store.Retry would refuse because its input is gone or too large (it
	// verifies the input again, and an input is written once).
	Retryable  bool `json:"retryable"`
	Cancelable bool `json:"cancelable"`
	// RetryNote says what a retry would do, or why none is offered, when
	// that is not simply "run it again".
	RetryNote string `json:"retry_note,omitempty"`
	// UploadReissuable says a fresh upload URL can be had for the task
	// (POST /tasks/{id}/upload in csvbatch): it is created, still waiting
	// for its input, and its first URL may have expired.
	UploadReissuable bool `json:"upload_reissuable"`

	// For a running task: LastReportAt is the record's last write (its
	// worker's claim or latest heartbeat), SilentSeconds how long ago that
	// was, and ReportOverdue says a heartbeat is late, by
	// s3task.Task.Silent: no write for two of the heartbeat intervals the
	// claim recorded in the task's attempt history (half the lease for a
	// task claimed without one), so the worker may have died. RecoversAt
	// is when another worker may take the task over if it stays silent;
	// LeaseLapsed says that time has come and the task is still running
	// on its record: no worker has taken it over yet, which a live worker
	// of its type does at its next poll, so a lapse that lasts means none
	// is running. The attempt history itself is the record's
	// attempt_history, which the embedded task carries.
	LastReportAt  *time.Time `json:"last_report_at,omitempty"`
	SilentSeconds int64      `json:"silent_seconds,omitempty"`
	ReportOverdue bool       `json:"report_overdue"`
	RecoversAt    *time.Time `json:"recovers_at,omitempty"`
	LeaseLapsed   bool       `json:"lease_lapsed,omitempty"`
}

// Of returns the view of t now, for workers with the default clock margin.
func Of(t *s3task.Task) Task { return At(t, time.Now(), s3task.DefaultClockMargin) }

// At returns the view of t at now (by the S3 server's clock, as near as
// the caller knows it), for workers whose WorkerOptions.ClockMargin is
// margin.
func At(t *s3task.Task, now time.Time, margin time.Duration) Task {
	v := Task{Task: t, Terminal: t.Terminal(), Retryable: t.Retryable(), Cancelable: t.Cancelable(),
		UploadReissuable: t.Status == s3task.StatusCreated && !t.Purging}
	if v.Retryable {
		v.Retryable, v.RetryNote = retryOf(t)
	}
	if t.Status == s3task.StatusRunning && !t.UpdatedAt.IsZero() {
		silence, overdue := t.Silent(now)
		last := t.UpdatedAt
		v.LastReportAt, v.SilentSeconds, v.ReportOverdue = &last, int64(silence/time.Second), overdue
		if at := t.RecoversAt(margin); !at.IsZero() {
			v.RecoversAt, v.LeaseLapsed = &at, !now.Before(at)
		}
	}
	return v
}

// retryOf judges a failed task's retry by its failure: the input checks
// Store.Retry repeats are the ones that can refuse it. Handlers' own
// failures stay retryable: a fixed handler may succeed.
func retryOf(t *s3task.Task) (ok bool, note string) {
	switch {
	case failedWith(t, s3task.ErrInputMissing):
		return false, "no retry: the input is gone, and a submitted task's input cannot be uploaded again; create a new task"
	case failedWith(t, s3task.ErrInputTooLarge) || tooLargeText(t.LastError):
		return false, "no retry: the input is over the size limit, and Retry checks it again; create a new task with a smaller file"
	case t.ErrorCategory == s3task.CategoryInputChanged || failedWith(t, s3task.ErrInputChanged):
		return true, "the input was replaced after submit: Retry verifies it again and runs the task on the input as it is now"
	}
	return true, ""
}

// failedWith reports whether t's last error came from sentinel: the record
// keeps only its text, which wraps the sentinel's.
func failedWith(t *s3task.Task, sentinel error) bool {
	return t.LastError != "" && strings.Contains(t.LastError, sentinel.Error())
}

// tooLargeText reports whether msg holds an *s3task.InputSizeError's text,
// which does not repeat ErrInputTooLarge's.
func tooLargeText(msg string) bool {
	return strings.Contains(msg, "s3task: input ") && strings.Contains(msg, " bytes, over the limit of ")
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
