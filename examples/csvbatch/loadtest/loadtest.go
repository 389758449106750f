package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/s3test"
)

// Config is one run.
type Config struct {
	Clients           int
	Duration          time.Duration
	Drain             time.Duration
	Stall             time.Duration
	StallMode         string // "stop" or "proxy"
	Rows              int
	PollInterval      time.Duration
	Idle              time.Duration // S3 requests of the idle processes are counted this long first
	Workers           int
	WorkerConcurrency int
	Csvbatch          string // prebuilt binary; "" builds one
	GatewayBin        string // "" finds it with s3test.GatewayBinary
	Keep              bool
	Progress          io.Writer // progress lines; nil discards them
}

// DefaultConfig is what the flags default to.
func DefaultConfig() Config {
	return Config{
		Clients: 8, Duration: 30 * time.Second, Drain: 2 * time.Minute,
		StallMode: "stop", Rows: 100, PollInterval: 200 * time.Millisecond,
		Idle: 5 * time.Second, Workers: 2,
	}
}

func (c *Config) validate() error {
	switch {
	case c.Clients < 1 || c.Clients > 1000:
		return fmt.Errorf("-clients %d: want 1 to 1000", c.Clients)
	case c.Duration < time.Second || c.Duration > time.Hour:
		return fmt.Errorf("-duration %s: want 1s to 1h", c.Duration)
	case c.Drain < time.Second || c.Drain > time.Hour:
		return fmt.Errorf("-drain %s: want 1s to 1h", c.Drain)
	case c.Stall < 0 || c.Stall > 30*time.Minute:
		return fmt.Errorf("-stall %s: want 0 to 30m", c.Stall)
	case c.StallMode != "stop" && c.StallMode != "proxy":
		return fmt.Errorf("-stall-mode %q: want stop or proxy", c.StallMode)
	case c.Rows < 1 || c.Rows > 1_000_000:
		return fmt.Errorf("-rows %d: want 1 to 1000000", c.Rows)
	case c.PollInterval < 10*time.Millisecond:
		return fmt.Errorf("-poll %s: want at least 10ms", c.PollInterval)
	case c.Idle < 0 || c.Idle > time.Hour:
		return fmt.Errorf("-idle %s: want 0 to 1h", c.Idle)
	case c.Workers < 1 || c.Workers > 16:
		return fmt.Errorf("-workers %d: want 1 to 16", c.Workers)
	case c.WorkerConcurrency < 0:
		return fmt.Errorf("-worker-concurrency %d: want 0 or more", c.WorkerConcurrency)
	}
	return nil
}

func (c *Config) logf(format string, args ...any) {
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, "loadtest: "+format+"\n", args...)
	}
}

// Run does one load test. The Result is non-nil once the load has run,
// also when err reports a problem found after it.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	begin := time.Now()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute+cfg.Duration+cfg.Drain+cfg.Stall)
	defer cancel()

	tmp, err := os.MkdirTemp("", "csvbatch-loadtest-")
	if err != nil {
		return nil, err
	}
	if cfg.Keep {
		cfg.logf("temporary folder (kept): %s", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}

	// 1. csvbatch.
	bin := cfg.Csvbatch
	if bin == "" {
		bin = filepath.Join(tmp, "csvbatch")
		t := time.Now()
		if err := buildCsvbatch(ctx, bin); err != nil {
			return nil, err
		}
		cfg.logf("built csvbatch in %s", since(t))
	}

	// 2. versitygw and a bucket.
	gwBin := cfg.GatewayBin
	if gwBin == "" {
		if gwBin, err = s3test.GatewayBinary(); err != nil {
			return nil, err
		}
	}
	gw, err := s3test.StartGateway(ctx, s3test.GatewayConfig{Bin: gwBin, Dir: filepath.Join(tmp, "gw", "root")})
	if err != nil {
		return nil, err
	}
	defer gw.Stop()
	gwPID, err := gatewayPID(gwBin, gw.Endpoint)
	if err != nil {
		return nil, err
	}
	// A stopped gateway must never outlive the run.
	defer syscall.Kill(gwPID, syscall.SIGCONT)
	direct := gw.Client()
	bucket, err := s3test.NewBucket(ctx, direct, "loadtest")
	if err != nil {
		return nil, err
	}
	cfg.logf("versitygw %s (pid %d), bucket %s", gw.Endpoint, gwPID, bucket)

	// 3. The counting proxies, one per process.
	cnt := newCounter()
	g := newGate()
	defer g.release()
	ptr := &http.Transport{Proxy: nil, MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024, IdleConnTimeout: 90 * time.Second}
	defer ptr.CloseIdleConnections()
	names := []string{"api"}
	for i := 1; i <= cfg.Workers; i++ {
		names = append(names, fmt.Sprintf("worker%d", i))
	}
	proxies := map[string]*s3Proxy{}
	for _, n := range names {
		p, err := startProxy(n, gw.Endpoint, g, cnt, ptr)
		if err != nil {
			return nil, err
		}
		defer p.close()
		proxies[n] = p
	}

	// 4. The processes.
	secret := randomHex(16)
	env := processEnv(gw.AccessKey, gw.SecretKey, "loadtest:"+secret)
	apiAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	// No periodic summary: every task in the bucket is one a client made.
	common := []string{"-bucket", bucket, "-s3-path-style", "-stats-interval", "0", "-summary-schedule", "off"}
	var procs []*proc
	defer func() {
		// Stop in parallel: each takes up to its shutdown timeout.
		var wg sync.WaitGroup
		for _, p := range procs {
			wg.Add(1)
			go func() { defer wg.Done(); p.stop() }()
		}
		wg.Wait()
	}()
	apiProc, err := startProc(tmp, "api", bin, env, append([]string{"-mode", "api", "-listen", apiAddr,
		"-s3-endpoint", proxies["api"].URL}, common...))
	if err != nil {
		return nil, err
	}
	procs = append(procs, apiProc)
	for _, n := range names[1:] {
		maddr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		args := append([]string{"-mode", "worker", "-metrics-listen", maddr, "-s3-endpoint", proxies[n].URL}, common...)
		if cfg.WorkerConcurrency > 0 {
			args = append(args, "-concurrency", strconv.Itoa(cfg.WorkerConcurrency))
		}
		p, err := startProc(tmp, n, bin, env, args)
		if err != nil {
			return nil, err
		}
		p.metricsURL = "http://" + maddr + "/metrics"
		procs = append(procs, p)
	}
	apiURL := "http://" + apiAddr
	hc := &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConns: 4 * cfg.Clients, MaxIdleConnsPerHost: 4 * cfg.Clients, IdleConnTimeout: 90 * time.Second}}
	defer hc.CloseIdleConnections()
	if err := awaitReady(ctx, hc, apiURL, secret, procs); err != nil {
		return nil, err
	}
	for _, p := range procs[1:] {
		if err := awaitMetrics(ctx, hc, p, secret); err != nil {
			return nil, err
		}
	}
	cfg.logf("csvbatch API %s (pid %d), %d workers, ready after %s", apiURL, apiProc.pid(), cfg.Workers, since(begin))

	res := &Result{
		Clients: cfg.Clients, Duration: cfg.Duration.String(), Rows: cfg.Rows, Workers: cfg.Workers,
		WorkerConcurrency: cfg.WorkerConcurrency, PollInterval: cfg.PollInterval.String(),
		Stall: cfg.Stall.String(), GOMAXPROCS: runtime.GOMAXPROCS(0),
	}
	if cfg.Stall > 0 {
		res.StallMode = cfg.StallMode
	}
	res.APIRSSStartKB, res.APIHWMStartKB = rss(apiProc.pid())

	// What the idle processes ask of S3, to read the per-task figures by.
	if cfg.Idle > 0 {
		cnt.start()
		select {
		case <-time.After(cfg.Idle):
		case <-ctx.Done():
		}
		cnt.stop()
		idle, _, _ := cnt.snapshot()
		cnt.reset()
		res.IdleS3PerSecond = map[string]float64{}
		for src, kinds := range idle {
			for _, n := range kinds {
				res.IdleS3PerSecond[src] += float64(n) / cfg.Idle.Seconds()
			}
		}
	}

	// 5. The load.
	rec := newRecorder()
	data := newDataset(cfg.Rows)
	lc := &loadClient{http: hc, api: apiURL, token: secret, data: data, rec: rec, poll: cfg.PollInterval}
	cpuPIDs := map[string]int{"versitygw": gwPID, "loadtest": os.Getpid()}
	for _, p := range procs {
		cpuPIDs[p.name] = p.pid()
	}
	cpuStart := map[string]float64{}
	for name, pid := range cpuPIDs {
		cpuStart[name] = cpuSeconds(pid)
	}
	loadStart := time.Now()
	cnt.start()
	stopNew := make(chan struct{})
	hardCtx, hardCancel := context.WithCancel(ctx)
	defer hardCancel()
	var wg sync.WaitGroup
	for i := range cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lc.loop(hardCtx, i, stopNew)
		}()
	}
	stallDone := make(chan struct{})
	go func() {
		defer close(stallDone)
		if cfg.Stall <= 0 {
			return
		}
		at := max(0, (cfg.Duration-cfg.Stall)/2)
		select {
		case <-time.After(at):
		case <-hardCtx.Done():
			return
		}
		res.StallStart = since(loadStart).String()
		cfg.logf("stall: S3 stops answering for %s (%s)", cfg.Stall, cfg.StallMode)
		if cfg.StallMode == "stop" {
			if err := syscall.Kill(gwPID, syscall.SIGSTOP); err != nil {
				rec.errorf("stall: SIGSTOP versitygw: %v", err)
				return
			}
			defer syscall.Kill(gwPID, syscall.SIGCONT)
		} else {
			g.hold()
			defer g.release()
		}
		select {
		case <-time.After(cfg.Stall):
		case <-hardCtx.Done():
		}
		cfg.logf("stall: S3 answers again")
	}()
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		tick := time.NewTicker(5 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				c, e := rec.progress()
				cfg.logf("%s: %d tasks done, %d errors", since(loadStart).Round(time.Second), c, e)
			case <-stopNew:
				return
			}
		}
	}()
	select {
	case <-time.After(cfg.Duration):
	case <-ctx.Done():
	}
	close(stopNew)
	<-progressDone
	res.LoadSeconds = time.Since(loadStart).Seconds()
	cfg.logf("time is up after %s; waiting up to %s for the flows under way", since(loadStart), cfg.Drain)
	drained := make(chan struct{})
	go func() { wg.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(cfg.Drain):
		rec.errorf("drain: flows still under way after %s, cut short", cfg.Drain)
		hardCancel()
		<-drained
	case <-ctx.Done():
		hardCancel()
		<-drained
	}
	<-stallDone
	res.DrainSeconds = time.Since(loadStart).Seconds() - res.LoadSeconds
	cnt.stop()
	res.APIRSSEndKB, res.APIHWMEndKB = rss(apiProc.pid())
	res.CPUSeconds = map[string]float64{}
	for name, pid := range cpuPIDs {
		res.CPUSeconds[name] = cpuSeconds(pid) - cpuStart[name]
	}
	for _, p := range procs[1:] {
		r, h := rss(p.pid())
		res.WorkerRSSEndKB = append(res.WorkerRSSEndKB, r)
		res.WorkerHWMEndKB = append(res.WorkerHWMEndKB, h)
	}

	if err := ctx.Err(); err != nil {
		rec.fill(res)
		return res, fmt.Errorf("interrupted (%w): the bucket was not checked", err)
	}

	// 6. Check the bucket: every task the clients made, as the library reads it.
	vctx, vcancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer vcancel()
	store, err := s3task.NewStore(direct, bucket, nil)
	if err != nil {
		return nil, err
	}
	completions := 0
	for _, p := range procs[1:] {
		n, err := scrapeCompletions(vctx, hc, p.metricsURL, secret)
		if err != nil {
			rec.errorf("verify: metrics of %s: %v", p.name, err)
		}
		completions += n
	}
	verify(vctx, store, rec, completions, res)

	for _, p := range procs {
		if !p.running() {
			rec.errorf("process: %s exited during the run: %v", p.name, p.err)
			cfg.logf("%s log tail:\n%s", p.name, p.logTail())
		}
	}
	rec.fill(res)
	res.S3Requests, res.S3Statuses, res.S3ProxyErrors = cnt.snapshot()
	res.computeS3PerTask()
	res.LogLines = map[string]map[string]int{}
	for _, p := range procs {
		if l := p.logLevels(); len(l) > 0 {
			res.LogLines[p.name] = l
		}
	}
	return res, nil
}
