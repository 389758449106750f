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
	err := parallel(n, par, func(i int) (err error) {
		ids[i], err = prepare(ctx, s, fmt.Sprintf("task %d", i))
		return err
	})
	return ids, err
}

// submitMany submits ids, par at a time.
func submitMany(ctx context.Context, s *s3task.Store, ids []string, par int) error {
	return parallel(len(ids), par, func(i int) error {
		_, err := s.Submit(ctx, ids[i])
		return err
	})
}

// parallel runs f(i) for 0 <= i < n, par at a time, and returns every error.
func parallel(n, par int, f func(i int) error) error {
	errs := make([]error, n)
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = f(i)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// noWork is a handler that completes every task at once, with no output.
var noWork = s3task.HandlerFunc(func(context.Context, *s3task.Job) error { return nil })

// pickups notes, from the hooks of zero-work workers, when each claim was
// won and that each task completed, for timing how soon a submitted task is
// picked up.
type pickups struct {
	claims    chan time.Time
	completes chan struct{}
}

// newPickups returns pickups with room for n unread claims and completions.
func newPickups(n int) *pickups {
	return &pickups{claims: make(chan time.Time, n), completes: make(chan struct{}, n)}
}

// hooks are worker hooks that report to p.
func (p *pickups) hooks() s3task.Hooks {
	return s3task.Hooks{
		OnClaim:    func(*s3task.Task) { offer(p.claims, time.Now()) },
		OnComplete: func(*s3task.Task) { offer(p.completes, struct{}{}) },
	}
}

// pickup submits id through s and returns the time from the start of
// Submit to the claim, once the task completed: the claim must come within
// limit, the completion within 30 seconds of it.
func (p *pickups) pickup(ctx context.Context, s *s3task.Store, id string, limit time.Duration) (time.Duration, error) {
	start := time.Now()
	if _, err := s.Submit(ctx, id); err != nil {
		return 0, err
	}
	at, err := awaitOne(ctx, p.claims, limit)
	if err != nil {
		return 0, err
	}
	if _, err := awaitOne(ctx, p.completes, 30*time.Second); err != nil {
		return 0, err
	}
	return at.Sub(start), nil
}

// awaitOne waits for a value on ch for up to limit.
func awaitOne[T any](ctx context.Context, ch <-chan T, limit time.Duration) (T, error) {
	var zero T
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case v := <-ch:
		return v, nil
	case <-t.C:
		return zero, fmt.Errorf("timed out after %s", limit)
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// offer sends v on ch unless ch is full.
func offer[T any](ch chan T, v T) {
	select {
	case ch <- v:
	default:
	}
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

// hooks are worker hooks that record claims and completions in l.
func (l *ledger) hooks() s3task.Hooks {
	return s3task.Hooks{
		OnClaim:    func(t *s3task.Task) { l.claim(t.ID) },
		OnComplete: func(t *s3task.Task) { l.complete(t.ID) },
	}
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
