package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/s3task/s3task"
)

// runningWorker is a Worker's Run in a goroutine of its own.
type runningWorker struct {
	cancel context.CancelFunc
	done   chan error
}

func startWorker(ctx context.Context, w *s3task.Worker) *runningWorker {
	ctx, cancel := context.WithCancel(ctx)
	r := &runningWorker{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- w.Run(ctx) }()
	return r
}

// stop shuts the worker down and waits until Run returned.
func (r *runningWorker) stop() error {
	r.cancel()
	return <-r.done
}

// stopAll stops workers concurrently.
func stopAll(ws []*runningWorker) error {
	errs := make([]error, len(ws))
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = w.stop() }()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// waitUntil checks cond every few milliseconds until it holds, or fails
// after limit.
func waitUntil(ctx context.Context, limit time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s", limit, what)
		}
		t := time.NewTimer(5 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// prepare creates a task with a small input, ready to submit.
func prepare(ctx context.Context, s *s3task.Store, name string) (string, error) {
	t, err := s.Create(ctx, s3task.CreateParams{Name: name, Type: "bench"})
	if err != nil {
		return "", err
	}
	if err := s.UploadInput(ctx, t.ID, strings.NewReader("id,name\n1,alpha\n")); err != nil {
		return "", err
	}
	return t.ID, nil
}

// prepareMany runs prepare for n tasks, par at a time, and returns their IDs.
func prepareMany(ctx context.Context, s *s3task.Store, n, par int) ([]string, error) {
	ids := make([]string, n)
	errs := make([]error, n)
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			ids[i], errs[i] = prepare(ctx, s, fmt.Sprintf("task %d", i))
		}()
	}
	wg.Wait()
	return ids, errors.Join(errs...)
}

// submitMany submits ids, par at a time.
func submitMany(ctx context.Context, s *s3task.Store, ids []string, par int) error {
	errs := make([]error, len(ids))
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			_, errs[i] = s.Submit(ctx, id)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// ledger records, across all workers of a run, what happened to each task.
type ledger struct {
	mu        sync.Mutex
	claims    map[string]int // task ID -> claims won (OnClaim), or pops for a baseline
	completes map[string]int // task ID -> completions
	want      int
	allDone   chan struct{} // closed when want distinct tasks completed
	closed    bool
}

func newLedger(want int) *ledger {
	return &ledger{claims: map[string]int{}, completes: map[string]int{}, want: want, allDone: make(chan struct{})}
}

func (l *ledger) claim(id string) {
	l.mu.Lock()
	l.claims[id]++
	l.mu.Unlock()
}

func (l *ledger) complete(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.completes[id]++
	if !l.closed && len(l.completes) >= l.want {
		l.closed = true
		close(l.allDone)
	}
}

// tally returns the claims won, the tasks completed at least once, the
// duplicates (every completion or claim of a task beyond its first) and the
// tasks of ids never completed.
func (l *ledger) tally(ids []string) (claims, distinct, duplicates, lost int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, n := range l.claims {
		claims += n
	}
	for _, id := range ids {
		c := l.completes[id]
		if c == 0 {
			lost++
			continue
		}
		distinct++
		duplicates += max(c, l.claims[id]) - 1
	}
	return claims, distinct, duplicates, lost
}
