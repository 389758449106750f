package main

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"

	"github.com/s3task/s3task"
)

// The task types this service runs.
const (
	typeEnrich  = "csv_enrich"
	typeStats   = "csv_stats"
	typeSummary = "task_summary" // no input: made on a schedule (see summary.go)
)

// enrichArgs is the payload of a csv_enrich task.
type enrichArgs struct {
	// Required lists columns that must be present in the header and
	// non-empty in every row. Default: none.
	Required []string `json:"required,omitempty"`
	// EmailColumn is the column normalised to lower case and checked for
	// the shape of an e-mail address, if the header has it. Default "email".
	EmailColumn string `json:"email_column,omitempty"`
}

// Validate refuses arguments enrich could never use. Store.Create calls it,
// so the API refuses such a task, and so does the worker on the payload it
// reads back.
func (a enrichArgs) Validate() error {
	if slices.ContainsFunc(a.Required, func(c string) bool { return strings.TrimSpace(c) == "" }) {
		return errors.New("an empty name in required")
	}
	if len(a.Required) > 100 || slices.ContainsFunc(a.Required, func(c string) bool { return len(c) > 256 }) {
		return errors.New("at most 100 required columns of at most 256 bytes each")
	}
	return nil
}

// statsArgs is the payload of a csv_stats task: it takes no options.
type statsArgs struct{}

// taskType is a kind of task this service runs.
type taskType struct {
	name string
	// hint describes the payload, for error messages.
	hint string
	// newArgs returns a new zero value of the type's arguments, as a
	// pointer, for a create request's payload to be decoded into.
	newArgs func() any
	// handle registers the type's handler on mux; store is the worker's.
	handle func(mux *s3task.Mux, store *s3task.Store) error
	// noInput: the type's tasks take no file (s3task.FileOptions.NoInput).
	// The fleet makes them on a schedule; the API does not create them,
	// and -ingest does not make files into them.
	noInput bool
}

// taskTypes lists the types in the order the page offers them.
var taskTypes = []taskType{
	csvType(typeEnrich, `{"required": [column, ...], "email_column": column}`, enrich),
	csvType(typeStats, `{} or nothing: it takes no options`, stats),
	{name: typeSummary, noInput: true, handle: handleSummary},
}

// csvType is a task type whose handler streams the input CSV through
// process into the output, with arguments of type T from the payload; hint
// describes the payload in error messages.
func csvType[T any](name, hint string, process func(ctx context.Context, in io.Reader, out io.Writer, size int64, args T, report func(s3task.Progress)) (s3task.Progress, error)) taskType {
	return taskType{
		name:    name,
		hint:    hint,
		newArgs: func() any { return new(T) },
		handle: func(mux *s3task.Mux, _ *s3task.Store) error {
			return s3task.HandleJSON(mux, name, func(ctx context.Context, job *s3task.Job, args T) error {
				return categorize(runCSVJob(ctx, job, func(in io.Reader, out io.Writer) (s3task.Progress, error) {
					return process(ctx, in, out, job.Task.InputSize, args, job.SetProgress)
				}))
			})
		},
	}
}

// lookupType returns the task type called name.
func lookupType(name string) (taskType, bool) {
	i := slices.IndexFunc(taskTypes, func(tt taskType) bool { return tt.name == name })
	if i < 0 {
		return taskType{}, false
	}
	return taskTypes[i], true
}

// typeNames lists the names of the task types.
func typeNames() []string {
	names := make([]string, len(taskTypes))
	for i, tt := range taskTypes {
		names[i] = tt.name
	}
	return names
}

// inputTypeNames lists the names of the task types that take a file: those
// the API creates and -ingest makes files into.
func inputTypeNames() []string {
	var names []string
	for _, tt := range taskTypes {
		if !tt.noInput {
			names = append(names, tt.name)
		}
	}
	return names
}

// fileOptions declares the task types without input to the Store.
func fileOptions() map[string]s3task.FileOptions {
	files := map[string]s3task.FileOptions{}
	for _, tt := range taskTypes {
		if tt.noInput {
			files[tt.name] = s3task.FileOptions{NoInput: true, OutputExt: ".csv"}
		}
	}
	return files
}

// newMux returns the worker's handler: a Mux serving every task type. The
// worker claims only the types registered on it. store is the worker's.
func newMux(store *s3task.Store) (*s3task.Mux, error) {
	mux := new(s3task.Mux)
	for _, tt := range taskTypes {
		if err := tt.handle(mux, store); err != nil {
			return nil, err
		}
	}
	return mux, nil
}

// The failure categories (error_category) this service's handlers record,
// besides the library's own (s3task.CategoryBadPayload for a payload that
// does not decode, s3task.CategoryPanic...). Metrics and "s3taskctl stats"
// count failures by them.
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

// runCSVJob streams the job's input through process into the attempt's
// output, which Job.CreateOutput spools to a temporary file: memory stays
// bounded, and the output is stored only if processing succeeded (one not
// closed when the handler returns is dropped), so a failed attempt leaves
// nothing.
func runCSVJob(ctx context.Context, job *s3task.Job, process func(in io.Reader, out io.Writer) (s3task.Progress, error)) error {
	out, err := job.CreateOutput(ctx)
	if err != nil {
		return err
	}
	in, err := job.OpenInput(ctx)
	if err != nil {
		return err // the library marks a missing, changed or oversized input permanent
	}
	defer in.Close()
	p, err := process(in, out)
	job.SetProgress(p)
	if err != nil {
		return err
	}
	return out.Close()
}
