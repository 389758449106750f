package sim

import (
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestFarMoveLeavesOldMarker: in a long world, the far-move adversary
// strikes moves of old tasks' far starts so that their old marker, due
// days ahead, outlives the move (the Schedule's DELETE of it failed, or
// the call did not learn that its write landed); each such marker is then
// removed by a worker, the reconciler's watch of the older waiting tasks,
// within the bound the reconciler documents for a lost marker (two
// intervals and a quarter, and ten minutes for the turn), not on the day
// it was due. Before the watch read again a task whose marker was not yet
// due (soak seed 4712), the marker stayed to the end of the run.
func TestFarMoveLeavesOldMarker(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h, err := Run(Config{Seed: 11, Long: true})
		if err != nil {
			t.Fatal(err)
		}
		if h.Stats["far-move-struck"] == 0 {
			t.Fatal("no move of a far start was struck")
		}
		bound := h.Params.ReconcileInterval*9/4 + 10*time.Minute
		left := 0
		for _, m := range leftFarMarkers(h) {
			left++
			switch {
			case m.removed.IsZero():
				t.Errorf("the marker %s, left behind by the move of its task at +%s, was never removed", m.key, m.moved.Sub(h.Start))
			case !strings.HasPrefix(m.by, "w"):
				t.Errorf("the marker %s, left behind at +%s, was removed by %s, not by a worker's reconciler", m.key, m.moved.Sub(h.Start), m.by)
			case m.removed.Sub(m.moved) > bound:
				t.Errorf("the marker %s, left behind at +%s, was removed only at +%s, over %s later", m.key, m.moved.Sub(h.Start), m.removed.Sub(h.Start), bound)
			}
		}
		if left == 0 {
			t.Fatalf("%d moves struck, but none left its old marker behind", h.Stats["far-move-struck"])
		}
		t.Logf("%d moves struck, %d old markers left behind", h.Stats["far-move-struck"], left)
	})
}

// leftFar is a far marker that outlived the move of its task's start.
type leftFar struct {
	key            string
	moved, removed time.Time // removed: zero if never
	by             string
}

// leftFarMarkers returns the markers due over 12 hours after they were
// written that were still there a minute after a record write of their
// task moved its start before their time.
func leftFarMarkers(h *History) []leftFar {
	active := h.Prefix + "active/"
	var out []leftFar
	seen := map[string]bool{}
	for i, w := range h.Writes {
		name, ok := strings.CutPrefix(w.Key, active)
		if !ok || w.Method != http.MethodPut || seen[w.Key] {
			continue
		}
		seen[w.Key] = true
		due, err := time.Parse(markerTimeLayout, strings.SplitN(name, "_", 2)[0])
		if err != nil || due.Sub(w.Time) < 12*time.Hour {
			continue
		}
		id := markerTask(name)
		m := leftFar{key: w.Key}
		for _, o := range h.Writes[i+1:] {
			switch {
			case o.Key == w.Key && o.Method == http.MethodDelete:
				m.removed, m.by = o.Time, o.Proc
			case m.moved.IsZero() && o.Record != nil && o.TaskID(h.Prefix) == id && o.Record.RunAt.Before(due.Add(-time.Hour)):
				m.moved = o.Time
			}
			if !m.removed.IsZero() {
				break
			}
		}
		if !m.moved.IsZero() && (m.removed.IsZero() || m.removed.Sub(m.moved) > time.Minute) {
			out = append(out, m)
		}
	}
	return out
}
