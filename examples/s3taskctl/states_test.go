package main

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/s3task/s3task"
)

// -status takes statuses and the library's states, each a part of a
// status; the library's filters keep a task only if it passes both its
// Statuses and its States, so a mix is given as States alone.
func TestStatusFilter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		value    string
		statuses []s3task.Status
		states   []s3task.State
		err      bool
	}{
		{value: "failed", statuses: []s3task.Status{"failed"}},
		{value: "queued, running", statuses: []s3task.Status{"queued", "running"}},
		{value: "dead", states: []s3task.State{"dead"}},
		{value: "dead,retrying", states: []s3task.State{"dead", "retrying"}},
		// failed is every task that is dead or retrying.
		{value: "scheduled,failed", states: []s3task.State{"scheduled", "retrying", "dead"}},
		{value: "dead,failed", states: []s3task.State{"dead", "retrying"}},
		{value: "ready,queued,created", states: []s3task.State{"ready", "created", "scheduled"}},
		{value: "dead,lost", err: true},
		{value: "Dead", err: true},
	} {
		var f statusFilter
		err := f.add(tc.value)
		if tc.err {
			if err == nil || !strings.Contains(err.Error(), "scheduled, ready, retrying or dead") {
				t.Errorf("-status %s: error %v, want one that names the states", tc.value, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("-status %s: %v", tc.value, err)
			continue
		}
		statuses, states := f.filters()
		if !slices.Equal(statuses, tc.statuses) || !slices.Equal(states, tc.states) {
			t.Errorf("-status %s: Statuses %q, States %q; want %q, %q", tc.value, statuses, states, tc.statuses, tc.states)
		}
	}
}

// retry -status dead retries the tasks failed for good and leaves those
// waiting for their backoff; list -status shows each state apart, a
// scheduled task judged by the server's clock.
func TestStatusStates(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "")
	run := func(args ...string) (int, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		c := newCLI(&out, &errOut, func(string) (string, bool) { return "", false })
		c.store = f.store
		code := c.run(t.Context(), args)
		return code, out.String() + errOut.String()
	}
	dead := f.task(f.store, "failed", "dead")
	retrying := f.task(f.store, "failed-waiting", "retrying")
	ready := f.task(f.store, "queued", "ready")
	scheduled, err := f.store.Create(f.ctx, s3task.CreateParams{Name: "scheduled", Type: "csv_enrich", RunAt: f.store.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}

	list := func(status string) []string {
		t.Helper()
		code, out := run("list", "-json", "-status", status)
		var doc listJSON
		if err := json.Unmarshal([]byte(out), &doc); code != exitOK || err != nil {
			t.Fatalf("list -status %s: exit %d, %v\n%s", status, code, err, out)
		}
		return ids(doc.Tasks)
	}
	sorted := func(tasks ...*s3task.Task) []string {
		var out []string
		for _, task := range tasks {
			out = append(out, task.ID)
		}
		slices.Sort(out)
		return out
	}
	for _, tc := range []struct {
		status string
		want   []string
	}{
		{"dead", sorted(dead)},
		{"retrying", sorted(retrying)},
		{"ready", sorted(ready)},
		{"created", sorted(scheduled)},
		{"failed", sorted(dead, retrying)},
		{"dead,ready", sorted(dead, ready)},
	} {
		if diff := cmp.Diff(tc.want, list(tc.status)); diff != "" {
			t.Errorf("list -status %s (-want +got):\n%s", tc.status, diff)
		}
	}
	if err := f.store.UploadInput(f.ctx, scheduled.ID, strings.NewReader("a\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Submit(f.ctx, scheduled.ID); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sorted(scheduled), list("scheduled")); diff != "" {
		t.Errorf("list -status scheduled (-want +got):\n%s", diff)
	}

	code, out := run("retry", "-status", "dead", "-dry-run", "-json")
	var dry bulkDoc
	if err := json.Unmarshal([]byte(out), &dry); code != exitOK || err != nil {
		t.Fatalf("retry -status dead -dry-run: exit %d, %v\n%s", code, err, out)
	}
	if len(dry.Results) != 1 || dry.Results[0].ID != dead.ID || dry.Results[0].Outcome != "would_do" {
		t.Errorf("retry -status dead -dry-run: %+v, want the dead task alone", dry.Results)
	}
	if code, out := run("retry", "-status", "dead"); code != exitOK {
		t.Fatalf("retry -status dead: exit %d\n%s", code, out)
	}
	if got := f.get(dead.ID); got.Status != s3task.StatusQueued {
		t.Errorf("the dead task is %s after retry -status dead, want queued", got.Status)
	}
	if got := f.get(retrying.ID); got.Status != s3task.StatusFailed || !got.RetryAt.Equal(retrying.RetryAt) {
		t.Errorf("the retrying task is %s, retry at %v (was %v); want it untouched", got.Status, got.RetryAt, retrying.RetryAt)
	}
	if code, out := run("retry", "-status", "zombie"); code != exitUsage {
		t.Errorf("retry -status zombie: exit %d, want %d\n%s", code, exitUsage, out)
	}
}
