package main

import (
	"slices"
	"strings"
	"testing"
)

// TestPauseCommands: pause, resume and paused change and print the paused
// task types, as the library's Store.Paused then reads them; a repeat
// changes nothing; a type the library refuses is a usage error; -json
// prints the list.
func TestPauseCommands(t *testing.T) {
	t.Parallel()
	f := newFixture(t, buildCommand(t))
	paused := func() []string {
		t.Helper()
		types, err := f.store.Paused(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		return types
	}

	if r := f.want(exitOK, nil, "paused"); !strings.Contains(r.stdout, "no task type is paused") {
		t.Errorf("paused with none:\n%s", r)
	}
	if r := f.want(exitOK, nil, "pause", "csv_enrich"); !strings.Contains(r.stdout, "paused: csv_enrich") {
		t.Errorf("pause csv_enrich:\n%s", r)
	}
	f.want(exitOK, nil, "pause", "csv_enrich") // again: no change, no error
	f.want(exitOK, nil, "pause", "")           // the untyped tasks
	if got := paused(); !slices.Equal(got, []string{"", "csv_enrich"}) {
		t.Errorf("Store.Paused after the pauses = %q", got)
	}
	var doc pausedDoc
	f.want(exitOK, &doc, "-json", "paused")
	if !slices.Equal(doc.Paused, []string{"", "csv_enrich"}) {
		t.Errorf("paused -json = %q", doc.Paused)
	}
	if r := f.want(exitOK, nil, "resume", "csv_enrich"); !strings.Contains(r.stdout, `paused: "" (untyped tasks)`) {
		t.Errorf("resume csv_enrich:\n%s", r)
	}
	f.want(exitOK, nil, "resume", "csv_stats") // not paused: no change
	f.want(exitOK, &doc, "-json", "resume", "")
	if len(doc.Paused) != 0 || doc.Paused == nil || len(paused()) != 0 {
		t.Errorf("after resuming every type: -json %q, Store.Paused %q", doc.Paused, paused())
	}

	f.want(exitUsage, nil, "pause")
	f.want(exitUsage, nil, "pause", "a", "b")
	if r := f.want(exitUsage, nil, "pause", strings.Repeat("t", 129)); !strings.Contains(r.stderr, "invalid") {
		t.Errorf("pause of a type over 128 bytes:\n%s", r)
	}
}
