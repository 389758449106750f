package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/s3task/s3task"
)

// The task types this service runs.
const (
	typeEnrich = "csv_enrich"
	typeStats  = "csv_stats"
)

// taskTypes lists the types in the order the page offers them.
var taskTypes = []string{typeEnrich, typeStats}

// The failure categories (error_category) this service's handlers record,
// besides the library's own (panic, lease_expired, shutdown...). Metrics
// and "s3taskctl stats" count failures by them.
const (
	// catBadInput: the file can never be processed as it is (not CSV, not
	// UTF-8, a missing required column...). Final, no retry.
	catBadInput = "bad_input"
	// catInputUnavailable: the input was missing, replaced or too large
	// when the worker read it. Final.
	catInputUnavailable = "input_unavailable"
	// catIO: reading the input or storing the output failed, most likely S3
	// trouble. Retried with backoff.
	catIO = "io"
)

// categorize labels a handler's error with its failure category, keeping
// whether it is permanent.
func categorize(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, s3task.ErrInputMissing), errors.Is(err, s3task.ErrInputChanged), errors.Is(err, s3task.ErrInputTooLarge):
		return s3task.WithCategory(err, catInputUnavailable)
	case s3task.IsPermanent(err):
		return s3task.WithCategory(err, catBadInput)
	}
	return s3task.WithCategory(err, catIO)
}

// checkPayload validates a task's payload for its type, so that a task that
// could never run is refused at creation rather than failing later.
func checkPayload(taskType string, payload json.RawMessage) error {
	switch taskType {
	case typeEnrich:
		_, err := enrichPayload(payload)
		return err
	case typeStats:
		return statsPayload(payload)
	}
	return fmt.Errorf("unknown task type %q: want one of %s", taskType, strings.Join(taskTypes, ", "))
}

// decodeStrict decodes one JSON object into v, refusing unknown fields.
// An empty or null payload leaves v as it is.
func decodeStrict(payload json.RawMessage, v any) error {
	if len(payload) == 0 || string(payload) == "null" {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

func enrichPayload(payload json.RawMessage) (enrichOptions, error) {
	var o enrichOptions
	if err := decodeStrict(payload, &o); err != nil {
		return o, fmt.Errorf("csv_enrich payload: %w (want {\"required\": [column, ...], \"email_column\": column})", err)
	}
	for _, c := range o.Required {
		if strings.TrimSpace(c) == "" {
			return o, errors.New("csv_enrich payload: an empty name in required")
		}
	}
	if len(o.Required) > 100 || slices.ContainsFunc(o.Required, func(c string) bool { return len(c) > 256 }) {
		return o, errors.New("csv_enrich payload: at most 100 required columns of at most 256 bytes each")
	}
	return o, nil
}

func statsPayload(payload json.RawMessage) error {
	var o struct{}
	if err := decodeStrict(payload, &o); err != nil {
		return fmt.Errorf("csv_stats payload: %w (it takes no options: send {} or nothing)", err)
	}
	return nil
}

// newMux registers the handlers. Output spools go to tmpDir ("" means the
// system's temporary folder).
func newMux(tmpDir string) (*s3task.Mux, error) {
	mux := s3task.NewMux()
	err := mux.HandleFunc(typeEnrich, func(ctx context.Context, job *s3task.Job) error {
		opts, err := enrichPayload(job.Task.Payload)
		if err != nil {
			return categorize(s3task.Permanent(err))
		}
		return categorize(runCSVJob(ctx, job, tmpDir, func(in io.Reader, out io.Writer) (s3task.Progress, error) {
			return enrich(ctx, in, out, job.Task.InputSize, opts, job.SetProgress)
		}))
	})
	if err != nil {
		return nil, err
	}
	err = mux.HandleFunc(typeStats, func(ctx context.Context, job *s3task.Job) error {
		if err := statsPayload(job.Task.Payload); err != nil {
			return categorize(s3task.Permanent(err))
		}
		return categorize(runCSVJob(ctx, job, tmpDir, func(in io.Reader, out io.Writer) (s3task.Progress, error) {
			return stats(ctx, in, out, job.Task.InputSize, job.SetProgress)
		}))
	})
	if err != nil {
		return nil, err
	}
	return mux, nil
}

// runCSVJob streams the job's input through process into a temporary file
// and, only if processing succeeded, stores that file as the attempt's
// output. Memory stays bounded: the input is read as a stream and the output
// waits on disk.
//
// The spool is ours rather than Job.CreateOutput's because that writer has
// no way to be discarded: closing it uploads whatever was written, and not
// closing it leaves its temporary file behind. A failed attempt here
// uploads nothing and leaves nothing.
func runCSVJob(ctx context.Context, job *s3task.Job, tmpDir string, process func(in io.Reader, out io.Writer) (s3task.Progress, error)) error {
	in, err := job.OpenInput(ctx)
	if err != nil {
		return err // the library marks a missing, changed or oversized input permanent
	}
	defer in.Close()
	spool, err := os.CreateTemp(tmpDir, "csvbatch-output-*.csv")
	if err != nil {
		return fmt.Errorf("create output spool: %w", err)
	}
	defer func() {
		spool.Close()
		os.Remove(spool.Name())
	}()
	p, err := process(in, spool)
	job.SetProgress(p)
	if err != nil {
		return err
	}
	if _, err := spool.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("rewind output spool: %w", err)
	}
	return job.WriteOutput(ctx, spool)
}
