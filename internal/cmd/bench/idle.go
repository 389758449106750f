package main

// Scenario 2: what one idle worker costs, and how soon it notices new work.

import (
	"context"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"time"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/s3test"
)

const hoursPerMonth = 730 // 365 * 24 / 12

type idleResult struct {
	cfg     *config
	where   string
	scale   float64
	poll    time.Duration // the worker's PollInterval as run
	maxPoll time.Duration
	window  time.Duration // real time watched
	counts  counts        // the worker's requests in the window
	pickups []time.Duration

	// One Store.Reconcile, as a worker runs it every ReconcileInterval over
	// the tasks of the last ReconcileWindow.
	reconcile      counts
	reconcileTasks int
}

// equivalent is the stretch of time at the default intervals that the
// window stands for.
func (r *idleResult) equivalent() time.Duration { return time.Duration(float64(r.window) * r.scale) }

// perHour extrapolates the window's counts to one hour at default settings.
func (r *idleResult) perHour() map[string]float64 {
	f := float64(time.Hour) / float64(r.equivalent())
	out := map[string]float64{}
	for k, v := range r.counts.kinds {
		out[k] = float64(v) * f
	}
	return out
}

// monthlyDollars is the cost of one idle worker for a month.
func (r *idleResult) monthlyDollars() float64 {
	return r.cfg.prices.cost(scale(r.perHour(), hoursPerMonth))
}

// worstPickup is the longest submit-to-claim wait: the wake PUT lands just
// after a wake check read the object; the next check starts at most one
// check and one PollInterval later; then the check, a LIST, the record GET
// and the claim PUT. Five round trips and a PollInterval.
func (r *idleResult) worstPickup(rtt time.Duration) time.Duration { return r.poll + 5*rtt }

func runIdle(ctx context.Context, e *env, log io.Writer) (result, error) {
	cfg := e.cfg
	res := &idleResult{
		cfg: cfg, where: e.where(), scale: cfg.idleScale, window: cfg.idleWindow,
		poll:    time.Duration(float64(s3task.DefaultPollInterval) / cfg.idleScale),
		maxPoll: time.Duration(float64(s3task.DefaultMaxPollInterval) / cfg.idleScale),
	}
	// One warm-up task, so the wake object exists as in any bucket in use,
	// then one per pickup sample.
	producer, ids, err := e.producer(ctx, cfg.idleSamples+1, 8)
	if err != nil {
		return nil, err
	}
	wm := newMeter()
	ws, err := e.store(e.client(wm.wrap), "tasks", nil)
	if err != nil {
		return nil, err
	}
	p := newPickups(1)
	w, err := s3task.NewWorker(ws, noWork, &s3task.WorkerOptions{
		ID: "idle-worker", PollInterval: res.poll, MaxPollInterval: res.maxPoll,
		// The hourly reconcile is measured on its own below: a window of a
		// few minutes would catch it by chance or not at all.
		ReconcileInterval: -1,
		Hooks:             p.hooks(),
	})
	if err != nil {
		return nil, err
	}
	rw := startWorker(ctx, w)
	defer rw.stop()

	claimLimit := max(3*res.maxPoll, 10*time.Second)
	if _, err := p.pickup(ctx, producer, ids[0], claimLimit); err != nil {
		return nil, err
	}
	if err := s3test.Sleep(ctx, 2*res.poll); err != nil {
		return nil, err
	}

	fmt.Fprintf(log, "bench: idle: watching one idle worker for %s (PollInterval %s, MaxPollInterval %s)\n", res.window, res.poll, res.maxPoll)
	before := wm.snapshot()
	if err := s3test.Sleep(ctx, res.window); err != nil {
		return nil, err
	}
	res.counts = wm.snapshot().minus(before)

	// Pickups after the idle stretch, each submitted at a random moment of
	// the poll cycle.
	for _, id := range ids[1:] {
		if err := s3test.Sleep(ctx, time.Duration(mrand.Int64N(int64(res.poll)))+res.poll/2); err != nil {
			return nil, err
		}
		d, err := p.pickup(ctx, producer, id, claimLimit)
		if err != nil {
			return nil, err
		}
		res.pickups = append(res.pickups, d)
	}

	// The worker's periodic reconcile, run once by hand the way the worker
	// runs it, over the tasks of this bucket.
	rm := newMeter()
	rs, err := e.store(e.client(rm.wrap), "tasks", nil)
	if err != nil {
		return nil, err
	}
	rep, err := rs.Reconcile(ctx, s3task.ReconcileOptions{Since: time.Now().Add(-s3task.DefaultReconcileWindow)})
	if err != nil {
		return nil, err
	}
	res.reconcile, res.reconcileTasks = rm.snapshot(), rep.Tasks
	return res, nil
}

// reconcileRun estimates one reconcile's requests over k tasks in its
// window, from the measured run: the marker LIST, one folder LIST per 1,000
// tasks, and the per-task reads measured.
func (r *idleResult) reconcileRun(k int) map[string]float64 {
	perTask := 0.0
	if r.reconcileTasks > 0 {
		perTask = float64(r.reconcile.kinds["GET"]) / float64(r.reconcileTasks)
	}
	return map[string]float64{"LIST": float64(1 + max(1, (k+999)/1000)), "GET": perTask * float64(k)}
}

func (r *idleResult) tables() []*table {
	ph := r.perHour()
	t := newTable("Scenario 2: one idle worker, default settings (PollInterval 2s, MaxPollInterval 60s)",
		"kind", "in the window", "per hour", "per month", "$ per month")
	for _, k := range kinds {
		if r.counts.kinds[k] == 0 {
			continue
		}
		t.add(k, r.counts.kinds[k], ph[k], ph[k]*hoursPerMonth, dollars(ph[k]*hoursPerMonth*r.cfg.prices.of(k)/1000))
	}
	t.add("**total**", r.counts.total(), sumValues(ph), sumValues(ph)*hoursPerMonth, "**"+dollars(r.monthlyDollars())+"** (target ≤ $1, before the reconcile below)")
	if r.scale == 1 {
		t.note("Watched for %s of real time at the default intervals, against %s.", r.window, r.where)
	} else {
		t.note("Intervals divided by %g (PollInterval %s, MaxPollInterval %s), watched for %s: that stands for %s at the defaults, and the counts are extrapolated from it. The worker's schedule only depends on the intervals, so the counts scale linearly; round trips (%s on average here) do not shrink with it, which makes the scaled count slightly low.",
			r.scale, r.poll, r.maxPoll, span(r.window), span(r.equivalent()), dur(r.counts.meanRTT()))
	}
	t.note("A month is %d hours. Requests by label: %s.", hoursPerMonth, labelList(r.counts, 1, "×"))
	t.note("Each wait between wake checks is PollInterval shortened by up to 25%% at random (7/8 of it on average), so a worker makes about %s wake checks an hour, not 1,800.", num(float64(time.Hour)/(0.875*float64(s3task.DefaultPollInterval))))
	listEvery := float64(time.Hour/s3task.DefaultPollInterval) * hoursPerMonth
	t.note("For comparison, listing the markers at every poll instead (no wake object) would be %s LISTs a month, %s.", num(listEvery), dollars(listEvery*r.cfg.prices.list/1000))

	rc := newTable("Scenario 2c: the worker's hourly reconcile, by tasks created per day",
		"tasks per day", "requests per run", "per month (730 runs)", "$ per month, reconcile", "$ per month, idle worker in total", "target")
	base := r.monthlyDollars()
	for _, k := range []int{0, 10, 100, 1000, 3000, 10000} {
		run := r.reconcileRun(k)
		month := scale(run, hoursPerMonth)
		rd := r.cfg.prices.cost(month)
		rc.add(k, kindSummary(run), kindSummary(month), dollars(rd), dollars(base+rd), "≤ $1")
	}
	rc.note("Measured: one Store.Reconcile over the last %s read %d task records with %s. A worker runs it every ReconcileInterval (default %s) over the tasks created in the last ReconcileWindow (default %s), so with steady traffic each run reads about a day's tasks: every task is read 24 times a day by every worker. Rows other than the measured one are extrapolated: one marker LIST, one folder LIST per 1,000 tasks, one GET per task.",
		span(s3task.DefaultReconcileWindow), r.reconcileTasks, kindSummary(perUnit(r.reconcile.kinds, 1)), span(s3task.DefaultReconcileInterval), span(s3task.DefaultReconcileWindow))
	rc.note("The idle worker in total: the table above (wake checks and MaxPollInterval listings) plus the reconcile.")

	p := newTable("Scenario 2b: pickup latency of an idle worker (Submit's start to OnClaim)",
		"samples", "p50", "p99", "max", "max / PollInterval", "worst case (computed)", "target")
	rtt := r.counts.meanRTT()
	if len(r.pickups) > 0 {
		mx := percentile(r.pickups, 100)
		p.add(len(r.pickups), percentile(r.pickups, 50), percentile(r.pickups, 99), mx,
			fmt.Sprintf("%.2f", float64(mx)/float64(r.poll)), r.worstPickup(rtt), "≤ 2s")
	}
	p.note("PollInterval %s as run. Worst case = PollInterval + 5 round trips (the wake check, its successor's, the LIST, the record GET, the claim PUT); the mean round trip was %s here. On AWS S3, at roughly 20-60ms a request, the worst case at the defaults is about 2.1-2.3s: a little over 2s.", r.poll, dur(rtt))
	if r.scale != 1 {
		p.note("At -idle-scale %g the latencies are for a PollInterval of %s; compare them through the max / PollInterval column.", r.scale, r.poll)
	}
	return []*table{t, p, rc}
}
