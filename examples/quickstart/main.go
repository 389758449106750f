// Command quickstart runs one CSV task through s3task from start to finish
// against the library's in-memory S3, package mems3: create, upload,
// submit, a worker processes it, download the result.
//
//	go run ./examples/quickstart
//	go run ./examples/quickstart -rows 5000 -workers 3
package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/mems3"
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

// upperArgs is the payload of a csv_upper task. Create encodes it as JSON
// into the task's payload, and the handler registered with HandleJSON
// receives it decoded. Both call Validate: Create refuses invalid arguments,
// and a worker fails a task whose payload does not decode or validate,
// permanently, without calling the handler.
type upperArgs struct {
	// Columns names the columns to upper-case; none means every column.
	Columns []string `json:"columns,omitempty"`
}

// Validate makes upperArgs an s3task.Validator.
func (a upperArgs) Validate() error {
	if slices.Contains(a.Columns, "") {
		return errors.New("columns: an empty column name")
	}
	return nil
}

func run(rows, workers int, verbose bool) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// An S3 for development, its objects in memory, on a free loopback
	// port (mems3.New(nil) would serve its clients with no socket at all).
	// A real program gives NewStore an *s3.Client built from its AWS
	// configuration instead.
	srv, err := mems3.Listen("", nil)
	if err != nil {
		return err
	}
	defer srv.Close()
	fmt.Printf("in-process S3 at %s, bucket %q\n", srv.URL(), srv.Bucket())

	level := slog.LevelWarn
	if verbose {
		level = slog.LevelInfo
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	opts := &s3task.StoreOptions{InputExt: ".csv", OutputExt: ".csv", Logger: logger}

	// The control side, as an HTTP handler of the host application would use it.
	store, err := s3task.NewStore(srv.Client(), srv.Bucket(), opts)
	if err != nil {
		return err
	}
	if _, err := store.CheckBackend(ctx); err != nil {
		return err
	}

	// Workers, as background goroutines of the same or other processes. The
	// Mux is the workers' handler: they claim only the types registered on it.
	var mux s3task.Mux
	if err := s3task.HandleJSON(&mux, "csv_upper", upperCSV); err != nil {
		return err
	}
	done := make(chan *s3task.Task, 1)
	stopped := make(chan struct{})
	for i := range workers {
		ws, err := s3task.NewStore(srv.Client(), srv.Bucket(), opts)
		if err != nil {
			return err
		}
		w, err := s3task.NewWorker(ws, &mux, &s3task.WorkerOptions{
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

	// Key makes the create idempotent: a client that resends it, not knowing
	// whether the first one arrived, gets the same task back. In a service
	// the key comes from the client: a form's token, an upstream event ID.
	params := s3task.CreateParams{
		Name: "quickstart", Type: "csv_upper", CreatedBy: "quickstart",
		Args: upperArgs{Columns: []string{"name"}},
		Key:  "quickstart-run-1",
	}
	task, err := store.Create(ctx, params)
	if err != nil {
		return err
	}
	again, err := store.Create(ctx, params)
	if err != nil {
		return err
	}
	fmt.Printf("created task %s (%s) with payload %s; created again with its key: %s\n", task.ID, task.Status, task.Payload, again.ID)

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

// upperCSV is the csv_upper handler: it upper-cases the chosen columns of
// the input CSV and reports progress. The output is small here, so it is
// built in memory and stored with WriteOutput; examples/csvbatch streams
// large files through Job.CreateOutput instead.
func upperCSV(ctx context.Context, job *s3task.Job, args upperArgs) error {
	in, err := job.OpenInput(ctx)
	if err != nil {
		return err
	}
	defer in.Close()
	var out bytes.Buffer
	if err := upper(in, &out, args.Columns, job.SetProgress); err != nil {
		return err
	}
	return job.WriteOutput(ctx, &out)
}

// upper copies the CSV from in to out with the named columns upper-cased,
// every column if none is named. Input that is not CSV, or lacks a column,
// is a permanent error: a retry would not help.
func upper(in io.Reader, out io.Writer, names []string, report func(s3task.Progress)) error {
	r := csv.NewReader(in)
	header, err := r.Read()
	if err != nil {
		return s3task.Permanent(fmt.Errorf("input has no CSV header: %w", err))
	}
	cols, err := columns(header, names)
	if err != nil {
		return s3task.Permanent(err)
	}
	w := csv.NewWriter(out)
	if err := w.Write(header); err != nil {
		return err
	}
	var p s3task.Progress
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return s3task.Permanent(fmt.Errorf("input is not valid CSV: %w", err))
		}
		for _, i := range cols {
			rec[i] = strings.ToUpper(rec[i])
		}
		if err := w.Write(rec); err != nil {
			return err
		}
		p.ProcessedCount++
		p.SuccessCount++
		if p.ProcessedCount%1000 == 0 {
			report(p)
		}
	}
	w.Flush()
	p.RowCount = p.ProcessedCount
	report(p)
	return w.Error()
}

// columns returns the indexes of the named columns in header, or of every
// column if none is named.
func columns(header, names []string) ([]int, error) {
	var cols []int
	for i, h := range header {
		if len(names) == 0 || slices.Contains(names, h) {
			cols = append(cols, i)
		}
	}
	for _, name := range names {
		if !slices.Contains(header, name) {
			return nil, fmt.Errorf("the header has no column %q", name)
		}
	}
	return cols, nil
}
