package s3taskotel_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/s3taskotel"
)

// benchTelemetry returns a Telemetry that records everything (an SDK
// tracer provider sampling every span, with an in-memory exporter that
// forgets, and an SDK meter provider) or one on no-op providers.
func benchTelemetry(b *testing.B, record bool) *s3taskotel.Telemetry {
	opts := &s3taskotel.Options{TracerProvider: tracenoop.NewTracerProvider(), MeterProvider: noop.NewMeterProvider()}
	if record {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewNoopExporter()))
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) })
		opts = &s3taskotel.Options{TracerProvider: tp, MeterProvider: mp}
	}
	tel, err := s3taskotel.New(opts)
	if err != nil {
		b.Fatal(err)
	}
	return tel
}

// BenchmarkAttempt is what the attempt middleware adds to one attempt's
// handler call, against the bare call; the S3 requests of an attempt
// (at least a claim, a GET and two PUTs) come on top in every case.
func BenchmarkAttempt(b *testing.B) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	job := &s3task.Job{Task: s3task.Task{
		ID: "7YBQ8XNVT7VXV4E6Q8DFRK2132", Type: "csv", Attempt: 1, WorkerID: "w-1",
		SubmittedAt: now, StartedAt: now.Add(time.Second),
		Metadata: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
	}}
	handler := s3task.HandlerFunc(func(context.Context, *s3task.Job) error { return nil })
	cases := []struct {
		name string
		h    s3task.Handler
	}{
		{"bare", handler},
		{"noop-providers", benchTelemetry(b, false).Middleware()(handler)},
		{"sdk-recording", benchTelemetry(b, true).Middleware()(handler)},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			ctx := context.Background()
			for b.Loop() {
				if err := c.h.Work(ctx, job); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCreateCall is what the store middleware adds to a Create,
// including writing the trace context into the metadata, against a call
// that goes straight to the next step; the Create's PUT comes on top.
func BenchmarkCreateCall(b *testing.B) {
	next := func(_ context.Context, c *s3task.Call) (*s3task.Task, error) {
		return &s3task.Task{ID: "7YBQ8XNVT7VXV4E6Q8DFRK2132", Status: s3task.StatusCreated, Metadata: c.Params.Metadata}, nil
	}
	cases := []struct {
		name string
		do   s3task.CallFunc
	}{
		{"bare", next},
		{"noop-providers", benchTelemetry(b, false).StoreMiddleware()(next)},
		{"sdk-recording", benchTelemetry(b, true).StoreMiddleware()(next)},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			ctx := context.Background()
			for b.Loop() {
				p := s3task.CreateParams{Name: "import", Type: "csv"}
				if _, err := c.do(ctx, &s3task.Call{Op: s3task.OpCreate, Params: &p}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
