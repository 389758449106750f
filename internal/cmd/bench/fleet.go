package main

// Scenario 7: a fleet of workers on one queue, since markers are keyed by
// due time (active/<due>_<id>, due first) and a worker reads one page from
// the head; next to an emulation, in the same run, of the previous design,
// where markers were keyed active/<id> (newest first) and every poll listed
// every page and visited the markers in random order.
//
//	7a  polling cost against the backlog: requests per claim
//	7b  oldest first: each task's wait against a strict FIFO's
//	7c  the reconcile bill of an idle fleet: one reconciler against sixteen
//	7d  pickup by a worker of the same process (local wake) and of another
//	7e  delayed start: CreateParams.RunAt and the LISTs while waiting
//	7f  LISTs per submitted task with 1, 4 and 16 idle workers
import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"
)

// fleetConfig is what the -fleet-* flags set.
type fleetConfig struct {
	backlogs    []int         // 7a: queued tasks seeded, one run per size
	claims      int           // 7a: claims measured
	oldPages    int           // 7a: most pages the previous design lists in the measured claims
	workers     int           // 7a, 7b, 7c: workers in the fleet
	queue       int           // 7b: tasks drained
	work        time.Duration // 7b: handler duration
	finished    int           // 7c: finished tasks in the bucket
	reconcile   time.Duration // 7c: ReconcileInterval
	samples     int           // 7d: pickups per variant
	runAt       time.Duration // 7e: RunAt - now
	idleWorkers []int         // 7f: worker counts
	idleSamples int           // 7f: submits per count
	idlePoll    time.Duration // 7f: PollInterval
}

const (
	designNew = "new (due-first markers, one page)"
	designOld = "previous (all pages, random order)"

	// fleetPoll is the PollInterval of the draining workers of 7a and 7b:
	// short, so that a worker whose poll found nothing to claim does not
	// sit out the run. An idle poll costs a conditional GET of the wake
	// object, never a LIST, so it does not change the LIST counts.
	fleetPoll = 50 * time.Millisecond

	// fleetAge is how far back the submit times of the 7a backlog go.
	fleetAge = time.Hour

	// markerLayout is the library's marker time format (marker.go).
	markerLayout = "20060102T150405.000Z"

	// reconcileIntervals is how many ReconcileIntervals 7c watches.
	reconcileIntervals = 4
)

type fleetResult struct {
	cfg     *config
	where   string
	drain   []fleetDrainRow // 7a: new and previous per backlog
	order   []*waitStats    // 7b: new, previous
	recon   []fleetReconRow // 7c: new, previous
	pickup  []fleetPickupRow
	delayed fleetDelayed
	idle    []fleetIdleRow
	svgs    []string // charts written
}

func runFleet(ctx context.Context, cfg *config, log io.Writer) (result, error) {
	res := &fleetResult{cfg: cfg, where: "in-process gofakes3, a fresh server per run"}
	if cfg.endpoint != "" {
		res.where = strings.TrimRight(cfg.endpoint, "/")
	}
	fc := cfg.fleet
	for _, b := range fc.backlogs {
		for _, design := range []string{designNew, designOld} {
			row, err := fleetDrain(ctx, cfg, design, b)
			if err != nil {
				return nil, fmt.Errorf("7a, backlog %d, %s: %w", b, design, err)
			}
			fmt.Fprintf(log, "bench: fleet: backlog %d, %s: %d claims, %s LIST/claim, seeded in %s, ran %s\n",
				b, design, row.claims, num(row.perClaim(row.c.kinds["LIST"])), row.seed.Round(time.Millisecond), row.elapsed.Round(time.Millisecond))
			res.drain = append(res.drain, row)
		}
	}
	for _, design := range []string{designNew, designOld} {
		ws, err := fleetOrder(ctx, cfg, design)
		if err != nil {
			return nil, fmt.Errorf("7b, %s: %w", design, err)
		}
		fmt.Fprintf(log, "bench: fleet: oldest first, %s: p99 wait %s, FIFO %s, drained in %s\n", design, ws.p99, ws.fp99, ws.elapsed.Round(time.Millisecond))
		res.order = append(res.order, ws)
	}
	for _, design := range []string{designNew, designOld} {
		row, err := fleetReconcile(ctx, cfg, design)
		if err != nil {
			return nil, fmt.Errorf("7c, %s: %w", design, err)
		}
		fmt.Fprintf(log, "bench: fleet: reconcile, %s: %s record GETs per interval, ran %s\n", design, num(row.perInterval(labelCount(row.c, "GET record"))), row.took.Round(time.Millisecond))
		res.recon = append(res.recon, row)
	}
	// 7d, 7e and 7f mostly sleep, waiting for poll cycles: they run at the
	// same time, each on a server of its own.
	var wg sync.WaitGroup
	var logMu sync.Mutex
	logf := func(format string, args ...any) {
		logMu.Lock()
		defer logMu.Unlock()
		fmt.Fprintf(log, format, args...)
	}
	errs := make([]error, 3)
	ctx, cancel := context.WithCancel(ctx) // one failing stops the others
	defer cancel()
	wg.Go(func() {
		for _, local := range []bool{true, false} {
			row, err := fleetPickup(ctx, cfg, local)
			if err != nil {
				errs[0] = fmt.Errorf("7d: %w", err)
				cancel()
				return
			}
			logf("bench: fleet: pickup, %s: p50 %s, max %s\n", row.variant, percentile(row.pickups, 50), percentile(row.pickups, 100))
			res.pickup = append(res.pickup, row)
		}
	})
	wg.Go(func() {
		d, err := fleetDelayedStart(ctx, cfg)
		if err != nil {
			errs[1] = fmt.Errorf("7e: %w", err)
			cancel()
			return
		}
		logf("bench: fleet: delayed start: claimed %s after RunAt, %d LISTs before it, %d after\n", d.late, d.listsBefore, d.listsAfter)
		res.delayed = d
	})
	wg.Go(func() {
		for _, n := range fc.idleWorkers {
			row, err := fleetIdleLists(ctx, cfg, n)
			if err != nil {
				errs[2] = fmt.Errorf("7f, %d workers: %w", n, err)
				cancel()
				return
			}
			logf("bench: fleet: %d idle workers: %s LISTs per submitted task\n", n, num(row.perTask(row.c.kinds["LIST"])))
			res.idle = append(res.idle, row)
		}
	})
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.svgDir != "" {
		for name, c := range map[string]*lineChart{"lists-per-claim.svg": res.listsChart(), "queue-wait.svg": res.waitChart()} {
			path, err := writeSVG(cfg.svgDir, name, c)
			if err != nil {
				return nil, fmt.Errorf("chart: %w", err)
			}
			res.svgs = append(res.svgs, path)
		}
		sort.Strings(res.svgs)
		fmt.Fprintf(log, "bench: fleet: wrote %s\n", strings.Join(res.svgs, ", "))
	}
	return res, nil
}

// Tables.

func (r *fleetResult) tables() []*table {
	fc := r.cfg.fleet
	a := newTable(fmt.Sprintf("Scenario 7a: polling cost against the backlog, %d workers (Concurrency 1, zero-work handler), per claim", fc.workers),
		"backlog", "design", "claims", "LIST", "record GET", "record GET per completed task", "marker DELETE", "PUT", "lost claims", "all requests", "run time")
	for i, row := range r.drain {
		a.add(row.backlog, row.design, row.claims, fmt.Sprintf("%.3f", row.lists()), row.recordGETs(), row.recordGETsPerDone(), row.markerDELETEs(), row.puts(), fmt.Sprintf("%.3f", row.lost()), row.total(), row.elapsed)
		if i%2 == 1 && r.drain[i-1].backlog == row.backlog {
			n := r.drain[i-1]
			ratio := func(a, b float64) string {
				if b == 0 {
					return "n/a"
				}
				return fmt.Sprintf("%.3f×", a/b)
			}
			a.add(row.backlog, "**new / previous**", "", ratio(n.lists(), row.lists()), ratio(n.recordGETs(), row.recordGETs()), ratio(n.recordGETsPerDone(), row.recordGETsPerDone()),
				ratio(n.markerDELETEs(), row.markerDELETEs()), ratio(n.puts(), row.puts()), ratio(n.lost(), row.lost()), ratio(n.total(), row.total()), "")
		}
	}
	a.note("Against %s. Each run seeds its backlog of queued tasks (clones of one task made by Store.Create, UploadInput and Submit, with IDs from NewIDAt and submit times spread evenly over the past hour) straight into the server's backend, then lets %d workers, each with its own S3 client, claim. New design: counts are the workers' requests from the %d-th claim won (OnClaim), when every worker has made its first LIST, to %d claims later, where the workers are stopped, divided by those claims; run time is that window (a worker lists again after each claim, so a whole run would add one LIST per worker that no claim follows). Workers poll every %s (wake object GETs, never LISTs, while nothing changes) and do not reconcile.", r.where, fc.workers, fc.workers, fc.claims, fleetPoll)
	a.note("Previous: an emulation of the design before due-first markers, on its own server, with markers active/<id>: %d goroutines, each listing every page of the marker folder (1,000 keys a page), shuffling, and visiting markers in that order: GET the record, claim a queued one with a PUT If-Match (a lost one costs a GET more, the re-read that settles it, then the next marker), on a win PUT the completed record, DELETE the marker, and list again; the marker of a finished task it meets is deleted, as the previous worker settled it. Each listing it starts ends in a claim, so it is counted over its whole run; it starts no listing after %d claims, or fewer where that many full listings would read more than %s pages (-fleet-old-pages; at least one claim per worker), to keep the run short: its LISTs per claim are the pages of one listing however many claims are made. It lists through plain HTTP requests on the same counted transport, picking the keys out of the XML by hand (the SDK's decoding of the tens of thousands of pages would dominate the run), so its run times are not comparable with the new design's: compare the counts.", fc.workers, fc.claims, num(float64(fc.oldPages)))
	a.note("New: a claim PUTs the marker at the lease's end, PUTs the record and DELETEs the queued marker; the completion PUTs the record and DELETEs the lease's marker. So a task costs 2 marker DELETEs and 3 PUTs by construction, against 1 and 2 before; a lost claim adds the PUT and DELETE of the marker it wrote first, and a GET (the re-read). The GETs and DELETEs beyond those are visits to markers that other workers claimed after this worker's LIST: all %d workers read the same head page and pick among its first 16 markers, so part of what a worker listed has gone by the time it gets there; each such visit costs a record GET and a DELETE of the queued marker it listed (already deleted by the claimer), and when the task has completed meanwhile, as zero-work tasks soon do, a second DELETE, of the lease's marker (deleted too). The previous design spread its workers over the whole folder at random, so they rarely met.", fc.workers)
	var whole []string
	for _, row := range r.drain {
		whole = append(whole, fmt.Sprintf("%s %s: %.3f", num(float64(row.backlog)), strings.SplitN(row.design, " (", 2)[0], float64(row.whole.kinds["LIST"])/float64(max(row.wholeClaims, 1))))
	}
	a.note("LISTs per claim over the whole run instead, start and stop included (each worker's first LIST, and the one each makes after its last claim): %s.", strings.Join(whole, "; "))
	if len(r.drain) > 0 {
		last := r.drain[len(r.drain)-1]
		for _, row := range r.drain {
			if row.backlog == last.backlog && row.design == designNew {
				a.note("Requests by label, new design at %s tasks, per claim: %s.", num(float64(row.backlog)), labelList(row.c, row.claims, ""))
			}
		}
		a.note("Previous design at %s tasks, per claim: %s.", num(float64(last.backlog)), labelList(last.c, last.claims, ""))
	}

	b := newTable(fmt.Sprintf("Scenario 7b: oldest first, %d workers draining %d queued tasks, handler %s", fc.workers, fc.queue, fc.work),
		"design", "wait p50", "wait p99", "wait max", "FIFO wait p50", "FIFO wait p99", "FIFO wait max", "p99 / FIFO p99", "max per-task wait / FIFO wait", "tasks in that max", "lost claims per claim", "drain time")
	for _, ws := range r.order {
		b.add(ws.design, ws.p50, ws.p99, ws.max, ws.fp50, ws.fp99, ws.fmax, fmt.Sprintf("%.3f", ws.p99Ratio), fmt.Sprintf("%.2f", ws.maxTaskRatio), ws.considered, fmt.Sprintf("%.3f", ws.lost), ws.elapsed)
	}
	for _, ws := range r.order {
		if ws.considered > 0 {
			k := ws.worstRank
			b.note("%s: the largest per-task ratio is that of task no. %d in due order: wait %s against a FIFO wait of %s.", ws.design, k+1, dur(ws.actual[k]), dur(ws.fifo[k]))
		}
	}
	b.note("Wait: OnClaim's time less the task's due time (its submit). FIFO wait: the claim times of the same run sorted and handed out in due order, the k-th earliest claim to the task due k-th, so it is what a strict FIFO queue served at the same pace would give each task. The per-task ratio is over the tasks whose FIFO wait is at least one handler duration. Goal for the new design: p99 ratio ≤ 1.25, per-task ratio ≤ 2.")
	b.note("The tasks were submitted evenly over %s before the workers started, the time the fleet needs to drain them (tasks × handler / workers), so a task's age and its queueing delay are of the same order and the order of service shows in the waits. Same seeding and workers as 7a (previous design emulated likewise), each design on its own server.", dur(time.Duration(fc.queue)*max(fc.work, time.Millisecond)/time.Duration(fc.workers)))
	b.note("In process, draining is bound by CPU, not by the handler: each claim of the new design decodes a LIST of up to 1,000 markers with the SDK and makes about 14 requests, where the emulated previous design decodes its LISTs by hand. So the drain here is far slower than tasks × handler / workers, the waits are mostly that drain, and p99 ratios come out near 1 for both designs; the per-task ratio is what tells the order of service apart. Drain times are not comparable between the designs.")

	c := newTable(fmt.Sprintf("Scenario 7c: the reconcile bill of %d idle workers, ReconcileInterval %s, over %d intervals, %d finished tasks", fc.workers, span(fc.reconcile), reconcileIntervals, fc.finished),
		"design", "reconcile runs", "records read per interval (GET record)", "lease GET per interval", "LIST per interval", "PUT per interval", "all requests per interval", "record GETs, new / previous")
	var oldGets float64
	for _, row := range r.recon {
		if row.design == designOld {
			oldGets = row.perInterval(labelCount(row.c, "GET record"))
		}
	}
	for _, row := range r.recon {
		gets := row.perInterval(labelCount(row.c, "GET record"))
		ratio := "1"
		if row.design == designNew && oldGets > 0 {
			ratio = fmt.Sprintf("%.4f (1/%.0f)", gets/oldGets, oldGets/max(gets, 1e-9))
		}
		design := "new (one reconciler per fleet)"
		if row.design == designOld {
			design = "previous (every worker reconciles)"
		}
		c.add(design, row.runs, gets, row.perInterval(labelCount(row.c, "GET other")), row.perInterval(row.c.kinds["LIST"]), row.perInterval(row.c.kinds["PUT"]), row.perInterval(row.c.total()), ratio)
	}
	c.note("Finished tasks created over the last 12 hours, inside the default ReconcileWindow (24h), no markers. New: the library's workers, idle, polling every ReconcileInterval/4 (a worker's turn at the lease comes between two polls); each asks for the reconciler lease (_reconciler: one GET, a PUT to take or renew it) once per interval, and only the holder reconciles: at its first turn over the whole window, then over the tasks created in the last two intervals (the whole window again every 24 turns). Previous: %d goroutines, each calling Store.Reconcile over the whole window once per interval, the first time at a random point of the first, as every worker did before.", fc.workers)
	for _, row := range r.recon {
		if row.design == designOld {
			c.note("Requests are all the fleet's, divided by %d intervals: the new fleet's over %s of real time (idle wake GETs and the LIST each worker makes at its start included), the previous fleet's %d runs per goroutine, which took %s here. Reconcile runs are the holder's OnReconcile calls, or the goroutines' Reconcile calls.",
				reconcileIntervals, span(reconcileIntervals*fc.reconcile), reconcileIntervals, dur(row.took))
		}
	}
	for _, row := range r.recon {
		c.note("%s, by label over the window: %s.", row.design, labelList(row.c, 1, "×"))
	}

	d := newTable("Scenario 7d: pickup by one idle worker at the default PollInterval (2s), Submit's start to OnClaim",
		"worker", "samples", "p50", "max", "LIST per pickup", "GET per pickup", "PUT per pickup", "DELETE per pickup", "all requests per pickup")
	for _, row := range r.pickup {
		per := perUnit(row.c.kinds, len(row.pickups))
		d.add(row.variant, len(row.pickups), percentile(row.pickups, 50), percentile(row.pickups, 100), per["LIST"], per["GET"], per["PUT"], per["DELETE"], sumValues(per))
	}
	d.note("7d, 7e and 7f run at the same time, each on a server of its own: they mostly sleep through poll cycles. The worker's requests from each Submit's start to the task's completion (not the producer's). Local: the producer and the worker share one Store, so Submit kicks the worker as soon as its wake PUT is answered. Own Store: the worker notices the wake object's new ETag at its next check, at most a PollInterval later; each Submit lands at a random point of that cycle.")
	for _, row := range r.pickup {
		d.note("%s, by label: %s.", row.variant, labelList(row.c, len(row.pickups), ""))
	}

	e := newTable("Scenario 7e: delayed start, CreateParams.RunAt = now + "+span(r.delayed.lead),
		"claim − RunAt", "worker LISTs between Submit and RunAt", "worker LISTs from RunAt to the claim", "LIST times relative to RunAt", "goal")
	var at []string
	for _, l := range r.delayed.lists {
		at = append(at, fmt.Sprintf("%+.2fs", l.Seconds()))
	}
	e.add(r.delayed.late, r.delayed.listsBefore, r.delayed.listsAfter, strings.Join(at, ", "), "at most 1 LIST, at or after RunAt")
	e.note("One idle worker on a Store of its own at the default PollInterval; the producer on another. Counted from Create's start to the claim: %s.", labelList(r.delayed.c, 1, "×"))
	e.note("Submit announces the task's marker in the wake object; the worker reads RunAt from the marker's name (its key starts with it), lists nothing then, and sleeps until RunAt instead of polling; the LIST at RunAt claims the task. RunAt counts to the millisecond here, as the marker's key holds it: the worker's wait ends at that millisecond.")

	f := newTable("Scenario 7f: LISTs per submitted task with idle workers",
		"idle workers", "PollInterval", "submits", "LIST per task", "wake GET per task", "all worker requests per task", "pickup p50", "pickup max")
	for _, row := range r.idle {
		f.add(row.workers, span(row.poll), row.samples, row.perTask(row.c.kinds["LIST"]), row.perTask(labelCount(row.c, "GET wake")), row.perTask(row.c.total()), percentile(row.pickups, 50), percentile(row.pickups, 100))
	}
	f.note("Each worker on a Store of its own, the producer on another; each Submit lands at a random point of the poll cycle, once every worker had a PollInterval (and 250ms) to notice the one before. Counted from the first measured Submit to a PollInterval after the last. An idle worker that sees the wake object change visits the task it names (a GET of its record, and the claim for the first), with no LIST. The workers' MaxPollInterval is an hour here, so that their safety listing (one a minute each at the default, scenario 2) stays out of the count.")
	if r.cfg.small {
		f.note("At -small the PollInterval is %s, so the pickup times are for that interval.", span(fc.idlePoll))
	}
	if len(r.svgs) > 0 {
		f.note("Charts: %s.", strings.Join(r.svgs, ", "))
	}
	g := newTable("Scenario 7: goals of the new design", "goal", "met")
	lines, met := r.fleetGoals()
	for i, l := range lines {
		g.add(l, map[bool]string{true: "yes", false: "**no**"}[met[i]])
	}
	return []*table{a, b, c, d, e, f, g}
}

// Charts.

// listsChart draws LISTs per claim against the backlog, both designs.
func (r *fleetResult) listsChart() *lineChart {
	c := &lineChart{
		title:  fmt.Sprintf("LISTs per claim, %d workers, against the backlog", r.cfg.fleet.workers),
		xLabel: "queued tasks (backlog)", yLabel: "LIST requests per claim",
		logX: true, logY: true,
	}
	for i, design := range []string{designNew, designOld} {
		s := chartSeries{name: strings.SplitN(design, " (", 2)[0] + " design", color: chartPalette[i], line: true, dots: true}
		for _, row := range r.drain {
			if row.design == design {
				s.points = append(s.points, chartPoint{float64(row.backlog), row.lists()})
			}
		}
		c.series = append(c.series, s)
	}
	return c
}

// waitChart draws each task's wait against its FIFO wait, both designs, with
// the diagonal where they are equal.
func (r *fleetResult) waitChart() *lineChart {
	c := &lineChart{
		title:  fmt.Sprintf("Wait for a claim against a strict FIFO's, %d tasks, %d workers", r.cfg.fleet.queue, r.cfg.fleet.workers),
		xLabel: "FIFO wait (s)", yLabel: "actual wait (s)",
	}
	hi := 0.0
	for i, ws := range r.order {
		s := chartSeries{name: strings.SplitN(ws.design, " (", 2)[0] + " design", color: chartPalette[i], dots: true}
		for k := range ws.actual {
			x, y := ws.fifo[k].Seconds(), ws.actual[k].Seconds()
			hi = max(hi, x, y)
			s.points = append(s.points, chartPoint{x, y})
		}
		c.series = append(c.series, s)
	}
	c.series = append(c.series, chartSeries{name: "actual = FIFO", color: "#777777", line: true, dashed: true, points: []chartPoint{{0, 0}, {hi, hi}}})
	return c
}

// fleetGoals checks the goals of the new design in a result; it returns
// one line per goal with the measured value, and whether it was met.
func (r *fleetResult) fleetGoals() (lines []string, met []bool) {
	check := func(ok bool, format string, args ...any) {
		lines, met = append(lines, fmt.Sprintf(format, args...)), append(met, ok)
	}
	for _, row := range r.drain {
		if row.design != designNew {
			continue
		}
		check(row.lists() <= 1.1, "backlog %d: %.3f LISTs per claim (goal ≤ 1.1)", row.backlog, row.lists())
		check(row.recordGETsPerDone() <= 1.3, "backlog %d: %.3f record GETs per completed task (goal ≤ 1.3)", row.backlog, row.recordGETsPerDone())
		check(row.markerDELETEs() <= 1.1, "backlog %d: %.3f marker DELETEs per claim (goal ≤ 1.1)", row.backlog, row.markerDELETEs())
	}
	for _, ws := range r.order {
		if ws.design == designNew {
			check(ws.p99Ratio <= 1.25, "oldest first: p99 wait / FIFO p99 = %.3f (goal ≤ 1.25)", ws.p99Ratio)
			check(ws.maxTaskRatio <= 2, "oldest first: max per-task wait / FIFO wait = %.2f (goal ≤ 2)", ws.maxTaskRatio)
		}
	}
	if len(r.recon) == 2 {
		n, o := labelCount(r.recon[0].c, "GET record"), labelCount(r.recon[1].c, "GET record")
		check(n*16 <= o*5/4, "reconcile: %d record GETs against %d before, %.4f (goal about 1/16 = 0.0625)", n, o, float64(n)/float64(max(o, 1)))
	}
	d := r.delayed
	check(d.listsBefore == 0 && d.listsAfter <= 1, "delayed start: %d LISTs before RunAt, %d from RunAt to the claim (goal: 0, and at most 1)", d.listsBefore, d.listsAfter)
	return lines, met
}
