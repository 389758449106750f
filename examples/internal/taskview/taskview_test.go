package taskview

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/s3task/s3task"
)

// TestRetryable: a failed task is offered a retry unless Store.Retry would
// refuse it for its input; one whose input changed is offered it with a
// note saying what it will do.
func TestRetryable(t *testing.T) {
	t.Parallel()
	failed := func(category, msg string) *s3task.Task {
		return &s3task.Task{Status: s3task.StatusFailed, ErrorCategory: category, LastError: msg}
	}
	sizeErr := &s3task.InputSizeError{Key: "batch-tasks/X/input.csv", Size: 200, Limit: 100}
	tests := []struct {
		name     string
		task     *s3task.Task
		want     bool
		wantNote string // a substring; "" means no note
	}{
		{"transient failure", failed(s3task.CategoryTransient, "attempt 1: timeout"), true, ""},
		{"handler's permanent failure", failed("bad_input", "input is not valid CSV"), true, ""},
		{"input changed, library category", failed(s3task.CategoryInputChanged, "whatever"), true, "as it is now"},
		{"input changed, handler's category", failed("input_unavailable", fmt.Errorf("%w: batch-tasks/X/input.csv", s3task.ErrInputChanged).Error()), true, "as it is now"},
		{"input missing", failed("input_unavailable", fmt.Errorf("%w: no object at k", s3task.ErrInputMissing).Error()), false, "input is gone"},
		{"input too large", failed(s3task.CategoryPermanent, sizeErr.Error()), false, "size limit"},
		{"input too large, sentinel", failed(s3task.CategoryPermanent, s3task.ErrInputTooLarge.Error()), false, "size limit"},
		{"waiting for a retry", &s3task.Task{Status: s3task.StatusFailed, RetryAt: time.Now()}, true, ""},
		{"failed, being purged", &s3task.Task{Status: s3task.StatusFailed, Purging: true}, false, ""},
		{"completed", &s3task.Task{Status: s3task.StatusCompleted}, false, ""},
		{"queued", &s3task.Task{Status: s3task.StatusQueued}, false, ""},
	}
	for _, tt := range tests {
		v := Of(tt.task)
		if v.Retryable != tt.want {
			t.Errorf("%s: retryable = %v, want %v", tt.name, v.Retryable, tt.want)
		}
		if (tt.wantNote == "") != (v.RetryNote == "") || !strings.Contains(v.RetryNote, tt.wantNote) {
			t.Errorf("%s: retry_note = %q, want one containing %q", tt.name, v.RetryNote, tt.wantNote)
		}
	}
}

// TestReport: a running task shows when its worker last wrote, how long
// ago, whether that is overdue and when it would be taken over.
func TestReport(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	running := &s3task.Task{Status: s3task.StatusRunning, UpdatedAt: at, LeaseExpiresAt: at.Add(10 * time.Minute)}

	fresh := At(running, at.Add(time.Minute), 5*time.Second)
	if fresh.ReportOverdue || fresh.SilentSeconds != 60 || !fresh.LastReportAt.Equal(at) ||
		!fresh.RecoversAt.Equal(at.Add(10*time.Minute+5*time.Second)) {
		t.Errorf("fresh: %+v", fresh)
	}
	stale := At(running, at.Add(6*time.Minute), 5*time.Second)
	if !stale.ReportOverdue || stale.SilentSeconds != 360 {
		t.Errorf("stale: %+v", stale)
	}
	data, err := json.Marshal(stale)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"report_overdue":true`, `"last_report_at":"2026-06-01T12:00:00Z"`, `"recovers_at":"2026-06-01T12:10:05Z"`, `"silent_seconds":360`} {
		if !strings.Contains(string(data), want) {
			t.Errorf("JSON lacks %s: %s", want, data)
		}
	}

	// A task whose claim recorded its worker's heartbeat interval (2 s,
	// as this service's workers) is overdue after two of them, long
	// before half its lease; and its JSON carries the attempt history.
	beating := &s3task.Task{Status: s3task.StatusRunning, Attempt: 1, WorkerID: "w1", UpdatedAt: at, LeaseExpiresAt: at.Add(10 * time.Minute),
		History: []s3task.Attempt{{Number: 1, WorkerID: "w1", StartedAt: at, Outcome: s3task.OutcomeRunning, HeartbeatInterval: 2 * time.Second}}}
	if v := At(beating, at.Add(3*time.Second), 5*time.Second); v.ReportOverdue || v.SilentSeconds != 3 {
		t.Errorf("3 s after a heartbeat: %+v", v)
	}
	late := At(beating, at.Add(4*time.Second), 5*time.Second)
	if !late.ReportOverdue || late.SilentSeconds != 4 {
		t.Errorf("4 s after a heartbeat: %+v", late)
	}
	if data, err := json.Marshal(late); err != nil || !strings.Contains(string(data), `"attempt_history":[{"attempt":1,"worker_id":"w1","started_at":"2026-06-01T12:00:00Z","outcome":"running","heartbeat_interval_ms":2000}]`) {
		t.Errorf("JSON lacks the attempt history (%v): %s", err, data)
	}

	// Its lease and the margin over: another worker may take it, and
	// none has yet. Until then, the view says when one may.
	if fresh.LeaseLapsed || stale.LeaseLapsed || strings.Contains(string(data), "lease_lapsed") {
		t.Errorf("lease_lapsed before the lease ran out: %+v, %s", stale, data)
	}
	if v := At(running, at.Add(10*time.Minute+4*time.Second), 5*time.Second); v.LeaseLapsed {
		t.Errorf("a second before the margin is over: %+v", v)
	}
	lapsed := At(running, at.Add(10*time.Minute+5*time.Second), 5*time.Second)
	if data, err := json.Marshal(lapsed); err != nil || !lapsed.LeaseLapsed || !strings.Contains(string(data), `"lease_lapsed":true`) {
		t.Errorf("the lease and its margin over: %+v, %s (%v)", lapsed, data, err)
	}

	queued := At(&s3task.Task{Status: s3task.StatusQueued, UpdatedAt: at}, at.Add(time.Hour), time.Second)
	if queued.ReportOverdue || queued.LastReportAt != nil || queued.RecoversAt != nil {
		t.Errorf("queued: %+v", queued)
	}
	if !At(&s3task.Task{Status: s3task.StatusCreated}, at, 0).UploadReissuable || At(&s3task.Task{Status: s3task.StatusQueued}, at, 0).UploadReissuable {
		t.Error("upload_reissuable wrong")
	}
}
