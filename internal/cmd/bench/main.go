// Command bench measures what s3task costs in the units S3 bills and users
// wait for: requests by kind and round trips. It runs nine scenarios and
// prints one table (or a few) per scenario, in Markdown:
//
//	life        the requests of one task's life, next to the fewest this design allows
//	idle        requests, dollars and pickup latency of an idle worker
//	contention  1 to 16 workers draining one queue: throughput and lost claims
//	naive       the same work through the naive designs of internal/baseline
//	paging      the cost of a List page as the bucket grows
//	large       a large CSV through a streaming handler: memory and MB/s
//	fleet       a fleet of 16 workers: polling cost against the backlog, oldest
//	            first, the reconcile bill, local pickup, delayed start, next to
//	            an emulation of the previous design (markers newest first,
//	            every poll listing every page)
//	events      pickup with S3 event notifications (versitygw's webhook into
//	            Worker.Notify, the worker in another process) against polling
//	            in the same run, and the idle worker's requests
//	producers   1 and 16 producers that submit at once: what queueing costs,
//	            and the wake object's refused and blind writes
//
// By default everything runs against an in-process S3 (gofakes3, a fresh one
// per scenario). Give -endpoint and friends to run against any S3-compatible
// store (path-style addressing); every scenario then works under its own
// prefix, removed afterwards unless -keep is set. The events scenario always
// runs versitygw servers of its own (the binary is found as
// internal/s3test.GatewayBinary says); without the binary it is skipped,
// unless -scenarios names it, which makes that an error.
//
//	go run ./internal/cmd/bench                     # full size
//	go run ./internal/cmd/bench -small              # CI smoke test, well under a minute
//	go run ./internal/cmd/bench -scenarios life,idle
//	go run ./internal/cmd/bench -scenarios fleet -svg docs/   # also draws docs/*.svg
//	go run ./internal/cmd/bench -endpoint http://127.0.0.1:7070 -bucket b -access-key k -secret-key s
//
// Requests are counted by an instrumented HTTP transport under every S3
// client, so they are what went over the wire, SDK retries included.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/s3task/s3task"
)

func main() {
	if cfg, ok := childFromEnv(); ok {
		os.Exit(runChild(cfg, os.Stdout, os.Stderr))
	}
	if cfg, ok := eventsChildFromEnv(); ok {
		os.Exit(runEventsChild(cfg, os.Stdin, os.Stdout, os.Stderr))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if _, err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// scenario is one thing the program measures. Most run on one env of
// their own (runEnv), opened before and closed after; the others open what
// they need (run).
type scenario struct {
	name   string
	run    func(ctx context.Context, cfg *config, log io.Writer) (result, error)
	runEnv func(ctx context.Context, e *env, log io.Writer) (result, error)
}

// scenarios lists the scenarios in the order they run.
var scenarios = []scenario{
	{name: "life", runEnv: runLife},
	{name: "idle", runEnv: runIdle},
	{name: "contention", run: runContention},
	{name: "naive", runEnv: runNaive},
	{name: "paging", runEnv: runPaging},
	{name: "large", runEnv: runLarge},
	{name: "fleet", run: runFleet},
	{name: "events", run: runEvents},
	{name: "producers", runEnv: runProducers},
}

// scenarioNames lists the names of the scenarios in the order they run.
var scenarioNames = func() []string {
	names := make([]string, len(scenarios))
	for i, s := range scenarios {
		names[i] = s.name
	}
	return names
}()

// config is everything the flags set.
type config struct {
	small     bool
	scenarios []string
	// scenariosSet is true when -scenarios was given: a scenario that
	// cannot run then fails the run instead of being skipped.
	scenariosSet bool

	// The S3 to run against; an empty endpoint means in-process.
	endpoint, bucket, accessKey, secretKey, region string
	keep, createBucket                             bool

	prices prices

	// latency is added to every request of the contention and naive
	// scenarios, half before sending and half after the answer.
	latMin, latMax time.Duration

	lives int // task lives measured per variant

	idleWindow  time.Duration // how long the idle worker is watched
	idleScale   float64       // intervals are divided by this (1 = real defaults)
	idleSamples int           // pickups timed after the idle window

	contWorkers []int
	contTasks   int
	contPoll    time.Duration

	naiveTasks, naiveWorkers, naiveProducers int

	producers     []int // producer counts (producers)
	producerTasks int   // tasks queued per producer (producers)

	pageSizes []int
	pageReps  int

	largeBytes int64
	largeChild bool // run the large scenario's worker in a child process

	fleet fleetConfig

	events eventsConfig

	// svgDir, if set, is where the fleet scenario draws its charts.
	svgDir string
}

// report is what run measured, scenario by scenario.
type report struct {
	cfg     *config
	results map[string]result // by scenario name
	skipped map[string]string // by scenario name: why it did not run
	elapsed time.Duration
}

// result is one scenario's outcome.
type result interface {
	tables() []*table
}

func (r *report) get(name string) result { return r.results[name] }

// run parses args, runs the selected scenarios and prints their tables to
// stdout as each finishes; progress goes to stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) (*report, error) {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return nil, err
	}
	rep := &report{cfg: cfg, results: map[string]result{}, skipped: map[string]string{}}
	start := time.Now()
	fmt.Fprintf(stdout, "# s3task benchmarks\n\n%s\n", cfg.describe())
	for _, sc := range scenarios {
		name := sc.name
		if !slices.Contains(cfg.scenarios, name) {
			continue
		}
		fmt.Fprintf(stderr, "bench: scenario %s...\n", name)
		t0 := time.Now()
		fresh := resetPeakRSS()
		mem := startMemSampler()
		res, err := sc.start(ctx, cfg, stderr)
		peak := mem.stop()
		var skip skipError
		if errors.As(err, &skip) {
			rep.skipped[name] = skip.err.Error()
			fmt.Fprintf(stderr, "bench: scenario %s skipped: %v\n", name, skip.err)
			fmt.Fprintf(stdout, "_Scenario %s skipped: %v. Name it in -scenarios to make that an error._\n\n", name, skip.err)
			continue
		}
		if err != nil {
			return rep, fmt.Errorf("scenario %s: %w", name, err)
		}
		rep.results[name] = res
		took := time.Since(t0)
		fmt.Fprintf(stderr, "bench: scenario %s done in %s\n", name, took.Round(time.Millisecond))
		for _, t := range res.tables() {
			t.write(stdout)
		}
		rss := "peak RSS of this process during it"
		if !fresh {
			rss = "peak RSS of this process so far"
		}
		inproc := ""
		if cfg.endpoint == "" {
			inproc = "; the in-process S3 is part of this process"
		}
		fmt.Fprintf(stdout, "_Scenario %s ran in %s; peak Go memory of this process during it %s (sampled via runtime/metrics), %s %s%s._\n\n",
			name, took.Round(time.Millisecond), mib(peak), rss, mib(peakRSS()), inproc)
	}
	rep.elapsed = time.Since(start)
	fmt.Fprintf(stdout, "_All scenarios ran in %s._\n", rep.elapsed.Round(time.Millisecond))
	return rep, nil
}

// start runs the scenario.
func (s scenario) start(ctx context.Context, cfg *config, log io.Writer) (result, error) {
	if s.run != nil {
		return s.run(ctx, cfg, log)
	}
	e, err := openEnv(cfg, s.name)
	if err != nil {
		return nil, err
	}
	defer e.close()
	return s.runEnv(ctx, e, log)
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &config{}
	fs.BoolVar(&c.small, "small", false, "run every scenario at a small size (CI smoke test)")
	scen := fs.String("scenarios", strings.Join(scenarioNames, ","), fmt.Sprintf("comma-separated scenarios to run, by name or number 1-%d: %s", len(scenarioNames), strings.Join(scenarioNames, ",")))
	fs.StringVar(&c.endpoint, "endpoint", "", "S3 endpoint URL (path-style); empty runs an in-process gofakes3 per scenario")
	fs.StringVar(&c.bucket, "bucket", "", "bucket to use with -endpoint (default: the in-process server's)")
	fs.StringVar(&c.accessKey, "access-key", "test", "access key for -endpoint")
	fs.StringVar(&c.secretKey, "secret-key", "testsecret", "secret key for -endpoint")
	fs.StringVar(&c.region, "region", "us-east-1", "region for -endpoint")
	fs.BoolVar(&c.keep, "keep", false, "with -endpoint, leave the objects the run wrote")
	fs.BoolVar(&c.createBucket, "create-bucket", false, "with -endpoint, create -bucket if it does not exist")
	fs.Float64Var(&c.prices.put, "price-put", 0.005, "dollars per 1,000 PUT (and COPY) requests")
	fs.Float64Var(&c.prices.post, "price-post", 0.005, "dollars per 1,000 POST requests")
	fs.Float64Var(&c.prices.list, "price-list", 0.005, "dollars per 1,000 LIST requests")
	fs.Float64Var(&c.prices.get, "price-get", 0.0004, "dollars per 1,000 GET requests")
	fs.Float64Var(&c.prices.head, "price-head", 0.0004, "dollars per 1,000 HEAD requests")
	fs.Float64Var(&c.prices.del, "price-delete", 0, "dollars per 1,000 DELETE requests")
	lat := fs.String("latency", "1ms-3ms", "added network latency MIN-MAX per request in the contention and naive scenarios (0 for none)")
	fs.IntVar(&c.lives, "lives", 20, "task lives measured per variant (life)")
	fs.DurationVar(&c.idleWindow, "idle-window", 120*time.Second, "how long the idle worker is watched, in real time (idle)")
	fs.Float64Var(&c.idleScale, "idle-scale", 1, "divide the idle worker's default intervals by this; counts are scaled back (idle)")
	fs.IntVar(&c.idleSamples, "idle-samples", 10, "pickups timed after the idle window (idle)")
	workers := fs.String("workers", "1,2,4,8,16", "worker counts (contention)")
	fs.IntVar(&c.contTasks, "tasks", 1000, "tasks drained per worker count (contention)")
	fs.DurationVar(&c.contPoll, "poll", 20*time.Millisecond, "PollInterval of the workers (contention, naive)")
	fs.IntVar(&c.naiveTasks, "naive-tasks", 500, "tasks per design (naive)")
	fs.IntVar(&c.naiveWorkers, "naive-workers", 8, "workers per design (naive)")
	fs.IntVar(&c.naiveProducers, "naive-producers", 4, "producers per design, submitting while the workers run (naive)")
	producers := fs.String("producers", "1,16", "producer counts, each producer on a Store and client of its own; the largest also as goroutines of one Store (producers)")
	fs.IntVar(&c.producerTasks, "producer-tasks", 20, "tasks each producer creates, then submits at once with the others (producers)")
	sizes := fs.String("paging-sizes", "100,10000,100000", "bucket sizes in tasks (paging)")
	fs.IntVar(&c.pageReps, "paging-reps", 20, "times each page is read (paging)")
	largeMB := fs.Int("large-mb", 200, "size of the generated CSV in MiB (large)")
	fs.BoolVar(&c.largeChild, "large-child", true, "run the large scenario's worker in a child process, so its RSS is its own")
	fl := &c.fleet
	backlogs := fs.String("fleet-backlogs", "1000,10000,100000", "queued tasks seeded before the workers start, one run per size (fleet)")
	fs.IntVar(&fl.claims, "fleet-claims", 320, "claims measured per backlog and design, after a warm-up of one claim per worker (fleet)")
	fs.IntVar(&fl.oldPages, "fleet-old-pages", 4000, "most marker pages the emulated previous design may list in the measured claims of one backlog: where a full listing per claim would pass it, it measures fewer claims (fleet)")
	fs.IntVar(&fl.workers, "fleet-workers", 16, "workers of the fleet (fleet)")
	fs.IntVar(&fl.queue, "fleet-queue", 2000, "queued tasks drained in the oldest-first run (fleet)")
	fs.DurationVar(&fl.work, "fleet-work", 10*time.Millisecond, "how long the handler of the oldest-first run sleeps (fleet)")
	fs.IntVar(&fl.finished, "fleet-finished", 500, "finished tasks in the bucket of the reconcile run (fleet)")
	fs.DurationVar(&fl.reconcile, "fleet-reconcile", 2*time.Second, "ReconcileInterval of the reconcile run, watched for 4 intervals (fleet)")
	fs.IntVar(&fl.samples, "fleet-samples", 20, "pickups timed per variant in the local pickup run (fleet)")
	fs.DurationVar(&fl.runAt, "fleet-run-at", 3*time.Second, "how far ahead CreateParams.RunAt is set in the delayed start run (fleet)")
	idleWorkers := fs.String("fleet-idle-workers", "1,4,16", "idle worker counts of the LISTs-per-submit run (fleet)")
	fs.IntVar(&fl.idleSamples, "fleet-idle-samples", 4, "submits per worker count in the LISTs-per-submit run (fleet)")
	fs.DurationVar(&fl.idlePoll, "fleet-idle-poll", s3task.DefaultPollInterval, "PollInterval of the idle workers in the LISTs-per-submit run (fleet)")
	ev := &c.events
	fs.IntVar(&ev.tasks, "events-tasks", 100, "tasks submitted one at a time per variant, after a warm-up task (events)")
	fs.DurationVar(&ev.pause, "events-pause", s3task.DefaultPollInterval, "the longest random pause before each Submit (events)")
	fs.DurationVar(&ev.idle, "events-idle", 2*time.Minute, "how long the workers are watched idle after their tasks (events)")
	fs.DurationVar(&ev.shift, "events-shift", time.Second, "the clock variants move the Date the producer sees by this, the worker's by minus this; 0 runs none (events)")
	fanout := fs.String("events-fanout", "4,16", "fleet sizes of the fan-out variants, every worker told of every event; empty runs none (events)")
	fs.StringVar(&c.svgDir, "svg", "", "directory to draw the fleet scenario's charts in (lists-per-claim.svg, queue-wait.svg); empty draws none")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if c.small {
		// Small sizes for whatever was not set explicitly.
		smalls := map[string]func(){
			"lives":              func() { c.lives = 3 },
			"idle-window":        func() { c.idleWindow = 3 * time.Second },
			"idle-scale":         func() { c.idleScale = 100 },
			"idle-samples":       func() { c.idleSamples = 5 },
			"workers":            func() { *workers = "1,2,4,8,16" },
			"tasks":              func() { c.contTasks = 100 },
			"naive-tasks":        func() { c.naiveTasks = 60 },
			"naive-workers":      func() { c.naiveWorkers = 4 },
			"naive-producers":    func() { c.naiveProducers = 2 },
			"producer-tasks":     func() { c.producerTasks = 4 },
			"paging-sizes":       func() { *sizes = "100,1000,5000" },
			"paging-reps":        func() { c.pageReps = 5 },
			"large-mb":           func() { *largeMB = 5 },
			"fleet-backlogs":     func() { *backlogs = "1000,5000" },
			"fleet-claims":       func() { fl.claims = 160 },
			"fleet-queue":        func() { fl.queue = 500 },
			"fleet-finished":     func() { fl.finished = 200 },
			"fleet-reconcile":    func() { fl.reconcile = time.Second },
			"fleet-samples":      func() { fl.samples = 5 },
			"fleet-run-at":       func() { fl.runAt = 2 * time.Second },
			"fleet-idle-samples": func() { fl.idleSamples = 3 },
			"fleet-idle-poll":    func() { fl.idlePoll = 500 * time.Millisecond },
			"events-tasks":       func() { ev.tasks = 5 },
			"events-idle":        func() { ev.idle = 5 * time.Second },
			"events-shift":       func() { ev.shift = 0 },
			"events-fanout":      func() { *fanout = "" },
		}
		for name, f := range smalls {
			if !set[name] {
				f()
			}
		}
	}
	var err error
	c.scenariosSet = set["scenarios"]
	if c.scenarios, err = parseScenarios(*scen); err != nil {
		return nil, err
	}
	if c.latMin, c.latMax, err = parseLatency(*lat); err != nil {
		return nil, err
	}
	if c.contWorkers, err = parseInts(*workers); err != nil {
		return nil, fmt.Errorf("-workers: %w", err)
	}
	if c.producers, err = parseInts(*producers); err != nil || slices.Min(c.producers) < 1 || c.producerTasks < 1 {
		return nil, fmt.Errorf("-producers and -producer-tasks must be positive: %v", err)
	}
	if c.pageSizes, err = parseInts(*sizes); err != nil {
		return nil, fmt.Errorf("-paging-sizes: %w", err)
	}
	c.largeBytes = int64(*largeMB) << 20
	if fl.backlogs, err = parseInts(*backlogs); err != nil {
		return nil, fmt.Errorf("-fleet-backlogs: %w", err)
	}
	if fl.idleWorkers, err = parseInts(*idleWorkers); err != nil {
		return nil, fmt.Errorf("-fleet-idle-workers: %w", err)
	}
	switch {
	case fl.claims < 1, fl.workers < 1, fl.queue < 1, fl.finished < 1, fl.samples < 1, fl.idleSamples < 1, fl.oldPages < 1:
		return nil, errors.New("fleet sizes and counts must be positive")
	case fl.work < 0, fl.reconcile <= 0, fl.runAt <= 0, fl.idlePoll <= 0:
		return nil, errors.New("-fleet-work must not be negative, -fleet-reconcile, -fleet-run-at and -fleet-idle-poll must be positive")
	}
	switch {
	case c.lives < 1, c.idleSamples < 0, c.contTasks < 1, c.naiveTasks < 1, c.naiveWorkers < 1,
		c.naiveProducers < 1, c.pageReps < 1, *largeMB < 1:
		return nil, errors.New("sizes and counts must be positive")
	case c.idleScale < 1:
		return nil, errors.New("-idle-scale must be at least 1")
	case c.idleWindow <= 0:
		return nil, errors.New("-idle-window must be positive")
	case c.contPoll <= 0:
		return nil, errors.New("-poll must be positive")
	}
	if *fanout != "" {
		if ev.fanout, err = parseInts(*fanout); err != nil {
			return nil, fmt.Errorf("-events-fanout: %w", err)
		}
	}
	switch {
	case ev.tasks < 1:
		return nil, errors.New("-events-tasks must be positive")
	case ev.pause < 0, ev.idle <= 0:
		return nil, errors.New("-events-pause must not be negative, -events-idle must be positive")
	}
	if c.endpoint == "" && c.bucket != "" {
		return nil, errors.New("-bucket needs -endpoint")
	}
	if c.endpoint != "" && c.bucket == "" {
		return nil, errors.New("-endpoint needs -bucket")
	}
	return c, nil
}

func parseScenarios(s string) ([]string, error) {
	want := map[string]bool{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if n, err := strconv.Atoi(f); err == nil && n >= 1 && n <= len(scenarioNames) {
			f = scenarioNames[n-1]
		}
		if !slices.Contains(scenarioNames, f) {
			return nil, fmt.Errorf("unknown scenario %q (have %s)", f, strings.Join(scenarioNames, ", "))
		}
		want[f] = true
	}
	var out []string
	for _, n := range scenarioNames {
		if want[n] {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no scenario selected")
	}
	return out, nil
}

func parseLatency(s string) (lo, hi time.Duration, err error) {
	if s == "0" || s == "" {
		return 0, 0, nil
	}
	a, b, found := strings.Cut(s, "-")
	if lo, err = time.ParseDuration(a); err != nil {
		return 0, 0, fmt.Errorf("-latency: %w", err)
	}
	hi = lo
	if found {
		if hi, err = time.ParseDuration(b); err != nil {
			return 0, 0, fmt.Errorf("-latency: %w", err)
		}
	}
	if lo < 0 || hi < lo {
		return 0, 0, fmt.Errorf("-latency %q: want MIN-MAX with 0 <= MIN <= MAX", s)
	}
	return lo, hi, nil
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func (c *config) describe() string {
	target := "an in-process S3 (gofakes3 over loopback HTTP, a fresh server per scenario)"
	if c.endpoint != "" {
		target = fmt.Sprintf("%s, bucket %q", c.endpoint, c.bucket)
	}
	size := "full size"
	if c.small {
		size = "small size (-small)"
	}
	lat := "none"
	if c.latMax > 0 {
		lat = fmt.Sprintf("%s to %s per request, half each way", c.latMin, c.latMax)
	}
	events := ""
	if slices.Contains(c.scenarios, "events") {
		events = " The events scenario runs versitygw servers of its own whatever the target."
	}
	return fmt.Sprintf("Against %s, at %s. Prices per 1,000 requests: PUT/COPY $%g, POST $%g, LIST $%g, GET $%g, HEAD $%g, DELETE $%g. Added latency in contention and naive: %s.%s\n",
		target, size, c.prices.put, c.prices.post, c.prices.list, c.prices.get, c.prices.head, c.prices.del, lat, events)
}
