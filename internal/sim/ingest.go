package sim

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/s3task/s3task"
)

// ingestFolder is where the partner of a world with Config.Ingest puts its
// files.
const ingestFolder = "incoming/"

// ingestSweep is the Ingesters' SweepInterval.
const ingestSweep = 2 * time.Minute

// IngestBound is how soon after a version of a file appears (or after the
// brownout it appeared in ends) a task must be submitted for it, if it is
// still there: two Ingesters sweep every ingestSweep, each retrying what
// failed at every sweep, and are fed its events; three sweeps and a minute
// absorb the adversary's faults.
const IngestBound = 3*ingestSweep + time.Minute

// md5hex is the ETag S3 gives an object written in one request.
func md5hex(b []byte) string {
	sum := md5.Sum(b)
	return hex.EncodeToString(sum[:])
}

// submitted reports whether a record of an ingested task shows it went
// past created: its input was taken and it was queued at some point.
func submitted(r *Record) bool {
	return !r.SubmittedAt.IsZero() || r.Status != s3task.StatusCreated && r.Status != s3task.StatusAbandoned
}

// simParams are the parameters of the tasks the first Ingester (and its
// replacements) and the direct callers make: the name draws the handler
// runs' plans, cut to a task name's 256 bytes as a host would cut it; the
// type is one of the world's. The second Ingester uses the library's
// default (the base name, cut by the library), and its tasks have no type.
func simParams(o s3task.Object) s3task.CreateParams {
	etag := strings.Trim(o.ETag, `"`)
	name := "ingest/" + o.Key + "/" + etag
	if len(name) > 256 {
		name = name[len(name)-256:] // the ETag's end tells versions apart
		for !utf8.RuneStart(name[0]) {
			name = name[1:]
		}
	}
	return s3task.CreateParams{Name: name, Type: simTypes[int(etag[0])%len(simTypes)]}
}

// startIngesters starts two Ingester processes of the folder, each fed
// every event, each sweeping every ingestSweep, and two direct callers of
// Ingest, fed the events too, until the world shuts down.
func (w *World) startIngesters() error {
	for i := range 2 {
		if _, err := w.startIngester(i == 1); err != nil {
			return err
		}
	}
	for i := range 2 {
		p, err := w.newProc(fmt.Sprintf("d%d", i+1))
		if err != nil {
			return err
		}
		p.link.ingesting = true
		w.directs = append(w.directs, p)
	}
	return nil
}

// startIngester starts an Ingester process; plain: with the library's
// default parameters.
func (w *World) startIngester(plain bool) (*proc, error) {
	w.mu.Lock()
	w.ingestN++
	name := fmt.Sprintf("i%d", w.ingestN)
	w.mu.Unlock()
	p, err := w.newProc(name)
	if err != nil {
		return nil, err
	}
	p.link.ingesting = true
	opts := &s3task.IngestOptions{Prefix: ingestFolder, SweepInterval: ingestSweep, Logger: w.log}
	if !plain {
		opts.Params = simParams
	}
	in, err := s3task.NewIngester(p.store, opts)
	if err != nil {
		return nil, err
	}
	p.ingester, p.plain = in, plain
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel, p.exited = cancel, make(chan struct{})
	w.mu.Lock()
	w.ingesters = append(w.ingesters, p)
	w.mu.Unlock()
	now := time.Now()
	w.event(name, EventStart, now, now)
	w.wg.Go(func() {
		select {
		case <-w.over:
		case <-p.exited:
		}
		cancel()
	})
	w.wg.Go(func() {
		defer close(p.exited)
		_ = in.Run(ctx)
	})
	return p, nil
}

// restartIngester crashes the Ingester p and starts a new one in its
// place, which remembers nothing: its first sweep looks at every file.
func (w *World) restartIngester(p *proc) {
	w.mu.Lock()
	w.ingesters = slices.DeleteFunc(w.ingesters, func(q *proc) bool { return q == p })
	w.mu.Unlock()
	p.link.crash()
	p.cancel()
	select {
	case <-p.exited:
	case <-w.over:
	}
	now := time.Now()
	w.event(p.name, EventCrash, now, now)
	if _, err := w.startIngester(p.plain); err != nil {
		panic(err) // newProc and NewIngester fail only on bad options
	}
}

// ingestDirect is a direct caller's handling of an event of a version
// written under the folder: an Ingest at once, recorded as a call.
func (w *World) ingestDirect(p *proc, o s3task.Object) {
	w.wg.Go(func() {
		_, _ = p.callCtx(context.Background(), Call{Kind: CallIngest, Key: o.Key + " " + o.ETag}, func(ctx context.Context) (*s3task.Task, error) {
			return p.store.Ingest(ctx, o, simParams(o))
		}, nil)
	})
}

// brownedOut reports whether the ingesting processes are in a brownout.
func (w *World) brownedOut() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return time.Now().Before(w.brownUntil)
}

// brownout fails every request of the ingesting processes but listings,
// from now for d.
func (w *World) brownout(d time.Duration) {
	now := time.Now()
	w.mu.Lock()
	w.brownUntil = now.Add(d)
	w.mu.Unlock()
	w.event("ingest", EventBrownout, now, now.Add(d))
}

// vanish is the timing adversary of the folder: a GET an ingesting process
// sends for a file the partner marked vanishing (its look at the file is
// done, its copy is next) is preceded by the partner's delete of the file,
// once.
func (w *World) vanish(r *http.Request) {
	_, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	w.mu.Lock()
	hit := w.vanishing[key]
	delete(w.vanishing, key)
	partner := w.partnerP
	w.mu.Unlock()
	if hit {
		w.count("ingest:vanished")
		_ = partner.raw.Delete(context.Background(), key)
	}
}

// partner puts files under the folder over the arrivals: some get a new
// version later, some are deleted, some are deleted and the same bytes put
// back, some vanish between an ingest's look and its copy and come back,
// some have names longer than a task's; and events come for files that
// never existed. A brownout of S3 for the ingesting processes, longer than
// two sweeps, falls within the arrivals, and an Ingester is restarted
// before it. After the arrivals, once the tasks are finished and their
// keys old enough to be purged, the partner purges what is finished and
// restarts the Ingesters, twice: their first sweeps meet every file again,
// purged or not. Its requests meet the adversary like everyone's; a write
// that fails is not tried again.
func (w *World) partner(p *proc, until time.Time) {
	type step struct {
		at     time.Time
		key    string
		body   string // "" deletes
		vanish bool   // the file vanishes at the next ingest's copy
		junk   bool   // an event for key, which never exists
	}
	var steps []step
	start := time.Now()
	files := 6 + p.rng.IntN(10)
	for i := range files {
		key := fmt.Sprintf("%sfile-%d.csv", ingestFolder, i)
		if p.rng.Chance(0.15) {
			key = fmt.Sprintf("%s%s-%d.csv", ingestFolder, strings.Repeat("é", 140), i)
		}
		body := fmt.Sprintf("file %d, version 1\n", i)
		at := start.Add(p.rng.Dur(0, until.Sub(start)))
		switch r := p.rng.Float64(); {
		case r < 0.25:
			steps = append(steps, step{at: at, key: key, body: body},
				step{at: at.Add(p.rng.Dur(time.Second, 5*time.Minute)), key: key, body: fmt.Sprintf("file %d, version 2\n", i)})
		case r < 0.35:
			steps = append(steps, step{at: at, key: key, body: body}, step{at: at.Add(p.rng.Dur(time.Second, 5*time.Minute)), key: key})
		case r < 0.45:
			// Deleted at once, the same bytes back minutes later.
			gone := at.Add(p.rng.Dur(0, 2*time.Second))
			steps = append(steps, step{at: at, key: key, body: body}, step{at: gone, key: key},
				step{at: gone.Add(p.rng.Dur(time.Minute, 4*time.Minute)), key: key, body: body})
		case r < 0.6:
			// Gone between an ingest's look and its copy, then back.
			steps = append(steps, step{at: at, key: key, body: body, vanish: true},
				step{at: at.Add(p.rng.Dur(2*time.Minute, 5*time.Minute)), key: key, body: body})
		default:
			steps = append(steps, step{at: at, key: key, body: body})
		}
	}
	for i := range 3 + p.rng.IntN(8) {
		steps = append(steps, step{at: start.Add(p.rng.Dur(0, until.Sub(start))), key: fmt.Sprintf("%sjunk-%d.csv", ingestFolder, i), junk: true})
	}
	slices.SortStableFunc(steps, func(a, b step) int { return a.at.Compare(b.at) })
	// The brownout: 5 to 7 minutes, over two sweeps, within the arrivals;
	// an Ingester restarted before it.
	brown := start.Add(p.rng.Dur(0, max(until.Sub(start)-5*time.Minute, time.Minute)))
	brownFor := p.rng.Dur(5*time.Minute, 7*time.Minute)
	restart := start.Add(p.rng.Dur(0, brown.Sub(start)))
	events := []struct {
		at time.Time
		do func()
	}{
		{restart, func() { w.restartIngester(w.ingester(p.rng.IntN(2))) }},
		{brown, func() { w.brownout(brownFor) }},
	}
	ctx := context.Background()
	for _, s := range steps {
		for len(events) > 0 && !events[0].at.After(s.at) {
			if !w.sleep(time.Until(events[0].at)) {
				return
			}
			events[0].do()
			events = events[1:]
		}
		if !w.sleep(time.Until(s.at)) {
			return
		}
		switch {
		case s.junk:
			if w.bus != nil {
				w.bus.deliver(s.key, md5hex([]byte(s.key)), false, p.rng.Float64())
			}
		case s.body == "":
			_ = p.raw.Delete(ctx, s.key)
		default:
			if s.vanish {
				w.mu.Lock()
				w.vanishing[s.key] = true
				w.mu.Unlock()
			}
			_, _ = p.raw.Put(ctx, s.key, []byte(s.body))
		}
	}
	for _, e := range events {
		if !w.sleep(time.Until(e.at)) {
			return
		}
		e.do()
	}
	// Purges and restarts, after the keys are past Purge's hold.
	for range 2 {
		if !w.sleep(12 * time.Minute) {
			return
		}
		p.purge(time.Now(), s3task.PurgeOptions{})
		// Both, each once: taken before the first restart, which puts its
		// replacement last, where ingester(1) would find it and crash it
		// at the instant it started, before or after its first request
		// as the Go scheduler has it (a history that did not replay).
		olds := []*proc{w.ingester(0), w.ingester(1)}
		for _, old := range olds {
			w.restartIngester(old)
		}
	}
}

// ingester returns the live Ingester number i (0 or 1).
func (w *World) ingester(i int) *proc {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ingesters[i%len(w.ingesters)]
}

// ingestSettled reports whether every file under the folder has had a
// task submitted for its current version, read without requests.
func (w *World) ingestSettled(keys []string) bool {
	for _, key := range keys {
		if !strings.HasPrefix(key, ingestFolder) {
			continue
		}
		body, ok := w.mem.Object(key)
		if !ok {
			continue
		}
		w.mu.Lock()
		done := w.submitted[key+" "+md5hex(body)]
		w.mu.Unlock()
		if !done {
			return false
		}
	}
	return true
}
