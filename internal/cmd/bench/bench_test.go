package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain also serves as the worker-only child of the large scenario,
// which runs the test binary again with childEnv set; and it fails the run
// if a test leaves a goroutine behind.
func TestMain(m *testing.M) {
	if cfg, ok := childFromEnv(); ok {
		os.Exit(runChild(cfg, os.Stdout, os.Stderr))
	}
	goleak.VerifyTestMain(m)
}

// TestSmall runs the whole program at -small, as CI does, and checks what
// the numbers must say whatever the machine: counts, never times.
func TestSmall(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs every scenario; skipped with -short")
	}
	var out, log bytes.Buffer
	rep, err := run(t.Context(), []string{"-small"}, &out, &log)
	if err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, log.String())
	}
	t.Logf("ran in %s", rep.elapsed)

	for _, name := range scenarioNames {
		res := rep.get(name)
		if res == nil {
			t.Errorf("scenario %s produced no result", name)
			continue
		}
		for _, tb := range res.tables() {
			if len(tb.rows) == 0 {
				t.Errorf("scenario %s: table %q has no rows", name, tb.title)
			}
			if !strings.Contains(out.String(), "## "+tb.title) {
				t.Errorf("scenario %s: table %q not printed", name, tb.title)
			}
		}
	}
	if t.Failed() {
		return
	}

	t.Run("life", func(t *testing.T) {
		res := rep.get("life").(*lifeResult)
		short := res.variants[0]
		measured, floor := sumValues(byKind(short.task())), sumValues(floorTotal())
		if measured != math.Trunc(measured) {
			t.Errorf("the lives of identical tasks cost different requests: %s per task on average", num(measured))
		}
		if measured < floor {
			t.Errorf("a task's life took %s requests, below the floor of %s: the floor or the counting is wrong", num(measured), num(floor))
		}
		if measured > floor+2 {
			t.Errorf("a task's life took %s requests, more than 2 above the floor of %s: %v", num(measured), num(floor), short.extraOverFloor())
		}
		long := res.variants[1]
		if hb := long.task()[labelKey{"handler", "PUT record If-Match"}]; hb < 1 {
			t.Errorf("a task lasting 2.5 heartbeats made %s heartbeats", num(hb))
		}
	})

	t.Run("idle", func(t *testing.T) {
		res := rep.get("idle").(*idleResult)
		if res.counts.kinds["GET"] == 0 || res.counts.kinds["LIST"] == 0 {
			t.Errorf("idle worker made %v: want wake GETs and the MaxPollInterval LISTs", res.counts.kinds)
		}
		if n := res.counts.total() - res.counts.kinds["GET"] - res.counts.kinds["LIST"]; n != 0 {
			t.Errorf("idle worker made %d requests other than GET and LIST: %v", n, res.counts.labels)
		}
		if len(res.pickups) != rep.cfg.idleSamples {
			t.Errorf("%d pickups timed, want %d", len(res.pickups), rep.cfg.idleSamples)
		}
		if res.reconcileTasks < 1 {
			t.Errorf("the reconcile read %d tasks", res.reconcileTasks)
		}
	})

	t.Run("contention", func(t *testing.T) {
		res := rep.get("contention").(*contResult)
		if len(res.rows) != len(rep.cfg.contWorkers) {
			t.Fatalf("%d rows for %d worker counts", len(res.rows), len(rep.cfg.contWorkers))
		}
		for _, row := range res.rows {
			if row.lost != 0 || row.duplicates != 0 || row.distinct != row.tasks || row.claims != row.tasks {
				t.Errorf("%d workers: %d of %d tasks completed, %d claims won, %d duplicates, %d lost; want each task claimed and completed once",
					row.workers, row.distinct, row.tasks, row.claims, row.duplicates, row.lost)
			}
		}
	})

	t.Run("naive", func(t *testing.T) {
		res := rep.get("naive").(*naiveResult)
		for _, d := range []string{designOurs, designSharedIM} {
			row, ok := res.row(d)
			if !ok {
				t.Fatalf("no row for %s", d)
			}
			if row.duplicates != 0 || row.lost != 0 || row.distinct != row.tasks {
				t.Errorf("%s: %d duplicates, %d lost, %d of %d processed; want every task once", d, row.duplicates, row.lost, row.distinct, row.tasks)
			}
		}
		// Four workers rewriting one object without a condition, with a
		// few milliseconds between read and write and producers adding at
		// the same time: stale copies always win some races.
		a, ok := res.row(designShared)
		if !ok {
			t.Fatalf("no row for %s", designShared)
		}
		if a.duplicates+a.lost == 0 {
			t.Errorf("%s processed every task exactly once: the race it is there to show did not happen", designShared)
		}
		if c, ok := res.row(designRename); !ok || c.lost != 0 {
			t.Errorf("%s lost %d tasks; without crashes it only duplicates", designRename, c.lost)
		}
	})

	t.Run("paging", func(t *testing.T) {
		res := rep.get("paging").(*pagingResult)
		got, err := res.sameRequests()
		if err != nil {
			t.Fatal(err)
		}
		if want := "LIST=1 GET=50"; got != want {
			t.Errorf("a page cost %s, want %s", got, want)
		}
		if len(res.rows) != len(rep.cfg.pageSizes) {
			t.Errorf("%d rows for %d bucket sizes", len(res.rows), len(rep.cfg.pageSizes))
		}
		for _, row := range res.rows {
			if row.broken != 0 || row.tasksSeen != pageLimit {
				t.Errorf("bucket of %d: %d tasks on the page and %d broken records; the clones must be valid records", row.size, row.tasksSeen, row.broken)
			}
		}
	})

	t.Run("large", func(t *testing.T) {
		res := rep.get("large").(*largeResult)
		if res.worker.Rows != res.rows || res.worker.InBytes != res.inBytes || res.worker.OutBytes <= res.inBytes {
			t.Errorf("worker read %d rows, %d bytes and wrote %d bytes; the input has %d rows, %d bytes",
				res.worker.Rows, res.worker.InBytes, res.worker.OutBytes, res.rows, res.inBytes)
		}
		if !res.child {
			t.Errorf("the worker did not run in a child process")
		}
		if maxRSS() > 0 && res.workerRSS == 0 {
			t.Errorf("no RSS reported for the worker process")
		}
	})
}

func TestParseFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args    []string
		wantErr bool
		check   func(*config) bool
	}{
		{nil, false, func(c *config) bool { return len(c.scenarios) == 6 && c.contTasks == 1000 && c.largeBytes == 200<<20 }},
		{[]string{"-small"}, false, func(c *config) bool { return c.contTasks == 100 && c.idleScale == 100 && c.pageSizes[2] == 5000 }},
		{[]string{"-small", "-tasks", "7"}, false, func(c *config) bool { return c.contTasks == 7 }},
		{[]string{"-scenarios", "5,life"}, false, func(c *config) bool { return strings.Join(c.scenarios, ",") == "life,paging" }},
		{[]string{"-latency", "0"}, false, func(c *config) bool { return c.latMax == 0 }},
		{[]string{"-latency", "2ms-5ms"}, false, func(c *config) bool { return c.latMin == 2*time.Millisecond && c.latMax == 5*time.Millisecond }},
		{[]string{"-scenarios", "nope"}, true, nil},
		{[]string{"-scenarios", "7"}, true, nil},
		{[]string{"-latency", "5ms-2ms"}, true, nil},
		{[]string{"-workers", "1,0"}, true, nil},
		{[]string{"-endpoint", "http://x"}, true, nil}, // no bucket
		{[]string{"-bucket", "b"}, true, nil},          // no endpoint
		{[]string{"-idle-scale", "0.5"}, true, nil},
		{[]string{"extra"}, true, nil},
	}
	for _, tc := range tests {
		c, err := parseFlags(tc.args, io.Discard)
		if (err != nil) != tc.wantErr {
			t.Errorf("parseFlags(%q): error %v, want error %v", tc.args, err, tc.wantErr)
			continue
		}
		if err == nil && !tc.check(c) {
			t.Errorf("parseFlags(%q) = %+v", tc.args, c)
		}
	}
	if _, err := parseFlags([]string{"-h"}, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v, want flag.ErrHelp", err)
	}
}

// TestCSVGen checks that reads at any offset agree with one read of the
// whole generated file, and that every row has the fixed width.
func TestCSVGen(t *testing.T) {
	t.Parallel()
	g := newCSVGen(100_000)
	all := make([]byte, g.size)
	if n, err := g.ReadAt(all, 0); n != len(all) || (err != nil && !errors.Is(err, io.EOF)) {
		t.Fatalf("ReadAt(all) = %d, %v", n, err)
	}
	lines := strings.Split(strings.TrimSuffix(string(all), "\n"), "\n")
	if int64(len(lines)) != g.rows+1 || lines[0]+"\n" != genHeader {
		t.Fatalf("%d lines, header %q", len(lines), lines[0])
	}
	for i, l := range lines[1:] {
		if len(l)+1 != genRowLen {
			t.Fatalf("row %d is %d bytes: %q", i, len(l)+1, l)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		off := r.Int64N(g.size)
		buf := make([]byte, r.IntN(300))
		n, err := g.ReadAt(buf, off)
		want := all[off:min(off+int64(len(buf)), g.size)]
		if !bytes.Equal(buf[:n], want) {
			t.Fatalf("ReadAt(%d bytes, %d) = %q, want %q", len(buf), off, buf[:n], want)
		}
		if n < len(buf) && !errors.Is(err, io.EOF) {
			t.Fatalf("short read without io.EOF: %v", err)
		}
	}
}

func TestNumAndPercentile(t *testing.T) {
	t.Parallel()
	for v, want := range map[float64]string{0: "0", 3: "3", 2.5: "2.50", -1.25: "-1.25", 1234567: "1,234,567", 2057.14: "2,057", -4000: "-4,000"} {
		if got := num(v); got != want {
			t.Errorf("num(%v) = %q, want %q", v, got, want)
		}
	}
	ds := []time.Duration{5, 1, 4, 2, 3}
	for p, want := range map[float64]time.Duration{50: 3, 100: 5, 0: 1, 99: 5} {
		if got := percentile(ds, p); got != want {
			t.Errorf("percentile(%v) = %v, want %v", p, got, want)
		}
	}
	if percentile(nil, 50) != 0 {
		t.Error("percentile of nothing")
	}
}

func TestObjectClass(t *testing.T) {
	t.Parallel()
	for path, want := range map[string]string{
		"/tasks/p/7ZZZZZZZY1F801XTH00MY7XF09/status.json": "record",
		"/tasks/p/active/7ZZZZZZZY1F801XTH00MY7XF09":      "marker",
		"/tasks/p/_wake": "wake",
		"/tasks/p/7ZZZZZZZY1F801XTH00MY7XF09/input.csv":            "input",
		"/tasks/p/7ZZZZZZZY1F801XTH00MY7XF09/output-attempt-2.csv": "output",
		"/tasks/b/queue.json":                                      "queue.json",
		"/tasks/c/pending/x":                                       "pending/<id>",
		"/tasks/c/processing/x":                                    "processing/<id>",
		"/tasks/elsewhere":                                         "other",
	} {
		if got := objectClass(path); got != want {
			t.Errorf("objectClass(%q) = %q, want %q", path, got, want)
		}
	}
}
