package sim

import (
	"strings"
	"time"

	"github.com/s3task/s3task"
)

// bus hands the workers S3 event notifications of what S3 applies
// (Config.Events), as an unreliable transport would: some lost, some
// repeated, each late by its own delay, so that they arrive out of order.
type bus struct {
	w      *World
	rng    *Rand // drawn from by applied, while S3 serves nothing else: in S3's order
	fanout bool  // to every live worker (a broker); else to one (a webhook)
}

func newBus(w *World) *bus {
	rng := NewRand(w.cfg.Seed, "events/bus")
	return &bus{w: w, rng: rng, fanout: rng.Chance(0.5)}
}

// send schedules the notifications of a write to key (a delete if removed).
func (b *bus) send(key, etag string, removed bool) {
	copies := 1
	switch r := b.rng.Float64(); {
	case r < 0.1:
		b.w.count("event:lost")
		return
	case r < 0.25:
		copies = 2 + b.rng.IntN(2)
	}
	for range copies {
		var delay time.Duration
		switch r := b.rng.Float64(); {
		case r < 0.8:
			delay = b.rng.Dur(time.Millisecond, 50*time.Millisecond)
		case r < 0.95:
			delay = b.rng.Dur(50*time.Millisecond, 3*time.Second)
		default:
			delay = b.rng.Dur(3*time.Second, time.Minute)
		}
		pick := b.rng.Float64()
		b.w.wg.Add(1)
		go func() {
			defer b.w.wg.Done()
			if pause(delay, b.w.over) == 0 {
				b.deliver(key, etag, removed, pick)
			}
		}()
	}
}

// deliver hands one notification to the live workers, or to one of them
// (pick, in [0, 1), chooses which), and records it.
func (b *bus) deliver(key, etag string, removed bool, pick float64) {
	w := b.w
	w.mu.Lock()
	to := w.workers
	if !b.fanout && len(to) > 0 {
		to = to[int(pick*float64(len(to))):][:1]
	}
	to = append(append([]*proc(nil), to...), w.ingesters...)
	if !removed && strings.HasPrefix(key, ingestFolder) {
		// The direct callers hear of every file; they neither retry nor
		// sweep: after a failure or a brownout, only the Ingesters make a
		// task.
		to = append(to, w.directs...)
	}
	for _, p := range to {
		w.h.Deliveries = append(w.h.Deliveries, Delivery{Seq: w.next(), Time: time.Now(), Worker: p.name, Key: key, Removed: removed})
		w.h.Stats["event:delivered"]++
	}
	w.mu.Unlock()
	e := s3task.ObjectEvent{Bucket: w.mem.Bucket, Key: key, Removed: removed, ETag: etag, Size: -1}
	for _, p := range to {
		switch {
		case p.ingester != nil:
			p.ingester.Notify(e)
		case p.worker != nil:
			p.worker.Notify(e)
		default:
			w.ingestDirect(p, s3task.Object{Bucket: w.mem.Bucket, Key: key, ETag: etag, Size: -1})
		}
	}
}
