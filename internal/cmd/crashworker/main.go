// Command crashworker runs one s3task Worker against an S3 endpoint and
// reports what it does as JSON lines on stdout, so that a test can start
// several of them, kill one in the middle of a task and check what the
// others make of it. It exists for the crash tests (in chaos_test.go); it is
// not an example of how to run a worker.
//
// Credentials come from S3TASK_TEST_ACCESS_KEY and S3TASK_TEST_SECRET_KEY.
// Each handler run prints "start", works for -work (reporting progress),
// reads its input and writes "task=<id> attempt=<n> worker=<id>" as its
// output. The worker's hooks print "claim", "complete", "fail" and "lost".
// SIGINT or SIGTERM stop the worker gracefully.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/s3test"
)

// Event is one line of output.
type Event struct {
	Event   string    `json:"event"` // start, claim, complete, fail, lost, stopped, exit
	Worker  string    `json:"worker"`
	Task    string    `json:"task,omitempty"`
	Attempt int       `json:"attempt,omitempty"`
	Detail  string    `json:"detail,omitempty"`
	At      time.Time `json:"at"`
}

type reporter struct {
	mu     sync.Mutex
	enc    *json.Encoder
	worker string
}

func (r *reporter) emit(e Event) {
	e.Worker, e.At = r.worker, time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.enc.Encode(e) // stdout is a pipe to the test; nothing to do if it is gone
}

func main() {
	endpoint := flag.String("endpoint", "", "S3 endpoint URL")
	bucket := flag.String("bucket", "", "bucket")
	id := flag.String("id", "", "worker ID")
	lease := flag.Duration("lease", 3*time.Second, "lease duration")
	margin := flag.Duration("margin", time.Second, "clock margin")
	heartbeat := flag.Duration("heartbeat", 500*time.Millisecond, "heartbeat interval")
	work := flag.Duration("work", 2*time.Second, "how long each handler run works")
	concurrency := flag.Int("concurrency", 1, "tasks at once")
	flag.Parse()
	if *endpoint == "" || *bucket == "" || *id == "" {
		fmt.Fprintln(os.Stderr, "crashworker: -endpoint, -bucket and -id are required")
		os.Exit(2)
	}
	rep := &reporter{enc: json.NewEncoder(os.Stdout), worker: *id}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	client := s3test.NewClientWithKeys(*endpoint, os.Getenv(s3test.EnvAccessKey), os.Getenv(s3test.EnvSecretKey))
	store, err := s3task.NewStore(client, *bucket, &s3task.StoreOptions{InputExt: ".csv", OutputExt: ".txt", Logger: logger})
	if err != nil {
		fmt.Fprintln(os.Stderr, "crashworker:", err)
		os.Exit(2)
	}
	handler := s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		rep.emit(Event{Event: "start", Task: job.Task.ID, Attempt: job.Task.Attempt})
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		deadline := time.Now().Add(*work)
		var p s3task.Progress
		for time.Now().Before(deadline) {
			select {
			case <-ctx.Done():
				rep.emit(Event{Event: "stopped", Task: job.Task.ID, Attempt: job.Task.Attempt, Detail: fmt.Sprint(context.Cause(ctx))})
				return ctx.Err()
			case <-tick.C:
				p.ProcessedCount++
				job.SetProgress(p)
			}
		}
		data, err := s3test.ReadAll(job.OpenInput(ctx))
		if err != nil {
			return err
		}
		if !strings.Contains(string(data), job.Task.ID) {
			return s3task.Permanent(fmt.Errorf("input %q is not this task's", data))
		}
		return job.WriteOutput(ctx, strings.NewReader(fmt.Sprintf("task=%s attempt=%d worker=%s\n", job.Task.ID, job.Task.Attempt, *id)))
	})
	w, err := s3task.NewWorker(store, handler, &s3task.WorkerOptions{
		ID:                *id,
		Concurrency:       *concurrency,
		PollInterval:      100 * time.Millisecond,
		MaxPollInterval:   500 * time.Millisecond,
		LeaseDuration:     *lease,
		HeartbeatInterval: *heartbeat,
		ClockMargin:       *margin,
		Backoff:           func(int) time.Duration { return 100 * time.Millisecond },
		ShutdownTimeout:   *lease,
		Logger:            logger,
		Hooks: s3task.Hooks{
			OnClaim:    func(t *s3task.Task) { rep.emit(Event{Event: "claim", Task: t.ID, Attempt: t.Attempt}) },
			OnComplete: func(t *s3task.Task) { rep.emit(Event{Event: "complete", Task: t.ID, Attempt: t.Attempt}) },
			OnFail: func(t *s3task.Task, err error) {
				rep.emit(Event{Event: "fail", Task: t.ID, Attempt: t.Attempt, Detail: err.Error()})
			},
			OnLeaseLost: func(id string, _ *s3task.Task, cause error) {
				rep.emit(Event{Event: "lost", Task: id, Detail: cause.Error()})
			},
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "crashworker:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = w.Run(ctx)
	rep.emit(Event{Event: "exit", Detail: fmt.Sprint(err)})
	if err != nil {
		os.Exit(1)
	}
}
