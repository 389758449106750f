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
// and holds no slot. A notice that fails is tried again with backoff; one
// whose task was deleted meanwhile (purged) is dropped. While a notice is
// held here, the worker's polls skip the task's marker instead of reading
// its record every time, unless the marker was written again since the
// record was last seen finished (a Retry writes it): then the poll reads
// the task as usual. A worker without the hook holds the notices it meets
// for notifyBackoffMax, leaving them to a worker that has it.
type notifier struct {
	w    *Worker
	mu   sync.Mutex
	held map[string]*notice
	kick chan struct{}
}

type notice struct {
	t        *record
	etag     string
	seen     time.Time // server clock: when the record was last seen finished
	news     bool      // its marker was announced since: see lift
	added    time.Time // local clock
	failures int
	next     time.Time // local clock: not before then
}

// freshFor is how long a notice's record, as the worker wrote or read it,
// is used without reading it again before the hook is called.
const freshFor = time.Second

// markerSkew absorbs the one-second resolution of a marker's LastModified
// and the error of the server-clock estimate when comparing the two.
const markerSkew = 2 * time.Second

func newNotifier(w *Worker) *notifier {
	return &notifier{w: w, held: map[string]*notice{}, kick: make(chan struct{}, 1)}
}

// add takes the pending notice of the finished task t.
func (n *notifier) add(t *record, etag string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if old, ok := n.held[t.ID]; ok && old.t.Status == t.Status && old.t.Attempt == t.Attempt {
		// The same result's notice, its record read again by a poll: still
		// finished, so its marker is held again.
		old.seen, old.news = n.w.store.serverNow(), false
		return
	}
	now := time.Now()
	no := &notice{t: t.clone(), etag: etag, seen: n.w.store.serverNow(), added: now, next: now}
	if n.w.store.opts.OnTerminal == nil {
		no.next = no.next.Add(notifyBackoffMax)
	}
	n.held[t.ID] = no
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// holds reports whether m is the marker of a notice held here: the
// marker the finished record calls for, not written since the record was
// last seen, nor announced since. Any other marker of the task (a Retry
// under way writes its new one before the record) is news.
func (n *notifier) holds(m marker) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	no, ok := n.held[m.id]
	return ok && !no.news && m.key == n.w.store.MarkerKey(&no.t.Task) && m.written.Before(no.seen.Add(-markerSkew))
}

// lift stops holding the marker key, announced by a change that has landed:
// a Retry whose new phase is due in the very millisecond the finished
// record's marker names writes no marker, only the announcement. The next
// poll reads the record; if it is still finished, add holds the marker
// again.
func (n *notifier) lift(key string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, no := range n.held {
		if n.w.store.MarkerKey(&no.t.Task) == key {
			no.news = true
		}
	}
}

// first returns the held notice due first, and how long until it is due.
// Of notices due at the same moment (taken by one poll) the one of the
// lowest task ID comes first, so the order does not hang on the map's.
func (n *notifier) first() (*notice, time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	var first *notice
	for _, no := range n.held {
		if first == nil || no.next.Before(first.next) || no.next.Equal(first.next) && no.t.ID < first.t.ID {
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
			err = n.deliver(ctx, no)
		}
		if ctx.Err() != nil {
			return
		}
		n.mu.Lock()
		switch {
		case n.held[no.t.ID] != no:
			// replaced by a later result's notice while this one was out
		case err == nil || n.w.store.opts.OnTerminal == nil:
			delete(n.held, no.t.ID)
		default:
			no.failures++
			n.w.store.reached("notify/retry")
			no.next = time.Now().Add(min(notifyBackoffMin<<min(no.failures-1, 16), notifyBackoffMax))
		}
		n.mu.Unlock()
	}
}

// deliver delivers one held notice. A record older than freshFor is read
// again first: the task may have been retried, or its notice delivered by
// another worker, since. A record that no longer exists (a Purge with
// DropPendingNotices) has no notice left to deliver: the notice is done
// with, and nil returned.
func (n *notifier) deliver(ctx context.Context, no *notice) error {
	s := n.w.store
	t, etag := no.t, no.etag
	if n.w.gone.has(t.ID) {
		// Found deleted by the poll loop or the reconciler since.
		s.reached("notify/gone")
		return nil
	}
	if time.Since(no.added) > freshFor {
		seen := s.serverNow()
		rctx, cancel := n.w.bounded(ctx)
		var err error
		t, etag, err = s.read(rctx, t.ID)
		cancel()
		if errors.Is(err, ErrNotFound) {
			n.w.gone.note(no.t.ID)
			s.reached("notify/gone")
			n.w.log.Info("s3task: task deleted before its OnTerminal notice went out; dropping the notice", "task_id", no.t.ID)
			return nil
		}
		if err != nil {
			return err
		}
		n.mu.Lock()
		no.seen = seen
		n.mu.Unlock()
	}
	// The hook gets ctx; recording the notice gets a lease at most, so a
	// stalled S3 delays the next notice, never stops them.
	return s.deliverWithin(ctx, t, etag, n.w.opts.LeaseDuration)
}

// deliver runs OnTerminal for the finished task t (read first if etag is
// ""), records that its notice went out, and so removes its marker. It returns
// the hook's error, after which the notice stays pending.
func (s *Store) deliver(ctx context.Context, t *record, etag string) error {
	return s.deliverWithin(ctx, t, etag, 0)
}

// deliverWithin is deliver whose requests (not the hook) end within d, if
// d is not zero.
func (s *Store) deliverWithin(ctx context.Context, t *record, etag string, d time.Duration) error {
	bound := func() (context.Context, context.CancelFunc) {
		if d > 0 {
			return context.WithTimeout(ctx, d)
		}
		return context.WithCancel(ctx)
	}
	if etag == "" && t.NotifyPending {
		rctx, cancel := bound()
		var err error
		t, etag, err = s.read(rctx, t.ID)
		cancel()
		if err != nil {
			return err
		}
	}
	if t.NotifyPending {
		if err := s.callOnTerminal(ctx, t.Task.clone()); err != nil {
			s.log.WarnContext(ctx, "s3task: OnTerminal failed; it will be called again", "task_id", t.ID, "status", t.Status, "err", err)
			return err
		}
		// The notice is for this result only: if the task was retried and
		// finished again meanwhile, the new result still needs its own.
		wctx, cancel := bound()
		defer cancel()
		_, _, err := s.apply(wctx, t, etag, event{kind: evNotified, status: t.Status, attempt: t.Attempt})
		if err != nil {
			if errors.Is(err, ErrInvalidTransition) {
				s.reached("notify/superseded")
				return nil // retried meanwhile: a later result has a notice of its own
			}
			if errors.Is(err, errGone) {
				// Purged while the hook ran: the commit's re-read found no
				// record, so there is no notice left to record, and none
				// to try again (which would read the record once more).
				s.reached("notify/gone-after-call")
				return nil
			}
			s.log.WarnContext(ctx, "s3task: record notice", "task_id", t.ID, "err", err)
			return err
		}
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
