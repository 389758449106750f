package s3tasktest_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/s3tasktest"
)

// The examples below are the bodies of a host's test functions: t is the
// test's *testing.T. An Example has no t of its own, and one without an
// Output comment is compiled but not run, so TestExamples runs each of
// them as a subtest, with t set to it. What the examples check, they check
// with t, as a test does.
var t testing.TB

func TestExamples(tt *testing.T) {
	for name, example := range map[string]func(){
		"Run":            ExampleRun,
		"Drain":          ExampleDrain,
		"S3.Advance":     ExampleS3_Advance,
		"RequireCreated": ExampleRequireCreated,
	} {
		tt.Run(name, func(tt *testing.T) {
			t = tt
			defer func() { t = nil }()
			example()
		})
	}
}

// countArgs is the payload of the handler under test.
type countArgs struct {
	// Min is the fewest words the input may hold.
	Min int `json:"min"`
}

// countWords is the host's handler under test: it counts the words of its
// task's input and writes the count as the output.
func countWords(ctx context.Context, job *s3task.Job, args countArgs) error {
	in, err := job.OpenInput(ctx)
	if err != nil {
		return err
	}
	defer in.Close()
	words := bufio.NewScanner(in)
	words.Split(bufio.ScanWords)
	n := 0
	for words.Scan() {
		n++
	}
	if err := words.Err(); err != nil {
		return err
	}
	if n < args.Min {
		return s3task.Permanent(s3task.WithCategory(fmt.Errorf("%d words, want %d", n, args.Min), "too_short"))
	}
	return job.WriteOutput(ctx, strings.NewReader(fmt.Sprint(n)))
}

// Run runs the handler on one task, synchronously, and returns what the
// attempt left: the record, the handler's error and the output.
func ExampleRun() {
	var mux s3task.Mux
	if err := s3task.HandleJSON(&mux, "count", countWords); err != nil {
		t.Fatal(err)
	}
	store := s3tasktest.NewStore(t, nil)

	task := s3tasktest.Submit(t, store, s3task.CreateParams{Type: "count", Args: countArgs{Min: 2}}, []byte("to be or not"))
	res := s3tasktest.Run(t, store, &mux, task.ID)
	if res.Err != nil || res.Task.Status != s3task.StatusCompleted || string(res.Output) != "4" {
		t.Errorf("got error %v, status %s, output %q; want a completed task with output 4", res.Err, res.Task.Status, res.Output)
	}

	task = s3tasktest.Submit(t, store, s3task.CreateParams{Type: "count", Args: countArgs{Min: 2}}, []byte("hello"))
	res = s3tasktest.Run(t, store, &mux, task.ID)
	if !s3task.IsPermanent(res.Err) || res.Task.ErrorCategory != "too_short" || !res.Task.Terminal() {
		t.Errorf("got error %v, category %q; want a permanent too_short failure", res.Err, res.Task.ErrorCategory)
	}
}

// Drain works the queue as a worker would, until no task is due. A retry
// falls due when its wait has passed by the S3 server's clock, which
// S3.Advance moves without sleeping.
func ExampleDrain() {
	s3 := s3tasktest.NewS3(t)
	store := s3.NewStore(t, nil)
	flaky := s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		if job.Task.Attempt == 1 {
			return s3task.RetryAfter(errors.New("upstream busy"), time.Minute)
		}
		return job.WriteOutput(ctx, strings.NewReader("done"))
	})
	for range 3 {
		s3tasktest.Submit(t, store, s3task.CreateParams{Name: "sync"}, []byte("x"))
	}

	first := s3tasktest.Drain(t, store, flaky)
	if len(first) != 3 || first[0].Task.Status != s3task.StatusFailed || first[0].Task.Terminal() {
		t.Fatalf("first drain: %d results; want 3 attempts failed with a retry to come", len(first))
	}
	if again := s3tasktest.Drain(t, store, flaky); len(again) != 0 {
		t.Fatalf("drain before the retries are due ran %d tasks", len(again))
	}

	s3.Advance(time.Minute) // exactly the wait: the Stores read the server's clock exactly
	retried := s3tasktest.Drain(t, store, flaky)
	if len(retried) != 3 {
		t.Fatalf("drain after a minute ran %d tasks; want the 3 retries", len(retried))
	}
	for _, res := range retried {
		if res.Task.Status != s3task.StatusCompleted || res.Task.Attempt != 2 || string(res.Output) != "done" {
			t.Errorf("task %s: %s in attempt %d, output %q; want completed in attempt 2", res.Task.ID, res.Task.Status, res.Task.Attempt, res.Output)
		}
	}
}

// Advance moves the server's clock, which the kit's Stores read exactly: a
// task scheduled an hour out is left, with the reason, until the hour has
// passed, and then runs.
func ExampleS3_Advance() {
	s3 := s3tasktest.NewS3(t)
	store := s3.NewStore(t, nil)
	nightly := s3tasktest.Submit(t, store, s3task.CreateParams{Name: "nightly", RunAt: s3.Now().Add(time.Hour)}, []byte("x"))
	done := s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error { return nil })

	ran, left := s3tasktest.DrainLeft(t, store, done)
	if len(ran) != 0 || len(left) != 1 || !strings.HasPrefix(left[0].Why, "scheduled for") {
		t.Fatalf("before the hour: ran %d, left %v; want the task left as scheduled", len(ran), left)
	}
	s3.Advance(time.Hour)
	ran, left = s3tasktest.DrainLeft(t, store, done)
	if len(ran) != 1 || ran[0].Task.ID != nightly.ID || len(left) != 0 {
		t.Fatalf("after the hour: ran %d, left %v; want the nightly task run", len(ran), left)
	}
}

// signupArgs is what a host's signup endpoint queues: a welcome mail.
type signupArgs struct {
	Email string `json:"email"`
}

func (signupArgs) TaskType() string { return "welcome-mail" }

// signup is the host's code under test: it queues a welcome mail.
func signup(ctx context.Context, store *s3task.Store, email string) error {
	_, err := store.Create(ctx, s3task.CreateParams{Args: signupArgs{Email: email}, Key: "signup/" + email})
	return err
}

// RequireCreated asserts that the code under test created exactly one
// task of an argument type, and hands back its arguments.
func ExampleRequireCreated() {
	store := s3tasktest.NewStore(t, nil)
	for range 2 { // a double click
		if err := signup(context.Background(), store, "ada@example.com"); err != nil {
			t.Fatal(err)
		}
	}
	mail := s3tasktest.RequireCreated[signupArgs](t, store)
	if mail.Args.Email != "ada@example.com" || mail.Task.Type != "welcome-mail" {
		t.Errorf("queued %+v as %q", mail.Args, mail.Task.Type)
	}
}
