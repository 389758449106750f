package s3task

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/s3task/s3task/internal/s3x"
)

// IngestOptions configure an [Ingester].
type IngestOptions struct {
	// Bucket holds the objects to ingest; "" means the Store's bucket.
	Bucket string

	// Prefix is the folder watched, such as "incoming/". Required. In the
	// Store's bucket it must not overlap the Store's prefix, either way:
	// the Ingester never watches where the library writes, so a task's
	// output cannot become a task.
	Prefix string

	// Params returns the parameters of the task made of an object (its
	// Name, Type, Payload or Args, Metadata...; Key is set by Ingest).
	// Default: Name is the object's base name, cut to its first 256 bytes
	// at a character boundary (an S3 key may be 1,024 bytes long).
	Params func(Object) CreateParams

	// SweepInterval is how often Run lists the folder for object versions
	// whose events never came, or whose ingest failed. The first sweep,
	// when Run starts, ingests every object listed; each later one those
	// it has not settled yet (see [Ingester]). Negative: no sweeps (events
	// alone; a version whose event is lost, or whose ingest fails five
	// times, waits for a restart). Default 10 minutes.
	SweepInterval time.Duration

	// Logger receives what the Ingester did not manage. Default: the
	// Store's.
	Logger *slog.Logger
}

// DefaultSweepInterval is IngestOptions.SweepInterval's default.
const DefaultSweepInterval = 10 * time.Minute

// An Ingester makes a task of each object version that arrives under a
// folder, exactly once (see [Store.Ingest]): from the S3 event
// notifications it is given ([Ingester.Notify], so that package s3event's
// handler or s3tasknats can feed it as they feed a worker) and from a sweep
// of the folder now and then, for events that never came. Run does the
// work. Duplicate, late and out-of-order events, and sweeps that meet
// objects already ingested, make no second task.
//
// The promise: every version of an object under the folder that is still
// there when a sweep lists it becomes one task that runs, across restarts
// of the Ingester, purges of the tasks, and S3 outages of any length. A
// version is settled when Ingest made or found its task, refused it (too
// large: an abandoned task on record), or found it purged. An ingest that
// fails for a passing reason (S3 not answering, after five tries for an
// event) leaves the version waiting ([Ingester.Waiting]), and every later
// sweep tries it again for as long as it is listed. So a version is
// ingested at most a SweepInterval (plus the time a sweep takes) after it
// appears in the listing, or after S3 answers again. A version that is
// gone when Ingest looks ([ErrSourceGone]) is neither: no task runs for
// it, and if the same bytes are put back, the next event or sweep ingests
// them.
//
// Cost and memory: a sweep is a LIST per 1,000 objects under the folder,
// plus an Ingest of each version not yet settled. The Ingester remembers
// the settled versions still listed, about 100 bytes each, so a folder of
// a million objects costs about 100 MB; move or delete sources once their
// tasks are made (a task keeps its own copy) to keep both small. A
// restarted Ingester remembers nothing, and its first sweep Ingests every
// object listed: one already ingested costs a HEAD, a refused PUT and two
// GETs (a purged one a GET less).
type Ingester struct {
	store  *Store
	opts   IngestOptions
	bucket string
	log    *slog.Logger

	mu      sync.Mutex
	queue   []queued
	pending map[string]bool // IngestKey of each object in queue
	lost    bool            // events were dropped: sweep soon
	kick    chan struct{}
	settled map[string]bool   // IngestKey of each settled version still listed
	waiting map[string]Object // versions whose ingest failed, by IngestKey
}

// queued is an object to ingest; raw, if not "", another reading of its
// key (see ObjectEvent.RawKey), tried if the object Key names is not there.
type queued struct {
	o   Object
	raw string
}

// NewIngester returns an Ingester for store. It makes no requests. It
// returns an error wrapping [ErrInvalidOptions] for a nil store, an empty
// Prefix, or one that overlaps the Store's.
func NewIngester(store *Store, opts *IngestOptions) (*Ingester, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalidOptions)
	}
	var o IngestOptions
	if opts != nil {
		o = *opts
	}
	bucket := o.Bucket
	if bucket == "" {
		bucket = store.bucket
	}
	own := store.opts.Prefix
	switch {
	case o.Prefix == "":
		return nil, fmt.Errorf("%w: IngestOptions.Prefix is empty: name the folder to watch", ErrInvalidOptions)
	case bucket == store.bucket && (strings.HasPrefix(o.Prefix, own) || strings.HasPrefix(own, o.Prefix)):
		return nil, fmt.Errorf("%w: IngestOptions.Prefix %q overlaps the Store's prefix %q", ErrInvalidOptions, o.Prefix, own)
	}
	if o.SweepInterval == 0 {
		o.SweepInterval = DefaultSweepInterval
	}
	if o.Params == nil {
		o.Params = func(obj Object) CreateParams { return CreateParams{Name: cutName(path.Base(obj.Key), 256)} }
	}
	if o.Logger == nil {
		o.Logger = store.log
	}
	return &Ingester{store: store, opts: o, bucket: bucket, log: o.Logger, pending: map[string]bool{}, kick: make(chan struct{}, 1),
		settled: map[string]bool{}, waiting: map[string]Object{}}, nil
}

// cutName returns the first bytes of s, at most n, ending at a character
// boundary.
func cutName(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Notify takes what an S3 event notification says: an object written
// under the folder is queued for Run to ingest. It reports whether the
// event concerns the Ingester. It never blocks and makes no request; past
// 4,096 queued objects it drops the event and has Run sweep instead. A key
// that reads two ways (ObjectEvent.RawKey) costs Run a HEAD to tell which
// of the two objects exists; if both do, the decoded one is taken, and the
// other is left to the sweep.
func (in *Ingester) Notify(e ObjectEvent) bool {
	if e.Removed || (e.Bucket != "" && e.Bucket != in.bucket) {
		return false
	}
	if !strings.HasPrefix(e.Key, in.opts.Prefix) && !strings.HasPrefix(e.RawKey, in.opts.Prefix) {
		return false
	}
	in.enqueue(queued{Object{Bucket: in.bucket, Key: e.Key, VersionID: e.VersionID, ETag: e.ETag, Size: e.Size}, e.RawKey})
	return true
}

// enqueue queues q unless it is queued already, and wakes Run.
func (in *Ingester) enqueue(q queued) {
	k := IngestKey(q.o, in.bucket) + "\x00" + q.raw
	in.mu.Lock()
	switch {
	case in.pending[k]:
	case len(in.queue) >= maxNoted:
		in.lost = true
	default:
		in.pending[k] = true
		in.queue = append(in.queue, q)
	}
	in.mu.Unlock()
	select {
	case in.kick <- struct{}{}:
	default:
	}
}

// Run ingests what Notify queues, and sweeps the folder when it starts and
// every SweepInterval, until ctx ends; then it returns ctx's error. An
// object whose ingest fails for a passing reason (S3 not answering) is
// tried again with backoff, up to five times; then it waits for the next
// sweep, and every sweep after, until it is settled (see [Ingester]).
func (in *Ingester) Run(ctx context.Context) error {
	next := time.Now() // the next sweep
	for {
		if in.opts.SweepInterval > 0 && !time.Now().Before(next) || in.takeLost() {
			if _, err := in.Sweep(ctx, time.Time{}); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				in.log.Warn("s3task: ingest sweep", "prefix", in.opts.Prefix, "err", err)
			}
			if w := in.Waiting(); len(w) > 0 {
				in.log.Warn("s3task: ingest: object versions wait for the next sweep", "prefix", in.opts.Prefix, "count", len(w), "first", w[0].Key)
			}
			next = time.Now().Add(in.opts.SweepInterval)
		}
		for q, ok := in.take(); ok; q, ok = in.take() {
			in.ingestRetrying(ctx, q)
			in.done(q)
		}
		wait := time.Until(next)
		if in.opts.SweepInterval < 0 {
			wait = time.Hour
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-in.kick:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// Waiting returns the object versions whose ingest failed for a passing
// reason and that the next sweep tries again, in no particular order. A
// version leaves the list when an ingest settles it, or when a sweep no
// longer lists it. Watch its length: it grows while S3 fails, and stays
// above zero while a version cannot be ingested.
func (in *Ingester) Waiting() []Object {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := make([]Object, 0, len(in.waiting))
	for _, o := range in.waiting {
		out = append(out, o)
	}
	return out
}

// settles reports whether an ingest that returned err is over for its
// version: the task was made or found, or the version refused, purged, or
// not to be ingested at all (ErrInvalidArgument, such as a name the Params
// function made too long, which no retry mends).
func settles(err error) bool {
	var te *TransitionError
	return err == nil || errors.Is(err, ErrPurged) || errors.Is(err, ErrInvalidArgument) || errors.As(err, &te)
}

// waits reports whether an ingest that returned err failed for a reason
// that passes (S3 not answering): its version waits for the next sweep.
func waits(err error) bool { return !settles(err) && !errors.Is(err, ErrSourceGone) }

// expected reports whether err is an ingest's outcome that needs no word in
// the log: a success, a version gone or purged.
func expected(err error) bool {
	return err == nil || errors.Is(err, ErrSourceGone) || errors.Is(err, ErrPurged)
}

// note records the outcome err of an ingest of o: settled, waiting for
// the next sweep, or neither (gone).
func (in *Ingester) note(o Object, err error) {
	k := IngestKey(o, in.bucket)
	in.mu.Lock()
	defer in.mu.Unlock()
	delete(in.waiting, k)
	switch {
	case settles(err):
		in.settled[k] = true
	case waits(err):
		in.waiting[k] = o
	}
}

func (in *Ingester) takeLost() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	lost := in.lost
	in.lost = false
	return lost
}

// take returns the first queued object, leaving it marked pending until
// done, so that events for it meanwhile add nothing.
func (in *Ingester) take() (queued, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.queue) == 0 {
		return queued{}, false
	}
	q := in.queue[0]
	in.queue = in.queue[1:]
	return q, true
}

func (in *Ingester) done(q queued) {
	in.mu.Lock()
	delete(in.pending, IngestKey(q.o, in.bucket)+"\x00"+q.raw)
	in.mu.Unlock()
}

// ingestRetrying ingests q, retrying passing failures with backoff.
func (in *Ingester) ingestRetrying(ctx context.Context, q queued) {
	for try := 0; ; try++ {
		o, err := in.ingest(ctx, q)
		switch {
		case ctx.Err() != nil:
			return
		case !waits(err):
			if !expected(err) {
				in.log.Warn("s3task: ingest", "key", o.Key, "err", err)
			}
			in.note(o, err)
			return
		case try == 4:
			in.log.Warn("s3task: ingest: left for the next sweep", "key", o.Key, "err", err)
			in.note(o, err)
			return
		}
		if !sleepCtx(ctx, in.store.backoff("ingest/"+q.o.Key, try, time.Second, 30*time.Second)) {
			return
		}
	}
}

// ingest resolves an ambiguous key (see Notify) and ingests the object; it
// returns the object as resolved.
func (in *Ingester) ingest(ctx context.Context, q queued) (Object, error) {
	o := q.o
	if q.raw != "" {
		key, err := in.resolve(ctx, q.raw, o.Key)
		if err != nil {
			return o, err
		}
		if key == "" {
			// Neither is there (deleted since): nothing to ingest.
			return o, fmt.Errorf("%w: neither %q nor %q is there", ErrSourceGone, o.Key, q.raw)
		}
		o.Key = key
	}
	_, err := in.store.Ingest(ctx, o, in.opts.Params(o))
	return o, err
}

// resolve returns which of two readings of an event's key names an object
// under the folder: the decoded one if it exists, else the one as sent;
// "" if neither does.
func (in *Ingester) resolve(ctx context.Context, raw, decoded string) (string, error) {
	for _, key := range []string{decoded, raw} {
		if !strings.HasPrefix(key, in.opts.Prefix) {
			continue
		}
		_, err := in.store.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &in.bucket, Key: &key})
		switch {
		case err == nil:
			return key, nil
		case !s3x.NotFound(err):
			return "", fmt.Errorf("s3task: ingest: %s: %w", key, err)
		}
	}
	return "", nil
}

// Sweep lists the folder and ingests every object version written at or
// after since (all of them for a zero since) that the Ingester has not
// settled yet, one at a time, as Notify's events would; Run calls it with
// a zero since. A sweep of a zero since that lists the whole folder
// forgets the settled and waiting versions it did not list. It returns how
// many versions it settled or found settled, and the first error that
// stopped it; a version whose ingest fails is logged, waits (see
// [Ingester.Waiting]), and does not stop the sweep. Requests: a LIST per
// 1,000 objects, and each version's Ingest (see [Ingester] for the cost).
func (in *Ingester) Sweep(ctx context.Context, since time.Time) (int, error) {
	n := 0
	listed := map[string]bool{}
	p := s3.NewListObjectsV2Paginator(in.store.client, &s3.ListObjectsV2Input{Bucket: &in.bucket, Prefix: &in.opts.Prefix})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return n, fmt.Errorf("s3task: ingest sweep of %s: %w", in.opts.Prefix, err)
		}
		for _, obj := range page.Contents {
			if obj.Key == nil || obj.LastModified != nil && obj.LastModified.Before(since) {
				continue
			}
			o := Object{Bucket: in.bucket, Key: *obj.Key, Size: -1}
			if obj.ETag != nil {
				o.ETag = *obj.ETag
			}
			if obj.Size != nil {
				o.Size = *obj.Size
			}
			if strings.HasSuffix(o.Key, "/") && o.Size == 0 {
				continue // a folder placeholder
			}
			k := IngestKey(o, in.bucket)
			listed[k] = true
			in.mu.Lock()
			done := in.settled[k]
			in.mu.Unlock()
			if !done {
				_, err := in.ingest(ctx, queued{o: o})
				if ctx.Err() != nil {
					return n, ctx.Err()
				}
				if !expected(err) {
					in.log.Warn("s3task: ingest sweep", "key", o.Key, "err", err)
				}
				in.note(o, err)
				if waits(err) {
					continue
				}
			}
			n++
		}
	}
	if since.IsZero() {
		in.mu.Lock()
		for k := range in.settled {
			if !listed[k] {
				delete(in.settled, k)
			}
		}
		for k := range in.waiting {
			if !listed[k] {
				delete(in.waiting, k)
			}
		}
		in.mu.Unlock()
	}
	return n, nil
}
