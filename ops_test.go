package s3task_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/s3tasktest"
)

// The operations tests: Reconcile, Stats, Purge, failure categories and the
// poll and reconcile hooks. (Reconcile racing workers is with the other
// races, in store_concurrency_test.go.)

// cmpSet compares slices of keys or IDs as sets: in any order, and none
// the same as nil. The concurrency tests use it too.
var cmpSet = cmp.Options{cmpopts.SortSlices(func(a, b string) bool { return a < b }), cmpopts.EquateEmpty()}

// setupOps returns an env whose stores name their inputs and outputs .csv.
func setupOps(t *testing.T) *env {
	t.Helper()
	return newEnv(t, &s3task.StoreOptions{InputExt: ".csv", OutputExt: ".csv"})
}

// createAgo creates a task whose creation time (and ID) lies ago in the
// past. It uses a fresh Store whose clock is behind by ago: a Store stamps
// its first write by its own clock, before any server Date corrects it.
func (e *env) createAgo(t *testing.T, ago time.Duration, name string) *s3task.Task {
	t.Helper()
	opts := e.opts
	opts.Clock = func() time.Time { return time.Now().Add(-ago) }
	task, err := e.newStore(t, &opts).Create(e.ctx, s3task.CreateParams{Name: name})
	if err != nil {
		t.Fatalf("Create(%s): %v", name, err)
	}
	if got := time.Since(task.CreatedAt); got < ago-time.Minute || got > ago+time.Minute {
		t.Fatalf("task %q created %s ago, want about %s", name, got, ago)
	}
	return task
}

// pastMarkerSkew moves the server's clock on until the markers written so
// far count as written before any record written from now on: the library
// allows two seconds for the one-second resolution of a marker's
// LastModified.
func (e *env) pastMarkerSkew() { e.srv.Advance(3 * time.Second) }

// withoutMarkers returns the snapshot without the marker folder and the
// wake object, which Reconcile and Submit are allowed to change.
func (e *env) withoutMarkers(snap map[string]string) map[string]string {
	m := map[string]string{}
	for k, v := range snap {
		if !strings.HasPrefix(k, e.store.Prefix()+"active/") && k != e.store.Prefix()+"_wake" {
			m[k] = v
		}
	}
	return m
}

// leftovers returns every object in the bucket but the wake object, which
// Submit and Retry write and nothing deletes.
func (e *env) leftovers() map[string]string {
	m := e.snapshot("")
	delete(m, e.store.Prefix()+"_wake")
	return m
}

// ---- Reconcile ----

func TestReconcileHealsMarkers(t *testing.T) {
	t.Parallel()
	e := setupOps(t)

	// The markers a case leaves a task with.
	const (
		own   = 1 << iota // the one its record calls for
		stale             // one of a phase that is over, written before the record's last change
		fresh             // another, written after the record's last change: a change under way
	)
	cases := []struct {
		name    string
		state   string
		legacy  bool // the record has no due_at, as an earlier version wrote it
		markers int
	}{
		{name: "queued without marker", state: "queued"},
		{name: "running without marker", state: "running"},
		{name: "failed waiting for a retry without marker", state: "failed-waiting"},
		{name: "completed with a stale marker", state: "completed", markers: stale},
		{name: "failed for good with a stale marker", state: "failed", markers: stale},
		{name: "abandoned with a stale marker", state: "abandoned", markers: stale},
		{name: "queued with its marker", state: "queued", markers: own},
		{name: "running with its marker", state: "running", markers: own},
		{name: "completed without marker", state: "completed"},
		{name: "failed for good without marker", state: "failed"},
		// A claim whose delete of the queued marker was lost.
		{name: "running with its marker and a stale one", state: "running", markers: own | stale},
		{name: "running with only a stale marker", state: "running", markers: stale},
		// A change writes its new marker a moment before the record: a
		// fresh marker another than the record's is a change under way (a
		// Submit, a Schedule, a Retry).
		{name: "created just now with a marker", state: "created", markers: fresh},
		{name: "created without marker", state: "created"},
		{name: "queued with its marker and a fresh one", state: "queued", markers: own | fresh},
		{name: "completed with a fresh marker", state: "completed", markers: fresh},
		// Records and markers of earlier versions: active/<id>.
		{name: "legacy queued with its marker", state: "queued", legacy: true, markers: own},
		{name: "legacy queued without marker", state: "queued", legacy: true},
	}
	type prepared struct {
		task      *s3task.Task
		staleKey  string
		freshKey  string
		wantAfter []string
	}
	tasks := map[string]*prepared{} // case name -> task
	var wantRestored, wantRemoved []string

	// First the markers of phases that are over; then, a while later, each
	// record's last change, and the markers written since.
	for _, c := range cases {
		task := e.prepare(t, e.createAgo(t, 0, c.name), c.state)
		e.setMarker(t, task.ID, false)
		p := &prepared{task: task}
		if c.markers&stale != 0 {
			p.staleKey = e.datedMarker(task.ID, task.CreatedAt.Add(-time.Second))
			e.put(t, p.staleKey, nil)
			wantRemoved = append(wantRemoved, p.staleKey)
		}
		tasks[c.name] = p
	}
	e.pastMarkerSkew()
	for _, c := range cases {
		p := tasks[c.name]
		e.rewrite(t, p.task.ID, func(x *stored) {
			if c.legacy {
				x.DueAt = time.Time{}
			}
		})
		p.task = e.get(t, p.task.ID)
		ownKey := e.store.MarkerKey(p.task)
		if c.legacy && ownKey != e.store.Prefix()+"active/"+p.task.ID {
			t.Fatalf("%s: a record without due_at calls for %s, want the plain key of earlier versions", c.name, ownKey)
		}
		if c.markers&own != 0 {
			e.put(t, ownKey, nil)
		}
		if c.markers&fresh != 0 {
			key := e.datedMarker(p.task.ID, e.srv.Now().Add(time.Hour))
			e.put(t, key, nil)
			if finished := p.task.Status == s3task.StatusCompleted || p.task.Status == s3task.StatusAbandoned; finished {
				// No change follows a completed or abandoned task: however
				// fresh, its other markers go at once.
				wantRemoved = append(wantRemoved, key)
			} else {
				p.freshKey = key
				p.wantAfter = append(p.wantAfter, key)
			}
		}
		if needsMarker(e.stored(t, p.task.ID)) {
			p.wantAfter = append(p.wantAfter, ownKey)
			if c.markers&own == 0 {
				wantRestored = append(wantRestored, p.task.ID)
			}
		}
	}

	// Markers whose task has no record at all, dated and plain.
	orphan, legacyOrphan := s3task.NewID(), s3task.NewID()
	for _, key := range []string{e.datedMarker(orphan, e.srv.Now()), e.store.Prefix() + "active/" + legacyOrphan} {
		e.put(t, key, nil)
		wantRemoved = append(wantRemoved, key)
	}

	// Objects in the marker folder that are not markers.
	for _, key := range []string{"active/not-a-task", "active/" + strings.ToLower(s3task.NewID()), "active/nested/" + s3task.NewID(),
		"active/20260621T100000.000Z_not-an-id", "active/yesterday_" + s3task.NewID()} {
		e.put(t, e.store.Prefix()+key, []byte("junk"))
		wantRemoved = append(wantRemoved, e.store.Prefix()+key)
	}

	before := e.snapshot("")
	reconciler := e.newStore(t, nil)

	// A dry run reports every repair and changes nothing.
	dry, err := reconciler.Reconcile(e.ctx, s3task.ReconcileOptions{DryRun: true})
	if err != nil {
		t.Fatalf("Reconcile(DryRun): %v", err)
	}
	if diff := cmp.Diff(before, e.snapshot("")); diff != "" {
		t.Errorf("a dry run changed the bucket (-before +after):\n%s", diff)
	}

	got, err := reconciler.Reconcile(e.ctx, s3task.ReconcileOptions{})
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	wantTasks := len(cases)
	for _, r := range []struct {
		name string
		r    *s3task.ReconcileReport
	}{{"dry run", dry}, {"run", got}} {
		if r.r.Tasks != wantTasks {
			t.Errorf("%s: Tasks = %d, want %d", r.name, r.r.Tasks, wantTasks)
		}
		if diff := cmp.Diff(wantRestored, r.r.Restored, cmpSet); diff != "" {
			t.Errorf("%s: Restored (-want +got):\n%s", r.name, diff)
		}
		if diff := cmp.Diff(wantRemoved, r.r.Removed, cmpSet); diff != "" {
			t.Errorf("%s: Removed (-want +got):\n%s", r.name, diff)
		}
		if len(r.r.Broken) != 0 {
			t.Errorf("%s: Broken = %v, want none", r.name, r.r.Broken)
		}
		if r.r.Clean() {
			t.Errorf("%s: Clean() = true for a run that found repairs", r.name)
		}
	}

	// Every task has the markers its record calls for, and those of changes
	// under way; nothing else.
	var wantLeft []string
	for _, c := range cases {
		p := tasks[c.name]
		if diff := cmp.Diff(p.wantAfter, e.markers(p.task.ID), cmpSet); diff != "" {
			t.Errorf("%s: markers after Reconcile (-want +got):\n%s", c.name, diff)
		}
		wantLeft = append(wantLeft, p.wantAfter...)
	}
	var left []string
	for key := range e.snapshot(e.store.Prefix() + "active/") {
		left = append(left, key)
	}
	if diff := cmp.Diff(wantLeft, left, cmpSet); diff != "" {
		t.Errorf("marker folder after Reconcile (-want +got):\n%s", diff)
	}
	// Reconcile changes markers only (and the wake object, for the tasks it
	// restored): every record, input and output is byte for byte what it
	// was.
	if diff := cmp.Diff(e.withoutMarkers(before), e.withoutMarkers(e.snapshot(""))); diff != "" {
		t.Errorf("Reconcile changed objects other than markers (-before +after):\n%s", diff)
	}

	again, err := reconciler.Reconcile(e.ctx, s3task.ReconcileOptions{})
	if err != nil {
		t.Fatalf("second Reconcile: %v", err)
	}
	if !again.Clean() || again.Tasks != wantTasks {
		t.Errorf("second Reconcile: Clean() = %t, Tasks = %d, report %+v; want a clean run over %d tasks", again.Clean(), again.Tasks, again, wantTasks)
	}

	// The fresh markers outlive any change they could be part of: ten
	// minutes on, they are taken for what a change that died left behind.
	e.srv.Advance(11 * time.Minute)
	late, err := reconciler.Reconcile(e.ctx, s3task.ReconcileOptions{})
	if err != nil {
		t.Fatalf("Reconcile ten minutes on: %v", err)
	}
	var wantLate []string
	for _, c := range cases {
		if key := tasks[c.name].freshKey; key != "" {
			wantLate = append(wantLate, key)
		}
	}
	if diff := cmp.Diff(wantLate, late.Removed, cmpSet); diff != "" || len(late.Restored) != 0 {
		t.Errorf("Reconcile ten minutes on: restored %v, removed (-want +got):\n%s", late.Restored, diff)
	}
	for _, c := range cases {
		p := tasks[c.name]
		want := slices.DeleteFunc(slices.Clone(p.wantAfter), func(k string) bool { return k == p.freshKey })
		if diff := cmp.Diff(want, e.markers(p.task.ID), cmpSet); diff != "" {
			t.Errorf("%s: markers ten minutes on (-want +got):\n%s", c.name, diff)
		}
	}
}

func TestReconcileLeavesBrokenRecordsAlone(t *testing.T) {
	t.Parallel()
	e := setupOps(t)
	good := e.prepare(t, e.createAgo(t, 0, "readable"), "queued")

	corrupt, future := s3task.NewID(), s3task.NewID()
	corruptBody := []byte(`{"schema_version": 1, "task_id": "` + corrupt + `", "status": "que`)
	futureBody := []byte(`{"schema_version": 2, "task_id": "` + future + `", "status": "parked", "new_field": {"kept": true}}`)
	e.put(t, e.recordKey(corrupt), corruptBody)
	e.put(t, e.recordKey(future), futureBody)
	e.setMarker(t, corrupt, true) // an unreadable task's marker is kept too
	before := e.snapshot("")

	for run := 1; run <= 2; run++ {
		r, err := e.newStore(t, nil).Reconcile(e.ctx, s3task.ReconcileOptions{})
		if err != nil {
			t.Fatalf("run %d: Reconcile: %v", run, err)
		}
		if r.Tasks != 1 || len(r.Restored) != 0 || len(r.Removed) != 0 {
			t.Errorf("run %d: Tasks %d, Restored %v, Removed %v; want 1 task (%s) and no repair", run, r.Tasks, r.Restored, r.Removed, good.ID)
		}
		var keys []string
		for _, b := range r.Broken {
			keys = append(keys, b.Key)
			want := s3task.ErrCorruptRecord
			if b.Key == e.recordKey(future) {
				want = s3task.ErrUnsupportedSchema
			}
			if !errors.Is(b, want) {
				t.Errorf("run %d: broken %s: %v, want an error wrapping %v", run, b.Key, b, want)
			}
		}
		if diff := cmp.Diff([]string{e.recordKey(corrupt), e.recordKey(future)}, keys, cmpSet); diff != "" {
			t.Errorf("run %d: Broken keys (-want +got):\n%s", run, diff)
		}
		if r.Clean() {
			t.Errorf("run %d: Clean() = true with broken records", run)
		}
		if diff := cmp.Diff(before, e.snapshot("")); diff != "" {
			t.Errorf("run %d: Reconcile changed the bucket (-before +after):\n%s", run, diff)
		}
	}
	for key, want := range map[string][]byte{e.recordKey(corrupt): corruptBody, e.recordKey(future): futureBody} {
		if got, _ := e.object(key); string(got) != string(want) {
			t.Errorf("%s is now %q, want it byte for byte as written: %q", key, got, want)
		}
	}
}

func TestReconcileSince(t *testing.T) {
	t.Parallel()
	e := setupOps(t)
	oldQueued := e.prepare(t, e.createAgo(t, 2*time.Hour, "old queued"), "queued")
	oldDone := e.prepare(t, e.createAgo(t, 2*time.Hour, "old completed"), "completed")
	newQueued := e.prepare(t, e.createAgo(t, 0, "new queued"), "queued")
	newDone := e.prepare(t, e.createAgo(t, 0, "new completed"), "completed")
	for _, id := range []string{oldQueued.ID, newQueued.ID} {
		e.setMarker(t, id, false)
	}
	// The completed tasks keep the marker of their queued phase, written
	// before they completed.
	staleKey := map[string]string{}
	for _, task := range []*s3task.Task{oldDone, newDone} {
		staleKey[task.ID] = e.datedMarker(task.ID, task.CreatedAt)
		e.put(t, staleKey[task.ID], nil)
	}
	e.pastMarkerSkew()
	for _, task := range []*s3task.Task{oldDone, newDone} {
		e.rewrite(t, task.ID, func(*stored) {}) // their last change
	}
	// Markers without records, one from before the window and one in it.
	oldOrphan := s3task.NewIDAt(time.Now().Add(-3 * time.Hour))
	newOrphan := s3task.NewID()
	e.setMarker(t, oldOrphan, true)
	e.setMarker(t, newOrphan, true)
	orphanKey := map[string]string{oldOrphan: e.markerKey(oldOrphan), newOrphan: e.markerKey(newOrphan)}

	r, err := e.newStore(t, nil).Reconcile(e.ctx, s3task.ReconcileOptions{Since: time.Now().Add(-time.Hour)})
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if r.Tasks != 2 {
		t.Errorf("Tasks = %d, want the 2 created in the last hour", r.Tasks)
	}
	if diff := cmp.Diff([]string{newQueued.ID}, r.Restored); diff != "" {
		t.Errorf("Restored (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{staleKey[newDone.ID], orphanKey[newOrphan]}, r.Removed, cmpSet); diff != "" {
		t.Errorf("Removed (-want +got):\n%s", diff)
	}
	for id, want := range map[string]bool{
		oldQueued.ID: false, oldDone.ID: true, oldOrphan: true, // out of the window: left as they were
		newQueued.ID: true, newDone.ID: false, newOrphan: false,
	} {
		if got := e.hasMarker(id); got != want {
			t.Errorf("marker of %s present = %t, want %t", id, got, want)
		}
	}
	if !e.hasOwnMarker(e.get(t, newQueued.ID)) {
		t.Errorf("the restored marker of %s is not the one its record calls for: %v", newQueued.ID, e.markers(newQueued.ID))
	}

	all, err := e.newStore(t, nil).Reconcile(e.ctx, s3task.ReconcileOptions{})
	if err != nil {
		t.Fatalf("Reconcile without Since: %v", err)
	}
	if all.Tasks != 4 || !slices.Equal(all.Restored, []string{oldQueued.ID}) {
		t.Errorf("Reconcile without Since: Tasks %d, Restored %v; want 4 tasks and %s restored", all.Tasks, all.Restored, oldQueued.ID)
	}
	if diff := cmp.Diff([]string{staleKey[oldDone.ID], orphanKey[oldOrphan]}, all.Removed, cmpSet); diff != "" {
		t.Errorf("Reconcile without Since: Removed (-want +got):\n%s", diff)
	}
}

// TestReconcileRemovesMarkerOfDeadSubmit leaves a created task with the
// marker a Submit writes before the record, for longer than any Submit
// takes between its two writes: that Submit died after writing the marker.
// The server's clock is moved on, so the record and the marker are both
// old.
func TestReconcileRemovesMarkerOfDeadSubmit(t *testing.T) {
	t.Parallel()
	e := setupOps(t)
	dead := e.prepare(t, e.createAgo(t, 0, "submit died"), "created")
	key := e.datedMarker(dead.ID, e.srv.Now()) // due at once, as a Submit's
	e.put(t, key, nil)

	// While the Submit may still be under way, its marker stays.
	r, err := e.newStore(t, nil).Reconcile(e.ctx, s3task.ReconcileOptions{})
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if !r.Clean() || !slices.Equal(e.markers(dead.ID), []string{key}) {
		t.Errorf("Reconcile right after the marker: report %+v, markers %v; want a clean run, the marker kept", r, e.markers(dead.ID))
	}

	e.srv.Advance(11 * time.Minute)
	r, err = e.newStore(t, nil).Reconcile(e.ctx, s3task.ReconcileOptions{})
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if !slices.Equal(r.Removed, []string{key}) || len(r.Restored) != 0 {
		t.Errorf("Reconcile removed %v, restored %v; want only the marker %s removed", r.Removed, r.Restored, key)
	}
	if e.hasMarker(dead.ID) {
		t.Error("the dead Submit's marker is still there")
	}
	if got := e.get(t, dead.ID); got.Status != s3task.StatusCreated {
		t.Errorf("the task is %s, want it still created (its upload may be retried)", got.Status)
	}
}

// TestReconcileDuringSlowSubmit runs a Reconcile between the two writes of
// a Submit (marker, then record) of a task created twenty minutes earlier:
// a user who took a while to upload. The marker is young; only the record
// is old. Reconcile must not leave the task queued without a marker.
func TestReconcileDuringSlowSubmit(t *testing.T) {
	t.Parallel()
	e := setupOps(t)
	task := e.prepare(t, e.createAgo(t, 20*time.Minute, "slow upload"), "created")

	release, submitted := e.heldCall(t, "Submit to write its marker and reach its record write",
		func(key string) bool { return key == e.recordKey(task.ID) },
		func(st *s3task.Store) (*s3task.Task, error) { return st.Submit(e.ctx, task.ID) })
	if !e.hasMarker(task.ID) {
		t.Fatal("Submit reached its record write without writing the marker first")
	}

	if _, err := e.newStore(t, nil).Reconcile(e.ctx, s3task.ReconcileOptions{}); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	release()
	if err := await(t, submitted, "Submit to return"); err != nil {
		t.Fatalf("Submit: %v", err)
	}
	got := e.get(t, task.ID)
	if got.Status != s3task.StatusQueued {
		t.Fatalf("after Submit: status %s, want queued", got.Status)
	}
	if !e.hasOwnMarker(got) {
		t.Errorf("task %s is queued but Reconcile deleted the marker its Submit had just written: "+
			"it judged the marker stale by the record's updated_at (20 minutes ago), not by the marker's own age, "+
			"and its re-check ran before the record write; no worker will see the task until the next reconcile", task.ID)
	}
}

// TestWorkerReconcileHealsLostMarker gives a worker a short
// ReconcileInterval and a MaxPollInterval far beyond the test: no Submit
// touches the wake object, so only the worker's own reconcile can bring it
// to the task whose marker is missing.
func TestWorkerReconcileHealsLostMarker(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := setupOps(t)
		reports := make(chan *s3task.ReconcileReport, 1000)
		completed := make(chan *s3task.Task, 1)
		opts := quickWorker("", s3task.Hooks{
			OnReconcile: func(r *s3task.ReconcileReport) { offer(reports, r) },
			OnComplete:  func(t *s3task.Task) { completed <- t },
		})
		opts.MaxPollInterval = time.Hour
		opts.ReconcileInterval = 50 * time.Millisecond
		rec := &recorder{}
		runWorker(t, e.newStore(t, nil, rec.wrap), succeed, opts)

		// A queued task as a Submit whose marker was lost would leave it, and
		// no wake object: Create and UploadInput do not write one. (The
		// worker's reconcile may restore the marker at any moment from here.)
		task := e.prepare(t, e.createAgo(t, 0, "lost marker"), "created")
		e.rewrite(t, task.ID, func(x *stored) {
			x.Status, x.DueAt = s3task.StatusQueued, e.srv.Now().UTC().Truncate(time.Millisecond)
		})
		queued := e.get(t, task.ID)
		if _, ok := e.object(e.store.Prefix() + "_wake"); ok {
			t.Fatal("the test needs a bucket without a wake object")
		}

		deadline := time.After(testWait)
		for healed := false; !healed; {
			select {
			case r := <-reports:
				healed = slices.Contains(r.Restored, task.ID)
			case <-deadline:
				t.Fatalf("no OnReconcile report restored the marker of %s within %s", task.ID, testWait)
			}
		}
		// The restored marker may be gone already: the reconcile wakes the
		// worker, which claims the task at once. It must have been written.
		if rec.index("PUT "+e.store.MarkerKey(queued)) < 0 {
			t.Fatalf("OnReconcile reported the marker restored but %s was never written: %s", e.store.MarkerKey(queued), rec)
		}
		// A worker polls the wake object every PollInterval (5ms here), so a
		// repaired marker should bring a worker within well under a second
		// (of the bubble's clock, which a busy machine does not move).
		select {
		case got := <-completed:
			if got.ID != task.ID {
				t.Errorf("completed %s, want %s", got.ID, task.ID)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("the worker's reconcile restored the marker of queued task %s, but no worker ran the task within 5s: "+
				"Reconcile does not touch the wake object and the worker does not list after its own repairs, "+
				"so the task waits for MaxPollInterval (%s here, 60s by default)", task.ID, opts.MaxPollInterval)
		}
	})
}

// TestWorkerReconcileDropsPurgedTasksOldMarker: a task whose start a
// Schedule moved, leaving its old marker due days ahead (the DELETE
// failed), and which was then purged, loses that marker at the next turn
// of the reconciler that watched it, though its ID lies outside the
// reconcile window; not on the day the marker falls due (simulation seed
// 190).
func TestWorkerReconcileDropsPurgedTasksOldMarker(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := setupOps(t)
		task := e.prepare(t, e.createAgo(t, 0, "purged, old marker left"), "queued")
		far, err := e.store.Schedule(e.ctx, task.ID, time.Now().Add(48*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		marker := e.store.MarkerKey(far)
		if !e.exists(marker) {
			t.Fatalf("Schedule wrote no marker %s", marker)
		}
		reports := make(chan *s3task.ReconcileReport, 1000)
		opts := quickWorker("", s3task.Hooks{OnReconcile: func(r *s3task.ReconcileReport) { offer(reports, r) }})
		opts.MaxPollInterval = time.Hour
		opts.ReconcileInterval = time.Second
		opts.ReconcileWindow = 10 * time.Second
		runWorker(t, e.newStore(t, nil), succeed, opts)

		// The first turn walks the task and watches it from then on; once
		// its ID is older than the window, only the watch reads it.
		first := await(t, reports, "a reconcile turn")
		if first.Tasks == 0 {
			t.Fatalf("the first turn met no task: %+v", first)
		}
		time.Sleep(20 * time.Second)
		e.del(t, e.recordKey(task.ID)) // as Purge leaves it: the record gone, the old marker not
		deadline := time.After(time.Minute)
		for e.exists(marker) {
			select {
			case <-reports:
			case <-deadline:
				t.Fatalf("the marker %s of purged task %s is still there a minute (60 turns) later", marker, task.ID)
			}
		}
	})
}

// ---- Hooks ----

func TestWorkerOnPollHook(t *testing.T) {
	t.Parallel()
	e := setupOps(t)
	var ids []string
	for i := range 3 {
		ids = append(ids, e.prepare(t, e.createAgo(t, 0, fmt.Sprintf("poll %d", i)), "queued").ID)
	}
	polls := make(chan s3task.PollStats, 1000)
	completed := make(chan *s3task.Task, 100)
	gate := make(chan struct{}) // closed to let the handlers return
	opts := quickWorker("", s3task.Hooks{
		OnPoll:     func(p s3task.PollStats) { offer(polls, p) },
		OnComplete: func(t *s3task.Task) { offer(completed, t) },
	})
	opts.Concurrency = 2
	runWorker(t, e.newStore(t, nil), s3task.HandlerFunc(func(ctx context.Context, _ *s3task.Job) error {
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}), opts)

	// The first listing finds the three markers and starts as many tasks as
	// there are slots.
	first := await(t, polls, "the first OnPoll")
	if first.Markers != 3 || first.Started != 2 || first.Took <= 0 {
		t.Errorf("first OnPoll = %+v, want 3 markers, 2 started and a positive duration", first)
	}
	close(gate)
	started := first.Started
	waitUntil(t, "every task completes and OnPoll has counted its start", func() bool {
		for {
			select {
			case p := <-polls:
				started += p.Started
				if p.Started > p.Markers || p.Started > opts.Concurrency {
					t.Errorf("OnPoll = %+v: more started than markers or slots", p)
				}
				continue
			default:
			}
			return len(completed) == len(ids) && started == len(ids)
		}
	})
}

// ---- Failure categories ----

func TestFailureCategories(t *testing.T) {
	t.Parallel()
	base := errors.New("row 7: bad date")

	t.Run("constructors combine", func(t *testing.T) {
		t.Parallel()
		cases := []struct {
			name      string
			err       error
			permanent bool
		}{
			{"Permanent(WithCategory)", s3task.Permanent(s3task.WithCategory(base, "x")), true},
			{"WithCategory(Permanent)", s3task.WithCategory(s3task.Permanent(base), "x"), true},
			{"RetryAfter(WithCategory)", s3task.RetryAfter(s3task.WithCategory(base, "x"), time.Minute), false},
			{"wrapped by fmt.Errorf", fmt.Errorf("import: %w", s3task.Permanent(s3task.WithCategory(base, "x"))), true},
		}
		for _, c := range cases {
			if got := s3task.IsPermanent(c.err); got != c.permanent {
				t.Errorf("%s: IsPermanent = %t, want %t", c.name, got, c.permanent)
			}
			if !errors.Is(c.err, base) {
				t.Errorf("%s: the handler's error is not in the chain", c.name)
			}
			if !strings.Contains(c.err.Error(), base.Error()) {
				t.Errorf("%s: message %q lost the handler's", c.name, c.err)
			}
		}
		for name, err := range map[string]error{
			"Permanent(nil)":    s3task.Permanent(nil),
			"WithCategory(nil)": s3task.WithCategory(nil, "x"),
			"RetryAfter(nil)":   s3task.RetryAfter(nil, time.Second),
		} {
			if err != nil {
				t.Errorf("%s = %v, want nil", name, err)
			}
		}
	})

	t.Run("recorded by the worker", func(t *testing.T) {
		t.Parallel()
		e := setupOps(t)
		type outcome struct {
			category string
			final    bool          // no retry scheduled
			retryIn  time.Duration // with a retry: about how far ahead
		}
		cases := map[string]struct {
			fail func() error
			want outcome
		}{
			"permanent with category": {func() error { return s3task.Permanent(s3task.WithCategory(base, "x")) }, outcome{"x", true, 0}},
			"category of permanent":   {func() error { return s3task.WithCategory(s3task.Permanent(base), "x") }, outcome{"x", true, 0}},
			"wrapped":                 {func() error { return fmt.Errorf("step 2: %w", s3task.Permanent(s3task.WithCategory(base, "x"))) }, outcome{"x", true, 0}},
			"permanent":               {func() error { return s3task.Permanent(base) }, outcome{s3task.CategoryPermanent, true, 0}},
			"plain":                   {func() error { return base }, outcome{s3task.CategoryTransient, false, time.Hour}},
			"retry after with category": {func() error { return s3task.RetryAfter(s3task.WithCategory(base, "upstream"), 3*time.Hour) },
				outcome{"upstream", false, 3 * time.Hour}},
			"panic": {func() error { panic("index out of range") }, outcome{s3task.CategoryPanic, false, time.Hour}},
		}
		failed := make(chan *s3task.Task, len(cases))
		opts := quickWorker("", s3task.Hooks{OnFail: func(t *s3task.Task, _ error) { failed <- t }})
		opts.Backoff = func(int) time.Duration { return time.Hour }
		runWorker(t, e.newStore(t, nil), s3task.HandlerFunc(func(_ context.Context, job *s3task.Job) error {
			return cases[job.Task.Name].fail()
		}), opts)
		names := map[string]string{}
		for name := range cases {
			names[e.prepare(t, e.createAgo(t, 0, name), "queued").ID] = name
		}
		for range cases {
			got := await(t, failed, "a failure")
			stored := e.get(t, got.ID)
			name := names[got.ID]
			want := cases[name].want
			if stored.ErrorCategory != want.category || stored.Terminal() != want.final || stored.Status != s3task.StatusFailed {
				t.Errorf("%s: stored %s, error_category %q, final %t; want failed, %q, final %t",
					name, stored.Status, stored.ErrorCategory, stored.Terminal(), want.category, want.final)
			}
			if !want.final {
				if in := time.Until(stored.RetryAt); in < want.retryIn-time.Minute || in > want.retryIn+time.Minute {
					t.Errorf("%s: retry_at in %s, want about %s", name, in, want.retryIn)
				}
			}
			if stored.LastError == "" {
				t.Errorf("%s: no last_error", name)
			}
		}
	})
}

// ---- Stats ----

func TestStats(t *testing.T) {
	t.Parallel()
	e := setupOps(t)

	// Oldest first. A created task waits for its upload, not for a worker,
	// so the oldest unfinished task is the queued one after it.
	e.createAgo(t, 2*time.Hour, "created, oldest of all")
	oldestQueued := e.createAgo(t, time.Hour, "queued, oldest unfinished")

	// Failures and completions made by a real worker.
	handler := s3task.HandlerFunc(func(_ context.Context, job *s3task.Job) error {
		switch job.Task.Name {
		case "bad input":
			return s3task.Permanent(s3task.WithCategory(errors.New("row 3 has no email"), "bad_input"))
		case "permanent":
			return s3task.Permanent(errors.New("unsupported encoding"))
		case "flaky":
			return s3task.RetryAfter(s3task.WithCategory(errors.New("upstream timed out"), "upstream"), time.Hour)
		case "second attempt":
			if job.Task.Attempt == 1 {
				return errors.New("connection reset")
			}
		}
		return nil
	})
	worked := map[string]string{} // name -> ID
	for _, name := range []string{"bad input", "permanent", "flaky", "ok", "second attempt"} {
		worked[name] = e.prepare(t, e.createAgo(t, 0, name), "queued").ID
	}
	stopWorker := runWorker(t, e.newStore(t, nil), handler, quickWorker("", s3task.Hooks{}))
	settled := func(name string, ok func(*s3task.Task) bool) bool { return ok(e.get(t, worked[name])) }
	isFailed := func(x *s3task.Task) bool { return x.Status == s3task.StatusFailed }
	isDone := func(x *s3task.Task) bool { return x.Status == s3task.StatusCompleted }
	waitUntil(t, "the worker settles its five tasks", func() bool {
		return settled("bad input", isFailed) && settled("permanent", isFailed) && settled("flaky", isFailed) &&
			settled("ok", isDone) && settled("second attempt", isDone)
	})
	stopWorker()

	// The rest, with no worker running.
	e.prepare(t, oldestQueued, "queued")
	for i := range 2 {
		e.prepare(t, e.createAgo(t, 0, fmt.Sprintf("queued %d", i)), "queued")
	}
	e.prepare(t, e.createAgo(t, 0, "running"), "running")
	third := e.prepare(t, e.createAgo(t, 0, "running, third attempt"), "running")
	e.rewrite(t, third.ID, func(x *stored) { x.Attempt = 3 })
	e.prepare(t, e.createAgo(t, 0, "abandoned"), "abandoned")
	broken := s3task.NewID()
	e.put(t, e.recordKey(broken), []byte("{not json"))

	stats := e.newStore(t, nil, e.count.Wrap)
	st, err := stats.Stats(e.ctx, s3task.StatsOptions{})
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	want := &s3task.Stats{
		Tasks: 12,
		ByStatus: map[s3task.Status]int{
			s3task.StatusCreated: 1, s3task.StatusQueued: 3, s3task.StatusRunning: 2,
			s3task.StatusCompleted: 2, s3task.StatusFailed: 3, s3task.StatusAbandoned: 1,
		},
		Unfinished:       6, // 3 queued, 2 running, 1 waiting for its retry
		UnfinishedByType: map[string]int{"": 6},
		AwaitingInput:    1, // the created one, younger than AbandonCreatedAfter
		WaitingRetry:     1,
		OverAttempts:     2, // "second attempt" and "running, third attempt"
		Failures:         map[string]int{"bad_input": 1, s3task.CategoryPermanent: 1, "upstream": 1},
		Broken:           1,
		ByType: map[string]map[s3task.Status]int{"": {
			s3task.StatusCreated: 1, s3task.StatusQueued: 3, s3task.StatusRunning: 2,
			s3task.StatusCompleted: 2, s3task.StatusFailed: 3, s3task.StatusAbandoned: 1,
		}},
	}
	// The ages run on the machine's clock here; TestStatsWaiting pins the
	// waits exactly. Scheduled is compared: none of these starts later.
	ignore := cmpopts.IgnoreFields(s3task.Stats{}, "OldestUnfinished", "OldestUnfinishedAge", "OldestWaiting", "OldestWaitingAge", "WaitByType")
	if diff := cmp.Diff(want, st, ignore); diff != "" {
		t.Errorf("Stats (-want +got):\n%s", diff)
	}
	if st.OldestUnfinished == nil || st.OldestUnfinished.ID != oldestQueued.ID {
		t.Errorf("OldestUnfinished = %+v, want %s (%q)", st.OldestUnfinished, oldestQueued.ID, oldestQueued.Name)
	}
	if age := st.OldestUnfinishedAge; age < 55*time.Minute || age > 65*time.Minute {
		t.Errorf("OldestUnfinishedAge = %s, want about an hour", age)
	}
	// The queued task created an hour ago was submitted just now: it has
	// waited for a worker since then, not since its creation.
	if st.OldestWaiting == nil || st.OldestWaiting.ID != oldestQueued.ID || st.OldestWaitingAge > 30*time.Minute {
		t.Errorf("OldestWaiting = %+v, waiting %s; want %s (%q), waiting since its submit", st.OldestWaiting, st.OldestWaitingAge, oldestQueued.ID, oldestQueued.Name)
	}
	// One GET of the paused object, so that OldestWaiting leaves paused
	// types out, then the LIST and a GET per record.
	if c := e.count.Counts(); c["GET"] != 14 || c["LIST"] != 1 || e.count.Total() != 15 {
		t.Errorf("Stats over 13 records made %s, want 1 LIST and 14 GETs (the paused object and 13 records)", &e.count)
	}

	over2, err := stats.Stats(e.ctx, s3task.StatsOptions{AttemptsOver: 2})
	if err != nil {
		t.Fatalf("Stats(AttemptsOver 2): %v", err)
	}
	if over2.OverAttempts != 1 {
		t.Errorf("OverAttempts with AttemptsOver 2 = %d, want 1", over2.OverAttempts)
	}
	if _, err := stats.Stats(e.ctx, s3task.StatsOptions{AttemptsOver: -1}); !errors.Is(err, s3task.ErrInvalidArgument) {
		t.Errorf("Stats(AttemptsOver -1) = %v, want ErrInvalidArgument", err)
	}

	t.Run("MaxTasks", func(t *testing.T) {
		for _, max := range []int{1, 5, 12} {
			e.count.Reset()
			st, err := stats.Stats(e.ctx, s3task.StatsOptions{MaxTasks: max})
			if err != nil {
				t.Fatalf("Stats(MaxTasks %d): %v", max, err)
			}
			if !st.Truncated || st.Tasks+st.Broken != max {
				t.Errorf("MaxTasks %d: Truncated %t, Tasks %d, Broken %d; want truncated after %d records", max, st.Truncated, st.Tasks, st.Broken, max)
			}
			if c := e.count.Counts(); c["GET"] > max+1 || c["LIST"] > 2 {
				t.Errorf("MaxTasks %d: %s; want at most %d GETs (the paused object and %[1]d records) and a LIST or two", max, &e.count, max+1)
			}
		}
		st, err := stats.Stats(e.ctx, s3task.StatsOptions{MaxTasks: 13})
		if err != nil || st.Truncated || st.Tasks != 12 {
			t.Errorf("MaxTasks 13 (all of them) = %+v, %v; want 12 tasks, not truncated", st, err)
		}
		st, err = stats.Stats(e.ctx, s3task.StatsOptions{MaxTasks: -1})
		if err != nil || st.Truncated || st.Tasks != 12 {
			t.Errorf("MaxTasks -1 (no cap) = %+v, %v; want 12 tasks, not truncated", st, err)
		}
	})

	t.Run("Since", func(t *testing.T) {
		e.count.Reset()
		st, err := stats.Stats(e.ctx, s3task.StatsOptions{Since: time.Now().Add(-30 * time.Minute)})
		if err != nil {
			t.Fatalf("Stats(Since): %v", err)
		}
		if st.Tasks != 10 || st.ByStatus[s3task.StatusCreated] != 0 || st.ByStatus[s3task.StatusQueued] != 2 || st.Unfinished != 5 || st.Truncated {
			t.Errorf("Since 30 minutes: %+v; want the 10 recent tasks, 2 of them queued, 5 unfinished", st)
		}
		if st.OldestUnfinished == nil || st.OldestUnfinished.ID != worked["flaky"] {
			t.Errorf("Since 30 minutes: OldestUnfinished = %+v, want the flaky task %s", st.OldestUnfinished, worked["flaky"])
		}
		if c := e.count.Counts(); c["GET"] != 12 {
			t.Errorf("Since 30 minutes read %s; want 12 GETs (the paused object and 11 records), none for the older tasks", &e.count)
		}
	})
}

// Stats.OldestWaiting dates a task's wait from when it fell due: its
// submit, its RunAt, its retry time, or the Retry that queued it again,
// never its creation. A task still to start (scheduled) or to retry does
// not wait, nor does a running one, nor one of a paused type. The alert
// the README documents rests on it: counted from creation, as
// OldestUnfinishedAge is, a task scheduled 40 minutes ahead looks stuck
// for half an hour. Each case runs in a synctest bubble, where the
// server's clock moves only when the case advances it, so the ages are
// exact.
func TestStatsWaiting(t *testing.T) {
	t.Parallel()
	// queue submits a task of type typ whose start is in after the
	// server's now (0: none).
	queue := func(t *testing.T, e *env, name, typ string, in time.Duration) *s3task.Task {
		t.Helper()
		p := s3task.CreateParams{Name: name, Type: typ}
		if in > 0 {
			p.RunAt = e.srv.Now().Add(in)
		}
		return s3tasktest.Submit(t, e.store, p, []byte(testInput))
	}
	// fail runs the task once with a handler that fails it with a retry in
	// retry (negative: for good).
	fail := func(t *testing.T, e *env, task *s3task.Task, retry time.Duration) {
		t.Helper()
		err := errors.New("upstream timed out")
		if retry < 0 {
			err = s3task.Permanent(err)
		} else {
			err = s3task.RetryAfter(err, retry)
		}
		res := s3tasktest.Run(t, e.store, s3task.HandlerFunc(func(context.Context, *s3task.Job) error { return err }), task.ID)
		if res.Task.Status != s3task.StatusFailed {
			t.Fatalf("task %q is %s after its failed attempt, want failed", task.Name, res.Task.Status)
		}
	}
	tests := []struct {
		name  string
		plant func(t *testing.T, e *env) // makes the tasks and moves the server's clock
		// What Stats says: the name of OldestWaiting ("" for none) and
		// its age, Scheduled, WaitingRetry, WaitByType, and the
		// OldestUnfinishedAge beside it, which counts from creation.
		waiting         string
		age             time.Duration
		scheduled       int
		retry           int
		byType          map[string]time.Duration
		unfinishedSince time.Duration
	}{{
		name: "scheduled ahead is not waiting",
		plant: func(t *testing.T, e *env) {
			queue(t, e, "nightly", "report", 40*time.Minute)
			e.srv.Advance(30 * time.Minute)
		},
		scheduled: 1, byType: map[string]time.Duration{}, unfinishedSince: 30 * time.Minute,
	}, {
		name: "scheduled task waits from its RunAt once it has come",
		plant: func(t *testing.T, e *env) {
			queue(t, e, "nightly", "report", 10*time.Minute)
			e.srv.Advance(25 * time.Minute)
		},
		waiting: "nightly", age: 15 * time.Minute,
		byType: map[string]time.Duration{"report": 15 * time.Minute}, unfinishedSince: 25 * time.Minute,
	}, {
		name: "queued task waits from its submit, not its creation",
		plant: func(t *testing.T, e *env) {
			task, err := e.store.Create(e.ctx, s3task.CreateParams{Name: "late upload", Type: "import"})
			if err != nil {
				t.Fatal(err)
			}
			e.srv.Advance(20 * time.Minute) // awaiting its input: not waiting for a worker
			e.prepare(t, task, "queued")
			e.srv.Advance(5 * time.Minute)
		},
		waiting: "late upload", age: 5 * time.Minute,
		byType: map[string]time.Duration{"import": 5 * time.Minute}, unfinishedSince: 25 * time.Minute,
	}, {
		name: "retry still to come is not waiting",
		plant: func(t *testing.T, e *env) {
			fail(t, e, queue(t, e, "flaky", "import", 0), 10*time.Minute)
			e.srv.Advance(4 * time.Minute)
		},
		retry: 1, byType: map[string]time.Duration{}, unfinishedSince: 4 * time.Minute,
	}, {
		name: "retry waits from its retry time once it has come",
		plant: func(t *testing.T, e *env) {
			fail(t, e, queue(t, e, "flaky", "import", 0), 10*time.Minute)
			e.srv.Advance(16 * time.Minute)
		},
		waiting: "flaky", age: 6 * time.Minute, retry: 1,
		byType: map[string]time.Duration{"import": 6 * time.Minute}, unfinishedSince: 16 * time.Minute,
	}, {
		name: "Retry of a dead task waits from the Retry",
		plant: func(t *testing.T, e *env) {
			task := queue(t, e, "fixed by hand", "import", 0)
			fail(t, e, task, -1)
			e.srv.Advance(time.Hour)
			if _, err := e.store.Retry(e.ctx, task.ID); err != nil {
				t.Fatal(err)
			}
			e.srv.Advance(2 * time.Minute)
		},
		waiting: "fixed by hand", age: 2 * time.Minute,
		byType: map[string]time.Duration{"import": 2 * time.Minute}, unfinishedSince: time.Hour + 2*time.Minute,
	}, {
		name: "running task is not waiting",
		plant: func(t *testing.T, e *env) {
			task, err := e.store.Create(e.ctx, s3task.CreateParams{Name: "busy", Type: "import"})
			if err != nil {
				t.Fatal(err)
			}
			e.prepare(t, task, "running")
			e.srv.Advance(20 * time.Minute)
		},
		byType: map[string]time.Duration{}, unfinishedSince: 20 * time.Minute,
	}, {
		name: "paused type is left out",
		plant: func(t *testing.T, e *env) {
			queue(t, e, "paused import", "import", 0)
			queue(t, e, "paused import, scheduled", "import", time.Hour)
			e.srv.Advance(10 * time.Minute)
			queue(t, e, "thumbnail", "resize", 0)
			e.srv.Advance(3 * time.Minute)
			if err := e.store.Pause(e.ctx, "import"); err != nil {
				t.Fatal(err)
			}
		},
		waiting: "thumbnail", age: 3 * time.Minute, scheduled: 1, // a paused type's scheduled tasks still count
		byType: map[string]time.Duration{"resize": 3 * time.Minute}, unfinishedSince: 13 * time.Minute,
	}, {
		name: "WaitByType holds each type's oldest wait",
		plant: func(t *testing.T, e *env) {
			queue(t, e, "import 1", "import", 0)
			e.srv.Advance(time.Minute)
			queue(t, e, "untyped", "", 0)
			e.srv.Advance(2 * time.Minute)
			queue(t, e, "resize 1", "resize", 0)
			e.srv.Advance(2 * time.Minute)
			queue(t, e, "import 2", "import", 0)
			queue(t, e, "resize 2", "resize", 0)
			e.srv.Advance(time.Minute)
		},
		waiting: "import 1", age: 6 * time.Minute,
		byType:          map[string]time.Duration{"import": 6 * time.Minute, "": 5 * time.Minute, "resize": 3 * time.Minute},
		unfinishedSince: 6 * time.Minute,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				e := newEnv(t, nil)
				tt.plant(t, e)
				st, err := e.store.Stats(e.ctx, s3task.StatsOptions{})
				if err != nil {
					t.Fatalf("Stats: %v", err)
				}
				var waiting string
				if st.OldestWaiting != nil {
					waiting = st.OldestWaiting.Name
				}
				if waiting != tt.waiting || st.OldestWaitingAge != tt.age {
					t.Errorf("OldestWaiting %q, waiting %s; want %q, %s", waiting, st.OldestWaitingAge, tt.waiting, tt.age)
				}
				if st.Scheduled != tt.scheduled || st.WaitingRetry != tt.retry {
					t.Errorf("Scheduled %d, WaitingRetry %d; want %d, %d", st.Scheduled, st.WaitingRetry, tt.scheduled, tt.retry)
				}
				if diff := cmp.Diff(tt.byType, st.WaitByType); diff != "" {
					t.Errorf("WaitByType (-want +got):\n%s", diff)
				}
				if st.OldestUnfinishedAge != tt.unfinishedSince {
					t.Errorf("OldestUnfinishedAge %s, want %s: from creation", st.OldestUnfinishedAge, tt.unfinishedSince)
				}
			})
		})
	}
}

// ---- Purge ----

func TestPurge(t *testing.T) {
	t.Parallel()
	e := setupOps(t)
	cutoff := time.Now().Add(-time.Hour)

	old := map[string]*s3task.Task{}
	for _, state := range []string{"created", "queued", "running", "completed", "failed", "failed-waiting", "abandoned"} {
		old[state] = e.prepare(t, e.createAgo(t, 2*time.Hour, "old "+state), state)
	}
	e.setMarker(t, old["completed"].ID, true) // a marker it no longer needs goes too
	recent := e.prepare(t, e.createAgo(t, 0, "recent completed"), "completed")
	finished := []string{old["completed"].ID, old["failed"].ID, old["abandoned"].ID}
	unfinished := []string{old["created"].ID, old["queued"].ID, old["running"].ID, old["failed-waiting"].ID}
	e.srv.Advance(time.Minute) // Purge leaves a task until a minute after its last change
	before := e.snapshot("")

	t.Run("dry run", func(t *testing.T) {
		r, err := e.newStore(t, nil).Purge(e.ctx, cutoff, s3task.PurgeOptions{DryRun: true})
		if err != nil {
			t.Fatalf("Purge(DryRun): %v", err)
		}
		if diff := cmp.Diff(finished, r.Purged, cmpSet); diff != "" {
			t.Errorf("dry run Purged (-want +got):\n%s", diff)
		}
		if r.Tasks != 7 || r.Kept != 4 || r.Objects != 0 || len(r.Broken) != 0 {
			t.Errorf("dry run report %+v; want 7 tasks read, 4 kept, nothing deleted", r)
		}
		if diff := cmp.Diff(before, e.snapshot("")); diff != "" {
			t.Errorf("a dry run changed the bucket (-before +after):\n%s", diff)
		}
	})

	purger := e.newStore(t, nil)
	r, err := purger.Purge(e.ctx, cutoff, s3task.PurgeOptions{Limit: 1})
	if err != nil {
		t.Fatalf("Purge(Limit 1): %v", err)
	}
	if len(r.Purged) != 1 || !slices.Contains(finished, r.Purged[0]) {
		t.Fatalf("Purge(Limit 1) purged %v, want one of %v", r.Purged, finished)
	}
	first := r.Purged[0]
	if len(e.snapshot(e.folder(first))) != 0 {
		t.Errorf("Purge(Limit 1) left objects of %s", first)
	}
	for _, id := range finished {
		if id != first && len(e.snapshot(e.folder(id))) == 0 {
			t.Errorf("Purge(Limit 1) also deleted %s", id)
		}
	}

	r, err = purger.Purge(e.ctx, cutoff, s3task.PurgeOptions{})
	if err != nil {
		t.Fatalf("Purge: %v", err)
	}
	rest := slices.DeleteFunc(slices.Clone(finished), func(id string) bool { return id == first })
	if diff := cmp.Diff(rest, r.Purged, cmpSet); diff != "" {
		t.Errorf("Purged (-want +got):\n%s", diff)
	}
	if r.Tasks != 6 || r.Kept != 4 {
		t.Errorf("report %+v; want 6 tasks read and 4 kept", r)
	}

	// Everything of a purged task is gone: input, outputs, record, marker.
	for _, id := range finished {
		if left := e.snapshot(e.folder(id)); len(left) != 0 {
			t.Errorf("purged task %s left %v", id, left)
		}
		if e.hasMarker(id) {
			t.Errorf("purged task %s left its marker", id)
		}
		if _, err := e.store.Get(e.ctx, id); !errors.Is(err, s3task.ErrNotFound) {
			t.Errorf("Get(purged %s) = %v, want ErrNotFound", id, err)
		}
	}
	// Nothing else moved: the unfinished old tasks and the recent one are
	// as they were, byte for byte.
	after := e.snapshot("")
	for _, id := range append(slices.Clone(unfinished), recent.ID) {
		for _, key := range []string{e.recordKey(id), e.inputKey(t, id), e.markerKey(id)} {
			if before[key] != after[key] {
				t.Errorf("%s changed: ETag %q, was %q", key, after[key], before[key])
			}
		}
	}
	if n := len(e.snapshot(e.folder(recent.ID))); n != 3 {
		t.Errorf("the recent completed task has %d objects, want its input, output and record", n)
	}
}

func TestPurgeCountsObjects(t *testing.T) {
	t.Parallel()
	e := setupOps(t)
	task := e.prepare(t, e.createAgo(t, time.Hour, "three outputs"), "completed")
	for n := 2; n <= 3; n++ {
		e.put(t, e.outputKey(t, task.ID, n), []byte("output"))
	}
	e.srv.Advance(time.Minute) // Purge leaves a task until a minute after its last change
	r, err := e.store.Purge(e.ctx, time.Now(), s3task.PurgeOptions{})
	if err != nil {
		t.Fatalf("Purge: %v", err)
	}
	if r.Objects != 5 || !slices.Equal(r.Purged, []string{task.ID}) {
		t.Errorf("report %+v; want %s purged with 5 objects (input, 3 outputs, record)", r, task.ID)
	}
	if left := e.leftovers(); len(left) != 0 {
		t.Errorf("objects left: %v", left)
	}
}

func TestPurgeCutoff(t *testing.T) {
	t.Parallel()
	e := setupOps(t)
	older := e.prepare(t, e.createAgo(t, 3*time.Hour, "older"), "completed")
	newer := e.prepare(t, e.createAgo(t, time.Hour, "newer"), "completed")
	e.srv.Advance(time.Minute) // Purge leaves a task until a minute after its last change

	for _, c := range []struct {
		name   string
		cutoff time.Time
		want   []string
	}{
		{"at the older task's creation", older.CreatedAt, nil},
		{"between them", older.CreatedAt.Add(time.Millisecond), []string{older.ID}},
		{"at the newer task's creation", newer.CreatedAt, nil},
		{"just after the newer one", newer.CreatedAt.Add(time.Millisecond), []string{newer.ID}},
	} {
		r, err := e.store.Purge(e.ctx, c.cutoff, s3task.PurgeOptions{})
		if err != nil {
			t.Fatalf("%s: Purge: %v", c.name, err)
		}
		if diff := cmp.Diff(c.want, r.Purged); diff != "" {
			t.Errorf("%s: Purged (-want +got):\n%s", c.name, diff)
		}
	}
	if _, err := e.store.Purge(e.ctx, time.Time{}, s3task.PurgeOptions{}); !errors.Is(err, s3task.ErrInvalidArgument) {
		t.Errorf("Purge(zero cutoff) = %v, want ErrInvalidArgument", err)
	}
	if _, err := e.store.Purge(e.ctx, time.Now(), s3task.PurgeOptions{Limit: -1}); !errors.Is(err, s3task.ErrInvalidArgument) {
		t.Errorf("Purge(Limit -1) = %v, want ErrInvalidArgument", err)
	}
}

// TestPurgeFinishesInterruptedPurge plants what a purge cut short leaves:
// a failed task's record marked purging, its input already deleted, its
// output and a marker still there.
func TestPurgeFinishesInterruptedPurge(t *testing.T) {
	t.Parallel()
	e := setupOps(t)
	task := e.prepare(t, e.createAgo(t, time.Hour, "half purged"), "failed")
	output := e.outputKey(t, task.ID, 1)
	e.put(t, output, []byte("partial output"))
	e.rewrite(t, task.ID, func(x *stored) { x.Purging = true })
	e.del(t, e.inputKey(t, task.ID))
	e.setMarker(t, task.ID, true)

	if got := e.get(t, task.ID); !got.Purging || got.Retryable() || got.Cancelable() {
		t.Errorf("purging record: Purging %t, Retryable %t, Cancelable %t; want true, false, false", got.Purging, got.Retryable(), got.Cancelable())
	}
	if _, err := e.store.Retry(e.ctx, task.ID); !errors.Is(err, s3task.ErrInvalidTransition) {
		t.Errorf("Retry of a purging task = %v, want ErrInvalidTransition", err)
	}
	if _, err := e.store.Cancel(e.ctx, task.ID, "too late"); !errors.Is(err, s3task.ErrInvalidTransition) {
		t.Errorf("Cancel of a purging task = %v, want ErrInvalidTransition", err)
	}

	r, err := e.newStore(t, nil).Purge(e.ctx, time.Now(), s3task.PurgeOptions{})
	if err != nil {
		t.Fatalf("Purge: %v", err)
	}
	if !slices.Equal(r.Purged, []string{task.ID}) {
		t.Errorf("Purged %v, want %s", r.Purged, task.ID)
	}
	if left := e.leftovers(); len(left) != 0 {
		t.Errorf("objects left after the purge was finished: %v", left)
	}
}

// purgeOutcome checks that a task is either wholly gone or wholly there,
// queued, with its input and output intact.
func (e *env) purgeOutcome(t *testing.T, id string, output string) (gone bool) {
	t.Helper()
	objs := e.snapshot(e.folder(id))
	marker := e.hasMarker(id)
	body, ok := e.object(e.recordKey(id))
	if !ok {
		if len(objs) != 0 || marker {
			t.Errorf("task %s has no record but left objects %v, marker %t", id, objs, marker)
		}
		return true
	}
	var rec s3task.Task
	if err := json.Unmarshal(body, &rec); err != nil {
		t.Fatalf("record of %s: %v", id, err)
	}
	if rec.Status != s3task.StatusQueued || rec.Purging {
		t.Errorf("task %s kept as %s (purging %t), want queued", id, rec.Status, rec.Purging)
	}
	if in, ok := e.object(e.inputKey(t, id)); !ok || string(in) != testInput {
		t.Errorf("task %s is kept but its input is %q (present %t)", id, in, ok)
	}
	if _, ok := e.object(output); !ok {
		t.Errorf("task %s is kept but its output is gone", id)
	}
	if !e.hasOwnMarker(&rec) {
		t.Errorf("task %s is queued without its marker %s (it has %v)", id, e.store.MarkerKey(&rec), e.markers(id))
	}
	return false
}

// TestPurgeRacingRetry runs an operator's Retry and a Purge at the same time
// on a task that failed for good, many times, each from its own client.
// One of them wins; there is never a half-deleted task.
func TestPurgeRacingRetry(t *testing.T) {
	t.Parallel()
	e := setupOps(t)
	retrier, purger := e.newStore(t, nil), e.newStore(t, nil)
	const rounds = 25
	var purged, retried int
	for i := range rounds {
		task := e.prepare(t, e.createAgo(t, 0, fmt.Sprintf("round %d", i)), "failed")
		e.setMarker(t, task.ID, false)
		output := e.outputKey(t, task.ID, 1)
		e.put(t, output, []byte("output of the failed attempt"))

		var retryErr, purgeErr error
		var report *s3task.PurgeReport
		race(func() { _, retryErr = retrier.Retry(e.ctx, task.ID) },
			func() { report, purgeErr = purger.Purge(e.ctx, time.Now().Add(time.Hour), s3task.PurgeOptions{}) })

		if purgeErr != nil {
			t.Fatalf("round %d: Purge: %v", i, purgeErr)
		}
		switch {
		case retryErr == nil:
			retried++
		case errors.Is(retryErr, s3task.ErrInvalidTransition), errors.Is(retryErr, s3task.ErrNotFound):
		case errors.Is(retryErr, s3task.ErrOutcomeUnknown):
			// The purge deleted the record between Retry's read and its
			// write; whether the write had landed first, the refusal cannot
			// tell. The task must be gone (checked below).
		default:
			t.Fatalf("round %d: Retry: %v", i, retryErr)
		}
		gone := e.purgeOutcome(t, task.ID, output)
		if gone {
			purged++
		}
		if gone == (retryErr == nil) || gone != slices.Contains(report.Purged, task.ID) {
			t.Errorf("round %d: task gone %t, but Retry returned %v and Purge purged %v", i, gone, retryErr, report.Purged)
		}
	}
	t.Logf("%d rounds: %d purged, %d retried", rounds, purged, retried)
}

// TestPurgeAfterRetryLostRace holds a Retry's marker write until a Purge has
// deleted the whole task. Retry then loses its compare-and-set; the marker
// it wrote must not outlive the task.
func TestPurgeAfterRetryLostRace(t *testing.T) {
	t.Parallel()
	e := setupOps(t)
	task := e.prepare(t, e.createAgo(t, 0, "purged under a retry"), "failed")
	e.setMarker(t, task.ID, false)
	e.srv.Advance(time.Minute) // Purge leaves a task until a minute after its last change

	// Retry's marker is named after the time of the retry: any PUT of a
	// marker of the task.
	rec := &recorder{}
	release, retried := e.heldCall(t, "Retry to read the failed record and reach its marker write",
		func(key string) bool {
			return strings.HasPrefix(key, e.store.Prefix()+"active/") && strings.HasSuffix(key, "_"+task.ID)
		},
		func(st *s3task.Store) (*s3task.Task, error) { return st.Retry(e.ctx, task.ID) }, rec.wrap)

	r, err := e.newStore(t, nil).Purge(e.ctx, time.Now().Add(time.Hour), s3task.PurgeOptions{})
	if err != nil || !slices.Equal(r.Purged, []string{task.ID}) {
		t.Fatalf("Purge = %+v, %v; want %s purged", r, err, task.ID)
	}
	release()
	retryErr := await(t, retried, "Retry to return")
	if retryErr == nil {
		t.Fatal("Retry of a purged task succeeded")
	}
	if _, ok := e.object(e.recordKey(task.ID)); ok {
		t.Fatal("the purged task's record came back")
	}
	if left := e.snapshot(e.folder(task.ID)); len(left) != 0 {
		t.Errorf("objects left in the purged task's folder: %v", left)
	}
	if left := e.markers(task.ID); len(left) != 0 {
		t.Errorf("Retry lost to the purge (%v) but the marker it wrote before its record write stays behind, "+
			"the marker of a task that no longer exists (Retry does not undo its marker when its change fails): %v\nRetry's requests: %s", retryErr, left, rec)
	}
}
