package s3task

import (
	"encoding/binary"
	"hash/fnv"
	"time"
)

// Fan-out without a stampede. Where every worker of a fleet is told of
// every event (a broker without a queue group), every idle worker would
// visit a new task at the same instant and race for its claim: each loser
// pays a GET, the PUT and DELETE of the marker it wrote for the claim, and a
// refused PUT of the record. So a worker told of a task due now visits it
// after a stagger that is zero for one worker of those that compete for it,
// and one step longer for each of the others, in an order drawn afresh for
// each task: the first claims at once, and the claim's events (the
// marker's DELETE above all, see takeNotes) reach the others before their
// turn, so that they drop the visit, or find the task running at a GET's
// cost.
//
// A worker cannot see the fleet, so it learns its rivals from the visits
// that found a task told by an event and due now already claimed by
// another worker, or lost the claim to one: the workers that are told of
// the same tasks. Alone, or told of each task alone (a webhook, a queue
// group), it never meets one and visits at once, as before. Once it has met
// one, the others it is told of by the events of their presence objects
// (written when a worker starts and every PresenceInterval, deleted when it
// stops) count too: every worker of a fan-out hears of all the others as
// they start, instead of one at a time as each beats it to a claim. A
// worker ranked ahead that lets this one claim staggerMisses times in a row
// is forgotten (stopped, busy, or no longer told), until it wins a task
// from this one, or writes its presence object, again. The order of a
// task's workers is a hash of the task's ID and each worker's, which every
// worker computes alike.

// maxRivals bounds the rivals a worker remembers: past it, the one seen
// least recently goes.
const maxRivals = 64

// staggerMisses is how many claims in a row a rival ranked ahead may leave
// to the worker before the worker forgets it.
const staggerMisses = 3

// A step of the stagger is staggerRTTs record reads, measured, within
// [minStaggerStep, maxStaggerStep]: the winner's GET and two PUTs, and the
// delivery of their events. maxStagger bounds the whole wait.
const (
	staggerRTTs    = 4
	minStaggerStep = 2 * time.Millisecond
	maxStaggerStep = 100 * time.Millisecond
	maxStagger     = time.Second
)

// rival is what a worker knows of another that may be told of the same
// tasks.
type rival struct {
	seen   time.Time // server clock: last heard of
	met    bool      // found holding a task this worker was told of while due
	misses int       // claims in a row it was ranked ahead of this worker and left the task to it
}

// rivalSeen notes that worker id claimed a task this worker was told of,
// due now (poll loop only).
func (w *Worker) rivalSeen(id string) {
	if w.heardOf(id) {
		w.store.reached("fanout/rival")
		if !w.rivals[id].met {
			w.met++
		}
		w.rivals[id] = rival{seen: w.store.serverNow(), met: true}
	}
}

// peerSeen notes an event that worker id wrote its presence object, or
// deleted it (poll loop only).
func (w *Worker) peerSeen(id string, removed bool) {
	if removed {
		w.dropRival(id)
		return
	}
	if w.heardOf(id) {
		r := w.rivals[id]
		r.seen = w.store.serverNow()
		w.rivals[id] = r
	}
}

// heardOf makes room for worker id among the rivals, if it is another
// worker and not among them yet, and reports whether it is another.
func (w *Worker) heardOf(id string) bool {
	if id == "" || id == w.opts.ID {
		return false
	}
	if _, ok := w.rivals[id]; !ok && len(w.rivals) >= maxRivals {
		oldest := ""
		for k, r := range w.rivals {
			if oldest == "" || r.seen.Before(w.rivals[oldest].seen) {
				oldest = k
			}
		}
		w.dropRival(oldest)
	}
	return true
}

// dropRival forgets worker id.
func (w *Worker) dropRival(id string) {
	if r, ok := w.rivals[id]; ok {
		if r.met {
			w.met--
		}
		delete(w.rivals, id)
	}
}

// rank returns the rank of the worker for task id among itself and its
// rivals: 0 if it goes first, and always while it has met none. ahead, if
// not nil, is called with each rival ranked ahead of it.
func (w *Worker) rank(id string, ahead func(rival string)) int {
	if w.met == 0 {
		return 0
	}
	own, n := staggerHash(w.opts.ID, id), 0
	for r := range w.rivals {
		if h := staggerHash(r, id); h < own || h == own && r < w.opts.ID {
			n++
			if ahead != nil {
				ahead(r)
			}
		}
	}
	return n
}

// stagger returns how long after it learns that a marker of task id is due
// the worker visits it: its rank times a step (see rank), at most
// maxStagger (poll loop only).
func (w *Worker) stagger(id string) time.Duration {
	n := w.rank(id, nil)
	if n == 0 {
		return 0
	}
	w.store.reached("fanout/stagger")
	step := min(max(staggerRTTs*w.rtt, minStaggerStep), maxStaggerStep)
	return min(time.Duration(n)*step, maxStagger)
}

// claimedTold notes that the worker claimed task id, told of it by an event
// and due then: the rivals ranked ahead of it left it the task (poll loop
// only).
func (w *Worker) claimedTold(id string) {
	w.rank(id, func(k string) {
		r := w.rivals[k]
		if r.misses++; r.misses >= staggerMisses {
			w.store.reached("fanout/forget")
			w.dropRival(k)
			return
		}
		w.rivals[k] = r
	})
}

// noteRTT folds the duration of a record read into the worker's measure of
// S3's round trip (poll loop only).
func (w *Worker) noteRTT(d time.Duration) {
	if w.rtt == 0 {
		w.rtt = d
		return
	}
	w.rtt += (d - w.rtt) / 8
}

// staggerHash orders the workers told of task id: FNV-1a of both IDs,
// mixed (splitmix64's finalizer) so that workers whose IDs differ in one
// character still come in a different order for each task.
func staggerHash(worker, id string) uint64 {
	h := fnv.New64a()
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(worker)))
	h.Write(n[:])
	h.Write([]byte(worker))
	h.Write([]byte(id))
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
