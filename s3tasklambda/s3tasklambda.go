// Package s3tasklambda runs s3task workers on AWS Lambda, where no process
// lives between invocations: each invocation runs a Worker until it has
// nothing to do or the invocation's time is nearly up, and gives back, not
// used up, any attempt it cannot finish in time.
//
// A function built with it is invoked in one of three ways, all handled by
// [Function.Invoke]:
//
//   - by S3 directly, with the event notifications of the Store's marker
//     folder (prefix + "active/", ObjectCreated);
//   - by SQS, with messages whose bodies are those notifications (the bucket
//     notifies an SQS queue; the function's event source mapping polls it,
//     with ReportBatchItemFailures on), so that bursts wait in the queue;
//   - by a schedule (an EventBridge rule every few minutes), the safety net
//     for notifications that never came: any other payload, JSON or not,
//     runs a sweep.
//
// Whatever the payload, an invocation lists the markers and runs what is
// due, up to WorkerOptions.Concurrency at a time; the events it names are
// only hints (see s3task.Worker.Notify). It returns once the worker has
// listed the markers after the last attempt it ran settled and found
// nothing more to start (a task an event named had its turn: it was
// started, or the worker looked at it once its marker was due by the
// worker's clock and left it, as one another worker holds), and
// Options.Quiet has passed since that last attempt, or when the deadline
// is Reserve away. An attempt still running then is asked to stop
// (s3task.ErrWorkerStopping, after WorkerOptions.ShutdownTimeout) and goes
// back to the queue without using an attempt; for SQS, the messages that
// named it are reported as failures, so that SQS delivers them again and
// another invocation finishes the task. A handler must honour its context:
// one that runs on after it ends would run on in the frozen process at the
// next invocation, when its lease may belong to another worker.
//
// What counts as due is judged by the Store's estimate of the S3 server's
// clock, which Date headers give to the second: a task that fell due in
// the second before a sweep (submitted, or given back, a moment before)
// may be left to the next invocation, unless an event names it.
//
// # A task longer than the function's timeout
//
// A task that needs longer than the function's timeout less Reserve is
// given back at every invocation, and would be started again forever. So
// the Function's worker has a WorkerOptions.ReleaseLimit of 3 unless told
// otherwise: the fourth attempt in a row given back fails the task for
// good instead. The operator then sees it failed, not retried, with
// error_category "timeout" (s3task.CategoryTimeout) and a last_error such
// as "attempt 4: given back unfinished, after 3 attempts in a row given
// back (the limit is 3): ...", in Store.Get, on a page that shows the
// task, in s3taskctl show and stats (failures by category), and through
// the OnFail hook and the OnTerminal notice; each give-back before it is
// in the attempt history, with the outcome "released". Run such a task on
// a worker that lives longer, raise the function's timeout, or split the
// task; Store.Retry runs it again, with the count of give-backs started
// afresh. Each of the four invocations that start such a task runs it for
// the function's timeout less Reserve, then ShutdownTimeout more.
//
//	store, err := s3task.NewStore(s3.NewFromConfig(cfg), bucket, nil)
//	fn, err := s3tasklambda.New(store, &mux, nil)
//	lambda.Start(fn) // fn.Invoke takes any payload
//
// examples/lambdafn in the repository is a whole function, with a recipe
// to run it under the Lambda runtime interface emulator.
//
// This package is a module of its own, so that the library's go.mod names
// no Lambda dependency.
package s3tasklambda

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/s3event"
)

// DefaultReleaseLimit is the WorkerOptions.ReleaseLimit of a Function's
// worker when Options.Worker leaves it zero.
const DefaultReleaseLimit = 3

// Options configure a [Function].
type Options struct {
	// Worker is the options of the worker each invocation runs. Zero
	// fields get the library's defaults, except ShutdownTimeout (default
	// 3 s), ReleaseLimit (default [DefaultReleaseLimit]; negative for no
	// limit, with which a task longer than the function's timeout is
	// given back forever: see the package documentation),
	// ReconcileInterval (default: none; run Store.Reconcile on a schedule
	// of its own if you want it) and PresenceInterval (default: none; an
	// invocation lives for seconds, and announcing it would cost a PUT and
	// a DELETE each). Worker.Logger, or slog.Default() if it is nil, also
	// gets the Function's own warnings (an SQS message that is not an S3
	// event notification).
	Worker s3task.WorkerOptions

	// Reserve is how long before the invocation's deadline the worker
	// stops claiming and asks running attempts to stop; it must leave
	// ShutdownTimeout and a few seconds for their release. Default
	// ShutdownTimeout plus 5 s.
	Reserve time.Duration

	// Quiet is how long an invocation stays, once the worker has found
	// nothing more to start, after the last attempt it ran settled (or
	// after its start, if it ran none), before it returns. Default
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
	log   *slog.Logger

	run   sync.Mutex // held by an invocation: one at a time
	mu    sync.Mutex // guards state
	state *invocation
}

// invocation is what the worker's hooks report during one invocation.
type invocation struct {
	mu      sync.Mutex
	running int       // attempts claimed and not settled
	polled  bool      // a listing reported since the invocation began
	change  time.Time // local clock: the start, or the latest claim or settlement
	// clean is when, by the S3 server's clock as the Store knows it, the
	// latest listing began that started nothing and reported after the
	// latest claim or settlement; zero if none did.
	clean time.Time
	// asked says that awaitIdle asked the worker to list since the latest
	// claim or settlement, for a listing that begins at askedFor or later
	// (server clock).
	asked    bool
	askedFor time.Time
	// named holds the tasks the invocation's events named, not claimed
	// yet, each with the time its marker fell due (server clock; zero for
	// a marker without one).
	named    map[string]time.Time
	released map[string]bool // tasks whose attempt was given back
	changed  chan struct{}   // pinged by every hook
}

// clockWindow is how far a Store's estimate of the S3 server's clock may
// lead the earliest time the server's clock may read (Date headers tell
// the second): a worker claims a task it saw due by its estimate once its
// earliest reading has reached it, up to a second later.
const clockWindow = time.Second

// namedAhead is how far ahead of the Function's estimate of the server's
// clock a marker named by an event may fall due and still hold the
// invocation: the estimates of its writer and of the Function may differ
// by a second or two (each lags the server's clock by up to a second and
// the network's delay), and a task due that soon is worth the wait. A
// marker due later (a scheduled start, a retry, another worker's lease)
// is left to a later invocation.
const namedAhead = 5 * time.Second

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
	switch {
	case o.Worker.ReleaseLimit == 0:
		o.Worker.ReleaseLimit = DefaultReleaseLimit
	case o.Worker.ReleaseLimit < 0:
		o.Worker.ReleaseLimit = 0 // no limit
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
	f := &Function{store: store, opts: o, log: o.Worker.Logger}
	if f.log == nil {
		f.log = slog.Default()
	}
	wo := o.Worker
	user := wo.Hooks
	// changed notes a claim or a settlement: what the worker may start
	// has to be seen again.
	changed := func(in *invocation) { in.change, in.clean, in.asked = time.Now(), time.Time{}, false }
	// settled counts an attempt out, as each of the hooks that end one
	// does.
	settled := func(in *invocation) { in.running--; changed(in) }
	wo.Hooks = s3task.Hooks{
		OnPoll: func(p s3task.PollStats) {
			// The listing began p.Took ago. A claim it made, or one made
			// by a visit while it went on, came before this hook (see
			// Hooks.OnClaim): if it started nothing, nothing runs that it
			// does not count.
			began := store.Now().Add(-p.Took)
			f.note(func(in *invocation) {
				in.polled = true
				if p.Started == 0 {
					in.clean = began
				}
			})
			if user.OnPoll != nil {
				user.OnPoll(p)
			}
		},
		OnClaim: func(t *s3task.Task) {
			f.note(func(in *invocation) {
				in.running++
				delete(in.named, t.ID)
				changed(in)
			})
			if user.OnClaim != nil {
				user.OnClaim(t)
			}
		},
		OnComplete: func(t *s3task.Task) {
			f.note(settled)
			if user.OnComplete != nil {
				user.OnComplete(t)
			}
		},
		OnFail: func(t *s3task.Task, err error) {
			f.note(settled)
			if user.OnFail != nil {
				user.OnFail(t, err)
			}
		},
		OnRelease: func(t *s3task.Task) {
			f.note(func(in *invocation) { settled(in); in.released[t.ID] = true })
			if user.OnRelease != nil {
				user.OnRelease(t)
			}
		},
		OnLeaseLost: func(id string, t *s3task.Task, cause error) {
			f.note(settled)
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

// note applies change to the current invocation's state, if one runs, and
// tells awaitIdle.
func (f *Function) note(change func(*invocation)) {
	f.mu.Lock()
	in := f.state
	f.mu.Unlock()
	if in == nil {
		return
	}
	in.mu.Lock()
	change(in)
	in.mu.Unlock()
	select {
	case in.changed <- struct{}{}:
	default:
	}
}

// Invoke runs one invocation, as [Function.Handle] does, with the payload
// exactly as Lambda delivered it, and returns Handle's answer as JSON: the
// SQS batch response for an SQS payload, null for any other. It makes
// Function an aws-lambda-go lambda.Handler: give the Function itself to
// lambda.Start, and a payload that is not JSON (a schedule's constant
// text) runs a sweep, as the package documentation says, instead of
// failing in aws-lambda-go's JSON decoding before the Function sees it.
func (f *Function) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	resp, err := f.Handle(ctx, payload)
	if err != nil {
		return nil, err
	}
	return json.Marshal(resp)
}

// Handle runs one invocation: it passes the S3 event notifications the
// payload holds (directly or in SQS messages) to the worker, runs the
// worker until it has nothing more to do (see the package documentation)
// or until the deadline is Options.Reserve away, and returns once every
// attempt it started is settled. Any payload that is neither (a
// schedule's event, text that is not JSON) names no task: the invocation
// is a sweep. For an SQS payload it returns the messages to deliver again
// (events.SQSEventResponse): those naming a task whose attempt was given
// back, and those whose body is not an S3 event notification, which it
// logs (at Warn, with the message ID) so that a malformed message goes to
// the queue's dead-letter queue, if it has one, and is seen there instead
// of vanishing; for any other payload it returns nil. It returns an error
// only for a context without a deadline, or one that leaves less than
// Reserve.
//
// Given to lambda.Start as fn.Handle, it never sees a payload that is not
// JSON: aws-lambda-go decodes the payload into its json.RawMessage
// argument first, and fails the invocation. Give lambda.Start the
// Function itself (see [Function.Invoke]).
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
	now := time.Now()
	in := &invocation{named: map[string]time.Time{}, released: map[string]bool{}, changed: make(chan struct{}, 1), change: now}
	named, malformed, sqs := f.deliver(payload)
	horizon := f.store.Now().Add(namedAhead)
	for _, m := range named {
		for id, due := range m.tasks {
			if !due.After(horizon) {
				in.named[id] = due
			}
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
		for id := range m.tasks {
			if in.released[id] {
				resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: m.messageID})
				break
			}
		}
	}
	for _, id := range malformed {
		resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: id})
	}
	return resp, nil
}

// awaitIdle returns when ctx ends, or once nothing runs and the worker
// has done with what there is: a listing that reported after the latest
// claim or settlement started nothing, and began late enough that every
// task the events named and no attempt claimed was due by the worker's
// clock then, and Quiet has passed since that claim or settlement. The
// worker lists by itself when it starts, and when a marker it listed, or
// one an event named, falls due; for the listing after an attempt
// settled, or one late enough for a named task, awaitIdle wakes it. Every
// wait is for a hook, or for a time on the server's clock that a listing
// must follow; none hopes that something happened meanwhile.
func (f *Function) awaitIdle(ctx context.Context, in *invocation) {
	for {
		wait, done, wake := f.next(in)
		if done {
			return
		}
		if wake {
			f.w.Wake()
		}
		var timer *time.Timer
		var timeout <-chan time.Time
		if wait >= 0 {
			timer = time.NewTimer(wait)
			timeout = timer.C
		}
		select {
		case <-ctx.Done():
		case <-in.changed:
		case <-timeout:
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// next is awaitIdle's decision from the invocation's state: whether it is
// done, whether to wake the worker for a listing, and how long to wait
// before it looks again if no hook reports first (negative: until one
// does).
func (f *Function) next(in *invocation) (wait time.Duration, done, wake bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	var need time.Time // the server time a listing must begin at, for the named tasks
	for _, due := range in.named {
		need = later(need, due.Add(clockWindow))
	}
	switch {
	case in.running > 0 || !in.polled:
		// The worker is busy, or has yet to list.
		return -1, false, false
	case !in.clean.IsZero() && !in.clean.Before(need):
		quiet := f.opts.Quiet - time.Since(in.change)
		return quiet, quiet <= 0, false
	}
	// A listing is owed: none reported since the latest change, or none
	// began late enough for a named task.
	if early := need.Sub(f.store.Now()); early > 0 {
		return early, false, false
	}
	if in.asked && !in.askedFor.Before(need) {
		return -1, false, false // asked for already: its OnPoll is to come
	}
	in.asked, in.askedFor = true, need
	return -1, false, true
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// message is an SQS message (or, for a direct S3 invocation, the whole
// payload) and the tasks whose markers it names, with the time each
// marker falls due.
type message struct {
	messageID string
	tasks     map[string]time.Time
}

// deliver passes the event notifications in payload to the worker and
// returns what each message named, the IDs of the SQS messages whose body
// is not an event notification (logged), and whether the payload was an
// SQS batch. A payload it cannot read (a schedule's) names nothing.
func (f *Function) deliver(payload []byte) (named []message, malformed []string, sqs bool) {
	var batch events.SQSEvent
	if json.Unmarshal(payload, &batch) == nil && len(batch.Records) > 0 && batch.Records[0].EventSource == "aws:sqs" {
		for _, m := range batch.Records {
			records, err := s3event.Parse([]byte(m.Body))
			if err != nil {
				f.log.Warn("s3tasklambda: an SQS message is not an S3 event notification; reported as a batch item failure", "message_id", m.MessageId, "err", err, "body_bytes", len(m.Body))
				malformed = append(malformed, m.MessageId)
				continue
			}
			s3event.Deliver(f.w, records)
			named = append(named, message{m.MessageId, f.tasksOf(records)})
		}
		return named, malformed, true
	}
	if records, err := s3event.Parse(payload); err == nil {
		s3event.Deliver(f.w, records)
		named = append(named, message{tasks: f.tasksOf(records)})
	}
	return named, nil, false
}

// markerTimeLayout is the time at the head of a marker's name,
// <prefix>active/<due>_<id> (see s3task.Store.MarkerKey).
const markerTimeLayout = "20060102T150405.000Z"

// tasksOf returns the IDs of the tasks whose markers records say were
// written, each with the time its marker falls due (zero for a marker
// without one, written by an earlier version of the library).
func (f *Function) tasksOf(records []s3event.Record) map[string]time.Time {
	dir := f.store.Prefix() + "active/"
	ids := map[string]time.Time{}
	for _, r := range records {
		key, ok := s3event.DecodeKey(r.Key)
		if !ok || !r.Created() {
			continue
		}
		name, ok := strings.CutPrefix(key, dir)
		if !ok {
			continue
		}
		at, id, timed := strings.Cut(name, "_")
		if !timed {
			id = name
		}
		if s3task.ParseID(id) != nil {
			continue
		}
		var due time.Time
		if timed {
			t, err := time.Parse(markerTimeLayout, at)
			if err != nil {
				continue
			}
			due = t
		}
		ids[id] = later(ids[id], due)
	}
	return ids
}
