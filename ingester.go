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
	// Default: Name is the object's base name.
	Params func(Object) CreateParams

	// SweepInterval is how often Run lists the folder for objects whose
	// events never came. The first sweep, when Run starts, looks at every
	// object; each later one at those written since the sweep before last
	// began. Negative: no sweeps. Default 10 minutes.
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
		o.Params = func(obj Object) CreateParams { return CreateParams{Name: path.Base(obj.Key)} }
	}
	if o.Logger == nil {
		o.Logger = store.log
	}
	return &Ingester{store: store, opts: o, bucket: bucket, log: o.Logger, pending: map[string]bool{}, kick: make(chan struct{}, 1)}, nil
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
// tried again with backoff, up to five times; the next sweep finds it if
// that is not enough.
func (in *Ingester) Run(ctx context.Context) error {
	var since time.Time // the previous sweep's start: the next one looks from there
	next := time.Now()  // the next sweep
	for {
		if in.opts.SweepInterval > 0 && !time.Now().Before(next) || in.takeLost() {
			start := in.store.serverNow()
			if _, err := in.Sweep(ctx, since.Add(-in.opts.SweepInterval)); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				in.log.Warn("s3task: ingest sweep", "prefix", in.opts.Prefix, "err", err)
			} else {
				since = start
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
		err := in.ingest(ctx, q)
		var te *TransitionError
		switch {
		case err == nil || ctx.Err() != nil:
			return
		case errors.Is(err, ErrInvalidArgument), errors.As(err, &te), try == 4:
			in.log.Warn("s3task: ingest", "key", q.o.Key, "err", err)
			return
		}
		if !sleepCtx(ctx, in.store.backoff("ingest/"+q.o.Key, try, time.Second, 30*time.Second)) {
			return
		}
	}
}

// ingest resolves an ambiguous key (see Notify) and ingests the object.
func (in *Ingester) ingest(ctx context.Context, q queued) error {
	o := q.o
	if q.raw != "" {
		key, err := in.resolve(ctx, q.raw, o.Key)
		if err != nil || key == "" {
			return err // neither is there (deleted since): nothing to ingest
		}
		o.Key = key
	}
	_, err := in.store.Ingest(ctx, o, in.opts.Params(o))
	return err
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

// Sweep lists the folder and ingests every object written at or after
// since (all of them for a zero since), one at a time, as Notify's events
// would. It returns how many it ingested or found ingested, and the first
// error that stopped it. Requests: a LIST per 1,000 objects, and each
// object's Ingest: for one already ingested, a refused PUT and 2 GETs, which
// is why Run's sweeps after the first look only at recent objects.
func (in *Ingester) Sweep(ctx context.Context, since time.Time) (int, error) {
	n := 0
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
			if err := in.ingest(ctx, queued{o: o}); err != nil {
				if ctx.Err() != nil {
					return n, err
				}
				in.log.Warn("s3task: ingest sweep", "key", o.Key, "err", err)
				continue
			}
			n++
		}
	}
	return n, nil
}
