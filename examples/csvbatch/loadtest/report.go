package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Result is the report of one run.
type Result struct {
	Clients           int     `json:"clients"`
	Duration          string  `json:"duration"`
	Rows              int     `json:"rows"`
	Workers           int     `json:"workers"`
	WorkerConcurrency int     `json:"worker_concurrency,omitempty"` // 0: csvbatch's default
	PollInterval      string  `json:"client_poll_interval"`
	Stall             string  `json:"stall"`
	StallMode         string  `json:"stall_mode,omitempty"`
	StallStart        string  `json:"stall_start,omitempty"` // after the load started
	GOMAXPROCS        int     `json:"gomaxprocs"`
	LoadSeconds       float64 `json:"load_seconds"`  // while new flows started
	DrainSeconds      float64 `json:"drain_seconds"` // for the flows under way to finish

	TasksCompleted int     `json:"tasks_completed"` // flows that ended with the output checked
	TasksPerSecond float64 `json:"tasks_per_second"`

	Latency []EndpointLatency `json:"latency"`
	// LongestAPIWaitMS is the longest any API request took, 503s included.
	LongestAPIWaitMS float64 `json:"longest_api_wait_ms"`
	// Unavailable counts 503 s3_unavailable answers by endpoint: the
	// client waited Retry-After and went on. Not errors.
	Unavailable map[string]int `json:"s3_unavailable_answers"`
	// Retried counts other answers that were repeated (5xx of S3 to a
	// presigned request).
	Retried map[string]int `json:"retried_answers"`
	Errors  map[string]int `json:"errors"`

	APIRSSStartKB  int   `json:"api_rss_start_kb"`
	APIRSSEndKB    int   `json:"api_rss_end_kb"`
	APIHWMStartKB  int   `json:"api_peak_rss_start_kb"`
	APIHWMEndKB    int   `json:"api_peak_rss_end_kb"`
	WorkerRSSEndKB []int `json:"worker_rss_end_kb"`
	WorkerHWMEndKB []int `json:"worker_peak_rss_end_kb"`

	// CPUSeconds is the CPU time each process used during the load and the
	// drain (this program's own clients included, as "loadtest").
	CPUSeconds map[string]float64 `json:"cpu_seconds"`

	// S3Requests counts the requests that reached the proxy during the
	// load and the drain, by source and kind.
	S3Requests    map[string]map[string]int `json:"s3_requests"`
	S3Statuses    map[string]int            `json:"s3_non_2xx"` // "api PUT 412"
	S3ProxyErrors map[string]int            `json:"s3_proxy_errors,omitempty"`
	S3PerTask     map[string]float64        `json:"s3_requests_per_task"` // by source, and "total"
	// IdleS3PerSecond is the S3 request rate of each process before the
	// load, with no task: the workers' polling, which the per-task figures
	// include.
	IdleS3PerSecond map[string]float64 `json:"idle_s3_requests_per_second,omitempty"`

	Verify struct {
		Checked           bool           `json:"checked"` // false if the run was interrupted
		TasksInBucket     int            `json:"tasks_in_bucket"`
		Completed         int            `json:"completed"`
		LeftUnfinished    int            `json:"left_unfinished"` // by flows that failed or were cut short
		WorkerCompletions int            `json:"worker_completions"`
		Attempts          map[string]int `json:"attempts"` // attempt_id -> tasks
	} `json:"verify"`

	// LogLines counts the WARN and ERROR lines of each process's log.
	LogLines map[string]map[string]int `json:"log_lines,omitempty"`
}

// EndpointLatency is the latency of one endpoint, in milliseconds.
type EndpointLatency struct {
	Endpoint string  `json:"endpoint"`
	Count    int     `json:"count"`
	P50      float64 `json:"p50_ms"`
	P99      float64 `json:"p99_ms"`
	Max      float64 `json:"max_ms"`
}

// ErrorCount is the number of errors of every kind.
func (r *Result) ErrorCount() int {
	n := 0
	for _, v := range r.Errors {
		n += v
	}
	return n
}

// percentile returns the nearest-rank p-th percentile of sorted.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// fill copies the recorder's figures into r.
func (rec *recorder) fill(r *Result) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	r.TasksCompleted = rec.completed
	if r.LoadSeconds > 0 {
		// Flows completed over the time they had: the load and the drain.
		r.TasksPerSecond = float64(rec.completed) / (r.LoadSeconds + r.DrainSeconds)
	}
	for _, ep := range endpointOrder {
		ds := slices.Clone(rec.latency[ep])
		if len(ds) == 0 {
			continue
		}
		slices.Sort(ds)
		r.Latency = append(r.Latency, EndpointLatency{
			Endpoint: ep, Count: len(ds),
			P50: ms(percentile(ds, 0.50)), P99: ms(percentile(ds, 0.99)), Max: ms(ds[len(ds)-1]),
		})
		if apiEndpoint(ep) {
			r.LongestAPIWaitMS = max(r.LongestAPIWaitMS, ms(ds[len(ds)-1]))
		}
	}
	r.Unavailable = maps.Clone(rec.unavailable)
	r.Retried = maps.Clone(rec.statuses)
	r.Errors = maps.Clone(rec.errors)
}

// computeS3PerTask divides the S3 requests by the tasks completed.
func (r *Result) computeS3PerTask() {
	r.S3PerTask = map[string]float64{}
	if r.TasksCompleted == 0 {
		return
	}
	total := 0
	for src, kinds := range r.S3Requests {
		n := 0
		for _, v := range kinds {
			n += v
		}
		total += n
		key := src
		if strings.HasPrefix(src, "worker") {
			key = "workers"
		}
		r.S3PerTask[key] += float64(n) / float64(r.TasksCompleted)
	}
	r.S3PerTask["total"] = float64(total) / float64(r.TasksCompleted)
}

// WriteTable prints the report for a reader.
func (r *Result) WriteTable(w io.Writer) {
	stall := "none"
	if r.Stall != "0s" {
		stall = fmt.Sprintf("%s (%s) from %s after the start", r.Stall, r.StallMode, r.StallStart)
	}
	conc := "default"
	if r.WorkerConcurrency > 0 {
		conc = fmt.Sprint(r.WorkerConcurrency)
	}
	fmt.Fprintf(w, "\ncsvbatch load test: %d clients for %s, %d-row CSVs, 1 API + %d workers (concurrency %s), client poll %s, stall %s, GOMAXPROCS %d\n\n",
		r.Clients, r.Duration, r.Rows, r.Workers, conc, r.PollInterval, stall, r.GOMAXPROCS)
	fmt.Fprintf(w, "tasks completed   %d in %.1fs (load %.1fs + drain %.1fs): %.2f tasks/s\n",
		r.TasksCompleted, r.LoadSeconds+r.DrainSeconds, r.LoadSeconds, r.DrainSeconds, r.TasksPerSecond)
	fmt.Fprintf(w, "errors            %d%s\n", r.ErrorCount(), listCounts(r.Errors))
	fmt.Fprintf(w, "503 s3_unavailable answers (waited Retry-After, went on) %d%s\n", sum(r.Unavailable), listCounts(r.Unavailable))
	if len(r.Retried) > 0 {
		fmt.Fprintf(w, "S3 5xx to presigned requests, repeated %d%s\n", sum(r.Retried), listCounts(r.Retried))
	}
	fmt.Fprintf(w, "longest API wait  %.0f ms\n\n", r.LongestAPIWaitMS)

	fmt.Fprintf(w, "%-38s %7s %9s %9s %9s\n", "endpoint", "count", "p50 ms", "p99 ms", "max ms")
	for _, l := range r.Latency {
		fmt.Fprintf(w, "%-38s %7d %9.1f %9.1f %9.1f\n", l.Endpoint, l.Count, l.P50, l.P99, l.Max)
	}

	fmt.Fprintf(w, "\nAPI process RSS   start %.1f MB, end %.1f MB (peak %.1f MB)\n",
		float64(r.APIRSSStartKB)/1024, float64(r.APIRSSEndKB)/1024, float64(r.APIHWMEndKB)/1024)
	var ws []string
	for i := range r.WorkerRSSEndKB {
		ws = append(ws, fmt.Sprintf("%.1f MB (peak %.1f MB)", float64(r.WorkerRSSEndKB[i])/1024, float64(r.WorkerHWMEndKB[i])/1024))
	}
	fmt.Fprintf(w, "worker RSS at end %s\n", strings.Join(ws, ", "))
	var cpu []string
	total := 0.0
	for _, name := range slices.Sorted(maps.Keys(r.CPUSeconds)) {
		cpu = append(cpu, fmt.Sprintf("%s %.1f", name, r.CPUSeconds[name]))
		total += r.CPUSeconds[name]
	}
	fmt.Fprintf(w, "CPU seconds       %s (total %.1f over %.1fs)\n\n", strings.Join(cpu, ", "), total, r.LoadSeconds+r.DrainSeconds)

	fmt.Fprintf(w, "S3 requests per completed task: %.1f", r.S3PerTask["total"])
	for _, k := range []string{"api", "client (presigned)", "workers"} {
		fmt.Fprintf(w, "; %s %.1f", k, r.S3PerTask[k])
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	kinds := map[string]bool{}
	for _, m := range r.S3Requests {
		for k := range m {
			kinds[k] = true
		}
	}
	kindList := slices.Sorted(maps.Keys(kinds))
	fmt.Fprintf(tw, "source\t%s\ttotal\t\n", strings.Join(kindList, "\t"))
	for _, src := range slices.Sorted(maps.Keys(r.S3Requests)) {
		row := []string{src}
		t := 0
		for _, k := range kindList {
			n := r.S3Requests[src][k]
			t += n
			row = append(row, fmt.Sprint(n))
		}
		fmt.Fprintf(tw, "%s\t%d\t\n", strings.Join(row, "\t"), t)
	}
	tw.Flush()
	if len(r.IdleS3PerSecond) > 0 {
		var parts []string
		for _, src := range slices.Sorted(maps.Keys(r.IdleS3PerSecond)) {
			parts = append(parts, fmt.Sprintf("%s %.1f", src, r.IdleS3PerSecond[src]))
		}
		fmt.Fprintf(w, "S3 requests per second before the load, idle: %s\n", strings.Join(parts, ", "))
	}
	if len(r.S3Statuses) > 0 {
		fmt.Fprintf(w, "S3 answers other than 2xx:%s\n", listCounts(r.S3Statuses))
	}
	if len(r.S3ProxyErrors) > 0 {
		fmt.Fprintf(w, "proxy could not reach S3:%s\n", listCounts(r.S3ProxyErrors))
	}

	v := r.Verify
	if !v.Checked {
		fmt.Fprintf(w, "\ncheck of the bucket: not done\n")
		return
	}
	var att []string
	for _, k := range slices.Sorted(maps.Keys(v.Attempts)) {
		att = append(att, fmt.Sprintf("attempt %s: %d", k, v.Attempts[k]))
	}
	fmt.Fprintf(w, "\ncheck of the bucket: %d tasks, %d completed, %d left unfinished by failed flows; worker completions %d; %s\n",
		v.TasksInBucket, v.Completed, v.LeftUnfinished, v.WorkerCompletions, strings.Join(att, ", "))
	if len(r.LogLines) > 0 {
		var ls []string
		for _, p := range slices.Sorted(maps.Keys(r.LogLines)) {
			ls = append(ls, fmt.Sprintf("%s%s", p, listCounts(r.LogLines[p])))
		}
		fmt.Fprintf(w, "log lines: %s\n", strings.Join(ls, "; "))
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// listCounts formats counts as " (a: 1, b: 2)", "" when empty.
func listCounts(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s: %d", k, m[k]))
	}
	return " (" + strings.Join(parts, ", ") + ")"
}
