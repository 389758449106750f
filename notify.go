package s3task

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"
)

// Backoff of a completion notice whose OnTerminal call failed: the first
// retry after notifyBackoffMin, doubling up to notifyBackoffMax.
const (
	notifyBackoffMin = 5 * time.Second
	notifyBackoffMax = 10 * time.Minute
)

// notifier delivers a worker's OnTerminal notices one at a time, apart from
// the poll loop and the attempts, so a slow or failing hook delays no claim
// and holds no slot. A notice that fails is tried again with backoff. While
// a notice is held here, the worker's polls skip the task's marker instead
// of reading its record every time. A worker without the hook holds the
// notices it meets for notifyBackoffMax, leaving them to a worker that has
// it.
type notifier struct {
	w    *Worker
	mu   sync.Mutex
	held map[string]*notice
	kick chan struct{}
}

type notice struct {
	t        *Task
	etag     string // "" once it may be stale: read the record again
	failures int
	next     time.Time // local clock: not before then
}

func newNotifier(w *Worker) *notifier {
	return &notifier{w: w, held: map[string]*notice{}, kick: make(chan struct{}, 1)}
}

// add takes the pending notice of the finished task t.
func (n *notifier) add(t *Task, etag string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.held[t.ID]; ok {
		return
	}
	no := &notice{t: t.clone(), etag: etag, next: time.Now()}
	if n.w.store.opts.OnTerminal == nil {
		no.next = no.next.Add(notifyBackoffMax)
	}
	n.held[t.ID] = no
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// holds reports whether the notice of task id is held here.
func (n *notifier) holds(id string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, ok := n.held[id]
	return ok
}

// first returns the held notice due first, and how long until it is due.
func (n *notifier) first() (*notice, time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	var first *notice
	for _, no := range n.held {
		if first == nil || no.next.Before(first.next) {
			first = no
		}
	}
	if first == nil {
		return nil, 0
	}
	return first, time.Until(first.next)
}

// run delivers the held notices as they fall due until ctx is done. What is
// still held then stays pending in the records, for the next worker.
func (n *notifier) run(ctx context.Context) {
	defer func() {
		n.mu.Lock()
		clear(n.held)
		n.mu.Unlock()
	}()
	for {
		no, wait := n.first()
		if no == nil || wait > 0 {
			timer := time.NewTimer(wait)
			if no == nil {
				timer.Stop()
			}
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case <-n.kick:
			case <-timer.C:
			}
			timer.Stop()
			continue
		}
		var err error
		if n.w.store.opts.OnTerminal != nil {
			err = n.w.store.deliver(ctx, no.t, no.etag)
		}
		if ctx.Err() != nil {
			return
		}
		n.mu.Lock()
		if err == nil || n.w.store.opts.OnTerminal == nil {
			delete(n.held, no.t.ID)
		} else {
			no.failures++
			no.etag = ""
			no.next = time.Now().Add(min(notifyBackoffMin<<min(no.failures-1, 16), notifyBackoffMax))
		}
		n.mu.Unlock()
	}
}

// deliver runs OnTerminal for the finished task t (read first if etag is
// ""), records that its notice went out, and removes its marker. It returns
// the hook's error, after which the notice stays pending.
func (s *Store) deliver(ctx context.Context, t *Task, etag string) error {
	if etag == "" && t.NotifyPending {
		var err error
		if t, etag, err = s.read(ctx, t.ID); err != nil {
			return err
		}
	}
	if t.NotifyPending {
		if err := s.callOnTerminal(ctx, t); err != nil {
			s.log.WarnContext(ctx, "s3task: OnTerminal failed; it will be called again", "task_id", t.ID, "status", t.Status, "err", err)
			return err
		}
		got, _, err := s.apply(ctx, t, etag, event{kind: evNotified}, nil)
		if err != nil {
			if errors.Is(err, ErrInvalidTransition) {
				return nil // retried meanwhile: no longer finished
			}
			s.log.WarnContext(ctx, "s3task: record notice", "task_id", t.ID, "err", err)
			return err
		}
		t = got
	}
	if t.Terminal() {
		_ = s.dropMarker(ctx, t.ID, t.Status == StatusFailed)
	}
	return nil
}

// callOnTerminal calls the OnTerminal hook, turning a panic into an error.
func (s *Store) callOnTerminal(ctx context.Context, t *Task) (err error) {
	defer func() {
		if r := recover(); r != nil {
			s.log.ErrorContext(ctx, "s3task: OnTerminal panicked", "task_id", t.ID, "panic", r, "stack", string(debug.Stack()))
			err = fmt.Errorf("s3task: OnTerminal panicked: %v", r)
		}
	}()
	return s.opts.OnTerminal(ctx, t.clone())
}
