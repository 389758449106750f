package sim

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/s3task/s3task/internal/s3test"
)

// markerTimeLayout formats a marker's due time, as the library does.
const markerTimeLayout = "20060102T150405.000Z"

// taskID returns a task ID for time t, its random part drawn from rng: the
// library's IDs are inverted ULIDs.
func taskID(t time.Time, rng *Rand) string {
	var b [10]byte
	binary.BigEndian.PutUint64(b[2:], uint64(rng.r.Int64()))
	binary.BigEndian.PutUint16(b[:2], uint16(rng.IntN(1<<16)))
	var id ulid.ULID
	_ = id.SetTime(ulid.MaxTime() - uint64(t.UnixMilli()))
	copy(id[6:], b[:])
	return id.String()
}

// outsider returns a client of the world that the adversary leaves alone,
// whose writes the history attributes to name.
func (w *World) outsider(name string) s3test.Objects {
	tag := func(next http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			return next.RoundTrip(r.WithContext(context.WithValue(r.Context(), procKey{}, name)))
		})
	}
	return s3test.Objects{Client: steadyRetries(w.mem.Client(tag)), Bucket: w.mem.Bucket}
}

// plant writes n records no worker can read, each with a marker due now,
// so that they stand at the head of the queue: half corrupt JSON, half of
// a schema version from the future, as a newer version of the library
// would write them during a rolling upgrade. The library must report them
// and go on: they never stop a worker or hide other tasks.
func (w *World) plant(n int) error {
	if n == 0 {
		return nil
	}
	rng := NewRand(w.cfg.Seed, "plant")
	raw := w.outsider("planter")
	now := time.Now()
	for i := range n {
		id := taskID(now.Add(-time.Duration(i)*time.Second), rng)
		body := fmt.Sprintf(`{"schema_version":2,"task_id":%q,"task_type":"a","status":"queued","max_attempts":3}`, id)
		if i%2 == 0 {
			body = fmt.Sprintf(`{"schema_version":1,"task_id":%q,"status":`, id)
		}
		ctx := context.Background()
		if _, err := raw.Put(ctx, w.prefix+id+"/status.json", []byte(body)); err != nil {
			return fmt.Errorf("sim: plant %s: %w", id, err)
		}
		marker := w.prefix + "active/" + now.UTC().Format(markerTimeLayout) + "_" + id
		if _, err := raw.Put(ctx, marker, nil); err != nil {
			return fmt.Errorf("sim: plant %s: %w", marker, err)
		}
		w.planted[id] = true
		w.h.Planted = append(w.h.Planted, id)
	}
	return nil
}

// vandal deletes the marker of a pending task now and then, in the first
// 90 minutes: an index lost by hand or by a bug, which only Reconcile
// restores (and the checker then requires it to, within the bound the
// reconciler documents, which the run leaves time for). Later, once the
// sleepers (see Run) are older than two reconciler intervals, it deletes
// their markers too.
func (w *World) vandal() {
	rng := NewRand(w.cfg.Seed, "vandal")
	raw := w.outsider("vandal")
	take := func(key string) {
		if err := raw.Delete(context.Background(), key); err == nil {
			w.count("marker-lost")
		}
	}
	until := time.Now().Add(90 * time.Minute)
	for {
		if pause(rng.Dur(5*time.Minute, 20*time.Minute), w.quiet) != 0 {
			return
		}
		if time.Now().After(until) {
			break
		}
		// The markers of tasks that wait for a start hours ahead (not the
		// days ahead of those an operator moves or cancels): nothing but
		// Reconcile puts them back before then.
		var keys []string
		soon, far := time.Now().Add(30*time.Minute), time.Now().Add(12*time.Hour)
		for _, key := range w.mem.Keys(w.prefix + "active/") {
			name := strings.TrimPrefix(key, w.prefix+"active/")
			due, err := time.Parse(markerTimeLayout, strings.SplitN(name, "_", 2)[0])
			if err == nil && due.After(soon) && due.Before(far) && !w.planted[markerTask(name)] {
				keys = append(keys, key)
			}
		}
		if len(keys) > 0 {
			take(keys[rng.IntN(len(keys))])
		}
	}
	at := w.h.Start.Add(2*w.h.Params.ReconcileInterval + rng.Dur(15*time.Minute, 35*time.Minute))
	if pause(time.Until(at), w.quiet) != 0 {
		return
	}
	w.mu.Lock()
	sleepers := slices.Clone(w.sleepers)
	w.mu.Unlock()
	for _, key := range w.mem.Keys(w.prefix + "active/") {
		if slices.Contains(sleepers, markerTask(strings.TrimPrefix(key, w.prefix+"active/"))) {
			take(key)
		}
	}
}
