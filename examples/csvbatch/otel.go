package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/s3task/s3task/s3taskotel"
)

// OpenTelemetry (-otel): one trace follows a task from the API request
// that created it, through the Store's calls, to the worker's attempts
// (s3taskotel carries the trace context in the task's metadata), and
// s3taskotel's metrics count the attempts. Spans and metrics go to stdout
// as JSON, or over OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT is set. The
// Prometheus metrics of /metrics are kept either way.

// otlpEndpointEnv is the standard variable that switches the export from
// stdout to OTLP over HTTP. The exporters read it, and the other
// OTEL_EXPORTER_OTLP_* variables (headers, timeout, per-signal endpoints),
// themselves.
const otlpEndpointEnv = "OTEL_EXPORTER_OTLP_ENDPOINT"

// serviceName is the service.name of the exported resource, unless
// OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES names another.
const serviceName = "csvbatch"

// telemetry is the process's OpenTelemetry setup: the SDK providers, the
// propagator, and the s3taskotel instrumentation built on them.
type telemetry struct {
	traces  *sdktrace.TracerProvider
	metrics *sdkmetric.MeterProvider
	prop    propagation.TextMapPropagator
	s3task  *s3taskotel.Telemetry
	about   string // one line for the start-up banner
}

// newTelemetry builds the providers and exporters cfg asks for, makes
// them and the W3C trace context propagator the process's global ones, so
// that code the handlers call finds them too, and returns the setup.
// Spans and metrics are written to stdout unless cfg.otlpEndpoint is set.
func newTelemetry(ctx context.Context, cfg *config, stdout io.Writer) (*telemetry, error) {
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(serviceName)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
		resource.WithTelemetrySDK(),
	)
	if err != nil {
		return nil, fmt.Errorf("OpenTelemetry resource: %w", err)
	}

	var (
		spans  = cfg.otelSpans
		reader = cfg.otelMetrics
		about  string
	)
	switch {
	case spans != nil || reader != nil:
		about = "in memory" // a test's recorder
	case cfg.otlpEndpoint != "":
		about = "OTLP/HTTP to " + cfg.otlpEndpoint + " (" + otlpEndpointEnv + ")"
	default:
		about = "stdout (JSON, a span per line; set " + otlpEndpointEnv + " for OTLP/HTTP)"
	}
	if spans == nil {
		var exp sdktrace.SpanExporter
		if cfg.otlpEndpoint != "" {
			exp, err = otlptracehttp.New(ctx)
		} else {
			exp, err = stdouttrace.New(stdouttrace.WithWriter(stdout))
		}
		if err != nil {
			return nil, fmt.Errorf("OpenTelemetry trace exporter: %w", err)
		}
		spans = sdktrace.NewBatchSpanProcessor(exp)
	}
	if reader == nil {
		var exp sdkmetric.Exporter
		if cfg.otlpEndpoint != "" {
			exp, err = otlpmetrichttp.New(ctx)
		} else {
			exp, err = stdoutmetric.New(stdoutmetric.WithWriter(stdout))
		}
		if err != nil {
			return nil, errors.Join(fmt.Errorf("OpenTelemetry metric exporter: %w", err), spans.Shutdown(ctx))
		}
		// Every minute, or OTEL_METRIC_EXPORT_INTERVAL, and once more at
		// shutdown.
		reader = sdkmetric.NewPeriodicReader(exp)
	}

	t := &telemetry{
		traces:  sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithSpanProcessor(spans)),
		metrics: sdkmetric.NewMeterProvider(sdkmetric.WithResource(res), sdkmetric.WithReader(reader)),
		prop:    propagation.TraceContext{},
		about:   about,
	}
	t.s3task, err = s3taskotel.New(&s3taskotel.Options{TracerProvider: t.traces, MeterProvider: t.metrics, Propagator: t.prop})
	if err != nil {
		return nil, errors.Join(err, t.shutdown(ctx))
	}
	otel.SetTracerProvider(t.traces)
	otel.SetMeterProvider(t.metrics)
	otel.SetTextMapPropagator(t.prop)
	return t, nil
}

// handler wraps the API's handler so that each request under /tasks gets a
// server span, a child of the caller's span when the request carries a
// traceparent header. The page's files and /metrics are not traced: they
// are polled and scraped, and would bury the API's traces.
func (t *telemetry) handler(next http.Handler) http.Handler {
	return otelhttp.NewHandler(withRoute(next), serviceName,
		otelhttp.WithTracerProvider(t.traces),
		otelhttp.WithMeterProvider(t.metrics),
		otelhttp.WithPropagators(t.prop),
		otelhttp.WithFilter(func(r *http.Request) bool {
			return r.URL.Path == "/tasks" || strings.HasPrefix(r.URL.Path, "/tasks/")
		}),
	)
}

// withRoute adds the route the mux matched (its pattern without the
// method, "/tasks/{id}/submit") to the request's span as http.route once
// next has served the request: the mux sets the pattern on the request it
// is given, which otelhttp names the span after but does not record.
func withRoute(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r)
		if r.Pattern == "" {
			return
		}
		route := r.Pattern
		if _, path, ok := strings.Cut(route, " "); ok {
			route = path
		}
		trace.SpanFromContext(r.Context()).SetAttributes(semconv.HTTPRoute(route))
	})
}

// shutdown flushes what is buffered (spans, the last metrics) to the
// exporters and stops them.
func (t *telemetry) shutdown(ctx context.Context) error {
	var (
		wg   sync.WaitGroup
		errs = make([]error, 2)
	)
	wg.Go(func() { errs[0] = t.traces.Shutdown(ctx) })
	wg.Go(func() { errs[1] = t.metrics.Shutdown(ctx) })
	wg.Wait()
	return errors.Join(errs...)
}

// telemetryShutdownTimeout bounds the final flush at exit: an OTLP
// collector that does not answer must not hold the process.
const telemetryShutdownTimeout = 10 * time.Second
