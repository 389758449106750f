package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/s3test"
)

// bulkLabel is the row of README.md's table of JSON documents for retry,
// cancel and purge over several tasks.
const bulkLabel = "`retry`, `cancel`, `purge` (several tasks)"

// TestBulkCommands runs retry, cancel and purge over several tasks in
// process: by filter and by ID, the dry run first, one run bounded by
// -limit and continued with -cursor, what is refused on the command line,
// and the exit codes when a task fails or the store cannot be reached.
func TestBulkCommands(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "")
	// run runs the command against st in process and returns its exit
	// code, stdout and stderr.
	run := func(st *s3task.Store, args ...string) (int, string, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		c := newCLI(&out, &errOut, func(string) (string, bool) { return "", false })
		c.store = st
		return c.run(t.Context(), args), out.String(), errOut.String()
	}
	// report runs the command with -json and decodes its report.
	report := func(t *testing.T, st *s3task.Store, code int, args ...string) bulkDoc {
		t.Helper()
		got, out, errOut := run(st, append(args, "-json")...)
		var doc bulkDoc
		dec := json.NewDecoder(strings.NewReader(out))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&doc); got != code || err != nil || dec.More() {
			t.Fatalf("%s: exit %d (want %d), %v\n%s%s", strings.Join(args, " "), got, code, err, out, errOut)
		}
		checkShape(t, bulkLabel, out)
		return doc
	}
	// outcomes are the results of doc as "ID outcome".
	outcomes := func(doc bulkDoc) []string {
		var out []string
		for _, r := range doc.Results {
			out = append(out, r.ID+" "+r.Outcome)
		}
		return out
	}
	status := func(id string) s3task.Status { return f.get(id).Status }

	failed1 := f.task(f.store, "failed", "june")
	failed2 := f.task(f.store, "failed", "july")
	queued := f.task(f.store, "queued", "august")
	done := f.task(f.store, "completed", "may")
	other, err := f.store.Create(f.ctx, s3task.CreateParams{Name: "other type", Type: "csv_export"})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.store.UploadInput(f.ctx, other.ID, strings.NewReader("a\n")); err != nil {
		t.Fatal(err)
	}
	f.rewrite(other.ID, func(x *s3task.Task) { x.Status, x.Attempt, x.LastError = s3task.StatusFailed, 1, "boom" })
	newest := func(tasks ...*s3task.Task) []string {
		var ids []string
		for _, task := range tasks {
			ids = append(ids, task.ID)
		}
		slices.Sort(ids)
		return ids
	}
	mine := newest(failed1, failed2)

	t.Run("retry", func(t *testing.T) {
		dry := report(t, f.store, exitOK, "retry", "-failed", "-type", "csv_enrich", "-dry-run")
		if want := []string{mine[0] + " would_do", mine[1] + " would_do"}; !slices.Equal(outcomes(dry), want) ||
			dry.Action != "retry" || !dry.DryRun || dry.Acted != 2 || dry.Scanned != 5 || dry.NextCursor != "" || dry.Results[0].Status != "failed" {
			t.Errorf("retry -dry-run: %+v, want %v", dry, want)
		}
		if status(failed1.ID) != s3task.StatusFailed || status(failed2.ID) != s3task.StatusFailed {
			t.Fatal("the dry run retried")
		}

		code, out, _ := run(f.store, "retry", "-failed", "-type", "csv_enrich")
		for _, want := range [][]string{{"2 tasks retried, 0 skipped, 0 failed (5 task folders scanned)"}, {"ID", "OUTCOME", "WHY"}, {mine[0], "done", "queued"}} {
			if code != exitOK || !hasRow(out, want...) {
				t.Errorf("retry -failed -type: exit %d, no row %q\n%s", code, want, out)
			}
		}
		if status(failed1.ID) != s3task.StatusQueued || status(failed2.ID) != s3task.StatusQueued || status(other.ID) != s3task.StatusFailed {
			t.Errorf("after retry -failed -type csv_enrich: %s, %s, and the other type %s", status(failed1.ID), status(failed2.ID), status(other.ID))
		}

		// By ID: each reported; a task skipped for its status ends the
		// command as the one-task command would, with exit 4, after the
		// others were done.
		byID := report(t, f.store, exitConflict, "retry", other.ID, done.ID)
		if e := byID.Error; e == nil || e.Code != "invalid_transition" || e.ExitCode != exitConflict || !strings.Contains(e.Message, done.ID) {
			t.Errorf("retry by ID with a completed task: error %+v", e)
		}
		want := map[string]bulkResultDoc{
			other.ID: {ID: other.ID, Outcome: "done", Status: "queued"},
			done.ID:  {ID: done.ID, Outcome: "skipped", Code: "invalid_transition", Reason: "only a failed task can be retried"},
		}
		for _, r := range byID.Results {
			if r != want[r.ID] {
				t.Errorf("retry by ID: %+v, want %+v", r, want[r.ID])
			}
		}
		if byID.Acted != 1 || byID.Skipped != 1 || len(byID.Results) != 2 {
			t.Errorf("retry by ID: %+v", byID)
		}
		// One ID with -dry-run is a bulk run of one: exit 4, as without.
		if one := report(t, f.store, exitConflict, "retry", done.ID, "-dry-run"); !slices.Equal(outcomes(one), []string{done.ID + " skipped"}) {
			t.Errorf("retry ID -dry-run: %+v", one)
		}
	})

	t.Run("cancel, a page at a time", func(t *testing.T) {
		var seen []string
		args := []string{"cancel", "-status", "queued", "-limit", "1", "-reason", "wrong month"}
		for calls := 0; ; calls++ {
			if calls > 10 {
				t.Fatal("the cursor never ran out")
			}
			doc := report(t, f.store, exitOK, args...)
			if doc.Acted > 1 {
				t.Errorf("-limit 1 acted on %d", doc.Acted)
			}
			seen = append(seen, outcomes(doc)...)
			if doc.NextCursor == "" {
				break
			}
			args = append(args[:7:7], "-cursor", doc.NextCursor)
		}
		want := []string{}
		for _, id := range newest(failed1, failed2, queued, other) { // all queued by now
			want = append(want, id+" done")
		}
		if !slices.Equal(seen, want) {
			t.Errorf("cancel -status queued -limit 1, page by page: %v, want %v", seen, want)
		}
		if got := f.get(queued.ID); got.Status != s3task.StatusAbandoned || got.CancelReason != "wrong month" {
			t.Errorf("after cancel: %s, %q", got.Status, got.CancelReason)
		}
		code, out, _ := run(f.store, "cancel", "-status", "abandoned", "-dry-run")
		if code != exitOK || !hasRow(out, "0 tasks would be abandoned, 4 skipped, 0 failed") || !strings.Contains(out, "dry run: nothing was changed") ||
			!hasRow(out, queued.ID, "skipped", "it is abandoned already") {
			t.Errorf("cancel of abandoned tasks, dry run: exit %d\n%s", code, out)
		}
	})

	t.Run("purge", func(t *testing.T) {
		f.srv.Advance(2 * time.Minute) // Purge leaves a task until a minute after its last change
		dry := report(t, f.store, exitOK, "purge", "-status", "abandoned,completed")
		if !dry.DryRun || dry.Acted != 5 || len(f.keys(f.store.Prefix()+done.ID+"/")) == 0 {
			t.Errorf("purge by filter without -yes: %+v, want a dry run of 5", dry)
		}
		code, out, _ := run(f.store, "purge", "-status", "completed")
		if code != exitOK || !hasRow(out, "1 task would be deleted, 0 skipped, 0 failed") || !strings.Contains(out, "run again with -yes to delete") {
			t.Errorf("purge dry run table: exit %d\n%s", code, out)
		}
		gone := report(t, f.store, exitOK, "purge", done.ID, queued.ID, "-yes")
		if !slices.Equal(outcomes(gone), []string{newest(done, queued)[0] + " done", newest(done, queued)[1] + " done"}) || gone.DryRun {
			t.Errorf("purge by ID -yes: %+v", gone)
		}
		for _, id := range []string{done.ID, queued.ID} {
			if keys := f.keys(f.store.Prefix() + id + "/"); len(keys) != 0 {
				t.Errorf("purged task %s left %v", id, keys)
			}
		}
	})

	t.Run("refused", func(t *testing.T) {
		before := f.keys("")
		for _, args := range [][]string{
			{"retry"},
			{"retry", failed1.ID, "-type", "csv_enrich"},
			{"retry", failed1.ID, "-max-scan", "5"},
			{"cancel", "-status", "lost"},
			{"retry", "-failed", "-limit", "0"},
			{"retry", "-failed", "-limit", "1001"},
			{"retry", "-failed", "-max-scan", "10001"},
			{"retry", "-failed", "-meta", "novalue"},
			{"purge", "-older-than", "1h", "-status", "completed"},
			{"purge", "-cursor", "abc"},
			{"purge", "-status", "completed", "-limit", "1001"},
		} {
			f.wantErrorIn(t, run, exitUsage, "usage", args...)
		}
		f.wantErrorIn(t, run, exitUsage, "invalid_id", "retry", failed1.ID, "../"+failed1.ID)
		f.wantErrorIn(t, run, exitUsage, "invalid_cursor", "retry", "-failed", "-cursor", "%%")
		if after := f.keys(""); !slices.Equal(before, after) {
			t.Errorf("refused commands changed the bucket: %v, then %v", before, after)
		}
	})

	t.Run("exit codes", func(t *testing.T) {
		// A middleware refuses one task: the others proceed, the report
		// says which failed, exit 1, and no error document follows it.
		a := f.task(f.store, "failed", "refused")
		b := f.task(f.store, "failed", "allowed")
		errNo := errors.New("not allowed")
		guarded, err := s3task.NewStore(f.srv.Client(), f.srv.Bucket, &s3task.StoreOptions{
			Middleware: []s3task.StoreMiddleware{func(next s3task.CallFunc) s3task.CallFunc {
				return func(ctx context.Context, c *s3task.Call) (*s3task.Task, error) {
					if c.TaskID == a.ID {
						return nil, errNo
					}
					return next(ctx, c)
				}
			}},
		})
		if err != nil {
			t.Fatal(err)
		}
		doc := report(t, guarded, exitFailed, "retry", "-failed")
		if doc.Failed != 1 || doc.Acted != 1 || status(b.ID) != s3task.StatusQueued || status(a.ID) != s3task.StatusFailed {
			t.Errorf("retry with one task refused: %+v", doc)
		}
		for _, r := range doc.Results {
			if r.ID == a.ID && (r.Outcome != "failed" || r.Reason != errNo.Error() || r.Code != "failed") {
				t.Errorf("the refused task: %+v", r)
			}
		}

		// The store cannot be reached: the listing fails, exit 5, and the
		// report says so.
		var cut s3test.Cutter
		cut.Cut()
		down, err := s3task.NewStore(f.srv.Client(cut.Wrap), f.srv.Bucket, nil)
		if err != nil {
			t.Fatal(err)
		}
		doc = report(t, down, exitUnavailable, "cancel", "-status", "queued")
		if doc.Error == nil || doc.Error.ExitCode != exitUnavailable || doc.Error.Code != "unavailable" || len(doc.Results) != 0 {
			t.Errorf("cancel with S3 unreachable: %+v", doc)
		}
	})
}

// wantErrorIn runs a command in process with -json through run, and fails
// t unless it exits with code and the error document names errCode.
func (f *fixture) wantErrorIn(t *testing.T, run func(*s3task.Store, ...string) (int, string, string), code int, errCode string, args ...string) {
	t.Helper()
	got, out, _ := run(f.store, append([]string{"-json"}, args...)...)
	var doc errorDoc
	if err := json.Unmarshal([]byte(out), &doc); got != code || err != nil || doc.Error.Code != errCode {
		t.Errorf("%s: exit %d (want %d), %v\n%s", strings.Join(args, " "), got, code, err, out)
	}
}
