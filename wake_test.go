package s3task

import (
	"bytes"
	"context"
	"fmt"
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

// TestWakeNews checks how a worker judges a changed wake object: it lists
// unless every announcement it has not seen names a marker that is gone.
func TestWakeNews(t *testing.T) {
	e := newAdvEnv(t)
	w, err := NewWorker(e.admin, HandlerFunc(advSucceed), &WorkerOptions{ID: "w"})
	if err != nil {
		t.Fatal(err)
	}
	dir := e.admin.markerDir()
	present, gone := dir+"20261130T144702.123Z_"+NewID(), dir+"20261130T144702.124Z_"+NewID()
	e.putRaw(present, nil)
	due := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	later := dir + due.Format(markerTimeLayout) + "_" + NewID()
	e.putRaw(later, nil)
	seen := wakeNote{"seen", gone}
	base := formatWake([]wakeNote{seen})
	many := []wakeNote{}
	for i := range wakeKeep {
		many = append(many, wakeNote{fmt.Sprintf("r%d", i), gone})
	}
	for _, tc := range []struct {
		name string
		body []byte
		want bool
	}{
		{"an announced marker is gone", formatWake([]wakeNote{seen, {"n1", gone}}), false},
		{"an announced marker is still there", formatWake([]wakeNote{seen, {"n1", gone}, {"n2", present}}), true},
		{"news without a marker", formatWake([]wakeNote{seen, {"n1", "*"}}), true},
		{"a key outside the marker folder", formatWake([]wakeNote{seen, {"n1", "elsewhere/x"}}), true},
		{"none of those kept was seen: some may be missed", formatWake(many), true},
		{"a body of an earlier version", []byte("7c3f0a9e"), true},
		{"nothing new", base, false},
		{"an announced marker due later", formatWake([]wakeNote{seen, {"n1", later}}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w.wakeSeen = nil
			w.wakeNews(e.ctx, base) // what the worker saw before
			got, noted := w.wakeNews(e.ctx, tc.body)
			if got != tc.want {
				t.Errorf("wakeNews = %v, want %v", got, tc.want)
			}
			if bytes.Contains(tc.body, []byte(later)) != noted.Equal(due) {
				t.Errorf("wakeNews returned the due time %s; want %s only for the marker due later", noted, due)
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
