// Package s3tasklambda runs s3task workers on AWS Lambda, where no process
// lives between invocations: each invocation runs a Worker until it has
// nothing to do or the invocation's time is nearly up, and gives back, not
// used up, any attempt it cannot finish in time.
//
// A function built with it is invoked in one of three ways, all handled by
// [Function.Handle]:
//
//   - by S3 directly, with the event notifications of the Store's marker
//     folder (prefix + "active/", ObjectCreated);
//   - by SQS, with messages whose bodies are those notifications (the bucket
//     notifies an SQS queue; the function's event source mapping polls it,
//     with ReportBatchItemFailures on), so that bursts wait in the queue;
//   - by a schedule (an EventBridge rule every few minutes), the safety net
//     for notifications that never came: any other payload runs a sweep.
//
// Whatever the payload, an invocation lists the markers once and runs what
// is due, up to WorkerOptions.Concurrency at a time; the events it names
// are only hints (see s3task.Worker.Notify). An attempt still running when
// the invocation's deadline is Reserve away is asked to stop
// (s3task.ErrWorkerStopping, after WorkerOptions.ShutdownTimeout) and goes
// back to the queue without using an attempt; for SQS, the messages that
// named it are reported as failures, so that SQS delivers them again and
// another invocation finishes the task. A handler must honour its context:
// one that runs on after it ends would run on in the frozen process at the
// next invocation, when its lease may belong to another worker.
//
//	store, err := s3task.NewStore(s3.NewFromConfig(cfg), bucket, nil)
//	fn, err := s3tasklambda.New(store, &mux, nil)
//	lambda.Start(fn.Handle)
//
// This package is a module of its own, so that the library's go.mod names
// no Lambda dependency.
package s3tasklambda

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/s3event"
)

// Options configure a [Function].
type Options struct {
	// Worker is the options of the worker each invocation runs. Zero
	// fields get the library's defaults, except ShutdownTimeout (default
	// 3 s), ReconcileInterval (default: none; run Store.Reconcile on a
	// schedule of its own if you want it) and PresenceInterval (default:
	// none; an invocation lives for seconds, and announcing it would cost
	// a PUT and a DELETE each).
	Worker s3task.WorkerOptions

	// Reserve is how long before the invocation's deadline the worker
	// stops claiming and asks running attempts to stop; it must leave
	// ShutdownTimeout and a few seconds for their release. Default
	// ShutdownTimeout plus 5 s.
	Reserve time.Duration

	// Quiet is how long the worker must have had nothing running, after
	// its first listing, before an invocation returns early. Default
	// 200 ms.
	Quiet time.Duration
}

// A Function runs a Worker of a Store for each invocation. Invocations of
// one Function run one at a time, as Lambda's do in one execution
// environment.
type Function struct {
	store *s3task.Store
	opts  Options
	w     *s3task.Worker

	run   sync.Mutex // held by an invocation: one at a time
	mu    sync.Mutex // guards state
	state *invocation
}

// invocation is what the worker's hooks report during one invocation.
type invocation struct {
	mu       sync.Mutex
	polled   bool
	running  int
	start    time.Time       // when the invocation began
	last     time.Time       // the last claim or settlement
	named    map[string]bool // tasks the invocation's events named, not claimed yet
	released map[string]bool // tasks whose attempt was given back
	changed  chan struct{}   // pinged by every hook
}

// clockWindow is how unsure a fresh Store is of the S3 server's clock: Date
// headers tell the second, so a task submitted a moment ago may look due up
// to a second ahead to an invocation's worker, which claims it only then.
const clockWindow = time.Second

// New returns a Function that runs h for the tasks of store. It makes no
// requests. It returns an error wrapping s3task.ErrInvalidOptions for a nil
// store or handler or bad options.
func New(store *s3task.Store, h s3task.Handler, opts *Options) (*Function, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Worker.ShutdownTimeout == 0 {
		o.Worker.ShutdownTimeout = 3 * time.Second
	}
	if o.Worker.ReconcileInterval == 0 {
		o.Worker.ReconcileInterval = -1
	}
	if o.Worker.PresenceInterval == 0 {
		o.Worker.PresenceInterval = -1
	}
	if o.Reserve == 0 {
		o.Reserve = o.Worker.ShutdownTimeout + 5*time.Second
	}
	if o.Quiet == 0 {
		o.Quiet = 200 * time.Millisecond
	}
	switch {
	case o.Reserve <= o.Worker.ShutdownTimeout:
		return nil, fmt.Errorf("%w: Options.Reserve (%s) must be longer than WorkerOptions.ShutdownTimeout (%s)", s3task.ErrInvalidOptions, o.Reserve, o.Worker.ShutdownTimeout)
	case o.Quiet < 0:
		return nil, fmt.Errorf("%w: Options.Quiet is negative", s3task.ErrInvalidOptions)
	}
	f := &Function{store: store, opts: o}
	wo := o.Worker
	user := wo.Hooks
	wo.Hooks = s3task.Hooks{
		OnPoll: func(p s3task.PollStats) {
			f.note(func(in *invocation) { in.polled = true })
			if user.OnPoll != nil {
				user.OnPoll(p)
			}
		},
		OnClaim: func(t *s3task.Task) {
			f.note(func(in *invocation) { in.running++; delete(in.named, t.ID) })
			if user.OnClaim != nil {
				user.OnClaim(t)
			}
		},
		OnComplete: func(t *s3task.Task) {
			f.note(func(in *invocation) { in.running-- })
			if user.OnComplete != nil {
				user.OnComplete(t)
			}
		},
		OnFail: func(t *s3task.Task, err error) {
			f.note(func(in *invocation) { in.running-- })
			if user.OnFail != nil {
				user.OnFail(t, err)
			}
		},
		OnRelease: func(t *s3task.Task) {
			f.note(func(in *invocation) { in.running--; in.released[t.ID] = true })
			if user.OnRelease != nil {
				user.OnRelease(t)
			}
		},
		OnLeaseLost: func(id string, t *s3task.Task, cause error) {
			f.note(func(in *invocation) { in.running-- })
			if user.OnLeaseLost != nil {
				user.OnLeaseLost(id, t, cause)
			}
		},
		OnReconcile: user.OnReconcile,
	}
	w, err := s3task.NewWorker(store, h, &wo)
	if err != nil {
		return nil, err
	}
	f.w = w
	return f, nil
}

// Worker returns the worker the invocations run, for Notify or RunTask.
func (f *Function) Worker() *s3task.Worker { return f.w }

// note applies change to the current invocation's state, if one runs.
func (f *Function) note(change func(*invocation)) {
	f.mu.Lock()
	in := f.state
	f.mu.Unlock()
	if in == nil {
		return
	}
	in.mu.Lock()
	change(in)
	in.last = time.Now()
	in.mu.Unlock()
	select {
	case in.changed <- struct{}{}:
	default:
	}
}

// Handle is the function to give lambda.Start. It runs one invocation: it
// passes the S3 event notifications the payload holds (directly or in SQS
// messages) to the worker, runs the worker until it has listed the markers
// and has had nothing running for Options.Quiet (and, while a task the
// events named is not claimed, for at least a second and Quiet from the
// start: a fresh Store knows the server's clock to the second, and a task
// submitted a moment ago may fall due by it only then), or until the
// deadline is Options.Reserve away, and returns once every attempt it started is
// settled. For an SQS payload it returns the messages to deliver again
// (events.SQSEventResponse): those naming a task whose attempt was given
// back. It returns an error only for a context without a deadline, or one
// that leaves less than Reserve.
func (f *Function) Handle(ctx context.Context, payload json.RawMessage) (*events.SQSEventResponse, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return nil, errors.New("s3tasklambda: the invocation's context has no deadline")
	}
	stopAt := deadline.Add(-f.opts.Reserve)
	if !time.Now().Before(stopAt) {
		return nil, fmt.Errorf("s3tasklambda: %s left of the invocation, less than Options.Reserve (%s)", time.Until(deadline).Round(time.Millisecond), f.opts.Reserve)
	}
	f.run.Lock()
	defer f.run.Unlock()
	named, sqs := f.deliver(payload)
	now := time.Now()
	in := &invocation{named: map[string]bool{}, released: map[string]bool{}, changed: make(chan struct{}, 1), start: now, last: now}
	for _, m := range named {
		for _, id := range m.ids {
			in.named[id] = true
		}
	}
	f.mu.Lock()
	f.state = in
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.state = nil
		f.mu.Unlock()
	}()

	runCtx, stop := context.WithDeadline(ctx, stopAt)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- f.w.Run(runCtx) }()
	f.awaitIdle(runCtx, in)
	stop()
	// Run returns once its attempts are settled: given ShutdownTimeout,
	// then stopped and given back. A handler that ignores its context
	// holds it; the invocation's own deadline bounds the wait.
	stopCtx, cancel := context.WithDeadline(context.Background(), deadline.Add(-time.Second))
	defer cancel()
	if err := f.w.Stop(stopCtx); err != nil {
		return nil, fmt.Errorf("s3tasklambda: the worker did not stop before the deadline: %w", err)
	}
	<-done
	if !sqs {
		return nil, nil
	}
	resp := &events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{}}
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, m := range named {
		for _, id := range m.ids {
			if in.released[id] {
				resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: m.messageID})
				break
			}
		}
	}
	return resp, nil
}

// awaitIdle returns once the worker has listed and had nothing running for
// Quiet, or ctx ends. While a task the invocation's events named is not
// claimed, it stays at least Quiet plus clockWindow from the start: the
// worker may be waiting for the task to fall due by its clock.
func (f *Function) awaitIdle(ctx context.Context, in *invocation) {
	for {
		in.mu.Lock()
		idle := in.polled && in.running <= 0
		wait := f.opts.Quiet - time.Since(in.last)
		if len(in.named) > 0 {
			wait = max(wait, f.opts.Quiet+clockWindow-time.Since(in.start))
		}
		in.mu.Unlock()
		if idle && wait <= 0 {
			return
		}
		if !idle || wait <= 0 {
			wait = time.Hour // until a hook says something changed
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-in.changed:
		case <-t.C:
		}
		t.Stop()
	}
}

// message is an SQS message (or, for a direct S3 invocation, the whole
// payload) and the tasks whose markers it names.
type message struct {
	messageID string
	ids       []string
}

// deliver passes the event notifications in payload to the worker and
// returns what each message named, and whether the payload was an SQS
// batch. A payload it cannot read (a schedule's) names nothing.
func (f *Function) deliver(payload json.RawMessage) (named []message, sqs bool) {
	var batch events.SQSEvent
	if json.Unmarshal(payload, &batch) == nil && len(batch.Records) > 0 && batch.Records[0].EventSource == "aws:sqs" {
		for _, m := range batch.Records {
			records, err := s3event.Parse([]byte(m.Body))
			if err != nil {
				continue
			}
			s3event.Deliver(f.w, records)
			named = append(named, message{m.MessageId, f.tasksOf(records)})
		}
		return named, true
	}
	if records, err := s3event.Parse(payload); err == nil {
		s3event.Deliver(f.w, records)
		named = append(named, message{ids: f.tasksOf(records)})
	}
	return named, false
}

// tasksOf returns the IDs of the tasks whose markers records say were
// written.
func (f *Function) tasksOf(records []s3event.Record) []string {
	dir := f.store.Prefix() + "active/"
	var ids []string
	for _, r := range records {
		key, ok := s3event.DecodeKey(r.Key)
		if !ok || !r.Created() {
			continue
		}
		name, ok := strings.CutPrefix(key, dir)
		if !ok {
			continue
		}
		id := name[strings.LastIndex(name, "_")+1:]
		if s3task.ParseID(id) == nil {
			ids = append(ids, id)
		}
	}
	return ids
}
