package s3task

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
)

// A BulkReport encodes to snake_case JSON, each result's and each broken
// record's error as its message, and decodes back to the same report,
// errors as their messages. The encoding is compared with a golden file;
// run with -update to rewrite it when a change is meant.
func TestBulkReportJSON(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 6, 21, 10, 0, 0, 0, time.UTC)
	task := &Task{SchemaVersion: 1, ID: "7YBPPSMWXKN6TDNSBW79JVJ42B", Type: "csv_import", Name: "June import",
		Status: StatusQueued, Attempt: 1, MaxAttempts: 3, InputPath: "batch-tasks/7YBPPSMWXKN6TDNSBW79JVJ42B/input.csv",
		CreatedAt: at, UpdatedAt: at, Revision: "r1"}
	skip := &TransitionError{ID: "7YBPPSMWXYM9HFMY1VHY9G13SH", From: StatusFailed, Event: "retry", Reason: "it is retrying now, a state the selection does not hold"}
	r := &BulkReport{
		DryRun: true,
		Results: []BulkResult{
			{ID: "not-an-id", Outcome: BulkFailed, Err: &IDError{ID: "not-an-id", Reason: "not 26 characters"}},
			{ID: task.ID, Outcome: BulkWouldDo, Task: task},
			{ID: skip.ID, Outcome: BulkSkipped, Err: skip},
		},
		Acted: 1, Skipped: 1, Failed: 1,
		Broken:  []*RecordError{{Key: "batch-tasks/7YBPPSMX0000000000000000000/status.json", Err: fmt.Errorf("%w: unexpected end of JSON input", ErrCorruptRecord)}},
		Scanned: 4, ScanLimited: true, NextCursor: "N1lCUFBTTVdYWU05SEZNWTFWSFk5RzEzU0gw",
	}
	got, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	path := filepath.Join("testdata", "bulk_report.json")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run TestBulkReportJSON -update to create it)", err)
	}
	if diff := gocmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("encoding of a bulk report changed (-%s +got); run with -update if intended:\n%s", path, diff)
	}

	var back BulkReport
	if err := json.Unmarshal(got, &back); err != nil {
		t.Fatal(err)
	}
	msg := gocmp.Comparer(func(a, b error) bool { return errorText(a) == errorText(b) })
	if diff := gocmp.Diff(r, &back, msg); diff != "" {
		t.Errorf("decoded report (-encoded +decoded):\n%s", diff)
	}
	if back.Results[1].Err != nil || errors.Is(back.Results[2].Err, ErrInvalidTransition) {
		t.Errorf("decoded errors: %v, %v; want nil, and a plain message", back.Results[1].Err, back.Results[2].Err)
	}
	// A result and a broken record encode alike by value and by pointer.
	for _, v := range []any{r.Results[2], &r.Results[2], *r.Broken[0], r.Broken[0]} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil || m["error"] == nil || m["error"] == "" {
			t.Errorf("%T encodes as %s, want an error message", v, b)
		}
	}
}
