// Command testfunc is the Lambda function of the package's tests: it runs
// an s3tasklambda.Function on the S3 server and bucket its environment
// names, with a handler that writes "done" as the output, or, for a task
// whose payload says {"hold": true}, holds its first attempt until its
// context ends, and for one that says {"forever": true}, every attempt.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/s3test"
	"github.com/s3task/s3task/s3tasklambda"
)

func main() {
	client := s3test.NewClientWithKeys(os.Getenv("S3TASK_TEST_ENDPOINT"), os.Getenv("S3TASK_TEST_ACCESS_KEY"), os.Getenv("S3TASK_TEST_SECRET_KEY"))
	store, err := s3task.NewStore(client, os.Getenv("TESTFUNC_BUCKET"), &s3task.StoreOptions{
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fn, err := s3tasklambda.New(store, s3task.HandlerFunc(handle), &s3tasklambda.Options{
		Worker: s3task.WorkerOptions{ID: os.Getenv("TESTFUNC_ID"), ShutdownTimeout: time.Second},
		// Reserve leaves 4 s, past ShutdownTimeout, for the release and
		// the stop: room for a machine that is busy.
		Reserve: 5 * time.Second,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	lambda.Start(fn) // fn.Invoke: any payload, JSON or not
}

func handle(ctx context.Context, job *s3task.Job) error {
	var p struct {
		Hold    bool          `json:"hold"`
		Forever bool          `json:"forever"`
		Work    time.Duration `json:"work"`
	}
	if len(job.Task.Payload) > 0 {
		if err := json.Unmarshal(job.Task.Payload, &p); err != nil {
			return s3task.Permanent(err)
		}
	}
	if p.Forever || p.Hold && job.Task.Attempt == 1 {
		<-ctx.Done()
		return context.Cause(ctx)
	}
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(p.Work):
	}
	return job.WriteOutput(ctx, strings.NewReader("done by "+os.Getenv("TESTFUNC_ID")))
}
