package s3task

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/s3task/s3task/internal/s3x"
)

// The wake object (<prefix>_wake) tells idle workers about new work, so
// that they need not LIST to find out: each checks it with a conditional
// GET every PollInterval, which costs a twelfth of a LIST. Its body names
// the paused task types (see pause.go), then what was announced last, each
// announcement with a revision of its own:
//
//	s3task-wake 3
//	paused ["pdf"]
//	4f0c9a1d2b3e4f50 batch-tasks/active/20261130T144702.123Z_7ZZZX5Q2M4Y7D6N2J3K8H9G0FA
//	9a8b7c6d5e4f3a2b *
//
// A line names the marker of a task that became due or will be sooner than
// it was (Submit, Retry, Schedule, a release on shutdown), or "*" for news
// without one (markers restored by Reconcile, a Resume). A worker that sees
// the object change visits each marker due now among the announcements it
// has not seen, as if an event had named it: it reads the task's record
// and claims it, with no LIST. A worker that comes after another took the
// task finds the record running and leaves it. So a submit costs an idle
// fleet a record GET per idle worker at most, and no LIST; a worker lists
// for news without a marker, or when it may have missed announcements.
//
// A Store keeps a copy of the wake object as it wrote it last, and writes
// its next announcement over that copy, with If-Match on its ETag, without
// reading the object first: where one process announces, that saves the
// GET of every announcement. When another process has written since, the
// write is refused, and the Store reads the object and writes again (and
// reads first for a minute: see wakeCache).
//
// The paused line is "paused" and a JSON array of the paused types, or
// "paused ?" when the writer did not know them (the fallback of a Pause or
// Resume that keeps losing, which writes blind; see setPaused). Every
// other writer carries the line it read over to what it writes, under the
// compare-and-set, so that no announcement drops a pause and no pause
// drops an announcement. The body of the previous version ("s3task-wake
// 2", no paused line) is read too: its announcements count, and its paused
// types are unknown.
//
// Announcements never write blind: under contention, a Store's calls
// gather into one write at a time (wakeGroup), and a write that loses its
// compare-and-set to another process's waits, with jitter, and tries
// again (rewriteWake), for up to wakeWithin. So no announcement is lost to
// another writer's; one that still cannot be written in that time (S3
// failing or slow) is logged, and idle workers find its task at their next
// listing, within MaxPollInterval. The format is the previous version's:
// a write may add several lines at once.

// wakeHeader starts the body of the wake object; wakeHeaderV2 the body
// earlier versions write, which has no paused line.
const (
	wakeHeader   = "s3task-wake 3"
	wakeHeaderV2 = "s3task-wake 2"
)

// wakeMaxBody bounds what is read of the wake object: 16 announcements of
// about a hundred bytes and MaxPausedTypes types of up to 128 bytes, each
// byte at most 6 in JSON, fit in it with room to spare.
const wakeMaxBody = 64 << 10

// wakeKeep is how many announcements the wake object keeps. A worker that
// finds none it has seen may have missed some, and lists.
const wakeKeep = 16

// wakeTries bounds the compare-and-set rounds on the wake object of a
// Pause or Resume before it falls back to the write that does not read
// what it replaces (see setPaused). Announcements do not fall back: see
// rewriteWake.
const wakeTries = 3

// wakeBackoffMost bounds the wait of an announcement between two rounds of
// its compare-and-set.
const wakeBackoffMost = 500 * time.Millisecond

// wakeNote is one announcement.
type wakeNote struct {
	rev string
	key string // a marker key, or "*"
}

// parseWake reads a wake object's body; ok is false for a body this code
// does not know (written by an earlier version, say).
func parseWake(body []byte) (notes []wakeNote, ok bool) {
	b, ok := parseWakeBody(body)
	return b.notes, ok
}

// wakeBody is what a wake object's body says.
type wakeBody struct {
	notes  []wakeNote
	paused pausedSet
}

// parseWakeBody reads a wake object's body: this version's, or the
// previous version's, whose paused set is unknown. ok is false for any
// other body, which says nothing.
func parseWakeBody(body []byte) (b wakeBody, ok bool) {
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, wakeMaxBody)
	if !sc.Scan() {
		return wakeBody{}, false
	}
	switch sc.Text() {
	case wakeHeader:
		if !sc.Scan() {
			return wakeBody{}, false
		}
		set, ok := parsePausedLine(sc.Text())
		if !ok {
			return wakeBody{}, false
		}
		b.paused = set
	case wakeHeaderV2:
	default:
		return wakeBody{}, false
	}
	for sc.Scan() {
		rev, key, found := strings.Cut(sc.Text(), " ")
		if !found || rev == "" || key == "" {
			return wakeBody{}, false
		}
		b.notes = append(b.notes, wakeNote{rev: rev, key: key})
	}
	if sc.Err() != nil {
		return wakeBody{}, false
	}
	return b, true
}

// formatWake writes a body with notes whose paused types are unknown.
func formatWake(notes []wakeNote) []byte { return formatWakeBody(wakeBody{notes: notes}) }

// formatWakeBody writes b as a wake object's body.
func formatWakeBody(b wakeBody) []byte {
	var buf bytes.Buffer
	buf.WriteString(wakeHeader + "\n")
	buf.WriteString(formatPausedLine(b.paused) + "\n")
	for _, n := range b.notes {
		fmt.Fprintf(&buf, "%s %s\n", n.rev, n.key)
	}
	return buf.Bytes()
}

// wakeWithin bounds the requests of one write of the wake object for
// announcements, past the end of the context of the call that made the
// change: its rounds of compare-and-set, and the waits between them.
const wakeWithin = 5 * time.Second

// wake announces the marker key (or "" for news without one) to idle
// workers, and kicks the workers running in this process on this Store at
// once. It adds the announcement to the wake object with a compare-and-set,
// keeping the paused types the object names (see rewriteWake), together
// with those of the other calls of this Store that announce meanwhile (see
// wakeGroup). It is only a hint: a failure is logged, and workers still
// list the markers every MaxPollInterval. Requests: a GET and a PUT, shared
// with the announcements written with it (and a GET of the paused object
// when the wake object's body does not name the paused types: one an
// earlier version wrote, or a Pause's fallback); a round more, after a
// wait, each time another writer's write lands between the two.
//
// The change it announces has landed, so the announcement does not end
// with ctx: a call whose caller's deadline ran out in a best-effort step
// before it (deleting an old marker) still announces its change. Its write
// gets wakeWithin of its own instead, once the write of this Store's
// earlier announcements, if one is under way, is done.
func (s *Store) wake(ctx context.Context, key string) {
	note := wakeNote{rev: s.revision(s.wakeKey()), key: key}
	if key == "" {
		note.key = "*"
	}
	b, lead := s.wakes.join(note)
	if !lead {
		s.reached("wake/batched")
		<-b.done
		return
	}
	<-b.turn
	s.writeWakes(context.WithoutCancel(ctx), b)
}

// writeWakes writes the announcements of batch b, whose turn it is, kicks
// the local workers for each of them, in order, releases the calls that
// wait for it, and gives the turn to the batch that gathered meanwhile.
// The kicks are the writer's, not each caller's: the callers go on at
// once, in no order.
func (s *Store) writeWakes(ctx context.Context, b *wakeBatch) {
	ctx, cancel := context.WithTimeout(ctx, wakeWithin)
	defer cancel()
	notes := b.notes // no call joins b once its turn has come
	etag, seen, err := s.rewriteWake(ctx, func(body *wakeBody) {
		body.notes = keepNotes(append(body.notes, notes...))
	})
	if err != nil {
		s.log.WarnContext(ctx, "s3task: write wake object; idle workers find the new work at their next listing (MaxPollInterval)",
			"err", err, "announcements", len(notes))
	}
	for _, n := range notes {
		s.local.wake(etag, n, seen)
	}
	s.wakes.finish(b)
}

// wakeGroup makes the announcements of one Store's calls one write at a
// time (a group commit): while a write of the wake object is under way,
// the calls that announce gather in the next batch, whose first call then
// writes them all with one compare-and-set. So the calls of one process
// never race one another for the object, and a burst of Submits from one
// process costs a GET and a PUT per write rather than per call.
type wakeGroup struct {
	mu      sync.Mutex
	writing bool       // a batch has its turn: it is being written
	next    *wakeBatch // the batch gathering for the next turn; nil if none
}

// wakeBatch is the announcements that one write of the wake object makes.
type wakeBatch struct {
	notes []wakeNote    // under wakeGroup.mu until turn is closed
	turn  chan struct{} // closed when the batch may be written
	done  chan struct{} // closed when it was written (or the write gave up) and the local workers kicked
}

func newWakeBatch(note wakeNote) *wakeBatch {
	return &wakeBatch{notes: []wakeNote{note}, turn: make(chan struct{}), done: make(chan struct{})}
}

// join adds note to the batch to be written next and returns it; lead
// says whether this call writes it, once its turn has come.
func (g *wakeGroup) join(note wakeNote) (b *wakeBatch, lead bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case !g.writing:
		g.writing = true
		b = newWakeBatch(note)
		close(b.turn)
		return b, true
	case g.next == nil:
		g.next = newWakeBatch(note)
		return g.next, true
	}
	g.next.notes = append(g.next.notes, note)
	return g.next, false
}

// finish ends the turn of batch b, written (or given up): it releases the
// calls that wait for it, and gives the turn to the next batch, if one
// gathered.
func (g *wakeGroup) finish(b *wakeBatch) {
	close(b.done)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.next == nil {
		g.writing = false
		return
	}
	close(g.next.turn)
	g.next = nil
}

// wakeDistrust is how long a Store reads the wake object before it writes
// it, after a write over the copy it kept was refused: another process
// announces too, and would most likely have changed it again.
const wakeDistrust = time.Minute

// wakeCache is the wake object as this Store last wrote it, which the
// next write of its announcements changes and writes over, with If-Match
// on its ETag, instead of reading it first: where one process announces
// (an API's Submits), no other writer changes it in between, and an
// announcement costs one PUT, not a GET and a PUT. A copy another writer
// has changed since costs a refused PUT, and the write then reads the
// object as it would have; and for wakeDistrust after that, or after any
// write of its that lost to another writer's, the Store reads first.
// The compare-and-set is the same either way: nothing is written over
// what this Store has not seen.
type wakeCache struct {
	mu    sync.Mutex
	body  wakeBody
	etag  string    // "": no copy
	until time.Time // local clock: no copy is used before then
}

// get returns a copy of the body and its ETag, if there is one to use.
func (c *wakeCache) get() (wakeBody, string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.etag == "" || time.Now().Before(c.until) {
		return wakeBody{}, "", false
	}
	b := wakeBody{notes: slices.Clone(c.body.notes), paused: pausedSet{known: c.body.paused.known, types: slices.Clone(c.body.paused.types)}}
	return b, c.etag, true
}

// put keeps b, just written with the ETag etag.
func (c *wakeCache) put(b wakeBody, etag string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.body, c.etag = b, etag
}

// drop forgets the copy: a write of unknown outcome, or one that lost
// to another writer's, or was refused over the copy (stale is true),
// after which copies are not used for wakeDistrust.
func (c *wakeCache) drop(stale bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.body, c.etag = wakeBody{}, ""
	if stale {
		c.until = time.Now().Add(wakeDistrust)
	}
}

// keepNotes returns the last wakeKeep of notes.
func keepNotes(notes []wakeNote) []wakeNote { return notes[max(len(notes)-wakeKeep, 0):] }

// errWakeLost is wrapped by the error of an announcement whose every
// compare-and-set on the wake object lost, until wakeWithin ran out.
var errWakeLost = errors.New("other writers kept changing it")

// rewriteWake changes the wake object with a compare-and-set: it reads it
// (or takes the copy this Store kept of what it wrote last: see
// wakeCache), lets edit change the body, and writes it over the one it
// read, with the paused types it read, or, when the body did not name
// them, those of the paused object, read after it. A write that loses to another writer's
// waits a moment, with jitter, so that the writers drift apart, and tries
// again, until ctx ends; it never writes over what it has not read, so it
// drops neither another writer's announcements nor the paused types. It
// returns the object's new ETag and the paused types the new body names,
// for the workers of this process; an error if a request failed, or if
// every round lost until ctx ended.
//
// The wait after a lost round is drawn from up to twice the time the
// round took, doubled at each loss (at most wakeBackoffMost): a writer
// that lost to another expects more, and the round's time is what one
// write of the object takes here, so that the waits spread the writers
// over as many writes' time as there are writers.
func (s *Store) rewriteWake(ctx context.Context, edit func(b *wakeBody)) (string, *pauseSeen, error) {
	// The object as this Store last wrote it, unless another writer
	// changed it since: then the write over the copy is refused, and the
	// Store reads it as it would have.
	b, etag, copied := s.wakeLast.get()
	for lost := 0; ; {
		sent := time.Now()
		if !copied {
			var err error
			if b, etag, sent, err = s.readWake(ctx); err != nil {
				return "", nil, err
			}
			if !b.paused.known {
				// Written by an earlier version, or by a Pause's fallback:
				// the paused object says, read after the wake object, so
				// that a Pause under way either shows here or changes the
				// wake object and makes this write lose.
				if types, _, err := s.readPaused(ctx); err == nil {
					b.paused = pausedSet{known: true, types: types}
				}
			}
		}
		edit(&b)
		newETag, err := s.putWake(ctx, formatWakeBody(b), etag)
		if err == nil {
			var seen *pauseSeen
			if b.paused.known {
				seen = &pauseSeen{types: b.paused.types, etag: newETag, read: sent}
				s.wakeLast.put(b, newETag)
			}
			return newETag, seen, nil
		}
		if !s3x.Lost(err) {
			s.wakeLast.drop(false)
			return "", nil, fmt.Errorf("s3task: write %s: %w", s.wakeKey(), err)
		}
		if copied {
			// Another process wrote since this Store did: read the object
			// now, with no wait (no writer raced this one; the copy was
			// old), and read it first for a while.
			s.reached("wake/stale-copy")
			s.wakeLast.drop(true)
			copied = false
			continue
		}
		s.reached("wake/lost")
		s.wakeLast.drop(true) // others write it now: no copy will do for a while
		window := min(max(time.Since(sent), time.Millisecond)<<min(lost+2, 16), wakeBackoffMost)
		lost++
		if !sleepCtx(ctx, s.jitter("wake", window)) {
			return "", nil, fmt.Errorf("s3task: write %s: %w (%d rounds)", s.wakeKey(), errWakeLost, lost)
		}
	}
}

// wakeFallback writes, whatever is there, a wake object that tells every
// worker to list and that the paused types are unknown, so that workers
// read them from the paused object: a write that does not read what it
// replaces must not state them. Only a Pause or Resume that keeps losing
// its compare-and-set writes it (see setPaused); announcements never do.
// It returns the new ETag.
func (s *Store) wakeFallback(ctx context.Context) (string, error) {
	s.reached("wake/fallback")
	body := formatWakeBody(wakeBody{notes: []wakeNote{{rev: s.revision(s.wakeKey()), key: "*"}}})
	return s.putWake(ctx, body, "-")
}

// readWake reads the wake object's body and ETag, and returns when the
// read was sent (local clock). A missing object has no announcements, no
// paused type and the ETag "": Pause and Resume always leave an object
// behind. An unreadable body has no announcements and unknown paused
// types.
func (s *Store) readWake(ctx context.Context) (wakeBody, string, time.Time, error) {
	key := s.wakeKey()
	sent := time.Now()
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &key})
	switch {
	case s3x.NotFound(err):
		return wakeBody{paused: pausedSet{known: true}}, "", sent, nil
	case err != nil:
		return wakeBody{}, "", sent, fmt.Errorf("s3task: read %s: %w", key, err)
	}
	defer out.Body.Close()
	s.observe(out.ResultMetadata)
	body, err := io.ReadAll(io.LimitReader(out.Body, wakeMaxBody))
	if err != nil {
		return wakeBody{}, "", sent, fmt.Errorf("s3task: read %s: %w", key, err)
	}
	b, _ := parseWakeBody(body)
	return b, aws.ToString(out.ETag), sent, nil
}

// putWake writes the wake object over the one with ETag etag ("": create
// it; "-": whatever is there) and returns its new ETag.
func (s *Store) putWake(ctx context.Context, body []byte, etag string) (string, error) {
	key := s.wakeKey()
	in := &s3.PutObjectInput{Bucket: &s.bucket, Key: &key, Body: bytes.NewReader(body),
		ContentLength: aws.Int64(int64(len(body))), ContentType: aws.String("text/plain")}
	switch etag {
	case "":
		in.IfNoneMatch = aws.String("*")
	case "-":
	default:
		in.IfMatch = aws.String(etag)
	}
	out, err := s.client.PutObject(ctx, in)
	if err != nil {
		return "", err
	}
	return aws.ToString(out.ETag), nil
}

// checkWake reports whether the wake object's ETag differs from etag, and
// returns its current ETag and, when it changed, its body. A missing object
// has the ETag "". It costs one GET, with If-None-Match so an unchanged
// object sends no body.
func (s *Store) checkWake(ctx context.Context, etag string) (string, []byte, bool, error) {
	key := s.wakeKey()
	in := &s3.GetObjectInput{Bucket: &s.bucket, Key: &key}
	if etag != "" {
		in.IfNoneMatch = aws.String(etag)
	}
	out, err := s.client.GetObject(ctx, in)
	switch {
	case err == nil:
		defer out.Body.Close()
		s.observe(out.ResultMetadata)
		body, _ := io.ReadAll(io.LimitReader(out.Body, wakeMaxBody))
		now := aws.ToString(out.ETag)
		return now, body, now != etag, nil
	case s3x.NotModified(err):
		s.observeErr(err) // an idle worker's only sight of the server's clock
		return etag, nil, false, nil
	case s3x.NotFound(err):
		return "", nil, etag != "", nil
	}
	return etag, nil, false, fmt.Errorf("s3task: check %s: %w", key, err)
}

// wakeNews judges a changed wake object's body: it reports whether the
// worker should list, and when a marker announced for later falls due. It
// remembers the announcements seen, so the next change shows only the new
// ones, and forgets that it left a newly announced marker alone for a
// while. It lists for a body it cannot read, for news without a marker,
// and when it may have missed announcements (none of those kept was seen
// before). A new marker due now it visits as one an event named, with no
// LIST: the change that wrote it has landed (its writer announces after
// the record), and an idle worker's last listing found nothing else due,
// so the announced tasks, in their markers' order, are the oldest work it
// knows of. A worker told after another took the task reads its record
// and finds it running; that read is the price of the news, as a HEAD of
// the marker was. A marker due later it leaves for the poll loop to list
// at its time.
func (w *Worker) wakeNews(body []byte) (list bool, due time.Time) {
	notes, ok := parseWake(body)
	prev := w.wakeSeen
	w.wakeSeen = make(map[string]bool, len(notes))
	for _, n := range notes {
		w.wakeSeen[n.rev] = true
		if !prev[n.rev] {
			// The change that wrote this marker has landed (its writer
			// announces it after the record): a visit that found the
			// record behind it, and left the marker alone for a while,
			// must not hide it from the listing this news brings.
			w.announced(n.key)
		}
	}
	if !ok || len(notes) == 0 || prev == nil {
		return true, due
	}
	var fresh []wakeNote
	for _, n := range notes {
		if !prev[n.rev] {
			fresh = append(fresh, n)
		}
	}
	if len(fresh) == len(notes) && len(notes) >= wakeKeep {
		return true, due // some may have scrolled out unseen
	}
	return w.told(fresh, &due), due
}

// told takes announcements the worker has not seen (poll loop only): a
// marker due now (within ClockMargin, as an event's) it visits as one an
// event named, a marker due later moves *due, the time the loop lists at,
// to its time. It reports whether
// the worker should list instead: news without a marker, or more markers
// to visit than it keeps.
func (w *Worker) told(notes []wakeNote, due *time.Time) (list bool) {
	s := w.store
	now := s.serverNow()
	var visit []marker
	for _, n := range notes {
		if w.wakeSeen != nil {
			w.wakeSeen[n.rev] = true // a local kick's: the check that reads it takes it as seen
		}
		w.announced(n.key)
		m, ok := s.parseMarker(n.key)
		switch {
		case n.key == "*" || !ok:
			return true
		case m.due.After(w.soon(now)):
			// Scheduled for later: the marker's name says when, and the
			// poll loop lists then, not now.
			*due = sooner(*due, m.due.Add(s.dueLead())) // a start is judged by serverEarliest
			continue
		}
		// Due now, or within ClockMargin (see soon): the writer's reading
		// of the server's clock may lead this worker's, and the record
		// decides. A start truly ahead the visit finds so, and the worker
		// comes back to the marker at that time, with no LIST.
		visit = append(visit, m)
	}
	if len(w.marked)+len(visit) > maxNoted {
		return true
	}
	for _, m := range visit {
		s.reached("wake/visit")
		// Written after the record it stands for, as far as this worker
		// can tell: a visit that finds it of a phase that is over leaves
		// it to its writer, as for an event's.
		m.written, m.event = now, true
		w.marked[m.key] = noted{m: m, at: now}
	}
	return false
}

// localWorkers are the workers running in this process on a Store: a Submit
// or Retry through the same Store starts them at once, without waiting for
// their next look at the wake object.
type localWorkers struct {
	mu      sync.Mutex
	workers map[*Worker]struct{}
}

func (l *localWorkers) add(w *Worker) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.workers == nil {
		l.workers = map[*Worker]struct{}{}
	}
	l.workers[w] = struct{}{}
}

func (l *localWorkers) remove(w *Worker) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.workers, w)
}

// wake kicks every local worker; etag is the wake object's new ETag, if
// known, so that their next check of it does not make them look at it
// again, note the announcement, and seen, if not nil, the paused types the
// new body names.
func (l *localWorkers) wake(etag string, note wakeNote, seen *pauseSeen) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for w := range l.workers {
		if seen != nil {
			w.pause.view.see(*seen)
		}
		w.kick(etag, note)
	}
}

// see tells every local worker the paused types a body this Store wrote
// names, without waking them.
func (l *localWorkers) see(seen pauseSeen) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for w := range l.workers {
		w.pause.view.see(seen)
	}
}
