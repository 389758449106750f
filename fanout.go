package s3task

import (
	"context"
	"encoding/binary"
	"hash/fnv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Workers that go for the same tasks without racing. Two cases need it.
//
// Fan-out: where every worker of a fleet is told of every event (a broker
// without a queue group), every idle worker would visit a new task at the
// same instant and race for its claim: each loser pays a GET, the PUT and
// DELETE of the marker it wrote for the claim, and a refused PUT of the
// record. So a worker told of a task due now visits it after a stagger
// that is zero for one worker of those that compete for it, and one step
// longer for each of the others, in an order drawn afresh for each task:
// the first claims at once, and the claim's events (the marker's DELETE
// above all, see takeNotes) reach the others before their turn, so that
// they drop the visit, or find the task running at a GET's cost.
//
// A backlog: every worker of a fleet lists the same head of the marker
// folder, the tasks due first. A worker that knows its rivals goes for the
// tasks of the head it ranks first for, in the same order, so that the
// fleet's workers each take tasks of their own (see pick).
//
// Both orders are a hash of the task's ID and each worker's, which every
// worker computes alike; a worker ranks itself among the rivals it knows.
// It learns them from the visits that found a task it went for already
// claimed by another worker, or lost the claim to one; from the events of
// their presence objects (written when a worker starts and every
// PresenceInterval, deleted when it stops), if it is told of them; and,
// where it meets contention in its listings, from a LIST of the presence
// objects (see learnFleet). The stagger waits only for the rivals met on
// tasks told by an event and due now: alone, or told of each task alone (a
// webhook, a queue group), a worker never meets one and visits at once, as
// before; once it has met one, every rival it knows counts. A rival ranked
// ahead that lets this one claim a told task staggerMisses times in a row
// is forgotten (stopped, busy, or no longer told), until it wins a task
// from this one, or writes its presence object, again; a listing forgets
// the rivals whose presence objects are gone or stale.

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

// rivalSeen notes that worker id claimed a task this worker went for:
// told of it by an event while due (told), or found in its listing (see
// pick). Either way the rival's misses start again, and the worker lists
// the fleet at its next poll if it has not for fleetRelist (see
// learnFleet) (poll loop only).
func (w *Worker) rivalSeen(id string, told bool) {
	if !w.heardOf(id) {
		return
	}
	w.contended, w.racedAt = true, w.store.serverNow()
	r := w.rivals[id]
	r.seen, r.misses = w.racedAt, 0
	if told {
		w.store.reached("fanout/rival")
		if !r.met {
			w.met++
		}
		r.met = true
	} else {
		w.store.reached("poll/rival")
	}
	w.rivals[id] = r
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
// rivals: 0 if it goes first, and always while it knows none. ahead, if
// not nil, is called with each rival ranked ahead of it.
func (w *Worker) rank(id string, ahead func(rival string)) int {
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
	if w.met == 0 {
		return 0 // told of each task alone, as far as it knows
	}
	n := w.rank(id, nil)
	if n == 0 {
		return 0
	}
	w.store.reached("fanout/stagger")
	step := min(max(staggerRTTs*w.rtt, minStaggerStep), maxStaggerStep)
	return min(time.Duration(n)*step, maxStagger)
}

// claimed notes that the worker claimed the task of marker m. Told of it
// by an event while due, after it met a rival told of the same tasks, the
// rivals ranked ahead of it left it the task: a miss for each. A task it
// listed says nothing of the rivals ahead (busy with a task of their own,
// most likely): what tells the poll loop of a stopped one is its
// presence object (see learnFleet) (poll loop only).
func (w *Worker) claimed(m marker) {
	if !m.event || !m.rush || w.met == 0 {
		return
	}
	w.rank(m.id, func(k string) {
		r := w.rivals[k]
		if r.misses++; r.misses >= staggerMisses {
			w.store.reached("fanout/forget")
			w.dropRival(k)
			return
		}
		w.rivals[k] = r
	})
}

// A worker lists the presence objects to learn its fleet (see learnFleet)
// at most fleetRelearn after it first did, then after twice as long each
// time, up to fleetRelist.
const (
	fleetRelearn = 200 * time.Millisecond
	fleetRelist  = time.Minute
)

// learnFleet lists the presence objects, one page, and counts among its
// rivals every worker whose object was written within two of this
// worker's PresenceIntervals and its ClockMargin: the fleet that reads the
// same head of the marker folder (see pick). A rival it knew that the
// listing does not show fresh, and that it has not heard of otherwise in
// that time, is forgotten: stopped, or killed.
//
// The poll loop calls it only with presence on: at its first poll that
// finds more tasks due than it has free slots, before it picks among them;
// then when another worker took a task this one went for, fleetRelearn
// after the listing before, twice as long after each, up to fleetRelist.
// So a quiet fleet, or a worker with its tasks to itself, never lists; a
// fleet that starts on a backlog lists once per worker, then again as the
// workers that started beside it come in, instead of learning its rivals
// one lost claim at a time; and a busy fleet lists once a minute per
// worker. A listing that fails counts as one (poll loop only).
func (w *Worker) learnFleet(ctx context.Context) {
	s := w.store
	w.fleetGap = min(max(2*w.fleetGap, fleetRelearn), fleetRelist)
	if w.fleetAt.IsZero() {
		w.fleetGap = fleetRelearn
	}
	w.contended, w.fleetAt = false, s.serverNow()
	lctx, cancel := w.bounded(ctx)
	defer cancel()
	dir := s.presenceDir()
	out, err := s.client.ListObjectsV2(lctx, &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: &dir, MaxKeys: aws.Int32(MaxWorkers)})
	if err != nil {
		if ctx.Err() == nil {
			w.log.Debug("s3task: list the fleet", "err", err)
		}
		return
	}
	s.observe(out.ResultMetadata)
	s.reached("poll/fleet")
	now := s.serverNow()
	fresh := 2*w.opts.PresenceInterval + w.opts.ClockMargin
	listed := map[string]bool{}
	for _, obj := range out.Contents {
		id, ok := s.presenceID(aws.ToString(obj.Key))
		if ok && now.Sub(aws.ToTime(obj.LastModified)) <= fresh {
			listed[id] = true
		}
	}
	for id, r := range w.rivals {
		if !listed[id] && now.Sub(r.seen) > fresh {
			s.reached("poll/fleet-forget")
			w.dropRival(id)
		}
	}
	for id := range listed {
		if w.heardOf(id) {
			r := w.rivals[id]
			r.seen = now
			w.rivals[id] = r
		}
	}
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
