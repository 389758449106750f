package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/examples/internal/periodicspec"
	"github.com/s3task/s3task/examples/internal/s3client"
)

// The process roles picked by -mode.
const (
	modeBoth   = "both"
	modeAPI    = "api"
	modeWorker = "worker"
)

// The values of -summary-schedule: its default, and the one that turns the
// periodic summary off.
const (
	defaultSummary = "daily:00:05"
	summaryOff     = "off"
)

// envPrefix is prepended to a flag's name, upper-cased with '-' turned into
// '_', to name the environment variable that sets it: -max-input-size is
// CSVBATCH_MAX_INPUT_SIZE. A flag on the command line wins over the
// environment.
const envPrefix = "CSVBATCH_"

// config is everything the program is told at start.
type config struct {
	mode   string
	listen string // API and page
	tokens string // raw -token value, see parseTokens

	// Embedded S3 (used when bucket is empty).
	dataDir  string // bbolt backend folder; empty keeps objects in memory
	s3Listen string

	// External S3 (used when bucket is set).
	bucket string
	s3     s3client.Config

	prefix          string
	maxInput        byteSize
	concurrency     int
	pollInterval    time.Duration
	maxPollInterval time.Duration
	leaseDuration   time.Duration
	heartbeat       time.Duration
	shutdownTimeout time.Duration
	uploadTTL       time.Duration
	downloadTTL     time.Duration
	s3Timeout       time.Duration // deadline of the S3 calls of one API request
	spoolDir        string        // StoreOptions.SpoolDir: temporary files of outputs being written
	s3Wait          time.Duration // how long start waits for S3 to answer; 0: until stopped
	selftestRows    int
	verbose         bool

	// The periodic summary (see summary.go): -summary-schedule as written,
	// and the Schedule it names, the zero Schedule for "off".
	summarySpec string
	summary     s3task.Schedule

	// Metrics (see metrics.go).
	metricsPublic bool          // serve /metrics without the API's auth rule
	metricsListen string        // extra listener serving only /metrics
	statsInterval time.Duration // Store.Stats refresh; 0 turns it off
	statsMaxTasks int           // records one refresh reads

	// OpenTelemetry (see otel.go).
	otel         bool
	otlpEndpoint string    // OTEL_EXPORTER_OTLP_ENDPOINT: export over OTLP/HTTP, not to stdout
	otelOut      io.Writer // where the stdout exporters write; nil is os.Stdout
	// otelSpans and otelMetrics, if set, take the place of the exporters
	// when otel is on: tests record spans and read metrics with them.
	otelSpans   sdktrace.SpanProcessor
	otelMetrics sdkmetric.Reader

	// Ingest and S3 event notifications (see ingest.go).
	ingestPrefix string        // folder whose files become tasks; empty: none
	ingestType   string        // the type of those tasks
	ingestSweep  time.Duration // how often the folder is listed for files no event announced
	eventsToken  string        // the webhook's token; empty: no webhook
	eventsListen string        // the webhook's own listener, opened before S3 is reached; empty: the API's

	// s3Wrap, if set, wraps the S3 client's HTTP transport. Tests use it to
	// imitate a store that ignores conditional writes.
	s3Wrap func(http.RoundTripper) http.RoundTripper
}

// embedded reports whether the program runs its own in-process S3.
func (c *config) embedded() bool { return c.bucket == "" }

// runsAPI and runsWorker report which roles this process plays.
func (c *config) runsAPI() bool    { return c.mode != modeWorker && c.selftestRows == 0 }
func (c *config) runsWorker() bool { return c.mode != modeAPI }

// parseConfig reads flags from args and, for flags not on the command line,
// from CSVBATCH_* environment variables looked up with lookupEnv.
func parseConfig(args []string, lookupEnv func(string) (string, bool), usageOut io.Writer) (*config, error) {
	c := &config{maxInput: byteSize(s3task.DefaultMaxInputSize)}
	fs := flag.NewFlagSet("csvbatch", flag.ContinueOnError)
	fs.SetOutput(usageOut)
	fs.StringVar(&c.mode, "mode", modeBoth, "what this process runs: `both` (API, page and worker), api or worker")
	fs.StringVar(&c.listen, "listen", "127.0.0.1:8080", "`address` of the API and the operator page")
	fs.StringVar(&c.tokens, "token", "", "bearer `token`s, comma-separated, each `secret` (caller \"operator\") or `name:secret`; prefer the CSVBATCH_TOKEN environment variable, which other users cannot see in ps")
	fs.StringVar(&c.dataDir, "data", "./csvbatch-data", "`folder` of the embedded S3's database; empty keeps objects in memory only")
	fs.StringVar(&c.s3Listen, "s3-listen", "127.0.0.1:0", "loopback `address` of the embedded S3 (port 0 picks a free port)")
	fs.StringVar(&c.bucket, "bucket", "", "use this `bucket` of a real S3 or S3-compatible store instead of the embedded S3; credentials and region come from the standard AWS environment")
	c.s3.RegisterFlags(fs)
	fs.StringVar(&c.prefix, "prefix", s3task.DefaultPrefix, "key `prefix` of the tasks in the bucket")
	fs.Var(&c.maxInput, "max-input-size", "largest accepted input `size`, e.g. 100MiB or 250MB")
	fs.IntVar(&c.concurrency, "concurrency", 2, "`tasks` the worker runs at once")
	fs.DurationVar(&c.pollInterval, "poll", time.Second, "worker poll `interval` while there is work")
	fs.DurationVar(&c.maxPollInterval, "poll-max", 5*time.Second, "longest worker poll `interval` when idle")
	fs.DurationVar(&c.leaseDuration, "lease", s3task.DefaultLeaseDuration, "task lease `duration`")
	fs.DurationVar(&c.heartbeat, "heartbeat", 2*time.Second, "`interval` of lease renewals, which also carry progress to the record (at most a third of -lease)")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long running tasks may finish at shutdown before they are put back in the queue")
	fs.DurationVar(&c.uploadTTL, "upload-ttl", 15*time.Minute, "lifetime of presigned upload URLs")
	fs.DurationVar(&c.downloadTTL, "download-ttl", 5*time.Minute, "lifetime of presigned download URLs")
	fs.DurationVar(&c.s3Timeout, "s3-timeout", 5*time.Second, "deadline of the S3 calls one API request makes; past it, or when S3 cannot be reached, the API answers 503 s3_unavailable")
	fs.DurationVar(&c.s3Wait, "s3-wait", 0, "how long to wait at start for S3 to answer and the bucket to exist, trying again with backoff (1s doubling to 10s) and logging each try; 0 waits until the process is stopped")
	fs.StringVar(&c.spoolDir, "spool-dir", "", "`folder` of the temporary files of outputs being written, named s3task-* and unlinked at once on Unix (default: the system's temporary folder); it must exist")
	fs.IntVar(&c.selftestRows, "selftest-rows", 0, "generate a CSV of `n` rows, run it as a csv_enrich task through the worker, print the figures (peak RSS included) and exit")
	fs.BoolVar(&c.verbose, "v", false, "verbose logs (every API request)")
	fs.BoolVar(&c.metricsPublic, "metrics-public", false, "serve /metrics to anyone who reaches the listener, without the API's token (or, with no token, loopback Host) check")
	fs.StringVar(&c.metricsListen, "metrics-listen", "", "also serve /metrics, and nothing else, on this `address`: the way to scrape a -mode worker process")
	fs.BoolVar(&c.otel, "otel", false, "trace each task with OpenTelemetry, from the API request that creates it to the worker's attempts (one trace per task), and export s3taskotel's metrics: as JSON lines on stdout, or over OTLP/HTTP when the environment variable "+otlpEndpointEnv+" is set (the exporters also read the other OTEL_EXPORTER_OTLP_* variables; OTEL_SERVICE_NAME overrides the service name csvbatch)")
	fs.StringVar(&c.ingestPrefix, "ingest", "", "`folder` of the bucket, such as incoming/, whose files become tasks, one per version; empty: none. Any mode: give it to the processes that take the events")
	fs.StringVar(&c.ingestType, "ingest-type", typeStats, "task `type` of the files of -ingest")
	fs.DurationVar(&c.ingestSweep, "ingest-sweep", time.Minute, "how often the -ingest folder is listed for files no event announced")
	fs.StringVar(&c.eventsToken, "events-token", "", "serve POST /s3-events, the webhook for the S3 server's event notifications, to deliveries that carry this `secret` (as ?token= or a bearer header); they wake this process's worker for the tasks they name and feed its -ingest. -mode worker needs -events-listen with it, -mode api needs -ingest. Prefer CSVBATCH_EVENTS_TOKEN")
	fs.StringVar(&c.eventsListen, "events-listen", "", "serve POST /s3-events, and nothing else, on this `address` of its own instead of the API's, opened before csvbatch waits for S3, so that an S3 server that tests its webhook when it starts (versitygw) can start after csvbatch; needs -events-token")
	fs.StringVar(&c.summarySpec, "summary-schedule", defaultSummary, "when the fleet makes a "+typeSummary+" task, a CSV of the tasks of the day before counted by type and status: every:<duration>, daily:HH:MM[:<zone>] or weekly:<day>:HH:MM[:<zone>] (zone default UTC), or off. Give every process of the fleet, API ones included, the same value")
	fs.DurationVar(&c.statsInterval, "stats-interval", 5*time.Minute, "how often to refresh the bucket gauges of /metrics with Store.Stats; 0 turns them off")
	fs.IntVar(&c.statsMaxTasks, "stats-max-tasks", 100, "records one Store.Stats refresh reads, newest first (one GET each)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: csvbatch [flags]\n\n"+
			"A CSV batch service on s3task: control API, operator page and worker.\n"+
			"Every flag can also be set with CSVBATCH_<FLAG>, e.g. CSVBATCH_TOKEN.\n\n")
		fs.PrintDefaults()
	}

	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		name := envPrefix + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := lookupEnv(name); ok && envErr == nil {
			if err := f.Value.Set(v); err != nil {
				envErr = fmt.Errorf("environment variable %s=%q: %w", name, v, err)
			}
		}
	})
	if envErr != nil {
		return nil, envErr
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, usageError{err}
	}
	if v, ok := lookupEnv(otlpEndpointEnv); ok {
		c.otlpEndpoint = strings.TrimSpace(v)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q (flags only; see -h)", fs.Args())
	}
	return c, c.validate()
}

func (c *config) validate() error {
	switch c.mode {
	case modeBoth, modeAPI, modeWorker:
	default:
		return fmt.Errorf("-mode %q: want both, api or worker", c.mode)
	}
	if c.selftestRows < 0 {
		return fmt.Errorf("-selftest-rows %d: must not be negative", c.selftestRows)
	}
	if c.selftestRows > 0 && c.mode == modeAPI {
		return errors.New("-selftest-rows needs a worker in this process: use -mode both or worker")
	}
	if c.ingestPrefix != "" {
		if tt, ok := lookupType(c.ingestType); !ok || tt.noInput {
			return fmt.Errorf("-ingest-type %q: want one of %s", c.ingestType, strings.Join(inputTypeNames(), ", "))
		}
		if c.ingestSweep <= 0 {
			return fmt.Errorf("-ingest-sweep %s: must be positive", c.ingestSweep)
		}
	}
	if err := c.validateEvents(); err != nil {
		return err
	}
	if c.summarySpec != summaryOff {
		var err error
		if c.summary, err = periodicspec.Schedule(c.summarySpec); err != nil {
			return fmt.Errorf("-summary-schedule: %w (or off)", err)
		}
	}
	if c.selftestRows > 0 {
		c.summary = s3task.Schedule{} // a selftest measures its one task alone
	}
	if c.s3Wait < 0 {
		return fmt.Errorf("-s3-wait %s: want 0 (until stopped) or a positive duration", c.s3Wait)
	}
	if c.concurrency < 1 {
		return fmt.Errorf("-concurrency %d: want at least 1", c.concurrency)
	}
	for name, ttl := range map[string]time.Duration{"-upload-ttl": c.uploadTTL, "-download-ttl": c.downloadTTL} {
		if ttl < time.Second || ttl > s3task.MaxPresignTTL {
			return fmt.Errorf("%s %s: want 1s to %s", name, ttl, s3task.MaxPresignTTL)
		}
	}
	if c.s3Timeout < 10*time.Millisecond || c.s3Timeout > 10*time.Minute {
		return fmt.Errorf("-s3-timeout %s: want 10ms to 10m", c.s3Timeout)
	}
	if c.statsInterval < 0 || c.statsInterval > 0 && c.statsInterval < 10*time.Millisecond {
		return fmt.Errorf("-stats-interval %s: want 0 (off) or at least 10ms", c.statsInterval)
	}
	if c.statsMaxTasks < 1 {
		return fmt.Errorf("-stats-max-tasks %d: want at least 1", c.statsMaxTasks)
	}
	if c.metricsListen != "" && c.selftestRows > 0 {
		return errors.New("-metrics-listen has nothing to serve in a -selftest-rows run")
	}
	if c.maxInput <= 0 {
		return fmt.Errorf("-max-input-size %d: want a positive size", c.maxInput)
	}
	if c.embedded() {
		if c.s3.Endpoint != "" || c.s3.Region != "" || c.s3.PathStyle {
			return errors.New("-s3-endpoint, -s3-region and -s3-path-style need -bucket (without -bucket the embedded S3 is used)")
		}
		// gofakes3 checks no signatures: whoever reaches it reads and writes
		// everything. It must never listen beyond this machine.
		if !loopbackAddr(c.s3Listen) {
			return fmt.Errorf("-s3-listen %q: the embedded S3 has no authentication and only listens on a loopback address such as 127.0.0.1:9000; for remote access use a real S3 with -bucket", c.s3Listen)
		}
	}
	if _, err := parseTokens(c.tokens); err != nil {
		return err
	}
	return nil
}

// validateEvents refuses an event set-up in which the webhook would take
// deliveries and pass them to nothing: every event path this process
// offers is live.
func (c *config) validateEvents() error {
	switch {
	case c.eventsListen != "" && c.eventsToken == "":
		return errors.New("-events-listen needs -events-token (or CSVBATCH_EVENTS_TOKEN): the webhook takes only deliveries that carry it")
	case c.eventsToken == "":
		return nil
	case c.selftestRows > 0:
		return errors.New("-events-token has nothing to serve in a -selftest-rows run")
	case c.mode == modeWorker && c.eventsListen == "":
		return errors.New("-events-token with -mode worker needs -events-listen: a worker process has no API listener to serve POST /s3-events on. " +
			"Give it one (e.g. -events-listen 127.0.0.1:8081) and point the S3 server's webhook there")
	case c.mode == modeAPI && c.ingestPrefix == "":
		return errors.New("-events-token with -mode api needs -ingest: events are all this process could use them for. It runs no worker, " +
			"and the tasks it submits reach the workers through the bucket's wake object, no event needed. " +
			"Add -ingest to make files into tasks here, or give the token to a -mode worker process with -events-listen, whose worker then starts a task the moment its event comes")
	}
	return nil
}

// loopbackAddr reports whether a listen address is on a loopback interface.
// An empty host means every interface, so it is not.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// byteSize is a flag value such as "100MiB", "250MB", "64KiB" or "1048576".
type byteSize int64

func (b *byteSize) String() string { return strconv.FormatInt(int64(*b), 10) }

func (b *byteSize) Set(s string) error {
	units := []struct {
		suffix string
		mult   int64
	}{
		{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1},
	}
	num, mult := strings.TrimSpace(s), int64(1)
	for _, u := range units {
		if strings.HasSuffix(strings.ToUpper(num), strings.ToUpper(u.suffix)) {
			num, mult = strings.TrimSpace(num[:len(num)-len(u.suffix)]), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return fmt.Errorf("invalid size %q: want a number of bytes, optionally with KiB, MiB, GiB, KB, MB or GB", s)
	}
	*b = byteSize(n * mult)
	return nil
}
