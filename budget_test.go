package s3task_test

// The request budget (issue 35): what each public call and each phase of a
// task's life costs in S3 requests, pinned exactly, so that a change that
// adds a request fails here until its budget is raised on purpose.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
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

// ledger is a transport wrapper that logs, while it is on, each request
// as "METHOD kind" (see requestKind), followed by " →status" when S3's
// answer is not a 2xx. It is safe for concurrent use.
type ledger struct {
	prefix string
	mu     sync.Mutex
	on     bool
	log    []*ledgerEntry
}

type ledgerEntry struct {
	label  string
	status int // 0 while there is no answer, -1 if the request failed
}

func (l *ledger) wrap(next http.RoundTripper) http.RoundTripper {
	return s3tasktest.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		entry := &ledgerEntry{label: requestKind(l.prefix, r)}
		l.mu.Lock()
		if l.on {
			l.log = append(l.log, entry)
		}
		l.mu.Unlock()
		resp, err := next.RoundTrip(r)
		l.mu.Lock()
		entry.status = -1
		if err == nil {
			entry.status = resp.StatusCode
		}
		l.mu.Unlock()
		return resp, err
	})
}

// start forgets what was logged and logs from now on.
func (l *ledger) start() {
	l.mu.Lock()
	l.log, l.on = nil, true
	l.mu.Unlock()
}

// stop ends the logging and returns the requests logged since start, in the
// order they were sent.
func (l *ledger) stop() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.on = false
	out := make([]string, len(l.log))
	for i, e := range l.log {
		out[i] = e.label
		switch {
		case e.status < 0:
			out[i] += " →error"
		case e.status == 0:
			out[i] += " →pending"
		case e.status/100 != 2:
			out[i] += fmt.Sprintf(" →%d", e.status)
		}
	}
	return out
}

// requestKind names a request by its method (LIST for a listing, as
// s3test.Op has it) and the kind of object it touches under prefix: record,
// marker, wake, input, output, presence... A conditional write or read
// says so (If-Match, If-None-Match).
func requestKind(prefix string, r *http.Request) string {
	op := s3test.Op(r)
	if op == "LIST" {
		q := r.URL.Query()
		switch p := strings.TrimPrefix(q.Get("prefix"), prefix); {
		case p == "active/" && strings.HasPrefix(q.Get("start-after"), prefix+"active/3"):
			return "LIST legacy markers"
		case p == "active/":
			return "LIST markers"
		case p == "_workers/":
			return "LIST presence"
		case p == "":
			return "LIST tasks"
		default:
			return "LIST " + p
		}
	}
	kind := "object"
	switch rest := strings.TrimPrefix(objectKey(r), prefix); {
	case strings.HasSuffix(rest, "/status.json"):
		kind = "record"
	case strings.HasPrefix(rest, "active/"):
		kind = "marker"
	case rest == "_wake":
		kind = "wake"
	case rest == "_paused":
		kind = "paused"
	case rest == "_reconciler":
		kind = "reconciler lease"
	case strings.HasPrefix(rest, "_workers/"):
		kind = "presence"
	case strings.HasPrefix(rest, "_keys/"):
		kind = "key"
	case strings.Contains(rest, "/input"):
		kind = "input"
	case strings.Contains(rest, "/upload"):
		kind = "upload"
	case strings.Contains(rest, "/output-attempt-"):
		kind = "output"
	default:
		kind = "object " + rest
	}
	label := op + " " + kind
	switch {
	case r.Header.Get("If-Match") != "":
		label += " If-Match"
	case r.Header.Get("If-None-Match") != "":
		label += " If-None-Match"
	}
	return label
}

// spent is one kind of request a phase sends: how many, and why.
type spent struct {
	req string // as the ledger logs it
	n   int
	why string
}

// budgetEnv is what a row of TestRequestBudget runs in: an env, a Store
// for the application (st) and one for workers (ws), both with their
// requests logged by the ledger, and an HTTP client for presigned requests
// logged too. env.store prepares tasks unseen.
type budgetEnv struct {
	*env
	t      *testing.T
	ledger *ledger
	st, ws *s3task.Store
	http   *http.Client
	done   []string // what the phase sent, once it is over
}

func newBudgetEnv(t *testing.T) *budgetEnv {
	e := newEnv(t, nil)
	b := &budgetEnv{env: e, t: t, ledger: &ledger{prefix: e.store.Prefix()}}
	b.st = e.newStore(t, nil, b.ledger.wrap)
	b.ws = e.newStore(t, nil, b.ledger.wrap)
	b.http = &http.Client{Transport: b.ledger.wrap(e.httpClient().Transport)}
	// The wake object exists in a bucket that has seen a submit, through
	// the application's Store, which wrote it last and keeps a copy: the
	// steady state the budget is for. That task is gone from the queue.
	first := e.task(t, "created")
	if _, err := b.st.Submit(e.ctx, first.ID); err != nil {
		t.Fatalf("Submit: %v", err)
	}
	if _, err := e.store.Cancel(e.ctx, first.ID, "only made the wake object"); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	return b
}

// wroteLast has the application's Store announce a task, unseen, so that
// it wrote the wake object last, as in the steady state: the phase's
// preparation, through another Store, announced tasks of its own. Its
// copy was stale then, so it reads the object first for a minute; the
// minute passes too.
func (b *budgetEnv) wroteLast() {
	task := b.task(b.t, "created")
	_, err := b.st.Submit(b.ctx, task.ID)
	b.call("Submit", err)
	time.Sleep(time.Minute)
}

// periodicStore returns a Store, through the ledger, that declares a
// nightly periodic task of an input-less type, as the holder's Store in a
// fleet does; it has written the wake object last, as in the steady state.
func (b *budgetEnv) periodicStore() *s3task.Store {
	b.t.Helper()
	opts := b.opts
	opts.Files = map[string]s3task.FileOptions{"export": {NoInput: true}}
	opts.Periodic = []s3task.Periodic{{
		Name:     "nightly",
		Schedule: s3task.Daily(2, 0, time.UTC),
		Params:   s3task.CreateParams{Type: "export"},
	}}
	ps := b.newStore(b.t, &opts, b.ledger.wrap)
	task := b.task(b.t, "created")
	_, err := ps.Submit(b.ctx, task.ID)
	b.call("Submit", err)
	time.Sleep(time.Minute)
	return ps
}

// begin starts the phase: from now on requests count.
func (b *budgetEnv) begin() { b.ledger.start() }

// end ends the phase once every goroutine of the bubble is blocked: the
// requests it set off are all sent.
func (b *budgetEnv) end() {
	synctest.Wait()
	b.done = b.ledger.stop()
}

// budgetHandler runs as the test says: each attempt tells started, then
// returns what the test sends on outcome, or its context's error.
type budgetHandler struct {
	started chan *s3task.Job
	outcome chan error
}

func newBudgetHandler() *budgetHandler {
	return &budgetHandler{started: make(chan *s3task.Job, 1), outcome: make(chan error, 1)}
}

func (h *budgetHandler) Work(ctx context.Context, job *s3task.Job) error {
	h.started <- job
	select {
	case err := <-h.outcome:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// budgetWorker returns worker options at the defaults, but for an ID, no
// reconciler (its turns are a fleet's, not a task's), and opts' changes.
func budgetWorker(change ...func(*s3task.WorkerOptions)) *s3task.WorkerOptions {
	o := &s3task.WorkerOptions{ID: "budget-worker", ReconcileInterval: -1}
	for _, c := range change {
		c(o)
	}
	return o
}

// run starts a worker on b.ws with h and opts, and returns it with a
// function that stops it and waits until Run returns (also at the test's
// end).
func (b *budgetEnv) run(h s3task.Handler, opts *s3task.WorkerOptions) (*s3task.Worker, func()) {
	t := b.t
	t.Helper()
	w, err := s3task.NewWorker(b.ws, h, opts)
	if err != nil {
		t.Fatalf("NewWorker: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	stop := sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	t.Cleanup(stop)
	return w, stop
}

// queued prepares a queued task unseen, and returns it.
func (b *budgetEnv) queued(name string) *s3task.Task { return b.submit(b.t, name) }

// claimed starts a worker (defaults; see budgetWorker) that claims a
// queued task, and returns once its handler runs and the claim's requests
// are done, with the handler, to end the attempt, and the worker's stop.
func (b *budgetEnv) claimed(change ...func(*s3task.WorkerOptions)) (*budgetHandler, func()) {
	b.queued("to claim")
	h := newBudgetHandler()
	_, stop := b.run(h, budgetWorker(change...))
	<-h.started
	synctest.Wait()
	return h, stop
}

// call fails the test if a call that prepares or makes the phase failed.
func (b *budgetEnv) call(what string, err error) {
	b.t.Helper()
	if err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// upload sends the input through the presigned PUT of up.
func (b *budgetEnv) upload(up *s3task.Upload, data []byte) {
	t := b.t
	t.Helper()
	req, err := http.NewRequestWithContext(b.ctx, up.Put.Method, up.Put.URL, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range up.Put.Header {
		if !strings.EqualFold(k, "Host") {
			req.Header[k] = vs
		}
	}
	resp, err := b.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("presigned upload: %s", resp.Status)
	}
}

// download fetches a completed task's output as an application does:
// PresignDownload and a GET of the URL.
func (b *budgetEnv) download(id string) []byte {
	t := b.t
	t.Helper()
	pr, err := b.st.PresignDownload(b.ctx, id, time.Minute)
	if err != nil {
		t.Fatalf("PresignDownload: %v", err)
	}
	resp, err := b.http.Get(pr.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("presigned download: %s", resp.Status)
	}
	return body
}

// Reasons shared by several rows.
const (
	whyClaimRead   = "the record and its ETag, for the claim's compare-and-set"
	whyClaimMarker = "the marker moves to the lease's end before the record changes: polls pass over a running task at one LIST whatever the backlog, and find it again if the lease runs out"
	whyClaim       = "the claim: queued → running with a lease, compare-and-set"
	whyClaimDelete = "the queued task's marker, replaced by the lease's"
	whyWakeRead    = "read the wake object, to add this marker to its announcements by compare-and-set"
	whyWakeWrite   = "announce the marker to idle workers: their conditional GET sees a change, and each visits the task named, with no LIST"
	whyListMarkers = "discovery: the due markers, read from the head of the folder in one page"
	whyEndDelete   = "the lease's marker: the task no longer needs a worker"
	whyPresencePut = "the worker's presence object, for Store.Workers (every PresenceInterval)"
	whyPresenceDel = "the worker's presence object, removed as Run returns"
	whyDownload    = "PresignDownload: only a completed task gets a download URL"
)

// budgetRows are the phases and calls whose requests TestRequestBudget
// pins: the requests each sends, by kind, and why. BENCHMARKS.md, section
// 18, prints this table.
var budgetRows = []struct {
	phase string
	want  []spent
	run   func(b *budgetEnv)
}{
	{phase: "Create", want: []spent{
		{"PUT record If-None-Match", 1, "the record, create-only: it never replaces another task's"},
	}, run: func(b *budgetEnv) {
		b.begin()
		_, err := b.st.Create(b.ctx, s3task.CreateParams{Name: "t"})
		b.call("Create", err)
		b.end()
	}},
	{phase: "Create with a Key", want: []spent{
		{"PUT key If-None-Match", 1, "the key's object, naming the new task's ID, create-only: the first Create with the key wins"},
		{"PUT record If-None-Match", 1, "the record, create-only"},
	}, run: func(b *budgetEnv) {
		b.begin()
		_, err := b.st.Create(b.ctx, s3task.CreateParams{Name: "t", Key: "order-1"})
		b.call("Create", err)
		b.end()
	}},
	{phase: "Create with a Key, again", want: []spent{
		{"PUT key If-None-Match →412", 1, "tried as for a new key: one request fewer for the first Create, one more for a repeat"},
		{"GET key", 1, "the ID of the task the key names"},
		{"GET record", 1, "that task, returned as it is now"},
	}, run: func(b *budgetEnv) {
		_, err := b.store.Create(b.ctx, s3task.CreateParams{Name: "t", Key: "order-1"})
		b.call("Create", err)
		b.begin()
		_, err = b.st.Create(b.ctx, s3task.CreateParams{Name: "t", Key: "order-1"})
		b.call("Create", err)
		b.end()
	}},
	{phase: "CreateForUpload", want: []spent{
		{"PUT record If-None-Match", 1, "the record; the upload URL is signed locally, no read needed right after the create"},
	}, run: func(b *budgetEnv) {
		b.begin()
		_, _, err := b.st.CreateForUpload(b.ctx, s3task.CreateParams{Name: "t"}, time.Minute)
		b.call("CreateForUpload", err)
		b.end()
	}},
	{phase: "presigned upload", want: []spent{
		{"PUT input If-None-Match", 1, "the file, from the client straight to S3; create-only, so the input Submit verifies cannot be replaced"},
	}, run: func(b *budgetEnv) {
		_, up, err := b.store.CreateForUpload(b.ctx, s3task.CreateParams{Name: "t"}, time.Minute)
		b.call("CreateForUpload", err)
		b.begin()
		b.upload(up, []byte(testInput))
		b.end()
	}},
	{phase: "UploadInput", want: []spent{
		{"GET record", 1, "only a created task takes an input (ErrNotFound, TransitionError otherwise)"},
		{"PUT input If-None-Match", 1, "the file, create-only"},
	}, run: func(b *budgetEnv) {
		task, err := b.store.Create(b.ctx, s3task.CreateParams{Name: "t"})
		b.call("Create", err)
		b.begin()
		b.call("UploadInput", b.st.UploadInput(b.ctx, task.ID, strings.NewReader(testInput)))
		b.end()
	}},
	{phase: "Enqueue (Create, UploadInput and Submit in one call)", want: []spent{
		{"PUT record If-None-Match", 1, "the record, create-only"},
		{"PUT input If-None-Match", 1, "the file, create-only; the record just written is the upload's check, with no read"},
		{"HEAD input", 1, "as Submit: the input is there, within MaxInputSize; its ETag is pinned for the worker's read"},
		{"PUT marker", 1, "as Submit"},
		{"PUT record If-Match", 1, "created → queued, over the ETag the create got: no read"},
		{"PUT wake If-Match", 1, whyWakeWrite + "; over this Store's copy"},
	}, run: func(b *budgetEnv) {
		b.begin()
		_, err := b.st.Enqueue(b.ctx, s3task.CreateParams{Name: "t"}, strings.NewReader(testInput))
		b.call("Enqueue", err)
		b.end()
	}},
	{phase: "Submit", want: []spent{
		{"GET record", 1, "status and ETag, for the compare-and-set"},
		{"HEAD input", 1, "the input is there, within MaxInputSize; its ETag is pinned for the worker's read"},
		{"PUT marker", 1, "makes the task findable by the workers' LIST, before it turns queued"},
		{"PUT record If-Match", 1, "created → queued"},
		{"PUT wake If-Match", 1, whyWakeWrite + "; written over the copy this Store keeps of what it wrote last, with no read: no other process changed it since"},
	}, run: func(b *budgetEnv) {
		task := b.task(b.t, "created")
		b.begin()
		_, err := b.st.Submit(b.ctx, task.ID)
		b.call("Submit", err)
		b.end()
	}},
	{phase: "Submit, a Store's first", want: []spent{
		{"GET record", 1, "as Submit"},
		{"HEAD input", 1, "as Submit"},
		{"PUT marker", 1, "as Submit"},
		{"PUT record If-Match", 1, "as Submit"},
		{"GET wake", 1, whyWakeRead + " (this Store has no copy of it yet)"},
		{"PUT wake If-Match", 1, whyWakeWrite},
	}, run: func(b *budgetEnv) {
		task := b.task(b.t, "created")
		b.begin()
		_, err := b.ws.Submit(b.ctx, task.ID)
		b.call("Submit", err)
		b.end()
	}},
	{phase: "Submit, after another process's announcement", want: []spent{
		{"GET record", 1, "as Submit"},
		{"HEAD input", 1, "as Submit"},
		{"PUT marker", 1, "as Submit"},
		{"PUT record If-Match", 1, "as Submit"},
		{"PUT wake If-Match →412", 1, "the copy this Store keeps is stale: refused, nothing overwritten (and for a minute, the Store reads first)"},
		{"GET wake", 1, whyWakeRead},
		{"PUT wake If-Match", 1, whyWakeWrite},
	}, run: func(b *budgetEnv) {
		b.queued("announced by another process")
		task := b.task(b.t, "created")
		b.begin()
		_, err := b.st.Submit(b.ctx, task.ID)
		b.call("Submit", err)
		b.end()
	}},
	{phase: "Submit, the bucket's first", want: []spent{
		{"GET record", 1, "as Submit"},
		{"HEAD input", 1, "as Submit"},
		{"PUT marker", 1, "as Submit"},
		{"PUT record If-Match", 1, "as Submit"},
		{"GET wake →404", 1, "no wake object yet"},
		{"PUT wake If-None-Match", 1, "the wake object, created"},
	}, run: func(b *budgetEnv) {
		b.del(b.t, b.store.Prefix()+"_wake")
		task := b.task(b.t, "created")
		b.begin()
		_, err := b.ws.Submit(b.ctx, task.ID)
		b.call("Submit", err)
		b.end()
	}},
	{phase: "idle worker, one PollInterval", want: []spent{
		{"GET wake If-None-Match →304", 1, "the idle worker's check for news: a conditional GET, a twelfth of a LIST's price, no body when nothing changed"},
	}, run: func(b *budgetEnv) {
		b.run(newBudgetHandler(), budgetWorker())
		synctest.Wait()
		b.begin()
		time.Sleep(s3task.DefaultPollInterval) // the waits are 3/4 to 4/4 of it
		b.end()
	}},
	{phase: "claim, found by a listing", want: []spent{
		{"LIST markers", 1, whyListMarkers},
		{"GET record", 1, whyClaimRead},
		{"PUT marker", 1, whyClaimMarker},
		{"PUT record If-Match", 1, whyClaim},
		{"DELETE marker", 1, whyClaimDelete},
	}, run: func(b *budgetEnv) {
		// A task due a minute ahead, which the worker's first listing saw
		// not yet due: it lists again when it falls due, and checks the
		// wake object only every few minutes.
		task := b.task(b.t, "created")
		_, err := b.store.Schedule(b.ctx, task.ID, b.srv.Now().Add(time.Minute))
		b.call("Schedule", err)
		_, err = b.store.Submit(b.ctx, task.ID)
		b.call("Submit", err)
		h := newBudgetHandler()
		b.run(h, budgetWorker(func(o *s3task.WorkerOptions) { o.PollInterval = 10 * time.Minute }))
		synctest.Wait()
		b.begin()
		<-h.started
		b.end()
	}},
	{phase: "claim, told by the wake object", want: []spent{
		{"GET wake If-None-Match", 1, "the idle worker's check (one per PollInterval, work or not) finds the wake object changed"},
		{"GET record", 1, whyClaimRead + "; the announcement named the marker, so no LIST"},
		{"PUT marker", 1, whyClaimMarker},
		{"PUT record If-Match", 1, whyClaim},
		{"DELETE marker", 1, whyClaimDelete},
	}, run: func(b *budgetEnv) {
		h := newBudgetHandler()
		b.run(h, budgetWorker())
		synctest.Wait()
		b.queued("told by the wake object")
		b.begin()
		<-h.started
		b.end()
	}},
	{phase: "claim, told by an event (Worker.Notify)", want: []spent{
		{"GET record", 1, whyClaimRead + "; the event named the marker, so no LIST"},
		{"PUT marker", 1, whyClaimMarker},
		{"PUT record If-Match", 1, whyClaim},
		{"DELETE marker", 1, whyClaimDelete},
	}, run: func(b *budgetEnv) {
		h := newBudgetHandler()
		w, _ := b.run(h, budgetWorker(func(o *s3task.WorkerOptions) { o.PollInterval = 10 * time.Minute }))
		synctest.Wait()
		task := b.queued("told by an event")
		b.begin()
		w.Notify(s3task.ObjectEvent{Key: b.markerKey(task.ID), Size: -1})
		w.Notify(s3task.ObjectEvent{Key: b.recordKey(task.ID), Size: -1})
		<-h.started
		b.end()
	}},
	{phase: "heartbeat", want: []spent{
		{"PUT record If-Match", 1, "renews the lease and carries progress, compare-and-set; one per HeartbeatInterval (LeaseDuration/3)"},
	}, run: func(b *budgetEnv) {
		b.claimed()
		b.begin()
		time.Sleep(s3task.DefaultLeaseDuration/3 + time.Second)
		b.end()
	}},
	{phase: "heartbeats, one lease's worth", want: []spent{
		{"PUT record If-Match", 3, "three renewals, one per HeartbeatInterval"},
		{"PUT marker", 1, "once a lease, the renewal after which the marker would fall due within an interval moves it to the new lease's end, before the record"},
		{"DELETE marker", 1, "the marker it replaced"},
	}, run: func(b *budgetEnv) {
		b.claimed()
		b.begin()
		time.Sleep(s3task.DefaultLeaseDuration + time.Second)
		b.end()
	}},
	{phase: "complete", want: []spent{
		{"PUT record If-Match", 1, "running → completed"},
		{"DELETE marker", 1, whyEndDelete},
	}, run: func(b *budgetEnv) {
		h, _ := b.claimed()
		b.begin()
		h.outcome <- nil
		b.end()
	}},
	{phase: "fail, with a retry to come", want: []spent{
		{"PUT marker", 1, "the marker, due at the retry time, before the record"},
		{"PUT record If-Match", 1, "running → failed, retry_at set"},
		{"DELETE marker", 1, "the lease's marker"},
	}, run: func(b *budgetEnv) {
		h, _ := b.claimed()
		b.begin()
		h.outcome <- s3task.RetryAfter(errors.New("try later"), time.Minute)
		b.end()
	}},
	{phase: "fail for good", want: []spent{
		{"PUT record If-Match", 1, "running → failed, no retry"},
		{"DELETE marker", 1, whyEndDelete},
	}, run: func(b *budgetEnv) {
		h, _ := b.claimed()
		b.begin()
		h.outcome <- s3task.Permanent(errors.New("bad file"))
		b.end()
	}},
	{phase: "release on shutdown", want: []spent{
		{"PUT marker", 1, "the marker, due now, before the record"},
		{"PUT record If-Match", 1, "running → queued, the attempt not used up"},
		{"DELETE marker", 1, "the lease's marker"},
		{"GET wake", 1, whyWakeRead},
		{"PUT wake If-Match", 1, "announce the task given back, so that another idle worker takes it within its PollInterval"},
		{"DELETE presence", 1, whyPresenceDel + " (the idle worker's shutdown, not the task's)"},
	}, run: func(b *budgetEnv) {
		_, stop := b.claimed(func(o *s3task.WorkerOptions) { o.ShutdownTimeout = time.Second })
		b.begin()
		stop()
		b.end()
	}},
	{phase: "shutdown, idle worker", want: []spent{
		{"DELETE presence", 1, whyPresenceDel},
	}, run: func(b *budgetEnv) {
		_, stop := b.run(newBudgetHandler(), budgetWorker())
		synctest.Wait()
		b.begin()
		stop()
		b.end()
	}},
	{phase: "Cancel (queued)", want: []spent{
		{"GET record", 1, "status and ETag, for the compare-and-set"},
		{"PUT record If-Match", 1, "queued → abandoned"},
		{"DELETE marker", 1, "the task no longer needs a worker"},
	}, run: func(b *budgetEnv) {
		task := b.queued("to cancel")
		b.begin()
		_, err := b.st.Cancel(b.ctx, task.ID, "not needed")
		b.call("Cancel", err)
		b.end()
	}},
	{phase: "Retry (failed for good)", want: []spent{
		{"GET record", 1, "status and ETag, for the compare-and-set"},
		{"HEAD input", 1, "the input verified again, as Submit does, and its current ETag pinned"},
		{"PUT marker", 1, "the new marker, due now, before the record"},
		{"PUT record If-Match", 1, "failed → queued"},
		{"PUT wake If-Match", 1, whyWakeWrite + ", over the Store's copy"},
	}, run: func(b *budgetEnv) {
		task := b.task(b.t, "failed")
		b.wroteLast()
		b.begin()
		_, err := b.st.Retry(b.ctx, task.ID)
		b.call("Retry", err)
		b.end()
	}},
	{phase: "Schedule (queued, an hour ahead)", want: []spent{
		{"GET record", 1, "status and ETag, for the compare-and-set"},
		{"PUT marker", 1, "the marker named after the new start, before the record"},
		{"PUT record If-Match", 1, "run_at and due_at set"},
		{"DELETE marker", 1, "the marker due at the old time"},
		{"PUT wake If-Match", 1, "announce the moved marker, over the Store's copy, so that idle workers note its time and list then, not before"},
	}, run: func(b *budgetEnv) {
		task := b.queued("to schedule")
		b.wroteLast()
		b.begin()
		_, err := b.st.Schedule(b.ctx, task.ID, b.srv.Now().Add(time.Hour))
		b.call("Schedule", err)
		b.end()
	}},
	{phase: "periodic run, made (the lease holder, at its period's start)", want: []spent{
		{"PUT key If-None-Match", 1, "the run's key, create-only: named after the period's start, so the run is made once however many holders try"},
		{"PUT record If-None-Match", 1, "the record, create-only"},
		{"PUT marker", 1, "as Submit: no input to check, the type is declared input-less"},
		{"PUT record If-Match", 1, "created → queued, over the ETag the create got: no read"},
		{"PUT wake If-Match", 1, whyWakeWrite + ", over the Store's copy"},
	}, run: func(b *budgetEnv) {
		ps := b.periodicStore()
		b.begin()
		s3tasktest.MakePeriodicRun(b.t, ps, "nightly", b.srv.Now())
		b.end()
	}},
	{phase: "periodic run, made already (a holder after a lost answer, or a second holder)", want: []spent{
		{"PUT key If-None-Match →412", 1, "the key is there: the run was made"},
		{"GET key", 1, "which task the key names"},
		{"GET record", 1, "that task, returned as the run, not made again"},
	}, run: func(b *budgetEnv) {
		ps := b.periodicStore()
		s3tasktest.MakePeriodicRun(b.t, ps, "nightly", b.srv.Now())
		b.begin()
		s3tasktest.MakePeriodicRun(b.t, ps, "nightly", b.srv.Now())
		b.end()
	}},
	{phase: "Get", want: []spent{
		{"GET record", 1, "the record"},
	}, run: func(b *budgetEnv) {
		task := b.queued("to get")
		b.begin()
		_, err := b.st.Get(b.ctx, task.ID)
		b.call("Get", err)
		b.end()
	}},
	{phase: "List, a page of 3 (no filter)", want: []spent{
		{"LIST tasks", 1, "the task folders, newest first, from the cursor on"},
		{"GET record", 3, "each task's record; the cost is the page's, not the bucket's"},
	}, run: func(b *budgetEnv) {
		for range 4 {
			b.queued("to list")
		}
		b.begin()
		page, err := b.st.List(b.ctx, s3task.ListOptions{Limit: 3})
		b.call("List", err)
		b.end()
		if len(page.Tasks) != 3 {
			b.t.Errorf("List: %d tasks, want 3", len(page.Tasks))
		}
	}},
	{phase: "worker start-up (default options, nothing queued)", want: []spent{
		{"PUT presence", 1, whyPresencePut},
		{"GET wake", 1, "read before the first listing, so that the first check after it does not take what the listing covered for news"},
		{"LIST markers", 1, "the first poll; it reaches the folder's end, where markers named active/<id> by earlier versions sort, and finds none, so they are not listed apart"},
	}, run: func(b *budgetEnv) {
		b.begin()
		b.run(newBudgetHandler(), &s3task.WorkerOptions{ID: "fresh"})
		b.end()
	}},
	{phase: "life, persistent worker", want: []spent{
		{"PUT record If-None-Match", 1, "CreateForUpload"},
		{"PUT input If-None-Match", 1, "the presigned upload"},
		{"GET record", 1, "Submit: status and ETag"},
		{"HEAD input", 1, "Submit: the input verified, its ETag pinned"},
		{"PUT marker", 1, "Submit: the queued task's marker"},
		{"PUT record If-Match", 1, "Submit: created → queued"},
		{"PUT wake If-Match", 1, "Submit: " + whyWakeWrite + ", over the Store's copy"},
		{"GET wake If-None-Match", 1, "the idle worker's check that finds the news (bench counts it as idle time)"},
		{"GET record", 1, "claim: " + whyClaimRead + ", of the task announced: no LIST"},
		{"PUT marker", 1, "claim: the lease's marker"},
		{"PUT record If-Match", 1, whyClaim},
		{"DELETE marker", 1, "claim: the queued task's marker"},
		{"GET input If-Match", 1, "the handler reads the input, pinned to the ETag Submit verified"},
		{"PUT output If-None-Match", 1, "the handler writes output-attempt-1, create-only"},
		{"PUT record If-Match", 1, "running → completed"},
		{"DELETE marker", 1, "complete: the lease's marker"},
		{"GET record", 1, whyDownload},
		{"GET output", 1, "the download, through the presigned URL"},
	}, run: func(b *budgetEnv) {
		completed := make(chan *s3task.Task, 1)
		b.run(upper, budgetWorker(func(o *s3task.WorkerOptions) {
			o.Hooks.OnComplete = func(t *s3task.Task) { completed <- t }
		}))
		synctest.Wait()
		b.begin()
		id := b.produce()
		<-completed
		synctest.Wait()
		b.downloadUpper(id)
		b.end()
	}},
	{phase: "life, fresh worker", want: []spent{
		{"PUT record If-None-Match", 1, "CreateForUpload"},
		{"PUT input If-None-Match", 1, "the presigned upload"},
		{"GET record", 1, "Submit: status and ETag"},
		{"HEAD input", 1, "Submit: the input verified, its ETag pinned"},
		{"PUT marker", 1, "Submit: the queued task's marker"},
		{"PUT record If-Match", 1, "Submit: created → queued"},
		{"PUT wake If-Match", 1, "Submit: " + whyWakeWrite + ", over the Store's copy"},
		{"PUT presence", 1, "start-up: " + whyPresencePut},
		{"GET wake", 1, "start-up: the wake object, read before the first listing"},
		{"LIST markers", 1, "start-up: the first poll, which finds the task (and no marker of an earlier version at the folder's end)"},
		{"GET record", 1, "claim: " + whyClaimRead},
		{"PUT marker", 1, "claim: the lease's marker"},
		{"PUT record If-Match", 1, whyClaim},
		{"DELETE marker", 1, "claim: the queued task's marker"},
		{"GET input If-Match", 1, "the handler reads the input"},
		{"PUT output If-None-Match", 1, "the handler writes its output"},
		{"PUT record If-Match", 1, "running → completed"},
		{"DELETE marker", 1, "complete: the lease's marker"},
		{"DELETE presence", 1, "shutdown: " + whyPresenceDel},
		{"GET record", 1, whyDownload},
		{"GET output", 1, "the download, through the presigned URL"},
	}, run: func(b *budgetEnv) {
		completed := make(chan *s3task.Task, 1)
		b.begin()
		id := b.produce()
		_, stop := b.run(upper, budgetWorker(func(o *s3task.WorkerOptions) {
			o.Hooks.OnComplete = func(t *s3task.Task) { completed <- t }
		}))
		<-completed
		synctest.Wait()
		stop()
		b.downloadUpper(id)
		b.end()
	}},
}

// upper is the handler of a task's life: it reads the input and writes it
// upper-cased as the output.
var upper = s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
	in, err := job.OpenInput(ctx)
	if err != nil {
		return err
	}
	data, err := io.ReadAll(in)
	in.Close()
	if err != nil {
		return err
	}
	return job.WriteOutput(ctx, bytes.NewReader(bytes.ToUpper(data)))
})

// produce is the application's side of a task's life up to the worker:
// CreateForUpload, the upload through its URL, Submit. It returns the ID.
func (b *budgetEnv) produce() string {
	task, up, err := b.st.CreateForUpload(b.ctx, s3task.CreateParams{Name: "life"}, time.Minute)
	b.call("CreateForUpload", err)
	b.upload(up, []byte(testInput))
	_, err = b.st.Submit(b.ctx, task.ID)
	b.call("Submit", err)
	return task.ID
}

// downloadUpper downloads task id's output and checks it is upper's.
func (b *budgetEnv) downloadUpper(id string) {
	b.t.Helper()
	if out := b.download(id); string(out) != strings.ToUpper(testInput) {
		b.t.Errorf("output %q, want %q", out, strings.ToUpper(testInput))
	}
}

// TestRequestBudget pins the requests of each public call and each phase of
// a task's life, against the in-memory S3, each in a bubble of its own so
// that time passes as the row says and no sooner (see BENCHMARKS.md,
// section 18). The counts are exact: a change that adds a request, or
// drops one, fails here, printing what the phase sent in order, until the
// row's budget is changed on purpose, with the reason. -v prints each
// row's total.
func TestRequestBudget(t *testing.T) {
	for _, row := range budgetRows {
		t.Run(row.phase, func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				b := newBudgetEnv(t)
				row.run(b)
				if b.done == nil && !t.Failed() {
					t.Fatal("the row never ended its phase (budgetEnv.end)")
				}
				want, total := map[string]int{}, 0
				for _, s := range row.want {
					want[s.req] += s.n
					total += s.n
				}
				got := map[string]int{}
				for _, req := range b.done {
					got[req]++
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("%s: requests by kind (-budget +sent):\n%s\nsent, in order:\n\t%s", row.phase, diff, strings.Join(b.done, "\n\t"))
				}
				t.Logf("%s: %d requests in all", row.phase, total)
			})
		})
	}
}
