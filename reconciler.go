package s3task

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/s3task/s3task/internal/s3x"
)

// The fleet's reconciler. Every ReconcileInterval each worker asks for the
// reconciler lease, a small object (<prefix>_reconciler) naming a worker
// and when its claim runs out. Only its holder reconciles; the others pay
// one GET. The holder renews the lease at each of its turns, for an
// interval and a quarter (leaseFor). A holder that stops gracefully hands
// it back (an expired lease, written with a compare-and-set), so the next
// worker to ask takes it; one that dies leaves it to run out, a quarter of
// an interval after its next turn was due, and then the next worker to ask
// takes it over with a compare-and-set. So a lost marker is restored within
// an interval while the holder lives, and within two and a quarter when it
// dies (an interval and a quarter more for each next holder that dies
// before its turn ends), as long as a worker runs.
//
// To keep the holder's bill flat, a turn walks the tasks created in the
// last two intervals (or since an interval before its last turn whose walk
// ended, if that is earlier), and every fullReconcileEvery turns (and at a
// holder's first turn, until one ends) the whole ReconcileWindow. The
// older tasks that its walks found waiting for a worker it keeps rechecking
// from turn to turn against the marker listing, reading again those whose
// marker is no longer the one their record called for, and those whose
// marker is not yet due (a change whose old marker stayed behind, its
// outcome unknown or its DELETE failed, hides behind such a marker, which
// no poll visits before its time): a marker lost long after its task was
// created is restored at the next turn too, and a stale one removed. A turn
// that an error cut short (the lease's write, a listing, a record or a
// marker) is tried again a minute later, doubling up to an interval.
//
// Each turn also sweeps the tasks created in the same span just before
// the abandonment cutoff (now - StoreOptions.AbandonCreatedAfter), and
// abandons those still waiting for their input: they came of age since the
// previous turns. A task left behind while no worker ran is met by a later
// full turn only if it lies within ReconcileWindow of the cutoff; a
// Store.Reconcile without Since meets every one.

// fullReconcileEvery is how many turns of the holder pass between walks of
// the whole ReconcileWindow.
const fullReconcileEvery = 24

// reconcileLease is the body of the reconciler lease object.
type reconcileLease struct {
	Holder    string    `json:"holder"`
	ExpiresAt time.Time `json:"expires_at"`
	// Write is random, new at each write: a writer whose answer was lost
	// reads the object to tell its own write from another's.
	Write string `json:"write,omitempty"`
}

func (s *Store) reconcileKey() string { return s.opts.Prefix + "_reconciler" }

// readReconcileLease reads the reconciler lease and its ETag; a missing
// object has the ETag "", a corrupt one no holder.
func (s *Store) readReconcileLease(ctx context.Context) (reconcileLease, string, error) {
	var cur reconcileLease
	data, etag, found, err := s.readControl(ctx, s.reconcileKey(), 4096)
	if err != nil || !found {
		return cur, "", err
	}
	_ = json.Unmarshal(data, &cur) // a corrupt lease is a free one
	return cur, etag, nil
}

// readControl reads one of the store's small control objects (the
// reconciler lease, the paused types), at most limit bytes of it, and its
// ETag; found is false for a missing one. Requests: one GET.
func (s *Store) readControl(ctx context.Context, key string, limit int64) (data []byte, etag string, found bool, err error) {
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &key})
	switch {
	case s3x.NotFound(err):
		return nil, "", false, nil
	case err != nil:
		return nil, "", false, fmt.Errorf("s3task: read %s: %w", key, err)
	}
	defer out.Body.Close()
	s.observe(out.ResultMetadata)
	if data, err = io.ReadAll(io.LimitReader(out.Body, limit)); err != nil {
		return nil, "", false, fmt.Errorf("s3task: read %s: %w", key, err)
	}
	return data, aws.ToString(out.ETag), true, nil
}

// leaseFor returns how long a reconciler lease taken at a turn lasts: an
// interval and a quarter, so that a holder whose turn comes a little late
// keeps it, and one that died is replaced soon after.
func leaseFor(interval time.Duration) time.Duration { return interval + interval/4 }

// releaseReconcileLease hands holder's lease back, if it still holds it,
// by writing it expired with a compare-and-set. Requests: one GET, and a
// PUT if holder holds it.
func (s *Store) releaseReconcileLease(ctx context.Context, holder string) error {
	cur, etag, err := s.readReconcileLease(ctx)
	if err != nil || etag == "" || cur.Holder != holder || !s.serverNow().Before(cur.ExpiresAt) {
		return err
	}
	err = s.putReconcileLease(ctx, reconcileLease{Holder: holder, ExpiresAt: s.serverNow(), Write: s.revision(s.reconcileKey())}, etag)
	if err != nil && !s3x.Lost(err) {
		return fmt.Errorf("s3task: write %s: %w", s.reconcileKey(), err)
	}
	if err == nil {
		s.reached("reconciler/released")
	}
	return nil
}

// putReconcileLease writes l over the lease read with etag, or as the
// first lease if etag is empty, with a compare-and-set either way.
func (s *Store) putReconcileLease(ctx context.Context, l reconcileLease, etag string) error {
	key := s.reconcileKey()
	body, _ := json.Marshal(l)
	in := &s3.PutObjectInput{Bucket: &s.bucket, Key: &key, Body: bytes.NewReader(body),
		ContentLength: aws.Int64(int64(len(body))), ContentType: aws.String("application/json")}
	if etag == "" {
		in.IfNoneMatch = aws.String("*")
	} else {
		in.IfMatch = aws.String(etag)
	}
	_, err := s.client.PutObject(ctx, in)
	return err
}

// takeReconcileLeaseUntil reports whether holder holds the reconciler
// lease now, taking it or renewing it for ttl if it is free, its own, or
// run out, and returns the lease's end as written when it is held: the
// earliest the server's clock may read plus ttl, so it lasts at least that
// long by the server's clock. A write refused as if another had written
// first may be the SDK's resend of this one's own write, applied but its
// answer lost: the lease is read again to tell. Requests: one GET; and one
// PUT when it is taken or renewed, and another GET if that PUT fails.
func (s *Store) takeReconcileLeaseUntil(ctx context.Context, holder string, ttl time.Duration) (until time.Time, ok bool, _ error) {
	key := s.reconcileKey()
	cur, etag, err := s.readReconcileLease(ctx)
	if err != nil {
		return time.Time{}, false, err
	}
	// Others' leases are judged by serverNow, one's own end set from the
	// latest the server's clock may read, so that a lease lasts at least
	// ttl by the server's clock whichever way its holder's estimate errs.
	if etag != "" && cur.Holder != holder && s.serverNow().Before(cur.ExpiresAt) {
		return time.Time{}, false, nil
	}
	mine := reconcileLease{Holder: holder, ExpiresAt: s.serverLatest().Add(ttl).UTC().Truncate(time.Millisecond), Write: s.revision(key)}
	if err := s.putReconcileLease(ctx, mine, etag); err != nil {
		if now, _, rerr := s.readReconcileLease(ctx); rerr == nil && now.Write == mine.Write {
			s.reached("reconciler/answer-lost")
			return mine.ExpiresAt, true, nil // ours landed; the error answered a resend, or was a lost answer
		}
		if s3x.Lost(err) {
			return time.Time{}, false, nil // another worker took it first
		}
		return time.Time{}, false, fmt.Errorf("s3task: write %s: %w", key, err)
	}
	if cur.Holder == holder {
		s.reached("reconciler/renewed")
	} else {
		s.reached("reconciler/taken")
	}
	return mine.ExpiresAt, true, nil
}

// reconciler runs a worker's turns at the reconciler lease, one at a time,
// apart from the poll loop.
type reconciler struct {
	w     *Worker
	next  time.Time // local clock; zero: never
	turns int       // turns held in a row
	// walked is the server's time of the last turn held in a row whose
	// walk ran to its end, zero if none: the next turn walks from an
	// interval before it, and a full turn when it is zero.
	walked time.Time
	// pending are the tasks that walk found waiting for a worker, with the
	// marker each called for (see Store.reconcile): the turns that walk
	// only recent tasks recheck the older ones among them.
	pending map[string]string
	// retry is when (local clock, UnixNano; 0: never) to try again, before
	// the next turn is due, after a turn that some error cut short; fails
	// counts those turns in a row.
	retry atomic.Int64
	fails int
	busy  atomic.Bool
	wg    sync.WaitGroup

	// held is the end of the lease this worker holds, by the server's
	// clock, as UnixNano (0: not held): the periodic runs are made only
	// while it lasts (see periodic.go).
	held atomic.Int64
	// periodic is the runs' bookkeeping, loop goroutine only apart from
	// its busy flag.
	periodic periodicRuns
	// took tells the loop that this worker has just taken the lease.
	took chan struct{}
}

func (w *Worker) newReconciler() *reconciler {
	r := &reconciler{w: w, took: make(chan struct{}, 1)}
	if w.opts.ReconcileInterval > 0 {
		r.next = time.Now().Add(w.store.jitter("reconcile", w.opts.ReconcileInterval))
		if len(w.store.opts.Periodic) > 0 {
			// The periodic runs need a holder now, not within an interval.
			r.next = time.Now()
		}
	}
	return r
}

// maybeRun starts a turn if one is due and none is under way.
func (r *reconciler) maybeRun(ctx context.Context) {
	if r.next.IsZero() {
		return
	}
	if now := time.Now(); !now.Before(r.next) {
		r.next = now.Add(r.w.opts.ReconcileInterval)
		r.w.legacy = true // and look for markers of earlier versions again
	} else if at := r.retry.Load(); at == 0 || now.UnixNano() < at {
		return
	}
	if r.busy.CompareAndSwap(false, true) {
		r.retry.Store(0)
		r.wg.Go(func() {
			defer r.busy.Store(false)
			r.turn(ctx)
		})
	}
}

// retryFirst is how long after a turn that an error cut short (the lease
// not written, a listing, a record or a marker that failed) the next is
// tried, doubling with each such turn in a row up to the interval: what
// the turn missed would otherwise wait a whole interval, or for a task
// created earlier than the turns that walk recent tasks reach, until the
// holder's next full turn.
const retryFirst = time.Minute

// turnFloor is the shortest time a reconciler turn is given, whatever the
// interval: short intervals are for tests and small fleets, and a turn
// reads a record per task.
const turnFloor = 30 * time.Second

// wait waits for a turn under way; a cancelled turn ends at its next
// request.
func (r *reconciler) wait() { r.wg.Wait() }

// dueIn returns how long the loop may wait before it must look at the
// reconciler again, for its next turn, a turn to try again or the next
// periodic run; zero when nothing is planned (loop goroutine only). A
// loop whose slots are all busy waits for it too: a long handler must not
// hold up the lease's renewal or a periodic run.
func (r *reconciler) dueIn() time.Duration {
	var at time.Time // local clock
	if !r.next.IsZero() {
		at = r.next
	}
	if rt := r.retry.Load(); rt != 0 && !r.busy.Load() {
		at = sooner(at, time.Unix(0, rt))
	}
	s := r.w.store
	if p := r.nextPeriodic(s.serverNow()); !p.IsZero() {
		at = sooner(at, time.Now().Add(p.Sub(s.serverClock())))
	}
	if at.IsZero() {
		return 0
	}
	return max(time.Until(at), time.Millisecond)
}

// release hands the lease back when the worker stops, if it held it at its
// last turn, so that another worker takes it at its next turn rather than
// after the lease runs out. Call it after wait.
func (r *reconciler) release() {
	if r.turns == 0 {
		return
	}
	ctx, cancel := r.w.bounded(context.Background())
	defer cancel()
	if err := r.w.store.releaseReconcileLease(ctx, r.w.opts.ID); err != nil {
		r.w.log.Warn("s3task: hand back the reconciler lease", "err", err)
	}
}

// turn takes or renews the lease and, if this worker holds it, reconciles.
// A turn takes at most as long as the lease it holds (leaseFor, and never
// less than turnFloor): on an S3 that stops answering it gives up, and the
// next turn tries again. stop ends when the worker stops.
func (r *reconciler) turn(stop context.Context) {
	w, s := r.w, r.w.store
	interval := w.opts.ReconcileInterval
	ctx, cancel := context.WithTimeout(stop, max(leaseFor(interval), turnFloor))
	defer cancel()
	until, mine, err := s.takeReconcileLeaseUntil(ctx, w.opts.ID, leaseFor(interval))
	switch {
	case mine:
		if r.held.Swap(until.UnixNano()) == 0 {
			// Newly the holder: the loop, maybe in a long wait planned
			// before, looks at the periodic runs now.
			select {
			case r.took <- struct{}{}:
			default:
			}
		}
	case err == nil:
		r.held.Store(0) // another worker holds it
	default:
		// Unknown: the lease this worker held, if any, is still its own
		// until its end, as no other worker may take it before.
	}
	if stop.Err() != nil {
		return // stopped: not worth a report
	}
	if err != nil {
		w.log.Warn("s3task: reconciler lease", "err", err)
	}
	if !mine {
		r.retryIf(err != nil) // held by another, or not known: a write refused for an error may have landed
		r.turns, r.walked, r.pending = 0, time.Time{}, nil
		return
	}
	now := s.serverNow()
	since := now.Add(-w.opts.ReconcileWindow)
	if r.turns%fullReconcileEvery != 0 && !r.walked.IsZero() {
		from := now.Add(-2 * interval)
		if back := r.walked.Add(-interval); back.Before(from) {
			from = back // a turn since fell short: walk its span too
		}
		since = later(since, from)
	}
	r.turns++
	for id := range r.pending {
		if w.gone.has(id) {
			delete(r.pending, id) // purged since the turn that met it
		}
	}
	rep, pending, err := s.reconcile(ctx, ReconcileOptions{Since: since}, r.pending, &w.gone)
	if rep != nil {
		// A turn cut short before its walk ended leaves both: the next
		// one walks from before it, and a full one if none has ended.
		r.walked, r.pending = now, pending
	}
	if rep != nil && ctx.Err() == nil {
		// Created tasks come of age for abandonment (StoreOptions.
		// AbandonCreatedAfter) long after the recent walk has passed them:
		// sweep the band of the same span just before the cutoff.
		if cutoff, ok := s.unsentCutoff(now); ok {
			ab, aerr := s.abandonUnsentSince(ctx, cutoff.Add(-now.Sub(since)), &w.gone)
			rep.Abandoned = append(rep.Abandoned, ab...)
			err = errors.Join(err, aerr)
		}
	}
	if ctx.Err() == nil {
		w.sweepPresence(ctx) // presence objects of workers that died; see presence.go
	}
	r.retryIf(err != nil || rep == nil || slices.ContainsFunc(rep.Broken, passing))
	switch {
	case stop.Err() != nil:
		return
	case err != nil:
		w.log.Warn("s3task: reconcile", "err", err)
	case rep != nil && !rep.Clean():
		w.log.Info("s3task: reconcile repaired markers", "tasks", rep.Tasks, "restored", len(rep.Restored), "removed", len(rep.Removed), "broken", len(rep.Broken), "abandoned", len(rep.Abandoned))
	}
	if rep != nil {
		w.hook("OnReconcile", func(h *Hooks) {
			if h.OnReconcile != nil {
				h.OnReconcile(rep)
			}
		})
	}
}

// retryIf sets the next turn for soon if failed, with backoff, and clears
// the backoff if not.
func (r *reconciler) retryIf(failed bool) {
	if !failed {
		r.fails = 0
		return
	}
	d := min(retryFirst<<min(r.fails, 16), r.w.opts.ReconcileInterval)
	r.fails++
	r.retry.Store(time.Now().Add(d).UnixNano())
}
