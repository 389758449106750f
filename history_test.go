package s3task

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/s3task/s3task/internal/s3test"
)

// TestTransitionHistory covers what the table of every pair leaves out: the
// history at its bound, a takeover (an expiry and a claim in one write),
// records whose running attempt has no entry, and errors cut to the
// entry's bound.
func TestTransitionHistory(t *testing.T) {
	t.Parallel()

	full := submittedAs(StatusFailed, HistoryLimit, "worker-z", func(t *record) {
		t.MaxAttempts = HistoryLimit + 1
		t.RetryAt, t.DueAt = transitionNow.Add(-time.Second), transitionNow.Add(-time.Second)
		for n := 1; n <= HistoryLimit; n++ {
			t.History = append(t.History, ranAttempt(n, "worker-z", OutcomeFailed, CategoryTransient, "timeout"))
		}
	})
	claim := event{kind: evClaim, worker: "worker-b", lease: time.Minute, margin: evMargin, heartbeat: 2 * time.Second}
	fail := func(msg string) event {
		return event{kind: evFail, worker: "worker-a", attempt: 2, errMsg: msg, category: "bad_input"}
	}
	unrecorded := func(more func(t *record)) *record { // claimed by a version that kept no history
		t := runningTask(transitionNow.Add(time.Minute))
		t.History = nil
		more(t)
		return t
	}
	long := strings.Repeat("é", HistoryErrorLimit) // twice the limit in bytes
	runSteps(t, []step{{
		name: "a claim at the bound drops the oldest entry", start: full(), ev: claim,
		want: becomes(func(t *record) {
			claimedBy("worker-b", transitionNow, time.Minute, evMargin, 2*time.Second)(t)
			t.History = t.History[1:]
		}),
		check: func(t *testing.T, next *record) {
			if len(next.History) != HistoryLimit || next.History[0].Number != 2 || next.History[HistoryLimit-1].Number != HistoryLimit+1 {
				t.Errorf("history holds attempts %d to %d (%d entries); want 2 to %d", next.History[0].Number, next.History[len(next.History)-1].Number, len(next.History), HistoryLimit+1)
			}
		},
	}, {
		name: "the heartbeat interval is kept in whole milliseconds, as the record holds it", start: full(),
		ev: event{kind: evClaim, worker: "worker-b", lease: 10 * time.Second, heartbeat: 10 * time.Second / 3}, want: written,
		check: func(t *testing.T, next *record) {
			if got := next.History[len(next.History)-1].HeartbeatInterval; got != 3333*time.Millisecond {
				t.Errorf("heartbeat interval %s, want 3.333s", got)
			}
		},
	}, {
		name: "an attempt claimed by an earlier version gets its entry when it ends", start: unrecorded(func(*record) {}), ev: fail("boom"),
		want: written,
		check: func(t *testing.T, next *record) {
			want := []Attempt{{Number: 2, WorkerID: "worker-a", StartedAt: transitionNow.Add(-time.Minute), EndedAt: transitionNow,
				Outcome: OutcomeFailed, ErrorCategory: "bad_input", Error: "boom"}} // no heartbeat interval: it is not known
			if diff := gocmp.Diff(want, next.History); diff != "" {
				t.Errorf("history (-want +got):\n%s", diff)
			}
		},
	}, {
		name: "so does one whose history stops at an earlier attempt",
		start: unrecorded(func(t *record) {
			t.History = []Attempt{ranAttempt(1, "worker-z", OutcomeLeaseExpired, CategoryLeaseExpired, "attempt 1: lease expired")}
		}),
		ev: event{kind: evComplete, worker: "worker-a", attempt: 2}, want: written,
		check: func(t *testing.T, next *record) {
			if got := numbers(next.History); !slices.Equal(got, []int{1, 2}) || next.History[1].Outcome != OutcomeCompleted || next.History[0].Outcome != OutcomeLeaseExpired {
				t.Errorf("history %+v; want attempt 1 as it was, attempt 2 completed", next.History)
			}
		},
	}, {
		name: "a running record without an attempt gets no entry", start: unrecorded(func(t *record) { t.Attempt = 0 }),
		ev: event{kind: evCancel, reason: "r"}, want: written,
		check: func(t *testing.T, next *record) {
			if len(next.History) != 0 {
				t.Errorf("history %+v; want none: there is no attempt to name", next.History)
			}
		},
		why: "a record edited by hand; an entry for attempt 0 would make it unreadable",
	}, {
		name: "a long error is cut at a character, within the bound", start: runningTask(transitionNow.Add(time.Minute)), ev: fail(long), want: written,
		check: func(t *testing.T, next *record) {
			got := next.History[0].Error
			if len(got) > HistoryErrorLimit || len(got) < HistoryErrorLimit-4 || !utf8.ValidString(got) ||
				!strings.HasSuffix(got, "…") || !strings.HasPrefix(long, strings.TrimSuffix(got, "…")) {
				t.Errorf("entry's error is %d bytes (valid UTF-8: %v): %q…; want a prefix of the error, cut within %d bytes, ending in …", len(got), utf8.ValidString(got), got[:20], HistoryErrorLimit)
			}
			if next.LastError != long {
				t.Errorf("LastError was cut too: %d bytes", len(next.LastError))
			}
		},
	}, {
		name: "bytes that are not UTF-8 become U+FFFD, as in JSON", start: runningTask(transitionNow.Add(time.Minute)), ev: fail("bad \xff\xfe byte"), want: written,
		check: func(t *testing.T, next *record) {
			if got := next.History[0].Error; got != "bad \uFFFD\uFFFD byte" {
				t.Errorf("entry's error %q", got)
			}
		},
	}})

	// A takeover is an expiry and a claim, decided one after the other and
	// written at once: the old attempt ends at its lease's end, the new
	// one begins.
	lease := transitionNow.Add(-time.Minute)
	start := runningTask(lease)
	start.History = append([]Attempt{ranAttempt(1, "worker-z", OutcomeFailed, CategoryTransient, "timeout")}, start.History...)
	expired, _, err := transition(start, event{kind: evLeaseExpired}, transitionNow.Add(-evMargin))
	if err != nil {
		t.Fatal(err)
	}
	taken, _, err := transition(expired, claim, transitionNow)
	if err != nil {
		t.Fatal(err)
	}
	want := []Attempt{
		start.History[0],
		{Number: 2, WorkerID: "worker-a", StartedAt: start.StartedAt, EndedAt: lease, Outcome: OutcomeLeaseExpired,
			ErrorCategory: CategoryLeaseExpired, Error: expired.LastError, HeartbeatInterval: evHeartbeatEvery},
		{Number: 3, WorkerID: "worker-b", StartedAt: transitionNow, Outcome: OutcomeRunning, HeartbeatInterval: 2 * time.Second},
	}
	if diff := gocmp.Diff(want, taken.History); diff != "" {
		t.Errorf("history after a takeover (-want +got):\n%s", diff)
	}
	if got := taken.heartbeatInterval(); got != 2*time.Second {
		t.Errorf("heartbeat interval of the new holder: %s, want 2s", got)
	}
}

// numbers returns the attempt numbers of a history.
func numbers(h []Attempt) []int {
	var out []int
	for _, a := range h {
		out = append(out, a.Number)
	}
	return out
}

func TestCutText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in    string
		limit int
		want  string
	}{
		{"", 10, ""},
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"eleven char", 10, "eleven …"},       // 7 bytes and the 3 of "…"
		{"ééééé", 8, "éé…"},                   // never half a character
		{"ab\xffcd", 10, "ab\uFFFDcd"},        // as encoding/json writes it
		{"a\xff\xffb", 100, "a\uFFFD\uFFFDb"}, // one U+FFFD per byte, as JSON does
		{"abc\uFFFDd", 100, "abc\uFFFDd"},     // a real U+FFFD stays one
		{"abcdef", 2, "…"},                    // no room for any of it
		{"日本語のエラー", 10, "日本…"},                // 3-byte characters
	}
	for _, tt := range tests {
		got := cutText(tt.in, tt.limit)
		if got != tt.want || (len(tt.in) > tt.limit && len(got) > max(tt.limit, len("…"))) || !utf8.ValidString(got) {
			t.Errorf("cutText(%q, %d) = %q, want %q", tt.in, tt.limit, got, tt.want)
		}
	}
}

// historyCost is what TestHistoryCost measured of one life.
type historyCost struct {
	sizes    []int            // the record's size in bytes after each attempt, from 0
	history  []int            // the size of its attempt_history, likewise
	requests []map[string]int // the requests of each attempt, by kind
}

// runAttempts runs attempts times a handler that fails with an error of
// errLen bytes (the last attempt completes), each attempt by RunTask, and
// returns what each cost. Each request is counted by kind: the method
// and what it touched.
func runAttempts(t *testing.T, e *advEnv, attempts, errLen int) historyCost {
	t.Helper()
	var (
		mu    sync.Mutex
		count map[string]int
	)
	st := e.store(nil, advWrap(func(r *http.Request, next http.RoundTripper) (*http.Response, error) {
		kind := s3test.Op(r) + " other"
		switch p := r.URL.Path; {
		case strings.HasSuffix(p, "/status.json"):
			kind = s3test.Op(r) + " record"
		case strings.Contains(p, "/active/"):
			kind = s3test.Op(r) + " marker"
		case strings.HasSuffix(p, "/_wake"):
			kind = s3test.Op(r) + " wake"
		case strings.Contains(p, "/input"):
			kind = s3test.Op(r) + " input"
		}
		mu.Lock()
		count[kind]++
		mu.Unlock()
		return next.RoundTrip(r)
	}))
	msg := strings.Repeat("x", errLen)
	w, err := NewWorker(st, HandlerFunc(func(ctx context.Context, job *Job) error {
		if job.Task.Attempt == attempts {
			return nil
		}
		return RetryAfter(WithCategory(errors.New(msg), "bad_row"), 0)
	}), &WorkerOptions{Logger: advQuiet, ReconcileInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	task := e.submit(CreateParams{Name: "many attempts", MaxAttempts: attempts})
	size := func() (record, history int) {
		b, _ := e.mem.Object(e.recordKey(task.ID))
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(b, &fields); err != nil {
			t.Fatal(err)
		}
		return len(b), len(fields["attempt_history"])
	}
	var cost historyCost
	measure := func() {
		r, h := size()
		cost.sizes, cost.history = append(cost.sizes, r), append(cost.history, h)
	}
	measure()
	for n := 1; n <= attempts; n++ {
		count = map[string]int{}
		got, err := w.RunTask(e.ctx, task.ID)
		if err != nil {
			t.Fatalf("attempt %d: %v", n, err)
		}
		if want := min(n, HistoryLimit); len(got.History) != want || got.History[want-1].Number != n {
			t.Fatalf("after attempt %d: history of %d entries, the last for attempt %d; want %d, the last for %d", n, len(got.History), got.History[len(got.History)-1].Number, want, n)
		}
		mu.Lock()
		cost.requests = append(cost.requests, count)
		mu.Unlock()
		measure()
		time.Sleep(time.Second) // the retry is due, by the Date headers' whole seconds too
	}
	return cost
}

// TestHistoryCost measures what the history costs: no request (each
// attempt, whatever the length of the history, makes the same requests as
// the first, and writes the record twice: its claim and its end), and a
// record that grows by a bounded amount per attempt, then not at all
// once HistoryLimit attempts are kept. -v prints the figures
// BENCHMARKS.md quotes.
func TestHistoryCost(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		const attempts = HistoryLimit + 3
		for _, tc := range []struct {
			name    string
			errLen  int
			perMost int // the most an attempt may add to the record
		}{
			{"an error of 40 bytes", 40, 300},
			{"errors of 4 KiB", 4096, 800}, // 512 in the entry; LastError holds the rest
		} {
			c := runAttempts(t, e, attempts, tc.errLen)
			// RunTask reads the wake object when its last read is a
			// PollInterval old, to honour a pause (see Store.Pause): the
			// first attempt does, the next ones, a second apart, need not.
			// That read is the pause's, not the history's.
			for n, got := range c.requests {
				if got["GET wake"] > 1 {
					t.Errorf("%s: attempt %d read the wake object %d times, want at most once", tc.name, n+1, got["GET wake"])
				}
				delete(got, "GET wake")
			}
			first := c.requests[0]
			for n, got := range c.requests {
				if diff := gocmp.Diff(first, got); diff != "" && n < attempts-1 { // the last attempt completes
					t.Errorf("%s: attempt %d's requests differ from attempt 1's (-first +got):\n%s", tc.name, n+1, diff)
				}
				if got["PUT record"] != 2 || got["GET record"] != 2 {
					t.Errorf("%s: attempt %d: %d record PUTs and %d GETs, want 2 (claim, end) and 2 (RunTask's read, its answer): %v", tc.name, n+1, got["PUT record"], got["GET record"], got)
				}
			}
			var growth []string
			for n := 1; n < len(c.history); n++ {
				d := c.history[n] - c.history[n-1]
				growth = append(growth, strconv.Itoa(d))
				if n < attempts && d > tc.perMost {
					t.Errorf("%s: attempt %d added %d bytes to the history, over %d", tc.name, n, d, tc.perMost)
				}
				// Full, it changes only with the width of the times in it.
				if n > HistoryLimit && n < attempts && (d < -8 || d > 8) {
					t.Errorf("%s: attempt %d changed the history's size by %d bytes, once full", tc.name, n, d)
				}
			}
			if most := slices.Max(c.sizes); most > 32<<10 {
				t.Errorf("%s: the record reached %d bytes", tc.name, most)
			}
			t.Logf("%s: history after each attempt %v bytes (growth %s); record %d bytes before the first claim, then %v; requests per failed attempt %v, for the last (completed) %v",
				tc.name, c.history[1:], strings.Join(growth, ", "), c.sizes[0], c.sizes[1:], first, c.requests[attempts-1])
		}
	})
}

// BenchmarkEncodeDecodeFullHistory is BenchmarkEncodeDecodeTask with the
// golden record's history full: HistoryLimit entries, each with a 40-byte
// error.
func BenchmarkEncodeDecodeFullHistory(b *testing.B) {
	task := goldenTask()
	task.Attempt, task.MaxAttempts = HistoryLimit, HistoryLimit
	task.History = nil
	for n := 1; n <= HistoryLimit; n++ {
		task.History = append(task.History, Attempt{Number: n, WorkerID: "worker-8", StartedAt: task.CreatedAt, EndedAt: task.UpdatedAt,
			Outcome: OutcomeFailed, ErrorCategory: "bad_input", Error: strings.Repeat("e", 40), HeartbeatInterval: 20 * time.Second})
	}
	b.ReportAllocs()
	for b.Loop() {
		data, err := encodeRecord(task)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := decodeTask(recordKey, task.ID, data, 3); err != nil {
			b.Fatal(err)
		}
	}
}
