package s3taskotel_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"slices"
	"strings"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/s3test"
	"github.com/s3task/s3task/s3taskotel"
)

// One trace from the request that created a task to the attempt that ran
// it. The producer's Store and the worker are instrumented with one
// Telemetry here; in production they are usually different processes,
// each with its own, and the trace context travels in the task's
// metadata. A span recorder stands in for an exporter.
func Example() {
	recorder := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	tel, err := s3taskotel.New(&s3taskotel.Options{TracerProvider: tp})
	if err != nil {
		log.Fatal(err)
	}

	// The producer: an HTTP handler's span, and a Store whose calls are
	// traced.
	storeOpts := &s3task.StoreOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	tel.InstrumentStore(storeOpts)
	store := exampleStore(storeOpts)
	ctx, request := tp.Tracer("api").Start(context.Background(), "POST /tasks")
	task, err := store.Create(ctx, s3task.CreateParams{Name: "report", Type: "csv"})
	if err != nil {
		log.Fatal(err)
	}
	if err := store.UploadInput(ctx, task.ID, strings.NewReader("a,b\n")); err != nil {
		log.Fatal(err)
	}
	if _, err := store.Submit(ctx, task.ID); err != nil {
		log.Fatal(err)
	}
	request.End()

	// The worker: each attempt gets a span, and the handler's own spans
	// are its children.
	handler := s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		_, span := trace.SpanFromContext(ctx).TracerProvider().Tracer("csv").Start(ctx, "parse rows")
		defer span.End()
		return nil
	})
	workerOpts := &s3task.WorkerOptions{}
	tel.InstrumentWorker(workerOpts)
	worker, err := s3task.NewWorker(store, handler, workerOpts)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := worker.RunTask(context.Background(), task.ID); err != nil {
		log.Fatal(err)
	}

	printTree(recorder.Ended())
	// Output:
	// POST /tasks
	//   s3task.create
	//     s3task.process (outcome completed)
	//       parse rows
	//   s3task.upload_input
	//   s3task.submit
}

// printTree prints spans as the tree their parents make, each span's
// children in the order they started.
func printTree(spans []sdktrace.ReadOnlySpan) {
	children := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		children[s.Parent().SpanID()] = append(children[s.Parent().SpanID()], s)
	}
	var walk func(parent trace.SpanID, depth int)
	walk = func(parent trace.SpanID, depth int) {
		kids := children[parent]
		slices.SortFunc(kids, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
		for _, s := range kids {
			line := strings.Repeat("  ", depth) + s.Name()
			for _, kv := range s.Attributes() {
				if kv.Key == s3taskotel.OutcomeKey {
					line += fmt.Sprintf(" (outcome %s)", kv.Value.AsString())
				}
			}
			fmt.Println(line)
			walk(s.SpanContext().SpanID(), depth+1)
		}
	}
	walk(trace.SpanID{}, 0)
}

// exampleStore returns a Store on a fresh in-process S3. Real code makes
// it with s3task.NewStore on an *s3.Client of its own.
func exampleStore(opts *s3task.StoreOptions) *s3task.Store {
	mem, err := s3test.NewMemory()
	if err != nil {
		log.Fatal(err)
	}
	store, err := s3task.NewStore(mem.Client(), mem.Bucket, opts)
	if err != nil {
		log.Fatal(err)
	}
	return store
}
