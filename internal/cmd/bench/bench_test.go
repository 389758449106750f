package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"flag"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/s3task/s3task/internal/s3test"
)

// TestMain also serves as the worker-only child of the large scenario and
// as the worker process of the events scenario, which run the test binary
// again with childEnv or eventsChildEnv set; and it fails the run if a test
// leaves a goroutine behind.
func TestMain(m *testing.M) {
	if cfg, ok := childFromEnv(); ok {
		os.Exit(runChild(cfg, os.Stdout, os.Stderr))
	}
	if cfg, ok := eventsChildFromEnv(); ok {
		os.Exit(runEventsChild(cfg, os.Stdin, os.Stdout, os.Stderr))
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
	svgDir := t.TempDir()
	rep, err := run(t.Context(), []string{"-small", "-svg", svgDir}, &out, &log)
	if err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, log.String())
	}
	t.Logf("ran in %s", rep.elapsed)

	for _, name := range scenarioNames {
		if why, ok := rep.skipped[name]; ok {
			// Only the events scenario skips, without versitygw; CI has it.
			if os.Getenv("CI") != "" {
				t.Errorf("scenario %s skipped under CI: %s", name, why)
			} else {
				t.Logf("scenario %s skipped: %s", name, why)
			}
			continue
		}
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
		// Above the floor, on purpose: the wake object's write (it names
		// the task's marker, which the idle worker visits with no LIST).
		// Each must be explained in lifeExtras.
		if measured > floor+3 {
			t.Errorf("a task's life took %s requests, more than 3 above the floor of %s: %v", num(measured), num(floor), short.extraOverFloor())
		}
		for k := range short.extraOverFloor() {
			if _, ok := lifeExtras[k]; !ok {
				t.Errorf("an extra request beyond the floor that lifeExtras does not explain: %v", k)
			}
		}
		long := res.variants[1]
		if hb := long.task()[labelKey{"handler", "PUT record If-Match"}]; hb < 1 {
			t.Errorf("a task lasting 2.5 heartbeats made %s heartbeats", num(hb))
		}
	})

	t.Run("producers", func(t *testing.T) {
		// Counts only: how many writes a contended round refuses depends
		// on the machine.
		for _, row := range rep.get("producers").(*producersResult).rows {
			for k, v := range row.c.labels {
				if strings.HasPrefix(k.label, "PUT wake") && !strings.Contains(k.label, " If-") {
					t.Errorf("%d producers on %d Stores: %d wake PUTs without a condition", row.producers, row.stores, v)
				}
			}
			if n := labelCount(row.c, "GET paused"); n > 0 {
				t.Errorf("%d producers on %d Stores: %d GETs of the paused object", row.producers, row.stores, n)
			}
			if row.stores == 1 && statusCount(row.c, http.StatusPreconditionFailed) > 0 {
				t.Errorf("%d producers on one Store raced it: %d answers 412", row.producers, statusCount(row.c, http.StatusPreconditionFailed))
			}
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

	t.Run("fleet", func(t *testing.T) {
		checkFleet(t, rep.get("fleet").(*fleetResult), svgDir)
	})

	t.Run("events", func(t *testing.T) {
		if why, ok := rep.skipped["events"]; ok {
			t.Skip(why)
		}
		checkEvents(t, rep.get("events").(*eventsResult))
	})
}

// checkEvents checks what the events scenario must show at any size: the
// worker told by events lists nothing to find a task and picks it up far
// sooner than the polling one; both saw every task; the webhook's
// deliveries were all accepted; idle, the events worker is quieter.
func checkEvents(t *testing.T, res *eventsResult) {
	cfg := res.cfg.events
	if len(res.rows) < 2 || !res.rows[0].v.notify || res.rows[1].v.notify {
		t.Fatalf("%d rows; want the events variant, then polling, then any others", len(res.rows))
	}
	ev, poll := res.rows[0], res.rows[1]
	for _, row := range res.rows {
		if len(row.pickups) != cfg.tasks {
			t.Errorf("%s: %d pickups, want %d", row.v.name, len(row.pickups), cfg.tasks)
		}
		if row.refused != 0 {
			t.Errorf("%s: the handler refused %d of versitygw's deliveries", row.v.name, row.refused)
		}
		if row.deliveries < 2*len(row.pickups) {
			t.Errorf("%s: %d webhook deliveries for %d tasks; a Submit alone writes a marker and a record", row.v.name, row.deliveries, len(row.pickups))
		}
	}
	if n := ev.c.kinds["LIST"] + ev.gaps.kinds["LIST"]; n != 0 {
		t.Errorf("the worker told by events listed %d times in %d pickups; an event names the task (by label: %s; outside the pickups: %s)",
			n, len(ev.pickups), labelList(ev.c, 1, "×"), labelList(ev.gaps, 1, "×"))
	}
	if ev.notified < len(ev.pickups) {
		t.Errorf("Notify took an interest in %d records for %d tasks", ev.notified, len(ev.pickups))
	}
	if ev.idle.total() > max(1, int(res.window.Minutes()+0.5)) {
		t.Errorf("the idle worker with events made %d requests in %s: %s", ev.idle.total(), res.window, labelList(ev.idle, 1, "×"))
	}
	if poll.idle.total() <= ev.idle.total() {
		t.Errorf("idle for %s, the polling worker made %d requests and the one with events %d", res.window, poll.idle.total(), ev.idle.total())
	}
	if n := labelCount(poll.c, "GET wake"); n < len(poll.pickups) {
		t.Errorf("the polling worker checked the wake object %d times in %d pickups; it finds a task by those checks", n, len(poll.pickups))
	}
	// Far faster: a quarter of polling's p50 or of its mean, whichever is
	// larger, so that a run of lucky polls cannot fail it.
	var sum time.Duration
	for _, d := range poll.pickups {
		sum += d
	}
	evP50, pollP50, pollMean := percentile(ev.pickups, 50), percentile(poll.pickups, 50), sum/time.Duration(max(len(poll.pickups), 1))
	if evP50*4 > max(pollP50, pollMean) {
		t.Errorf("pickup p50 %s with events against %s (mean %s) by polling: want far faster", evP50, pollP50, pollMean)
	}
	t.Logf("pickup p50 %s with events, %s by polling; %s", evP50, pollP50, res.goals())
}

// fleetKnownMisses are goals of the new design that it does not meet: the
// test reports their numbers (t.Log) instead of failing on them, so that
// the other checks keep guarding. Remove an entry to enforce its goal.
//
//   - "deletes": a task costs 2 marker DELETEs by construction (the claim
//     moves the marker to the lease's end and deletes the queued one; the
//     completion deletes the lease's), against the goal of 1.1.
//   - "gets": with 16 workers reading the same head page, a poll visits
//     markers that other workers claimed since its LIST; each costs a record
//     GET. Workers widen their pick when they meet such markers, which
//     brings it to 1.3-2.1 GETs per completed task at full size, more in the
//     short small run.
//   - "order-task": the largest per-task ratio of wait to FIFO wait is a
//     ratio of times of one task, 1.8-2.4 in runs here: reported, not
//     enforced, as timing it would make the test flaky.
var fleetKnownMisses = map[string]bool{"deletes": true, "gets": true, "order-task": true}

// checkFleet checks the goals of the fleet scenario in small mode: counts
// and ratios of counts or of times measured in one run, never times.
func checkFleet(t *testing.T, res *fleetResult, svgDir string) {
	cfg := res.cfg.fleet
	goal := func(name string, ok bool, format string, args ...any) {
		t.Helper()
		switch {
		case ok && fleetKnownMisses[name]:
			t.Logf("goal %s met in this run, though listed in fleetKnownMisses: "+format, append([]any{name}, args...)...)
		case ok:
		case fleetKnownMisses[name]:
			t.Logf("GOAL MISSED (known): "+format, args...)
		default:
			t.Errorf(format, args...)
		}
	}

	// 7a: polling cost against the backlog.
	if len(res.drain) != 2*len(cfg.backlogs) {
		t.Fatalf("%d polling rows for %d backlogs and 2 designs", len(res.drain), len(cfg.backlogs))
	}
	for _, row := range res.drain {
		if row.design == designNew && (row.claims != cfg.claims || row.wholeClaims < cfg.workers+cfg.claims) {
			t.Errorf("backlog %d, new design: %d claims in the window and %d in all, want %d and at least %d", row.backlog, row.claims, row.wholeClaims, cfg.claims, cfg.workers+cfg.claims)
		}
		if row.design == designOld && (row.claims < oldClaims(cfg, row.backlog) || row.claims > oldClaims(cfg, row.backlog)+cfg.workers) {
			t.Errorf("backlog %d, previous design: %d claims, want %d to %d", row.backlog, row.claims, oldClaims(cfg, row.backlog), oldClaims(cfg, row.backlog)+cfg.workers)
		}
		if row.design == designOld {
			// Every listing reads the whole folder: at least backlog/1000 pages per claim.
			if pages := float64(row.backlog-row.wholeClaims) / 1000; row.lists() < pages {
				t.Errorf("backlog %d, previous design: %.3f LISTs per claim, below the %.2f pages of a full listing", row.backlog, row.lists(), pages)
			}
			continue
		}
		// Lost claims cost a LIST each, and a loaded machine loses more
		// (1.125 at backlog 5,000 with the cores busy, 1.01 idle: see
		// BENCHMARKS.md, section 9): the bound is one any machine meets.
		goal("lists", row.lists() <= 1.25, "backlog %d: %.3f LISTs per claim, want ≤ 1.25", row.backlog, row.lists())
		goal("gets", row.recordGETsPerDone() <= 1.3, "backlog %d: %.3f record GETs per completed task, want ≤ 1.3", row.backlog, row.recordGETsPerDone())
		goal("deletes", row.markerDELETEs() <= 1.1, "backlog %d: %.3f marker DELETEs per claim, want ≤ 1.1", row.backlog, row.markerDELETEs())
		// What the design needs in any case: the claim's move of the
		// marker (a DELETE) and the completion's (another), counted for
		// the claims and completions of the window (on a loaded machine
		// some claims of its end complete after it).
		if got, want := labelCount(row.c, "DELETE marker"), row.claims+row.completes; got < want {
			t.Errorf("backlog %d: %d marker DELETEs for %d claims and %d completions; a claim and a completion delete one each", row.backlog, got, row.claims, row.completes)
		}
	}
	for i := 0; i+1 < len(res.drain); i += 2 {
		n, o := res.drain[i], res.drain[i+1]
		if o.backlog >= 5000 && n.lists() >= o.lists()/2 {
			t.Errorf("backlog %d: %.3f LISTs per claim against %.3f before; listing one page should cost far less", n.backlog, n.lists(), o.lists())
		}
	}

	// 7b: oldest first.
	for _, ws := range res.order {
		if ws.n != cfg.queue || ws.claims != cfg.queue || ws.dups != 0 {
			t.Errorf("%s: %d tasks, %d claims, %d claimed twice; want %d claimed once each", ws.design, ws.n, ws.claims, ws.dups, cfg.queue)
		}
		if ws.design != designNew {
			continue
		}
		if ws.considered < ws.n/2 {
			t.Errorf("only %d of %d tasks had a FIFO wait of at least one handler duration", ws.considered, ws.n)
		}
		goal("order-p99", ws.p99Ratio <= 1.25, "p99 wait / FIFO p99 wait = %.3f, want ≤ 1.25", ws.p99Ratio)
		goal("order-task", ws.maxTaskRatio <= 2, "max per-task wait / FIFO wait = %.2f, want ≤ 2", ws.maxTaskRatio)
	}

	// 7c: the reconcile bill.
	if len(res.recon) != 2 {
		t.Fatalf("%d reconcile rows", len(res.recon))
	}
	nr, or := res.recon[0], res.recon[1]
	newGets, oldGets := labelCount(nr.c, "GET record"), labelCount(or.c, "GET record")
	if want := cfg.workers * reconcileIntervals * cfg.finished; oldGets < want {
		t.Errorf("previous design: %d record GETs, want %d (every worker reads every task at every interval)", oldGets, want)
	}
	if nr.runs < 1 || nr.tasks < cfg.finished {
		t.Errorf("new design: %d reconcile runs read %d records; want the holder's first run over all %d tasks", nr.runs, nr.tasks, cfg.finished)
	}
	goal("reconcile", newGets*16 <= oldGets*5/4, "reconcile: %d record GETs against %d before, want about 1/16 or less", newGets, oldGets)

	// 7d: local pickup.
	if len(res.pickup) != 2 {
		t.Fatalf("%d pickup rows", len(res.pickup))
	}
	for _, row := range res.pickup {
		if len(row.pickups) != cfg.samples {
			t.Errorf("%s: %d pickups, want %d", row.variant, len(row.pickups), cfg.samples)
		}
		// The local Submit's kick, or the wake object, names the task:
		// the worker visits it with no LIST.
		if l := row.c.kinds["LIST"]; l > len(row.pickups)/2 {
			t.Errorf("%s: %d LISTs for %d pickups, want about none", row.variant, l, len(row.pickups))
		}
	}
	local, remote := res.pickup[0], res.pickup[1]
	if n := labelCount(local.c, "GET wake"); n > len(local.pickups)/2 {
		t.Errorf("the local worker checked the wake object %d times in %d pickups; a local Submit wakes it directly", n, len(local.pickups))
	}
	if a, b := percentile(local.pickups, 50), percentile(remote.pickups, 50); a*4 > b {
		t.Errorf("pickup p50 %s with a local wake against %s without: want far faster", a, b)
	}

	// 7e: delayed start.
	d := res.delayed
	if d.late < -time.Second/2 {
		t.Errorf("the task was claimed %s before its RunAt", -d.late)
	}
	// Announced within ClockMargin of now, the marker is visited at once
	// and again at its time, with no LIST; one further ahead is listed
	// for once, at its time.
	if d.listsAfter > 1 {
		t.Errorf("%d LISTs from RunAt to the claim (%v), want at most 1", d.listsAfter, d.lists)
	}
	goal("delayed", d.listsBefore == 0, "%d LISTs between Submit and RunAt (%v), want none", d.listsBefore, d.lists)

	// 7f: LISTs per submitted task: none; the idle workers that see the
	// announcement visit the task it names (their safety listing is an
	// hour apart here).
	for _, row := range res.idle {
		if got := row.perTask(row.c.kinds["LIST"]); got > 0 {
			t.Errorf("%d idle workers: %.2f LISTs per submitted task, want about none", row.workers, got)
		}
	}

	// The charts.
	for _, name := range []string{"lists-per-claim.svg", "queue-wait.svg"} {
		data, err := os.ReadFile(filepath.Join(svgDir, name))
		if err != nil {
			t.Error(err)
			continue
		}
		checkSVG(t, name, data)
	}
}

// checkSVG checks that data is well-formed XML with an svg root holding
// text and shapes.
func checkSVG(t *testing.T, name string, data []byte) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(data))
	elems := map[string]int{}
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
			return
		}
		if se, ok := tok.(xml.StartElement); ok {
			elems[se.Name.Local]++
		}
	}
	if elems["svg"] != 1 || elems["text"] < 5 || elems["path"]+elems["circle"] < 2 {
		t.Errorf("%s: elements %v; want an svg with labels and drawn series", name, elems)
	}
}

// TestEventsWithoutVersitygw: without the versitygw binary the events
// scenario fails with the reason when named in -scenarios, and is skipped
// when it runs only as part of the default list.
func TestEventsWithoutVersitygw(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-versitygw")
	t.Setenv(s3test.EnvGatewayBin, missing)
	var out bytes.Buffer
	if _, err := run(t.Context(), []string{"-small", "-scenarios", "events"}, &out, io.Discard); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("-scenarios events without versitygw: error %v, want one naming %s", err, missing)
	}
	cfg, err := parseFlags([]string{"-small"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var skip skipError
	if _, err := runEvents(t.Context(), cfg, io.Discard); !errors.As(err, &skip) || !strings.Contains(err.Error(), missing) {
		t.Errorf("events in the default list without versitygw: error %v, want it skipped", err)
	}
}

func TestParseFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args    []string
		wantErr bool
		check   func(*config) bool
	}{
		{nil, false, func(c *config) bool {
			return len(c.scenarios) == 9 && !c.scenariosSet && c.contTasks == 1000 && c.largeBytes == 200<<20 &&
				slices.Equal(c.fleet.backlogs, []int{1000, 10000, 100000}) && c.fleet.claims == 320 && c.svgDir == "" &&
				c.events.tasks == 100 && c.events.idle == 2*time.Minute && c.events.pause == 2*time.Second &&
				c.events.shift == time.Second && slices.Equal(c.events.fanout, []int{4, 16})
		}},
		{[]string{"-small"}, false, func(c *config) bool {
			return c.contTasks == 100 && c.idleScale == 100 && c.pageSizes[2] == 5000 &&
				slices.Equal(c.fleet.backlogs, []int{1000, 5000}) && c.fleet.claims == 160 && c.fleet.queue == 500 &&
				c.events.tasks == 5 && c.events.idle == 5*time.Second && c.events.shift == 0 && c.events.fanout == nil
		}},
		{[]string{"-small", "-fleet-claims", "9", "-svg", "docs/"}, false, func(c *config) bool { return c.fleet.claims == 9 && c.svgDir == "docs/" }},
		{[]string{"-scenarios", "7"}, false, func(c *config) bool { return strings.Join(c.scenarios, ",") == "fleet" }},
		{[]string{"-scenarios", "8"}, false, func(c *config) bool { return strings.Join(c.scenarios, ",") == "events" && c.scenariosSet }},
		{[]string{"-small", "-events-tasks", "3", "-events-idle", "1s"}, false, func(c *config) bool { return c.events.tasks == 3 && c.events.idle == time.Second }},
		{[]string{"-small", "-tasks", "7"}, false, func(c *config) bool { return c.contTasks == 7 }},
		{[]string{"-scenarios", "5,life"}, false, func(c *config) bool { return strings.Join(c.scenarios, ",") == "life,paging" }},
		{[]string{"-latency", "0"}, false, func(c *config) bool { return c.latMax == 0 }},
		{[]string{"-latency", "2ms-5ms"}, false, func(c *config) bool { return c.latMin == 2*time.Millisecond && c.latMax == 5*time.Millisecond }},
		{[]string{"-scenarios", "nope"}, true, nil},
		{[]string{"-scenarios", "9"}, false, func(c *config) bool { return strings.Join(c.scenarios, ",") == "producers" && c.producerTasks == 20 }},
		{[]string{"-scenarios", "10"}, true, nil},
		{[]string{"-producers", "0"}, true, nil},
		{[]string{"-events-tasks", "0"}, true, nil},
		{[]string{"-events-idle", "0s"}, true, nil},
		{[]string{"-fleet-backlogs", "0"}, true, nil},
		{[]string{"-fleet-reconcile", "0s"}, true, nil},
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

func TestComputeWaits(t *testing.T) {
	t.Parallel()
	base := time.Unix(1000, 0)
	ms := time.Millisecond
	due := map[string]time.Time{"a": base, "b": base.Add(10 * ms), "c": base.Add(20 * ms), "d": base.Add(30 * ms)}
	// Claimed in the order d, a, b, c at 100, 110, 120, 130 ms.
	claimed := map[string]time.Time{"d": base.Add(100 * ms), "a": base.Add(110 * ms), "b": base.Add(120 * ms), "c": base.Add(130 * ms)}
	ws, err := computeWaits("x", due, claimed, 10*ms)
	if err != nil {
		t.Fatal(err)
	}
	// FIFO: a 100, b 100, c 100, d 100. Actual: a 110, b 110, c 110, d 70.
	wantA := []time.Duration{110 * ms, 110 * ms, 110 * ms, 70 * ms}
	wantF := []time.Duration{100 * ms, 100 * ms, 100 * ms, 100 * ms}
	if !slices.Equal(ws.actual, wantA) || !slices.Equal(ws.fifo, wantF) {
		t.Errorf("actual %v fifo %v, want %v and %v", ws.actual, ws.fifo, wantA, wantF)
	}
	if ws.maxTaskRatio != 1.1 || ws.considered != 4 || ws.p99Ratio != 1.1 {
		t.Errorf("max task ratio %v over %d, p99 ratio %v; want 1.1 over 4, 1.1", ws.maxTaskRatio, ws.considered, ws.p99Ratio)
	}
	delete(claimed, "c")
	if _, err := computeWaits("x", due, claimed, 10*ms); err == nil {
		t.Error("no error for a task never claimed")
	}
}

func TestLineChart(t *testing.T) {
	t.Parallel()
	c := &lineChart{
		title: "a <chart> & more", xLabel: "x", yLabel: "y", logX: true, logY: true,
		series: []chartSeries{
			{name: "one", line: true, dots: true, points: []chartPoint{{1000, 1}, {10000, 1.02}, {100000, 1.05}}},
			{name: "two", line: true, dashed: true, points: []chartPoint{{1000, 1.1}, {10000, 10.5}, {100000, 100.2}}},
		},
	}
	svg := c.svg()
	checkSVG(t, "log chart", []byte(svg))
	for _, want := range []string{"1k", "10k", "100k", "a &lt;chart&gt; &amp; more", "(log scale)", "stroke-dasharray"} {
		if !strings.Contains(svg, want) {
			t.Errorf("chart lacks %q", want)
		}
	}
	lin := &lineChart{title: "linear", series: []chartSeries{{name: "dots", dots: true, points: []chartPoint{{0, 0}, {3.5, 7}}}}}
	checkSVG(t, "linear chart", []byte(lin.svg()))
	for _, tc := range []struct {
		vs     []float64
		log    bool
		lo, hi float64
	}{
		{[]float64{1000, 100000}, true, 1000, 100000},
		{[]float64{1.2, 95}, true, 1, 100},
		{[]float64{3, 97}, false, 0, 100},
		{nil, false, 1, 10},
	} {
		if lo, hi := domain(tc.vs, tc.log); lo != tc.lo || hi != tc.hi {
			t.Errorf("domain(%v, %v) = %v, %v; want %v, %v", tc.vs, tc.log, lo, hi, tc.lo, tc.hi)
		}
	}
}

// TestSpan: configured intervals print briefly, without losing a digit.
func TestSpan(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 2 * time.Second: "2s", 10 * time.Second: "10s", 2 * time.Minute: "2m", 10 * time.Minute: "10m",
		90 * time.Second: "1m30s", time.Hour: "1h", 24 * time.Hour: "24h", 90 * time.Minute: "1h30m", 500 * time.Millisecond: "500ms",
	} {
		if got := span(d); got != want {
			t.Errorf("span(%s) = %q, want %q", d, got, want)
		}
	}
}
