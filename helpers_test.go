package s3task_test

// The helpers the external tests (package s3task_test) share: an
// environment on the in-process S3 of s3tasktest that prepares tasks and
// looks at objects behind the library's back, waits, a worker run in the
// background, and a transport wrapper that logs requests. A test file keeps
// only the helpers that are its own.

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/s3test"
	"github.com/s3task/s3task/s3tasktest"
)

// testWait bounds every wait for something that should happen in a test
// that runs in a synctest bubble (see bubble), where time is virtual and
// the bound is the library's to meet, not the machine's. A test that runs
// in real time waits until a little before its deadline (see waitBound):
// how long a loaded machine takes is no failure; what never happens is.
const testWait = 20 * time.Second

// bubbled holds the names of the tests running in a synctest bubble.
var bubbled sync.Map

// bubble runs test in parallel with the others, in a testing/synctest
// bubble of its own: the clock is virtual (it starts at 2000-01-01 and
// moves only when every goroutine of the bubble waits), so what the test
// asserts of timeouts, leases and intervals holds however busy the
// machine is. The test makes its env inside the bubble.
func bubble(t *testing.T, test func(t *testing.T)) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		bubbled.Store(t.Name(), true)
		t.Cleanup(func() { bubbled.Delete(t.Name()) }) // the last clean-up: the others may wait
		test(t)
	})
}

// runsInBubble reports whether t, or the test it is a subtest of, runs in a
// bubble.
func runsInBubble(t *testing.T) bool {
	for name := t.Name(); ; {
		if _, ok := bubbled.Load(name); ok {
			return true
		}
		i := strings.LastIndexByte(name, '/')
		if i < 0 {
			return false
		}
		name = name[:i]
	}
}

// waitBound returns when a wait of t that started now gives up: testWait
// later in a bubble; in real time, a little before the test's deadline
// (go test -timeout), so that the test fails naming what it waited for
// rather than the binary panicking, or never (the zero time) if the test
// has no deadline.
func waitBound(t *testing.T) time.Time {
	if runsInBubble(t) {
		return time.Now().Add(testWait)
	}
	deadline, ok := t.Deadline()
	if !ok {
		return time.Time{}
	}
	return deadline.Add(-min(time.Minute, time.Until(deadline)/2))
}

// testInput is the input of every task that env prepares.
const testInput = "a,b\n1,2\n"

// env is an in-process S3 (see s3tasktest) with a Store that prepares and
// inspects tasks, and direct access to the objects, to plant what a test
// needs or to look behind the library's back. Reading an object takes no
// request; writing one takes a request of a plain client, which no store
// counts.
type env struct {
	ctx   context.Context
	srv   *s3tasktest.S3
	opts  s3task.StoreOptions // the options of store and of newStore(t, nil)
	store *s3task.Store       // prepares and inspects tasks; its requests are not counted
	count s3test.Counter      // counts the requests of the store setup returns
	raw   s3test.Objects      // writes objects with a plain client
}

// newEnv returns an env on a new, empty bucket whose store has opts (nil
// for the defaults).
func newEnv(t *testing.T, opts *s3task.StoreOptions) *env {
	t.Helper()
	srv := s3tasktest.NewS3(t)
	e := &env{ctx: t.Context(), srv: srv, raw: s3test.Objects{Client: srv.Client(), Bucket: srv.Bucket()}}
	if opts != nil {
		e.opts = *opts
	}
	e.store = e.newStore(t, nil)
	return e
}

// setup returns a new env and, for the test, a Store with the env's
// options whose requests e.count counts.
func setup(t *testing.T, opts *s3task.StoreOptions) (*s3task.Store, *env) {
	t.Helper()
	e := newEnv(t, opts)
	return e.newStore(t, nil, e.count.Wrap), e
}

// newStore returns another Store on the bucket, with its own client, as
// another machine would have: with opts, or the env's options if opts is
// nil. Each wrap wraps its client's transport, innermost first. In a
// bubble, a busy-loop guard (s3test.SpinGuard) wraps it first.
func (e *env) newStore(t *testing.T, opts *s3task.StoreOptions, wrap ...func(http.RoundTripper) http.RoundTripper) *s3task.Store {
	t.Helper()
	if opts == nil {
		opts = &e.opts
	}
	if runsInBubble(t) {
		wrap = append([]func(http.RoundTripper) http.RoundTripper{s3test.SpinGuard(t)}, wrap...)
	}
	return e.srv.NewStore(t, opts, wrap...)
}

// httpClient returns an HTTP client that reaches the in-process S3 as the
// stores' clients do, to send presigned requests with.
func (e *env) httpClient() *http.Client {
	var rt http.RoundTripper
	e.srv.Client(func(next http.RoundTripper) http.RoundTripper { rt = next; return next })
	return &http.Client{Transport: rt}
}

func (e *env) recordKey(id string) string { return e.store.Prefix() + id + "/status.json" }
func (e *env) folder(id string) string    { return e.store.Prefix() + id + "/" }

func (e *env) inputKey(t *testing.T, id string) string {
	t.Helper()
	key, err := e.store.InputKey(id)
	if err != nil {
		t.Fatalf("InputKey(%s): %v", id, err)
	}
	return key
}

func (e *env) outputKey(t *testing.T, id string, n int) string {
	t.Helper()
	key, err := e.store.OutputKey(id, n)
	if err != nil {
		t.Fatalf("OutputKey(%s, %d): %v", id, n, err)
	}
	return key
}

// object returns the bytes at key, and whether there is an object.
func (e *env) object(key string) ([]byte, bool) { return e.srv.Object(key) }

// exists reports whether there is an object at key.
func (e *env) exists(key string) bool { _, ok := e.srv.Object(key); return ok }

// put writes an object, whatever is there, and returns its ETag.
func (e *env) put(t *testing.T, key string, body []byte) string {
	t.Helper()
	etag, err := e.raw.Put(e.ctx, key, body)
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	return etag
}

func (e *env) del(t *testing.T, key string) {
	t.Helper()
	if err := e.raw.Delete(e.ctx, key); err != nil {
		t.Fatalf("delete %s: %v", key, err)
	}
}

// head returns an object's ETag, as S3 reports it, and its size.
func (e *env) head(t *testing.T, key string) (string, int64) {
	t.Helper()
	body, etag, err := e.raw.Get(e.ctx, key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	return etag, int64(len(body))
}

// snapshot returns every object under prefix ("" for the whole bucket)
// with its bytes.
func (e *env) snapshot(prefix string) map[string]string {
	m := map[string]string{}
	for _, key := range e.srv.Keys(prefix) {
		if body, ok := e.srv.Object(key); ok {
			m[key] = string(body)
		}
	}
	return m
}

// stored is a task's record as the library writes it: the Task, and the
// bookkeeping kept beside it that a Task does not show.
type stored struct {
	s3task.Task
	InputETag      string   `json:"input_etag,omitempty"`
	NotifyPending  bool     `json:"notify_pending,omitempty"`
	Writes         int64    `json:"writes,omitempty"`
	PriorRevisions []string `json:"prior_revisions,omitempty"`
}

// stored reads task id's record straight from the server, no request.
func (e *env) stored(t *testing.T, id string) *stored {
	t.Helper()
	body, ok := e.object(e.recordKey(id))
	if !ok {
		t.Fatalf("no record of %s", id)
	}
	var r stored
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("record of %s: %v", id, err)
	}
	return &r
}

func (e *env) get(t *testing.T, id string) *s3task.Task {
	t.Helper()
	task, err := e.store.Get(e.ctx, id)
	if err != nil {
		t.Fatalf("Get(%s): %v", id, err)
	}
	return task
}

// submit creates a task named name with testInput as its input and submits
// it.
func (e *env) submit(t *testing.T, name string) *s3task.Task {
	t.Helper()
	return s3tasktest.Submit(t, e.store, s3task.CreateParams{Name: name}, []byte(testInput))
}

// now is a millisecond-precision UTC time like the ones in records.
func now() time.Time { return time.Now().UTC().Truncate(time.Millisecond) }

// task creates a task and brings it to state; see prepare.
func (e *env) task(t *testing.T, state string) *s3task.Task {
	t.Helper()
	task, err := e.store.Create(e.ctx, s3task.CreateParams{Name: state + " task"})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return e.prepare(t, task, state)
}

// prepare brings a created task to state and returns its record as stored.
// States: created-no-input, created (with testInput), queued, running,
// completed (with the output of attempt 1), failed (for good), failed-waiting
// (a retry in an hour), failed-exhausted (every attempt used), abandoned.
// The records a worker would have written are written as it would have
// written them, with the DueAt it would have set, and the markers are as it
// would have left them: the one the record calls for if it needs one, no
// other.
func (e *env) prepare(t *testing.T, task *s3task.Task, state string) *s3task.Task {
	t.Helper()
	id := task.ID
	if state == "created-no-input" {
		return task
	}
	if err := e.store.UploadInput(e.ctx, id, strings.NewReader(testInput)); err != nil {
		t.Fatalf("UploadInput(%s): %v", id, err)
	}
	switch state {
	case "created":
		return e.get(t, id)
	case "abandoned":
		got, err := e.store.Cancel(e.ctx, id, "not needed")
		if err != nil {
			t.Fatalf("Cancel(%s): %v", id, err)
		}
		return got
	}
	if _, err := e.store.Submit(e.ctx, id); err != nil {
		t.Fatalf("Submit(%s): %v", id, err)
	}
	inAnHour := now().Add(time.Hour)
	switch state {
	case "queued":
	case "running":
		e.change(t, id, func(x *stored) {
			x.Status, x.Attempt, x.WorkerID, x.LeaseExpiresAt = s3task.StatusRunning, 1, "worker-elsewhere", inAnHour
			x.DueAt = inAnHour.Add(s3task.DefaultClockMargin)
		})
	case "completed":
		key := e.outputKey(t, id, 1)
		e.put(t, key, []byte("output of attempt 1"))
		e.change(t, id, func(x *stored) { x.Status, x.Attempt, x.OutputPath = s3task.StatusCompleted, 1, key })
	case "failed", "failed-exhausted":
		e.change(t, id, func(x *stored) {
			x.Status, x.Attempt, x.LastError, x.ErrorCategory = s3task.StatusFailed, 1, "bad row", s3task.CategoryPermanent
			if state == "failed-exhausted" {
				x.Attempt, x.MaxAttempts = 3, 3
			}
		})
	case "failed-waiting":
		e.change(t, id, func(x *stored) {
			x.Status, x.Attempt, x.LastError, x.ErrorCategory = s3task.StatusFailed, 1, "timeout", s3task.CategoryTransient
			x.RetryAt, x.DueAt = inAnHour, inAnHour
		})
	default:
		t.Fatalf("unknown state %q", state)
	}
	return e.get(t, id)
}

// rewrite reads a record, lets edit change it, and writes it back raw, as a
// worker's write would look: with a fresh revision and the server's time as
// updated_at. It leaves the markers alone; change moves them too.
func (e *env) rewrite(t *testing.T, id string, edit func(*stored)) *s3task.Task {
	t.Helper()
	r := e.stored(t, id)
	edit(r)
	e.writeRecord(t, r)
	return &r.Task
}

// writeRecord writes task as its record, raw, with a fresh revision and the
// server's time as updated_at.
func (e *env) writeRecord(t *testing.T, task *stored) {
	t.Helper()
	task.Revision = strings.ToLower(s3task.NewID())
	task.UpdatedAt = e.srv.Now().UTC().Truncate(time.Millisecond)
	body, err := json.Marshal(task)
	if err != nil {
		t.Fatal(err)
	}
	e.put(t, e.recordKey(task.ID), body)
}

// change is rewrite with the markers moved as the library moves them: the
// marker the new record calls for, if it needs one, is written before the
// record, and the old record's marker deleted after it.
func (e *env) change(t *testing.T, id string, edit func(*stored)) {
	t.Helper()
	task := e.stored(t, id)
	old := e.markerCalledFor(task)
	edit(task)
	want := e.markerCalledFor(task)
	if want != "" && want != old {
		e.put(t, want, nil)
	}
	e.writeRecord(t, task)
	if old != "" && old != want {
		e.del(t, old)
	}
}

// dueKeyLayout is how a marker key spells its due time (see marker.go):
// fixed width UTC to the millisecond, so that keys sort by time.
const dueKeyLayout = "20060102T150405.000Z"

// dueMarkerKey returns the key of the marker the record task calls for under
// prefix: <prefix>active/<due>_<id>, after its DueAt, or the plain
// <prefix>active/<id> of earlier versions for a record without one.
func dueMarkerKey(prefix string, task *s3task.Task) string {
	if task.DueAt.IsZero() {
		return prefix + "active/" + task.ID
	}
	return prefix + "active/" + task.DueAt.UTC().Format(dueKeyLayout) + "_" + task.ID
}

func (e *env) dueMarkerKey(task *s3task.Task) string { return dueMarkerKey(e.store.Prefix(), task) }

// datedMarker returns the key of a marker of task id due at at.
func (e *env) datedMarker(id string, at time.Time) string {
	return e.store.Prefix() + "active/" + at.UTC().Format(dueKeyLayout) + "_" + id
}

// needsMarker says whether a task needs a marker: it waits for a worker
// (queued, running, or failed with a retry due), or its OnTerminal notice
// is still to go out.
func needsMarker(task *stored) bool {
	switch {
	case task.NotifyPending, task.Status == s3task.StatusQueued, task.Status == s3task.StatusRunning:
		return true
	}
	return task.Status == s3task.StatusFailed && !task.RetryAt.IsZero()
}

// markerCalledFor returns the key of the marker task needs, "" if none.
func (e *env) markerCalledFor(task *stored) string {
	if !needsMarker(task) {
		return ""
	}
	return e.dueMarkerKey(&task.Task)
}

// markers returns every marker key of task id, whatever its due time, in
// key order.
func (e *env) markers(id string) []string {
	dir := e.store.Prefix() + "active/"
	var keys []string
	for _, key := range e.srv.Keys(dir) {
		if key == dir+id || strings.HasSuffix(key, "_"+id) {
			keys = append(keys, key)
		}
	}
	return keys
}

// markerKey returns the key of task id's marker, the newest by key if it
// has several, or the plain key of earlier versions if it has none, so that
// a test can plant one there.
func (e *env) markerKey(id string) string {
	if keys := e.markers(id); len(keys) > 0 {
		return keys[len(keys)-1]
	}
	return e.store.Prefix() + "active/" + id
}

func (e *env) hasMarker(id string) bool { return len(e.markers(id)) > 0 }

// hasOwnMarker reports whether the marker task's record calls for is there.
func (e *env) hasOwnMarker(task *s3task.Task) bool { return e.exists(e.store.MarkerKey(task)) }

// wantMarkers fails t unless task id's markers are exactly want.
func (e *env) wantMarkers(t *testing.T, id string, want ...string) {
	t.Helper()
	if diff := cmp.Diff(want, e.markers(id), cmpEmpty); diff != "" {
		t.Errorf("markers of task %s (-want +got):\n%s", id, diff)
	}
}

// cmpEmpty makes a nil and an empty slice equal.
var cmpEmpty = cmp.Transformer("empty", func(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
})

// setMarker makes task id's markers the one its record calls for, or none,
// whatever was there. A task without a readable record gets one due now.
func (e *env) setMarker(t *testing.T, id string, on bool) {
	t.Helper()
	for _, key := range e.markers(id) {
		e.del(t, key)
	}
	if !on {
		return
	}
	if task, err := e.store.Get(e.ctx, id); err == nil {
		e.put(t, e.store.MarkerKey(task), nil)
	} else {
		e.put(t, e.datedMarker(id, e.srv.Now()), nil)
	}
}

// giveUp returns a channel that delivers once waitBound of a wait of t
// that starts now passes; nil, which never delivers, if it never does.
func giveUp(t *testing.T) <-chan time.Time {
	bound := waitBound(t)
	if bound.IsZero() {
		return nil
	}
	return time.After(time.Until(bound))
}

// waitUntil checks cond on a short ticker until it holds, failing the test
// once waitBound passes.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitUntilOr(t, what, cond, nil)
}

// waitUntilOr is waitUntil that adds what describe says to the failure.
func waitUntilOr(t *testing.T, what string, cond func() bool, describe func() string) {
	t.Helper()
	waitEvery(t, 5*time.Millisecond, what, cond, describe)
}

// waitEvery is waitUntilOr that checks cond every step: less often, for a
// cond that sends requests to a real server.
func waitEvery(t *testing.T, step time.Duration, what string, cond func() bool, describe func() string) {
	t.Helper()
	start, bound := time.Now(), waitBound(t)
	tick := time.NewTicker(step)
	defer tick.Stop()
	for !cond() {
		if !bound.IsZero() && time.Now().After(bound) {
			if describe != nil {
				what += ":\n" + describe()
			}
			t.Fatalf("gave up after %s waiting until %s", time.Since(start).Round(time.Millisecond), what)
		}
		<-tick.C
	}
}

// await returns the next value from ch, failing the test once waitBound
// passes.
func await[T any](t *testing.T, ch <-chan T, what string) (v T) {
	t.Helper()
	waitUntil(t, what, func() bool {
		select {
		case v = <-ch:
			return true
		default:
			return false
		}
	})
	return v
}

// offer sends v on ch unless ch is full: a hook must never block its
// worker.
func offer[T any](ch chan<- T, v T) {
	select {
	case ch <- v:
	default:
	}
}

// race runs every call at once, each on its own goroutine, all released
// together, and returns once they all have.
func race(calls ...func()) {
	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, call := range calls {
		wg.Go(func() {
			<-start
			call()
		})
	}
	close(start)
	wg.Wait()
}

// succeed is a handler that completes every task, with no output.
var succeed = s3task.HandlerFunc(func(context.Context, *s3task.Job) error { return nil })

// quickWorker returns the options of a worker that polls often, holds long
// leases (none runs out by itself: a test that needs one expired moves the
// server's clock), retries at once and runs no reconcile of its own.
func quickWorker(id string, hooks s3task.Hooks) *s3task.WorkerOptions {
	return &s3task.WorkerOptions{
		ID:                id,
		Concurrency:       2,
		PollInterval:      5 * time.Millisecond,
		MaxPollInterval:   50 * time.Millisecond,
		LeaseDuration:     10 * time.Second,
		HeartbeatInterval: time.Second,
		ClockMargin:       2 * time.Second,
		Backoff:           func(int) time.Duration { return 0 },
		ShutdownTimeout:   time.Second,
		ReconcileInterval: -1,
		Hooks:             hooks,
	}
}

// runWorker runs a worker in the background until stop is called (once or
// more) or the test ends. Stopping fails the test if Run returns an error,
// or if it has not returned when waitBound passes.
func runWorker(t *testing.T, store *s3task.Store, h s3task.Handler, opts *s3task.WorkerOptions) (stop func()) {
	t.Helper()
	w, err := s3task.NewWorker(store, h, opts)
	if err != nil {
		t.Fatalf("NewWorker: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	stop = sync.OnceFunc(func() {
		cancel()
		if err := await(t, done, "worker "+w.ID()+" to return from Run"); err != nil {
			t.Errorf("worker %s: Run returned %v", w.ID(), err)
		}
	})
	t.Cleanup(stop)
	return stop
}

// isPut reports whether r is a PUT of an object whose key is or ends in
// /key: isPut(r, "status.json") for any record.
func isPut(r *http.Request, key string) bool {
	return r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/"+key)
}

// objectKey returns the key of the object r addresses, without the bucket.
func objectKey(r *http.Request) string {
	_, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	return key
}

// heldCall runs call in the background on a Store of its own (its client
// wrapped by wrap too) that holds back the first PUT of a key match accepts
// (see s3test.Hold), and returns once that PUT is held, so that the test can
// act while the call is under way; what names the wait. release lets the
// PUT go on, and done then yields call's error.
func (e *env) heldCall(t *testing.T, what string, match func(key string) bool, call func(st *s3task.Store) (*s3task.Task, error),
	wrap ...func(http.RoundTripper) http.RoundTripper) (release func(), done <-chan error) {
	t.Helper()
	hold := s3test.NewHold(t, func(r *http.Request) bool { return r.Method == http.MethodPut && match(objectKey(r)) })
	st := e.newStore(t, nil, append([]func(http.RoundTripper) http.RoundTripper{hold.Wrap}, wrap...)...)
	errs := make(chan error, 1)
	go func() {
		_, err := call(st)
		errs <- err
	}()
	await(t, hold.Arrived(), what)
	return hold.Release, errs
}

// recorder is a transport wrapper that logs each request as "OP key" (OP as
// s3test.Op names it, the key without the bucket), with S3's answer. It is
// safe for concurrent use.
type recorder struct {
	mu  sync.Mutex
	log []*recorded
}

type recorded struct {
	entry  string
	status int // of the answer; 0 while there is none, or if the request failed
}

func (r *recorder) wrap(next http.RoundTripper) http.RoundTripper {
	return s3tasktest.RoundTripFunc(func(req *http.Request) (*http.Response, error) {
		rec := &recorded{entry: s3test.Op(req) + " " + objectKey(req)}
		r.mu.Lock()
		r.log = append(r.log, rec)
		r.mu.Unlock()
		resp, err := next.RoundTrip(req)
		if err == nil {
			r.mu.Lock()
			rec.status = resp.StatusCode
			r.mu.Unlock()
		}
		return resp, err
	})
}

// reset forgets every request logged so far.
func (r *recorder) reset() {
	r.mu.Lock()
	r.log = nil
	r.mu.Unlock()
}

// index returns the position of entry in the log, or -1.
func (r *recorder) index(entry string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, rec := range r.log {
		if rec.entry == entry {
			return i
		}
	}
	return -1
}

// answers returns the status of S3's answer to each request logged as
// entry, in order.
func (r *recorder) answers(entry string) []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var codes []int
	for _, rec := range r.log {
		if rec.entry == entry {
			codes = append(codes, rec.status)
		}
	}
	return codes
}

// succeeded returns how many requests logged as entry S3 answered with a
// 2xx status.
func (r *recorder) succeeded(entry string) int {
	n := 0
	for _, code := range r.answers(entry) {
		if code/100 == 2 {
			n++
		}
	}
	return n
}

func (r *recorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	entries := make([]string, len(r.log))
	for i, rec := range r.log {
		entries[i] = rec.entry
	}
	return strings.Join(entries, "; ")
}
