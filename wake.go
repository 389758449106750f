package s3task

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
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
// what was announced last, each announcement with a revision of its own:
//
//	s3task-wake 2
//	4f0c9a1d2b3e4f50 batch-tasks/active/20261130T144702.123Z_7ZZZX5Q2M4Y7D6N2J3K8H9G0FA
//	9a8b7c6d5e4f3a2b *
//
// A line names the marker of a task that became due or will be sooner than
// it was (Submit, Retry, Schedule, a release on shutdown), or "*" for news
// without one (markers restored by Reconcile). A worker that sees the object change looks at the
// announcements it has not seen: a marker that is gone was taken already,
// and when every announced marker is gone there is nothing to list for.
// So a submit costs the fleet one LIST, by the first worker to notice,
// plus a HEAD per other idle worker, instead of a LIST per idle worker.

// wakeHeader starts the body of the wake object.
const wakeHeader = "s3task-wake 2"

// wakeKeep is how many announcements the wake object keeps. A worker that
// finds none it has seen may have missed some, and lists.
const wakeKeep = 16

// wakeTries bounds the compare-and-set rounds of an announcement before it
// falls back to writing one that tells every worker to list.
const wakeTries = 3

// wakeNote is one announcement.
type wakeNote struct {
	rev string
	key string // a marker key, or "*"
}

// parseWake reads a wake object's body; ok is false for a body this code
// does not know (written by an earlier version, say).
func parseWake(body []byte) (notes []wakeNote, ok bool) {
	sc := bufio.NewScanner(bytes.NewReader(body))
	if !sc.Scan() || sc.Text() != wakeHeader {
		return nil, false
	}
	for sc.Scan() {
		rev, key, found := strings.Cut(sc.Text(), " ")
		if !found || rev == "" || key == "" {
			return nil, false
		}
		notes = append(notes, wakeNote{rev: rev, key: key})
	}
	return notes, sc.Err() == nil
}

func formatWake(notes []wakeNote) []byte {
	var b bytes.Buffer
	b.WriteString(wakeHeader + "\n")
	for _, n := range notes {
		fmt.Fprintf(&b, "%s %s\n", n.rev, n.key)
	}
	return b.Bytes()
}

// wakeWithin bounds an announcement's requests, past the end of the
// context of the call that made the change.
const wakeWithin = 2 * time.Second

// wake announces the marker key (or "" for news without one) to idle
// workers, and kicks the workers running in this process on this Store at
// once. It adds the announcement to the wake object with a compare-and-set;
// if that keeps losing, it writes an object that tells every worker to
// list. It is only a hint: a failure is logged, and workers still list the
// markers every MaxPollInterval. Requests: a GET and a PUT.
//
// The change it announces has landed, so the announcement does not end
// with ctx: a call whose caller's deadline ran out in a best-effort step
// before it (deleting an old marker) still announces its change. It gets
// wakeWithin of its own instead.
func (s *Store) wake(ctx context.Context, key string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wakeWithin)
	defer cancel()
	note := wakeNote{rev: s.revision(s.wakeKey()), key: key}
	if key == "" {
		note.key = "*"
	}
	for try := 0; try < wakeTries; try++ {
		notes, etag, err := s.readWake(ctx)
		if err != nil {
			break
		}
		notes = append(notes, note)
		notes = notes[max(len(notes)-wakeKeep, 0):]
		newETag, err := s.putWake(ctx, formatWake(notes), etag)
		if err == nil {
			s.local.wake(newETag, key)
			return
		}
		if !s3x.Lost(err) {
			break
		}
	}
	s.reached("wake/fallback")
	newETag, err := s.putWake(ctx, formatWake([]wakeNote{{rev: note.rev, key: "*"}}), "-")
	if err != nil {
		s.log.WarnContext(ctx, "s3task: write wake object", "err", err)
	}
	s.local.wake(newETag, key)
}

// readWake reads the wake object's announcements and ETag; a missing
// object has none and the ETag "", an unreadable body none.
func (s *Store) readWake(ctx context.Context) ([]wakeNote, string, error) {
	key := s.wakeKey()
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &key})
	switch {
	case s3x.NotFound(err):
		return nil, "", nil
	case err != nil:
		return nil, "", fmt.Errorf("s3task: read %s: %w", key, err)
	}
	defer out.Body.Close()
	s.observe(out.ResultMetadata)
	body, err := io.ReadAll(io.LimitReader(out.Body, 16<<10))
	if err != nil {
		return nil, "", fmt.Errorf("s3task: read %s: %w", key, err)
	}
	notes, _ := parseWake(body)
	return notes, aws.ToString(out.ETag), nil
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
		body, _ := io.ReadAll(io.LimitReader(out.Body, 16<<10))
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

// markerGone reports whether the marker at key no longer exists. Requests:
// one HEAD.
func (s *Store) markerGone(ctx context.Context, key string) (bool, error) {
	_, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: &key})
	switch {
	case err == nil:
		return false, nil
	case s3x.NotFound(err):
		return true, nil
	}
	return false, err
}

// wakeNews judges a changed wake object's body: it reports whether the
// worker should list. It remembers the announcements seen, so the next
// change shows only the new ones, and forgets that it left a newly
// announced marker alone for a while. It lists for a body it cannot read,
// for news without a marker, when it may have missed announcements (none of
// those kept was seen before), and when an announced marker is still
// there (or cannot be checked); not when every new one is gone, taken by
// another worker, or is due later: it returns the earliest such time, for
// the poll loop to list then.
func (w *Worker) wakeNews(ctx context.Context, body []byte) (list bool, due time.Time) {
	s := w.store
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
	now := s.serverNow()
	for _, n := range fresh {
		m, ok := s.parseMarker(n.key)
		switch {
		case n.key == "*" || !ok:
			return true, due
		case m.due.After(now):
			// Scheduled for later: the marker's name says when, and the
			// poll loop lists then, not now.
			due = sooner(due, m.due.Add(s.dueLead())) // a start is judged by serverEarliest
			continue
		}
		if gone, err := s.markerGone(ctx, n.key); err != nil || !gone {
			return true, due
		}
	}
	return false, due
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
// known, so that their next check of it does not make them list again, and
// key the marker announced ("" for none).
func (l *localWorkers) wake(etag, key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for w := range l.workers {
		w.kick(etag, key)
	}
}
