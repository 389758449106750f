package s3taskotel_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/google/go-cmp/cmp"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/s3taskotel"
	"github.com/s3task/s3task/s3tasktest"
)

// process is one process's telemetry: its own providers, span recorder
// and metric reader.
type process struct {
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	tp     *sdktrace.TracerProvider
	tel    *s3taskotel.Telemetry
}

func newProcess(t *testing.T, newRoot bool) *process {
	t.Helper()
	p := &process{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	p.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(p.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(p.reader))
	t.Cleanup(func() {
		_ = p.tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	var err error
	p.tel, err = s3taskotel.New(&s3taskotel.Options{TracerProvider: p.tp, MeterProvider: mp, NewRootAttempts: newRoot})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// named returns the ended spans called name, in the order they ended.
func (p *process) named(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range p.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func (p *process) one(t *testing.T, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	got := p.named(name)
	if len(got) != 1 {
		t.Fatalf("%d spans named %s, want 1", len(got), name)
	}
	return got[0]
}

// attrs returns a span's attributes as strings, by key.
func attrs(s sdktrace.ReadOnlySpan) map[string]string {
	m := map[string]string{}
	for _, kv := range s.Attributes() {
		m[string(kv.Key)] = kv.Value.String()
	}
	return m
}

// wantAttrs fails t for every attribute of want that s lacks or has
// otherwise; a want of "" means the attribute must be absent.
func wantAttrs(t *testing.T, s sdktrace.ReadOnlySpan, want map[string]string) {
	t.Helper()
	got := attrs(s)
	for k, v := range want {
		g, ok := got[k]
		switch {
		case v == "" && ok:
			t.Errorf("%s: attribute %s = %q, want none", s.Name(), k, g)
		case v != "" && g != v:
			t.Errorf("%s: attribute %s = %q, want %q", s.Name(), k, g, v)
		}
	}
}

// instrumented returns a Store on s3 with its own client, instrumented by p.
func (p *process) store(t *testing.T, s3 *s3tasktest.S3) *s3task.Store {
	opts := &s3task.StoreOptions{}
	p.tel.InstrumentStore(opts)
	return s3.NewStore(t, opts)
}

func (p *process) workerOptions(extra ...s3task.Middleware) *s3task.WorkerOptions {
	opts := &s3task.WorkerOptions{ID: "w-1", Middleware: extra}
	p.tel.InstrumentWorker(opts)
	return opts
}

// produce creates, uploads and submits a task inside a span standing for
// the host's HTTP request, and returns the task and that span's context.
func produce(t *testing.T, producer *process, store *s3task.Store, p s3task.CreateParams) (*s3task.Task, trace.SpanContext) {
	t.Helper()
	ctx, req := producer.tp.Tracer("host").Start(context.Background(), "POST /tasks", trace.WithSpanKind(trace.SpanKindServer))
	defer req.End()
	task, err := store.Create(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.UploadInput(ctx, task.ID, strings.NewReader("a,b\n")); err != nil {
		t.Fatal(err)
	}
	if task, err = store.Submit(ctx, task.ID); err != nil {
		t.Fatal(err)
	}
	return task, req.SpanContext()
}

// The trace runs from the producer's request through create to each
// attempt in a worker of another process, with its own S3 client: the
// create span's context travels in the task's metadata, each attempt's
// span is its child and links to it, and the handler's own spans are
// children of the attempt's.
func TestTraceFromRequestToAttempts(t *testing.T) {
	s3 := s3tasktest.NewS3(t)
	producer, worker := newProcess(t, false), newProcess(t, false)
	store := producer.store(t, s3)
	task, request := produce(t, producer, store, s3task.CreateParams{Name: "import", Type: "csv", MaxAttempts: 2})

	create := producer.one(t, "s3task.create")
	if create.Parent().SpanID() != request.SpanID() || create.SpanContext().TraceID() != request.TraceID() {
		t.Fatalf("create span's parent is %v, want the request span %v", create.Parent().SpanID(), request.SpanID())
	}
	if create.SpanKind() != trace.SpanKindProducer {
		t.Errorf("create span kind %v, want producer", create.SpanKind())
	}
	wantAttrs(t, create, map[string]string{
		"messaging.system": "s3task", "messaging.operation.name": "create", "messaging.operation.type": "create",
		"messaging.message.id": task.ID, "s3task.task.type": "csv", "s3task.task.status": "created",
	})
	submit := producer.one(t, "s3task.submit")
	wantAttrs(t, submit, map[string]string{"messaging.operation.type": "send", "messaging.message.id": task.ID, "s3task.task.status": "queued"})
	if submit.Parent().SpanID() != request.SpanID() {
		t.Errorf("submit span's parent is %v, want the request span", submit.Parent().SpanID())
	}
	wantParent := fmt.Sprintf("00-%s-%s-01", create.SpanContext().TraceID(), create.SpanContext().SpanID())
	if got := task.Metadata["traceparent"]; got != wantParent {
		t.Fatalf("metadata traceparent = %q, want the create span's %q", got, wantParent)
	}

	// The worker: its own Store, client and providers. Attempt 1 fails,
	// attempt 2 completes after the backoff.
	wstore := s3.NewStore(t, nil)
	attempt := 0
	h := s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		attempt++
		_, own := trace.SpanFromContext(ctx).TracerProvider().Tracer("handler").Start(ctx, "parse csv")
		own.End()
		if attempt == 1 {
			return s3task.WithCategory(errors.New("upstream down"), "upstream")
		}
		return job.WriteOutput(ctx, strings.NewReader("ok"))
	})
	res := s3tasktest.Run(t, wstore, h, task.ID, worker.workerOptions())
	if res.Task.Status != s3task.StatusFailed || res.Task.Terminal() {
		t.Fatalf("attempt 1 left %s (terminal %v), want failed with a retry", res.Task.Status, res.Task.Terminal())
	}
	s3.Advance(time.Hour)
	if res = s3tasktest.Run(t, wstore, h, task.ID, worker.workerOptions()); res.Task.Status != s3task.StatusCompleted {
		t.Fatalf("attempt 2 left %s, want completed", res.Task.Status)
	}

	attempts := worker.named("s3task.process")
	if len(attempts) != 2 {
		t.Fatalf("%d attempt spans, want 2", len(attempts))
	}
	for i, a := range attempts {
		if a.SpanContext().TraceID() != request.TraceID() || a.Parent().SpanID() != create.SpanContext().SpanID() || !a.Parent().IsRemote() {
			t.Errorf("attempt %d: trace %s parent %s (remote %v), want the create span %s of trace %s",
				i+1, a.SpanContext().TraceID(), a.Parent().SpanID(), a.Parent().IsRemote(), create.SpanContext().SpanID(), request.TraceID())
		}
		if links := a.Links(); len(links) != 1 || links[0].SpanContext.SpanID() != create.SpanContext().SpanID() {
			t.Errorf("attempt %d: links %v, want one to the create span", i+1, links)
		}
		if a.SpanKind() != trace.SpanKindConsumer {
			t.Errorf("attempt %d: kind %v, want consumer", i+1, a.SpanKind())
		}
	}
	wantAttrs(t, attempts[0], map[string]string{
		"messaging.system": "s3task", "messaging.operation.name": "process", "messaging.operation.type": "process",
		"messaging.message.id": task.ID, "s3task.task.type": "csv", "s3task.attempt": "1", "s3task.worker.id": "w-1",
		"s3task.outcome": "failed", "error.type": "upstream",
	})
	if st := attempts[0].Status(); st.Code != codes.Error || st.Description != "upstream down" {
		t.Errorf("failed attempt's status %v, want Error with the message", st)
	}
	wantAttrs(t, attempts[1], map[string]string{"s3task.attempt": "2", "s3task.outcome": "completed", "error.type": ""})
	if attempts[1].Status().Code == codes.Error {
		t.Errorf("completed attempt has status Error")
	}
	own := worker.named("parse csv")
	if len(own) != 2 {
		t.Fatalf("%d handler spans, want 2", len(own))
	}
	for i, s := range own {
		if s.Parent().SpanID() != attempts[i].SpanContext().SpanID() {
			t.Errorf("handler span %d: parent %s, want its attempt's span %s", i+1, s.Parent().SpanID(), attempts[i].SpanContext().SpanID())
		}
	}
}

// With NewRootAttempts each attempt starts a trace of its own, linked to
// the create span.
func TestNewRootAttempts(t *testing.T) {
	s3 := s3tasktest.NewS3(t)
	producer, worker := newProcess(t, false), newProcess(t, true)
	task, request := produce(t, producer, producer.store(t, s3), s3task.CreateParams{Name: "x"})
	create := producer.one(t, "s3task.create")
	s3tasktest.Run(t, s3.NewStore(t, nil), s3task.HandlerFunc(func(context.Context, *s3task.Job) error { return nil }), task.ID, worker.workerOptions())
	a := worker.one(t, "s3task.process")
	if a.Parent().IsValid() || a.SpanContext().TraceID() == request.TraceID() {
		t.Errorf("attempt: parent %v, trace %s; want a root span in a trace of its own", a.Parent(), a.SpanContext().TraceID())
	}
	if links := a.Links(); len(links) != 1 || links[0].SpanContext.SpanID() != create.SpanContext().SpanID() ||
		links[0].SpanContext.TraceID() != request.TraceID() {
		t.Errorf("links %v, want one to the create span", links)
	}
}

// A task created without a trace (an uninstrumented Store) gets a root
// attempt span with no link; the attempt still runs.
func TestAttemptWithoutCreator(t *testing.T) {
	s3 := s3tasktest.NewS3(t)
	worker := newProcess(t, false)
	store := s3.NewStore(t, nil)
	task := s3tasktest.Submit(t, store, s3task.CreateParams{Name: "plain"}, []byte("x"))
	if _, ok := task.Metadata["traceparent"]; ok {
		t.Fatalf("an uninstrumented store wrote a traceparent")
	}
	// Run's context may hold a span of the host's; the attempt does not
	// become its child.
	res := s3tasktest.Run(t, store, s3task.HandlerFunc(func(context.Context, *s3task.Job) error { return nil }), task.ID, worker.workerOptions())
	if res.Task.Status != s3task.StatusCompleted {
		t.Fatalf("status %s", res.Task.Status)
	}
	a := worker.one(t, "s3task.process")
	if a.Parent().IsValid() || len(a.Links()) != 0 {
		t.Errorf("parent %v, links %v; want a root span without links", a.Parent(), a.Links())
	}
}

// The trace context goes into a copy of the caller's metadata, and is
// left out, with an event, when the metadata has no room; the task is
// created either way.
func TestInjectRespectsMetadataLimits(t *testing.T) {
	s3 := s3tasktest.NewS3(t)
	producer := newProcess(t, false)
	store := producer.store(t, s3)
	ctx := context.Background()

	mine := map[string]string{"tenant": "acme"}
	task, err := store.Create(ctx, s3task.CreateParams{Metadata: mine})
	if err != nil {
		t.Fatal(err)
	}
	if len(mine) != 1 || task.Metadata["tenant"] != "acme" || task.Metadata["traceparent"] == "" {
		t.Errorf("caller's map %v, task's %v; want the caller's untouched and the task's with both", mine, task.Metadata)
	}

	full := map[string]string{}
	for i := range s3task.MaxMetadataEntries {
		full[fmt.Sprintf("k%02d", i)] = "v"
	}
	task, err = store.Create(ctx, s3task.CreateParams{Metadata: full})
	if err != nil {
		t.Fatalf("create with full metadata: %v", err)
	}
	if _, ok := task.Metadata["traceparent"]; ok || len(task.Metadata) != s3task.MaxMetadataEntries {
		t.Errorf("metadata has %d entries (traceparent: %v), want the caller's %d only", len(task.Metadata), ok, s3task.MaxMetadataEntries)
	}
	last := producer.named("s3task.create")
	events := last[len(last)-1].Events()
	if len(events) != 1 || !strings.Contains(events[0].Name, "left out") {
		t.Errorf("events %v, want one saying the trace context was left out", events)
	}
}

// A refused Store call has an error span with error.type naming the
// kind of error.
func TestStoreSpanError(t *testing.T) {
	s3 := s3tasktest.NewS3(t)
	producer := newProcess(t, false)
	store := producer.store(t, s3)
	ctx := context.Background()
	task, err := store.Create(ctx, s3task.CreateParams{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Retry(ctx, task.ID); !errors.Is(err, s3task.ErrInvalidTransition) {
		t.Fatalf("retry of a created task: %v", err)
	}
	if _, err := store.Schedule(ctx, task.ID, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Cancel(ctx, task.ID, "done"); err != nil {
		t.Fatal(err)
	}
	retry := producer.one(t, "s3task.retry")
	wantAttrs(t, retry, map[string]string{"error.type": "invalid_transition", "messaging.message.id": task.ID})
	if retry.Status().Code != codes.Error || retry.SpanKind() != trace.SpanKindProducer {
		t.Errorf("retry span status %v, kind %v; want Error, producer", retry.Status(), retry.SpanKind())
	}
	schedule := producer.one(t, "s3task.schedule")
	wantAttrs(t, schedule, map[string]string{"messaging.operation.name": "schedule", "messaging.operation.type": "", "s3task.task.status": "created"})
	if schedule.SpanKind() != trace.SpanKindClient {
		t.Errorf("schedule span kind %v, want client", schedule.SpanKind())
	}
	cancel := producer.one(t, "s3task.cancel")
	wantAttrs(t, cancel, map[string]string{"s3task.task.status": "abandoned", "messaging.operation.type": "", "error.type": ""})
	if cancel.SpanKind() != trace.SpanKindClient {
		t.Errorf("cancel span kind %v, want client", cancel.SpanKind())
	}
}

// A panic passes through the attempt's span, which records it, and the
// worker records it as the handler's panic.
func TestAttemptPanic(t *testing.T) {
	s3 := s3tasktest.NewS3(t)
	worker := newProcess(t, false)
	store := s3.NewStore(t, nil)
	task := s3tasktest.Submit(t, store, s3task.CreateParams{MaxAttempts: 1}, []byte("x"))
	res := s3tasktest.Run(t, store, s3task.HandlerFunc(func(context.Context, *s3task.Job) error { panic("kaput") }), task.ID, worker.workerOptions())
	if res.Task.ErrorCategory != s3task.CategoryPanic {
		t.Errorf("record category %q, want panic", res.Task.ErrorCategory)
	}
	a := worker.one(t, "s3task.process")
	wantAttrs(t, a, map[string]string{"s3task.outcome": "panic", "error.type": "panic"})
	if a.Status().Code != codes.Error || !strings.Contains(a.Status().Description, "kaput") {
		t.Errorf("status %v, want Error naming the panic", a.Status())
	}
}

// collect returns the metrics p recorded, by name.
func (p *process) collect(t *testing.T) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := p.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != s3taskotel.ScopeName {
			continue
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// sums returns a counter's values keyed by the given attributes' values,
// joined with "/".
func sums(t *testing.T, m metricdata.Metrics, keys ...attribute.Key) map[string]int64 {
	t.Helper()
	sum, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s is %T, want an int64 sum", m.Name, m.Data)
	}
	out := map[string]int64{}
	for _, dp := range sum.DataPoints {
		var parts []string
		for _, k := range keys {
			v, _ := dp.Attributes.Value(k)
			parts = append(parts, v.String())
		}
		out[strings.Join(parts, "/")] += dp.Value
	}
	return out
}

// Every metric of the documented table, from real attempts: outcomes as
// recorded, durations, the first attempt's queue wait by the server's
// clock, a lease lost to another worker, a cancel, and polls.
func TestMetrics(t *testing.T) {
	s3 := s3tasktest.NewS3(t)
	worker := newProcess(t, false)
	store := s3.NewStore(t, nil)
	ctx := context.Background()
	ok := s3task.HandlerFunc(func(context.Context, *s3task.Job) error { return nil })
	failing := s3task.HandlerFunc(func(context.Context, *s3task.Job) error { return errors.New("no") })

	// Completed, after 90 s in the queue.
	done := s3tasktest.Submit(t, store, s3task.CreateParams{Type: "a"}, []byte("x"))
	s3.Advance(90 * time.Second)
	s3tasktest.Run(t, store, ok, done.ID, worker.workerOptions())
	// Failed twice: once with a retry to come, then for good.
	twice := s3tasktest.Submit(t, store, s3task.CreateParams{Type: "b", MaxAttempts: 2}, []byte("x"))
	s3tasktest.Run(t, store, failing, twice.ID, worker.workerOptions())
	s3.Advance(time.Hour)
	s3tasktest.Run(t, store, failing, twice.ID, worker.workerOptions())

	// Cancelled while running.
	short := &s3task.WorkerOptions{ID: "w-1", LeaseDuration: 3 * time.Second, ClockMargin: time.Second}
	worker.tel.InstrumentWorker(short)
	canceled := s3tasktest.Submit(t, store, s3task.CreateParams{Type: "c"}, []byte("x"))
	started := make(chan struct{})
	wait := s3task.HandlerFunc(func(ctx context.Context, _ *s3task.Job) error {
		close(started)
		<-ctx.Done()
		return context.Cause(ctx)
	})
	w, err := s3task.NewWorker(store, wait, short)
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { _, err := w.RunTask(ctx, canceled.ID); ran <- err }()
	<-started
	if _, err := store.Cancel(ctx, canceled.ID, "stop"); err != nil {
		t.Fatal(err)
	}
	if err := <-ran; err != nil {
		t.Fatal(err)
	}

	// A lease lost: the server's clock passes the lease, another worker
	// takes the task over, and the first one's next renewal fails.
	lost := s3tasktest.Submit(t, store, s3task.CreateParams{Type: "d"}, []byte("x"))
	started = make(chan struct{})
	if w, err = s3task.NewWorker(store, wait, short); err != nil {
		t.Fatal(err)
	}
	go func() { _, err := w.RunTask(ctx, lost.ID); ran <- err }()
	<-started
	s3.Advance(time.Minute)
	if res := s3tasktest.Run(t, s3.NewStore(t, nil), ok, lost.ID); res.Task.Status != s3task.StatusCompleted {
		t.Fatalf("the other worker left %s", res.Task.Status)
	}
	if err := <-ran; err != nil {
		t.Fatal(err)
	}

	// Polls: a running worker lists the markers at least once.
	polled := make(chan s3task.PollStats, 1)
	popts := &s3task.WorkerOptions{PollInterval: 10 * time.Millisecond, Hooks: s3task.Hooks{OnPoll: func(p s3task.PollStats) {
		select {
		case polled <- p:
		default:
		}
	}}}
	worker.tel.InstrumentWorker(popts)
	s3tasktest.Submit(t, store, s3task.CreateParams{Type: "e"}, []byte("x"))
	pw, err := s3task.NewWorker(store, ok, popts)
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- pw.Run(rctx) }()
	first := <-polled // the host's own hook still runs
	stop()
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}

	// The attempt spans name the same outcomes, as the handlers saw them.
	outcomes := map[string]string{}
	for _, a := range worker.named("s3task.process") {
		got := attrs(a)
		outcomes[got["s3task.task.type"]] += got["s3task.outcome"] + " "
	}
	if diff := cmp.Diff(map[string]string{
		"a": "completed ", "b": "failed failed ", "c": "canceled ", "d": "lease_lost ", "e": "completed ",
	}, outcomes); diff != "" {
		t.Errorf("attempt spans' outcomes by type (-want +got):\n%s", diff)
	}

	m := worker.collect(t)
	got := sums(t, m["s3task.attempts"], s3taskotel.TaskTypeKey, s3taskotel.OutcomeKey, "error.type")
	want := map[string]int64{
		"a/completed/": 1, "b/retry/transient": 1, "b/failed/transient": 1,
		"c/canceled/": 1, "d/lease_lost/": 1, "e/completed/": 1,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("s3task.attempts{%s} = %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
	if losses := sums(t, m["s3task.lease.losses"], s3taskotel.TaskTypeKey); len(losses) != 1 || losses["d"] != 1 {
		t.Errorf("s3task.lease.losses = %v, want d: 1", losses)
	}
	if n := sums(t, m["s3task.polls"])[""]; n < 1 {
		t.Errorf("s3task.polls = %d, want at least 1", n)
	}
	if n := sums(t, m["s3task.poll.markers"])[""]; n < int64(first.Markers) || first.Markers < 1 {
		t.Errorf("s3task.poll.markers = %d, first poll saw %d; want at least that, and at least 1", n, first.Markers)
	}

	dur, isHist := m["s3task.attempt.duration"].Data.(metricdata.Histogram[float64])
	if !isHist || m["s3task.attempt.duration"].Unit != "s" {
		t.Fatalf("s3task.attempt.duration is %T in %q, want a float64 histogram in s", m["s3task.attempt.duration"].Data, m["s3task.attempt.duration"].Unit)
	}
	var attemptsTimed uint64
	for _, dp := range dur.DataPoints {
		attemptsTimed += dp.Count
	}
	if attemptsTimed != 6 {
		t.Errorf("s3task.attempt.duration counted %d attempts, want 6 (a, b twice, c, d, e)", attemptsTimed)
	}

	qw, isHist := m["s3task.queue.wait"].Data.(metricdata.Histogram[float64])
	if !isHist {
		t.Fatalf("s3task.queue.wait is %T", m["s3task.queue.wait"].Data)
	}
	waits := map[string]metricdata.HistogramDataPoint[float64]{}
	for _, dp := range qw.DataPoints {
		v, _ := dp.Attributes.Value(s3taskotel.TaskTypeKey)
		waits[v.String()] = dp
	}
	// b's second attempt is not a first one: one wait per task.
	for typ, dp := range waits {
		if dp.Count != 1 {
			t.Errorf("queue wait of type %s counted %d times, want once", typ, dp.Count)
		}
	}
	// The times are the server's clock as the library reads it from Date
	// headers, to a second.
	if a := waits["a"]; a.Count != 1 || a.Sum < 88.5 || a.Sum > 91.5 {
		t.Errorf("queue wait of the task left 90 s in the queue: %v s over %d, want 90 s ± 1.5 s", a.Sum, a.Count)
	}
}

// A handler that returns an error after its worker began to stop, or that
// returns at all after its lease or task is gone, is labelled by the cause
// of its context, not as a plain failure.
func TestAttemptOutcomeFollowsCause(t *testing.T) {
	worker := newProcess(t, false)
	mw := worker.tel.Middleware()
	job := &s3task.Job{Task: s3task.Task{ID: "7YBQ8XNVT7VXV4E6Q8DFRK2132", Attempt: 1}}
	cases := []struct {
		cause   error
		err     error
		outcome string
	}{
		{s3task.ErrWorkerStopping, errors.New("interrupted"), "shutdown"},
		{s3task.ErrWorkerStopping, nil, "completed"}, // finished in time: the worker completes it
		{s3task.ErrLeaseLost, nil, "lease_lost"},
		{s3task.ErrTaskCanceled, errors.New("stopped"), "canceled"},
	}
	for i, c := range cases {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(c.cause)
		_ = mw(s3task.HandlerFunc(func(context.Context, *s3task.Job) error { return c.err })).Work(ctx, job)
		spans := worker.named("s3task.process")
		if got := attrs(spans[len(spans)-1])["s3task.outcome"]; got != c.outcome {
			t.Errorf("case %d: cause %v, error %v: outcome %q, want %q", i, c.cause, c.err, got, c.outcome)
		}
	}
}
