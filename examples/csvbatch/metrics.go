package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/s3task/s3task"
)

// Prometheus metrics. The worker's hooks count what this process's worker
// does; a periodic Store.Stats (every -stats-interval, reading at most
// -stats-max-tasks records) gauges the state of the whole bucket, as seen
// by this process. README.md lists every series.
//
// Label values are bounded: a task type this service does not know and an
// error category outside the known set are counted as "other", so a
// hand-written record cannot blow up the number of series.

const metricsNamespace = "s3task"

// knownCategories are the error_category values worth a series of their
// own: the library's, "unknown" (what Store.Stats counts a failure without
// a category as) and this service's (see categorize).
var knownCategories = []string{
	s3task.CategoryPermanent, s3task.CategoryTransient, s3task.CategoryPanic,
	s3task.CategoryLeaseExpired, s3task.CategoryShutdown, s3task.CategoryBadPayload,
	s3task.CategoryUnknownType, s3task.CategoryInputChanged, s3task.CategoryTimeout, "unknown",
	catBadInput, catInputUnavailable, catIO,
}

var allStatuses = []s3task.Status{
	s3task.StatusCreated, s3task.StatusQueued, s3task.StatusRunning,
	s3task.StatusCompleted, s3task.StatusFailed, s3task.StatusAbandoned,
}

type metrics struct {
	reg *prometheus.Registry

	// From the worker's hooks.
	claims           *prometheus.CounterVec
	completions      *prometheus.CounterVec
	failures         *prometheus.CounterVec
	leasesLost       *prometheus.CounterVec
	releases         *prometheus.CounterVec
	polls            prometheus.Counter
	pollMarkers      prometheus.Gauge
	pollStarted      prometheus.Counter
	pollSeconds      prometheus.Histogram
	reconciles       prometheus.Counter
	reconcileRepairs *prometheus.CounterVec
	reconcileBroken  prometheus.Gauge

	// From the webhook (events.go).
	events *prometheus.CounterVec

	// From Store.Stats.
	tasks          *prometheus.GaugeVec
	unfinished     prometheus.Gauge
	waitingRetry   prometheus.Gauge
	oldestAge      prometheus.Gauge
	oldestWaiting  prometheus.Gauge
	failedTasks    *prometheus.GaugeVec
	unreadable     prometheus.Gauge
	statsTruncated prometheus.Gauge
	statsLast      prometheus.Gauge
	statsErrors    prometheus.Counter
}

func newMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metricsNamespace, Name: name, Help: help}, labels)
		m.reg.MustRegister(c)
		return c
	}
	plain := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Namespace: metricsNamespace, Name: name, Help: help})
		m.reg.MustRegister(c)
		return c
	}
	gauge := func(name, help string) prometheus.Gauge {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: metricsNamespace, Name: name, Help: help})
		m.reg.MustRegister(g)
		return g
	}
	m.claims = counter("worker_claims_total", "Tasks this process's worker claimed, by task type.", "type")
	m.completions = counter("worker_completions_total", "Tasks this process's worker completed, by task type.", "type")
	m.failures = counter("worker_failures_total", "Failed attempts of this process's worker, by task type, error category, and whether the failure is final (true) or a retry is scheduled (false).", "type", "category", "final")
	m.leasesLost = counter("worker_leases_lost_total", "Attempts this process's worker stopped holding before the handler returned: cause canceled (an operator cancelled the task) or lost (another worker took it over, or the lease could not be renewed).", "cause")
	m.releases = counter("worker_releases_total", "Tasks put back in the queue by a shutdown of this process's worker, by task type.", "type")
	m.polls = plain("worker_polls_total", "Listings of the marker folder by this process's worker.")
	m.pollMarkers = gauge("worker_poll_markers", "Markers found by the latest listing: tasks that may need a worker.")
	m.pollStarted = plain("worker_poll_started_total", "Tasks started by the worker's listings.")
	m.pollSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: metricsNamespace, Name: "worker_poll_duration_seconds",
		Help:    "Time from a listing of the markers to the last task it visited.",
		Buckets: prometheus.ExponentialBuckets(0.005, 4, 8),
	})
	m.reg.MustRegister(m.pollSeconds)
	m.reconciles = plain("worker_reconcile_runs_total", "Reconcile runs of this process's worker.")
	m.reconcileRepairs = counter("worker_reconcile_repairs_total", "Markers the worker's reconcile repaired: kind restored (a task that needed a worker had none) or removed (stale).", "kind")
	m.reconcileBroken = gauge("worker_reconcile_unreadable_records", "Unreadable records the latest reconcile run met.")

	m.events = counter("webhook_events_total", "Events of POST /s3-events that concerned this process's worker (to=worker: a task's marker or record) or its Ingester (to=ingest: an object under -ingest).", "to")

	m.tasks = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: metricsNamespace, Name: "tasks",
		Help: "Tasks by status among the newest -stats-max-tasks, from the latest Store.Stats."}, []string{"status"})
	m.failedTasks = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: metricsNamespace, Name: "failed_tasks",
		Help: "Failed tasks (final or waiting for a retry) by error category, from the latest Store.Stats."}, []string{"category"})
	m.reg.MustRegister(m.tasks, m.failedTasks)
	m.unfinished = gauge("tasks_unfinished", "Tasks queued, running, or failed waiting for a retry, from the latest Store.Stats.")
	m.waitingRetry = gauge("tasks_waiting_retry", "Failed tasks with a retry scheduled, from the latest Store.Stats.")
	m.oldestAge = gauge("oldest_unfinished_age_seconds", "Age of the oldest unfinished task since its creation, 0 if there is none, from the latest Store.Stats. It counts tasks scheduled for later, waiting for a retry, or of a paused type: alert on s3task_oldest_waiting_age_seconds instead.")
	m.oldestWaiting = gauge("oldest_waiting_age_seconds", "How long the task due longest ago has waited for a worker, from when it fell due (its submit, its start, its retry time), 0 if none waits, from the latest Store.Stats. Tasks scheduled for later, retries still to come, running tasks and paused types do not count. A value that keeps growing means due work finds no worker.")
	m.unreadable = gauge("unreadable_records", "Records that could not be read (corrupt, or a newer schema), from the latest Store.Stats.")
	m.statsTruncated = gauge("stats_truncated", "1 if the latest Store.Stats stopped at -stats-max-tasks, so the task gauges cover the newest tasks only.")
	m.statsLast = gauge("stats_last_success_timestamp_seconds", "When Store.Stats last succeeded, in Unix seconds.")
	m.statsErrors = plain("stats_errors_total", "Store.Stats runs that failed.")

	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Every series exists from the start, so a rate() over a fresh process
	// starts at zero rather than at its first event.
	for _, s := range allStatuses {
		m.tasks.WithLabelValues(string(s))
	}
	for _, c := range append(slices.Clone(knownCategories), "other") {
		m.failedTasks.WithLabelValues(c)
	}
	for _, tt := range append(typeNames(), "other") {
		m.claims.WithLabelValues(tt)
		m.completions.WithLabelValues(tt)
	}
	for _, cause := range []string{"canceled", "lost"} {
		m.leasesLost.WithLabelValues(cause)
	}
	for _, kind := range []string{"restored", "removed"} {
		m.reconcileRepairs.WithLabelValues(kind)
	}
	for _, to := range []string{"worker", "ingest"} {
		m.events.WithLabelValues(to)
	}
	return m
}

// typeLabel bounds a task type to the ones this service runs.
func typeLabel(t string) string {
	if _, ok := lookupType(t); ok {
		return t
	}
	return "other"
}

// categoryLabel bounds an error category to the known ones.
func categoryLabel(c string) string {
	if slices.Contains(knownCategories, c) {
		return c
	}
	return "other"
}

// hooks returns the worker hooks that feed the counters. They are cheap
// and safe for concurrent use, as hooks must be.
func (m *metrics) hooks() s3task.Hooks {
	return s3task.Hooks{
		OnClaim:    func(t *s3task.Task) { m.claims.WithLabelValues(typeLabel(t.Type)).Inc() },
		OnComplete: func(t *s3task.Task) { m.completions.WithLabelValues(typeLabel(t.Type)).Inc() },
		OnFail: func(t *s3task.Task, _ error) {
			m.failures.WithLabelValues(typeLabel(t.Type), categoryLabel(t.ErrorCategory), strconv.FormatBool(t.Terminal())).Inc()
		},
		OnLeaseLost: func(_ string, _ *s3task.Task, cause error) {
			label := "lost"
			if errors.Is(cause, s3task.ErrTaskCanceled) {
				label = "canceled"
			}
			m.leasesLost.WithLabelValues(label).Inc()
		},
		OnRelease: func(t *s3task.Task) { m.releases.WithLabelValues(typeLabel(t.Type)).Inc() },
		OnPoll: func(p s3task.PollStats) {
			m.polls.Inc()
			m.pollMarkers.Set(float64(p.Markers))
			m.pollStarted.Add(float64(p.Started))
			m.pollSeconds.Observe(p.Took.Seconds())
		},
		OnReconcile: func(r *s3task.ReconcileReport) {
			m.reconciles.Inc()
			m.reconcileRepairs.WithLabelValues("restored").Add(float64(len(r.Restored)))
			m.reconcileRepairs.WithLabelValues("removed").Add(float64(len(r.Removed)))
			m.reconcileBroken.Set(float64(len(r.Broken)))
		},
	}
}

// observeStats sets the bucket gauges from a Stats result.
func (m *metrics) observeStats(st *s3task.Stats, at time.Time) {
	for _, s := range allStatuses {
		m.tasks.WithLabelValues(string(s)).Set(float64(st.ByStatus[s]))
	}
	byCategory := map[string]int{}
	for c, n := range st.Failures {
		byCategory[categoryLabel(c)] += n
	}
	for _, c := range append(slices.Clone(knownCategories), "other") {
		m.failedTasks.WithLabelValues(c).Set(float64(byCategory[c]))
	}
	m.unfinished.Set(float64(st.Unfinished))
	m.waitingRetry.Set(float64(st.WaitingRetry))
	m.oldestAge.Set(st.OldestUnfinishedAge.Seconds())
	m.oldestWaiting.Set(st.OldestWaitingAge.Seconds())
	m.unreadable.Set(float64(st.Broken))
	truncated := 0.0
	if st.Truncated {
		truncated = 1
	}
	m.statsTruncated.Set(truncated)
	m.statsLast.Set(float64(at.Unix()))
}

// handler serves the metrics in the Prometheus text format.
func (m *metrics) handler(log *slog.Logger) http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	})
}

// watchIngester exports how many object versions the Ingester's ingest
// failed for and that wait for its next sweep (s3task.Ingester.Waiting):
// above zero for long, S3 refuses them, and they are not tasks yet.
func (m *metrics) watchIngester(in *s3task.Ingester) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: metricsNamespace, Name: "ingest_waiting",
		Help: "Object versions under -ingest whose ingest failed for a passing reason (S3 not answering), which the Ingester's next sweep tries again."},
		func() float64 { return float64(len(in.Waiting())) }))
}

// runStats refreshes the bucket gauges now and every interval until ctx is
// done. Each run reads at most maxTasks records: one LIST and up to
// maxTasks GETs, plus one GET of the paused types.
func (m *metrics) runStats(ctx context.Context, store *s3task.Store, interval time.Duration, maxTasks int, log *slog.Logger) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		st, err := store.Stats(sctx, s3task.StatsOptions{MaxTasks: maxTasks})
		cancel()
		switch {
		case err == nil:
			m.observeStats(st, time.Now())
		case ctx.Err() == nil:
			m.statsErrors.Inc()
			log.Warn("metrics: store stats failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
