package s3task

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"
)

// putSource writes an object to ingest and returns it as an event would
// name it.
func (e *advEnv) putSource(key, body string) Object {
	e.t.Helper()
	etag, err := e.raw.Put(e.ctx, key, []byte(body))
	if err != nil {
		e.t.Fatal(err)
	}
	return Object{Key: key, ETag: etag, Size: int64(len(body))}
}

// tasksOf returns the tasks whose source is key, by version (ETag).
func (e *advEnv) tasksOf(key string) map[string][]*Task {
	e.t.Helper()
	out := map[string][]*Task{}
	for _, k := range e.mem.Keys(DefaultPrefix) {
		id, ok := e.admin.recordID(k)
		if !ok {
			continue
		}
		t := e.record(id)
		if t.Metadata[MetaSourceKey] == key {
			out[t.Metadata[MetaSourceETag]] = append(out[t.Metadata[MetaSourceETag]], &t.Task)
		}
	}
	return out
}

func readInput(t *testing.T, e *advEnv, task *Task) string {
	t.Helper()
	b, ok := e.mem.Object(e.admin.inputKey(task.ID, ""))
	if !ok {
		t.Fatalf("task %s has no input", task.ID)
	}
	return string(b)
}

// TestIngestOnce: an object version becomes one submitted task whose input
// is a copy of it and whose metadata names it; the same version again
// returns that task; a new version makes a new task; the copy does not
// change when the source does.
func TestIngestOnce(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		v1 := e.putSource("incoming/june.csv", "a,b\n1,2\n")
		first, err := e.admin.Ingest(e.ctx, v1, CreateParams{Name: "june", Type: "csv", Metadata: map[string]string{"tenant": "t1"}})
		if err != nil {
			t.Fatal(err)
		}
		if first.Status != StatusQueued {
			t.Fatalf("ingested task is %s, want queued", first.Status)
		}
		want := map[string]string{"tenant": "t1", MetaSourceBucket: e.mem.Bucket, MetaSourceKey: "incoming/june.csv", MetaSourceVersion: "", MetaSourceETag: strings.Trim(v1.ETag, `"`)}
		for k, v := range want {
			if first.Metadata[k] != v {
				t.Errorf("Metadata[%q] = %q, want %q", k, first.Metadata[k], v)
			}
		}
		if first.IdempotencyKey != IngestKey(v1, e.mem.Bucket) {
			t.Errorf("IdempotencyKey = %q, want IngestKey's %q", first.IdempotencyKey, IngestKey(v1, e.mem.Bucket))
		}
		again, err := e.admin.Ingest(e.ctx, v1, CreateParams{Name: "june again"})
		if err != nil {
			t.Fatal(err)
		}
		if again.ID != first.ID {
			t.Errorf("the same version again made task %s, want %s", again.ID, first.ID)
		}
		v2 := e.putSource("incoming/june.csv", "a,b\n3,4\n")
		second, err := e.admin.Ingest(e.ctx, v2, CreateParams{Name: "june, fixed"})
		if err != nil {
			t.Fatal(err)
		}
		if second.ID == first.ID {
			t.Fatal("a new version made no new task")
		}
		if got := readInput(t, e, first); got != "a,b\n1,2\n" {
			t.Errorf("the first task's input is %q after the source changed; want its copy of the first version", got)
		}
		if got := readInput(t, e, second); got != "a,b\n3,4\n" {
			t.Errorf("the second task's input is %q", got)
		}
		if _, ok := e.mem.Object("incoming/june.csv"); !ok {
			t.Error("the source object is gone")
		}
	})
}

// TestIngestRefusals: bad objects get clear errors and write nothing; an
// object over the size limit gets a task abandoned with the reason, on
// record; a version replaced before Ingest looks makes no task, with
// ErrSourceGone, however often it is named.
func TestIngestRefusals(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		for _, c := range []struct {
			o Object
			p CreateParams
		}{
			{Object{ETag: "x"}, CreateParams{}},
			{Object{Key: "incoming/a"}, CreateParams{}},
			{Object{Key: DefaultPrefix + "x/output-attempt-1", ETag: "x"}, CreateParams{}},
			{Object{Key: "incoming/a", ETag: "x"}, CreateParams{Key: "mine"}},
		} {
			if _, err := e.admin.Ingest(e.ctx, c.o, c.p); !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("Ingest(%+v, Key %q): %v, want ErrInvalidArgument", c.o, c.p.Key, err)
			}
		}
		if keys := e.mem.Keys(DefaultPrefix); len(keys) != 0 {
			t.Errorf("refused ingests wrote %v", keys)
		}

		small := e.store(&StoreOptions{MaxInputSize: 4})
		big := e.putSource("incoming/big.csv", "0123456789")
		task, err := small.Ingest(e.ctx, big, CreateParams{})
		if err != nil {
			t.Fatal(err)
		}
		if task.Status != StatusAbandoned || !strings.Contains(task.CancelReason, "over the limit") {
			t.Errorf("an object over the limit: task %s, reason %q; want abandoned with the reason", task.Status, task.CancelReason)
		}
		// An event that under-reports the size: the copy finds out.
		big.Size = 2
		big.ETag = e.putSource("incoming/big2.csv", "0123456789abc").ETag
		big.Key = "incoming/big2.csv"
		if task, err = small.Ingest(e.ctx, big, CreateParams{}); err != nil {
			t.Fatal(err)
		}
		if task.Status != StatusAbandoned || !strings.Contains(task.CancelReason, "over the limit") {
			t.Errorf("an object over the limit, its size under-reported: task %s, reason %q", task.Status, task.CancelReason)
		}
		if e.has(e.admin.inputKey(task.ID, "")) {
			t.Error("the refused object was copied")
		}

		stale := e.putSource("incoming/c.csv", "v1")
		e.putSource("incoming/c.csv", "v2")
		for range 2 {
			if task, err = e.admin.Ingest(e.ctx, stale, CreateParams{}); !errors.Is(err, ErrSourceGone) || task != nil {
				t.Errorf("a version replaced before Ingest looked: %v, %v; want no task and ErrSourceGone", task, err)
			}
		}
		if n := len(e.tasksOf("incoming/c.csv")); n != 0 {
			t.Errorf("the replaced version made %d tasks", n)
		}
	})
}

// TestIngestResumes: an Ingest that stopped after its Create (the process
// died) leaves a created task, which the next Ingest of the version takes
// up and submits.
func TestIngestResumes(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		o := e.putSource("incoming/d.csv", "x\n")
		created, err := e.admin.Create(e.ctx, CreateParams{Key: IngestKey(o, e.mem.Bucket)})
		if err != nil {
			t.Fatal(err)
		}
		got, err := e.admin.Ingest(e.ctx, o, CreateParams{})
		if err != nil {
			t.Fatal(err)
		}
		if got.ID != created.ID || got.Status != StatusQueued {
			t.Errorf("Ingest after a stopped one: %s %s, want %s queued", got.ID, got.Status, created.ID)
		}
	})
}

// TestIngesterStorm: objects arrive under the folder; their events come
// three times each, out of order, to two Ingesters at once, with deletions,
// events of other folders and buckets, and keys sent unencoded; one
// object's events are all lost, and the first sweep finds it. Every object
// version still there becomes exactly one task, and nothing outside the
// folder does; the version replaced before any event came makes none.
func TestIngesterStorm(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		var objs []Object
		for i := range 12 {
			objs = append(objs, e.putSource(fmt.Sprintf("incoming/part %d+x.csv", i), fmt.Sprintf("n\n%d\n", i)))
		}
		objs = append(objs, e.putSource("incoming/part 0+x.csv", "n\nnew version\n")) // a second version
		e.putSource("elsewhere/ignored.csv", "n\n")
		quietLost := e.putSource("incoming/no-event.csv", "n\n")

		var ings []*Ingester
		for range 2 {
			in, err := NewIngester(e.store(nil), &IngestOptions{Prefix: "incoming/", SweepInterval: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			ings = append(ings, in)
		}
		var events []ObjectEvent
		for _, o := range objs {
			for range 3 {
				// As versitygw sends it: the raw key, which decodes
				// ("+" to a space) to a key that is not there.
				events = append(events, ObjectEvent{Key: strings.ReplaceAll(o.Key, "+", " "), RawKey: o.Key, ETag: o.ETag, Size: o.Size})
			}
			events = append(events, ObjectEvent{Key: o.Key, Removed: true})
		}
		events = append(events,
			ObjectEvent{Key: "elsewhere/ignored.csv", ETag: "x"},
			ObjectEvent{Bucket: "other", Key: "incoming/part 1+x.csv", ETag: "x"},
			ObjectEvent{Key: DefaultPrefix + "x/status.json", ETag: "x"},
		)
		rand.New(rand.NewPCG(3, 4)).Shuffle(len(events), func(i, j int) { events[i], events[j] = events[j], events[i] })
		ctx, cancel := context.WithCancel(e.ctx)
		var wg sync.WaitGroup
		for _, in := range ings {
			wg.Go(func() { _ = in.Run(ctx) })
		}
		for _, ev := range events {
			for _, in := range ings {
				in.Notify(ev)
			}
		}
		time.Sleep(time.Minute)
		cancel()
		wg.Wait()

		for _, key := range []string{"elsewhere/ignored.csv"} {
			if n := len(e.tasksOf(key)); n != 0 {
				t.Errorf("%s, outside the folder, made tasks", key)
			}
		}
		for i, o := range append(objs, quietLost) {
			byVersion := e.tasksOf(o.Key)
			tasks := byVersion[strings.Trim(o.ETag, `"`)]
			// The first version of part 0 was replaced before any event
			// came: S3 no longer holds it, and it makes no task.
			want := 1
			if i == 0 {
				want = 0
			}
			if len(tasks) != want {
				t.Errorf("%s, version %s: %d tasks, want %d", o.Key, o.ETag, len(tasks), want)
				continue
			}
			if want == 1 && tasks[0].Status != StatusQueued {
				t.Errorf("%s, version %s: task %s (%s), want queued", o.Key, o.ETag, tasks[0].Status, tasks[0].CancelReason)
			}
		}
	})
}

// TestNewIngesterOptions: the folder is required and never overlaps the
// Store's own.
func TestNewIngesterOptions(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		for _, o := range []*IngestOptions{nil, {}, {Prefix: DefaultPrefix}, {Prefix: DefaultPrefix + "in/"}, {Prefix: "batch"}} {
			if _, err := NewIngester(e.admin, o); !errors.Is(err, ErrInvalidOptions) {
				t.Errorf("NewIngester(%+v): %v, want ErrInvalidOptions", o, err)
			}
		}
		if _, err := NewIngester(e.admin, &IngestOptions{Bucket: "other", Prefix: DefaultPrefix}); err != nil {
			t.Errorf("the Store's prefix in another bucket: %v", err)
		}
		if _, err := NewIngester(nil, &IngestOptions{Prefix: "in/"}); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("nil store: %v", err)
		}
	})
}

// TestIngestRequests: the cost Ingest documents, counted: 12 requests for
// a new version, 4 for one already ingested, 3 for one purged, 1 (a HEAD)
// for one that is not there.
func TestIngestRequests(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		var c opCounter
		st := e.store(nil, c.wrap)
		o := e.putSource("incoming/e.csv", "x\n")
		if _, err := st.Ingest(e.ctx, o, CreateParams{}); err != nil {
			t.Fatal(err)
		}
		if ops := c.take(); total(ops) != 12 || ops["HEAD"] != 2 {
			t.Errorf("a new version took %v, want 12 requests (2 HEADs)", ops)
		}
		task, err := st.Ingest(e.ctx, o, CreateParams{})
		if err != nil {
			t.Fatal(err)
		}
		if ops := c.take(); total(ops) != 4 {
			t.Errorf("a version already ingested took %v, want 4 requests", ops)
		}
		if _, err := e.admin.Cancel(e.ctx, task.ID, "done with it"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(keyHold)
		if r, err := e.admin.Purge(e.ctx, time.Now(), PurgeOptions{}); err != nil || len(r.Purged) != 1 {
			t.Fatalf("Purge: %+v, %v", r, err)
		}
		if _, err := st.Ingest(e.ctx, o, CreateParams{}); !errors.Is(err, ErrPurged) {
			t.Fatalf("a purged version: %v, want ErrPurged", err)
		}
		if ops := c.take(); total(ops) != 3 {
			t.Errorf("a purged version took %v, want 3 requests", ops)
		}
		missing := Object{Key: "incoming/never.csv", ETag: "0123"}
		if _, err := st.Ingest(e.ctx, missing, CreateParams{}); !errors.Is(err, ErrSourceGone) {
			t.Fatalf("a missing object: %v, want ErrSourceGone", err)
		}
		if ops := c.take(); total(ops) != 1 || ops["HEAD"] != 1 {
			t.Errorf("a missing object took %v, want one HEAD", ops)
		}
	})
}
