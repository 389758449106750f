// Command quickstart runs one CSV task through s3task from start to finish
// against an in-process S3: create, upload, submit, a worker processes it,
// download the result.
//
//	go run ./examples/quickstart
//	go run ./examples/quickstart -rows 5000 -workers 3
package main

import (
	"context"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/s3test"
)

func main() {
	rows := flag.Int("rows", 10, "rows in the generated input CSV")
	workers := flag.Int("workers", 2, "workers sharing the bucket, each with its own S3 client")
	verbose := flag.Bool("v", false, "log what the workers do")
	flag.Parse()
	if err := run(*rows, *workers, *verbose); err != nil {
		log.Fatal(err)
	}
}

func run(rows, workers int, verbose bool) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	srv, err := s3test.Start()
	if err != nil {
		return err
	}
	defer srv.Close()
	fmt.Printf("in-process S3 at %s, bucket %q\n", srv.URL, srv.Bucket)

	level := slog.LevelWarn
	if verbose {
		level = slog.LevelInfo
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	opts := &s3task.StoreOptions{InputExt: ".csv", OutputExt: ".csv", Logger: logger}

	// The control side, as an HTTP handler of the host application would use it.
	store, err := s3task.NewStore(srv.Client(), srv.Bucket, opts)
	if err != nil {
		return err
	}
	if err := store.CheckBackend(ctx); err != nil {
		return err
	}

	// Workers, as background goroutines of the same or other processes.
	done := make(chan *s3task.Task, 1)
	mux := s3task.NewMux()
	if err := mux.HandleFunc("csv_upper", upperCSV); err != nil {
		return err
	}
	stopped := make(chan struct{})
	for i := range workers {
		ws, err := s3task.NewStore(srv.Client(), srv.Bucket, opts)
		if err != nil {
			return err
		}
		w, err := s3task.NewWorker(ws, mux, &s3task.WorkerOptions{
			ID:           "worker-" + strconv.Itoa(i+1),
			PollInterval: 100 * time.Millisecond,
			Hooks:        s3task.Hooks{OnComplete: func(t *s3task.Task) { done <- t }},
		})
		if err != nil {
			return err
		}
		go func() {
			defer func() { stopped <- struct{}{} }()
			_ = w.Run(ctx)
		}()
	}

	task, err := store.Create(ctx, s3task.CreateParams{Name: "quickstart", Type: "csv_upper", CreatedBy: "quickstart"})
	if err != nil {
		return err
	}
	fmt.Printf("created task %s (%s)\n", task.ID, task.Status)

	var in strings.Builder
	in.WriteString("name,city\n")
	for i := range rows {
		fmt.Fprintf(&in, "person %d,city %d\n", i+1, i%7)
	}
	if err := store.UploadInput(ctx, task.ID, strings.NewReader(in.String())); err != nil {
		return err
	}
	if task, err = store.Submit(ctx, task.ID); err != nil {
		return err
	}
	fmt.Printf("submitted: %s, %d bytes of input\n", task.Status, task.InputSize)

	select {
	case t := <-done:
		fmt.Printf("completed by %s in attempt %d: %d rows processed\n", t.WorkerID, t.Attempt, t.ProcessedCount)
	case <-time.After(30 * time.Second):
		return errors.New("the task did not complete within 30s")
	}

	out, err := store.OpenOutput(ctx, task.ID)
	if err != nil {
		return err
	}
	defer out.Close()
	fmt.Println("output (first lines):")
	data, err := io.ReadAll(io.LimitReader(out, 200))
	if err != nil {
		return err
	}
	fmt.Println(string(data))

	page, err := store.List(ctx, s3task.ListOptions{Limit: 10})
	if err != nil {
		return err
	}
	fmt.Printf("newest tasks: %d\n", len(page.Tasks))
	for _, t := range page.Tasks {
		fmt.Printf("  %s %-9s %s\n", t.ID, t.Status, t.Name)
	}

	cancel()
	for range workers {
		<-stopped
	}
	return nil
}

// upperCSV upper-cases every field of the input CSV and reports progress.
func upperCSV(ctx context.Context, job *s3task.Job) error {
	in, err := job.OpenInput(ctx)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := job.CreateOutput(ctx)
	if err != nil {
		return err
	}
	r := csv.NewReader(in)
	w := csv.NewWriter(out)
	var p s3task.Progress
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			out.Close()
			return s3task.Permanent(fmt.Errorf("input is not valid CSV: %w", err))
		}
		for i := range rec {
			rec[i] = strings.ToUpper(rec[i])
		}
		if err := w.Write(rec); err != nil {
			out.Close()
			return err
		}
		p.ProcessedCount++
		p.SuccessCount++
		if p.ProcessedCount%1000 == 0 {
			job.SetProgress(p)
		}
	}
	w.Flush()
	if err := w.Error(); err != nil {
		out.Close()
		return err
	}
	p.RowCount = p.ProcessedCount
	job.SetProgress(p)
	return out.Close()
}
