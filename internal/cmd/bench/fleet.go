package main

// Scenario 7: a fleet of workers on one queue, since markers are keyed by
// due time (active/<due>_<id>, due first) and a worker reads one page from
// the head; next to an emulation, in the same run, of the previous design,
// where markers were keyed active/<id> (newest first) and every poll listed
// every page and visited the markers in random order.
//
//	7a  polling cost against the backlog: requests per claim
//	7b  oldest first: each task's wait against a strict FIFO's
//	7c  the reconcile bill of an idle fleet: one reconciler against sixteen
//	7d  pickup by a worker of the same process (local wake) and of another
//	7e  delayed start: CreateParams.RunAt and the LISTs while waiting
//	7f  LISTs per submitted task with 1, 4 and 16 idle workers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/s3test"
	"github.com/s3task/s3task/internal/s3x"
)

// fleetConfig is what the -fleet-* flags set.
type fleetConfig struct {
	backlogs    []int         // 7a: queued tasks seeded, one run per size
	claims      int           // 7a: claims measured
	oldPages    int           // 7a: most pages the previous design lists in the measured claims
	workers     int           // 7a, 7b, 7c: workers in the fleet
	queue       int           // 7b: tasks drained
	work        time.Duration // 7b: handler duration
	finished    int           // 7c: finished tasks in the bucket
	reconcile   time.Duration // 7c: ReconcileInterval
	samples     int           // 7d: pickups per variant
	runAt       time.Duration // 7e: RunAt - now
	idleWorkers []int         // 7f: worker counts
	idleSamples int           // 7f: submits per count
	idlePoll    time.Duration // 7f: PollInterval
}

const (
	designNew = "new (due-first markers, one page)"
	designOld = "previous (all pages, random order)"

	// fleetPoll is the PollInterval of the draining workers of 7a and 7b:
	// short, so that a worker whose poll found nothing to claim does not
	// sit out the run. An idle poll costs a conditional GET of the wake
	// object, never a LIST, so it does not change the LIST counts.
	fleetPoll = 50 * time.Millisecond

	// fleetAge is how far back the submit times of the 7a backlog go.
	fleetAge = time.Hour

	// markerLayout is the library's marker time format (marker.go).
	markerLayout = "20060102T150405.000Z"

	// reconcileIntervals is how many ReconcileIntervals 7c watches.
	reconcileIntervals = 4
)

type fleetResult struct {
	cfg     *config
	where   string
	drain   []fleetDrainRow // 7a: new and previous per backlog
	order   []*waitStats    // 7b: new, previous
	recon   []fleetReconRow // 7c: new, previous
	pickup  []fleetPickupRow
	delayed fleetDelayed
	idle    []fleetIdleRow
	svgs    []string // charts written
}

func (*fleetResult) name() string { return "fleet" }

func runFleet(ctx context.Context, cfg *config, log io.Writer) (*fleetResult, error) {
	res := &fleetResult{cfg: cfg, where: "in-process gofakes3, a fresh server per run"}
	if cfg.endpoint != "" {
		res.where = strings.TrimRight(cfg.endpoint, "/")
	}
	fc := cfg.fleet
	for _, b := range fc.backlogs {
		for _, design := range []string{designNew, designOld} {
			row, err := fleetDrain(ctx, cfg, design, b)
			if err != nil {
				return nil, fmt.Errorf("7a, backlog %d, %s: %w", b, design, err)
			}
			fmt.Fprintf(log, "bench: fleet: backlog %d, %s: %d claims, %s LIST/claim, seeded in %s, ran %s\n",
				b, design, row.claims, num(row.perClaim(row.c.kinds["LIST"])), row.seed.Round(time.Millisecond), row.elapsed.Round(time.Millisecond))
			res.drain = append(res.drain, row)
		}
	}
	for _, design := range []string{designNew, designOld} {
		ws, err := fleetOrder(ctx, cfg, design)
		if err != nil {
			return nil, fmt.Errorf("7b, %s: %w", design, err)
		}
		fmt.Fprintf(log, "bench: fleet: oldest first, %s: p99 wait %s, FIFO %s, drained in %s\n", design, ws.p99, ws.fp99, ws.elapsed.Round(time.Millisecond))
		res.order = append(res.order, ws)
	}
	for _, design := range []string{designNew, designOld} {
		row, err := fleetReconcile(ctx, cfg, design)
		if err != nil {
			return nil, fmt.Errorf("7c, %s: %w", design, err)
		}
		fmt.Fprintf(log, "bench: fleet: reconcile, %s: %s record GETs per interval, ran %s\n", design, num(row.perInterval(labelCount(row.c, "GET record"))), row.took.Round(time.Millisecond))
		res.recon = append(res.recon, row)
	}
	// 7d, 7e and 7f mostly sleep, waiting for poll cycles: they run at the
	// same time, each on a server of its own.
	var wg sync.WaitGroup
	lw := &lockedWriter{w: log}
	errs := make([]error, 3)
	ctx, cancel := context.WithCancel(ctx) // one failing stops the others
	defer cancel()
	wg.Go(func() {
		for _, local := range []bool{true, false} {
			row, err := fleetPickup(ctx, cfg, local)
			if err != nil {
				errs[0] = fmt.Errorf("7d: %w", err)
				cancel()
				return
			}
			fmt.Fprintf(lw, "bench: fleet: pickup, %s: p50 %s, max %s\n", row.variant, percentile(row.pickups, 50), percentile(row.pickups, 100))
			res.pickup = append(res.pickup, row)
		}
	})
	wg.Go(func() {
		d, err := fleetDelayedStart(ctx, cfg)
		if err != nil {
			errs[1] = fmt.Errorf("7e: %w", err)
			cancel()
			return
		}
		fmt.Fprintf(lw, "bench: fleet: delayed start: claimed %s after RunAt, %d LISTs before it, %d after\n", d.late, d.listsBefore, d.listsAfter)
		res.delayed = d
	})
	wg.Go(func() {
		for _, n := range fc.idleWorkers {
			row, err := fleetIdleLists(ctx, cfg, n)
			if err != nil {
				errs[2] = fmt.Errorf("7f, %d workers: %w", n, err)
				cancel()
				return
			}
			fmt.Fprintf(lw, "bench: fleet: %d idle workers: %s LISTs per submitted task\n", n, num(row.perTask(row.c.kinds["LIST"])))
			res.idle = append(res.idle, row)
		}
	})
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.svgDir != "" {
		for name, c := range map[string]*lineChart{"lists-per-claim.svg": res.listsChart(), "queue-wait.svg": res.waitChart()} {
			path, err := writeSVG(cfg.svgDir, name, c)
			if err != nil {
				return nil, fmt.Errorf("chart: %w", err)
			}
			res.svgs = append(res.svgs, path)
		}
		sort.Strings(res.svgs)
		fmt.Fprintf(log, "bench: fleet: wrote %s\n", strings.Join(res.svgs, ", "))
	}
	return res, nil
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// fleetEnv is an env whose in-process backend can be seeded directly.
type fleetEnv struct {
	*env
	mem *s3mem.Backend // nil against -endpoint
}

// openFleetEnv starts a fresh in-process S3 for one run (or a prefix of the
// -endpoint bucket), keeping hold of its backend.
func openFleetEnv(cfg *config, name string) (*fleetEnv, error) {
	if cfg.endpoint != "" {
		e, err := openEnv(cfg, name)
		return &fleetEnv{env: e}, err
	}
	mem := s3mem.New()
	srv, err := s3test.StartBackend(mem)
	if err != nil {
		return nil, err
	}
	return &fleetEnv{
		env: &env{cfg: cfg, srv: srv, endpoint: srv.URL, bucket: srv.Bucket, prefix: "bench/" + name + "/", log: quietLogger()},
		mem: mem,
	}, nil
}

// freeMemory returns the heap of a finished run to the OS, so that the
// process's peak is that of its largest run, not of two.
func freeMemory() { debug.FreeOSMemory() }

// seedObject is one object to write before a run.
type seedObject struct {
	key  string
	body []byte
}

// seed writes the objects gen returns for 0 <= i < n: straight into the
// in-process backend (no request, so no count, and a hundred times faster
// than over HTTP), or through an S3 client 64 at a time against -endpoint.
func (e *fleetEnv) seed(ctx context.Context, n int, gen func(i int) ([]seedObject, error)) error {
	if e.mem != nil {
		for i := range n {
			objs, err := gen(i)
			if err != nil {
				return err
			}
			for _, o := range objs {
				meta := map[string]string{}
				if len(o.body) > 0 {
					meta["Content-Type"] = "application/json"
				}
				if _, err := e.mem.PutObject(e.bucket, o.key, meta, bytes.NewReader(o.body), int64(len(o.body)), nil); err != nil {
					return fmt.Errorf("seed %s: %w", o.key, err)
				}
			}
			if i%1000 == 0 && ctx.Err() != nil {
				return ctx.Err()
			}
		}
		return nil
	}
	c := e.client()
	jobs := make(chan int)
	errs := make(chan error, 64)
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for i := range jobs {
				objs, err := gen(i)
				for _, o := range objs {
					if err != nil {
						break
					}
					_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: &e.bucket, Key: aws.String(o.key),
						Body: bytes.NewReader(o.body), ContentLength: aws.Int64(int64(len(o.body)))})
				}
				if err != nil {
					offer(errs, err)
				}
			}
		})
	}
	for i := 0; i < n && ctx.Err() == nil && len(errs) == 0; i++ {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return ctx.Err()
	}
}

// template queues one real task through the library (Create, UploadInput,
// Submit) under e.prefix+"template/" and returns its record, read back raw:
// the base of every clone.
func (e *fleetEnv) template(ctx context.Context) (map[string]any, error) {
	s, err := e.store(e.client(), "template", nil)
	if err != nil {
		return nil, err
	}
	id, err := prepare(ctx, s, "template")
	if err != nil {
		return nil, err
	}
	if _, err := s.Submit(ctx, id); err != nil {
		return nil, err
	}
	out, err := e.client().GetObject(ctx, &s3.GetObjectInput{Bucket: &e.bucket, Key: aws.String(s.Prefix() + id + "/status.json")})
	if err != nil {
		return nil, err
	}
	defer out.Body.Close()
	var base map[string]any
	if err := json.NewDecoder(out.Body).Decode(&base); err != nil {
		return nil, err
	}
	if base["status"] != string(s3task.StatusQueued) {
		return nil, fmt.Errorf("template task is %v, want queued", base["status"])
	}
	return base, nil
}

// cloneRecord returns a copy of the record base for a new task submitted at
// due (created a second before), with an ID from s3task.NewIDAt, under
// prefix.
func cloneRecord(base map[string]any, prefix string, i int, due time.Time) (id string, body []byte, err error) {
	created := due.Add(-time.Second)
	id = s3task.NewIDAt(created)
	rec := make(map[string]any, len(base))
	for k, v := range base {
		rec[k] = v
	}
	rec["task_id"] = id
	rec["task_name"] = fmt.Sprintf("clone %d", i)
	rec["input_object_path"] = prefix + id + "/input.csv"
	rec["created_at"] = created.UTC().Format(time.RFC3339Nano)
	rec["updated_at"] = due.UTC().Format(time.RFC3339Nano)
	rec["due_at"] = due.UTC().Format(time.RFC3339Nano)
	rec["revision"] = randHex(8)
	body, err = json.Marshal(rec)
	return id, body, err
}

// markerFor returns the key of a queued task's marker in the design.
func markerFor(design, prefix string, due time.Time, id string) string {
	if design == designOld {
		return prefix + "active/" + id
	}
	return prefix + "active/" + due.UTC().Format(markerLayout) + "_" + id
}

// seedQueue seeds n queued tasks under prefix with the design's markers,
// task i submitted at dueOf(i) (whole milliseconds), and returns each
// task's due time by ID.
func (e *fleetEnv) seedQueue(ctx context.Context, design, prefix string, n int, dueOf func(i int) time.Time) (map[string]time.Time, error) {
	base, err := e.template(ctx)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	due := make(map[string]time.Time, n)
	err = e.seed(ctx, n, func(i int) ([]seedObject, error) {
		at := dueOf(i).Truncate(time.Millisecond)
		id, body, err := cloneRecord(base, prefix, i, at)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		due[id] = at
		mu.Unlock()
		return []seedObject{{prefix + id + "/status.json", body}, {markerFor(design, prefix, at, id), nil}}, nil
	})
	return due, err
}

// labelCount sums the requests of c whose label starts with prefix, across
// phases and statuses: "GET record" counts "GET record →404" too.
func labelCount(c counts, prefix string) int {
	n := 0
	for k, v := range c.labels {
		if k.label == prefix || strings.HasPrefix(k.label, prefix+" ") {
			n += v
		}
	}
	return n
}

// 7a: polling cost against the backlog.

type fleetDrainRow struct {
	design    string
	backlog   int
	workers   int
	claims    int    // won in the measured window
	completes int    // completed in it
	c         counts // the workers' requests in it
	elapsed   time.Duration
	seed      time.Duration

	// The whole run, from the workers' start to their stop.
	whole                       counts
	wholeClaims, wholeCompletes int
	wholeElapsed                time.Duration
}

func (r fleetDrainRow) perClaim(n int) float64 { return float64(n) / float64(max(r.claims, 1)) }

func (r fleetDrainRow) lists() float64      { return r.perClaim(r.c.kinds["LIST"]) }
func (r fleetDrainRow) recordGETs() float64 { return r.perClaim(labelCount(r.c, "GET record")) }
func (r fleetDrainRow) recordGETsPerDone() float64 {
	return float64(labelCount(r.c, "GET record")) / float64(max(r.completes, 1))
}
func (r fleetDrainRow) markerDELETEs() float64 { return r.perClaim(labelCount(r.c, "DELETE marker")) }
func (r fleetDrainRow) puts() float64          { return r.perClaim(r.c.kinds["PUT"]) }
func (r fleetDrainRow) lost() float64          { return r.perClaim(r.c.lostCAS) }
func (r fleetDrainRow) total() float64         { return r.perClaim(r.c.total()) }

// fleetDrain seeds a backlog of queued tasks, submitted over the past hour,
// and lets the fleet claim with a handler that returns at once. Requests
// are counted from the claim that ends the warm-up (one per worker, by when
// every worker has listed) to cfg.fleet.claims claims later, where the
// workers are stopped: the start and the stop, where each worker makes one
// LIST that no claim follows, are left out of the per-claim numbers.
func fleetDrain(ctx context.Context, cfg *config, design string, backlog int) (fleetDrainRow, error) {
	fc := cfg.fleet
	row := fleetDrainRow{design: design, backlog: backlog, workers: fc.workers}
	tag := "new"
	if design == designOld {
		tag = "old"
	}
	e, err := openFleetEnv(cfg, fmt.Sprintf("fleet-%s-%d", tag, backlog))
	if err != nil {
		return row, err
	}
	defer freeMemory() // after close: the next run's backlog needs the room
	defer e.close()
	prefix := e.prefix + "tasks/"
	now := time.Now()
	t0 := time.Now()
	if _, err := e.seedQueue(ctx, design, prefix, backlog, func(i int) time.Time {
		return now.Add(-time.Second - time.Duration(i)*(fleetAge/time.Duration(backlog)))
	}); err != nil {
		return row, err
	}
	row.seed = time.Since(t0)
	m := newMeter()
	if design == designOld {
		// Each listing the emulation starts ends in a claim, so its
		// whole run has no start or stop effect to leave out.
		f := &oldFleet{e: e, prefix: prefix, workers: fc.workers, stopAt: oldClaims(fc, backlog), m: m}
		start := time.Now()
		row.claims, row.completes, err = f.run(ctx)
		row.elapsed = time.Since(start)
		row.c = m.snapshot()
		row.whole, row.wholeClaims, row.wholeCompletes, row.wholeElapsed = row.c, row.claims, row.completes, row.elapsed
		return row, err
	}
	warm, end := int64(fc.workers), int64(fc.workers+fc.claims)
	var (
		mu           sync.Mutex
		from, to     counts
		doneFrom     int64
		doneTo       int64
		fromT, toT   time.Time
		done         atomic.Int64
		claims, ends int
	)
	onClaim := func(_ string, at time.Time, n int64) {
		switch n {
		case warm, end:
			c, d := m.snapshot(), done.Load()
			mu.Lock()
			if n == warm {
				from, doneFrom, fromT = c, d, at
			} else {
				to, doneTo, toT = c, d, at
			}
			mu.Unlock()
		}
	}
	onComplete := func() { done.Add(1) }
	start := time.Now()
	claims, ends, err = newFleet(ctx, e, "tasks", fc.workers, int(end), 0, m, onClaim, onComplete)
	if err != nil {
		return row, err
	}
	row.whole, row.wholeClaims, row.wholeCompletes, row.wholeElapsed = m.snapshot(), claims, ends, time.Since(start)
	mu.Lock()
	defer mu.Unlock()
	row.c, row.claims, row.completes, row.elapsed = to.minus(from), int(end-warm), int(doneTo-doneFrom), toT.Sub(fromT)
	return row, nil
}

// oldClaims is how many claims of the previous design 7a runs at a backlog:
// cfg.claims, or fewer where each claim's full listing would take more
// than oldPages pages in all (its LISTs per claim are the pages of one
// listing however many claims are made), but at least one per worker.
func oldClaims(fc fleetConfig, backlog int) int {
	pages := (backlog + 999) / 1000
	return min(fc.claims, max(fc.workers, fc.oldPages/pages))
}

// newFleet runs n workers of the library (each with its own Store and S3
// client, Concurrency 1, reconcile off) on the tasks under sub until stopAt
// claims were won, then stops them; each handler sleeps work. It returns the
// claims won and the tasks completed. onClaim, if set, gets each claim with
// its rank; onComplete each completion.
func newFleet(ctx context.Context, e *fleetEnv, sub string, n, stopAt int, work time.Duration, m *meter, onClaim func(id string, at time.Time, n int64), onComplete func()) (claims, completes int, err error) {
	var won, done atomic.Int64
	enough := make(chan struct{})
	var once sync.Once
	var running []*runningWorker
	defer func() {
		if serr := stopAll(running); err == nil {
			err = serr
		}
		claims, completes = int(won.Load()), int(done.Load())
	}()
	for i := range n {
		ws, err := e.store(e.client(m.wrap), sub, nil)
		if err != nil {
			return 0, 0, err
		}
		w, err := s3task.NewWorker(ws, s3task.HandlerFunc(func(ctx context.Context, _ *s3task.Job) error {
			if work > 0 {
				return sleep(ctx, work)
			}
			return nil
		}), &s3task.WorkerOptions{
			ID: fmt.Sprintf("fleet-%d", i), Concurrency: 1, PollInterval: fleetPoll, ReconcileInterval: -1,
			Hooks: s3task.Hooks{
				OnClaim: func(t *s3task.Task) {
					at, n := time.Now(), won.Add(1)
					if onClaim != nil {
						onClaim(t.ID, at, n)
					}
					if n >= int64(stopAt) {
						once.Do(func() { close(enough) })
					}
				},
				OnComplete: func(*s3task.Task) {
					done.Add(1)
					if onComplete != nil {
						onComplete()
					}
				},
			},
		})
		if err != nil {
			return 0, 0, err
		}
		running = append(running, startWorker(ctx, w))
	}
	select {
	case <-enough:
	case <-time.After(10 * time.Minute):
		return 0, 0, fmt.Errorf("%d claims of %d in 10 minutes", won.Load(), stopAt)
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	}
	return 0, 0, nil
}

// oldFleet emulates the workers of the previous design (Concurrency 1):
// each lists every page of the marker folder (active/<id>, newest first),
// shuffles the markers, and visits them in that order: it GETs the record,
// deletes the marker of a finished task (as the previous worker settled
// one), and tries to claim a queued one with a PUT If-Match. A lost claim
// costs a GET more, the re-read by which the library (then as now) settles
// whether its write landed; the worker goes on to the next marker. A won
// claim runs the handler (a sleep of work), writes the completed record
// (PUT If-Match), deletes the marker, and starts over with a new listing.
// It stops once stopAt claims were won, or when a listing is empty.
type oldFleet struct {
	e       *fleetEnv
	prefix  string // the tasks' prefix; markers are under prefix+"active/"
	workers int
	stopAt  int
	work    time.Duration
	m       *meter

	onClaim    func(id string, at time.Time, n int64) // if set, called with each claim and its rank
	onComplete func()                                 // if set, called after each completion

	won, done atomic.Int64
}

func (f *oldFleet) run(ctx context.Context) (claims, completes int, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, f.workers)
	var wg sync.WaitGroup
	for i := range f.workers {
		wg.Go(func() {
			errs[i] = f.worker(ctx, fmt.Sprintf("old-%d", i))
			if errs[i] != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	return int(f.won.Load()), int(f.done.Load()), errors.Join(errs...)
}

func (f *oldFleet) worker(ctx context.Context, id string) error {
	c := f.e.client(f.m.wrap)
	list := f.lister(c)
	dir := f.prefix + "active/"
	for f.won.Load() < int64(f.stopAt) {
		ids, err := list(ctx, dir)
		if err != nil {
			return err
		}
		if len(ids) == 0 {
			return nil
		}
		mrand.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
		for _, task := range ids {
			won, err := f.visit(ctx, c, id, dir+task, task)
			if err != nil {
				return err
			}
			if won {
				break
			}
		}
	}
	return nil
}

// visit handles one marker; won says this worker claimed and ran the task.
func (f *oldFleet) visit(ctx context.Context, c *s3.Client, worker, key, id string) (won bool, err error) {
	t, etag, err := f.read(ctx, c, id)
	switch {
	case s3x.NotFound(err):
		return false, nil
	case err != nil:
		return false, err
	case t.Terminal():
		_, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &f.e.bucket, Key: &key})
		return false, err
	case t.Status != s3task.StatusQueued:
		return false, nil
	}
	now := time.Now().UTC()
	t.Status, t.Attempt, t.WorkerID = s3task.StatusRunning, t.Attempt+1, worker
	t.LeaseExpiresAt = now.Add(s3task.DefaultLeaseDuration)
	etag, err = f.write(ctx, c, t, etag)
	if s3x.Lost(err) {
		_, _, err = f.read(ctx, c, id) // the re-read that settles a lost claim
		return false, err
	}
	if err != nil {
		return false, err
	}
	if n := f.won.Add(1); f.onClaim != nil {
		f.onClaim(id, time.Now(), n)
	}
	if f.work > 0 {
		if err := sleep(ctx, f.work); err != nil {
			return false, err
		}
	}
	t.Status, t.LeaseExpiresAt = s3task.StatusCompleted, time.Time{}
	if _, err := f.write(ctx, c, t, etag); err != nil {
		return false, err
	}
	_, err = c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &f.e.bucket, Key: &key})
	f.done.Add(1)
	if f.onComplete != nil {
		f.onComplete()
	}
	return true, err
}

func (f *oldFleet) read(ctx context.Context, c *s3.Client, id string) (*s3task.Task, string, error) {
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: &f.e.bucket, Key: aws.String(f.prefix + id + "/status.json")})
	if err != nil {
		return nil, "", err
	}
	defer out.Body.Close()
	var t s3task.Task
	if err := json.NewDecoder(out.Body).Decode(&t); err != nil {
		return nil, "", err
	}
	return &t, aws.ToString(out.ETag), nil
}

func (f *oldFleet) write(ctx context.Context, c *s3.Client, t *s3task.Task, etag string) (string, error) {
	t.UpdatedAt, t.Revision, t.Writes = time.Now().UTC(), randHex(8), t.Writes+1
	body, err := json.Marshal(t)
	if err != nil {
		return "", err
	}
	out, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: &f.e.bucket, Key: aws.String(f.prefix + t.ID + "/status.json"),
		Body: bytes.NewReader(body), ContentLength: aws.Int64(int64(len(body))), ContentType: aws.String("application/json"),
		IfMatch: aws.String(etag)})
	if err != nil {
		return "", err
	}
	return aws.ToString(out.ETag), nil
}

// lister returns a function that lists every key under a prefix, 1,000 per
// LIST, and returns them without the prefix (a task ID is a third of a
// marker's key: 100,000 of them in each of 16 workers add up). Against the in-process server it sends the LISTs as plain HTTP
// requests through the same counted transport and picks the keys out of the
// XML by hand: the SDK's XML decoding of a 1,000-key page costs more CPU than
// the server's answer, and the previous design at 100,000 tasks reads tens of
// thousands of pages. The requests are the same; only the client is lighter.
func (f *oldFleet) lister(c *s3.Client) func(ctx context.Context, prefix string) ([]string, error) {
	if f.e.srv == nil {
		return func(ctx context.Context, prefix string) ([]string, error) {
			var keys []string
			in := &s3.ListObjectsV2Input{Bucket: &f.e.bucket, Prefix: &prefix}
			for {
				out, err := c.ListObjectsV2(ctx, in)
				if err != nil {
					return nil, err
				}
				for _, o := range out.Contents {
					keys = append(keys, strings.TrimPrefix(aws.ToString(o.Key), prefix))
				}
				if !aws.ToBool(out.IsTruncated) || len(out.Contents) == 0 {
					return keys, nil
				}
				in.StartAfter = out.Contents[len(out.Contents)-1].Key
			}
		}
	}
	hc := f.e.httpClient(f.m.wrap)
	return func(ctx context.Context, prefix string) ([]string, error) {
		var keys []string
		after := ""
		for {
			q := url.Values{"list-type": {"2"}, "prefix": {prefix}, "max-keys": {"1000"}}
			if after != "" {
				q.Set("start-after", after)
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.e.endpoint+"/"+f.e.bucket+"?"+q.Encode(), nil)
			if err != nil {
				return nil, err
			}
			resp, err := hc.Do(req)
			if err != nil {
				return nil, err
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				return nil, err
			}
			if resp.StatusCode != http.StatusOK {
				return nil, fmt.Errorf("LIST %s: %s", prefix, resp.Status)
			}
			page := xmlKeys(body, prefix)
			keys = append(keys, page...)
			if len(page) == 0 || !bytes.Contains(body, []byte("<IsTruncated>true</IsTruncated>")) {
				return keys, nil
			}
			after = prefix + page[len(page)-1]
		}
	}
}

// xmlKeys returns the contents of the <Key> elements of a ListObjectsV2
// answer, without prefix. Task and marker keys hold no character XML
// escapes.
func xmlKeys(body []byte, prefix string) []string {
	var keys []string
	open, end := []byte("<Key>"+prefix), []byte("</Key>")
	for {
		i := bytes.Index(body, open)
		if i < 0 {
			return keys
		}
		body = body[i+len(open):]
		j := bytes.Index(body, end)
		if j < 0 {
			return keys
		}
		keys = append(keys, string(body[:j]))
		body = body[j+len(end):]
	}
}

// 7b: oldest first.

// waitStats compares each task's wait for a claim with the wait it would
// have had under a strict FIFO in the same run: the k-th earliest claim
// time given to the task due k-th.
type waitStats struct {
	design  string
	n       int
	work    time.Duration
	elapsed time.Duration
	claims  int     // claims won
	dups    int     // claims of a task claimed before
	lost    float64 // lost claims per claim

	actual, fifo                    []time.Duration // per task, in due order
	p50, p99, max, fp50, fp99, fmax time.Duration
	p99Ratio, maxTaskRatio          float64
	considered                      int // tasks whose FIFO wait is at least one handler duration
	worstRank                       int // the due rank (from 0) of the task with the largest ratio
}

// computeWaits fills in the statistics from each task's due and claim time.
func computeWaits(design string, due, claimed map[string]time.Time, work time.Duration) (*waitStats, error) {
	ids := make([]string, 0, len(due))
	for id := range due {
		if _, ok := claimed[id]; !ok {
			return nil, fmt.Errorf("task %s was never claimed", id)
		}
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool {
		if a, b := due[ids[i]], due[ids[j]]; !a.Equal(b) {
			return a.Before(b)
		}
		return ids[i] > ids[j] // inverted ULIDs: the greater was made earlier
	})
	claims := make([]time.Time, 0, len(ids))
	for _, id := range ids {
		claims = append(claims, claimed[id])
	}
	sort.Slice(claims, func(i, j int) bool { return claims[i].Before(claims[j]) })
	ws := &waitStats{design: design, n: len(ids), work: work}
	for k, id := range ids {
		a, f := claimed[id].Sub(due[id]), claims[k].Sub(due[id])
		ws.actual, ws.fifo = append(ws.actual, a), append(ws.fifo, f)
		if f >= work && f > 0 {
			ws.considered++
			if r := float64(a) / float64(f); r > ws.maxTaskRatio {
				ws.maxTaskRatio, ws.worstRank = r, k
			}
		}
	}
	ws.p50, ws.p99, ws.max = percentile(ws.actual, 50), percentile(ws.actual, 99), percentile(ws.actual, 100)
	ws.fp50, ws.fp99, ws.fmax = percentile(ws.fifo, 50), percentile(ws.fifo, 99), percentile(ws.fifo, 100)
	if ws.fp99 > 0 {
		ws.p99Ratio = float64(ws.p99) / float64(ws.fp99)
	}
	return ws, nil
}

// fleetOrder seeds cfg.fleet.queue queued tasks submitted evenly over the
// time the fleet needs to drain them (queue × work / workers) up to now,
// and lets the fleet drain them with a handler that sleeps work.
func fleetOrder(ctx context.Context, cfg *config, design string) (*waitStats, error) {
	fc := cfg.fleet
	tag := "new"
	if design == designOld {
		tag = "old"
	}
	e, err := openFleetEnv(cfg, "fleet-order-"+tag)
	if err != nil {
		return nil, err
	}
	defer e.close()
	prefix := e.prefix + "tasks/"
	spread := time.Duration(fc.queue) * max(fc.work, time.Millisecond) / time.Duration(fc.workers)
	now := time.Now()
	due, err := e.seedQueue(ctx, design, prefix, fc.queue, func(i int) time.Time {
		return now.Add(-spread + time.Duration(i)*spread/time.Duration(fc.queue))
	})
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	claimed := make(map[string]time.Time, fc.queue)
	dups := 0
	onClaim := func(id string, at time.Time, _ int64) {
		mu.Lock()
		if _, dup := claimed[id]; dup {
			dups++
		} else {
			claimed[id] = at
		}
		mu.Unlock()
	}
	m := newMeter()
	start := time.Now()
	var claims int
	if design == designOld {
		f := &oldFleet{e: e, prefix: prefix, workers: fc.workers, stopAt: fc.queue, work: fc.work, m: m, onClaim: onClaim}
		claims, _, err = f.run(ctx)
	} else {
		claims, _, err = newFleet(ctx, e, "tasks", fc.workers, fc.queue, fc.work, m, onClaim, nil)
	}
	if err != nil {
		return nil, err
	}
	elapsed := time.Since(start)
	mu.Lock()
	defer mu.Unlock()
	ws, err := computeWaits(design, due, claimed, fc.work)
	if err != nil {
		return nil, err
	}
	ws.elapsed, ws.claims, ws.dups = elapsed, claims, dups
	ws.lost = float64(m.snapshot().lostCAS) / float64(max(claims, 1))
	return ws, nil
}

// 7c: the reconcile bill of an idle fleet.

type fleetReconRow struct {
	design  string
	workers int
	window  time.Duration
	runs    int // reconcile runs that read records
	tasks   int // records read by them, as reported
	c       counts
	took    time.Duration // real time the runs took
}

func (r fleetReconRow) perInterval(n int) float64 {
	return float64(n) / reconcileIntervals
}

// fleetReconcile watches an idle fleet for four ReconcileIntervals over a
// bucket of finished tasks created over the last 12 hours, inside the
// default ReconcileWindow. New: the library's workers, where one holds the
// reconciler lease; they poll four times per ReconcileInterval, since a
// worker's turn at the lease comes between polls. Previous: every worker
// calls Store.Reconcile over the window once per interval, the first time
// at a random point of the first, four times in all, however long the runs
// take on this machine: the count is the bill, whatever the server's pace.
func fleetReconcile(ctx context.Context, cfg *config, design string) (fleetReconRow, error) {
	fc := cfg.fleet
	row := fleetReconRow{design: design, workers: fc.workers, window: reconcileIntervals * fc.reconcile}
	tag := "new"
	if design == designOld {
		tag = "old"
	}
	e, err := openFleetEnv(cfg, "fleet-reconcile-"+tag)
	if err != nil {
		return row, err
	}
	defer e.close()
	base, err := e.template(ctx)
	if err != nil {
		return row, err
	}
	prefix := e.prefix + "tasks/"
	now := time.Now()
	err = e.seed(ctx, fc.finished, func(i int) ([]seedObject, error) {
		at := now.Add(-time.Minute - time.Duration(i)*(12*time.Hour/time.Duration(fc.finished)))
		rec := make(map[string]any, len(base))
		for k, v := range base {
			rec[k] = v
		}
		rec["status"], rec["attempt_id"], rec["output_object_path"] = string(s3task.StatusCompleted), 1, "x"
		delete(rec, "due_at")
		id, body, err := cloneRecord(rec, prefix, i, at)
		return []seedObject{{prefix + id + "/status.json", body}}, err
	})
	if err != nil {
		return row, err
	}
	m := newMeter()
	var runs, tasks atomic.Int64
	start := time.Now()
	if design == designOld {
		var wg sync.WaitGroup
		errs := make([]error, fc.workers)
		for i := range fc.workers {
			s, err := e.store(e.client(m.wrap), "tasks", nil)
			if err != nil {
				return row, err
			}
			wg.Go(func() {
				next := start.Add(time.Duration(mrand.Int64N(int64(fc.reconcile))))
				for range reconcileIntervals {
					if errs[i] = sleep(ctx, time.Until(next)); errs[i] != nil {
						return
					}
					next = next.Add(fc.reconcile)
					rep, err := s.Reconcile(ctx, s3task.ReconcileOptions{Since: time.Now().Add(-s3task.DefaultReconcileWindow)})
					if err != nil {
						errs[i] = err
						return
					}
					runs.Add(1)
					tasks.Add(int64(rep.Tasks))
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return row, err
		}
	} else {
		var running []*runningWorker
		for i := range fc.workers {
			s, err := e.store(e.client(m.wrap), "tasks", nil)
			if err != nil {
				_ = stopAll(running)
				return row, err
			}
			w, err := s3task.NewWorker(s, s3task.HandlerFunc(func(context.Context, *s3task.Job) error { return nil }), &s3task.WorkerOptions{
				ID: fmt.Sprintf("idle-%d", i), ReconcileInterval: fc.reconcile, PollInterval: fc.reconcile / 4,
				Hooks: s3task.Hooks{OnReconcile: func(r *s3task.ReconcileReport) { runs.Add(1); tasks.Add(int64(r.Tasks)) }},
			})
			if err != nil {
				_ = stopAll(running)
				return row, err
			}
			running = append(running, startWorker(ctx, w))
		}
		err := sleep(ctx, row.window)
		if serr := stopAll(running); err == nil {
			err = serr
		}
		if err != nil {
			return row, err
		}
	}
	row.took = time.Since(start)
	row.c, row.runs, row.tasks = m.snapshot(), int(runs.Load()), int(tasks.Load())
	return row, nil
}

// 7d: pickup by a worker of the same process.

type fleetPickupRow struct {
	variant string
	poll    time.Duration
	pickups []time.Duration
	c       counts // the worker's requests from each Submit to its completion, summed
}

type producerKey struct{}

// splitMeter counts the requests made with a context marked by producerKey
// on p, the others on w: the producer and the worker of one Store.
func splitMeter(p, w *meter) wrapper {
	return func(next http.RoundTripper) http.RoundTripper {
		pw, ww := p.wrap(next), w.wrap(next)
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Context().Value(producerKey{}) != nil {
				return pw.RoundTrip(r)
			}
			return ww.RoundTrip(r)
		})
	}
}

// fleetPickup times Submit → OnClaim for one worker at the default
// PollInterval, on the producer's own Store (local: Submit wakes it at once)
// or on a Store of its own (it learns of the task from the wake object).
func fleetPickup(ctx context.Context, cfg *config, local bool) (fleetPickupRow, error) {
	row := fleetPickupRow{variant: "worker on the submitting Store (local wake)", poll: s3task.DefaultPollInterval}
	name := "fleet-pickup-local"
	if !local {
		row.variant, name = "worker on a Store of its own", "fleet-pickup-remote"
	}
	e, err := openFleetEnv(cfg, name)
	if err != nil {
		return row, err
	}
	defer e.close()
	pm, wm := newMeter(), newMeter()
	pctx := context.WithValue(ctx, producerKey{}, true)
	ps, err := e.store(e.client(splitMeter(pm, wm)), "tasks", nil)
	if err != nil {
		return row, err
	}
	ws := ps
	if !local {
		if ws, err = e.store(e.client(wm.wrap), "tasks", nil); err != nil {
			return row, err
		}
	}
	n := cfg.fleet.samples
	ids, err := prepareMany(pctx, ps, n+1, 8)
	if err != nil {
		return row, err
	}
	claims, completes := make(chan time.Time, 1), make(chan struct{}, 1)
	w, err := s3task.NewWorker(ws, s3task.HandlerFunc(func(context.Context, *s3task.Job) error { return nil }), &s3task.WorkerOptions{
		ID: "pickup-worker", ReconcileInterval: -1,
		Hooks: s3task.Hooks{
			OnClaim:    func(*s3task.Task) { offer(claims, time.Now()) },
			OnComplete: func(*s3task.Task) { offer(completes, struct{}{}) },
		},
	})
	if err != nil {
		return row, err
	}
	rw := startWorker(ctx, w)
	defer rw.stop()
	pickup := func(id string) (time.Duration, error) {
		start := time.Now()
		if _, err := ps.Submit(pctx, id); err != nil {
			return 0, err
		}
		at, err := awaitOne(ctx, claims, 3*s3task.DefaultPollInterval+5*time.Second)
		if err != nil {
			return 0, err
		}
		if _, err := awaitOne(ctx, completes, 30*time.Second); err != nil {
			return 0, err
		}
		return at.Sub(start), nil
	}
	if _, err := pickup(ids[0]); err != nil { // the wake object exists from here on
		return row, err
	}
	row.c = newCounts()
	for _, id := range ids[1:] {
		// Land each Submit at a random point of the worker's poll cycle;
		// a local wake does not depend on it, so it needs no long pause.
		pause := time.Duration(mrand.Int64N(int64(s3task.DefaultPollInterval)))
		if local {
			pause = 50*time.Millisecond + time.Duration(mrand.Int64N(int64(250*time.Millisecond)))
		}
		if err := sleep(ctx, pause); err != nil {
			return row, err
		}
		before := wm.snapshot()
		d, err := pickup(id)
		if err != nil {
			return row, err
		}
		row.pickups = append(row.pickups, d)
		row.c = row.c.plus(wm.snapshot().minus(before))
	}
	return row, nil
}

// awaitOne waits for a value on ch for up to limit.
func awaitOne[T any](ctx context.Context, ch <-chan T, limit time.Duration) (T, error) {
	var zero T
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case v := <-ch:
		return v, nil
	case <-t.C:
		return zero, fmt.Errorf("timed out after %s", limit)
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// 7e: delayed start.

type fleetDelayed struct {
	lead        time.Duration   // RunAt - the start of Create
	late        time.Duration   // claim - RunAt
	lists       []time.Duration // the worker's LISTs from Create to the claim, relative to RunAt
	listsBefore int             // LISTs before RunAt (to the millisecond, as the marker holds it)
	listsAfter  int             // LISTs at or after it, up to the claim
	c           counts          // the worker's requests from Create to the claim
}

// fleetDelayedStart creates, uploads and submits a task with RunAt set
// cfg.fleet.runAt ahead, watched by one idle worker on a Store of its own
// at the default PollInterval, and notes when the worker listed.
func fleetDelayedStart(ctx context.Context, cfg *config) (fleetDelayed, error) {
	var res fleetDelayed
	e, err := openFleetEnv(cfg, "fleet-delayed")
	if err != nil {
		return res, err
	}
	defer e.close()
	var mu sync.Mutex
	var listAt []time.Time
	stamp := func(next http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if s3test.Op(r) == "LIST" {
				mu.Lock()
				listAt = append(listAt, time.Now())
				mu.Unlock()
			}
			return next.RoundTrip(r)
		})
	}
	wm := newMeter()
	ws, err := e.store(e.client(stamp, wm.wrap), "tasks", nil)
	if err != nil {
		return res, err
	}
	ps, err := e.store(e.client(), "tasks", nil)
	if err != nil {
		return res, err
	}
	claims := make(chan time.Time, 1)
	w, err := s3task.NewWorker(ws, s3task.HandlerFunc(func(context.Context, *s3task.Job) error { return nil }), &s3task.WorkerOptions{
		ID: "delayed-worker", ReconcileInterval: -1,
		Hooks: s3task.Hooks{OnClaim: func(*s3task.Task) { offer(claims, time.Now()) }},
	})
	if err != nil {
		return res, err
	}
	rw := startWorker(ctx, w)
	defer rw.stop()
	// Let the worker make its first listing and settle into idle polling.
	if err := sleep(ctx, s3task.DefaultPollInterval/2+time.Duration(mrand.Int64N(int64(s3task.DefaultPollInterval)))); err != nil {
		return res, err
	}
	start := time.Now()
	before := wm.snapshot()
	runAt := start.Add(cfg.fleet.runAt)
	t, err := ps.Create(ctx, s3task.CreateParams{Name: "delayed", Type: "bench", RunAt: runAt})
	if err != nil {
		return res, err
	}
	if err := ps.UploadInput(ctx, t.ID, strings.NewReader("id,name\n1,alpha\n")); err != nil {
		return res, err
	}
	if _, err := ps.Submit(ctx, t.ID); err != nil {
		return res, err
	}
	at, err := awaitOne(ctx, claims, cfg.fleet.runAt+3*s3task.DefaultPollInterval+5*time.Second)
	if err != nil {
		return res, err
	}
	res.c = wm.snapshot().minus(before)
	res.lead, res.late = cfg.fleet.runAt, at.Sub(runAt)
	// The marker, and the worker's wait, hold RunAt to the millisecond.
	due := runAt.Truncate(time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	for _, l := range listAt {
		if l.Before(start) || l.After(at) {
			continue
		}
		res.lists = append(res.lists, l.Sub(runAt))
		if l.Before(due) {
			res.listsBefore++
		} else {
			res.listsAfter++
		}
	}
	return res, nil
}

// 7f: LISTs per submitted task with idle workers.

type fleetIdleRow struct {
	workers int
	poll    time.Duration
	samples int
	c       counts // the workers' requests over the samples
	pickups []time.Duration
}

func (r fleetIdleRow) perTask(n int) float64 { return float64(n) / float64(max(r.samples, 1)) }

// fleetIdleLists submits tasks one at a time to n idle workers (each on a
// Store of its own, a producer on another), each Submit at a random point
// of the poll cycle and only once every worker has had a PollInterval to
// notice the previous one, and counts the workers' LISTs.
func fleetIdleLists(ctx context.Context, cfg *config, n int) (fleetIdleRow, error) {
	fc := cfg.fleet
	row := fleetIdleRow{workers: n, poll: fc.idlePoll, samples: fc.idleSamples}
	e, err := openFleetEnv(cfg, fmt.Sprintf("fleet-idle-%d", n))
	if err != nil {
		return row, err
	}
	defer e.close()
	ps, err := e.store(e.client(), "tasks", nil)
	if err != nil {
		return row, err
	}
	ids, err := prepareMany(ctx, ps, row.samples+1, 8)
	if err != nil {
		return row, err
	}
	wm := newMeter()
	claims, completes := make(chan time.Time, n), make(chan struct{}, n)
	var running []*runningWorker
	defer func() { _ = stopAll(running) }()
	for i := range n {
		ws, err := e.store(e.client(wm.wrap), "tasks", nil)
		if err != nil {
			return row, err
		}
		w, err := s3task.NewWorker(ws, s3task.HandlerFunc(func(context.Context, *s3task.Job) error { return nil }), &s3task.WorkerOptions{
			ID: fmt.Sprintf("idle-%d", i), PollInterval: fc.idlePoll, ReconcileInterval: -1,
			Hooks: s3task.Hooks{
				OnClaim:    func(*s3task.Task) { offer(claims, time.Now()) },
				OnComplete: func(*s3task.Task) { offer(completes, struct{}{}) },
			},
		})
		if err != nil {
			return row, err
		}
		running = append(running, startWorker(ctx, w))
	}
	// Every worker has noticed a Submit within a PollInterval of it, and
	// listed, given a margin for the round trips.
	settle := fc.idlePoll + 250*time.Millisecond
	pickup := func(id string) (time.Duration, error) {
		start := time.Now()
		if _, err := ps.Submit(ctx, id); err != nil {
			return 0, err
		}
		at, err := awaitOne(ctx, claims, 3*fc.idlePoll+5*time.Second)
		if err != nil {
			return 0, err
		}
		if _, err := awaitOne(ctx, completes, 30*time.Second); err != nil {
			return 0, err
		}
		return at.Sub(start), sleep(ctx, time.Until(start.Add(settle)))
	}
	if _, err := pickup(ids[0]); err != nil { // the wake object exists from here on
		return row, err
	}
	before := wm.snapshot()
	for _, id := range ids[1:] {
		if err := sleep(ctx, time.Duration(mrand.Int64N(int64(fc.idlePoll)))); err != nil {
			return row, err
		}
		d, err := pickup(id)
		if err != nil {
			return row, err
		}
		row.pickups = append(row.pickups, d)
	}
	row.c = wm.snapshot().minus(before)
	return row, nil
}

// Tables.

func (r *fleetResult) tables() []*table {
	fc := r.cfg.fleet
	a := newTable(fmt.Sprintf("Scenario 7a: polling cost against the backlog, %d workers (Concurrency 1, zero-work handler), per claim", fc.workers),
		"backlog", "design", "claims", "LIST", "record GET", "record GET per completed task", "marker DELETE", "PUT", "lost claims", "all requests", "run time")
	for i, row := range r.drain {
		a.add(row.backlog, row.design, row.claims, fmt.Sprintf("%.3f", row.lists()), row.recordGETs(), row.recordGETsPerDone(), row.markerDELETEs(), row.puts(), fmt.Sprintf("%.3f", row.lost()), row.total(), row.elapsed)
		if i%2 == 1 && r.drain[i-1].backlog == row.backlog {
			n := r.drain[i-1]
			ratio := func(a, b float64) string {
				if b == 0 {
					return "n/a"
				}
				return fmt.Sprintf("%.3f×", a/b)
			}
			a.add(row.backlog, "**new / previous**", "", ratio(n.lists(), row.lists()), ratio(n.recordGETs(), row.recordGETs()), ratio(n.recordGETsPerDone(), row.recordGETsPerDone()),
				ratio(n.markerDELETEs(), row.markerDELETEs()), ratio(n.puts(), row.puts()), ratio(n.lost(), row.lost()), ratio(n.total(), row.total()), "")
		}
	}
	a.note("Against %s. Each run seeds its backlog of queued tasks (clones of one task made by Store.Create, UploadInput and Submit, with IDs from NewIDAt and submit times spread evenly over the past hour) straight into the server's backend, then lets %d workers, each with its own S3 client, claim. New design: counts are the workers' requests from the %d-th claim won (OnClaim), when every worker has made its first LIST, to %d claims later, where the workers are stopped, divided by those claims; run time is that window (a worker lists again after each claim, so a whole run would add one LIST per worker that no claim follows). Workers poll every %s (wake object GETs, never LISTs, while nothing changes) and do not reconcile.", r.where, fc.workers, fc.workers, fc.claims, fleetPoll)
	a.note("Previous: an emulation of the design before due-first markers, on its own server, with markers active/<id>: %d goroutines, each listing every page of the marker folder (1,000 keys a page), shuffling, and visiting markers in that order: GET the record, claim a queued one with a PUT If-Match (a lost one costs a GET more, the re-read that settles it, then the next marker), on a win PUT the completed record, DELETE the marker, and list again; the marker of a finished task it meets is deleted, as the previous worker settled it. Each listing it starts ends in a claim, so it is counted over its whole run; it starts no listing after %d claims, or fewer where that many full listings would read more than %s pages (-fleet-old-pages; at least one claim per worker), to keep the run short: its LISTs per claim are the pages of one listing however many claims are made. It lists through plain HTTP requests on the same counted transport, picking the keys out of the XML by hand (the SDK's decoding of the tens of thousands of pages would dominate the run), so its run times are not comparable with the new design's: compare the counts.", fc.workers, fc.claims, num(float64(fc.oldPages)))
	a.note("New: a claim PUTs the marker at the lease's end, PUTs the record and DELETEs the queued marker; the completion PUTs the record and DELETEs the lease's marker. So a task costs 2 marker DELETEs and 3 PUTs by construction, against 1 and 2 before; a lost claim adds the PUT and DELETE of the marker it wrote first, and a GET (the re-read). The GETs and DELETEs beyond those are visits to markers that other workers claimed after this worker's LIST: all %d workers read the same head page and pick among its first 16 markers, so part of what a worker listed has gone by the time it gets there; each such visit costs a record GET and a DELETE of the queued marker it listed (already deleted by the claimer), and when the task has completed meanwhile, as zero-work tasks soon do, a second DELETE, of the lease's marker (deleted too). The previous design spread its workers over the whole folder at random, so they rarely met.", fc.workers)
	var whole []string
	for _, row := range r.drain {
		whole = append(whole, fmt.Sprintf("%s %s: %.3f", num(float64(row.backlog)), strings.SplitN(row.design, " (", 2)[0], float64(row.whole.kinds["LIST"])/float64(max(row.wholeClaims, 1))))
	}
	a.note("LISTs per claim over the whole run instead, start and stop included (each worker's first LIST, and the one each makes after its last claim): %s.", strings.Join(whole, "; "))
	if len(r.drain) > 0 {
		last := r.drain[len(r.drain)-1]
		for _, row := range r.drain {
			if row.backlog == last.backlog && row.design == designNew {
				a.note("Requests by label, new design at %s tasks, per claim: %s.", num(float64(row.backlog)), labelsPerTask(row.c, row.claims))
			}
		}
		a.note("Previous design at %s tasks, per claim: %s.", num(float64(last.backlog)), labelsPerTask(last.c, last.claims))
	}

	b := newTable(fmt.Sprintf("Scenario 7b: oldest first, %d workers draining %d queued tasks, handler %s", fc.workers, fc.queue, fc.work),
		"design", "wait p50", "wait p99", "wait max", "FIFO wait p50", "FIFO wait p99", "FIFO wait max", "p99 / FIFO p99", "max per-task wait / FIFO wait", "tasks in that max", "lost claims per claim", "drain time")
	for _, ws := range r.order {
		b.add(ws.design, ws.p50, ws.p99, ws.max, ws.fp50, ws.fp99, ws.fmax, fmt.Sprintf("%.3f", ws.p99Ratio), fmt.Sprintf("%.2f", ws.maxTaskRatio), ws.considered, fmt.Sprintf("%.3f", ws.lost), ws.elapsed)
	}
	for _, ws := range r.order {
		if ws.considered > 0 {
			k := ws.worstRank
			b.note("%s: the largest per-task ratio is that of task no. %d in due order: wait %s against a FIFO wait of %s.", ws.design, k+1, dur(ws.actual[k]), dur(ws.fifo[k]))
		}
	}
	b.note("Wait: OnClaim's time less the task's due time (its submit). FIFO wait: the claim times of the same run sorted and handed out in due order, the k-th earliest claim to the task due k-th, so it is what a strict FIFO queue served at the same pace would give each task. The per-task ratio is over the tasks whose FIFO wait is at least one handler duration. Goal for the new design: p99 ratio ≤ 1.25, per-task ratio ≤ 2.")
	b.note("The tasks were submitted evenly over %s before the workers started, the time the fleet needs to drain them (tasks × handler / workers), so a task's age and its queueing delay are of the same order and the order of service shows in the waits. Same seeding and workers as 7a (previous design emulated likewise), each design on its own server.", dur(time.Duration(fc.queue)*max(fc.work, time.Millisecond)/time.Duration(fc.workers)))
	b.note("In process, draining is bound by CPU, not by the handler: each claim of the new design decodes a LIST of up to 1,000 markers with the SDK and makes about 14 requests, where the emulated previous design decodes its LISTs by hand. So the drain here is far slower than tasks × handler / workers, the waits are mostly that drain, and p99 ratios come out near 1 for both designs; the per-task ratio is what tells the order of service apart. Drain times are not comparable between the designs.")

	c := newTable(fmt.Sprintf("Scenario 7c: the reconcile bill of %d idle workers, ReconcileInterval %s, over %d intervals, %d finished tasks", fc.workers, span(fc.reconcile), reconcileIntervals, fc.finished),
		"design", "reconcile runs", "records read per interval (GET record)", "lease GET per interval", "LIST per interval", "PUT per interval", "all requests per interval", "record GETs, new / previous")
	var oldGets float64
	for _, row := range r.recon {
		if row.design == designOld {
			oldGets = row.perInterval(labelCount(row.c, "GET record"))
		}
	}
	for _, row := range r.recon {
		gets := row.perInterval(labelCount(row.c, "GET record"))
		ratio := "1"
		if row.design == designNew && oldGets > 0 {
			ratio = fmt.Sprintf("%.4f (1/%.0f)", gets/oldGets, oldGets/max(gets, 1e-9))
		}
		design := "new (one reconciler per fleet)"
		if row.design == designOld {
			design = "previous (every worker reconciles)"
		}
		c.add(design, row.runs, gets, row.perInterval(labelCount(row.c, "GET other")), row.perInterval(row.c.kinds["LIST"]), row.perInterval(row.c.kinds["PUT"]), row.perInterval(row.c.total()), ratio)
	}
	c.note("Finished tasks created over the last 12 hours, inside the default ReconcileWindow (24h), no markers. New: the library's workers, idle, polling every ReconcileInterval/4 (a worker's turn at the lease comes between two polls); each asks for the reconciler lease (_reconciler: one GET, a PUT to take or renew it) once per interval, and only the holder reconciles: at its first turn over the whole window, then over the tasks created in the last two intervals (the whole window again every 24 turns). Previous: %d goroutines, each calling Store.Reconcile over the whole window once per interval, the first time at a random point of the first, as every worker did before.", fc.workers)
	for _, row := range r.recon {
		if row.design == designOld {
			c.note("Requests are all the fleet's, divided by %d intervals: the new fleet's over %s of real time (idle wake GETs and the LIST each worker makes at its start included), the previous fleet's %d runs per goroutine, which took %s here. Reconcile runs are the holder's OnReconcile calls, or the goroutines' Reconcile calls.",
				reconcileIntervals, span(reconcileIntervals*fc.reconcile), reconcileIntervals, dur(row.took))
		}
	}
	for _, row := range r.recon {
		c.note("%s, by label over the window: %s.", row.design, labelSummary(row.c))
	}

	d := newTable("Scenario 7d: pickup by one idle worker at the default PollInterval (2s), Submit's start to OnClaim",
		"worker", "samples", "p50", "max", "LIST per pickup", "GET per pickup", "PUT per pickup", "DELETE per pickup", "all requests per pickup")
	for _, row := range r.pickup {
		per := perUnit(row.c.kinds, len(row.pickups))
		d.add(row.variant, len(row.pickups), percentile(row.pickups, 50), percentile(row.pickups, 100), per["LIST"], per["GET"], per["PUT"], per["DELETE"], sumValues(per))
	}
	d.note("7d, 7e and 7f run at the same time, each on a server of its own: they mostly sleep through poll cycles. The worker's requests from each Submit's start to the task's completion (not the producer's). Local: the producer and the worker share one Store, so Submit kicks the worker as soon as its wake PUT is answered. Own Store: the worker notices the wake object's new ETag at its next check, at most a PollInterval later; each Submit lands at a random point of that cycle.")
	for _, row := range r.pickup {
		d.note("%s, by label: %s.", row.variant, labelsPerTask(row.c, len(row.pickups)))
	}

	e := newTable("Scenario 7e: delayed start, CreateParams.RunAt = now + "+span(r.delayed.lead),
		"claim − RunAt", "worker LISTs between Submit and RunAt", "worker LISTs from RunAt to the claim", "LIST times relative to RunAt", "goal")
	var at []string
	for _, l := range r.delayed.lists {
		at = append(at, fmt.Sprintf("%+.2fs", l.Seconds()))
	}
	e.add(r.delayed.late, r.delayed.listsBefore, r.delayed.listsAfter, strings.Join(at, ", "), "1 LIST in all, at or after RunAt")
	e.note("One idle worker on a Store of its own at the default PollInterval; the producer on another. Counted from Create's start to the claim: %s.", labelSummary(r.delayed.c))
	e.note("Submit announces the task's marker in the wake object; the worker reads RunAt from the marker's name (its key starts with it), lists nothing then, and sleeps until RunAt instead of polling; the LIST at RunAt claims the task. RunAt counts to the millisecond here, as the marker's key holds it: the worker's wait ends at that millisecond.")

	f := newTable("Scenario 7f: LISTs per submitted task with idle workers",
		"idle workers", "PollInterval", "submits", "LIST per task", "wake GET per task", "all worker requests per task", "pickup p50", "pickup max")
	for _, row := range r.idle {
		f.add(row.workers, span(row.poll), row.samples, row.perTask(row.c.kinds["LIST"]), row.perTask(labelCount(row.c, "GET wake")), row.perTask(row.c.total()), percentile(row.pickups, 50), percentile(row.pickups, 100))
	}
	f.note("Each worker on a Store of its own, the producer on another; each Submit lands at a random point of the poll cycle, once every worker had a PollInterval (and 250ms) to notice the one before. Counted from the first measured Submit to a PollInterval after the last. Every idle worker that sees the wake object change lists once, so a Submit costs about one LIST per idle worker; this run documents today's cost (nothing changed here).")
	if r.cfg.small {
		f.note("At -small the PollInterval is %s, so the pickup times are for that interval.", span(fc.idlePoll))
	}
	if len(r.svgs) > 0 {
		f.note("Charts: %s.", strings.Join(r.svgs, ", "))
	}
	g := newTable("Scenario 7: goals of the new design", "goal", "met")
	lines, met := r.fleetGoals()
	for i, l := range lines {
		g.add(l, map[bool]string{true: "yes", false: "**no**"}[met[i]])
	}
	return []*table{a, b, c, d, e, f, g}
}

// Charts.

// listsChart draws LISTs per claim against the backlog, both designs.
func (r *fleetResult) listsChart() *lineChart {
	c := &lineChart{
		title:  fmt.Sprintf("LISTs per claim, %d workers, against the backlog", r.cfg.fleet.workers),
		xLabel: "queued tasks (backlog)", yLabel: "LIST requests per claim",
		logX: true, logY: true,
	}
	for i, design := range []string{designNew, designOld} {
		s := chartSeries{name: strings.SplitN(design, " (", 2)[0] + " design", color: chartPalette[i], line: true, dots: true}
		for _, row := range r.drain {
			if row.design == design {
				s.points = append(s.points, chartPoint{float64(row.backlog), row.lists()})
			}
		}
		c.series = append(c.series, s)
	}
	return c
}

// waitChart draws each task's wait against its FIFO wait, both designs, with
// the diagonal where they are equal.
func (r *fleetResult) waitChart() *lineChart {
	c := &lineChart{
		title:  fmt.Sprintf("Wait for a claim against a strict FIFO's, %d tasks, %d workers", r.cfg.fleet.queue, r.cfg.fleet.workers),
		xLabel: "FIFO wait (s)", yLabel: "actual wait (s)",
	}
	hi := 0.0
	for i, ws := range r.order {
		s := chartSeries{name: strings.SplitN(ws.design, " (", 2)[0] + " design", color: chartPalette[i], dots: true}
		for k := range ws.actual {
			x, y := ws.fifo[k].Seconds(), ws.actual[k].Seconds()
			hi = max(hi, x, y)
			s.points = append(s.points, chartPoint{x, y})
		}
		c.series = append(c.series, s)
	}
	c.series = append(c.series, chartSeries{name: "actual = FIFO", color: "#777777", line: true, dashed: true, points: []chartPoint{{0, 0}, {hi, hi}}})
	return c
}

// fleetGoals checks the goals of the new design in a result; it returns
// one line per goal with the measured value, and whether it was met.
func (r *fleetResult) fleetGoals() (lines []string, met []bool) {
	check := func(ok bool, format string, args ...any) {
		lines, met = append(lines, fmt.Sprintf(format, args...)), append(met, ok)
	}
	for _, row := range r.drain {
		if row.design != designNew {
			continue
		}
		check(row.lists() <= 1.1, "backlog %d: %.3f LISTs per claim (goal ≤ 1.1)", row.backlog, row.lists())
		check(row.recordGETsPerDone() <= 1.3, "backlog %d: %.3f record GETs per completed task (goal ≤ 1.3)", row.backlog, row.recordGETsPerDone())
		check(row.markerDELETEs() <= 1.1, "backlog %d: %.3f marker DELETEs per claim (goal ≤ 1.1)", row.backlog, row.markerDELETEs())
	}
	for _, ws := range r.order {
		if ws.design == designNew {
			check(ws.p99Ratio <= 1.25, "oldest first: p99 wait / FIFO p99 = %.3f (goal ≤ 1.25)", ws.p99Ratio)
			check(ws.maxTaskRatio <= 2, "oldest first: max per-task wait / FIFO wait = %.2f (goal ≤ 2)", ws.maxTaskRatio)
		}
	}
	if len(r.recon) == 2 {
		n, o := labelCount(r.recon[0].c, "GET record"), labelCount(r.recon[1].c, "GET record")
		check(n*16 <= o*5/4, "reconcile: %d record GETs against %d before, %.4f (goal about 1/16 = 0.0625)", n, o, float64(n)/float64(max(o, 1)))
	}
	d := r.delayed
	check(d.listsBefore == 0 && d.listsAfter == 1, "delayed start: %d LISTs before RunAt, %d from RunAt to the claim (goal: 0 and 1)", d.listsBefore, d.listsAfter)
	return lines, met
}
