package s3task

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/s3task/s3task/internal/s3test"
)

func TestWakeBodyRoundTrip(t *testing.T) {
	notes := []wakeNote{{"a1", "batch-tasks/active/20261130T144702.123Z_X"}, {"b2", "*"}}
	got, ok := parseWake(formatWake(notes))
	if !ok {
		t.Fatal("parseWake refused formatWake's body")
	}
	if diff := gocmp.Diff(notes, got, gocmp.AllowUnexported(wakeNote{})); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	for _, body := range []string{"", "7c3f0a", "s3task-wake 1\na b\n", "s3task-wake 2\nno-key\n", "s3task-wake 2\n x\n"} {
		if _, ok := parseWake([]byte(body)); ok {
			t.Errorf("parseWake(%q) accepted a body it does not know", body)
		}
	}
}

// TestWakeNews checks how a worker judges a changed wake object: it
// visits each marker it has not seen announced that is due, with no LIST
// (whether the marker is still there or not: the visit's read of the
// record tells), notes the time of one due later, and lists only when
// the news names no marker or it may have missed some.
func TestWakeNews(t *testing.T) {
	e := newAdvEnv(t)
	w, err := NewWorker(e.admin, HandlerFunc(advSucceed), &WorkerOptions{ID: "w"})
	if err != nil {
		t.Fatal(err)
	}
	dir := e.admin.markerDir()
	first, second := dir+"20261130T144702.123Z_"+NewID(), dir+"20261130T144702.124Z_"+NewID()
	due := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	later := dir + due.Format(markerTimeLayout) + "_" + NewID()
	seen := wakeNote{"seen", first}
	base := formatWake([]wakeNote{seen})
	many := []wakeNote{}
	for i := range wakeKeep {
		many = append(many, wakeNote{fmt.Sprintf("r%d", i), second})
	}
	for _, tc := range []struct {
		name   string
		body   []byte
		list   bool
		visits []string
	}{
		{"an announced marker", formatWake([]wakeNote{seen, {"n1", second}}), false, []string{second}},
		{"two, and one seen before", formatWake([]wakeNote{seen, {"n1", second}, {"n2", first}}), false, []string{first, second}},
		{"news without a marker", formatWake([]wakeNote{seen, {"n1", "*"}}), true, nil},
		{"a key outside the marker folder", formatWake([]wakeNote{seen, {"n1", "elsewhere/x"}}), true, nil},
		{"none of those kept was seen: some may be missed", formatWake(many), true, nil},
		{"a body of an earlier version", []byte("7c3f0a9e"), true, nil},
		{"nothing new", base, false, nil},
		{"an announced marker due later", formatWake([]wakeNote{seen, {"n1", later}}), false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w.wakeSeen, w.marked = nil, map[string]noted{}
			w.wakeNews(base) // what the worker saw before
			got, noted := w.wakeNews(tc.body)
			if got != tc.list {
				t.Errorf("wakeNews = %v, want %v", got, tc.list)
			}
			if bytes.Contains(tc.body, []byte(later)) != noted.Equal(due) {
				t.Errorf("wakeNews returned the due time %s; want %s only for the marker due later", noted, due)
			}
			var visits []string
			for key := range w.marked {
				visits = append(visits, key)
			}
			slices.Sort(visits)
			if diff := gocmp.Diff(tc.visits, visits); diff != "" {
				t.Errorf("markers to visit (-want +got):\n%s", diff)
			}
		})
	}
}

// TestWakeOneListPerSubmit: of several idle workers, the first to see a
// Submit's announcement lists and claims; the others find its marker gone
// with a HEAD and do not list.
func TestWakeOneListPerSubmit(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		var reqs s3test.Counter
		const workers, submits = 6, 5
		done := make(chan string, 10)
		for i := range workers {
			e.run(e.store(nil, reqs.Wrap), func(ctx context.Context, job *Job) error {
				done <- job.Task.ID
				return nil
			}, &WorkerOptions{ID: fmt.Sprintf("w%d", i), MaxPollInterval: time.Hour, ReconcileInterval: -1})
		}
		time.Sleep(10 * time.Second) // every worker's first listing is behind it
		reqs.Reset()
		for range submits {
			task := e.submit(CreateParams{Name: "one"})
			if got := advAwait(t, done, time.Minute, "the submitted task to run"); got != task.ID {
				t.Fatalf("ran %s, want %s", got, task.ID)
			}
			time.Sleep(10 * time.Second) // every worker has looked at the wake object
		}
		if n := reqs.Counts()["LIST"]; n > submits*2 {
			t.Errorf("%d LISTs for %d submits with %d idle workers; want about one per submit", n, submits, workers)
		} else {
			t.Logf("%d LISTs for %d submits with %d idle workers", n, submits, workers)
		}
	})
}
