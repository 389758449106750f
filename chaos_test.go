package s3task_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/md5"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/conformance"
	"github.com/s3task/s3task/internal/faults"
	"github.com/s3task/s3task/internal/s3test"
	"github.com/s3task/s3task/s3tasktest"
)

// The chaos test runs workers and operators through injected S3 and network
// faults (500s, 503 SlowDowns, resets before a request is sent, responses
// lost after S3 applied the request, added latency), and now and then cuts
// a worker off from S3 altogether, as a frozen machine, until its leases
// expire and others take its tasks over. Then it stops the faults, lets the
// workers finish, and checks what the library promises, from the bucket's
// final state and from logs of everything that ran:
//
//   - every task ends terminal, none is lost;
//   - a completed task's output is its final attempt's, written by it;
//   - no (task, attempt) runs twice, and a task is never completed twice;
//   - the record's history is one compare-and-set chain of legal steps: no
//     two writes ever won on one ETag, nothing follows completed or
//     abandoned, attempt_id never passes max_attempts;
//   - a lease is only taken over once it has expired by the server's clock,
//     and a handler still running when its task was taken over achieves
//     nothing: its attempt records no outcome;
//   - a task an operator cancelled stays abandoned and is never completed;
//   - once every task has ended, no marker is left.
//
// The record's history comes from a ledger on every client, inside the
// fault injector, that keeps each record write S3 accepted (body, If-Match,
// new ETag, the server's Date), including those whose answer the injector
// then threw away.
//
// Markers are an index that faults can leave out of step, and the library
// repairs them lazily, so the marker check is made only when it is sound:
// after the faults stop and every task has ended, the server's clock moves
// past every lease (or real time passes, where it cannot move), so every
// marker left is due, and workers keep polling: each poll visits the due
// markers and drops those of ended tasks. A marker still there after a
// bounded wait is a violation. A pending task without a
// marker would stall the drain; the drain looks for such tasks, reports them
// and restores their markers with Store.Reconcile, as the workers' periodic
// reconcile would (an hour apart by default).
//
// S3TASK_CHAOS_SEED sets the seed (the default is fixed, so a run can be
// repeated; the scheduler still interleaves goroutines its own way).

// chaosConfig sizes one chaos run.
type chaosConfig struct {
	rate        float64 // per-request fault probability
	tasks       int
	workers     int
	concurrency int
	operators   int
	maxCancels  int           // operators cancel at most this many tasks
	partitions  int           // workers cut off from S3 until their leases are taken over
	heartbeat   time.Duration // 0: the target's
	inject      time.Duration // longest injection phase once every task is submitted
	seed        uint64
}

func TestChaos(t *testing.T) {
	t.Parallel()
	seed := uint64(20261130)
	if s := os.Getenv("S3TASK_CHAOS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("S3TASK_CHAOS_SEED=%q: %v", s, err)
		}
		seed = v
	}
	rates := []float64{0.01, 0.05, 0.20}
	t.Run("gofakes3", func(t *testing.T) {
		t.Parallel()
		for i, rate := range rates {
			t.Run(fmt.Sprintf("faults=%g%%", rate*100), func(t *testing.T) {
				t.Parallel()
				runChaos(t, conformance.Fake(), chaosConfig{
					rate: rate, tasks: 150, workers: 6, concurrency: 3, operators: 2, maxCancels: 15,
					partitions: 3, heartbeat: 200 * time.Millisecond,
					inject: 12 * time.Second, seed: seed + uint64(i),
				})
			})
		}
	})
	t.Run("versitygw", func(t *testing.T) {
		t.Parallel()
		rc := s3test.RemoteT(t)
		for i, rate := range rates {
			t.Run(fmt.Sprintf("faults=%g%%", rate*100), func(t *testing.T) {
				t.Parallel()
				runChaos(t, conformance.Remote("versitygw", rc), chaosConfig{
					rate: rate, tasks: 40, workers: 3, concurrency: 2, operators: 1, maxCancels: 4, partitions: 1,
					inject: 15 * time.Second, seed: seed + 100 + uint64(i),
				})
			})
		}
	})
}

// chaosExec is one handler run, as the handler saw it.
type chaosExec struct {
	task        string
	attempt     int
	maxAttempts int
	worker      string
	start, end  time.Time
	err         error // what the handler returned
	canceled    bool  // its context was done when it returned
	cause       error // context.Cause then
}

// chaosHook is one hook call.
type chaosHook struct {
	kind    string // claim, complete, fail, lost, release
	worker  string
	task    string
	attempt int // 0 for lost: the hook does not say
	final   bool
	cause   error
	at      time.Time
}

// chaosOp is one operator call.
type chaosOp struct {
	op     string // cancel, retry
	task   string
	status s3task.Status // returned, when err is nil
	err    error
	start  time.Time
	end    time.Time
}

// chaosWrite is one record write S3 accepted, seen by a ledger.
type chaosWrite struct {
	rec         s3task.Task
	by          string // the client: a worker ID, operator-N or producer-N
	ifMatch     string
	ifNoneMatch string
	etag        string
	date        time.Time // the server's Date header (one-second resolution)
	// uncertain: the request failed below the fault injector (a timeout,
	// say), so S3 may or may not have applied it. Its ETag is then taken to
	// be the MD5 of the body, as both test servers compute it, and it joins
	// the history only if a later write or the stored record shows it was
	// applied.
	uncertain bool
}

// chaosLog collects everything a run records. It is safe for concurrent use.
type chaosLog struct {
	mu     sync.Mutex
	execs  []*chaosExec
	hooks  []chaosHook
	ops    []chaosOp
	writes []*chaosWrite
	bad    []string // ledger problems
}

func (l *chaosLog) add(f func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f()
}

// ledger returns a transport wrapper that records the record writes S3
// accepts through this client. Place it inside the fault injector.
func (l *chaosLog) ledger(by string) func(http.RoundTripper) http.RoundTripper {
	return func(next http.RoundTripper) http.RoundTripper {
		return s3tasktest.RoundTripFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method != http.MethodPut || !strings.HasSuffix(req.URL.Path, "/status.json") || req.Body == nil {
				return next.RoundTrip(req)
			}
			body, err := io.ReadAll(req.Body)
			req.Body.Close()
			if err != nil {
				return nil, err
			}
			req = req.Clone(req.Context())
			req.Body = io.NopCloser(bytes.NewReader(body))
			resp, err := next.RoundTrip(req)
			if err == nil && resp.StatusCode != http.StatusOK {
				return resp, err
			}
			w := &chaosWrite{
				by:          by,
				ifMatch:     req.Header.Get("If-Match"),
				ifNoneMatch: req.Header.Get("If-None-Match"),
			}
			jerr := json.Unmarshal(body, &w.rec)
			if err != nil {
				w.uncertain = true
				w.etag = fmt.Sprintf(`"%x"`, md5.Sum(body))
				if jerr == nil {
					l.add(func() { l.writes = append(l.writes, w) })
				}
				return resp, err
			}
			w.etag = resp.Header.Get("ETag")
			date, derr := http.ParseTime(resp.Header.Get("Date"))
			l.add(func() {
				switch {
				case derr != nil || jerr != nil || w.etag == "":
					l.bad = append(l.bad, fmt.Sprintf("ledger: write by %s to %s: date %v, decode %v, etag %q", by, req.URL.Path, derr, jerr, w.etag))
				default:
					w.date = date
					l.writes = append(l.writes, w)
				}
			})
			return resp, nil
		})
	}
}

// chaosRun is one run's state.
type chaosRun struct {
	t         *testing.T
	cfg       chaosConfig
	tg        *conformance.Target
	log       *chaosLog
	raw       s3test.Objects // fault-free: for looking at objects
	admin     *s3task.Store  // fault-free: for reading records
	injectors []*faults.Injector
	ids       []string // submitted tasks, guarded by idsMu
	idsMu     sync.Mutex
	opts      func(id string) *s3task.WorkerOptions
	started   time.Time
}

func (r *chaosRun) storeOptions() *s3task.StoreOptions {
	return &s3task.StoreOptions{InputExt: ".csv", OutputExt: ".txt", MaxAttempts: 4, Logger: conformance.Logger()}
}

// newStore returns a store on a client of its own whose record writes go to
// the ledger as by, with faults injected outside the ledger unless inj is
// nil, and more wraps outside those.
func (r *chaosRun) newStore(by string, inj *faults.Injector, more ...func(http.RoundTripper) http.RoundTripper) *s3task.Store {
	r.t.Helper()
	wraps := []func(http.RoundTripper) http.RoundTripper{r.log.ledger(by)}
	if inj != nil {
		wraps = append(wraps, inj.Wrap)
	}
	wraps = append(wraps, more...)
	st, err := s3task.NewStore(r.tg.Client(wraps...), r.tg.Bucket, r.storeOptions())
	if err != nil {
		r.t.Fatal(err)
	}
	return st
}

func (r *chaosRun) newInjector(n uint64) *faults.Injector {
	r.t.Helper()
	rates := faults.Uniform(r.cfg.rate)
	rates.MaxLatency = 3 * time.Millisecond
	inj, err := faults.New(r.cfg.seed*1000+n, rates)
	if err != nil {
		r.t.Fatal(err)
	}
	r.injectors = append(r.injectors, inj)
	return inj
}

// chaosOutput is what attempt n of task id writes as its output, run by
// worker, here and in internal/cmd/crashworker.
func chaosOutput(id string, n int, worker string) string {
	return fmt.Sprintf("task=%s attempt=%d worker=%s\n", id, n, worker)
}

// chaosCheckOutput says what is wrong with the output of a completed task,
// "" if nothing: it must be at the key of the task's final attempt and be
// what that attempt's handler wrote.
func chaosCheckOutput(ctx context.Context, st *s3task.Store, raw s3test.Objects, task *s3task.Task) string {
	want, _ := st.OutputKey(task.ID, task.Attempt)
	if task.OutputPath != want {
		return fmt.Sprintf("completed attempt %d with output_object_path %q, want %q", task.Attempt, task.OutputPath, want)
	}
	body, _, err := raw.Get(ctx, want)
	if err != nil {
		return fmt.Sprintf("completed attempt %d, but its output %s: %v", task.Attempt, want, err)
	}
	if w := chaosOutput(task.ID, task.Attempt, task.WorkerID); string(body) != w {
		return fmt.Sprintf("completed attempt %d, but its output says %q, want %q", task.Attempt, body, w)
	}
	return ""
}

// chaosSubmit creates a task named name with its input, which the
// handlers check, and submits it. It returns the task's ID once created,
// with the error of what failed after.
func chaosSubmit(ctx context.Context, st *s3task.Store, name string) (string, error) {
	task, err := st.Create(ctx, s3task.CreateParams{Name: name})
	if err != nil {
		return "", err
	}
	err = st.UploadInput(ctx, task.ID, strings.NewReader("input of "+task.ID))
	if err == nil {
		_, err = st.Submit(ctx, task.ID)
	}
	return task.ID, err
}

// fate decides, the same way every time for one seed, what an attempt
// does: how long it works and whether it fails.
func (r *chaosRun) fate(id string, attempt int) (work time.Duration, fail, permanent bool) {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d", id, attempt)
	rng := rand.New(rand.NewPCG(h.Sum64(), r.cfg.seed))
	work = time.Duration(5+rng.IntN(35)) * time.Millisecond
	if rng.IntN(100) < 15 {
		work = time.Duration(300+rng.IntN(400)) * time.Millisecond // a long one
	}
	x := rng.Float64()
	return work, x < 0.12, x < 0.03
}

// handler returns the handler of one worker: it logs its run, works for a
// while unless cancelled, reads its input, writes its output, and fails as
// its fate says.
func (r *chaosRun) handler(worker string) s3task.Handler {
	return s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) (err error) {
		e := &chaosExec{task: job.Task.ID, attempt: job.Task.Attempt, maxAttempts: job.Task.MaxAttempts, worker: worker, start: time.Now()}
		defer func() {
			e.end = time.Now()
			e.err = err
			e.canceled = ctx.Err() != nil
			e.cause = context.Cause(ctx)
			r.log.add(func() { r.log.execs = append(r.log.execs, e) })
		}()
		work, fail, permanent := r.fate(job.Task.ID, job.Task.Attempt)
		timer := time.NewTimer(work)
		defer timer.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
		}
		in, err := job.OpenInput(ctx)
		if err != nil {
			return err
		}
		data, err := io.ReadAll(in)
		in.Close()
		if err != nil {
			return err
		}
		if string(data) != "input of "+job.Task.ID {
			return s3task.Permanent(fmt.Errorf("input of %s holds %q", job.Task.ID, data))
		}
		switch {
		case permanent:
			return s3task.Permanent(errors.New("chaos: permanent failure"))
		case fail:
			return errors.New("chaos: transient failure")
		}
		return job.WriteOutput(ctx, strings.NewReader(chaosOutput(job.Task.ID, job.Task.Attempt, worker)))
	})
}

func (r *chaosRun) hooks(worker string) s3task.Hooks {
	rec := func(h chaosHook) {
		h.worker, h.at = worker, time.Now()
		r.log.add(func() { r.log.hooks = append(r.log.hooks, h) })
	}
	return s3task.Hooks{
		OnClaim:    func(t *s3task.Task) { rec(chaosHook{kind: "claim", task: t.ID, attempt: t.Attempt}) },
		OnComplete: func(t *s3task.Task) { rec(chaosHook{kind: "complete", task: t.ID, attempt: t.Attempt}) },
		OnFail: func(t *s3task.Task, _ error) {
			rec(chaosHook{kind: "fail", task: t.ID, attempt: t.Attempt, final: t.Terminal()})
		},
		OnLeaseLost: func(id string, _ *s3task.Task, cause error) { rec(chaosHook{kind: "lost", task: id, cause: cause}) },
		OnRelease:   func(t *s3task.Task) { rec(chaosHook{kind: "release", task: t.ID, attempt: t.Attempt}) },
	}
}

func runChaos(t *testing.T, b conformance.Backend, cfg chaosConfig) {
	r := &chaosRun{t: t, tg: b.Open(t), log: &chaosLog{}, started: time.Now()}
	tm := r.tg.Timing
	if cfg.heartbeat == 0 {
		cfg.heartbeat = tm.Heartbeat
	}
	r.cfg = cfg
	r.raw = s3test.Objects{Client: r.tg.Client(), Bucket: r.tg.Bucket}
	r.admin = r.newStore("admin", nil)
	r.opts = func(id string) *s3task.WorkerOptions {
		return &s3task.WorkerOptions{
			ID:                id,
			Concurrency:       cfg.concurrency,
			PollInterval:      150 * time.Millisecond,
			MaxPollInterval:   500 * time.Millisecond,
			LeaseDuration:     tm.Lease,
			HeartbeatInterval: cfg.heartbeat,
			ClockMargin:       tm.Margin,
			Backoff:           func(n int) time.Duration { return time.Duration(n) * 20 * time.Millisecond },
			ShutdownTimeout:   time.Second,
			Logger:            conformance.Logger(),
			Hooks:             r.hooks(id),
		}
	}
	t.Logf("seed %d, %d tasks, %d workers x %d, %d operators, faults %g%%, lease %s, margin %s, heartbeat %s",
		cfg.seed, cfg.tasks, cfg.workers, cfg.concurrency, cfg.operators, cfg.rate*100, tm.Lease, tm.Margin, cfg.heartbeat)

	// Workers, each on a faulty client of its own that can also be cut off.
	var workers []*chaosWorker
	for i := range cfg.workers {
		id := fmt.Sprintf("w%d", i)
		cut := &s3test.Cutter{}
		st := r.newStore(id, r.newInjector(uint64(i)), cut.Wrap)
		workers = append(workers, &chaosWorker{id: id, cut: cut, stop: runWorker(t, st, r.handler(id), r.opts(id))})
	}
	defer func() {
		for _, w := range workers {
			w.stop()
		}
	}()

	// Producers submit every task on clean clients: a Create whose outcome
	// they could not know would leave a task nobody submits.
	var producers []*s3task.Store
	for p := range 3 {
		producers = append(producers, r.newStore(fmt.Sprintf("producer-%d", p), nil))
	}
	produced := make(chan error, 1)
	go func() {
		errs := make(chan error, len(producers))
		for p, st := range producers {
			go func() {
				for i := p; i < cfg.tasks; i += len(producers) {
					if err := r.produce(st, i); err != nil {
						errs <- err
						return
					}
				}
				errs <- nil
			}()
		}
		var first error
		for range producers {
			if err := <-errs; err != nil && first == nil {
				first = err
			}
		}
		produced <- first
	}()

	// Operators cancel and retry, on faulty clients too.
	// They stop between calls, never in the middle of one: a write cut off
	// after it reached S3 would be a change nobody saw accepted.
	opsStop := make(chan struct{})
	var stopOnce sync.Once
	stopOps := func() { stopOnce.Do(func() { close(opsStop) }) }
	var opsWG sync.WaitGroup
	var cancels sync.Mutex
	cancelsLeft := cfg.maxCancels
	for i := range cfg.operators {
		st := r.newStore(fmt.Sprintf("operator-%d", i), r.newInjector(uint64(100+i)))
		rng := rand.New(rand.NewPCG(cfg.seed, uint64(i)))
		opsWG.Go(func() { r.operate(opsStop, st, rng, &cancels, &cancelsLeft) })
	}
	defer func() { stopOps(); opsWG.Wait() }()

	// Inject until the producer is done and three quarters of the tasks
	// have ended, cutting a worker off now and then until its tasks are
	// taken over.
	if err := r.await(produced); err != nil {
		t.Fatal(err)
	}
	producedAt := time.Since(r.started)
	injectEnd := time.Now().Add(cfg.inject)
	var parts, tookOver []string
	for tick := time.NewTicker(25 * time.Millisecond); ; <-tick.C {
		ended := r.ended()
		if len(parts) < cfg.partitions && ended >= cfg.tasks*(len(parts)+1)/(cfg.partitions+2) {
			if victim, took := r.partition(workers); victim != "" {
				parts = append(parts, victim)
				if took {
					tookOver = append(tookOver, victim)
				}
			}
		}
		if time.Now().After(injectEnd) || (len(parts) >= cfg.partitions && ended >= cfg.tasks*3/4) {
			tick.Stop()
			break
		}
	}
	stopOps()
	opsWG.Wait()
	for _, inj := range r.injectors {
		inj.SetEnabled(false)
	}
	injected := time.Since(r.started)

	// Drain: no more faults; workers run until every task has ended, with
	// the clock moved past the leases of attempts that lost track of their
	// task (where it can move; elsewhere real leases run out).
	advances, restored := r.drain()
	// Then until workers have looked at every marker, due by then, and
	// dropped those of ended tasks.
	kept := r.awaitMarkers()
	for _, w := range workers {
		w.stop()
	}
	drained := time.Since(r.started)

	violations, figures := r.check(kept)
	counts := faults.Sum(r.injectors...)
	var requests int64
	for _, inj := range r.injectors {
		requests += inj.Requests()
	}
	t.Logf("faults injected in %d requests: %s", requests, faults.Format(counts))
	t.Logf("markers restored by a reconcile while draining: %d %v", len(restored), restored)
	t.Logf("partitions %d (workers %v; a task taken over after %d of them); clock moved past the leases %d times while draining; all submitted at %s, injection ended at %s, drained at %s",
		len(parts), parts, len(tookOver), advances, producedAt.Round(time.Millisecond), injected.Round(time.Millisecond), drained.Round(time.Millisecond))
	for _, f := range figures {
		t.Log(f)
	}
	t.Logf("invariant violations: %d", len(violations))
	for i, v := range violations {
		if i == 40 {
			t.Errorf("... and %d more", len(violations)-i)
			break
		}
		t.Error(v)
	}
}

// produce creates, uploads and submits task number i.
func (r *chaosRun) produce(st *s3task.Store, i int) error {
	id, err := chaosSubmit(r.t.Context(), st, fmt.Sprintf("chaos %d", i))
	if id != "" {
		r.idsMu.Lock()
		r.ids = append(r.ids, id)
		r.idsMu.Unlock()
	}
	// An operator may cancel a task between its creation and its
	// submission; then it stays abandoned.
	if err != nil && !errors.Is(err, s3task.ErrInvalidTransition) {
		return fmt.Errorf("producer, task %d: %w", i, err)
	}
	return nil
}

// await returns what ch yields, or an error once the test's wait bound
// (see waitBound) passes.
func (r *chaosRun) await(ch <-chan error) error {
	start := time.Now()
	select {
	case err := <-ch:
		return err
	case <-giveUp(r.t):
		return fmt.Errorf("gave up after %s", time.Since(start).Round(time.Millisecond))
	}
}

// ended counts the tasks the hooks and operators have seen end.
func (r *chaosRun) ended() int {
	r.log.mu.Lock()
	defer r.log.mu.Unlock()
	done := map[string]bool{}
	for _, h := range r.log.hooks {
		if h.kind == "complete" || (h.kind == "fail" && h.final) {
			done[h.task] = true
		}
	}
	for _, op := range r.log.ops {
		if op.err == nil && op.status == s3task.StatusAbandoned {
			done[op.task] = true
		}
	}
	return len(done)
}

// chaosWorker is a running worker, whose client can be cut off from S3.
type chaosWorker struct {
	id   string
	cut  *s3test.Cutter
	stop func()
}

// holding returns the tasks each worker holds by the hooks: claimed, and
// neither ended nor lost since.
func (r *chaosRun) holding() map[string][]string {
	r.log.mu.Lock()
	defer r.log.mu.Unlock()
	held := map[string]map[string]bool{}
	for _, h := range r.log.hooks {
		if held[h.worker] == nil {
			held[h.worker] = map[string]bool{}
		}
		held[h.worker][h.task] = h.kind == "claim"
	}
	out := map[string][]string{}
	for w, tasks := range held {
		for id, holds := range tasks {
			if holds {
				out[w] = append(out[w], id)
			}
		}
	}
	return out
}

// partition cuts off from S3 the worker that holds the most tasks, as if
// its machine froze, makes its leases expire (moving the server's clock, or
// where it cannot move, letting real time pass), and lets it back once
// another worker has taken one of its tasks over or a bound has passed. It
// returns the worker, "" if no worker held a task, and whether a takeover
// was seen.
func (r *chaosRun) partition(workers []*chaosWorker) (string, bool) {
	held := r.holding()
	var victim *chaosWorker
	for _, w := range workers {
		if len(held[w.id]) > 0 && (victim == nil || len(held[w.id]) > len(held[victim.id])) {
			victim = w
		}
	}
	if victim == nil {
		return "", false
	}
	mine := map[string]bool{}
	for _, id := range held[victim.id] {
		mine[id] = true
	}
	since := time.Now()
	victim.cut.Cut()
	defer victim.cut.Restore()
	bound := 2 * time.Second
	if r.tg.Caps.Advance {
		r.tg.Advance(r.tg.Timing.PastLease)
	} else {
		// A real lease must run out here: the server's clock cannot move.
		bound = r.tg.Timing.PastLease + 3*time.Second
	}
	deadline := time.Now().Add(bound)
	for tick := time.NewTicker(10 * time.Millisecond); time.Now().Before(deadline); <-tick.C {
		r.log.mu.Lock()
		took := false
		for _, h := range r.log.hooks {
			took = took || (h.kind == "claim" && h.worker != victim.id && mine[h.task] && h.at.After(since))
		}
		r.log.mu.Unlock()
		if took {
			tick.Stop()
			return victim.id, true
		}
	}
	return victim.id, false
}

// operate is an operator: now and then it looks at the tasks and retries a
// failed one or cancels one that has not ended, until stop is closed.
func (r *chaosRun) operate(stop <-chan struct{}, st *s3task.Store, rng *rand.Rand, cancels *sync.Mutex, left *int) {
	ctx := r.t.Context()
	var failed, open []string
	var listed time.Time
	for {
		select {
		case <-stop:
			return
		default:
		}
		if time.Since(listed) > 500*time.Millisecond {
			// An operator's page: the newest tasks.
			page, err := st.List(ctx, s3task.ListOptions{Limit: 50})
			if err == nil {
				failed, open = failed[:0], open[:0]
				for _, task := range page.Tasks {
					switch {
					case task.Status == s3task.StatusFailed:
						failed = append(failed, task.ID)
					case !task.Terminal():
						open = append(open, task.ID)
					}
				}
				listed = time.Now()
			}
		}
		var op chaosOp
		switch {
		case len(open) > 0 && rng.IntN(4) == 0:
			cancels.Lock()
			ok := *left > 0
			if ok {
				*left--
			}
			cancels.Unlock()
			if !ok {
				break
			}
			op = chaosOp{op: "cancel", task: open[rng.IntN(len(open))], start: time.Now()}
			got, err := st.Cancel(ctx, op.task, "chaos operator")
			op.end, op.err = time.Now(), err
			if err == nil {
				op.status = got.Status
			}
		case len(failed) > 0:
			op = chaosOp{op: "retry", task: failed[rng.IntN(len(failed))], start: time.Now()}
			got, err := st.Retry(ctx, op.task)
			op.end, op.err = time.Now(), err
			if err == nil {
				op.status = got.Status
			}
		}
		if op.op != "" {
			r.log.add(func() { r.log.ops = append(r.log.ops, op) })
		}
		timer := time.NewTimer(time.Duration(10+rng.IntN(30)) * time.Millisecond)
		select {
		case <-stop:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// scan reads every task record through the clean store.
func (r *chaosRun) scan() (map[string]*s3task.Task, error) {
	all := map[string]*s3task.Task{}
	cursor := ""
	for {
		page, err := r.admin.List(r.t.Context(), s3task.ListOptions{Limit: s3task.MaxListLimit, Cursor: cursor})
		if err != nil {
			return nil, err
		}
		if len(page.Broken) > 0 {
			return nil, fmt.Errorf("broken records: %v", page.Broken)
		}
		for _, task := range page.Tasks {
			all[task.ID] = task
		}
		if page.NextCursor == "" {
			return all, nil
		}
		cursor = page.NextCursor
	}
}

// drain waits until every task has ended. When nothing has changed for a
// second it looks for pending tasks without a marker (a marker is an index
// that faults can leave out of step; the workers' periodic reconcile, an
// hour apart by default, would restore it) and restores them with a
// reconcile of its own, reporting them; and where the server's clock can
// move, it moves the clock past every lease, so that attempts which lost
// track of their task (their final write failed) are recovered without
// waiting a real lease. It returns how often it moved the clock and the
// tasks whose markers it restored. However long a loaded machine takes is
// no failure; a task that never ends is, once the test's wait bound (see
// waitBound) passes.
func (r *chaosRun) drain() (advances int, restored []string) {
	r.t.Helper()
	ctx := r.t.Context()
	start, bound := time.Now(), waitBound(r.t)
	last, lastChange := "", time.Now()
	for tick := time.NewTicker(200 * time.Millisecond); ; <-tick.C {
		all, err := r.scan()
		if err != nil {
			r.t.Fatalf("drain: %v", err)
		}
		var open []string
		for id, task := range all {
			if !task.Terminal() {
				open = append(open, fmt.Sprintf("%s %s attempt %d/%d worker %q lease %s retry %s", id, task.Status,
					task.Attempt, task.MaxAttempts, task.WorkerID, task.LeaseExpiresAt.Format(time.TimeOnly), task.RetryAt.Format(time.TimeOnly)))
			}
		}
		if len(open) == 0 {
			tick.Stop()
			return advances, restored
		}
		sort.Strings(open)
		if sig := strings.Join(open, "\n"); sig != last {
			last, lastChange = sig, time.Now()
		}
		if time.Since(lastChange) > time.Second {
			// A dry run first: a real one would also remove stale markers,
			// which the workers must do on their own (see awaitMarkers).
			rep, err := r.admin.Reconcile(ctx, s3task.ReconcileOptions{DryRun: true})
			if err == nil && len(rep.Restored) > 0 {
				r.t.Logf("drain: pending tasks without a marker: %v", rep.Restored)
				restored = append(restored, rep.Restored...)
				_, err = r.admin.Reconcile(ctx, s3task.ReconcileOptions{})
			}
			if err != nil {
				r.t.Fatalf("drain: reconcile: %v", err)
			}
			if r.tg.Caps.Advance {
				r.tg.Advance(r.tg.Timing.PastLease)
				advances++
			}
			lastChange = time.Now()
		}
		if !bound.IsZero() && time.Now().After(bound) {
			tick.Stop()
			r.t.Fatalf("after %s without faults, %d tasks have not ended:\n%s", time.Since(start).Round(time.Millisecond), len(open), strings.Join(open, "\n"))
		}
	}
}

// markers lists the active markers.
func (r *chaosRun) markers() []string {
	r.t.Helper()
	prefix := r.admin.Prefix() + "active/"
	keys, err := r.raw.Keys(r.t.Context(), prefix)
	if err != nil {
		r.t.Fatalf("list markers: %v", err)
	}
	for i, key := range keys {
		keys[i] = strings.TrimPrefix(key, prefix)
	}
	return keys
}

// describeMarker says what is known of a marker left over (name is its key
// in the marker folder): when it was written, and what its task's record
// says, so that a violation tells which phase left it.
func (r *chaosRun) describeMarker(name string, all map[string]*s3task.Task) string {
	key := r.admin.Prefix() + "active/" + name
	id := name
	if _, after, ok := strings.Cut(name, "_"); ok {
		id = after
	}
	written := "?"
	if out, err := r.raw.Client.HeadObject(r.t.Context(), &s3.HeadObjectInput{Bucket: &r.raw.Bucket, Key: &key}); err == nil {
		written = aws.ToTime(out.LastModified).UTC().Format(time.TimeOnly)
	}
	task, ok := all[id]
	if !ok {
		return fmt.Sprintf("%s (written %s; no record)", name, written)
	}
	var book struct {
		NotifyPending bool `json:"notify_pending"`
	}
	if out, err := r.raw.Client.GetObject(r.t.Context(), &s3.GetObjectInput{Bucket: &r.raw.Bucket, Key: aws.String(r.admin.Prefix() + id + "/status.json")}); err == nil {
		_ = json.NewDecoder(out.Body).Decode(&book) // a diagnostic: false if it cannot be read
		out.Body.Close()
	}
	return fmt.Sprintf("%s (written %s; task %s attempt %d, notify_pending %v, updated %s, due_at %s; its record calls for %s)",
		name, written, task.Status, task.Attempt, book.NotifyPending, task.UpdatedAt.Format("15:04:05.000"),
		task.DueAt.Format("15:04:05.000"), strings.TrimPrefix(r.admin.MarkerKey(task), r.admin.Prefix()+"active/"))
}

// chaosMarkerSkew is the library's markerSkew: a marker written less than
// this before its record's last change (LastModified has a resolution of
// a second) counts as newer than the record.
const chaosMarkerSkew = 2 * time.Second

// chaosKeptAfter is more than the library's staleSubmitAge (10 minutes):
// how long it keeps a marker newer than its record, which a change under
// way writes first.
const chaosKeptAfter = time.Hour

// awaitMarkers waits until every marker left is one the library keeps by
// design, and, where the server's clock can move, until none is, and
// returns those kept (see keptByDesign), for check.
//
// Every task has ended, so a marker left is stale, and the next poll of
// any worker that finds it due drops it (a marker is an index; one a
// worker failed to delete under faults stays until a worker looks again).
// A marker is named after the time its task next needs a worker, which for
// a task that ended while running is the end of its lease plus the margin:
// the clock moves past the leases first where it can (no lease is live any
// more); where it cannot, real leases run out.
//
// One stale marker stays longer by design: a write whose outcome stays
// unknown leaves the marker it wrote first (commitMarked: "both stay"),
// and a marker newer than its record's last change is taken for a change
// under way, kept until it is ten minutes old. Where the clock can move,
// it then moves past those minutes too, and every marker must go.
//
// However long a loaded machine takes is no failure: the wait ends at the
// test's wait bound (see waitBound), and check reports what is left.
func (r *chaosRun) awaitMarkers() (kept []string) {
	if r.tg.Caps.Advance {
		r.tg.Advance(r.tg.Timing.PastLease)
	}
	settled := func() bool {
		left := r.markers()
		if len(left) == 0 {
			kept = nil
			return true
		}
		all, err := r.scan()
		if err != nil {
			return false
		}
		kept = kept[:0]
		for _, name := range left {
			if !r.keptByDesign(name, all) {
				return false
			}
			kept = append(kept, name)
		}
		return true
	}
	// until checks cond every 200ms until it holds or the bound passes;
	// check reports what is left then.
	bound := waitBound(r.t)
	until := func(cond func() bool) {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for !cond() && (bound.IsZero() || time.Now().Before(bound)) {
			<-tick.C
		}
	}
	until(settled)
	if len(kept) > 0 && r.tg.Caps.Advance {
		r.t.Logf("markers kept by design, before the clock moves past the ten minutes: %v", kept)
		r.tg.Advance(chaosKeptAfter)
		kept = nil
		until(func() bool { return len(r.markers()) == 0 })
	}
	return kept
}

// keptByDesign reports whether the marker name (its key in the marker
// folder) is one the library keeps for ten minutes although its task has
// ended: the task may still change (it is not completed or abandoned), and
// the marker was written no earlier than markerSkew before the record's
// last change.
func (r *chaosRun) keptByDesign(name string, all map[string]*s3task.Task) bool {
	_, id, ok := strings.Cut(name, "_")
	task := all[id]
	if !ok || task == nil || task.Status == s3task.StatusCompleted || task.Status == s3task.StatusAbandoned {
		return false
	}
	key := r.admin.Prefix() + "active/" + name
	out, err := r.raw.Client.HeadObject(r.t.Context(), &s3.HeadObjectInput{Bucket: &r.raw.Bucket, Key: &key})
	if err != nil {
		return false
	}
	return !aws.ToTime(out.LastModified).Before(task.UpdatedAt.Add(-chaosMarkerSkew))
}

// check reads the bucket and the logs and returns every broken invariant,
// and figures for the report. kept are the markers awaitMarkers found kept
// by design.
func (r *chaosRun) check(kept []string) (violations, figures []string) {
	t := r.t
	bad := func(format string, args ...any) { violations = append(violations, fmt.Sprintf(format, args...)) }
	all, err := r.scan()
	if err != nil {
		t.Fatalf("final scan: %v", err)
	}
	l := r.log
	l.mu.Lock()
	defer l.mu.Unlock()
	violations = append(violations, l.bad...)

	// Every submitted task is there and has ended.
	statuses := map[s3task.Status]int{}
	if len(r.ids) != r.cfg.tasks || len(all) != r.cfg.tasks {
		bad("%d tasks submitted and %d in the bucket, want %d", len(r.ids), len(all), r.cfg.tasks)
	}
	for _, id := range r.ids {
		task, ok := all[id]
		if !ok {
			bad("task %s is lost", id)
			continue
		}
		statuses[task.Status]++
		if !task.Terminal() {
			bad("task %s is %s, not ended", id, task.Status)
		}
		if task.Attempt > task.MaxAttempts {
			bad("task %s: attempt_id %d over max_attempts %d", id, task.Attempt, task.MaxAttempts)
		}
	}

	// Completed tasks: the output is the final attempt's, written by it.
	for id, task := range all {
		if task.Status != s3task.StatusCompleted {
			continue
		}
		if why := chaosCheckOutput(t.Context(), r.admin, r.raw, task); why != "" {
			bad("task %s %s", id, why)
		}
	}

	// Markers: none left once every task has ended, but those the library
	// keeps by design where the clock cannot move past them.
	var why, byDesign []string
	for _, name := range r.markers() {
		if slices.Contains(kept, name) {
			byDesign = append(byDesign, r.describeMarker(name, all))
		} else {
			why = append(why, r.describeMarker(name, all))
		}
	}
	if len(why) > 0 {
		bad("%d markers left after every task ended and workers looked again: %s", len(why), strings.Join(why, "; "))
	}
	if len(byDesign) > 0 {
		figures = append(figures, fmt.Sprintf("markers kept by design (newer than their record, kept ten minutes): %s", strings.Join(byDesign, "; ")))
	}

	figures = append(figures, fmt.Sprintf("tasks %d: %s", len(all), chaosFormatStatuses(statuses)))
	figures = append(figures, r.analyze(all, bad)...)
	return violations, figures
}

// analyze checks the logs (handler runs, hooks, operator calls, the
// ledger's record writes) against the final records, reporting each broken
// invariant through bad, and returns figures. The caller holds r.log.mu.
func (r *chaosRun) analyze(all map[string]*s3task.Task, bad func(string, ...any)) (figures []string) {
	l := r.log
	// Handler runs and hooks.
	execs := map[string][]*chaosExec{} // by task
	perAttempt := map[string]int{}
	for _, e := range l.execs {
		execs[e.task] = append(execs[e.task], e)
		perAttempt[fmt.Sprintf("%s/%d", e.task, e.attempt)]++
		if e.attempt > e.maxAttempts {
			bad("task %s attempt %d ran with max_attempts %d", e.task, e.attempt, e.maxAttempts)
		}
	}
	for k, n := range perAttempt {
		if n > 1 {
			bad("task/attempt %s ran %d times", k, n)
		}
	}
	// "task/attempt" -> complete, fail or release, and the worker whose hook
	// said so: the attempt's own, or one that recovered it from an expired
	// lease with no attempts left.
	outcome := map[string]chaosHook{}
	claims := map[string]int{}
	completions := map[string][]int{}
	lostHooks := 0
	for _, h := range l.hooks {
		k := fmt.Sprintf("%s/%d", h.task, h.attempt)
		switch h.kind {
		case "claim":
			claims[k]++
		case "complete":
			completions[h.task] = append(completions[h.task], h.attempt)
			fallthrough
		case "fail", "release":
			if prev, dup := outcome[k]; dup {
				bad("task/attempt %s recorded two outcomes: %s (%s) and %s (%s)", k, prev.kind, prev.worker, h.kind, h.worker)
			}
			outcome[k] = h
		case "lost":
			lostHooks++
		}
	}
	for k, n := range claims {
		if n > 1 {
			bad("task/attempt %s was claimed %d times", k, n)
		}
	}
	for id, attempts := range completions {
		task := all[id]
		if len(attempts) > 1 {
			bad("task %s completed %d times (attempts %v)", id, len(attempts), attempts)
		}
		if task != nil && (task.Status != s3task.StatusCompleted || task.Attempt != attempts[len(attempts)-1]) {
			bad("task %s: OnComplete for attempt %v, but the record is %s at attempt %d", id, attempts, task.Status, task.Attempt)
		}
	}
	for id, task := range all {
		if task.Status == s3task.StatusAbandoned && len(completions[id]) > 0 {
			bad("task %s is abandoned, yet OnComplete ran for it (attempts %v)", id, completions[id])
		}
		if task.Status != s3task.StatusCompleted {
			continue
		}
		ran := false
		for _, e := range execs[id] {
			ran = ran || (e.attempt == task.Attempt && e.err == nil)
		}
		if !ran {
			bad("task %s is completed at attempt %d, but no handler run of it succeeded", id, task.Attempt)
		}
	}

	// Overlapping runs of one task: the earlier attempt must have lost its
	// lease, so it can have recorded no outcome.
	overlaps, overlapCanceled := 0, 0
	var longest time.Duration
	for id, es := range execs {
		sort.Slice(es, func(i, j int) bool { return es[i].attempt < es[j].attempt })
		for i, a := range es {
			for _, b := range es[i+1:] {
				if !b.start.Before(a.end) {
					continue
				}
				overlaps++
				longest = max(longest, a.end.Sub(b.start))
				if a.canceled && (errors.Is(a.cause, s3task.ErrLeaseLost) || errors.Is(a.cause, s3task.ErrTaskCanceled)) {
					overlapCanceled++
				}
				// An outcome the attempt's own worker recorded; another
				// worker's OnFail for it is its recovery from the expired
				// lease (no attempts left), which the overtaken handler
				// did not achieve.
				if o, ok := outcome[fmt.Sprintf("%s/%d", id, a.attempt)]; ok && o.worker == a.worker {
					bad("task %s: attempt %d (%s) was still running %s after attempt %d (%s) started, yet recorded %s (hook of %s)",
						id, a.attempt, a.worker, a.end.Sub(b.start).Round(time.Millisecond), b.attempt, b.worker, o.kind, o.worker)
				}
			}
		}
	}

	// Operators: a task cancelled stays abandoned and is never completed.
	opCounts := map[string]int{}
	for _, op := range l.ops {
		result := "ok"
		var te *s3task.TransitionError
		switch {
		case errors.As(op.err, &te):
			result = "refused"
		case op.err != nil:
			result = "error"
		}
		opCounts[op.op+" "+result]++
		if op.op == "cancel" && op.err == nil {
			if op.status != s3task.StatusAbandoned {
				bad("Cancel(%s) returned status %s", op.task, op.status)
			}
			if task := all[op.task]; task != nil && task.Status != s3task.StatusAbandoned {
				bad("task %s was cancelled, but ended %s", op.task, task.Status)
			}
			if len(completions[op.task]) > 0 {
				bad("task %s was cancelled, yet OnComplete ran for it", op.task)
			}
		}
	}

	// The record's history, from the ledger.
	chain := r.checkChains(all, bad)

	return append(figures,
		fmt.Sprintf("handler runs %d, claims %d, lease-lost hooks %d; runs overlapping a later attempt of their task %d (of them stopped by a lease-lost or cancel cause %d, longest overlap %s)",
			len(l.execs), len(claims), lostHooks, overlaps, overlapCanceled, longest.Round(time.Millisecond)),
		fmt.Sprintf("operator calls %d: %s", len(l.ops), chaosFormatCounts(opCounts)),
		chain,
	)
}

// checkChains rebuilds each task's record history from the ledger: starting
// at its creation, each accepted write names its predecessor's ETag in
// If-Match. It checks that the history is one chain ending at the stored
// record, and that each step is legal.
func (r *chaosRun) checkChains(all map[string]*s3task.Task, bad func(string, ...any)) string {
	byTask := map[string][]*chaosWrite{}
	for _, w := range r.log.writes {
		byTask[w.rec.ID] = append(byTask[w.rec.ID], w)
	}
	takeovers, unchecked, uncertainIn := 0, 0, 0
	minSlack := time.Duration(1<<63 - 1)
	writes := 0
	for id, task := range all {
		var ws []*chaosWrite
		maybe := map[string][]*chaosWrite{} // uncertain writes by If-Match
		for _, w := range byTask[id] {
			if w.uncertain {
				maybe[w.ifMatch] = append(maybe[w.ifMatch], w)
			} else {
				ws = append(ws, w)
			}
		}
		writes += len(ws)
		var root *chaosWrite
		next := map[string][]*chaosWrite{}
		for _, w := range ws {
			switch {
			case w.ifNoneMatch == "*":
				if root != nil {
					bad("task %s was created twice", id)
				}
				root = w
			case w.ifMatch != "":
				next[w.ifMatch] = append(next[w.ifMatch], w)
			default:
				bad("task %s: a record write by %s without a condition", id, w.by)
			}
		}
		if root == nil {
			bad("task %s: no creation in the ledger", id)
			continue
		}
		chain := []*chaosWrite{root}
		extra := 0
		for cur := root; ; {
			succ := next[cur.etag]
			if len(succ) == 0 {
				// A write whose outcome its client never learned belongs
				// here if what follows builds on it or it is what is stored.
				for _, u := range maybe[cur.etag] {
					if len(next[u.etag]) > 0 || u.rec.Revision == task.Revision {
						succ = append(succ, u)
					}
				}
				extra += len(succ)
			}
			if len(succ) > 1 {
				var by []string
				for _, s := range succ {
					by = append(by, fmt.Sprintf("%s (%s attempt %d)", s.by, s.rec.Status, s.rec.Attempt))
				}
				bad("task %s: %d writes won on one ETag: %v", id, len(succ), by)
			}
			if len(succ) == 0 {
				break
			}
			cur = succ[0]
			chain = append(chain, cur)
		}
		uncertainIn += extra
		if len(chain) != len(ws)+extra {
			bad("task %s: %d accepted writes, only %d on the chain", id, len(ws)+extra, len(chain))
		}
		if last := chain[len(chain)-1]; last.rec.Revision != task.Revision {
			bad("task %s: the stored record (revision %s) is not the chain's last write (%s by %s)", id, task.Revision, last.rec.Revision, last.by)
		}
		for i := 1; i < len(chain); i++ {
			prev, cur := chain[i-1], chain[i]
			p, c := prev.rec, cur.rec
			if c.Attempt > c.MaxAttempts {
				bad("task %s: write by %s has attempt %d over max_attempts %d", id, cur.by, c.Attempt, c.MaxAttempts)
			}
			switch {
			case p.Status == s3task.StatusCompleted || p.Status == s3task.StatusAbandoned:
				bad("task %s: %s wrote %s after the task was %s", id, cur.by, c.Status, p.Status)
			case p.Status == s3task.StatusFailed && p.RetryAt.IsZero() && c.Status != s3task.StatusQueued && c.Status != s3task.StatusAbandoned:
				bad("task %s: %s moved a finally failed task to %s", id, cur.by, c.Status)
			}
			switch {
			case c.Attempt == p.Attempt+1:
				if c.Status != s3task.StatusRunning || c.WorkerID != cur.by {
					bad("task %s: attempt %d begins with %s by %s (worker %q)", id, c.Attempt, c.Status, cur.by, c.WorkerID)
				}
			case c.Attempt != p.Attempt:
				bad("task %s: attempt goes from %d to %d", id, p.Attempt, c.Attempt)
			}
			// Anyone but the holder replacing a running record, other than
			// an operator's cancel, takes the lease over: only allowed once
			// it has expired by the server's clock.
			holder := p.Status == s3task.StatusRunning && cur.by == p.WorkerID && c.Attempt == p.Attempt
			if p.Status == s3task.StatusRunning && !holder && c.Status != s3task.StatusAbandoned {
				takeovers++
				if cur.uncertain {
					unchecked++ // no Date: its client never got the answer
					continue
				}
				// Date has one-second resolution: the write happened in
				// [date, date+1s). It broke a live lease only if that
				// whole second lies before the lease's end.
				slack := cur.date.Add(time.Second).Sub(p.LeaseExpiresAt)
				minSlack = min(minSlack, slack)
				if slack <= 0 {
					bad("task %s: %s took over attempt %d of %s at %s, while its lease ran until %s", id, cur.by, p.Attempt,
						p.WorkerID, cur.date.Format(time.RFC3339), p.LeaseExpiresAt.Format(time.RFC3339Nano))
				}
			}
		}
	}
	s := fmt.Sprintf("record writes accepted %d (and %d applied whose client got no answer below the injector); lease takeovers %d (%d without a Date to check)",
		writes, uncertainIn, takeovers, unchecked)
	if takeovers > 0 {
		s += fmt.Sprintf(", the earliest %s after the lease's end (within Date's one-second resolution)", (minSlack - time.Second).Round(time.Millisecond))
	}
	return s
}

func chaosFormatStatuses(m map[s3task.Status]int) string {
	var parts []string
	for _, s := range []s3task.Status{s3task.StatusCompleted, s3task.StatusFailed, s3task.StatusAbandoned, s3task.StatusQueued, s3task.StatusRunning, s3task.StatusCreated} {
		if m[s] > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", s, m[s]))
		}
	}
	return strings.Join(parts, " ")
}

func chaosFormatCounts(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// TestChaosCheckerCatchesViolations feeds the invariant checker logs of
// histories that break the library's promises, so that a clean chaos run
// means something: the checker is able to fail.
func TestChaosCheckerCatchesViolations(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rec := func(status s3task.Status, attempt int, worker string, lease time.Time) s3task.Task {
		return s3task.Task{ID: "T", Status: status, Attempt: attempt, MaxAttempts: 3, WorkerID: worker, LeaseExpiresAt: lease,
			Revision: fmt.Sprintf("%s-%d-%s-%d", status, attempt, worker, lease.Unix())}
	}
	w := func(by, ifMatch, etag string, r s3task.Task, date time.Time) *chaosWrite {
		cw := &chaosWrite{rec: r, by: by, ifMatch: ifMatch, etag: etag, date: date}
		if ifMatch == "" {
			cw.ifNoneMatch = "*"
		}
		return cw
	}
	// A clean start: created, queued, claimed by w0 with a lease to at+10s.
	start := []*chaosWrite{
		w("producer-0", "", "e0", rec(s3task.StatusCreated, 0, "", time.Time{}), at),
		w("producer-0", "e0", "e1", rec(s3task.StatusQueued, 0, "", time.Time{}), at),
		w("w0", "e1", "e2", rec(s3task.StatusRunning, 1, "w0", at.Add(10*time.Second)), at),
	}
	done := rec(s3task.StatusCompleted, 2, "w1", time.Time{})
	exec := func(attempt int, worker string, from, to time.Duration, err error) *chaosExec {
		return &chaosExec{task: "T", attempt: attempt, maxAttempts: 3, worker: worker, start: at.Add(from), end: at.Add(to), err: err}
	}
	cleanDone := rec(s3task.StatusCompleted, 1, "w0", time.Time{})
	tests := []struct {
		name   string
		writes []*chaosWrite
		execs  []*chaosExec
		hooks  []chaosHook
		ops    []chaosOp
		final  s3task.Task
		want   string
	}{
		{
			name: "a clean history", // no violation: the checker does not cry wolf
			writes: append(slices.Clone(start),
				w("w0", "e2", "e3", rec(s3task.StatusRunning, 1, "w0", at.Add(20*time.Second)), at.Add(time.Second)),
				w("w0", "e3", "e4", cleanDone, at.Add(2*time.Second))),
			execs: []*chaosExec{exec(1, "w0", 0, 2*time.Second, nil)},
			hooks: []chaosHook{{kind: "claim", worker: "w0", task: "T", attempt: 1}, {kind: "complete", worker: "w0", task: "T", attempt: 1}},
			final: cleanDone,
		},
		{
			name: "two writes won on one ETag",
			writes: append(slices.Clone(start),
				w("w0", "e2", "e3", rec(s3task.StatusRunning, 1, "w0", at.Add(20*time.Second)), at.Add(time.Second)),
				w("w1", "e2", "e4", rec(s3task.StatusRunning, 2, "w1", at.Add(30*time.Second)), at.Add(15*time.Second))),
			final: rec(s3task.StatusRunning, 1, "w0", at.Add(20*time.Second)),
			want:  "writes won on one ETag",
		},
		{
			name: "live lease taken over",
			writes: append(slices.Clone(start),
				w("w1", "e2", "e3", rec(s3task.StatusRunning, 2, "w1", at.Add(15*time.Second)), at.Add(5*time.Second)),
				w("w1", "e3", "e4", done, at.Add(6*time.Second))),
			final: done,
			want:  "took over attempt 1 of w0",
		},
		{
			name: "write after completion",
			writes: append(slices.Clone(start),
				w("w0", "e2", "e3", rec(s3task.StatusCompleted, 1, "w0", time.Time{}), at.Add(time.Second)),
				w("w0", "e3", "e4", rec(s3task.StatusRunning, 1, "w0", at.Add(20*time.Second)), at.Add(2*time.Second))),
			final: rec(s3task.StatusRunning, 1, "w0", at.Add(20*time.Second)),
			want:  "after the task was completed",
		},
		{
			name:   "attempt run twice",
			writes: start,
			execs:  []*chaosExec{exec(1, "w0", 0, time.Second, nil), exec(1, "w1", 2*time.Second, 3*time.Second, nil)},
			final:  start[2].rec,
			want:   "ran 2 times",
		},
		{
			name:   "overtaken attempt still recorded an outcome",
			writes: start,
			execs:  []*chaosExec{exec(1, "w0", 0, 20*time.Second, nil), exec(2, "w1", 15*time.Second, 16*time.Second, nil)},
			hooks:  []chaosHook{{kind: "fail", worker: "w0", task: "T", attempt: 1}},
			final:  start[2].rec,
			want:   "yet recorded fail",
		},
		{
			name:   "cancelled task completed",
			writes: start,
			hooks:  []chaosHook{{kind: "complete", worker: "w1", task: "T", attempt: 2}},
			ops:    []chaosOp{{op: "cancel", task: "T", status: s3task.StatusAbandoned}},
			final:  done,
			want:   "was cancelled, yet OnComplete ran",
		},
		{
			name:   "completed without a successful run",
			writes: start,
			execs:  []*chaosExec{exec(2, "w1", 0, time.Second, errors.New("boom"))},
			final:  done,
			want:   "no handler run of it succeeded",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := &chaosRun{t: t, log: &chaosLog{writes: tc.writes, execs: tc.execs, hooks: tc.hooks, ops: tc.ops}}
			final := tc.final
			var got []string
			r.analyze(map[string]*s3task.Task{"T": &final}, func(format string, args ...any) {
				got = append(got, fmt.Sprintf(format, args...))
			})
			if tc.want == "" {
				if len(got) > 0 {
					t.Errorf("the checker reported violations in a clean history: %q", got)
				}
				return
			}
			found := false
			for _, v := range got {
				found = found || strings.Contains(v, tc.want)
			}
			if !found {
				t.Errorf("the checker missed %q; it reported %q", tc.want, got)
			}
		})
	}
}

// The crash tests run workers as real processes (internal/cmd/crashworker)
// against real S3 servers, versitygw and SeaweedFS, kill one with SIGKILL
// in the middle of a task, and restart the S3 server itself under running
// workers. They need real servers, so each server's half skips without its
// variables (S3TASK_TEST_ENDPOINT, S3TASK_TEST_SEAWEEDFS_ENDPOINT). What
// they check at the end is what the chaos test checks of completed tasks.

// crashServer is a real S3 server kind the crash tests run on.
type crashServer struct {
	name string
	// remote returns the shared server, or skips the test.
	remote func(t testing.TB) s3test.RemoteConfig
	// start starts a server of the test's own, which the test may restart.
	start func(t *testing.T, rc s3test.RemoteConfig) restartable
}

// restartable is a server a test started and can kill and start again.
type restartable struct {
	endpoint, access, secret string
	restart                  func(ctx context.Context) error
}

var crashServers = []crashServer{
	{"versitygw", s3test.RemoteT, func(t *testing.T, rc s3test.RemoteConfig) restartable {
		gw := s3test.StartGatewayT(t, rc.GatewayBin)
		return restartable{gw.Endpoint, gw.AccessKey, gw.SecretKey, gw.Restart}
	}},
	{"seaweedfs", s3test.SeaweedRemoteT, func(t *testing.T, rc s3test.RemoteConfig) restartable {
		sw := s3test.StartSeaweedT(t, rc.SeaweedBin)
		return restartable{sw.Endpoint, sw.AccessKey, sw.SecretKey, sw.Restart}
	}},
}

// onCrashServers runs test once per server, in parallel.
func onCrashServers(t *testing.T, test func(t *testing.T, srv crashServer, rc s3test.RemoteConfig)) {
	for _, srv := range crashServers {
		t.Run(srv.name, func(t *testing.T) {
			t.Parallel()
			test(t, srv, srv.remote(t))
		})
	}
}

// Lease settings of the worker processes: real time passes on a real
// server, so leases are short.
const (
	crashLease     = 3 * time.Second
	crashMargin    = time.Second
	crashHeartbeat = 500 * time.Millisecond
)

// crashEvent is one line a worker process printed.
type crashEvent struct {
	Event   string    `json:"event"`
	Worker  string    `json:"worker"`
	Task    string    `json:"task"`
	Attempt int       `json:"attempt"`
	Detail  string    `json:"detail"`
	At      time.Time `json:"at"`
}

// crashEvents collects the events of every process of a test.
type crashEvents struct {
	mu   sync.Mutex
	all  []crashEvent
	more chan struct{} // pinged on every event
}

func (c *crashEvents) add(e crashEvent) {
	c.mu.Lock()
	c.all = append(c.all, e)
	c.mu.Unlock()
	offer(c.more, struct{}{})
}

func (c *crashEvents) snapshot() []crashEvent {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.all)
}

// countEvents returns how many of events are of kind.
func countEvents(events []crashEvent, kind string) int {
	n := 0
	for _, e := range events {
		if e.Event == kind {
			n++
		}
	}
	return n
}

// await returns the first event for which match (given all events so far)
// holds, waiting for it on the event signal until the test's wait bound
// (see waitBound).
func (c *crashEvents) await(t *testing.T, what string, match func(e crashEvent, all []crashEvent) bool) crashEvent {
	t.Helper()
	start, bound := time.Now(), giveUp(t)
	for {
		all := c.snapshot()
		for _, e := range all {
			if match(e, all) {
				return e
			}
		}
		select {
		case <-c.more:
		case <-bound:
			t.Fatalf("gave up after %s waiting for %s", time.Since(start).Round(time.Millisecond), what)
		}
	}
}

// crashRun is what a crash test runs on: a bucket of its own on a real S3
// server, a store on it, the worker program, and the events of the worker
// processes.
type crashRun struct {
	endpoint, access, secret, bucket string

	bin    string         // the worker program
	raw    s3test.Objects // for looking at objects
	store  *s3task.Store
	events *crashEvents
}

// newCrashRun builds the worker program into the test's temporary folder
// and makes a bucket for the test on the server at endpoint.
func newCrashRun(t *testing.T, endpoint, access, secret string) *crashRun {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the crash tests build internal/cmd/crashworker and need the go command: %v", err)
	}
	r := &crashRun{endpoint: endpoint, access: access, secret: secret, bin: filepath.Join(t.TempDir(), "crashworker"),
		events: &crashEvents{more: make(chan struct{}, 1)}}
	cmd := exec.CommandContext(t.Context(), gobin, "build", "-o", r.bin, "./internal/cmd/crashworker")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./internal/cmd/crashworker: %v\n%s", err, msg)
	}
	r.raw.Client = r.client(t)
	if r.bucket, err = s3test.NewBucket(t.Context(), r.raw.Client, t.Name()); err != nil {
		t.Fatal(err)
	}
	r.raw.Bucket = r.bucket
	if r.store, err = s3task.NewStore(r.client(t), r.bucket, &s3task.StoreOptions{InputExt: ".csv", OutputExt: ".txt", Logger: conformance.Logger()}); err != nil {
		t.Fatal(err)
	}
	return r
}

// client returns an S3 client whose idle connections close when the test
// ends.
func (r *crashRun) client(t *testing.T) *s3.Client {
	var closer s3test.TransportCloser
	t.Cleanup(closer.CloseIdleConnections)
	return s3test.NewClientWithKeys(r.endpoint, r.access, r.secret, closer.Wrap)
}

// crashProc is a running worker process.
type crashProc struct {
	id     string
	cmd    *exec.Cmd
	exited chan struct{}
	stderr *crashStderr
}

type crashStderr struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *crashStderr) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *crashStderr) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// start starts a worker process; it is killed when the test ends if it
// still runs.
func (r *crashRun) start(t *testing.T, id string, work time.Duration, concurrency int) *crashProc {
	t.Helper()
	cmd := exec.Command(r.bin,
		"-endpoint", r.endpoint, "-bucket", r.bucket, "-id", id,
		"-lease", crashLease.String(), "-margin", crashMargin.String(), "-heartbeat", crashHeartbeat.String(),
		"-work", work.String(), "-concurrency", fmt.Sprint(concurrency))
	cmd.Env = append(os.Environ(), s3test.EnvAccessKey+"="+r.access, s3test.EnvSecretKey+"="+r.secret)
	p := &crashProc{id: id, cmd: cmd, exited: make(chan struct{}), stderr: &crashStderr{}}
	cmd.Stderr = p.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", id, err)
	}
	go func() {
		defer close(p.exited)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var e crashEvent
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				r.events.add(e)
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		p.kill(t)
		if t.Failed() {
			t.Logf("%s stderr:\n%s", id, p.stderr.String())
		}
	})
	return p
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *crashProc) kill(t *testing.T) {
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("kill %s: %v", p.id, err)
	}
	select {
	case <-p.exited:
	case <-giveUp(t):
		t.Errorf("%s (pid %d) still runs after SIGKILL", p.id, p.cmd.Process.Pid)
	}
}

// expectRunning fails the test if the process has exited.
func (p *crashProc) expectRunning(t *testing.T) {
	t.Helper()
	select {
	case <-p.exited:
		t.Errorf("%s exited:\n%s", p.id, p.stderr.String())
	default:
	}
}

// submit creates n tasks with inputs and submits them.
func (r *crashRun) submit(t *testing.T, n int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		id, err := chaosSubmit(t.Context(), r.store, fmt.Sprintf("crash %d", i))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// awaitCompleted waits until every task is completed, reading the records
// every 200ms (a read that fails, as while the server restarts, is tried
// again), until the test's wait bound (see waitBound).
func (r *crashRun) awaitCompleted(t *testing.T, ids []string) map[string]*s3task.Task {
	t.Helper()
	start, bound := time.Now(), waitBound(t)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		done := map[string]*s3task.Task{}
		var open []string
		for _, id := range ids {
			task, err := r.store.Get(t.Context(), id)
			switch {
			case err != nil:
				open = append(open, fmt.Sprintf("%s: %v", id, err))
			case task.Status == s3task.StatusCompleted:
				done[id] = task
			case task.Terminal():
				t.Fatalf("task %s ended %s: %s", id, task.Status, task.LastError)
			default:
				open = append(open, fmt.Sprintf("%s: %s attempt %d worker %q", id, task.Status, task.Attempt, task.WorkerID))
			}
		}
		if len(open) == 0 {
			return done
		}
		if !bound.IsZero() && time.Now().After(bound) {
			t.Fatalf("after %s, %d tasks are not completed:\n%s\nevents: %+v", time.Since(start).Round(time.Millisecond), len(open), strings.Join(open, "\n"), r.events.snapshot())
		}
		<-tick.C
	}
}

// check checks what every crash test promises once all tasks are
// completed: each was completed once, by its final attempt, whose output it
// points to; no attempt was claimed twice.
func (r *crashRun) check(t *testing.T, done map[string]*s3task.Task) {
	t.Helper()
	claims := map[string]int{}
	completes := map[string][]crashEvent{}
	for _, e := range r.events.snapshot() {
		switch e.Event {
		case "claim":
			claims[fmt.Sprintf("%s/%d", e.Task, e.Attempt)]++
		case "complete":
			completes[e.Task] = append(completes[e.Task], e)
		}
	}
	for k, n := range claims {
		if n > 1 {
			t.Errorf("task/attempt %s claimed %d times", k, n)
		}
	}
	for id, task := range done {
		cs := completes[id]
		if len(cs) > 1 {
			t.Errorf("task %s completed %d times: %+v", id, len(cs), cs)
		}
		if len(cs) == 1 && (cs[0].Attempt != task.Attempt || cs[0].Worker != task.WorkerID) {
			t.Errorf("task %s: completion reported for attempt %d by %s, record says attempt %d by %s",
				id, cs[0].Attempt, cs[0].Worker, task.Attempt, task.WorkerID)
		}
		if task.Attempt > task.MaxAttempts {
			t.Errorf("task %s: attempt_id %d over max_attempts %d", id, task.Attempt, task.MaxAttempts)
		}
		if why := chaosCheckOutput(t.Context(), r.store, r.raw, task); why != "" {
			t.Errorf("task %s %s", id, why)
		}
	}
}

// TestCrashKilledWorker runs three worker processes, kills the one that
// started a task first with SIGKILL while its handler works, and shows the
// task recovered as a new attempt by another process once the lease has
// expired, with every task completed exactly once.
func TestCrashKilledWorker(t *testing.T) {
	t.Parallel()
	onCrashServers(t, testCrashKilledWorker)
}

func testCrashKilledWorker(t *testing.T, _ crashServer, rc s3test.RemoteConfig) {
	r := newCrashRun(t, rc.Endpoint, rc.AccessKey, rc.SecretKey)
	procs := map[string]*crashProc{}
	for i := range 3 {
		id := fmt.Sprintf("proc-%d", i)
		procs[id] = r.start(t, id, 2*time.Second, 1)
	}
	ids := r.submit(t, 6)

	first := r.events.await(t, "a handler to start", func(e crashEvent, _ []crashEvent) bool { return e.Event == "start" })
	victim := procs[first.Worker]
	victim.kill(t) // in the middle of its task: the handler works for 2s
	killedAt := time.Now()
	t.Logf("killed %s (pid %d) %s into attempt %d of task %s", victim.id, victim.cmd.Process.Pid,
		killedAt.Sub(first.At).Round(time.Millisecond), first.Attempt, first.Task)

	done := r.awaitCompleted(t, ids)
	r.check(t, done)

	// The killed attempt's task: recovered as a new attempt by a survivor,
	// once the lease had run out.
	task := done[first.Task]
	if task.Attempt <= first.Attempt || task.WorkerID == victim.id {
		t.Errorf("task %s completed as attempt %d by %s; want a later attempt than %d by another process",
			task.ID, task.Attempt, task.WorkerID, first.Attempt)
	}
	for _, e := range r.events.snapshot() {
		if e.Event == "claim" && e.Task == first.Task && e.Attempt == first.Attempt+1 {
			// The killed claim's lease ran for crashLease from its claim at
			// the least; allow a second for the Date header's resolution.
			if earliest := first.At.Add(crashLease - time.Second); e.At.Before(earliest) {
				t.Errorf("attempt %d was claimed at %s, before the killed attempt's lease could have expired (%s)",
					e.Attempt, e.At.Format(time.StampMilli), earliest.Format(time.StampMilli))
			}
			t.Logf("recovered by %s as attempt %d, %s after the kill", e.Worker, e.Attempt, e.At.Sub(killedAt).Round(time.Millisecond))
		}
	}
	killedOutput, _ := r.store.OutputKey(first.Task, first.Attempt)
	if _, _, err := r.raw.Get(t.Context(), killedOutput); err == nil {
		t.Errorf("the killed attempt left an output at %s", killedOutput)
	}
	for _, p := range procs {
		if p != victim {
			p.expectRunning(t)
		}
	}
}

// TestCrashGatewayRestart runs three worker processes against an S3
// server of its own (one versitygw, one SeaweedFS), kills the server with
// SIGKILL while tasks run and starts it again on the same ports and folder;
// the workers ride through it and every task completes exactly once.
func TestCrashGatewayRestart(t *testing.T) {
	t.Parallel()
	onCrashServers(t, testCrashGatewayRestart)
}

func testCrashGatewayRestart(t *testing.T, srv crashServer, rc s3test.RemoteConfig) {
	gw := srv.start(t, rc)
	r := newCrashRun(t, gw.endpoint, gw.access, gw.secret)
	var procs []*crashProc
	for i := range 3 {
		procs = append(procs, r.start(t, fmt.Sprintf("proc-%d", i), time.Second, 2))
	}
	ids := r.submit(t, 12)

	// Restart once some tasks are done and another is running.
	r.events.await(t, "three completions", func(_ crashEvent, all []crashEvent) bool { return countEvents(all, "complete") >= 3 })
	running := r.events.await(t, "a handler running", func(e crashEvent, all []crashEvent) bool {
		if e.Event != "start" {
			return false
		}
		for _, o := range all {
			if o.Task == e.Task && o.Attempt == e.Attempt && (o.Event == "complete" || o.Event == "fail" || o.Event == "stopped") {
				return false
			}
		}
		return true
	})
	start := time.Now()
	if err := gw.restart(t.Context()); err != nil {
		t.Fatalf("restart %s: %v", srv.name, err)
	}
	t.Logf("%s was down for %s (restarted while attempt %d of %s ran on %s)",
		srv.name, time.Since(start).Round(time.Millisecond), running.Attempt, running.Task, running.Worker)

	done := r.awaitCompleted(t, ids)
	r.check(t, done)
	for _, p := range procs {
		p.expectRunning(t)
	}
	t.Logf("%d tasks completed across the restart; %d leases lost on the way", len(done), countEvents(r.events.snapshot(), "lost"))
}
