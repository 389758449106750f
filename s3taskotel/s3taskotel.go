// Package s3taskotel traces and meters s3task with OpenTelemetry, so that a
// task's work can be followed from the request that created it to the
// attempt that ran it.
//
// It is a module of its own: a host that does not import it never
// downloads OpenTelemetry. It uses only s3task's public extension points:
// [s3task.StoreMiddleware] for the Store's calls, [s3task.Middleware] for
// attempts, [s3task.Hooks] for what the worker writes, and the task's
// metadata ([s3task.CreateParams.Metadata]) to carry the trace context
// across processes and time.
//
// # Use
//
//	tel, err := s3taskotel.New(nil) // the global providers, W3C trace context
//	storeOpts := &s3task.StoreOptions{}
//	tel.InstrumentStore(storeOpts)
//	store, err := s3task.NewStore(client, bucket, storeOpts)
//	workerOpts := &s3task.WorkerOptions{}
//	tel.InstrumentWorker(workerOpts)
//	worker, err := s3task.NewWorker(store, handler, workerOpts)
//
// Instrument every Store that creates tasks and every Worker that runs
// them; they may be in different processes.
//
// # Traces
//
// Each Store call that creates or changes a task (create, submit, cancel,
// retry, schedule) gets a span, a child of the span in the caller's
// context: s3task.create (kind producer), s3task.submit and s3task.retry
// (producer: they put the task in the queue), s3task.cancel and
// s3task.schedule (client).
//
// The create span's context is stored in the new task's metadata under
// the propagator's keys: "traceparent" and "tracestate" with the default
// W3C propagator. Entries that would not fit the metadata's limits are
// left out (the span gets an event saying so); the task is created anyway.
//
// Each attempt gets a span, s3task.process (kind consumer), which carries
// the attempt's context to the handler, so the handler's own spans and
// instrumented calls are its children. It has a link to the create span,
// and by default that span is also its parent, so one trace holds the
// request that made the task, every attempt, and what each did. This is
// what the messaging conventions allow when one consumer span processes
// one message, which an attempt always does. Set
// [Options.NewRootAttempts] to make each attempt the root of a trace of
// its own, still linked to the creator: for tasks that wait for hours,
// where a tail-sampling collector would not keep the creator's trace open
// that long, or where the creator's sampling decision should not decide
// the attempt's. A task created without a trace context (or by an
// uninstrumented Store) gets a root span with no link.
//
// Span attributes (OpenTelemetry messaging conventions where they fit):
//
//	messaging.system            "s3task"
//	messaging.operation.name    create, submit, cancel, retry, schedule, process
//	messaging.operation.type    create, send (submit, retry), process; none for cancel and schedule
//	messaging.message.id        the task ID
//	s3task.task.type            Task.Type, when set
//	s3task.task.status          the status the call left (Store calls)
//	s3task.attempt              the attempt number (process)
//	s3task.worker.id            the worker's ID (process)
//	s3task.outcome              the attempt's outcome (process), see below
//	error.type                  the failure category (process), or the error's kind (Store calls)
//
// An attempt's outcome, as its handler and middleware left it:
// "completed" (nil error), "failed" (an error; error.type is its
// [s3task.ErrorCategory]), "panic", "lease_lost" (the worker lost the
// task's lease: another worker may take it over), "canceled" (the task was
// cancelled) or "shutdown" (the worker stopped before the handler
// finished; the attempt is given back). A span that ends in failed or
// panic has status Error.
//
// # Metrics
//
// All are recorded through the meter named by [ScopeName]:
//
//	name                      instrument         unit       attributes                                   when
//	s3task.attempts           Int64Counter       {attempt}  s3task.task.type, s3task.outcome, error.type  the worker wrote (or lost) an attempt's result
//	s3task.attempt.duration   Float64Histogram   s          s3task.task.type, s3task.outcome              the handler returned
//	s3task.queue.wait         Float64Histogram   s          s3task.task.type                              a task's first attempt starts
//	s3task.lease.losses       Int64Counter       {attempt}  s3task.task.type                              a worker lost a running task's lease
//	s3task.polls              Int64Counter       {poll}     (none)                                        a worker listed the markers
//	s3task.poll.markers       Int64Counter       {marker}   (none)                                        same: how many markers the listing held
//
// s3task.attempts counts each attempt once, by what the worker recorded:
// "completed", "retry" (failed, another attempt scheduled), "failed"
// (failed for good), "lease_lost", "canceled" or "released" (given back on
// shutdown). The queue wait is the first attempt's claim minus the later
// of the task's submit and its RunAt (Task.StartedAt, SubmittedAt,
// RunAt). Durations are in seconds, with buckets from 5 ms to an hour.
package s3taskotel

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/s3task/s3task"
)

// ScopeName is the instrumentation scope of the tracer and the meter.
const ScopeName = "github.com/s3task/s3task/s3taskotel"

// Attribute keys of s3task's own, beside the messaging conventions'.
const (
	TaskTypeKey   = attribute.Key("s3task.task.type")
	TaskStatusKey = attribute.Key("s3task.task.status")
	AttemptKey    = attribute.Key("s3task.attempt")
	WorkerIDKey   = attribute.Key("s3task.worker.id")
	OutcomeKey    = attribute.Key("s3task.outcome")
)

// Options configures [New]. A nil *Options, and every zero field, means
// the default.
type Options struct {
	// TracerProvider makes the tracer. Default: otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// MeterProvider makes the meter. Default: otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// Propagator writes the create span's context into a task's metadata
	// and reads it back for each attempt. Producers and workers must use
	// the same one. Default: propagation.TraceContext{} (W3C trace
	// context), whatever the global propagator is.
	Propagator propagation.TextMapPropagator
	// NewRootAttempts makes each attempt's span the root of a new trace,
	// linked to the create span, instead of its child. See the package
	// documentation.
	NewRootAttempts bool
}

// Telemetry holds the tracer and the instruments. Make one with [New] per
// process and use it for every Store and Worker; it is safe for
// concurrent use.
type Telemetry struct {
	tracer  trace.Tracer
	prop    propagation.TextMapPropagator
	newRoot bool

	attempts    metric.Int64Counter
	duration    metric.Float64Histogram
	queueWait   metric.Float64Histogram
	leaseLosses metric.Int64Counter
	polls       metric.Int64Counter
	markers     metric.Int64Counter
}

// durationBuckets are the histogram bounds, in seconds: from a quick
// handler to an hour in the queue.
var durationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}

// New returns a Telemetry with the providers and propagator of opts. It
// fails only if an instrument cannot be made.
func New(opts *Options) (*Telemetry, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.TracerProvider == nil {
		o.TracerProvider = otel.GetTracerProvider()
	}
	if o.MeterProvider == nil {
		o.MeterProvider = otel.GetMeterProvider()
	}
	if o.Propagator == nil {
		o.Propagator = propagation.TraceContext{}
	}
	t := &Telemetry{
		tracer:  o.TracerProvider.Tracer(ScopeName),
		prop:    o.Propagator,
		newRoot: o.NewRootAttempts,
	}
	m := o.MeterProvider.Meter(ScopeName)
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	histogram := func(name, desc string) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(durationBuckets...))
		errs = append(errs, err)
		return h
	}
	t.attempts = counter("s3task.attempts", "{attempt}", "Attempts whose result a worker wrote or lost, by outcome.")
	t.duration = histogram("s3task.attempt.duration", "How long an attempt's handler ran.")
	t.queueWait = histogram("s3task.queue.wait", "How long a task waited from its submit (or RunAt) to its first attempt.")
	t.leaseLosses = counter("s3task.lease.losses", "{attempt}", "Running attempts whose worker lost the task's lease.")
	t.polls = counter("s3task.polls", "{poll}", "Listings of the active markers by a worker.")
	t.markers = counter("s3task.poll.markers", "{marker}", "Markers the listings held.")
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("s3taskotel: %w", err)
	}
	return t, nil
}

// InstrumentStore puts the Telemetry's [Telemetry.StoreMiddleware] first
// (outermost) in o.Middleware, so its span covers the other middleware.
// Call it before s3task.NewStore.
func (t *Telemetry) InstrumentStore(o *s3task.StoreOptions) {
	o.Middleware = append([]s3task.StoreMiddleware{t.StoreMiddleware()}, o.Middleware...)
}

// InstrumentWorker puts the Telemetry's [Telemetry.Middleware] first
// (outermost) in o.Middleware, and its hooks before those already in
// o.Hooks, which still run. Call it before s3task.NewWorker.
func (t *Telemetry) InstrumentWorker(o *s3task.WorkerOptions) {
	o.Middleware = append([]s3task.Middleware{t.Middleware()}, o.Middleware...)
	o.Hooks = t.Hooks(o.Hooks)
}

var system = semconv.MessagingSystemKey.String("s3task")

// storeSpans gives each Store call its span kind and operation type.
var storeSpans = map[s3task.Op]struct {
	kind trace.SpanKind
	typ  attribute.KeyValue // empty Key: none fits
}{
	s3task.OpCreate:   {trace.SpanKindProducer, semconv.MessagingOperationTypeCreate},
	s3task.OpSubmit:   {trace.SpanKindProducer, semconv.MessagingOperationTypeSend},
	s3task.OpRetry:    {trace.SpanKindProducer, semconv.MessagingOperationTypeSend},
	s3task.OpCancel:   {trace.SpanKindClient, attribute.KeyValue{}},
	s3task.OpSchedule: {trace.SpanKindClient, attribute.KeyValue{}},
}

// StoreMiddleware returns the middleware that traces Store calls and
// stores the create span's context in the new task's metadata. Most hosts
// call [Telemetry.InstrumentStore] instead.
func (t *Telemetry) StoreMiddleware() s3task.StoreMiddleware {
	return func(next s3task.CallFunc) s3task.CallFunc {
		return func(ctx context.Context, c *s3task.Call) (*s3task.Task, error) {
			how, ok := storeSpans[c.Op]
			if !ok {
				how.kind = trace.SpanKindClient
			}
			attrs := []attribute.KeyValue{system, semconv.MessagingOperationName(string(c.Op))}
			if how.typ.Key != "" {
				attrs = append(attrs, how.typ)
			}
			if c.TaskID != "" {
				attrs = append(attrs, semconv.MessagingMessageID(c.TaskID))
			}
			if c.Params != nil && c.Params.Type != "" {
				attrs = append(attrs, TaskTypeKey.String(c.Params.Type))
			}
			ctx, span := t.tracer.Start(ctx, "s3task."+string(c.Op), trace.WithSpanKind(how.kind), trace.WithAttributes(attrs...))
			defer span.End()
			if c.Op == s3task.OpCreate && c.Params != nil {
				t.inject(ctx, span, c.Params)
			}
			task, err := next(ctx, c)
			if task != nil {
				span.SetAttributes(semconv.MessagingMessageID(task.ID), TaskStatusKey.String(string(task.Status)))
				if task.Type != "" {
					span.SetAttributes(TaskTypeKey.String(task.Type))
				}
			}
			if err != nil {
				span.SetAttributes(semconv.ErrorTypeKey.String(storeErrorType(err)))
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
			return task, err
		}
	}
}

// inject writes the span's context into a copy of p.Metadata, leaving out
// what would not fit the metadata's limits.
func (t *Telemetry) inject(ctx context.Context, span trace.Span, p *s3task.CreateParams) {
	if !span.SpanContext().IsValid() {
		return
	}
	carrier := propagation.MapCarrier{}
	t.prop.Inject(ctx, carrier)
	if len(carrier) == 0 {
		return
	}
	md := maps.Clone(p.Metadata)
	if md == nil {
		md = make(map[string]string, len(carrier))
	}
	size := 0
	for k, v := range md {
		size += len(k) + len(v)
	}
	var dropped []string
	for _, k := range t.prop.Fields() { // in the propagator's order: traceparent before tracestate
		v, ok := carrier[k]
		if !ok {
			continue
		}
		_, had := md[k]
		grow := len(k) + len(v)
		if had {
			grow -= len(k) + len(md[k])
		}
		if len(v) > s3task.MaxMetadataValueLen || size+grow > s3task.MaxMetadataSize ||
			(!had && len(md) >= s3task.MaxMetadataEntries) {
			dropped = append(dropped, k)
			continue
		}
		md[k] = v
		size += grow
	}
	if len(dropped) > 0 {
		span.AddEvent("s3task: trace context left out of the metadata, which it would not fit",
			trace.WithAttributes(attribute.StringSlice("s3task.metadata.dropped", dropped)))
	}
	p.Metadata = md
}

// storeErrorType names the kind of a Store call's error for error.type.
func storeErrorType(err error) string {
	for _, k := range []struct {
		target error
		name   string
	}{
		{s3task.ErrInvalidID, "invalid_id"},
		{s3task.ErrInvalidArgument, "invalid_argument"},
		{s3task.ErrNotFound, "not_found"},
		{s3task.ErrInvalidTransition, "invalid_transition"},
		{s3task.ErrConflict, "conflict"},
		{s3task.ErrOutcomeUnknown, "outcome_unknown"},
		{s3task.ErrInputMissing, "input_missing"},
		{s3task.ErrInputTooLarge, "input_too_large"},
		{context.Canceled, "canceled"},
		{context.DeadlineExceeded, "deadline_exceeded"},
	} {
		if errors.Is(err, k.target) {
			return k.name
		}
	}
	return semconv.ErrorTypeOther.Value.AsString()
}

// Middleware returns the attempt middleware: a span per attempt, with the
// creator's trace context from the task's metadata, and the attempt's
// duration and queue wait. Most hosts call [Telemetry.InstrumentWorker]
// instead, which also installs the hooks that count results.
func (t *Telemetry) Middleware() s3task.Middleware {
	return func(next s3task.Handler) s3task.Handler {
		return s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) (err error) {
			task := &job.Task
			typ := TaskTypeKey.String(task.Type)
			if task.Attempt == 1 && !task.SubmittedAt.IsZero() && !task.StartedAt.IsZero() {
				from := task.SubmittedAt
				if task.RunAt.After(from) {
					from = task.RunAt
				}
				if wait := task.StartedAt.Sub(from); wait >= 0 {
					t.queueWait.Record(ctx, wait.Seconds(), metric.WithAttributes(typ))
				}
			}

			creator := trace.SpanContextFromContext(t.prop.Extract(context.Background(), propagation.MapCarrier(task.Metadata)))
			opts := []trace.SpanStartOption{
				trace.WithSpanKind(trace.SpanKindConsumer),
				trace.WithAttributes(system, semconv.MessagingOperationName("process"), semconv.MessagingOperationTypeProcess,
					semconv.MessagingMessageID(task.ID), typ, AttemptKey.Int(task.Attempt), WorkerIDKey.String(task.WorkerID)),
			}
			parent := ctx
			switch {
			case creator.IsValid() && !t.newRoot:
				parent = trace.ContextWithRemoteSpanContext(ctx, creator)
				opts = append(opts, trace.WithLinks(trace.Link{SpanContext: creator}))
			case creator.IsValid():
				opts = append(opts, trace.WithNewRoot(), trace.WithLinks(trace.Link{SpanContext: creator}))
			default:
				opts = append(opts, trace.WithNewRoot())
			}
			// parent derives from ctx, so the handler's context keeps the
			// attempt's cancellation and its cause.
			work, span := t.tracer.Start(parent, "s3task.process", opts...)

			start := time.Now()
			defer func() {
				r := recover()
				outcome, category := attemptOutcome(ctx, err, r)
				attrs := []attribute.KeyValue{OutcomeKey.String(outcome)}
				if category != "" {
					attrs = append(attrs, semconv.ErrorTypeKey.String(category))
				}
				span.SetAttributes(attrs...)
				switch {
				case r != nil:
					span.SetStatus(codes.Error, fmt.Sprintf("handler panicked: %v", r))
				case outcome == "failed":
					span.RecordError(err)
					span.SetStatus(codes.Error, err.Error())
				}
				t.duration.Record(context.WithoutCancel(ctx), time.Since(start).Seconds(), metric.WithAttributes(typ, OutcomeKey.String(outcome)))
				span.End()
				if r != nil {
					panic(r) // the worker records it as the handler's panic
				}
			}()
			return next.Work(work, job)
		})
	}
}

// attemptOutcome names how an attempt ended, from the handler's error, a
// recovered panic value and the cause of the attempt's context.
func attemptOutcome(ctx context.Context, err error, panicked any) (outcome, category string) {
	cause := context.Cause(ctx)
	switch {
	case panicked != nil:
		return "panic", s3task.CategoryPanic
	case errors.Is(cause, s3task.ErrLeaseLost):
		return "lease_lost", ""
	case errors.Is(cause, s3task.ErrTaskCanceled):
		return "canceled", ""
	case err == nil:
		return "completed", ""
	case errors.Is(cause, s3task.ErrWorkerStopping):
		return "shutdown", ""
	}
	return "failed", s3task.ErrorCategory(err)
}

// Hooks returns worker hooks that count attempts by their recorded
// outcome, lease losses and polls, then call next's hook of the same name
// (if set). Most hosts call [Telemetry.InstrumentWorker] instead.
func (t *Telemetry) Hooks(next s3task.Hooks) s3task.Hooks {
	h := next
	bg := context.Background()
	count := func(task *s3task.Task, outcome, category string) {
		attrs := []attribute.KeyValue{OutcomeKey.String(outcome)}
		if task != nil {
			attrs = append(attrs, TaskTypeKey.String(task.Type))
		}
		if category != "" {
			attrs = append(attrs, semconv.ErrorTypeKey.String(category))
		}
		t.attempts.Add(bg, 1, metric.WithAttributes(attrs...))
	}
	h.OnComplete = func(task *s3task.Task) {
		count(task, "completed", "")
		if next.OnComplete != nil {
			next.OnComplete(task)
		}
	}
	h.OnFail = func(task *s3task.Task, err error) {
		outcome := "retry"
		if task.Terminal() {
			outcome = "failed"
		}
		count(task, outcome, task.ErrorCategory)
		if next.OnFail != nil {
			next.OnFail(task, err)
		}
	}
	h.OnLeaseLost = func(id string, task *s3task.Task, cause error) {
		if errors.Is(cause, s3task.ErrTaskCanceled) {
			count(task, "canceled", "")
		} else {
			count(task, "lease_lost", "")
			var attrs []attribute.KeyValue
			if task != nil {
				attrs = append(attrs, TaskTypeKey.String(task.Type))
			}
			t.leaseLosses.Add(bg, 1, metric.WithAttributes(attrs...))
		}
		if next.OnLeaseLost != nil {
			next.OnLeaseLost(id, task, cause)
		}
	}
	h.OnRelease = func(task *s3task.Task) {
		count(task, "released", "")
		if next.OnRelease != nil {
			next.OnRelease(task)
		}
	}
	h.OnPoll = func(p s3task.PollStats) {
		t.polls.Add(bg, 1)
		t.markers.Add(bg, int64(p.Markers))
		if next.OnPoll != nil {
			next.OnPoll(p)
		}
	}
	return h
}
