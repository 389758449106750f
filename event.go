package s3task

import (
	"context"
	"slices"
	"strings"
	"time"
)

// An ObjectEvent is what an S3 event notification says about one object:
// that it was written (s3:ObjectCreated:*) or deleted (s3:ObjectRemoved:*).
// Package s3event reads them from the JSON that S3 and the self-hosted
// servers send, and feeds them to a worker's [Worker.Notify].
type ObjectEvent struct {
	// Bucket is the bucket the event names; "" stands for the worker's.
	Bucket string
	// Key is the object's key, decoded (event formats encode it; see
	// package s3event).
	Key string
	// Removed is true for a deletion, false for a write.
	Removed bool
	// RawKey is the key exactly as the event sent it, where that differs
	// from Key: servers that send keys unencoded make a "+" or a "%" in a
	// key ambiguous, and an [Ingester] tries both.
	RawKey string
	// VersionID and ETag name the version written, as the event says; ""
	// if it does not.
	VersionID, ETag string
	// Size is the version's size in bytes, as the event says; -1 if it
	// does not.
	Size int64
}

// maxNoted bounds the markers named by events that a worker keeps to visit,
// and the events waiting for its poll loop: past it, the worker lists the
// markers instead, which finds them all.
const maxNoted = 4096

// recordWait is how long a worker told of a marker due now waits for the
// event of its task's record before it visits (see takeNotes).
const recordWait = 20 * time.Millisecond

// noted is a marker named by an event, to visit at a time.
type noted struct {
	m     marker
	at    time.Time // server clock: not before then
	fails int       // visits in a row that failed for a passing reason
}

// Notify tells the worker what an S3 event notification says, so that it
// starts new work at once instead of at its next check of the wake object.
// An event that a marker of the worker's Store was written makes the worker
// visit that task directly, with no LIST: it reads the record and claims the
// task if it is due and its type served, as a poll would. A marker due now
// is visited when the event of its task's record comes, or 20 ms after its
// own, whichever is first: a Submit writes its marker before its record, and
// a visit in between would find the task not yet queued. A marker named
// within [WorkerOptions.ClockMargin] of now counts as due now: its name is
// the writer's reading of the server's clock, which may lead the worker's,
// and the record decides. A marker due later (a scheduled start, a retry,
// another worker's lease) is visited at its time, unless an event says it
// was deleted first. An event that a
// task's record was written also brings the worker back at once to the
// markers of that task it found ahead of their record; one that the record
// was deleted (a Purge) makes it forget them.
//
// Where every worker of a fleet is told of every event (a broker without a
// queue group), the workers take turns at a task due now instead of racing
// for its claim: each visits it after its rank for that task, drawn from a
// hash of the task's ID and the workers' IDs, times a step of a few record
// reads as the worker measures them (1 s at most in all). The first
// claims at once; the claim's events reach the others before their turns,
// and they drop the visit (the marker's deletion) or find the task running.
// A worker ranks itself among the workers it found holding a task it was
// told of while due, or lost such a claim to, and, once it has met one,
// among those it is told wrote their presence object (see
// [WorkerOptions.PresenceInterval]; events of the _workers/ folder are
// worth passing on). A worker that never met one, alone or told of each
// task alone (a webhook, a queue group), visits at once.
//
// Notify reports whether the event concerns the worker: a marker's, a
// record's or a presence object's; events of other objects and other
// buckets are ignored.
//
// An event is only a hint: the record decides, so duplicate, late,
// out-of-order and forged events cost a GET at most, never a wrong start.
// Notify never blocks and makes no request itself; the poll loop does the
// work, when it has a free slot. If the loop is working through a listing
// then, it takes the event before its next visit: a task an event named
// waits for the visit under way, not for a long run of due markers that
// start nothing (a burst other workers took first). With events wired,
// the polling is a safety net and can be slow: PollInterval of minutes
// (see [WorkerOptions.PollInterval]) still finds anything an event missed.
func (w *Worker) Notify(e ObjectEvent) bool {
	s := w.store
	if e.Bucket != "" && e.Bucket != s.bucket {
		return false
	}
	if _, ok := s.parseMarker(e.Key); !ok {
		if _, ok := s.recordID(e.Key); !ok {
			if _, ok := s.presenceID(e.Key); !ok {
				return false
			}
		}
	}
	w.noteMu.Lock()
	if len(w.notes) < maxNoted {
		w.notes = append(w.notes, e)
	} else {
		w.notesLost = true
	}
	w.noteMu.Unlock()
	select {
	case w.noted <- struct{}{}:
	default:
	}
	return true
}

// takeNotes moves the events Notify queued into the markers to visit (poll
// loop only). It reports whether the worker should list instead: events
// were dropped, or the markers to visit are too many.
func (w *Worker) takeNotes() (listNow bool) {
	w.noteMu.Lock()
	notes, lost := w.notes, w.notesLost
	w.notes, w.notesLost = nil, false
	w.noteMu.Unlock()
	s := w.store
	now := s.serverNow()
	for _, e := range notes {
		if m, ok := s.parseMarker(e.Key); ok {
			if e.Removed {
				if _, ok := w.marked[m.key]; ok {
					s.reached("event/removed")
					delete(w.marked, m.key)
				}
				continue
			}
			// Written just now, as far as this worker can tell: a visit
			// never takes it for the leftover of a phase that is over.
			m.written, m.event = now, true
			w.announced(m.key)
			if len(w.marked) >= maxNoted {
				lost = true
				continue
			}
			at := m.due.Add(s.dueLead())
			if !m.due.After(w.soon(now)) {
				// Due now (see soon): a Submit's or a Retry's, most
				// likely, which writes its marker before its record. Give
				// the record's event a moment to come first, so that one
				// GET finds the task queued; and the workers ranked ahead
				// of this one, their turn (see fanout.go).
				m.rush = true
				at = now.Add(recordWait + w.stagger(m.id))
			}
			w.marked[m.key] = noted{m: m, at: at}
			continue
		}
		if id, ok := s.presenceID(e.Key); ok {
			w.peerSeen(id, e.Removed) // another worker started, is alive, or stopped
			continue
		}
		id, _ := s.recordID(e.Key)
		if e.Removed {
			w.forget(id) // purged: its markers lead nowhere
			continue
		}
		// A record written: markers of its task seen ahead of it are
		// worth a visit now, or at this worker's turn.
		var turn time.Time
		for key, n := range w.marked {
			if n.m.id != id || n.m.due.After(w.soon(now)) {
				continue
			}
			if turn.IsZero() {
				turn = now.Add(w.stagger(id))
			}
			if n.at.After(turn) {
				s.reached("event/record")
				n.at = turn
				w.marked[key] = n
			}
		}
	}
	return lost
}

// forget drops the markers of task id named by events (poll loop only):
// its record is gone.
func (w *Worker) forget(id string) {
	for key, n := range w.marked {
		if n.m.id == id {
			delete(w.marked, key)
		}
	}
}

// visitNoted visits the markers named by events whose time has come, while
// a slot is free (poll loop only). A visit that did not start its task
// keeps the marker for when the visit said to look again; one that failed
// for a passing reason, for a second later, doubling up to a PollInterval.
// It reports whether visits kept failing that long, after which the worker
// lists at its next poll as well.
func (w *Worker) visitNoted(ctx, base context.Context) (failed bool) {
	s := w.store
	now := s.serverNow()
	var todo []marker
	for _, n := range w.marked {
		if !now.Before(n.at) {
			todo = append(todo, n.m)
		}
	}
	slices.SortFunc(todo, func(a, b marker) int { return strings.Compare(a.key, b.key) })
	for _, m := range todo {
		delete(w.skip, m.key)
		full, vfailed, _ := w.serve(ctx, base, []marker{m}, func(time.Time) {}, nil)
		if full {
			break // every slot is taken: the loop comes back when one frees
		}
		s.reached("event/visit")
		n := w.marked[m.key]
		until, skipped := w.skip[m.key]
		switch {
		case vfailed:
			// S3 did not answer: try again soon, backing off to a
			// PollInterval, rather than wait for the next listing.
			s.reached("event/retry")
			n.fails++
			n.at = now.Add(min(time.Second<<min(n.fails-1, 16), w.opts.PollInterval))
			w.marked[m.key] = n
			failed = n.at.Sub(now) >= w.opts.PollInterval
		case skipped:
			w.marked[m.key] = noted{m: m, at: until}
		default:
			delete(w.marked, m.key)
		}
	}
	return failed
}

// nextNoted returns when the first marker named by an event falls due
// (server clock; zero if none), perhaps already (poll loop only).
func (w *Worker) nextNoted() (next time.Time) {
	for _, n := range w.marked {
		next = sooner(next, n.at)
	}
	return next
}

// notesBetween is what the poll loop does between two visits of a
// listing's markers: it takes the events Notify queued since, and visits
// the markers they named that have fallen due, so that a task an event
// told of never waits for a long scan of markers that start nothing (a
// burst others claimed first, records that cannot be read). It reports
// whether the worker should list again once the scan is done (see
// takeNotes), and whether visits kept failing (see visitNoted).
func (w *Worker) notesBetween(ctx, base context.Context) (listNow, failed bool) {
	select {
	case <-w.noted:
		listNow = w.takeNotes()
	default:
	}
	if at := w.nextNoted(); !at.IsZero() && !w.store.serverNow().Before(at) {
		w.store.reached("event/during-scan")
		failed = w.visitNoted(ctx, base)
	}
	return listNow, failed
}
