package main

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/s3tasktest"
)

// scrape is one reading of /metrics: series (name{label="value",...}, with
// the labels sorted) to value.
type scrape map[string]float64

// parseScrape reads the Prometheus text format.
func parseScrape(t *testing.T, body string) scrape {
	t.Helper()
	m := scrape{}
	for line := range strings.SplitSeq(body, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			t.Fatalf("metrics line without a value: %q", line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		series := line[:i]
		if name, labels, ok := strings.Cut(series, "{"); ok {
			pairs := strings.Split(strings.TrimSuffix(strings.TrimSuffix(labels, "}"), `"`), `",`)
			slices.Sort(pairs)
			series = name + "{" + strings.Join(pairs, `",`) + `"}`
		}
		m[series] = v
	}
	return m
}

// series names a series the way parseScrape keys it; labels are name,
// value pairs.
func series(name string, labels ...string) string {
	if len(labels) == 0 {
		return name
	}
	var pairs []string
	for i := 0; i+1 < len(labels); i += 2 {
		pairs = append(pairs, labels[i]+`="`+labels[i+1])
	}
	slices.Sort(pairs)
	return name + "{" + strings.Join(pairs, `",`) + `"}`
}

// scrape fetches the metrics at url as the caller of token (none if ""),
// addressed to host (if not ""), and returns the status and the body.
func (s *service) scrape(url, token, host string) (int, string) {
	s.t.Helper()
	req, err := http.NewRequestWithContext(s.t.Context(), "GET", url, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if host != "" {
		req.Host = host
	}
	resp, body := s.do(req)
	if resp.StatusCode == http.StatusOK && !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		s.t.Errorf("/metrics Content-Type %q", resp.Header.Get("Content-Type"))
	}
	return resp.StatusCode, string(body)
}

// waitMetrics scrapes until cond holds, failing the test after a deadline.
func waitMetrics(t *testing.T, s *service, url string, what string, cond func(scrape) bool) scrape {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		code, body := s.scrape(url, s.token, "")
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", url, code, body)
		}
		m := parseScrape(t, body)
		if cond(m) {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics still not showing %s after 30s:\n%s", what, body)
		}
		<-tick.C
	}
}

// TestMetrics runs a task that completes and one whose input is unusable,
// then scrapes /metrics until the worker counters and the Store.Stats
// gauges show them.
func TestMetrics(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, svcOptions{})
	cfg.statsInterval = 20 * time.Millisecond
	s := startConfig(t, cfg)
	url := s.base + "/metrics"

	// Before any work: every labelled series is there at zero.
	code, body := s.scrape(url, s.token, "")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", code, body)
	}
	first := parseScrape(t, body)
	for _, name := range []string{
		series("s3task_worker_claims_total", "type", typeEnrich),
		series("s3task_worker_completions_total", "type", typeStats),
		series("s3task_worker_leases_lost_total", "cause", "canceled"),
		series("s3task_worker_reconcile_repairs_total", "kind", "restored"),
		series("s3task_tasks", "status", "queued"),
		series("s3task_failed_tasks", "category", catBadInput),
		"s3task_stats_errors_total",
	} {
		if v, ok := first[name]; !ok || v != 0 {
			t.Errorf("fresh service: %s = %v (present %t), want 0", name, v, ok)
		}
	}

	s.waitFor(s.submit("good", typeEnrich, nil, []byte("name,email\nAda,ada@example.com\n")), "completed", completed)
	s.waitFor(s.submit("empty", typeEnrich, nil, nil), "failed for good", failedForGood)

	// The hooks that feed the worker counters run after the records are
	// written, so wait for them as well as for the bucket gauges.
	m := waitMetrics(t, s, url, "both tasks", func(m scrape) bool {
		return m[series("s3task_tasks", "status", "completed")] == 1 && m[series("s3task_tasks", "status", "failed")] == 1 &&
			m[series("s3task_worker_completions_total", "type", typeEnrich)] == 1 &&
			m[series("s3task_worker_failures_total", "type", typeEnrich, "category", catBadInput, "final", "true")] == 1
	})
	want := map[string]float64{
		series("s3task_worker_claims_total", "type", typeEnrich):                                             2,
		series("s3task_worker_completions_total", "type", typeEnrich):                                        1,
		series("s3task_worker_failures_total", "type", typeEnrich, "category", catBadInput, "final", "true"): 1,
		series("s3task_worker_claims_total", "type", typeStats):                                              0,
		series("s3task_tasks", "status", "queued"):                                                           0,
		series("s3task_failed_tasks", "category", catBadInput):                                               1,
		"s3task_tasks_unfinished":                                                                            0,
		"s3task_tasks_waiting_retry":                                                                         0,
		"s3task_oldest_unfinished_age_seconds":                                                               0,
		"s3task_oldest_waiting_age_seconds":                                                                  0,
		"s3task_unreadable_records":                                                                          0,
		"s3task_stats_truncated":                                                                             0,
	}
	for name, v := range want {
		if got, ok := m[name]; !ok || got != v {
			t.Errorf("%s = %v (present %t), want %v", name, got, ok, v)
		}
	}
	for _, name := range []string{"s3task_worker_polls_total", "s3task_worker_poll_duration_seconds_count", "s3task_stats_last_success_timestamp_seconds", "go_goroutines", "process_resident_memory_bytes"} {
		if m[name] <= 0 {
			t.Errorf("%s = %v, want it to have moved", name, m[name])
		}
	}
	// The Submits of this process kick its worker, which visits each task
	// named with no listing; a listing starts one only if it came first
	// (the worker's start-up listing on a loaded machine, say).
	if got := m["s3task_worker_poll_started_total"]; got > 2 {
		t.Errorf("s3task_worker_poll_started_total = %v, want at most the 2 tasks", got)
	}

	// The API's rule: a bearer token.
	if code, _ := s.scrape(url, "", ""); code != http.StatusUnauthorized {
		t.Errorf("GET /metrics without a token: %d, want 401", code)
	}
	if code, _ := s.scrape(url, "wrong-secret-0123456789", ""); code != http.StatusUnauthorized {
		t.Errorf("GET /metrics with a wrong token: %d, want 401", code)
	}
}

// TestMetricsOldestWaiting: the two age gauges come from different
// fields of Store.Stats. A task scheduled for later makes the oldest
// unfinished task old while nothing waits; the alert rests on the oldest
// waiting one.
func TestMetricsOldestWaiting(t *testing.T) {
	t.Parallel()
	m := newMetrics()
	m.observeStats(&s3task.Stats{OldestUnfinishedAge: 40 * time.Minute, OldestWaitingAge: 90 * time.Second}, time.Now())
	if got := testutil.ToFloat64(m.oldestAge); got != 2400 {
		t.Errorf("s3task_oldest_unfinished_age_seconds = %v, want 2400", got)
	}
	if got := testutil.ToFloat64(m.oldestWaiting); got != 90 {
		t.Errorf("s3task_oldest_waiting_age_seconds = %v, want 90", got)
	}
	m.observeStats(&s3task.Stats{OldestUnfinishedAge: 41 * time.Minute}, time.Now())
	if got := testutil.ToFloat64(m.oldestWaiting); got != 0 {
		t.Errorf("s3task_oldest_waiting_age_seconds with nothing waiting = %v, want 0", got)
	}
}

func TestMetricsAccess(t *testing.T) {
	t.Parallel()

	t.Run("public", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig(t, svcOptions{})
		cfg.metricsPublic = true
		s := startConfig(t, cfg)
		if code, body := s.scrape(s.base+"/metrics", "", ""); code != http.StatusOK || !strings.Contains(body, "s3task_worker_polls_total") {
			t.Errorf("-metrics-public without a token: %d\n%s", code, body)
		}
		// The API itself still wants its token.
		if status, _ := s.as("", nil).request("GET", "/tasks", nil); status != http.StatusUnauthorized {
			t.Errorf("GET /tasks without a token under -metrics-public: %d, want 401", status)
		}
	})

	t.Run("open mode", func(t *testing.T) {
		t.Parallel()
		s := startService(t, svcOptions{tokens: "-"})
		if code, _ := s.scrape(s.base+"/metrics", "", ""); code != http.StatusOK {
			t.Errorf("open mode, loopback Host: %d, want 200", code)
		}
		if code, _ := s.scrape(s.base+"/metrics", "", "metrics.example.com"); code != http.StatusForbidden {
			t.Errorf("open mode, foreign Host: %d, want 403", code)
		}
	})

	t.Run("worker with -metrics-listen", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig(t, svcOptions{mode: modeWorker})
		cfg.metricsListen = "127.0.0.1:0"
		cfg.statsInterval = 20 * time.Millisecond
		s := startConfig(t, cfg)
		if s.app.srv != nil || s.app.metricsURL == "" {
			t.Fatalf("worker mode: API server %v, metrics at %q", s.app.srv != nil, s.app.metricsURL)
		}
		m := waitMetrics(t, s, s.app.metricsURL, "a poll and a stats refresh", func(m scrape) bool {
			return m["s3task_worker_polls_total"] > 0 && m["s3task_stats_last_success_timestamp_seconds"] > 0
		})
		if _, ok := m[series("s3task_tasks", "status", "completed")]; !ok {
			t.Error("no task gauges on -metrics-listen")
		}
		if code, _ := s.scrape(s.app.metricsURL, "", ""); code != http.StatusUnauthorized {
			t.Errorf("-metrics-listen without a token: %d, want 401", code)
		}
		if code, _ := s.scrape(strings.TrimSuffix(s.app.metricsURL, "/metrics")+"/tasks", s.token, ""); code != http.StatusNotFound {
			t.Errorf("-metrics-listen serves more than /metrics: GET /tasks %d", code)
		}
	})

	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig(t, svcOptions{mode: modeWorker, tokens: "-"})
		cfg.metricsListen = "0.0.0.0:0"
		a, err := start(context.Background(), cfg, s3tasktest.Logger(t))
		if err == nil {
			a.close()
			t.Fatal("serving /metrics on every interface without a token was allowed")
		}
		if !strings.Contains(err.Error(), "-metrics-public") {
			t.Errorf("refusal does not name the way out: %v", err)
		}
	})

	t.Run("flags", func(t *testing.T) {
		t.Parallel()
		for _, args := range [][]string{
			{"-stats-interval", "-1s"},
			{"-stats-interval", "1ms"},
			{"-stats-max-tasks", "0"},
			{"-metrics-listen", "127.0.0.1:0", "-selftest-rows", "10"},
		} {
			if _, err := parseConfig(args, noEnv, io.Discard); err == nil {
				t.Errorf("parseConfig(%q) accepted", args)
			}
		}
		cfg, err := parseConfig([]string{"-stats-interval", "0", "-metrics-public"}, noEnv, io.Discard)
		if err != nil || cfg.statsInterval != 0 || !cfg.metricsPublic || cfg.statsMaxTasks != 100 {
			t.Errorf("parseConfig: %+v, %v", cfg, err)
		}
	})
}
