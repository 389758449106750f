package s3task_test

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/s3test"
)

// contention watches every handler run across all workers of a test.
type contention struct {
	mu       sync.Mutex
	running  map[string]int // task ID -> handlers running for it now
	runs     map[string]int // "task/attempt" -> handler runs
	complete map[string]int // task ID -> OnComplete calls, all workers
	overlaps []string       // what was seen running twice at once
	total    int            // completions so far
	allDone  chan struct{}  // closed when total reaches want
	want     int            // completions to wait for
	byWorker map[string]int // worker ID -> tasks completed
}

func newContention(want int) *contention {
	return &contention{
		running: map[string]int{}, runs: map[string]int{}, complete: map[string]int{},
		allDone: make(chan struct{}), want: want, byWorker: map[string]int{},
	}
}

func (c *contention) enter(job *s3task.Job, worker string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id := job.Task.ID
	c.running[id]++
	if c.running[id] > 1 {
		c.overlaps = append(c.overlaps, fmt.Sprintf("%s: %d handlers at once (latest: attempt %d on %s)", id, c.running[id], job.Task.Attempt, worker))
	}
	c.runs[fmt.Sprintf("%s/%d", id, job.Task.Attempt)]++
}

func (c *contention) leave(job *s3task.Job) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running[job.Task.ID]--
}

func (c *contention) completed(t *s3task.Task) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.complete[t.ID]++
	c.byWorker[t.WorkerID]++
	c.total++
	if c.total == c.want {
		close(c.allDone)
	}
}

// TestWorkerContention runs 200 tasks through 8 workers, each with its own
// S3 client and 4 slots, all polling the same markers. No lease expires, so
// every task must run exactly once, never twice at the same time, and end
// completed with its marker gone.
func TestWorkerContention(t *testing.T) {
	t.Parallel()
	const (
		workers     = 8
		concurrency = 4
		tasks       = 200
	)
	e := setupWorker(t)
	c := newContention(tasks)

	// Submit everything first, from several producers at once as web
	// handlers would, so that all workers find all 200 markers together.
	e.reqs.Reset()
	start := time.Now()
	ids := make([]string, tasks)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	errs := make(chan error, tasks)
	for i := range tasks {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			task, err := e.store.Create(e.ctx, s3task.CreateParams{Name: fmt.Sprintf("task %d", i)})
			if err == nil {
				ids[i] = task.ID
				err = e.store.UploadInput(e.ctx, task.ID, strings.NewReader("row\n"))
			}
			if err == nil {
				_, err = e.store.Submit(e.ctx, task.ID)
			}
			if err != nil {
				errs <- fmt.Errorf("task %d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	producer := e.reqs.Counts()
	t.Logf("submitted %d tasks in %s", tasks, time.Since(start).Round(time.Millisecond))
	start = time.Now()

	workerReqs := make([]*s3test.Counter, workers)
	var lost lostClaims
	for i := range workers {
		id := fmt.Sprintf("worker-%d", i)
		workerReqs[i] = &s3test.Counter{}
		handler := s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
			c.enter(job, id)
			defer c.leave(job)
			// One request inside the handler widens the window in which a
			// second claim of the same task would show.
			return job.WriteOutput(ctx, strings.NewReader(job.Task.ID))
		})
		opts := workerOptions(id, s3task.Hooks{
			OnComplete: c.completed,
			OnFail: func(task *s3task.Task, err error) {
				t.Errorf("%s: task %s attempt %d failed: %v", id, task.ID, task.Attempt, err)
			},
			OnLeaseLost: func(taskID string, _ *s3task.Task, cause error) {
				t.Errorf("%s: lost task %s: %v", id, taskID, cause)
			},
		})
		opts.Concurrency = concurrency
		startWorker(t, e.newStore(t, nil, workerReqs[i].Wrap, lost.wrap), handler, opts)
	}

	awaitSignal(t, c.allDone, fmt.Sprintf("all %d tasks to complete", tasks))
	t.Logf("%d workers completed them in %s", workers, time.Since(start).Round(time.Millisecond))

	// Request cost per task, measured at the moment the last task completed.
	all := map[string]int{}
	for _, r := range workerReqs {
		for k, v := range r.Counts() {
			all[k] += v
		}
	}
	t.Logf("requests per task: producer %s; workers %s", requestsPerTask(producer, tasks), requestsPerTask(all, tasks))
	// Nothing but a claim competes for a record here, so every 412 on one
	// is a lost claim: each costs the loser a marker PUT and DELETE besides.
	t.Logf("lost claims per task: %.2f", float64(lost.count())/tasks)

	c.mu.Lock()
	for _, o := range c.overlaps {
		t.Errorf("overlap: %s", o)
	}
	for _, id := range ids {
		if n := c.complete[id]; n != 1 {
			t.Errorf("task %s: OnComplete called %d times across workers, want 1", id, n)
		}
	}
	for key, n := range c.runs {
		if n != 1 {
			t.Errorf("task/attempt %s: handler ran %d times, want 1", key, n)
		}
	}
	if len(c.runs) != tasks {
		t.Errorf("%d handler runs (task, attempt), want %d: no task should need a second attempt", len(c.runs), tasks)
	}
	t.Logf("tasks completed per worker: %v", c.byWorker)
	c.mu.Unlock()

	for _, id := range ids {
		got := e.get(t, id)
		if got.Status != s3task.StatusCompleted || got.Attempt != 1 {
			t.Errorf("task %s: status %s, attempt %d; want completed at attempt 1", id, got.Status, got.Attempt)
		}
	}
	prefix := e.store.Prefix() + "active/"
	out, err := e.raw.ListObjectsV2(e.ctx, &s3.ListObjectsV2Input{Bucket: &e.srv.Bucket, Prefix: &prefix})
	if err != nil {
		t.Fatalf("list markers: %v", err)
	}
	if n := len(out.Contents); n != 0 {
		t.Errorf("%d markers left after every task completed", n)
	}
}

// lostClaims counts the record writes S3 refused with 412: lost
// compare-and-sets.
type lostClaims struct {
	mu sync.Mutex
	n  int
}

func (l *lostClaims) wrap(next http.RoundTripper) http.RoundTripper {
	return workerRoundTrip(func(r *http.Request) (*http.Response, error) {
		resp, err := next.RoundTrip(r)
		if err == nil && r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/status.json") && resp.StatusCode == http.StatusPreconditionFailed {
			l.mu.Lock()
			l.n++
			l.mu.Unlock()
		}
		return resp, err
	})
}

func (l *lostClaims) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// requestsPerTask formats request counts divided by n, e.g. "GET=4.21 PUT=3.00".
func requestsPerTask(counts map[string]int, n int) string {
	keys := make([]string, 0, len(counts))
	total := 0
	for k, v := range counts {
		keys = append(keys, k)
		total += v
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%.2f ", k, float64(counts[k])/float64(n))
	}
	fmt.Fprintf(&b, "(total %.2f)", float64(total)/float64(n))
	return b.String()
}
