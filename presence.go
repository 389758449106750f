package s3task

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/s3task/s3task/internal/s3x"
)

// Worker presence. A running Worker keeps one small JSON object of its
// own, its presence object, under <prefix>_workers/:
//
//	batch-tasks/_workers/<name>.json
//
// where <name> is the worker's ID when it is made only of ASCII letters,
// digits, '.', '-' and '_' (and does not start with '.'), and otherwise
// "~" followed by the ID's bytes in lowercase hex; so every ID has one
// key, no two IDs share one, and the key alone names its worker. The
// folder starts with '_', which no task ID does, so listings of tasks pass
// over it, as over _keys/ and _check/.
//
// The worker writes the object when Run starts, then every
// PresenceInterval, with a plain PUT (the key is the worker's alone), on a
// goroutine apart from the poll loop and with a request deadline of its
// own, so a write that fails or hangs costs the worker's work nothing; it
// deletes the object when Run returns. Store.Workers reads the folder; the
// fleet's reconciler deletes the objects not rewritten for
// PresenceStaleAfter, those of workers that died without a Stop.
//
// The body, for example:
//
//	{"kind":"s3task-worker","schema_version":1,"worker_id":"web-3.4121.9f2c",
//	 "host":"web-3","concurrency":2,"types":["csv_import"],"library_version":"v0.2.0",
//	 "started_at":"2026-11-30T14:47:02.123Z","last_poll_at":"2026-11-30T15:02:11.456Z",
//	 "running":["7ZZZX5Q2M4Y7D6N2J3K8H9G0FA"],"presence_interval_ms":120000,
//	 "clock_margin_ms":5000,"written_at":"2026-11-30T15:02:40.001Z"}
//
// "types" is null for a worker offered every type, [] for one whose
// TypedHandler serves none. Readers ignore fields they do not know.

const (
	// MaxPresenceInterval is the longest WorkerOptions.PresenceInterval: a
	// worker still rewrites its object well within PresenceStaleAfter.
	MaxPresenceInterval = time.Hour

	// PresenceStaleAfter is how long a presence object may go unwritten
	// before the fleet's reconciler deletes it: a worker that died without
	// a Stop (killed, crashed, cut off) leaves its object behind, which
	// [Store.Workers] shows as not live until then.
	PresenceStaleAfter = 24 * time.Hour

	// MaxWorkers is the most presence objects one [Store.Workers] call
	// reads: one LIST page.
	MaxWorkers = 1000
)

// presenceKind and presenceSchema name the format of a presence object's
// body.
const (
	presenceKind   = "s3task-worker"
	presenceSchema = 1
)

// maxPresenceSize bounds the presence object Store.Workers reads.
const maxPresenceSize = 1 << 20

// presenceSweepPages bounds the LIST pages of one sweep of stale presence
// objects; what it leaves is swept at the next turn.
const presenceSweepPages = 10

// WorkerInfo is what a running [Worker] announces of itself, as
// [Store.Workers] read it. The fields from ID to PresenceInterval are the
// worker's own word, as of its latest write; LastSeen and Live are the
// reader's.
type WorkerInfo struct {
	// ID is the worker's ID (WorkerOptions.ID), as written in the records
	// of the tasks it claims (Task.WorkerID).
	ID string
	// Host is the name of the machine it runs on (os.Hostname), "" if
	// unknown.
	Host string
	// Concurrency is how many tasks it runs at once.
	Concurrency int
	// Types are the task types it claims, sorted: nil when it is offered
	// every type (its handler is not a [TypedHandler]), empty but not nil
	// when its TypedHandler serves none.
	Types []string
	// Version is the version of this library the worker's program was
	// built with, as its build information records it; "" when it does
	// not say (a development build, a test).
	Version string
	// StartedAt is when its Run started, by the S3 server's clock.
	StartedAt time.Time
	// LastPollAt is when its poll loop last looked for work (checked the
	// wake object, listed the markers, or visited a marker an event
	// named), by the S3 server's clock, as of its latest write; zero if
	// it had not yet. A worker whose slots are all busy does not poll.
	LastPollAt time.Time
	// Running are the IDs of the tasks it held at its latest write, sorted:
	// claimed, and not yet settled.
	Running []string
	// PresenceInterval is how often it rewrites its presence object.
	PresenceInterval time.Duration

	// LastSeen is when the object was last written, by the S3 server's
	// clock (its LastModified).
	LastSeen time.Time
	// Live reports whether the object was written within two of the
	// worker's presence intervals plus its ClockMargin before
	// WorkerList.At. A worker that stopped with Run returning has no
	// object; one that is not live died, or cannot reach S3, or is frozen.
	Live bool
	// LiveUntil is when, by the S3 server's clock, the worker turns not
	// live if it writes nothing more: LastSeen plus two presence
	// intervals and its ClockMargin. It bounds how long a worker killed
	// without a Stop is still listed as live, and how stale its own word
	// above may be while it is (one interval, as a rule).
	LiveUntil time.Time
	// Key is the presence object's key.
	Key string
	// Err, if not nil, says why the object could not be read: its key
	// names no worker, its body is not a presence object or names another
	// worker (errors wrapping [ErrUnreadablePresence]), or S3 did not
	// serve it. Then only Key, LastSeen and, if the key names one, ID are
	// set, and Live is false.
	Err error
}

// WorkerList is what [Store.Workers] returns.
type WorkerList struct {
	// Workers are the presence objects read, in the order of their ID;
	// those whose key names no worker come last, in the order of their
	// key.
	Workers []WorkerInfo
	// Truncated reports that the folder holds more than MaxWorkers
	// objects: Workers then holds those of the first MaxWorkers keys, and
	// the others were not read.
	Truncated bool
	// At is the S3 server's time, as the Store knew it after the reads, by
	// which Live was judged.
	At time.Time
}

// Workers lists the workers that announce themselves in the bucket (see
// WorkerOptions.PresenceInterval): each running Worker, and each that died
// without a Stop within the last PresenceStaleAfter, which the list shows
// as not live. It writes nothing. It passes through [StoreMiddleware] as
// an [OpWorkers] call.
//
// Requests: one LIST, and one GET per presence object whose key names a
// worker, at most [MaxWorkers], StoreOptions.ListConcurrency at a time. A
// worker that stopped between the LIST and its GET is left out.
//
// An object that cannot be read (its key names no worker, its body is not
// a presence object, S3 did not serve it) is an entry with WorkerInfo.Err
// set; it never fails the call. Errors: the LIST's S3 error, or ctx's.
func (s *Store) Workers(ctx context.Context) (*WorkerList, error) {
	c := &Call{Op: OpWorkers}
	_, err := s.call(ctx, c)
	return result[*WorkerList](c, err)
}

// presenceDoc is the body of a presence object.
type presenceDoc struct {
	Kind          string    `json:"kind"`
	SchemaVersion int       `json:"schema_version"`
	WorkerID      string    `json:"worker_id"`
	Host          string    `json:"host"`
	Concurrency   int       `json:"concurrency"`
	Types         []string  `json:"types"` // null: every type
	Version       string    `json:"library_version,omitempty"`
	StartedAt     time.Time `json:"started_at"`
	LastPollAt    time.Time `json:"last_poll_at,omitzero"`
	Running       []string  `json:"running"`
	IntervalMS    int64     `json:"presence_interval_ms"`
	ClockMarginMS int64     `json:"clock_margin_ms"`
	WrittenAt     time.Time `json:"written_at"`
}

func (s *Store) presenceDir() string { return s.opts.Prefix + "_workers/" }

// presenceKey returns the key of the presence object of worker id.
func (s *Store) presenceKey(id string) string {
	return s.presenceDir() + presenceName(id) + ".json"
}

// presenceName returns the name a worker ID's presence object has in
// _workers/: the ID itself if it is plain, "~" and its hex otherwise.
func presenceName(id string) string {
	if plainName(id) {
		return id
	}
	return "~" + hex.EncodeToString([]byte(id))
}

// plainName reports whether id is non-empty, made of ASCII letters,
// digits, '.', '-' and '_' only, and does not start with '.'.
func plainName(id string) bool {
	if id == "" || id[0] == '.' {
		return false
	}
	for i := range len(id) {
		switch c := id[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '-', c == '_':
		default:
			return false
		}
	}
	return true
}

// presenceID returns the worker ID the presence key names, and whether it
// names one: the key must be the one presenceKey gives for that ID.
func (s *Store) presenceID(key string) (string, bool) {
	name, ok := strings.CutPrefix(key, s.presenceDir())
	if !ok {
		return "", false
	}
	if name, ok = strings.CutSuffix(name, ".json"); !ok {
		return "", false
	}
	id := name
	if h, ok := strings.CutPrefix(name, "~"); ok {
		b, err := hex.DecodeString(h)
		if err != nil {
			return "", false
		}
		id = string(b)
	}
	if id == "" || len(id) > maxWorkerIDLen || !utf8.ValidString(id) || presenceName(id) != name {
		return "", false
	}
	return id, true
}

// maxWorkerIDLen bounds WorkerOptions.ID, in bytes.
const maxWorkerIDLen = 128

func (s *Store) workers(ctx context.Context) (*WorkerList, error) {
	dir := s.presenceDir()
	out, err := s.client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: &dir, MaxKeys: aws.Int32(MaxWorkers)})
	if err != nil {
		return nil, fmt.Errorf("s3task: list %s: %w", dir, err)
	}
	s.observe(out.ResultMetadata)
	objs := out.Contents[:min(len(out.Contents), MaxWorkers)]
	list := &WorkerList{Truncated: aws.ToBool(out.IsTruncated) && len(objs) > 0 || len(out.Contents) > MaxWorkers}
	type read struct {
		margin time.Duration
		gone   bool
	}
	infos, reads := make([]WorkerInfo, len(objs)), make([]read, len(objs))
	sem := make(chan struct{}, s.opts.ListConcurrency)
	var wg sync.WaitGroup
	for i, obj := range objs {
		in := &infos[i]
		in.Key, in.LastSeen = aws.ToString(obj.Key), aws.ToTime(obj.LastModified).UTC()
		id, ok := s.presenceID(in.Key)
		if !ok {
			in.Err = fmt.Errorf("%w: %s: its key names no worker", ErrUnreadablePresence, in.Key)
			continue
		}
		in.ID = id
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			reads[i].margin, reads[i].gone = s.readPresence(ctx, in)
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	list.At = s.serverNow()
	for i, in := range infos {
		if reads[i].gone {
			continue
		}
		if in.Err == nil {
			in.LiveUntil = in.LastSeen.Add(2*in.PresenceInterval + reads[i].margin)
			in.Live = !list.At.After(in.LiveUntil)
		}
		list.Workers = append(list.Workers, in)
	}
	slices.SortStableFunc(list.Workers, func(a, b WorkerInfo) int {
		if (a.ID == "") != (b.ID == "") {
			if a.ID == "" {
				return 1
			}
			return -1
		}
		if c := strings.Compare(a.ID, b.ID); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	return list, nil
}

// readPresence reads the presence object in.Key, whose key names worker
// in.ID, into in, or sets in.Err. It returns the ClockMargin the worker
// announced, and whether the object was gone (its worker stopped since it
// was listed). Requests: one GET.
func (s *Store) readPresence(ctx context.Context, in *WorkerInfo) (margin time.Duration, gone bool) {
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &in.Key})
	switch {
	case s3x.NotFound(err):
		return 0, true
	case err != nil:
		in.Err = fmt.Errorf("s3task: read %s: %w", in.Key, err)
		return 0, false
	}
	defer out.Body.Close()
	s.observe(out.ResultMetadata)
	in.LastSeen = later(in.LastSeen, aws.ToTime(out.LastModified).UTC())
	data, err := io.ReadAll(io.LimitReader(out.Body, maxPresenceSize+1))
	if err != nil {
		in.Err = fmt.Errorf("s3task: read %s: %w", in.Key, err)
		return 0, false
	}
	doc, err := decodePresence(data, in.ID)
	if err != nil {
		in.Err = fmt.Errorf("%w: %s: %w", ErrUnreadablePresence, in.Key, err)
		return 0, false
	}
	in.Host, in.Concurrency, in.Types, in.Version = doc.Host, doc.Concurrency, doc.Types, doc.Version
	in.StartedAt, in.Running = doc.StartedAt.UTC(), doc.Running
	if !doc.LastPollAt.IsZero() {
		in.LastPollAt = doc.LastPollAt.UTC()
	}
	in.PresenceInterval = time.Duration(doc.IntervalMS) * time.Millisecond
	return time.Duration(doc.ClockMarginMS) * time.Millisecond, false
}

// decodePresence decodes a presence object's body, which must be of
// worker id.
func decodePresence(data []byte, id string) (*presenceDoc, error) {
	if len(data) > maxPresenceSize {
		return nil, fmt.Errorf("larger than %d bytes", maxPresenceSize)
	}
	var doc presenceDoc
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	switch {
	case doc.Kind != presenceKind:
		return nil, fmt.Errorf("kind %q, not %q", truncate(doc.Kind, 64), presenceKind)
	case doc.SchemaVersion > presenceSchema:
		return nil, fmt.Errorf("schema_version %d, this code knows up to %d", doc.SchemaVersion, presenceSchema)
	case doc.SchemaVersion < 1:
		return nil, fmt.Errorf("schema_version %d", doc.SchemaVersion)
	case doc.WorkerID != id:
		return nil, fmt.Errorf("it names worker %q, its key %q", truncate(doc.WorkerID, 160), id)
	case doc.Concurrency < 1:
		return nil, fmt.Errorf("concurrency %d", doc.Concurrency)
	case len(doc.Running) > doc.Concurrency:
		return nil, fmt.Errorf("%d tasks running, over its concurrency %d", len(doc.Running), doc.Concurrency)
	case doc.IntervalMS <= 0 || doc.IntervalMS > int64(24*time.Hour/time.Millisecond):
		return nil, fmt.Errorf("presence_interval_ms %d", doc.IntervalMS)
	case doc.ClockMarginMS < 0 || doc.ClockMarginMS > int64(24*time.Hour/time.Millisecond):
		return nil, fmt.Errorf("clock_margin_ms %d", doc.ClockMarginMS)
	}
	for _, tid := range doc.Running {
		if err := ParseID(tid); err != nil {
			return nil, fmt.Errorf("running: %w", err)
		}
	}
	if doc.Running == nil {
		doc.Running = []string{}
	}
	return &doc, nil
}

// presence is a worker's own state for its presence object.
type presence struct {
	mu      sync.Mutex
	running map[string]<-chan struct{} // the tasks held, each with its attempt's settled channel
	// lastPoll is when the poll loop last looked for work, by the server's
	// clock, in Unix milliseconds; 0: not yet.
	lastPoll atomic.Int64
	// polled, until the loop's first look for work in this Run, is the
	// channel notePoll closes then (see announce).
	polled atomic.Pointer[chan struct{}]
}

// track notes that the worker holds task id until settled is closed.
func (p *presence) track(id string, settled <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.prune()
	if p.running == nil {
		p.running = map[string]<-chan struct{}{}
	}
	p.running[id] = settled
}

// prune forgets the tasks whose attempt is settled. Call with p.mu held.
func (p *presence) prune() {
	for id, settled := range p.running {
		select {
		case <-settled:
			delete(p.running, id)
		default:
		}
	}
}

// held returns the IDs of the tasks held now, sorted, never nil.
func (p *presence) held() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.prune()
	ids := make([]string, 0, len(p.running))
	for id := range p.running {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// present reports whether the worker announces its presence.
func (w *Worker) present() bool { return w.opts.PresenceInterval > 0 }

// begin starts the attempt of task t, just claimed with etag (see start),
// and notes it among the tasks the presence object names until it is
// settled.
func (w *Worker) begin(base context.Context, t *record, etag string) (settled <-chan struct{}) {
	settled = w.start(base, t, etag)
	if w.present() {
		w.presence.track(t.ID, settled)
	}
	return settled
}

// notePoll records that the poll loop looked for work now.
func (w *Worker) notePoll() {
	if w.present() {
		w.presence.lastPoll.Store(w.store.serverNow().UnixMilli())
		if c := w.presence.polled.Swap(nil); c != nil {
			close(*c)
		}
	}
}

// firstWriteWait is how long after Run starts the first presence write
// waits for the poll loop's first look for work, so that the object says
// when that was rather than "not yet" for a whole PresenceInterval: at
// most a PollInterval, for a loop held up at its start.
func (w *Worker) firstWriteWait() time.Duration { return w.opts.PollInterval }

// announce writes the worker's presence object as the poll loop first
// looks for work (see firstWriteWait) and every PresenceInterval after,
// on a goroutine of its own, until the returned function
// is called, which deletes the object and returns once that is done. Each
// request has the poll loop's deadline (requestTimeout); ctx's values are
// kept, its end is not heeded. A write still under way when the function
// is called is given up, not waited for: the DELETE supersedes it, and
// should S3 apply it after all, after the DELETE, the object is left to
// turn not live and be swept (PresenceStaleAfter). With presence off it
// does nothing.
func (w *Worker) announce(ctx context.Context) (stop func()) {
	if !w.present() {
		return func() {}
	}
	ctx = context.WithoutCancel(ctx)
	writes, giveUp := context.WithCancel(ctx)
	started := w.store.serverNow()
	w.presence.lastPoll.Store(0) // not yet, in this Run
	polled := make(chan struct{})
	w.presence.polled.Store(&polled)
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		// The first write goes out with the loop's first look for work
		// (no request more, one round trip later at most), so that it
		// names a last poll, not none until the next write.
		first := time.NewTimer(w.firstWriteWait())
		select {
		case <-quit:
			first.Stop()
			w.dropPresence(ctx)
			return
		case <-polled:
		case <-first.C:
		}
		first.Stop()
		tick := time.NewTicker(w.opts.PresenceInterval)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				w.dropPresence(ctx)
				return
			default:
			}
			w.putPresence(writes, started)
			select {
			case <-quit:
				w.dropPresence(ctx)
				return
			case <-tick.C:
			}
		}
	}()
	return sync.OnceFunc(func() {
		close(quit)
		giveUp()
		<-done
	})
}

// putPresence writes the presence object; a failure is logged, unless ctx
// ended (the worker stops). Requests: one PUT.
func (w *Worker) putPresence(ctx context.Context, started time.Time) {
	s := w.store
	doc := presenceDoc{
		Kind:          presenceKind,
		SchemaVersion: presenceSchema,
		WorkerID:      w.opts.ID,
		Host:          hostName(),
		Concurrency:   w.opts.Concurrency,
		Types:         handlerTypes(w.h),
		Version:       libraryVersion(),
		StartedAt:     started,
		Running:       w.presence.held(),
		IntervalMS:    w.opts.PresenceInterval.Milliseconds(),
		ClockMarginMS: w.opts.ClockMargin.Milliseconds(),
		WrittenAt:     s.serverNow(),
	}
	if ms := w.presence.lastPoll.Load(); ms != 0 {
		doc.LastPollAt = time.UnixMilli(ms).UTC()
	}
	body, err := json.Marshal(doc)
	if err != nil {
		w.log.Warn("s3task: announce presence", "err", err)
		return
	}
	key := s.presenceKey(w.opts.ID)
	rctx, cancel := w.bounded(ctx)
	defer cancel()
	_, err = s.client.PutObject(rctx, &s3.PutObjectInput{Bucket: &s.bucket, Key: &key, Body: bytes.NewReader(body),
		ContentLength: aws.Int64(int64(len(body))), ContentType: aws.String("application/json")})
	if err != nil && ctx.Err() == nil {
		w.log.Warn("s3task: announce presence", "key", key, "err", err)
	}
}

// dropWithin bounds the DELETE of a stopping worker's presence object,
// below the poll loop's request deadline: it is the last request before Run
// returns, and on an S3 that hangs the object is better left (it turns not
// live, and is swept) than Run held.
const dropWithin = 5 * time.Second

// dropPresence deletes the presence object; a failure is logged, and the
// object shows as not live once its time is up. Requests: one DELETE.
func (w *Worker) dropPresence(ctx context.Context) {
	s := w.store
	key := s.presenceKey(w.opts.ID)
	rctx, cancel := context.WithTimeout(ctx, min(w.requestTimeout(), dropWithin))
	defer cancel()
	if _, err := s.client.DeleteObject(rctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: &key}); err != nil {
		w.log.Warn("s3task: delete presence object", "key", key, "err", err)
	}
}

// sweepPresence deletes, for the fleet's reconciler, the presence objects
// not written for PresenceStaleAfter; a failure is logged, and the next
// turn tries again. A worker with presence off leaves the folder alone:
// presence off costs no request.
func (w *Worker) sweepPresence(ctx context.Context) {
	if !w.present() {
		return
	}
	n, err := w.store.sweepPresence(ctx, w.store.serverNow().Add(-PresenceStaleAfter))
	if err != nil && ctx.Err() == nil {
		w.log.Warn("s3task: delete stale presence objects", "err", err)
	}
	if n > 0 {
		w.log.Info("s3task: deleted stale presence objects", "count", n)
	}
}

// sweepPresence deletes every object under _workers/ last written before
// cutoff (by its LastModified), and returns how many it deleted. Requests:
// one LIST per 1,000 objects, at most presenceSweepPages, and one DELETE
// per object deleted.
func (s *Store) sweepPresence(ctx context.Context, cutoff time.Time) (int, error) {
	dir, after, n := s.presenceDir(), "", 0
	for range presenceSweepPages {
		in := &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: &dir}
		if after != "" {
			in.StartAfter = &after
		}
		out, err := s.client.ListObjectsV2(ctx, in)
		if err != nil {
			return n, fmt.Errorf("s3task: list %s: %w", dir, err)
		}
		s.observe(out.ResultMetadata)
		for _, obj := range out.Contents {
			key := aws.ToString(obj.Key)
			after = key
			if written := aws.ToTime(obj.LastModified); written.IsZero() || !written.Before(cutoff) {
				continue
			}
			if _, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: &key}); err != nil {
				return n, fmt.Errorf("s3task: delete %s: %w", key, err)
			}
			n++
		}
		if !aws.ToBool(out.IsTruncated) || len(out.Contents) == 0 {
			break
		}
	}
	return n, nil
}

// handlerTypes returns the task types h claims, sorted: nil for a handler
// offered every type.
func handlerTypes(h Handler) []string {
	switch h := h.(type) {
	case *Mux:
		return h.Types()
	case TypedHandler:
		types := slices.Clone(h.Types())
		if types == nil {
			types = []string{}
		}
		slices.Sort(types)
		return slices.Compact(types)
	}
	return nil
}

// hostName is os.Hostname, "" if it fails, asked once.
var hostName = sync.OnceValue(func() string {
	host, err := os.Hostname()
	if err != nil {
		return ""
	}
	return host
})

// modulePath is this library's module.
const modulePath = "github.com/s3task/s3task"

// libraryVersion is the version of this module the program was built
// with, as its build information records it: "" when it has none, or
// records no version (a development build, a test, a replace by a
// folder).
var libraryVersion = sync.OnceValue(func() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	mod := &info.Main
	for _, dep := range info.Deps {
		if dep.Path == modulePath {
			mod = dep
		}
	}
	if mod.Path != modulePath {
		return ""
	}
	if mod.Replace != nil {
		mod = mod.Replace
	}
	if mod.Version == "(devel)" {
		return ""
	}
	return mod.Version
})
