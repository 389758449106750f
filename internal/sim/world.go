package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"log/slog"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/entropy"
	"github.com/s3task/s3task/internal/probe"
	"github.com/s3task/s3task/internal/s3test"
)

// World is one simulated run: the bucket, the processes sharing it, and
// the history being recorded.
type World struct {
	cfg    Config
	rng    *Rand // the world's own decisions: chaos, arrivals
	mem    *s3test.Memory
	prefix string
	hooked bool
	log    *slog.Logger
	over   chan struct{} // closed when the run is over: hung requests and hooks give up
	quiet  chan struct{} // closed when the turbulence ends
	seq    atomic.Int64
	reqs   [6]atomic.Int64 // requests sent, by opIndex
	wg     sync.WaitGroup  // every goroutine the world started

	mu       sync.Mutex
	h        History
	workers  []*proc // the live fleet
	nameN    int     // worker names handed out
	ids      []string
	index    map[string]int // task ID -> index of its task life, for tasks a Create returned
	stubborn map[string]time.Time
	keys     []string        // the idempotency keys handed out
	deleted  map[string]bool // tasks whose record was deleted
	planted  map[string]bool // the tasks of the unreadable records planted; written before anything runs
	sleepers []string        // the tasks of the sleeper lives of a Long run, for the vandal

	bus       *bus    // the event notifications, with Config.Events
	ingesters []*proc // with Config.Ingest: the live Ingesters
	directs   []*proc // with Config.Ingest: the direct callers of Ingest
	ingestN   int     // Ingester names handed out
	partnerP  *proc   // with Config.Ingest: the partner, who puts the files
	// vanishing holds the files the partner deletes at the first GET an
	// ingesting process sends for them, between its look and its copy.
	vanishing map[string]bool
	// brownUntil is when the brownout of the ingesting processes ends.
	brownUntil time.Time
	// submitted holds the versions ("<key> <etag>") of which a task was
	// submitted, from the records S3 applied.
	submitted map[string]bool
	// impatientP is the operator that cancels long runs (see goCancel);
	// cancelling holds the tasks it is cancelling (under mu).
	impatientP *proc
	cancelling map[string]bool
}

// proc is one simulated process: a worker or an operator, with its own
// client, store, clock skew and random stream.
type proc struct {
	w     *World
	name  string
	rng   *Rand // its own decisions, made by one goroutine at a time
	hook  *Rand // its OnTerminal hook's
	link  *link
	raw   s3test.Objects // its client, for requests without the library
	store *s3task.Store

	// Operators only: the later steps of the lives it started (see
	// errand), earliest first, and when the turbulence ends.
	errands []errand
	calm    time.Time

	// Ingesters only.
	ingester *s3task.Ingester
	plain    bool // with the library's default parameters

	// Workers only.
	conc   int
	types  []string // the task types it serves; nil: all
	worker *s3task.Worker
	cancel context.CancelFunc
	exited chan struct{}
}

func newWorld(cfg Config) (*World, error) {
	rng := NewRand(cfg.Seed, "world")
	cfg = cfg.withDefaults(rng)
	mem, err := s3test.NewMemory()
	if err != nil {
		return nil, err
	}
	w := &World{
		cfg:      cfg,
		rng:      rng,
		mem:      mem,
		prefix:   s3task.DefaultPrefix,
		hooked:   rng.Chance(0.85),
		log:      slog.New(slog.DiscardHandler),
		over:     make(chan struct{}),
		quiet:    make(chan struct{}),
		index:    map[string]int{},
		stubborn: map[string]time.Time{},
		planted:  map[string]bool{},
		deleted:  map[string]bool{},

		vanishing: map[string]bool{},
		submitted: map[string]bool{},
	}
	w.h = History{
		Seed:      cfg.Seed,
		Params:    DefaultParams(),
		Prefix:    w.prefix,
		Start:     time.Now(),
		Hooked:    w.hooked,
		Stats:     map[string]int{},
		GoneReads: map[string]int{},
		Reached:   map[string]int{},
	}
	if cfg.Events {
		w.bus = newBus(w)
	}
	if cfg.Periodic {
		w.h.Periodics, w.h.Params.ReconcileInterval = declarePeriodics(cfg.Seed, w.h.Start)
	}
	mem.OnApply(w.applied)
	return w, nil
}

// next returns the next sequence number.
func (w *World) next() int64 { return w.seq.Add(1) }

// now returns the virtual time and the next sequence number.
func (w *World) now() (time.Time, int64) { return time.Now(), w.next() }

// reach counts a branch of the library reached (see internal/probe).
func (w *World) reach(branch string) {
	w.mu.Lock()
	w.h.Reached[branch]++
	w.mu.Unlock()
}

// count adds one to a statistic.
func (w *World) count(kind string) {
	w.mu.Lock()
	w.h.Stats[kind]++
	w.mu.Unlock()
}

// event records a process event.
func (w *World) event(name string, kind EventKind, start, end time.Time) {
	w.mu.Lock()
	w.h.Events = append(w.h.Events, ProcEvent{Proc: name, Kind: kind, Start: start, End: end})
	w.mu.Unlock()
}

// newProc makes a process with its own client and store.
func (w *World) newProc(name string) (*proc, error) {
	p := &proc{w: w, name: name, rng: NewRand(w.cfg.Seed, "proc/"+name), hook: NewRand(w.cfg.Seed, "hook/"+name)}
	p.link = newLink(w, name)
	p.raw = s3test.Objects{Client: stampBegan(steadyRetries(w.mem.Client(p.link.wrap, p.tag))), Bucket: w.mem.Bucket}
	skew := p.rng.Dur(-2*time.Minute, 2*time.Minute)
	opts := &s3task.StoreOptions{
		Clock:      func() time.Time { return time.Now().Add(skew) },
		Logger:     w.log,
		Middleware: []s3task.StoreMiddleware{tellFound},
	}
	if w.hooked {
		opts.OnTerminal = p.onTerminal
	}
	if len(w.h.Periodics) > 0 {
		opts.Files = map[string]s3task.FileOptions{periodicType: {NoInput: true}}
		opts.Periodic = w.h.Periodics
	}
	st, err := s3task.NewStore(p.raw.Client, p.raw.Bucket, opts)
	if err != nil {
		return nil, err
	}
	entropy.Use(st, entropy.New(w.cfg.Seed, "lib/"+name))
	probe.Use(st, w.reach)
	p.store = st
	return p, nil
}

// steadyRetries returns c with the SDK's standard retryer, but with a
// backoff without jitter: the SDK draws its jitter from crypto/rand, which
// a replay of the seed could not repeat. Half of the SDK's own upper
// bound: 2^attempt seconds, at most 20 s.
func steadyRetries(c *s3.Client) *s3.Client {
	return s3.New(c.Options(), func(o *s3.Options) {
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
			so.Backoff = retry.BackoffDelayerFunc(func(attempt int, _ error) (time.Duration, error) {
				return min(time.Second<<min(attempt, 10), 20*time.Second) / 2, nil
			})
		})
	})
}

// beganKey is the context key of the time a client call began.
type beganKey struct{}

// stampBegan returns c with a step at the start of each call that puts
// the time into its context, which the requests it sends, resent ones
// included, carry to S3 (see Write.Began).
func stampBegan(c *s3.Client) *s3.Client {
	return s3.New(c.Options(), func(o *s3.Options) {
		o.APIOptions = append(slices.Clone(o.APIOptions), func(st *middleware.Stack) error {
			return st.Initialize.Add(middleware.InitializeMiddlewareFunc("simBegan", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				return next.HandleInitialize(context.WithValue(ctx, beganKey{}, time.Now()), in)
			}), middleware.Before)
		})
	})
}

// beganOf returns when the client call that sent r began, or zero.
func beganOf(r *http.Request) time.Time {
	t, _ := r.Context().Value(beganKey{}).(time.Time)
	return t
}

// applied records a write S3 applied. It runs while S3 serves nothing else.
func (w *World) applied(a s3test.Applied) {
	wr := Write{Seq: w.next(), Time: a.Time, Began: beganOf(a.Request), Proc: procOf(a.Request), Method: a.Method, Key: a.Key, Zombie: isZombie(a.Request)}
	switch {
	case strings.HasSuffix(a.Key, "/status.json") && a.Method == http.MethodPut:
		// released_attempts is read apart from the Task, so records of code
		// without the field decode too.
		var rec struct {
			Record
			Released int `json:"released_attempts"`
		}
		if json.Unmarshal(a.Body, &rec) == nil {
			wr.Record, wr.Released = &rec.Record, rec.Released
			if key := rec.Metadata[s3task.MetaSourceKey]; key != "" && submitted(&rec.Record) {
				w.mu.Lock()
				w.submitted[key+" "+rec.Metadata[s3task.MetaSourceETag]] = true
				w.mu.Unlock()
			}
		}
	case strings.Contains(a.Key, "/output-attempt-"), a.Key == w.prefix+"_wake", a.Key == w.prefix+"_reconciler",
		strings.HasPrefix(a.Key, ingestFolder), strings.HasSuffix(a.Key, "/input"):
		wr.Body = append([]byte(nil), a.Body...)
	}
	if w.bus != nil {
		etag := ""
		if a.Method != http.MethodDelete {
			etag = md5hex(a.Body)
		}
		w.bus.send(wr.Key, etag, wr.Method == http.MethodDelete)
	}
	w.mu.Lock()
	w.h.Writes = append(w.h.Writes, wr)
	if wr.Method == http.MethodDelete && strings.HasSuffix(wr.Key, "/status.json") {
		w.deleted[keyTask(w.prefix, wr.Key)] = true
	}
	w.mu.Unlock()
}

// readGone counts a read by proc of the record at path (the request's
// path, the bucket first) that found none, if the record was deleted.
func (w *World) readGone(proc, path string) {
	_, key, _ := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	id := keyTask(w.prefix, key)
	w.mu.Lock()
	if w.deleted[id] {
		w.h.GoneReads[id+" "+proc]++
	}
	w.mu.Unlock()
}

// summary is what the world reads of a record outside the history.
type summary struct {
	Status        s3task.Status `json:"status"`
	RetryAt       time.Time     `json:"retry_at"`
	NotifyPending bool          `json:"notify_pending"`
}

// state returns the summary as a TaskState.
func (s *summary) state() TaskState {
	return stateOf(&Record{Task: s3task.Task{Status: s.Status, RetryAt: s.RetryAt}, NotifyPending: s.NotifyPending})
}

// records reads every task record in the bucket, without requests.
func (w *World) records() (map[string]*summary, map[string]bool) {
	tasks, markers := map[string]*summary{}, map[string]bool{}
	active := w.prefix + "active/"
	keys := w.mem.Keys(w.prefix)
	for _, key := range keys {
		if name, ok := strings.CutPrefix(key, active); ok && !w.planted[markerTask(name)] {
			markers[markerTask(name)] = true
		}
	}
	for id, t := range w.summaries(keys) {
		if t != nil {
			tasks[id] = t
		}
	}
	return tasks, markers
}

// summaries reads, without requests, the task records among keys: it
// yields each task's ID with its record, or nil if the record does not
// decode. The planted records are left out.
func (w *World) summaries(keys []string) iter.Seq2[string, *summary] {
	return func(yield func(string, *summary) bool) {
		for _, key := range keys {
			if !strings.HasSuffix(key, "/status.json") || w.planted[keyTask(w.prefix, key)] {
				continue
			}
			body, ok := w.mem.Object(key)
			if !ok {
				continue
			}
			var t *summary
			if err := json.Unmarshal(body, &t); err != nil {
				t = nil
			}
			if !yield(keyTask(w.prefix, key), t) {
				return
			}
		}
	}
}

// snapshot records the state of the bucket.
func (w *World) snapshot() {
	tasks, markers := w.records()
	s := Snapshot{Time: time.Now(), Tasks: make(map[string]TaskState, len(tasks)), Markers: markers}
	for id, t := range tasks {
		s.Tasks[id] = t.state()
	}
	w.mu.Lock()
	w.h.Snapshots = append(w.h.Snapshots, s)
	w.mu.Unlock()
}

// settled reports whether every task is finished, notified and unmarked.
// A created task no operator knows of (its Create reported an error) is
// left out: nobody will submit it.
func (w *World) settled() bool {
	keys := w.mem.Keys(w.prefix)
	active := w.prefix + "active/"
	for _, key := range keys {
		if name, ok := strings.CutPrefix(key, active); ok && !w.planted[markerTask(name)] {
			return false // markers are the cheap tell: look no further
		}
	}
	for id, t := range w.summaries(keys) {
		if t == nil {
			return false
		}
		w.mu.Lock()
		_, known := w.index[id]
		w.mu.Unlock()
		switch t.Status {
		case s3task.StatusCreated:
			if known {
				return false
			}
		case s3task.StatusCompleted, s3task.StatusAbandoned:
		case s3task.StatusFailed:
			if !t.RetryAt.IsZero() {
				return false
			}
		default:
			return false
		}
		if t.NotifyPending {
			return false
		}
	}
	return !w.cfg.Ingest || w.ingestSettled(keys)
}

// closed reports whether the world is over (see World.over).
func (w *World) closed() bool {
	select {
	case <-w.over:
		return true
	default:
		return false
	}
}

// sleep waits for d of virtual time, or until the world is over; it
// reports whether the full time passed.
func (w *World) sleep(d time.Duration) bool { return pause(d, w.over) == 0 }

// pause lets d of virtual time pass and returns 0, unless one of stops is
// closed first: then it returns its position, from 1. A nil stop never is.
func pause(d time.Duration, stops ...<-chan struct{}) int {
	t := time.NewTimer(d)
	defer t.Stop()
	cases := make([]reflect.SelectCase, 1+len(stops))
	cases[0] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(t.C)}
	for i, stop := range stops {
		cases[1+i] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(stop)}
	}
	i, _, _ := reflect.Select(cases)
	return i
}

// opNames names the kinds of request counted in World.reqs.
var opNames = [6]string{"GET", "LIST", "HEAD", "PUT", "POST", "DELETE"}

// countRequest counts a request sent by a process, by its kind.
func (w *World) countRequest(r *http.Request) {
	op := s3test.Op(r)
	for i, name := range opNames {
		if name == op {
			w.reqs[i].Add(1)
		}
	}
}

// history returns the recorded history. Call it once every goroutine has
// stopped.
func (w *World) history() *History {
	w.mu.Lock()
	defer w.mu.Unlock()
	h := w.h
	for i, name := range opNames {
		h.Stats["req:"+name] = int(w.reqs[i].Load())
	}
	return &h
}

// simTypes are the task types of the world.
var simTypes = []string{"a", "b", "c"}

// pickTypes draws one or two of the types, in order.
func pickTypes(rng *Rand) []string {
	var types []string
	for len(types) == 0 {
		for _, t := range simTypes {
			if rng.Chance(0.45) {
				types = append(types, t)
			}
		}
	}
	return types
}

// key returns an idempotency key for a new task life: a new one, or half
// the time one that an earlier life used.
func (w *World) key(rng *Rand) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.keys) > 0 && rng.Chance(0.5) {
		return w.keys[rng.IntN(len(w.keys))]
	}
	k := fmt.Sprintf("key-%d", len(w.keys)+1)
	w.keys = append(w.keys, k)
	return k
}

// running returns the records of the tasks worker holds, read without
// requests.
func (w *World) running(worker string) []*Record {
	var out []*Record
	for _, key := range w.mem.Keys(w.prefix) {
		if !strings.HasSuffix(key, "/status.json") || w.planted[keyTask(w.prefix, key)] {
			continue
		}
		body, ok := w.mem.Object(key)
		if !ok {
			continue
		}
		var t Record
		if json.Unmarshal(body, &t) == nil && t.Status == s3task.StatusRunning && t.WorkerID == worker {
			out = append(out, &t)
		}
	}
	return out
}
