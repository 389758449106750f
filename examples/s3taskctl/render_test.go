package main

import (
	"strings"
	"testing"
	"time"

	"github.com/s3task/s3task"
)

// TestStatusTextSilentWorker: list and show flag a running task whose
// worker has not reported for more than half its lease, with when it is
// taken over; a running task that reports is plain "running".
func TestStatusTextSilentWorker(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	running := &s3task.Task{Status: s3task.StatusRunning, Attempt: 1, UpdatedAt: at, LeaseExpiresAt: at.Add(10 * time.Minute)}
	tests := []struct {
		now  time.Time
		want string
	}{
		{at.Add(time.Minute), "running"},
		{at.Add(5 * time.Minute), "running"},
		{at.Add(6*time.Minute + 20*time.Second), "running (no report for 6m; recovered at 12:10:05Z if it stays silent)"},
		{at.Add(11 * time.Minute), "running (no report for 11m; lease ran out at 12:10:05Z and no worker has taken it over: a running worker of its type does at its next poll (see s3taskctl workers))"},
		{at.Add(2*time.Hour + 5*time.Minute), "running (no report for 2h5m; lease ran out at 12:10:05Z and no worker has taken it over: a running worker of its type does at its next poll (see s3taskctl workers))"},
	}
	for _, tt := range tests {
		if got := statusText(running, tt.now); got != tt.want {
			t.Errorf("at +%s: statusText = %q, want %q", tt.now.Sub(at), got, tt.want)
		}
	}
	short := &s3task.Task{Status: s3task.StatusRunning, UpdatedAt: at, LeaseExpiresAt: at.Add(time.Minute)}
	if got, want := statusText(short, at.Add(45*time.Second)), "running (no report for 45s; recovered at 12:01:05Z if it stays silent)"; got != want {
		t.Errorf("statusText = %q, want %q", got, want)
	}
}

// TestAges: ages and relative times read as people write them, never as
// Go's Duration.String ("4m0s").
func TestAges(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		d          time.Duration
		ago, stamp string
	}{
		{0, "0s ago", "(0s ago)"},
		{45*time.Second + 400*time.Millisecond, "45s ago", "(45s ago)"},
		{4 * time.Minute, "4m ago", "(4m ago)"},
		{4*time.Minute + 12*time.Second, "4m ago", "(4m12s ago)"},
		{3*time.Hour + 5*time.Minute + 9*time.Second, "3h5m ago", "(3h5m ago)"},
		{3 * time.Hour, "3h ago", "(3h ago)"},
		{-90 * time.Second, "", "(in 1m30s)"},
		{72 * time.Hour, "2026-11-29", "(72h ago)"},
	} {
		at := now.Add(-tc.d)
		if got := ago(at, now); tc.ago != "" && got != tc.ago {
			t.Errorf("ago(now - %s) = %q, want %q", tc.d, got, tc.ago)
		}
		if got := stamp(at, now); !strings.HasSuffix(got, tc.stamp) {
			t.Errorf("stamp(now - %s) = %q, want it to end %q", tc.d, got, tc.stamp)
		}
	}
}
