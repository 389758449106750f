package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/s3task/s3task"
)

// app is one running csvbatch process: its S3, its Store, and the API and
// worker as its mode asks.
type app struct {
	cfg   *config
	log   *slog.Logger
	objs  *objectStore
	store *s3task.Store

	// API and page (nil in worker mode).
	srv      *http.Server
	ln       net.Listener
	baseURL  string
	serveErr chan error
	open     bool // no token: the API answers anyone on this machine

	// OpenTelemetry (nil without -otel).
	otel *telemetry

	// Worker (nil in api mode).
	worker     *s3task.Worker
	stopWorker context.CancelFunc
	workerDone chan struct{}

	// Ingest (nil without -ingest).
	ingester   *s3task.Ingester
	stopIngest context.CancelFunc
	ingestDone chan struct{}

	// The webhook of S3 event notifications (nil without -events-token),
	// on its own listener with -events-listen (see events.go).
	events        *eventRelay
	eventsHandler http.Handler
	eventsSrv     *http.Server
	eventsURL     string
	eventsErr     chan error

	// Metrics: always counted; served on the API listener and on
	// -metrics-listen, if any.
	metrics    *metrics
	metricsSrv *http.Server
	metricsURL string
	metricsErr chan error
	stopStats  context.CancelFunc
	statsDone  chan struct{}

	closeOnce sync.Once
	closeErr  error
}

// start opens the S3, proves it enforces conditional writes, and starts the
// worker and the HTTP server as configured. The worker runs until ctx is
// done or close is called.
func start(ctx context.Context, cfg *config, log *slog.Logger) (*app, error) {
	creds, err := parseTokens(cfg.tokens)
	if err != nil {
		return nil, err
	}
	if cfg.runsAPI() && len(creds) == 0 && !loopbackAddr(cfg.listen) {
		return nil, fmt.Errorf("refusing to listen on %s without a token: anyone who reaches it could control every task. Set CSVBATCH_TOKEN (or -token), or listen on a loopback address such as 127.0.0.1:8080", cfg.listen)
	}
	if cfg.metricsListen != "" && len(creds) == 0 && !cfg.metricsPublic && !loopbackAddr(cfg.metricsListen) {
		return nil, fmt.Errorf("refusing to serve /metrics on %s without a token: set CSVBATCH_TOKEN (Prometheus then sends it as a bearer token), pass -metrics-public to publish the metrics to anyone who reaches the address, or listen on a loopback address", cfg.metricsListen)
	}
	a := &app{cfg: cfg, log: log}
	if err := a.init(ctx, creds); err != nil {
		a.close()
		return nil, err
	}
	return a, nil
}

// run is the whole program: it parses args (and CSVBATCH_* environment
// variables), starts what the mode asks for, prints the addresses to stdout
// and logs to stderr, and serves until ctx is done; then it shuts down
// gracefully and returns.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseConfig(args, os.LookupEnv, stderr)
	if err != nil {
		return err
	}
	cfg.otelOut = stdout
	return runConfig(ctx, cfg, stdout, stderr)
}

func runConfig(ctx context.Context, cfg *config, stdout, stderr io.Writer) error {
	level := slog.LevelInfo
	if cfg.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	a, err := start(ctx, cfg, log)
	if err != nil {
		return err
	}
	a.banner(stdout)
	if cfg.selftestRows > 0 {
		err := a.selftest(ctx, cfg.selftestRows, stdout)
		return errors.Join(err, a.close())
	}
	err = a.wait(ctx)
	fmt.Fprintln(stdout, "csvbatch: shutting down")
	return errors.Join(err, a.close())
}

func (a *app) init(ctx context.Context, creds []credential) error {
	cfg := a.cfg
	a.metrics = newMetrics()
	var err error
	if cfg.otel {
		out := cfg.otelOut
		if out == nil {
			out = os.Stdout
		}
		if a.otel, err = newTelemetry(ctx, cfg, out); err != nil {
			return err
		}
	}
	if a.objs, err = openObjectStore(ctx, cfg); err != nil {
		return err
	}
	storeOpts := &s3task.StoreOptions{
		Prefix:           cfg.prefix,
		InputExt:         ".csv",
		OutputExt:        ".csv",
		MaxInputSize:     int64(cfg.maxInput),
		Logger:           a.log,
		SpoolDir:         cfg.spoolDir,
		InputContentType: "text/csv",
		Files:            fileOptions(),
		Periodic:         summaryPeriodics(cfg.summary),
	}
	if a.otel != nil {
		// Spans for create, submit, retry, cancel; the create span's
		// trace context goes into the task's metadata.
		a.otel.s3task.InstrumentStore(storeOpts)
	}
	a.store, err = s3task.NewStore(a.objs.client, a.objs.bucket, storeOpts)
	if err != nil {
		return err
	}
	// The webhook answers from now on, while csvbatch waits for S3.
	if err := a.startEvents(); err != nil {
		return err
	}
	err = awaitS3(ctx, a.log, a.objs.about, cfg.s3Wait, func(ctx context.Context) error {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_, err := a.store.CheckBackend(cctx)
		return err
	})
	if errors.Is(err, s3task.ErrConditionalWritesUnsupported) {
		return fmt.Errorf("%s does not enforce conditional writes (If-None-Match / If-Match), so two workers could both claim one task; csvbatch will not run on it. "+
			"Use AWS S3, Cloudflare R2, Ceph RGW, Tigris, a recent MinIO or versitygw 1.8.0 or later. Details: %w", a.objs.about, err)
	}
	if err != nil {
		return err
	}
	if cfg.runsWorker() {
		if err := a.newWorker(); err != nil {
			return err
		}
	}
	if err := a.newIngester(); err != nil {
		return err
	}
	// Before they run: no event between their first look at the bucket
	// and this can be lost.
	a.connectEvents()
	a.runWorker(ctx)
	a.runIngester(ctx)
	if cfg.runsAPI() {
		if err := a.startHTTP(creds); err != nil {
			return err
		}
	}
	if cfg.metricsListen != "" {
		if err := a.startMetricsHTTP(creds); err != nil {
			return err
		}
	}
	if cfg.statsInterval > 0 && (a.srv != nil || a.metricsSrv != nil) {
		sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		a.stopStats, a.statsDone = cancel, make(chan struct{})
		go func() {
			defer close(a.statsDone)
			a.metrics.runStats(sctx, a.store, cfg.statsInterval, cfg.statsMaxTasks, a.log)
		}()
	}
	return nil
}

// metricsHandler serves /metrics behind the API's authentication rule, or
// to anyone with -metrics-public.
func (a *app) metricsHandler(auth *authenticator) http.Handler {
	h := a.metrics.handler(a.log)
	if a.cfg.metricsPublic {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, aerr := auth.caller(r); aerr != nil {
			if aerr.status == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="csvbatch"`)
			}
			writeError(w, aerr)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// startMetricsHTTP serves /metrics, and nothing else, on -metrics-listen.
func (a *app) startMetricsHTTP(creds []credential) error {
	ln, err := net.Listen("tcp", a.cfg.metricsListen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", a.cfg.metricsListen, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", a.metricsHandler(&authenticator{creds: creds}))
	a.metricsURL = "http://" + ln.Addr().String() + "/metrics"
	a.metricsSrv, a.metricsErr = a.serve(ln, mux)
	return nil
}

// serve serves h on ln in the background with the limits every listener of
// the program has. Serve's error arrives on the channel.
func (a *app) serve(ln net.Listener, h http.Handler) (*http.Server, chan error) {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       time.Minute,
		WriteTimeout:      time.Minute,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(a.log.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	return srv, served
}

// newWorker makes the worker; runWorker runs it.
func (a *app) newWorker() error {
	mux, err := newMux(a.store)
	if err != nil {
		return err
	}
	opts := &s3task.WorkerOptions{
		Concurrency:     a.cfg.concurrency,
		PollInterval:    a.cfg.pollInterval,
		MaxPollInterval: a.cfg.maxPollInterval,
		LeaseDuration:   a.cfg.leaseDuration,
		// Heartbeats carry progress: renewing more often than the default
		// third of the lease keeps the page's progress bars moving.
		HeartbeatInterval: a.cfg.heartbeat,
		ShutdownTimeout:   a.cfg.shutdownTimeout,
		Logger:            a.log,
		Hooks:             a.metrics.hooks(),
	}
	if a.otel != nil {
		// A span per attempt, a child of the task's create span, and
		// s3taskotel's metrics; its hooks call the Prometheus ones after
		// their own.
		a.otel.s3task.InstrumentWorker(opts)
	}
	a.worker, err = s3task.NewWorker(a.store, mux, opts)
	return err
}

// runWorker runs the worker, if any, until ctx is done or close is called.
func (a *app) runWorker(ctx context.Context) {
	if a.worker == nil {
		return
	}
	wctx, cancel := context.WithCancel(ctx)
	a.stopWorker, a.workerDone = cancel, make(chan struct{})
	go func() {
		defer close(a.workerDone)
		if err := a.worker.Run(wctx); err != nil {
			a.log.Error("worker stopped", "err", err)
		}
	}()
}

// runIngester runs the Ingester, if any, until ctx is done or close is
// called.
func (a *app) runIngester(ctx context.Context) {
	if a.ingester == nil {
		return
	}
	ictx, cancel := context.WithCancel(ctx)
	a.stopIngest, a.ingestDone = cancel, make(chan struct{})
	go func() {
		defer close(a.ingestDone)
		_ = a.ingester.Run(ictx)
	}()
}

func (a *app) startHTTP(creds []credential) error {
	ln, err := net.Listen("tcp", a.cfg.listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", a.cfg.listen, err)
	}
	a.ln = ln
	a.open = len(creds) == 0
	a.baseURL = "http://" + ln.Addr().String()
	auth := &authenticator{creds: creds}
	api := &api{
		store:       a.store,
		auth:        auth,
		log:         a.log,
		uploadTTL:   a.cfg.uploadTTL,
		downloadTTL: a.cfg.downloadTTL,
		s3Timeout:   a.cfg.s3Timeout,
	}
	mux := http.NewServeMux()
	api.register(mux)
	registerPage(mux)
	mux.Handle("GET /metrics", a.metricsHandler(auth))
	if a.eventsHandler != nil && a.eventsSrv == nil {
		mux.Handle("POST /s3-events", a.eventsHandler)
	}
	csrf := http.NewCrossOriginProtection()
	csrf.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{status: http.StatusForbidden, code: "cross_origin", message: "cross-origin requests are refused"})
	}))
	var h http.Handler = cleanPaths(csrf.Handler(mux))
	if a.cfg.verbose {
		h = logRequests(a.log, h)
	}
	if a.otel != nil {
		h = a.otel.handler(h) // outermost: the request's span covers all the rest
	}
	a.srv, a.serveErr = a.serve(ln, h)
	return nil
}

// banner tells the operator where everything is.
func (a *app) banner(w io.Writer) {
	fmt.Fprintf(w, "csvbatch: S3      %s\n", a.objs.about)
	if a.srv != nil {
		fmt.Fprintf(w, "csvbatch: page    %s/\n", a.baseURL)
		fmt.Fprintf(w, "csvbatch: API     %s/tasks\n", a.baseURL)
		fmt.Fprintf(w, "csvbatch: metrics %s/metrics\n", a.baseURL)
	}
	if a.metricsSrv != nil {
		fmt.Fprintf(w, "csvbatch: metrics %s\n", a.metricsURL)
	}
	if a.otel != nil {
		fmt.Fprintf(w, "csvbatch: otel    %s\n", a.otel.about)
	}
	if a.worker != nil {
		fmt.Fprintf(w, "csvbatch: worker  %s running (concurrency %d; types %v)\n", a.worker.ID(), a.cfg.concurrency, typeNames())
	}
	if a.worker != nil || a.srv != nil {
		if a.cfg.summary.IsZero() {
			fmt.Fprintf(w, "csvbatch: summary off (-summary-schedule)\n")
		} else {
			fmt.Fprintf(w, "csvbatch: summary %s tasks, %s\n", typeSummary, a.cfg.summary)
		}
	}
	if a.ingester != nil {
		fmt.Fprintf(w, "csvbatch: ingest  files under %s become %s tasks (sweep every %s)\n", a.cfg.ingestPrefix, a.cfg.ingestType, a.cfg.ingestSweep)
	}
	if a.worker != nil || a.ingester != nil {
		fmt.Fprintf(w, "csvbatch: events  %s\n", a.eventPaths())
	}
	if a.srv != nil && a.open {
		fmt.Fprintf(w, "\n"+
			"  *** WARNING: no token is set, so the API is open to anyone on this machine.\n"+
			"  *** It listens on a loopback address only. To protect it, or to listen on\n"+
			"  *** another address, set CSVBATCH_TOKEN (e.g. CSVBATCH_TOKEN=$(openssl rand -hex 16)).\n\n")
	}
}

// wait blocks until ctx is done or an HTTP server fails.
func (a *app) wait(ctx context.Context) error {
	// A nil channel never delivers: a server this process does not run
	// never fails.
	select {
	case <-ctx.Done():
		return nil
	case err := <-a.serveErr:
		a.serveErr <- err // keep it for close
		return fmt.Errorf("HTTP server: %w", err)
	case err := <-a.eventsErr:
		a.eventsErr <- err
		return fmt.Errorf("webhook server (-events-listen): %w", err)
	}
}

// close shuts down gracefully: the HTTP server stops taking requests and
// finishes the ones in flight, the worker lets running tasks finish for up
// to -shutdown-timeout and puts the rest back in the queue, then the
// embedded S3 stops. It is safe to call more than once.
func (a *app) close() error {
	a.closeOnce.Do(func() {
		var (
			mu   sync.Mutex
			errs []error
			wg   sync.WaitGroup
		)
		note := func(err error) {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
		// stop shuts a server down gracefully and collects what Serve said.
		stop := func(srv *http.Server, served chan error) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := srv.Shutdown(ctx); err != nil {
				srv.Close()
			}
			if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
				note(err)
			}
		}
		if a.srv != nil {
			wg.Go(func() { stop(a.srv, a.serveErr) })
		}
		if a.metricsSrv != nil {
			wg.Go(func() { stop(a.metricsSrv, a.metricsErr) })
		}
		if a.eventsSrv != nil {
			wg.Go(func() { stop(a.eventsSrv, a.eventsErr) })
		}
		if a.stopStats != nil {
			a.stopStats()
			<-a.statsDone
		}
		if a.ingester != nil {
			a.stopIngest()
			<-a.ingestDone
		}
		if a.worker != nil {
			a.stopWorker()
			<-a.workerDone
		}
		wg.Wait()
		if a.objs != nil {
			if err := a.objs.close(); err != nil {
				note(err)
			}
		}
		if a.otel != nil {
			// Last, so that the spans of the shutdown are exported too.
			ctx, cancel := context.WithTimeout(context.Background(), telemetryShutdownTimeout)
			if err := a.otel.shutdown(ctx); err != nil {
				note(fmt.Errorf("OpenTelemetry shutdown: %w", err))
			}
			cancel()
		}
		a.closeErr = errors.Join(errs...)
	})
	return a.closeErr
}

// logRequests logs every request at debug level.
func logRequests(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(sw, r)
		log.Debug("http", "method", r.Method, "path", r.URL.Path, "status", sw.status, "duration", time.Since(start).Round(time.Microsecond))
	})
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
