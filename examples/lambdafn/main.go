// Command lambdafn is an s3task worker for AWS Lambda, whole and ready to
// copy: it counts the lines, words and bytes of each task's input and
// writes them as the task's output, in JSON. Built as a Lambda custom
// runtime's bootstrap, it serves every invocation with
// s3tasklambda.Function (an S3 event notification, an SQS batch of them,
// or a schedule's sweep: any payload); run by hand with "submit", it is
// the producer that puts a file in as a task. README.md runs it under the
// Lambda runtime interface emulator against a local S3 server.
//
// It reads its settings from the environment:
//
//	S3TASK_BUCKET    the bucket (required)
//	S3TASK_PREFIX    the tasks' folder in it (default batch-tasks/)
//	S3TASK_ENDPOINT  the URL of an S3-compatible server; unset for AWS S3
//
// and the AWS credentials and region from the standard configuration (on
// Lambda, the function's role).
//
//	lambdafn                          serve invocations (as bootstrap)
//	lambdafn submit [-seconds N] FILE  make a task of FILE, print its ID
//
// A task submitted with -seconds N takes that long on top of the count, as
// a long task would: one longer than the function's timeout less
// s3tasklambda's Reserve is given back by each invocation, and failed for
// good, with error_category "timeout", by the fourth give-back in a row.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"
	"unicode"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/s3tasklambda"
)

// taskType is the type of the tasks this function runs.
const taskType = "wc"

// wcArgs is a wc task's payload.
type wcArgs struct {
	// Seconds is how long the task waits after counting, as a long task
	// would work on.
	Seconds int `json:"seconds,omitempty"`
}

// Validate makes wcArgs an s3task.Validator.
func (a wcArgs) Validate() error {
	if a.Seconds < 0 {
		return errors.New("seconds is negative")
	}
	return nil
}

// counts is a wc task's output.
type counts struct {
	Lines int64 `json:"lines"`
	Words int64 `json:"words"`
	Bytes int64 `json:"bytes"`
}

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx := context.Background()
	store, err := newStore(ctx, log)
	if err != nil {
		log.Error("lambdafn: " + err.Error())
		os.Exit(1)
	}
	if len(os.Args) > 1 && os.Args[1] == "submit" {
		if err := submit(ctx, store, os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "lambdafn submit:", err)
			os.Exit(1)
		}
		return
	}
	var mux s3task.Mux
	if err := s3task.HandleJSON(&mux, taskType, wc); err != nil {
		log.Error("lambdafn: " + err.Error())
		os.Exit(1)
	}
	// The defaults suit most functions: Reserve of 8 s (ShutdownTimeout
	// 3 s, and 5 s for the give-back), a ReleaseLimit of 3.
	fn, err := s3tasklambda.New(store, &mux, nil)
	if err != nil {
		log.Error("lambdafn: " + err.Error())
		os.Exit(1)
	}
	// The Function itself, not fn.Handle: it takes any payload as it
	// comes (see s3tasklambda.Function.Invoke).
	lambda.Start(fn)
}

// newStore returns the Store the environment names.
func newStore(ctx context.Context, log *slog.Logger) (*s3task.Store, error) {
	bucket := os.Getenv("S3TASK_BUCKET")
	if bucket == "" {
		return nil, errors.New("S3TASK_BUCKET is not set")
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("AWS configuration: %w", err)
	}
	endpoint := os.Getenv("S3TASK_ENDPOINT")
	client := s3.NewFromConfig(cfg, func(o *s3.Options) {
		if endpoint == "" {
			return
		}
		// A compatible server: path-style addresses, any region, and
		// checksums only where the API requires them, which such servers
		// accept.
		o.BaseEndpoint = aws.String(endpoint)
		o.UsePathStyle = true
		if o.Region == "" {
			o.Region = "us-east-1"
		}
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	})
	return s3task.NewStore(client, bucket, &s3task.StoreOptions{
		Prefix: os.Getenv("S3TASK_PREFIX"),
		Types:  []string{taskType},
		Logger: log,
	})
}

// wc counts the input's lines, words and bytes, waits args.Seconds as a
// long task would work on (giving up when its context ends), and writes
// the counts as the output.
func wc(ctx context.Context, job *s3task.Job, args wcArgs) error {
	in, err := job.OpenInput(ctx)
	if err != nil {
		return err
	}
	defer in.Close()
	var c counts
	r := bufio.NewReader(in)
	inWord := false
	for {
		ch, size, err := r.ReadRune()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		c.Bytes += int64(size)
		if ch == '\n' {
			c.Lines++
		}
		if space := unicode.IsSpace(ch); !space && !inWord {
			c.Words++
			inWord = true
		} else if space {
			inWord = false
		}
	}
	job.SetProgress(s3task.Progress{RowCount: c.Lines, ProcessedCount: c.Lines, SuccessCount: c.Lines})
	select {
	case <-ctx.Done():
		return context.Cause(ctx) // the invocation is ending: the attempt is given back
	case <-time.After(time.Duration(args.Seconds) * time.Second):
	}
	out, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return job.WriteOutput(ctx, bytes.NewReader(append(out, '\n')))
}

// submit makes a wc task of the file args name and prints its ID.
func submit(ctx context.Context, store *s3task.Store, args []string) error {
	fs := flag.NewFlagSet("submit", flag.ContinueOnError)
	seconds := fs.Int("seconds", 0, "how long the task takes after counting")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("usage: lambdafn submit [-seconds N] FILE")
	}
	name := fs.Arg(0)
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	task, err := store.Create(ctx, s3task.CreateParams{Type: taskType, Name: name, Args: wcArgs{Seconds: *seconds}})
	if err != nil {
		return err
	}
	if err := store.UploadInput(ctx, task.ID, f); err != nil {
		return err
	}
	if _, err := store.Submit(ctx, task.ID); err != nil {
		return err
	}
	fmt.Println(task.ID)
	return nil
}
