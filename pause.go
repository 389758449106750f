package s3task

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/s3task/s3task/internal/s3x"
)

// Pausing a task type.
//
// The paused types are kept in two places. The paused object,
// <prefix>_paused, is their record: Pause and Resume change it with a
// compare-and-set and Paused reads it. The wake object's body carries a
// copy (see wake.go), which is how workers learn of a pause at no request
// more than the conditional GET of it they make every PollInterval anyway.
//
// Every writer of the wake object carries the copy it read over to what it
// writes, under the compare-and-set, so an announcement never drops a
// pause. Pause and Resume read the wake object first, then the paused
// object, then write the paused object and then the wake object, with a
// compare-and-set on the wake object as read first: if another Pause or
// Resume changed the paused object after this one read it, that one's
// write of the wake object comes after this one's read of it, so one of
// the two wake writes loses and reads again, and the copy never goes back
// to an older set. The one write of the wake object that reads nothing
// first, the fallback of a Pause or Resume that keeps losing (announcements
// never fall back), says the paused types are unknown ("paused ?"), as
// does the body of an earlier
// version; a worker that reads such a body reads the paused object (one GET,
// once per change of the wake object), and so does a writer before it
// writes a body of its own. A missing wake object means no type is paused:
// Pause and Resume always leave one behind.
//
// A worker claims a task only while what it knows of the paused types
// comes from a read of the wake object sent less than PollInterval ago (by
// its own clock); an idle worker reads it every PollInterval or sooner,
// and a worker that has not (its slots were busy, or it listed for
// another reason) reads it again before the claim, with one conditional
// GET. So once Pause has returned, no worker begins a claim of the type
// more than PollInterval later.

// MaxPausedTypes is the most task types that may be paused at once. The
// wake object, which every idle worker reads after each change, carries
// them.
const MaxPausedTypes = 32

// ErrTypePaused means the task's type is paused ([Store.Pause]):
// [Worker.RunTask] does not claim it until [Store.Resume].
var ErrTypePaused = errors.New("s3task: task type paused")

// pausedRecheck is how long a worker leaves the marker of a task whose
// type is paused before it reads the record again, unless it sees the type
// resumed first, which it does within PollInterval.
const pausedRecheck = 10 * time.Minute

// maxPausedSkipped is how many markers of paused types the poll loop
// remembers before it forgets those whose skip time has passed.
const maxPausedSkipped = 1024

// pausedMaxBody bounds what is read of the paused object.
const pausedMaxBody = 64 << 10

// pausedSet is the paused types a body names.
type pausedSet struct {
	known bool     // false: the body does not say (an earlier version's, the fallback's)
	types []string // sorted, no repeats
}

// parsePausedLine reads the paused line of a wake object's body.
func parsePausedLine(line string) (pausedSet, bool) {
	rest, ok := strings.CutPrefix(line, "paused ")
	switch {
	case !ok:
		return pausedSet{}, false
	case rest == "?":
		return pausedSet{}, true
	}
	var types []string
	if err := json.Unmarshal([]byte(rest), &types); err != nil {
		return pausedSet{}, false
	}
	return pausedSet{known: true, types: normTypes(types)}, true
}

// formatPausedLine writes the paused line of a wake object's body.
func formatPausedLine(p pausedSet) string {
	if !p.known {
		return "paused ?"
	}
	b, _ := json.Marshal(append([]string{}, p.types...)) // strings always encode; [] for none
	return "paused " + string(b)
}

// normTypes returns types sorted, without repeats; nil for none.
func normTypes(types []string) []string {
	if len(types) == 0 {
		return nil
	}
	out := slices.Clone(types)
	slices.Sort(out)
	return slices.Compact(out)
}

// withType returns types with typ added (pause) or removed.
func withType(types []string, typ string, pause bool) []string {
	out := slices.DeleteFunc(slices.Clone(types), func(t string) bool { return t == typ })
	if pause {
		out = normTypes(append(out, typ))
	}
	return out
}

// pausedDoc is the body of the paused object.
type pausedDoc struct {
	Version   int       `json:"version"`
	Types     []string  `json:"types"`
	Revision  string    `json:"revision"` // every body differs
	UpdatedAt time.Time `json:"updated_at"`
}

// pausedVersion is the version of pausedDoc this code writes and reads.
const pausedVersion = 1

// errPausedUnreadable is wrapped by the error for a paused object that
// does not decode, or is of a later version.
var errPausedUnreadable = errors.New("not a paused set this version can read")

func (s *Store) pausedKey() string { return s.opts.Prefix + "_paused" }

// readPaused reads the paused object: the types it names, sorted, and its
// ETag. A missing object names none and has the ETag "". Requests: one GET.
func (s *Store) readPaused(ctx context.Context) ([]string, string, error) {
	key := s.pausedKey()
	body, etag, found, err := s.readControl(ctx, key, pausedMaxBody)
	if err != nil || !found {
		return nil, "", err
	}
	var d pausedDoc
	if err := json.Unmarshal(body, &d); err != nil {
		return nil, "", fmt.Errorf("s3task: read %s: %w: %v", key, errPausedUnreadable, err)
	}
	if d.Version < 1 || d.Version > pausedVersion {
		return nil, "", fmt.Errorf("s3task: read %s: %w: version %d, this code knows %d", key, errPausedUnreadable, d.Version, pausedVersion)
	}
	return normTypes(d.Types), etag, nil
}

// putPaused writes the paused object with types over the one with ETag
// etag ("": create it). Requests: one PUT.
func (s *Store) putPaused(ctx context.Context, types []string, etag string) error {
	key := s.pausedKey()
	body, err := json.Marshal(pausedDoc{Version: pausedVersion, Types: append([]string{}, types...), Revision: s.revision(key), UpdatedAt: s.stamp()})
	if err != nil {
		return fmt.Errorf("s3task: encode %s: %w", key, err)
	}
	in := &s3.PutObjectInput{Bucket: &s.bucket, Key: &key, Body: bytes.NewReader(body),
		ContentLength: aws.Int64(int64(len(body))), ContentType: aws.String("application/json")}
	if etag == "" {
		in.IfNoneMatch = aws.String("*")
	} else {
		in.IfMatch = aws.String(etag)
	}
	if _, err := s.client.PutObject(ctx, in); err != nil {
		return fmt.Errorf("s3task: write %s: %w", key, err)
	}
	return nil
}

// checkPauseType refuses a task type Pause and Resume cannot take: over
// 128 bytes, not UTF-8, or outside StoreOptions.Types if that is set.
func (s *Store) checkPauseType(typ string) error {
	if len(typ) > maxTypeLen || !utf8.ValidString(typ) {
		return invalidArg("task type must be at most %d bytes of UTF-8, got %d bytes", maxTypeLen, len(typ))
	}
	return s.checkType(typ)
}

// Pause stops workers from claiming tasks of type taskType (the empty type
// is that of untyped tasks), until [Store.Resume]. Attempts already running
// go on as usual: their heartbeats, completion and failure are written as
// ever. Create, Submit, Retry and Schedule still take tasks of the type,
// which wait, queued, with their markers. A task of the type whose worker
// died is not taken over while the type is paused: it stays running, its
// lease run out, until the type is resumed (or is failed for good as ever
// if it has no attempt left). Pausing a paused type changes nothing.
//
// The promise: once Pause has returned, no worker begins a claim of a task
// of the type later than its WorkerOptions.PollInterval after (measured by
// the worker's own clock, which is taken to run at the rate of real time),
// be it a first attempt, a retry or a take-over, found by a listing, by an
// event ([Worker.Notify]) or named to [Worker.RunTask] (which returns
// [ErrTypePaused]). A claim begun before that moment may land after it, as
// late as its requests take (it is given up after LeaseDuration less
// ClockMargin), and its attempt then runs like any other. The pause is
// carried to workers in the wake object, which every worker reads with a
// conditional GET at least every PollInterval when idle, and again before
// a claim if its last read is older (a worker fed S3 event notifications
// that polls rarely thus sees a pause within its own, longer
// PollInterval); there is no option that turns the wake object off. Only
// workers of this version and later know of pauses: in a fleet being
// upgraded, workers of earlier versions go on claiming tasks of a paused
// type (and list the markers at every change of the wake object, which
// they cannot read any more); Stores of earlier versions may still write
// the wake object, and workers of this version then read the paused types
// from the paused object instead (a GET per change of the wake object).
// Leave the wake object (<prefix>_wake) in place: workers take a missing
// one to mean that nothing is paused, and the announcement that creates it
// again states the same, until the next Pause or Resume writes the paused
// types back (call Resume or Pause again after deleting it).
//
// A worker pays no request more per poll for pauses: each round of its
// poll loop reads the wake object with one conditional GET, as without
// them. The one difference: while a type it serves is paused, the round
// that lists for another reason than news (the safety net once a
// MaxPollInterval, a due time) reads it too, where it would skip it (one
// GET a minute for an idle worker at the defaults), so that a Resume is
// seen within a PollInterval. It reads the record of each waiting task of
// a paused type it serves once per 10 minutes, as it does for types it
// does not serve.
//
// Requests: a GET of the wake object and one of the paused object
// (<prefix>_paused), then, unless the type was paused already, a PUT of
// each; more when another Pause, Resume or announcement writes at the
// same time. At most [MaxPausedTypes] types may be paused at once.
//
// Errors: [ErrInvalidArgument] for a type over 128 bytes or not UTF-8, for
// a type outside StoreOptions.Types (with [ErrUnknownTaskType]), and when
// MaxPausedTypes types are paused already; [ErrConflict] if other writers
// kept changing the paused object; [ErrOutcomeUnknown]; S3 errors, and
// ctx's, otherwise. On every error but ErrOutcomeUnknown neither object was
// changed (or a concurrent Resume undid the change).
//
// A write whose answer is lost (a timeout, a 5xx, a dropped connection, or
// the 412 that the SDK's resend of it then meets), landed or not, is
// settled inside the call: it reads both objects again and decides from
// what they say, as after a lost compare-and-set (up to
// StoreOptions.ConflictRetries times for the paused object, with jittered
// backoff). Once a write of the call may have landed, a read that fails is
// tried again, with backoff, for up to 30 seconds (or until ctx ends); only
// if S3 cannot be read that long, or the wake object cannot be written at
// all, does the call return ErrOutcomeUnknown: the type may then be paused
// in the paused object while the workers have not been told: call Pause
// again (see [Store.Paused]). A settled doubt costs a GET of each object,
// and, when the write had not landed, that write once more.
func (s *Store) Pause(ctx context.Context, taskType string) error {
	_, err := s.call(ctx, &Call{Op: OpPause, Type: taskType})
	return err
}

// Resume lets workers claim tasks of type taskType again after
// [Store.Pause], and tells idle workers to list the markers, so that the
// waiting tasks start within a PollInterval, as after a Submit. Resuming a
// type that is not paused changes nothing. Requests, errors, what an
// error leaves and how a lost answer is settled: as Pause's (an error
// wrapping ErrOutcomeUnknown may leave the type resumed in the paused
// object while the workers have not been told: call Resume again), but a
// Resume cannot run into MaxPausedTypes.
func (s *Store) Resume(ctx context.Context, taskType string) error {
	_, err := s.call(ctx, &Call{Op: OpResume, Type: taskType})
	return err
}

// Paused returns the paused task types, sorted; none (nil) when no type is
// paused. It reads the paused object, the record Pause and Resume keep:
// after a Pause or Resume that returned an error it may name a change the
// workers have not been told of; the next successful Pause or Resume
// tells them. Requests: one GET.
//
// Errors: S3 errors and ctx's; an error for a paused object this version
// cannot read (damaged by hand, or written by a later version), which
// workers then take to name no type.
func (s *Store) Paused(ctx context.Context) ([]string, error) {
	c := &Call{Op: OpPaused}
	_, err := s.call(ctx, c)
	return result[[]string](c, err)
}

// paused is OpPaused once every middleware has passed it on.
func (s *Store) paused(ctx context.Context) ([]string, error) {
	types, _, err := s.readPaused(ctx)
	return types, err
}

// setPaused pauses (pause) or resumes typ: it records the change in the
// paused object, then writes the paused types to the wake object, unless
// both say so already. See the comment at the top of the file for the
// order of its reads and writes.
//
// Each round reads both objects and decides from what they say, so a write
// whose answer was lost, landed or not, is settled by the next round, as a
// write refused by its compare-and-set is; a round after such a write waits
// a moment first, with jitter. Once a write of the call may have landed, a
// read that fails for a passing reason is tried again (see persist), and an
// error the call then returns wraps ErrOutcomeUnknown: the paused object
// may name the change while the workers have not been told. Every other
// error leaves both objects as the call found them.
func (s *Store) setPaused(ctx context.Context, typ string, pause bool) error {
	if err := s.checkPauseType(typ); err != nil {
		return err // a middleware's change
	}
	var (
		recordFails, wakeFails, blindFails int
		recordErr, blindErr                error
		wrote                              bool    // a write of the call landed, or may have
		blind                              *string // the wake object's ETag as read before a blind write that may have landed
	)
	unknown := func(err error) error {
		if wrote {
			return fmt.Errorf("%w: pause or resume task type %q: %w", ErrOutcomeUnknown, typ, err)
		}
		return err
	}
	for round := 0; ; round++ {
		if round > 0 && !sleepCtx(ctx, s.backoff("pause/"+typ, round-1, 20*time.Millisecond, time.Second)) {
			return unknown(ctx.Err())
		}
		b, wetag, sent, types, petag, err := s.readPauses(ctx, wrote)
		if err != nil {
			return unknown(err)
		}
		if want := withType(types, typ, pause); !slices.Equal(want, types) {
			// The change is not made (or was undone by another Pause or
			// Resume since): no write of the call stands in either object.
			if len(want) > MaxPausedTypes {
				return invalidArg("%d task types are paused already, the most there may be (MaxPausedTypes)", len(types))
			}
			if recordFails > s.opts.ConflictRetries {
				if s3x.Lost(recordErr) {
					return fmt.Errorf("%w: %s kept changing", ErrConflict, s.pausedKey())
				}
				return recordErr
			}
			if err := s.putPaused(ctx, want, petag); err != nil {
				// Lost to another writer, or not answered: read again, and
				// decide from what is there (a write that landed unanswered
				// shows).
				recordFails, recordErr = recordFails+1, err
				wrote = wrote || !s3x.Lost(err)
				continue
			}
			wrote, types = true, want
		}
		if b.paused.known && slices.Equal(b.paused.types, types) ||
			blind != nil && !b.paused.known && wetag != *blind {
			// The workers read it there already; or a blind write (ours,
			// or another's) landed after the read before ours, which came
			// after the paused object said so, and sends each worker that
			// reads it to the paused object.
			return nil
		}
		if wakeFails >= wakeTries {
			if blindFails > 1 {
				return unknown(fmt.Errorf("s3task: write %s: %w", s.wakeKey(), blindErr))
			}
			blind = &wetag
			s.wakeLast.drop(false)
			etag, err := s.wakeFallback(ctx)
			if err != nil {
				// Its answer may be lost: read again to see.
				blindFails, blindErr, wrote = blindFails+1, err, true
				continue
			}
			if !pause {
				s.local.wake(etag, wakeNote{}, nil)
			}
			return nil
		}
		b.paused = pausedSet{known: true, types: types}
		if !pause {
			// Idle workers list for the tasks that waited.
			b.notes = keepNotes(append(b.notes, wakeNote{rev: s.revision(s.wakeKey()), key: "*"}))
		}
		etag, err := s.putWake(ctx, formatWakeBody(b), wetag)
		if err == nil {
			s.wakeLast.put(b, etag)
			seen := pauseSeen{types: types, etag: etag, read: sent}
			if pause {
				s.local.see(seen)
			} else {
				s.local.wake(etag, wakeNote{}, &seen)
			}
			return nil
		}
		// Lost to another writer, or not answered: read again.
		wakeFails, wrote = wakeFails+1, wrote || !s3x.Lost(err)
	}
}

// readPauses reads the wake object, then the paused object: the order
// setPaused needs. Once a write of the call may have landed (settling), a
// read that fails for a passing reason is tried again (see persist).
func (s *Store) readPauses(ctx context.Context, settling bool) (b wakeBody, wetag string, sent time.Time, types []string, petag string, err error) {
	read := func(ctx context.Context) (err error) {
		if b, wetag, sent, err = s.readWake(ctx); err != nil {
			return err
		}
		types, petag, err = s.readPaused(ctx)
		return err
	}
	if !settling {
		err = read(ctx)
		return b, wetag, sent, types, petag, err
	}
	final := func(err error) bool { return errors.Is(err, errPausedUnreadable) }
	err = s.persist(ctx, "pause", final, read)
	return b, wetag, sent, types, petag, err
}

// pauseSeen is the paused types as one read of the wake object found them.
type pauseSeen struct {
	types []string
	etag  string    // the wake object's ETag; "" if it was missing
	read  time.Time // local clock: when the read was sent
}

// pauseView is what a worker knows of the paused types: what its latest
// read of the wake object found (or that of a write of this process, whose
// compare-and-set proves it read the object as it was). The poll loop,
// RunTask and the Store's writes update it.
type pauseView struct {
	mu   sync.Mutex
	have bool
	seen pauseSeen
	gen  uint64 // counts the changes of seen.types
}

// see records a sighting, unless the view holds a later one: a read sent
// later found the object as it was at some moment after this one's.
func (v *pauseView) see(p pauseSeen) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.have && p.read.Before(v.seen.read) {
		return
	}
	if !v.have || !slices.Equal(v.seen.types, p.types) {
		v.gen++
	}
	v.have, v.seen = true, p
}

// unchanged records that a read sent at read found the wake object still
// at etag: what the view holds of it holds then too.
func (v *pauseView) unchanged(etag string, read time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.have && v.seen.etag == etag && read.After(v.seen.read) {
		v.seen.read = read
	}
}

// get returns the latest sighting, whether there is one, and the count of
// changes.
func (v *pauseView) get() (pauseSeen, bool, uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.seen, v.have, v.gen
}

// workerPause is a worker's side of pausing.
type workerPause struct {
	view    pauseView
	gen     uint64            // poll loop only: the view's gen the loop last looked at
	last    []string          // poll loop only: the paused types then
	skipped map[string]string // poll loop only: markers left alone for a paused type, with the type
}

// checkWake is Store.checkWake that also notes what the wake object says
// of the paused types: the poll loop's and the claims' one read of it.
func (w *Worker) checkWake(ctx context.Context, etag string) (string, []byte, bool, error) {
	sent := time.Now()
	now, body, changed, err := w.store.checkWake(ctx, etag)
	if err == nil {
		w.notePaused(ctx, sent, now, body)
	}
	return now, body, changed, err
}

// notePaused updates the worker's view of the paused types from a read of
// the wake object sent at sent, which found it at etag ("": missing) with
// body (nil: unchanged since the ETag asked for). A body that does not
// name the paused types sends the worker to the paused object; one of
// those it cannot read names none.
func (w *Worker) notePaused(ctx context.Context, sent time.Time, etag string, body []byte) {
	v := &w.pause.view
	switch {
	case body == nil && etag != "":
		v.unchanged(etag, sent)
	case body == nil:
		// No wake object, which Pause and Resume always leave: nothing is
		// paused.
		if seen, have, _ := v.get(); have && seen.etag == "" {
			v.unchanged("", sent)
			return
		}
		v.see(pauseSeen{etag: "", read: sent})
	default:
		set := pausedSet{}
		if b, ok := parseWakeBody(body); ok {
			set = b.paused
		}
		if !set.known {
			w.store.reached("pause/read-record")
			types, _, err := w.store.readPaused(ctx)
			switch {
			case errors.Is(err, errPausedUnreadable):
				w.log.Warn("s3task: cannot read the paused task types; taking none to be paused", "err", err)
			case err != nil:
				if ctx.Err() == nil {
					w.log.Warn("s3task: read the paused task types", "err", err)
				}
				return
			}
			set = pausedSet{known: true, types: types}
		}
		v.see(pauseSeen{types: set.types, etag: etag, read: sent})
	}
}

// pausedNow reports whether tasks of type typ are paused, by a read of the
// wake object sent less than PollInterval ago: the view's, or, if that is
// older (or afresh is set), a new one (one conditional GET). A read
// answered so slowly that it was sent a PollInterval ago by the time it
// came back cannot be trusted either, and is made once more at once rather
// than hold the claim back for a poll. It fails if a read fails, or if
// both come too late.
func (w *Worker) pausedNow(ctx context.Context, typ string, afresh bool) (bool, error) {
	seen, have, _ := w.pause.view.get()
	for try := 0; afresh || !have || time.Since(seen.read) >= w.opts.PollInterval; try++ {
		if try == 2 {
			return false, fmt.Errorf("s3task: the paused task types could not be read within PollInterval (%s), twice", w.opts.PollInterval)
		}
		w.store.reached("pause/refresh")
		ask := ""
		if have {
			ask = seen.etag
		}
		if _, _, _, err := w.checkWake(ctx, ask); err != nil {
			return false, err
		}
		seen, have, _ = w.pause.view.get()
		afresh = false
	}
	return slices.Contains(seen.types, typ), nil
}

// holdPaused is the poll loop's last look before it claims task t, found
// at marker key: it reports whether to hold the claim back, because the
// task's type is paused (then until when to leave the marker alone) or
// because the paused types could not be read (failed: a passing reason).
func (w *Worker) holdPaused(ctx context.Context, key string, t *record) (until time.Time, hold, failed bool) {
	paused, err := w.pausedNow(ctx, t.Type, false)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			w.log.Warn("s3task: claim held back", "task_id", t.ID, "err", err)
		}
		return time.Time{}, true, true
	case !paused:
		return time.Time{}, false, false
	}
	w.store.reached("poll/paused")
	if w.pause.skipped == nil {
		w.pause.skipped = map[string]string{}
	}
	if len(w.pause.skipped) >= maxPausedSkipped {
		for k := range w.pause.skipped {
			if _, ok := w.skip[k]; !ok {
				delete(w.pause.skipped, k)
			}
		}
	}
	w.pause.skipped[key] = t.Type
	return w.store.serverNow().Add(pausedRecheck), true, false
}

// beforeList is the poll loop's look at the paused types before it lists
// (list) or decides whether to. A listing made for another reason than
// news (a due time, the safety net, a local Submit) comes in a round
// without a check of the wake object (checked is false); while a type the
// worker serves is paused, or if its last read is a PollInterval old, it
// reads the wake object first (one conditional GET, the one the round
// skipped), lest the listing leave alone the markers of a type resumed
// since: so while a type it serves is paused every round of the loop, a
// PollInterval at most apart, reads it, and a Resume is seen within a
// PollInterval. It reports whether to list: list, or a type the worker
// serves was resumed.
func (w *Worker) beforeList(ctx context.Context, list, checked bool) bool {
	seen, have, _ := w.pause.view.get()
	stale := !have || time.Since(seen.read) >= w.opts.PollInterval ||
		!checked && slices.ContainsFunc(seen.types, func(t string) bool { return serves(w.h, t) })
	if list && stale {
		ask := ""
		if have {
			ask = seen.etag
		}
		bctx, cancel := w.bounded(ctx)
		_, _, _, _ = w.checkWake(bctx, ask)
		cancel()
	}
	return w.resumed() || list
}

// resumed is the poll loop's look at its view of the paused types: when
// a type it serves is no longer paused, it forgets that it left that
// type's markers alone, and reports that it should list.
func (w *Worker) resumed() bool {
	seen, _, gen := w.pause.view.get()
	if gen == w.pause.gen {
		return false
	}
	was := w.pause.last
	w.pause.gen, w.pause.last = gen, seen.types
	list := false
	for _, typ := range was {
		if !slices.Contains(seen.types, typ) && serves(w.h, typ) {
			list = true
		}
	}
	for key, typ := range w.pause.skipped {
		if !slices.Contains(seen.types, typ) {
			delete(w.pause.skipped, key)
			delete(w.skip, key)
			if n, ok := w.marked[key]; ok {
				n.at = time.Time{}
				w.marked[key] = n
			}
			list = true
		}
	}
	return list
}

// refusePaused is RunTask's check: an error wrapping ErrTypePaused if
// task t's type is paused. A refusal is decided on a read of the wake
// object made for it: the type may have been resumed since the worker's
// last read.
func (w *Worker) refusePaused(ctx context.Context, t *record) error {
	paused, err := w.pausedNow(ctx, t.Type, false)
	if err == nil && paused {
		paused, err = w.pausedNow(ctx, t.Type, true)
	}
	switch {
	case err != nil:
		return err
	case paused:
		return fmt.Errorf("%w: %q (task %s); see Store.Resume", ErrTypePaused, t.Type, t.ID)
	}
	return nil
}
