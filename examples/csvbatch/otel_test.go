package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/s3task/s3task/s3taskotel"
)

// The tests of -otel set the process's global OpenTelemetry providers, as
// the program does, so none of them runs in parallel with another.

// The caller's trace: the client span that sends the API requests.
const (
	clientTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpanID  = "00f067aa0ba902b7"
	clientParent  = "00-" + clientTraceID + "-" + clientSpanID + "-01"
)

var testCSV = []byte("name,email\nAda Lovelace,ada@example.com\nBob,\n")

// otelService starts a service with -otel on (or off) whose spans and
// metrics stay in memory.
func otelService(t *testing.T, on bool) (*service, *tracetest.SpanRecorder, *sdkmetric.ManualReader) {
	t.Helper()
	spans := tracetest.NewSpanRecorder()
	metrics := sdkmetric.NewManualReader()
	cfg := testConfig(t, svcOptions{})
	cfg.otel = on
	cfg.otelSpans, cfg.otelMetrics = spans, metrics
	return startConfig(t, cfg), spans, metrics
}

// runTraced creates a task with a traceparent header, uploads its input,
// submits it with the same header and waits until the worker completed
// it. It returns the create answer.
func runTraced(t *testing.T, s *service) createResponse {
	t.Helper()
	traced := s.as(s.token, http.Header{"Traceparent": {clientParent}})
	c := traced.create("traced", typeEnrich, map[string]any{"required": []string{"name"}})
	s.uploadPut(c.Upload.Put, testCSV)
	traced.call("POST", "/tasks/"+c.Task.ID+"/submit", nil, http.StatusOK, nil)
	s.waitFor(c.Task.ID, "completed", completed) // without the header: traces of their own
	return c
}

// TestOTelTrace follows one task through the API and the worker and
// checks that its spans form one trace under the caller's span: the
// request, the create, the submit, and the attempt, a child of the create.
func TestOTelTrace(t *testing.T) {
	s, rec, reader := otelService(t, true)
	c := runTraced(t, s)
	id := c.Task.ID

	// The spans of the caller's trace, once the attempt's has ended (it
	// ends before the worker writes the result, so it should be there).
	var spans []sdktrace.ReadOnlySpan
	deadline := time.Now().Add(30 * time.Second)
	for {
		spans = spans[:0]
		for _, sp := range rec.Ended() {
			if sp.SpanContext().TraceID().String() == clientTraceID {
				spans = append(spans, sp)
			}
		}
		if slices.ContainsFunc(spans, func(sp sdktrace.ReadOnlySpan) bool { return sp.Name() == "s3task.process" }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no s3task.process span in the caller's trace after 30s; its spans: %v", spanNames(spans))
		}
		time.Sleep(20 * time.Millisecond)
	}

	one := func(name string) sdktrace.ReadOnlySpan {
		t.Helper()
		var found []sdktrace.ReadOnlySpan
		for _, sp := range spans {
			if sp.Name() == name {
				found = append(found, sp)
			}
		}
		if len(found) != 1 {
			t.Fatalf("%d spans named %q in the caller's trace, want 1; its spans: %v", len(found), name, spanNames(spans))
		}
		return found[0]
	}
	createReq, submitReq := one("POST /tasks"), one("POST /tasks/{id}/submit")
	create, submit, process := one("s3task.create"), one("s3task.submit"), one("s3task.process")

	for _, req := range []sdktrace.ReadOnlySpan{createReq, submitReq} {
		if req.SpanKind() != trace.SpanKindServer || req.Parent().SpanID().String() != clientSpanID || !req.Parent().IsRemote() {
			t.Errorf("%s: kind %s, parent %s (remote %t); want a server span, child of the caller's span %s",
				req.Name(), req.SpanKind(), req.Parent().SpanID(), req.Parent().IsRemote(), clientSpanID)
		}
		if got := attr(req, "http.route"); got == "" {
			t.Errorf("%s: no http.route attribute: %v", req.Name(), req.Attributes())
		}
	}
	if got := attr(createReq, "http.response.status_code"); got != "201" {
		t.Errorf("POST /tasks span: http.response.status_code %q, want 201", got)
	}
	checkChild := func(child, parent sdktrace.ReadOnlySpan, kind trace.SpanKind) {
		t.Helper()
		if child.Parent().SpanID() != parent.SpanContext().SpanID() || child.SpanKind() != kind {
			t.Errorf("%s: kind %s, parent %s; want kind %s, child of %s (%s)",
				child.Name(), child.SpanKind(), child.Parent().SpanID(), kind, parent.Name(), parent.SpanContext().SpanID())
		}
		if got := attr(child, "messaging.message.id"); got != id {
			t.Errorf("%s: messaging.message.id %q, want the task ID %s", child.Name(), got, id)
		}
	}
	checkChild(create, createReq, trace.SpanKindProducer)
	checkChild(submit, submitReq, trace.SpanKindProducer)
	checkChild(process, create, trace.SpanKindConsumer)

	if got := attr(process, "s3task.outcome"); got != "completed" {
		t.Errorf("s3task.process: s3task.outcome %q, want completed", got)
	}
	if got := attr(process, "s3task.attempt"); got != "1" {
		t.Errorf("s3task.process: s3task.attempt %q, want 1", got)
	}
	if process.Status().Code == codes.Error {
		t.Errorf("s3task.process: status %v", process.Status())
	}
	if links := process.Links(); len(links) != 1 || links[0].SpanContext.SpanID() != create.SpanContext().SpanID() {
		t.Errorf("s3task.process: links %v, want one, to the create span", links)
	}
	// The attempt ran after the request: the trace reads in order.
	if !process.StartTime().After(create.EndTime()) && !process.StartTime().Equal(create.EndTime()) {
		t.Errorf("s3task.process started at %s, before s3task.create ended at %s", process.StartTime(), create.EndTime())
	}

	// The task's metadata holds the create span's context, and the API
	// shows it.
	want := "00-" + clientTraceID + "-" + create.SpanContext().SpanID().String() + "-01"
	if got := c.Task.Metadata["traceparent"]; got != want {
		t.Errorf("created task's metadata.traceparent %q, want %q", got, want)
	}
	if got := s.get(id).Metadata["traceparent"]; got != want {
		t.Errorf("GET /tasks/{id}: metadata.traceparent %q, want %q", got, want)
	}

	// Both metrics: s3taskotel counts the attempt, and the Prometheus
	// hooks, which InstrumentWorker chained after its own, still count it.
	m := waitMetrics(t, s, s.base+"/metrics", "the completion", func(m scrape) bool {
		return m[series("s3task_worker_completions_total", "type", typeEnrich)] == 1
	})
	if got := m[series("s3task_worker_claims_total", "type", typeEnrich)]; got != 1 {
		t.Errorf("Prometheus claims: %v, want 1", got)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	if got := sumOf(rm, "s3task.attempts", attribute.String("s3task.outcome", "completed")); got != 1 {
		t.Errorf("OpenTelemetry s3task.attempts{outcome=completed} = %d, want 1", got)
	}
}

// TestOTelOff runs the same flow without -otel: no telemetry is set up,
// no span is recorded, the global providers are left alone and the task
// carries no trace context.
func TestOTelOff(t *testing.T) {
	tracerBefore, meterBefore := otel.GetTracerProvider(), otel.GetMeterProvider()
	s, rec, reader := otelService(t, false)
	if s.app.otel != nil {
		t.Fatal("telemetry set up without -otel")
	}
	c := runTraced(t, s)
	if spans := rec.Ended(); len(spans) > 0 {
		t.Errorf("%d spans recorded without -otel: %v", len(spans), spanNames(spans))
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); !errors.Is(err, sdkmetric.ErrReaderNotRegistered) {
		t.Errorf("the metric reader was registered without -otel (Collect: %v)", err)
	}
	if md := s.get(c.Task.ID).Metadata; len(md) > 0 {
		t.Errorf("task metadata without -otel: %v", md)
	}
	if otel.GetTracerProvider() != tracerBefore || otel.GetMeterProvider() != meterBefore {
		t.Error("the global providers changed without -otel")
	}
}

// TestOTelStdout runs the program as main does with -otel: the banner
// says where the telemetry goes, and at exit the spans and metrics are
// flushed to stdout as JSON.
func TestOTelStdout(t *testing.T) {
	t.Setenv(otlpEndpointEnv, "") // whatever the environment says: stdout
	out := runProgram(t, "-otel")
	if !strings.Contains(out, "csvbatch: otel    stdout") {
		t.Errorf("the banner does not say the telemetry goes to stdout:\n%s", out)
	}
	names := map[string]bool{}
	for line := range strings.SplitSeq(out, "\n") {
		var span struct {
			Name        string
			SpanContext struct{ TraceID string }
		}
		if json.Unmarshal([]byte(line), &span) == nil && span.SpanContext.TraceID == clientTraceID {
			names[span.Name] = true
		}
	}
	for _, name := range []string{"POST /tasks", "s3task.create"} {
		if !names[name] {
			t.Errorf("no %q span of the caller's trace on stdout (found %v):\n%s", name, names, out)
		}
	}
	// The request's duration was recorded before the program was stopped,
	// so the export at exit holds it.
	if !strings.Contains(out, `"http.server.request.duration"`) {
		t.Errorf("no metrics on stdout:\n%s", out)
	}

	// Without -otel nothing of the kind is printed.
	out = runProgram(t)
	if strings.Contains(out, "csvbatch: otel") || strings.Contains(out, "SpanContext") || strings.Contains(out, "http.server.request.duration") {
		t.Errorf("telemetry output without -otel:\n%s", out)
	}
}

// runProgram runs the program with args (and a fast in-memory setup),
// creates a task through the API with the caller's traceparent, stops the
// program and returns all it printed on stdout.
func runProgram(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := run(ctx, append([]string{"-listen", "127.0.0.1:0", "-data", "", "-poll", "20ms", "-poll-max", "100ms", "-summary-schedule", "off"}, args...), pw, io.Discard)
		pw.CloseWithError(errors.New("run returned"))
		done <- err
	}()
	var (
		mu    sync.Mutex
		lines []string
		api   string
		ready = make(chan struct{})
		ended = make(chan struct{})
	)
	go func() {
		defer close(ended)
		sc := bufio.NewScanner(pr)
		sc.Buffer(nil, 1<<20) // a metrics export is one long line
		for sc.Scan() {
			mu.Lock()
			lines = append(lines, sc.Text())
			mu.Unlock()
			if rest, ok := strings.CutPrefix(sc.Text(), "csvbatch: API"); ok {
				api = strings.TrimSpace(rest)
			}
			if strings.HasPrefix(sc.Text(), "csvbatch: worker") {
				close(ready) // the banner's last line before the warning
			}
		}
		io.Copy(io.Discard, pr)
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("run: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no banner after 30s")
	}

	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, "POST", api, strings.NewReader(`{"name":"traced","type":"csv_stats"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Traceparent", clientParent)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Errorf("POST %s: %s", api, resp.Status)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return after its context was cancelled")
	}
	<-ended
	mu.Lock()
	defer mu.Unlock()
	return strings.Join(lines, "\n")
}

// TestOTelOTLP checks that OTEL_EXPORTER_OTLP_ENDPOINT sends the spans and
// metrics over OTLP/HTTP instead of stdout.
func TestOTelOTLP(t *testing.T) {
	var (
		mu    sync.Mutex
		paths = map[string]int{}
	)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		paths[r.Method+" "+r.URL.Path+" "+r.Header.Get("Content-Type")]++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer collector.Close()
	t.Setenv(otlpEndpointEnv, collector.URL) // the exporters read it themselves

	out := runProgram(t, "-otel")
	if !strings.Contains(out, "csvbatch: otel    OTLP/HTTP to "+collector.URL) {
		t.Errorf("the banner does not name the OTLP endpoint:\n%s", out)
	}
	if strings.Contains(out, "SpanContext") {
		t.Errorf("spans on stdout with an OTLP endpoint:\n%s", out)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, want := range []string{"POST /v1/traces application/x-protobuf", "POST /v1/metrics application/x-protobuf"} {
		if paths[want] == 0 {
			t.Errorf("the collector got no %s; it got %v", want, paths)
		}
	}
}

// TestOTelConfig checks the flag and the environment variables.
func TestOTelConfig(t *testing.T) {
	t.Parallel()
	env := map[string]string{otlpEndpointEnv: " http://127.0.0.1:4318 ", "CSVBATCH_OTEL": "true"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	cfg, err := parseConfig(nil, lookup, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.otel || cfg.otlpEndpoint != "http://127.0.0.1:4318" {
		t.Errorf("otel %t, endpoint %q; want true and the variable's URL", cfg.otel, cfg.otlpEndpoint)
	}
	cfg, err = parseConfig(nil, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.otel || cfg.otlpEndpoint != "" {
		t.Errorf("defaults: otel %t, endpoint %q; want off and none", cfg.otel, cfg.otlpEndpoint)
	}
}

// attr returns the span's attribute key as text, "" if it has none.
func attr(sp sdktrace.ReadOnlySpan, key attribute.Key) string {
	for _, kv := range sp.Attributes() {
		if kv.Key == key {
			return kv.Value.String()
		}
	}
	return ""
}

func spanNames(spans []sdktrace.ReadOnlySpan) []string {
	var names []string
	for _, sp := range spans {
		names = append(names, sp.Name()+" ("+sp.SpanContext().TraceID().String()[:8]+")")
	}
	return names
}

// sumOf adds up the points of the Int64 sum name, in s3taskotel's scope,
// that carry attribute want.
func sumOf(rm metricdata.ResourceMetrics, name string, want attribute.KeyValue) int64 {
	var n int64
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != s3taskotel.ScopeName {
			continue
		}
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if m.Name != name || !ok {
				continue
			}
			for _, p := range sum.DataPoints {
				if v, ok := p.Attributes.Value(want.Key); ok && v == want.Value {
					n += p.Value
				}
			}
		}
	}
	return n
}
