package main

// Scenario 6: a large CSV through a streaming handler. The worker runs in a
// child process (this program run again in worker-only mode) against the
// parent's S3 over HTTP, so its peak RSS is its own and not inflated by the
// in-memory S3 holding the input and output.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/s3test"
)

// childEnv carries a childConfig, as JSON, to a worker-only child.
const childEnv = "S3TASK_BENCH_CHILD"

// childConfig tells a worker-only child where its task is.
type childConfig struct {
	Endpoint  string `json:"endpoint"`
	Region    string `json:"region"`
	AccessKey string `json:"access_key"`
	SecretKey string `json:"secret_key"`
	Bucket    string `json:"bucket"`
	Prefix    string `json:"prefix"`
	MaxInput  int64  `json:"max_input"`
}

// workerReport is what the large scenario's worker measured.
type workerReport struct {
	Rows     int64          `json:"rows"`
	InBytes  int64          `json:"in_bytes"`
	OutBytes int64          `json:"out_bytes"`
	Handler  time.Duration  `json:"handler_ns"` // OpenInput to the output uploaded
	Requests map[string]int `json:"requests"`
	PeakGo   uint64         `json:"peak_go_bytes"`
	PeakRSS  uint64         `json:"peak_rss_bytes"` // the child's own, 0 in-process
	Error    string         `json:"error,omitempty"`
}

// childFromEnv reports whether this process is a worker-only child.
func childFromEnv() (childConfig, bool) {
	v := os.Getenv(childEnv)
	if v == "" {
		return childConfig{}, false
	}
	var c childConfig
	if err := json.Unmarshal([]byte(v), &c); err != nil {
		c.Endpoint = "" // runChild reports it
	}
	return c, true
}

// runChild is the whole life of a worker-only child: run the worker until
// its one task is settled, print a workerReport as JSON on stdout.
func runChild(cfg childConfig, stdout, stderr io.Writer) int {
	if cfg.Endpoint == "" {
		fmt.Fprintf(stderr, "bench child: bad %s\n", childEnv)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	mem := startMemSampler()
	tr := newHTTPTransport()
	defer tr.CloseIdleConnections()
	m := newMeter()
	client := s3test.NewClientOn(cfg.Endpoint, cfg.Region, cfg.AccessKey, cfg.SecretKey, tr, m.wrap)
	rep, err := largeWorker(ctx, client, cfg.Bucket, cfg.Prefix, cfg.MaxInput)
	rep.Requests = m.snapshot().kinds
	rep.PeakGo, rep.PeakRSS = mem.stop(), peakRSS()
	if err != nil {
		rep.Error = err.Error()
	}
	if err := json.NewEncoder(stdout).Encode(rep); err != nil {
		fmt.Fprintln(stderr, "bench child:", err)
		return 1
	}
	return 0
}

// largeWorker runs one worker with the enriching CSV handler until one task
// completes or fails.
func largeWorker(ctx context.Context, client *s3.Client, bucket, prefix string, maxInput int64) (workerReport, error) {
	var rep workerReport
	store, err := s3task.NewStore(client, bucket, &s3task.StoreOptions{
		Prefix: prefix, InputExt: ".csv", OutputExt: ".csv", MaxInputSize: maxInput,
		Logger: quietLogger(),
	})
	if err != nil {
		return rep, err
	}
	done := make(chan error, 1)
	w, err := s3task.NewWorker(store, s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		return enrichCSV(ctx, job, &rep)
	}), &s3task.WorkerOptions{
		ID: "large-worker", PollInterval: 100 * time.Millisecond,
		Hooks: s3task.Hooks{
			// Never block a worker goroutine: the first outcome is the one.
			OnComplete: func(*s3task.Task) { offer(done, nil) },
			OnFail:     func(_ *s3task.Task, err error) { offer(done, err) },
		},
	})
	if err != nil {
		return rep, err
	}
	rw := startWorker(ctx, w)
	select {
	case err = <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if serr := rw.stop(); err == nil {
		err = serr
	}
	return rep, err
}

type largeResult struct {
	cfg        *config
	where      string
	child      bool
	inBytes    int64
	rows       int64
	upload     time.Duration
	e2e        time.Duration // Submit to the worker settled (child exit)
	download   time.Duration
	worker     workerReport
	workerRSS  uint64 // the worker process's peak RSS (the child's own, or this process's)
	rssFresh   bool   // this process's peak RSS was reset at the scenario's start
	parentPeak uint64 // this process's peak Go memory during the scenario
	parentRSS  uint64 // this process's peak RSS
	producer   counts
}

func runLarge(ctx context.Context, e *env, log io.Writer) (result, error) {
	cfg := e.cfg
	fresh := resetPeakRSS()
	mem := startMemSampler()
	defer mem.stop()
	gen := newCSVGen(cfg.largeBytes)
	res := &largeResult{cfg: cfg, where: e.where(), child: cfg.largeChild, inBytes: gen.size, rows: gen.rows, rssFresh: fresh}
	maxInput := gen.size + 1<<20
	pm := newMeter()
	store, err := e.store(e.client(pm.wrap), "tasks", func(o *s3task.StoreOptions) { o.MaxInputSize = maxInput })
	if err != nil {
		return nil, err
	}
	t, err := store.Create(ctx, s3task.CreateParams{Name: "large CSV", Type: "csv_enrich"})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "bench: large: uploading %s of CSV (%d rows)\n", mib(uint64(gen.size)), gen.rows)
	start := time.Now()
	if err := store.UploadInput(ctx, t.ID, io.NewSectionReader(gen, 0, gen.size)); err != nil {
		return nil, err
	}
	res.upload = time.Since(start)
	start = time.Now()
	if _, err := store.Submit(ctx, t.ID); err != nil {
		return nil, err
	}
	if cfg.largeChild {
		cc := childConfig{
			Endpoint: e.endpoint, Region: cfg.region, AccessKey: cfg.accessKey, SecretKey: cfg.secretKey,
			Bucket: e.bucket, Prefix: store.Prefix(), MaxInput: maxInput,
		}
		res.worker, res.workerRSS, err = runChildProcess(ctx, cc, log)
	} else {
		wm := newMeter()
		res.worker, err = largeWorker(ctx, e.client(wm.wrap), e.bucket, store.Prefix(), maxInput)
		res.worker.Requests = wm.snapshot().kinds
		res.workerRSS = peakRSS()
	}
	if err != nil {
		return nil, err
	}
	if res.worker.Error != "" {
		return nil, fmt.Errorf("worker: %s", res.worker.Error)
	}
	res.e2e = time.Since(start)

	// Read the output back, streaming, and check it.
	start = time.Now()
	rc, err := store.OpenOutput(ctx, t.ID)
	if err != nil {
		return nil, err
	}
	rows, err := checkOutput(rc)
	rc.Close()
	if err != nil {
		return nil, err
	}
	res.download = time.Since(start)
	if rows != gen.rows || res.worker.Rows != gen.rows {
		return nil, fmt.Errorf("output has %d rows and the worker counted %d, want %d", rows, res.worker.Rows, gen.rows)
	}
	res.producer = pm.snapshot()
	res.parentPeak, res.parentRSS = mem.stop(), peakRSS()
	return res, nil
}

// runChildProcess runs this program again as a worker-only child and
// returns its report and its peak RSS.
func runChildProcess(ctx context.Context, cc childConfig, log io.Writer) (workerReport, uint64, error) {
	var rep workerReport
	exe, err := os.Executable()
	if err != nil {
		return rep, 0, err
	}
	enc, err := json.Marshal(cc)
	if err != nil {
		return rep, 0, err
	}
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), childEnv+"="+string(enc))
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, log
	if err := cmd.Run(); err != nil {
		return rep, 0, fmt.Errorf("worker child: %w", err)
	}
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		return rep, 0, fmt.Errorf("worker child's report %q: %w", stdout.String(), err)
	}
	if rep.PeakRSS > 0 {
		return rep, rep.PeakRSS, nil
	}
	// Where the child cannot tell, the kernel's account of it; on Linux
	// that can include the parent's RSS at the moment of exec.
	return rep, childRSS(cmd.ProcessState), nil
}

func (r *largeResult) tables() []*table {
	mibOf := func(b int64) float64 { return float64(b) / (1 << 20) }
	rate := func(b int64, d time.Duration) string {
		if d <= 0 {
			return "n/a"
		}
		return fmt.Sprintf("%.1f MiB/s", mibOf(b)/d.Seconds())
	}
	where := "child process (its own RSS)"
	if !r.child {
		where = "this process (RSS includes the in-memory S3)"
	}
	t := newTable("Scenario 6: a large CSV through a streaming handler",
		"input", "rows", "output", "worker peak RSS", "worker peak Go memory", "handler throughput", "submit → completed", "upload (UploadInput)", "download (OpenOutput + parse)", "S3 + producer process")
	t.add(fmt.Sprintf("%.1f MiB", mibOf(r.inBytes)), float64(r.rows), fmt.Sprintf("%.1f MiB", mibOf(r.worker.OutBytes)),
		mib(r.workerRSS), mib(r.worker.PeakGo), rate(r.inBytes, r.worker.Handler), rate(r.inBytes, r.e2e),
		rate(r.inBytes, r.upload), rate(r.worker.OutBytes, r.download),
		fmt.Sprintf("peak Go memory %s, peak RSS %s", mib(r.parentPeak), mib(r.parentRSS)))
	t.note("The worker ran in a %s against %s over loopback HTTP. Handler: OpenInput → csv.Reader (ReuseRecord) → 3 computed columns → csv.Writer → Job.CreateOutput (a temporary file, uploaded on Close), SetProgress every 10,000 rows. Throughput counts input bytes over the handler's time, output upload included.", where, r.where)
	t.note("The in-memory S3 holds input and output in the parent (gofakes3 reads each PUT body into one buffer), so the parent's memory is mostly the objects, not s3task. The worker's requests: %s.", kindSummary(perUnit(r.worker.Requests, 1)))
	t.note("submit → completed includes starting the child process and its first poll (PollInterval 100ms).")
	t.note("Worker peak RSS is the child's own VmHWM (Linux), read by the child itself: the rusage the kernel reports for a child counts the parent's RSS at the moment of exec. The S3 + producer column is this process over the scenario (%s).", map[bool]string{true: "its peak reset at the start", false: "peak since the process started"}[r.rssFresh])
	return []*table{t}
}
