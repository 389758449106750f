package main

// Scenario 8: pickup with S3 event notifications. A worker in another
// process (this program run again) gets versitygw's webhook deliveries
// through s3event.NewHandler and, in the events variant, passes them to
// Worker.Notify; in the polling variant it receives them and drops them,
// finding work as today, by its wake object and a LIST. All variants run in
// the same run, each with a versitygw and a worker process of its own. The
// clock variants shift the Date header of every response the producer's
// and the worker's S3 clients see (an http.RoundTripper wrapper in each
// process, as a proxy in front of S3 whose clock is off would); the
// fan-out variants run a fleet of workers in the worker process and hand
// every delivery to each of them, as a broker without a queue group does.
//
// The handshake with a child: the child listens on 127.0.0.1:0 and prints
// its address as its first line; the parent then starts versitygw with that
// webhook URL (versitygw posts a test event at start-up and refuses to start
// if nothing listens) and writes the endpoint, credentials and bucket as one
// JSON line on the child's stdin. From then on the child prints one JSON
// line per event (ready, handler start, completion, counts asked for with
// "stats" on its stdin); closing its stdin stops it.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/s3test"
	"github.com/s3task/s3task/s3event"
)

// eventsChildEnv carries an eventsChildConfig, as JSON, to the worker
// process of the events scenario.
const eventsChildEnv = "S3TASK_BENCH_EVENTS_CHILD"

// eventsConfig is what the -events-* flags set.
type eventsConfig struct {
	tasks  int           // tasks submitted per variant, one at a time
	pause  time.Duration // the most a Submit waits after the last task completed
	idle   time.Duration // how long the idle workers are watched
	shift  time.Duration // the clock variants' Date shift (0: none)
	fanout []int         // the fan-out variants' fleet sizes
}

// eventsVariant is one way the child's workers learn of new work.
type eventsVariant struct {
	name          string
	notify        bool // deliveries go to Worker.Notify
	poll, maxPoll time.Duration
	workers       int           // workers in the child, each told of every delivery (0: one)
	shift         time.Duration // Date as the producer sees it, moved by shift; as the workers see it, by -shift
}

// fleet returns how many workers the variant runs.
func (v eventsVariant) fleet() int { return max(v.workers, 1) }

// eventsVariants are the variants a run measures: events and polling, then
// the events worker with the producer's and the worker's clocks shift
// apart both ways, then fleets told of every event.
func eventsVariants(cfg eventsConfig) []eventsVariant {
	events := eventsVariant{name: "events (webhook → Notify)", notify: true, poll: 2 * time.Minute, maxPoll: 10 * time.Minute}
	vs := []eventsVariant{events,
		{name: "polling (deliveries dropped)", poll: s3task.DefaultPollInterval, maxPoll: s3task.DefaultMaxPollInterval}}
	if d := cfg.shift; d != 0 {
		for _, d := range []time.Duration{d, -d} {
			v := events
			v.name = fmt.Sprintf("events, producer's Date %+v, worker's %+v", d, -d)
			v.shift = d
			vs = append(vs, v)
		}
	}
	for _, n := range cfg.fanout {
		v := events
		v.name = fmt.Sprintf("events, fan-out to %d workers", n)
		v.workers = n
		vs = append(vs, v)
	}
	return vs
}

// shiftDate returns a transport wrapper that moves the Date header of
// every response by d, as a proxy in front of S3 whose clock is off would.
func shiftDate(d time.Duration) func(http.RoundTripper) http.RoundTripper {
	return func(next http.RoundTripper) http.RoundTripper {
		if d == 0 {
			return next
		}
		return s3test.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := next.RoundTrip(r)
			if resp != nil {
				if at, perr := http.ParseTime(resp.Header.Get("Date")); perr == nil {
					resp.Header.Set("Date", at.Add(d).UTC().Format(http.TimeFormat))
				}
			}
			return resp, err
		})
	}
}

// eventsChildConfig is what a child knows from its start.
type eventsChildConfig struct {
	Worker          string        `json:"worker"`
	Workers         int           `json:"workers"` // each told of every delivery; 0 for one
	DateShift       time.Duration `json:"date_shift_ns"`
	Notify          bool          `json:"notify"`
	Token           string        `json:"token"`
	PollInterval    time.Duration `json:"poll_ns"`
	MaxPollInterval time.Duration `json:"max_poll_ns"`
}

// eventsS3 is what a child learns on its stdin once versitygw runs.
type eventsS3 struct {
	Endpoint  string `json:"endpoint"`
	AccessKey string `json:"access_key"`
	SecretKey string `json:"secret_key"`
	Bucket    string `json:"bucket"`
	Prefix    string `json:"prefix"`
}

// eventsMsg is one line a child prints; one field is set.
type eventsMsg struct {
	Listen string       `json:"listen,omitempty"` // first: the webhook's address
	Ready  bool         `json:"ready,omitempty"`  // the worker's first listing is done
	Start  *eventsStart `json:"start,omitempty"`  // a handler started
	Done   string       `json:"done,omitempty"`   // a task completed (OnComplete)
	Stats  *eventsStats `json:"stats,omitempty"`  // the answer to "stats"
	Error  string       `json:"error,omitempty"`
}

// eventsStart is a handler's start: the task and the child's wall clock at
// the handler's first statement, and when the first webhook delivery that
// named one of the task's markers came (0 if none came before).
type eventsStart struct {
	ID    string `json:"id"`
	At    int64  `json:"at_unix_ns"`
	Event int64  `json:"event_unix_ns,omitempty"`
}

// eventsStats are a child's counts since it started.
type eventsStats struct {
	Kinds      map[string]int `json:"kinds"`      // the workers' S3 requests by kind
	Labels     map[string]int `json:"labels"`     // and by label (see label)
	LostCAS    int            `json:"lost_cas"`   // claims (record PUTs If-Match) answered 412
	Deliveries int            `json:"deliveries"` // webhook POSTs received
	Records    int            `json:"records"`    // event records in them
	Notified   int            `json:"notified"`   // records Notify took an interest in
	Refused    int            `json:"refused"`    // deliveries not answered 204
}

// counts returns the request counts as a meter's.
func (s eventsStats) counts() counts {
	c := newCounts()
	for k, v := range s.Kinds {
		c.kinds[k] = v
	}
	for l, v := range s.Labels {
		c.labels[labelKey{"", l}] = v
	}
	c.lostCAS = s.LostCAS
	return c
}

// eventsChildFromEnv reports whether this process is the events scenario's
// worker process.
func eventsChildFromEnv() (eventsChildConfig, bool) {
	v := os.Getenv(eventsChildEnv)
	if v == "" {
		return eventsChildConfig{}, false
	}
	var c eventsChildConfig
	if err := json.Unmarshal([]byte(v), &c); err != nil {
		c.Token = "" // runEventsChild reports it
	}
	return c, true
}

// notifierFunc adapts a function to s3event.Notifier.
type notifierFunc func(s3task.ObjectEvent) bool

func (f notifierFunc) Notify(e s3task.ObjectEvent) bool { return f(e) }

// statusWriter notes the status a handler answered.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// lineWriter prints eventsMsgs, one JSON line each, from any goroutine.
type lineWriter struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func (w *lineWriter) send(m eventsMsg) {
	w.mu.Lock()
	defer w.mu.Unlock()
	_ = w.enc.Encode(m) // the parent gone, nobody is left to tell
}

// runEventsChild is the whole life of the events scenario's worker process:
// a webhook receiver first, then, once stdin says where S3 is, its workers
// (one, or a fleet each told of every delivery); it runs until stdin
// closes.
func runEventsChild(cfg eventsChildConfig, stdin io.Reader, stdout, stderr io.Writer) int {
	out := &lineWriter{enc: json.NewEncoder(stdout)}
	fail := func(err error) int {
		out.send(eventsMsg{Error: err.Error()})
		fmt.Fprintln(stderr, "bench events child:", err)
		return 1
	}
	if cfg.Token == "" {
		return fail(fmt.Errorf("bad %s", eventsChildEnv))
	}

	var (
		fleet                                  atomic.Pointer[[]*s3task.Worker]
		deliveries, records, notified, refused atomic.Int64

		seenMu sync.Mutex
		seen   = map[string]int64{} // marker key -> when a delivery first named it
	)
	// firstSeen returns when a delivery first named a marker of task id
	// (a marker's key ends in the task's ID); the first is Submit's.
	firstSeen := func(id string) int64 {
		seenMu.Lock()
		defer seenMu.Unlock()
		var first int64
		for k, at := range seen {
			if strings.Contains(k, id) && (first == 0 || at < first) {
				first = at
			}
		}
		return first
	}
	h, err := s3event.NewHandler(notifierFunc(func(e s3task.ObjectEvent) bool {
		ws := fleet.Load()
		if !cfg.Notify || ws == nil {
			return false
		}
		took := false
		for _, w := range *ws {
			took = w.Notify(e) || took
		}
		if took {
			notified.Add(1)
		}
		return took
	}), &s3event.HandlerOptions{Token: cfg.Token})
	if err != nil {
		return fail(err)
	}
	srv := &http.Server{
		ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			at := time.Now().UnixNano()
			deliveries.Add(1)
			// Count the records apart, then hand the body on as it came.
			body, err := io.ReadAll(io.LimitReader(r.Body, s3event.DefaultMaxBody+1))
			if err == nil {
				if recs, err := s3event.Parse(body); err == nil {
					records.Add(int64(len(recs)))
					seenMu.Lock()
					for _, rec := range recs {
						if _, ok := seen[rec.Key]; !ok && strings.Contains(rec.Key, "/active/") {
							seen[rec.Key] = at
						}
					}
					seenMu.Unlock()
				}
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			sw := &statusWriter{ResponseWriter: rw}
			h.ServeHTTP(sw, r)
			if sw.code != http.StatusNoContent {
				refused.Add(1)
			}
		}),
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-served
	}()
	out.send(eventsMsg{Listen: ln.Addr().String()})

	in := bufio.NewScanner(stdin)
	if !in.Scan() {
		return fail(fmt.Errorf("no S3 configuration on stdin: %v", in.Err()))
	}
	var sc eventsS3
	if err := json.Unmarshal(in.Bytes(), &sc); err != nil {
		return fail(fmt.Errorf("the S3 configuration %q: %w", in.Text(), err))
	}
	tr := newHTTPTransport()
	defer tr.CloseIdleConnections()
	m := newMeter()
	stats := func() *eventsStats {
		c := m.snapshot()
		s := &eventsStats{Kinds: c.kinds, Labels: map[string]int{}, LostCAS: c.lostCAS,
			Deliveries: int(deliveries.Load()), Records: int(records.Load()),
			Notified: int(notified.Load()), Refused: int(refused.Load())}
		for k, v := range c.labels {
			s.Labels[k.label] += v
		}
		return s
	}
	n := max(cfg.Workers, 1)
	var polled atomic.Int64
	ws := make([]*s3task.Worker, n)
	for i := range ws {
		// A Store and a client each, as processes of their own would have:
		// each reads the server's clock from its own responses.
		client := s3test.NewClientOn(sc.Endpoint, "us-east-1", sc.AccessKey, sc.SecretKey, tr, shiftDate(cfg.DateShift), m.wrap)
		store, err := s3task.NewStore(client, sc.Bucket, &s3task.StoreOptions{Prefix: sc.Prefix, Logger: quietLogger()})
		if err != nil {
			return fail(err)
		}
		id := cfg.Worker
		if n > 1 {
			id = fmt.Sprintf("%s-%d", cfg.Worker, i)
		}
		var first sync.Once
		w, err := s3task.NewWorker(store, s3task.HandlerFunc(func(_ context.Context, j *s3task.Job) error {
			at := time.Now().UnixNano()
			out.send(eventsMsg{Start: &eventsStart{ID: j.Task.ID, At: at, Event: firstSeen(j.Task.ID)}})
			return nil
		}), &s3task.WorkerOptions{
			ID: id, PollInterval: cfg.PollInterval, MaxPollInterval: cfg.MaxPollInterval,
			ReconcileInterval: -1,
			Hooks: s3task.Hooks{
				OnPoll: func(s3task.PollStats) {
					first.Do(func() {
						if polled.Add(1) == int64(n) {
							out.send(eventsMsg{Ready: true})
						}
					})
				},
				OnComplete: func(t *s3task.Task) { out.send(eventsMsg{Done: t.ID}) },
				OnFail: func(t *s3task.Task, err error) {
					out.send(eventsMsg{Error: fmt.Sprintf("task %s failed: %v", t.ID, err)})
				},
			},
		})
		if err != nil {
			return fail(err)
		}
		ws[i] = w
	}
	fleet.Store(&ws)
	running := make([]*runningWorker, n)
	for i, w := range ws {
		running[i] = startWorker(context.Background(), w)
	}
	for in.Scan() {
		switch cmd := in.Text(); cmd {
		case "stats":
			out.send(eventsMsg{Stats: stats()})
		default:
			out.send(eventsMsg{Error: fmt.Sprintf("unknown command %q", cmd)})
		}
	}
	for _, rw := range running {
		if err := rw.stop(); err != nil {
			return fail(fmt.Errorf("worker: %w", err))
		}
	}
	return 0
}

// eventsChild is a running worker process, seen from the parent.
type eventsChild struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser

	listen chan string
	ready  chan struct{}
	starts chan eventsStart
	dones  chan string
	stats  chan eventsStats
	fails  chan string
	gone   chan struct{} // closed when the child's stdout ends
	quit   chan struct{} // closed by stop: nobody reads the channels any more

	stopOnce sync.Once
	stopErr  error
}

// startEventsChild runs this program again as the events scenario's worker
// process, its stderr going to log.
func startEventsChild(ctx context.Context, cc eventsChildConfig, log io.Writer) (*eventsChild, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	enc, err := json.Marshal(cc)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), eventsChildEnv+"="+string(enc))
	cmd.Stderr = log
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("worker process: %w", err)
	}
	c := &eventsChild{
		cmd: cmd, stdin: stdin,
		listen: make(chan string, 1), ready: make(chan struct{}, 1),
		starts: make(chan eventsStart, 64), dones: make(chan string, 64),
		stats: make(chan eventsStats, 1), fails: make(chan string, 16),
		gone: make(chan struct{}), quit: make(chan struct{}),
	}
	go c.read(stdout)
	return c, nil
}

// read passes the child's lines to the channels they are for.
func (c *eventsChild) read(stdout io.Reader) {
	defer close(c.gone)
	in := bufio.NewScanner(stdout)
	in.Buffer(nil, 1<<20)
	for in.Scan() {
		var m eventsMsg
		if err := json.Unmarshal(in.Bytes(), &m); err != nil {
			offer(c.fails, fmt.Sprintf("a line that is not a message: %q", in.Text()))
			continue
		}
		switch {
		case m.Listen != "":
			offer(c.listen, m.Listen)
		case m.Ready:
			offer(c.ready, struct{}{})
		case m.Start != nil:
			deliver(c, c.starts, *m.Start)
		case m.Done != "":
			deliver(c, c.dones, m.Done)
		case m.Stats != nil:
			deliver(c, c.stats, *m.Stats)
		case m.Error != "":
			offer(c.fails, m.Error)
		}
	}
	_, _ = io.Copy(io.Discard, stdout)
}

// deliver sends v on ch, unless the child is being stopped.
func deliver[T any](c *eventsChild, ch chan<- T, v T) {
	select {
	case ch <- v:
	case <-c.quit:
	}
}

// await waits up to limit for a value on ch, a report of the child's
// failure, or its end.
func await[T any](ctx context.Context, c *eventsChild, ch <-chan T, limit time.Duration, what string) (T, error) {
	var zero T
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case v := <-ch:
		return v, nil
	case f := <-c.fails:
		return zero, fmt.Errorf("worker process, waiting for %s: %s", what, f)
	case <-c.gone:
		select {
		case v := <-ch:
			return v, nil
		case f := <-c.fails:
			return zero, fmt.Errorf("worker process, waiting for %s: %s", what, f)
		default:
		}
		return zero, fmt.Errorf("worker process exited while waiting for %s", what)
	case <-t.C:
		return zero, fmt.Errorf("timed out after %s waiting for %s", limit, what)
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// send writes one line to the child's stdin.
func (c *eventsChild) send(line string) error {
	_, err := io.WriteString(c.stdin, line+"\n")
	return err
}

// counts asks the child for its counts so far.
func (c *eventsChild) counts(ctx context.Context) (eventsStats, error) {
	if err := c.send("stats"); err != nil {
		return eventsStats{}, err
	}
	return await(ctx, c, c.stats, 10*time.Second, "counts")
}

// settle waits until no webhook delivery came for half a second (ten
// seconds at most) and returns the counts then.
func (c *eventsChild) settle(ctx context.Context) (eventsStats, error) {
	last, err := c.counts(ctx)
	if err != nil {
		return last, err
	}
	quiet, deadline := time.Now(), time.Now().Add(10*time.Second)
	for time.Since(quiet) < 500*time.Millisecond && time.Now().Before(deadline) {
		if err := s3test.Sleep(ctx, 100*time.Millisecond); err != nil {
			return last, err
		}
		s, err := c.counts(ctx)
		if err != nil {
			return last, err
		}
		if s.Deliveries != last.Deliveries {
			quiet = time.Now()
		}
		last = s
	}
	return last, nil
}

// stop closes the child's stdin, which ends it, and waits for its exit; a
// child that has not exited within 30 seconds is killed.
func (c *eventsChild) stop() error {
	c.stopOnce.Do(func() {
		close(c.quit)
		c.stdin.Close()
		t := time.NewTimer(30 * time.Second)
		defer t.Stop()
		select {
		case <-c.gone:
		case <-t.C:
			_ = c.cmd.Process.Kill()
			<-c.gone
		}
		if err := c.cmd.Wait(); err != nil {
			c.stopErr = fmt.Errorf("worker process: %w", err)
		}
	})
	return c.stopErr
}

// eventsSide is one variant's versitygw and worker process, kept running
// until the idle window is over.
type eventsSide struct {
	child *eventsChild
	gw    *s3test.Gateway
}

func (s *eventsSide) close() error {
	var err error
	if s.child != nil {
		err = s.child.stop()
	}
	if s.gw != nil {
		err = errors.Join(err, s.gw.Stop())
	}
	return err
}

// eventsRow is what one variant measured.
type eventsRow struct {
	v       eventsVariant
	pickups []time.Duration
	lags    []time.Duration // from just before Submit to the first delivery naming the task's marker
	reread  int             // pickups that read the task's record more than once
	c       counts          // the worker's requests from each Submit to its completion, summed
	gaps    counts          // its other requests, from the first measured Submit until the deliveries stopped

	// Webhook deliveries from the first measured Submit until they
	// stopped, after the last task completed.
	deliveries, records, notified, refused int

	idle counts // the worker's requests in the idle window
}

func (r eventsRow) idlePerMinute(window time.Duration) float64 {
	return float64(r.idle.total()) / window.Minutes()
}

type eventsResult struct {
	cfg    *config
	bin    string
	window time.Duration
	rows   []eventsRow
}

// skipError says a scenario did not run, and why: the run goes on without
// it.
type skipError struct{ err error }

func (e skipError) Error() string { return "skipped: " + e.err.Error() }
func (e skipError) Unwrap() error { return e.err }

func runEvents(ctx context.Context, cfg *config, log io.Writer) (result, error) {
	// The worker processes' stderr is copied into log by os/exec's
	// goroutines while this one writes progress there too.
	log = &lockedWriter{w: log}
	bin, err := s3test.GatewayBinary()
	if err != nil {
		if !cfg.scenariosSet {
			return nil, skipError{err}
		}
		return nil, err
	}
	dir, err := os.MkdirTemp("", "s3task-bench-events-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	res := &eventsResult{cfg: cfg, bin: bin, window: cfg.events.idle}
	var sides []*eventsSide
	defer func() {
		for _, s := range sides {
			if err := s.close(); err != nil {
				fmt.Fprintf(log, "bench: events: %v\n", err)
			}
		}
	}()
	for i, v := range eventsVariants(cfg.events) {
		side := &eventsSide{}
		sides = append(sides, side)
		row, err := eventsPickups(ctx, cfg, bin, filepath.Join(dir, fmt.Sprint(i)), v, side, log)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", v.name, err)
		}
		fmt.Fprintf(log, "bench: events: %s: pickup p50 %s, p99 %s, max %s, %s LIST, %s requests and %s lost claims per pickup, %s deliveries per task\n",
			v.name, dur(percentile(row.pickups, 50)), dur(percentile(row.pickups, 99)), dur(percentile(row.pickups, 100)),
			num(float64(row.c.kinds["LIST"])/float64(len(row.pickups))), num(float64(row.c.total())/float64(len(row.pickups))),
			num(float64(row.c.lostCAS)/float64(len(row.pickups))), num(float64(row.deliveries)/float64(len(row.pickups))))
		res.rows = append(res.rows, row)
	}

	// Both workers idle, at the same time: only their requests count.
	fmt.Fprintf(log, "bench: events: watching the idle workers for %s\n", res.window)
	before := make([]eventsStats, len(sides))
	for i, s := range sides {
		if before[i], err = s.child.counts(ctx); err != nil {
			return nil, err
		}
	}
	if err := s3test.Sleep(ctx, res.window); err != nil {
		return nil, err
	}
	for i, s := range sides {
		after, err := s.child.counts(ctx)
		if err != nil {
			return nil, err
		}
		res.rows[i].idle = after.counts().minus(before[i].counts())
	}
	for _, s := range sides {
		if err := s.child.stop(); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// eventsPickups starts the worker process of variant v, then versitygw
// with its webhook pointed at the process, in dir, and times the pickups.
// It leaves both running in side, for the idle window.
func eventsPickups(ctx context.Context, cfg *config, bin, dir string, v eventsVariant, side *eventsSide, log io.Writer) (eventsRow, error) {
	row := eventsRow{v: v}
	token := randHex(16)
	child, err := startEventsChild(ctx, eventsChildConfig{
		Worker: "events-bench", Workers: v.workers, DateShift: -v.shift, Notify: v.notify, Token: token, PollInterval: v.poll, MaxPollInterval: v.maxPoll,
	}, log)
	if err != nil {
		return row, err
	}
	side.child = child
	addr, err := await(ctx, child, child.listen, 30*time.Second, "the webhook's address")
	if err != nil {
		return row, err
	}
	root := filepath.Join(dir, "root")
	gw, err := s3test.StartGateway(ctx, s3test.GatewayConfig{
		Bin: bin, Dir: root, EventWebhookURL: "http://" + addr + "/?token=" + token,
	})
	if err != nil {
		return row, err
	}
	side.gw = gw
	bucket, err := s3test.NewBucket(ctx, gw.Client(), "bench-events")
	if err != nil {
		return row, err
	}
	const prefix = "bench/events/"
	sc, err := json.Marshal(eventsS3{Endpoint: gw.Endpoint, AccessKey: gw.AccessKey, SecretKey: gw.SecretKey, Bucket: bucket, Prefix: prefix})
	if err != nil {
		return row, err
	}
	if err := child.send(string(sc)); err != nil {
		return row, err
	}
	if _, err := await(ctx, child, child.ready, 30*time.Second, "the worker's first listing"); err != nil {
		return row, err
	}

	producer, err := s3task.NewStore(gw.Client(shiftDate(v.shift)), bucket, &s3task.StoreOptions{Prefix: prefix, Logger: quietLogger()})
	if err != nil {
		return row, err
	}
	// A warm-up task first, not counted: from it on the wake object exists,
	// as in any bucket in use.
	ids, err := prepareMany(ctx, producer, cfg.events.tasks+1, 4)
	if err != nil {
		return row, err
	}
	if _, err := child.settle(ctx); err != nil {
		return row, err
	}
	limit := 3*v.poll + 5*time.Second
	var phase eventsStats
	for i, id := range ids {
		if i > 0 {
			// Land each Submit at a random point of the worker's poll cycle.
			if err := s3test.Sleep(ctx, time.Duration(mrand.Int64N(int64(cfg.events.pause)+1))); err != nil {
				return row, err
			}
		}
		before, err := child.counts(ctx)
		if err != nil {
			return row, err
		}
		start := time.Now()
		if _, err := producer.Submit(ctx, id); err != nil {
			return row, err
		}
		s, err := await(ctx, child, child.starts, limit, "the start of task "+id)
		if err != nil {
			return row, err
		}
		if s.ID != id {
			return row, fmt.Errorf("task %s started, want %s", s.ID, id)
		}
		d := time.Unix(0, s.At).Sub(start)
		lag := time.Duration(-1)
		if s.Event != 0 {
			lag = time.Unix(0, s.Event).Sub(start)
		}
		done, err := await(ctx, child, child.dones, 30*time.Second, "the completion of task "+id)
		if err != nil {
			return row, err
		}
		if done != id {
			return row, fmt.Errorf("task %s completed, want %s", done, id)
		}
		after, err := child.counts(ctx)
		if err != nil {
			return row, err
		}
		if i == 0 {
			if phase, err = child.settle(ctx); err != nil {
				return row, err
			}
			continue
		}
		c := after.counts().minus(before.counts())
		gets := labelCount(c, "GET record")
		if gets > 1 {
			row.reread++
		}
		if d > 100*time.Millisecond && v.notify {
			fmt.Fprintf(log, "bench: events: %s: slow pickup of task %s: %s, the marker's delivery after %s, %d record GETs, %d lost claims\n", v.name, id, dur(d), dur(lag), gets, c.lostCAS)
		}
		row.pickups = append(row.pickups, d)
		if lag >= 0 {
			row.lags = append(row.lags, lag)
		}
		row.c = row.c.plus(c)
	}
	end, err := child.settle(ctx)
	if err != nil {
		return row, err
	}
	row.gaps = end.counts().minus(phase.counts()).minus(row.c)
	row.deliveries = end.Deliveries - phase.Deliveries
	row.records = end.Records - phase.Records
	row.notified = end.Notified - phase.Notified
	row.refused = end.Refused
	return row, nil
}

func (r *eventsResult) tables() []*table {
	t := newTable("Scenario 8: pickup with S3 event notifications (versitygw webhook) against polling, worker in another process",
		"worker", "PollInterval / MaxPollInterval", "pickups", "p50", "p99", "max",
		"LIST per pickup", "GET per pickup", "HEAD per pickup", "PUT per pickup", "DELETE per pickup", "all requests per pickup",
		"lost claims per pickup", "webhook deliveries per task", "idle requests per minute")
	for _, row := range r.rows {
		n := len(row.pickups)
		per := perUnit(row.c.kinds, n)
		t.add(row.v.name, span(row.v.poll)+" / "+span(row.v.maxPoll), n,
			percentile(row.pickups, 50), percentile(row.pickups, 99), percentile(row.pickups, 100),
			per["LIST"], per["GET"], per["HEAD"], per["PUT"], per["DELETE"], sumValues(per),
			float64(row.c.lostCAS)/float64(max(n, 1)), float64(row.deliveries)/float64(max(n, 1)), row.idlePerMinute(r.window))
	}
	ec := r.cfg.events
	t.note("Each variant ran a versitygw of its own (%s, posix backend in a temporary folder, --event-webhook-url) and a fresh worker process: this program run again, with one s3task.Worker (Concurrency 1, ReconcileInterval off, a zero-work handler) on a Store of its own and an http server on 127.0.0.1 with s3event.NewHandler (the token in the webhook URL). The process listens first and tells this one its address; versitygw, which posts a test event at start-up and refuses to start if nothing listens, starts next; the process then gets the endpoint, credentials and bucket on its stdin. Events: the deliveries go to Worker.Notify. Polling: they are received and answered, not passed on; the worker finds work by its wake object and a LIST, as without events. -endpoint does not apply here.", r.bin)
	t.note("This process, on a Store of its own, submits %d tasks per variant one at a time, each after a random pause of 0 to %s so that the Submits land at random points of the poll cycle, after a warm-up task not counted. Pickup: from just before Submit (here) to the handler's first statement (time.Now().UnixNano() in the worker process, sent on its stdout); one machine, one wall clock. p99 is the nearest rank: below 100 samples it is the max or next to it.", ec.tasks, span(ec.pause))
	t.note("Clock variants: every response the producer's S3 client (this process) sees has its Date header moved by the first shift, every one the worker's sees by the second, by an http.RoundTripper wrapper in each process, as a proxy in front of S3 whose clock is off would: each process's estimate of the server's clock is off by that much, on top of versitygw's own Date, which lags real time by up to a second. Fan-out variants: the worker process runs that many workers, each with a Store and an S3 client of its own (Concurrency 1), and hands every delivery to each of them, as a broker without a queue group does; a lost claim is a claim's record PUT (If-Match) answered 412; its requests and the fleet's are counted together.")
	t.note("Requests per pickup are the worker's (its process's S3 transport, metered) from just before each Submit to the task's completion (OnComplete), the checks made while waiting included. Webhook deliveries per task: the POSTs the worker process received from the first measured Submit until they stopped after the last completion, over the tasks; versitygw posts one per object written or deleted (the Submit's, the claim's and the completion's writes, the wake object's included).")
	for _, row := range r.rows {
		if row.v.notify {
			t.note("%s: %d deliveries with %d records, of which Notify took an interest in %d; %d deliveries over the whole run were not answered 204. From just before Submit to the first delivery naming the task's marker (Submit writes it first), in %d of %d pickups: p50 %s, p99 %s, max %s; the rest of a pickup is the worker's (Notify, its loop, the record GET and the claim). %d of %d pickups read the record twice: the marker's event came before Submit had written the record, and the record's event brought the worker back.",
				row.v.name, row.deliveries, row.records, row.notified, row.refused, len(row.lags), len(row.pickups),
				dur(percentile(row.lags, 50)), dur(percentile(row.lags, 99)), dur(percentile(row.lags, 100)), row.reread, len(row.pickups))
		}
	}
	t.note("Idle requests per minute: after both variants' pickups, both workers were left idle at the same time for %s and their requests counted (%s). A window of a few minutes catches one or two of the events worker's checks at most; the exact count over an idle hour (at most 60 requests) is TestNotifyIdleCost in the root package, on a simulated clock.", span(r.window), r.idleSummary())
	for _, row := range r.rows {
		t.note("%s, by label per pickup: %s.", row.v.name, labelList(row.c, max(len(row.pickups), 1), ""))
	}
	var gaps []string
	for _, row := range r.rows {
		l := labelList(row.gaps, 1, "×")
		if l == "" {
			l = "none"
		}
		gaps = append(gaps, row.v.name+": "+l)
	}
	t.note("The workers' requests outside the pickups (after each completion until the next Submit, and after the last until the deliveries stopped), in all: %s.", strings.Join(gaps, "; "))
	if goals := r.goals(); goals != "" {
		t.note("Goals with events (the issue): %s.", goals)
	}
	return []*table{t}
}

// idleSummary lists each variant's requests in the idle window.
func (r *eventsResult) idleSummary() string {
	var parts []string
	for _, row := range r.rows {
		l := labelList(row.idle, 1, "×")
		if l == "" {
			l = "none"
		}
		parts = append(parts, row.v.name+": "+l)
	}
	return strings.Join(parts, "; ")
}

// goals says whether the events variants met the goals.
func (r *eventsResult) goals() string {
	met := func(ok bool) string { return map[bool]string{true: "met", false: "**missed**"}[ok] }
	var parts []string
	for _, row := range r.rows {
		if !row.v.notify {
			continue
		}
		p50, p99 := percentile(row.pickups, 50), percentile(row.pickups, 99)
		if len(parts) == 0 {
			idle := row.idlePerMinute(r.window)
			parts = append(parts, fmt.Sprintf("%s: pickup p50 ≤ 100ms %s (%s), p99 ≤ 100ms %s (%s), idle requests ≤ 1 a minute %s (%s over %s)",
				row.v.name, met(p50 <= 100*time.Millisecond), dur(p50), met(p99 <= 100*time.Millisecond), dur(p99),
				met(idle <= 1), num(idle), span(r.window)))
			continue
		}
		part := fmt.Sprintf("%s: p99 ≤ 100ms %s (%s)", row.v.name, met(p99 <= 100*time.Millisecond), dur(p99))
		if row.v.fleet() > 1 {
			lost := float64(row.c.lostCAS) / float64(max(len(row.pickups), 1))
			part += fmt.Sprintf(", lost claims ≤ 1 per pickup %s (%s)", met(lost <= 1), num(lost))
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, "; ")
}

// lockedWriter serializes the writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
