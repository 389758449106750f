package s3task

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// The marker index. Every task a worker may have to look at has an empty
// object in the marker folder named after the time from which it needs a
// worker (Task.DueAt, by the server's clock) and its ID:
//
//	batch-tasks/active/20261130T144702.123Z_7ZZZX5Q2M4Y7D6N2J3K8H9G0FA
//
// The time is fixed-width UTC, so S3's ascending listing shows the markers
// due first at the head: the oldest queued task, the retry that fell due,
// the lease that ran out. A worker reads one page and finds its work at the
// top, however long the queue; the first marker not yet due tells it when
// to look again. A claimed task's marker moves to the end of its lease, and
// its holder moves it on while it renews the lease, so running tasks stay
// out of the way of the queue.
//
// A change of phase writes the marker of the new phase before the record
// and deletes the old one after it, so a task that needs a worker always has
// a marker (see commitMarked). Every phase has its own key, so deleting the
// marker of a phase that is over can never delete the marker of the next.

// markerTimeLayout formats a marker's due time: fixed width, so that keys
// sort by time.
const markerTimeLayout = "20060102T150405.000Z"

// pickSpread is how many of the markers due first a worker chooses among at
// random, per free slot, so that workers polling at the same moment do not
// all go for the same task. Pickup stays oldest first within that many
// places per slot.
const pickSpread = 16

// markerPageSize is how many markers one LIST returns.
const markerPageSize = 1000

// marker is one listed marker.
type marker struct {
	key     string
	id      string
	due     time.Time // zero for a key without a time, written by an earlier version
	written time.Time // server clock
	event   bool      // named by an event (Worker.Notify), not found by a listing
	rush    bool      // named by an event while due: every worker told may race for it (see fanout.go)
}

func (s *Store) markerDir() string { return s.opts.Prefix + "active/" }

// MarkerKey returns the key of the active marker t's record calls for,
// <prefix>active/<due>_<id>, whether or not the task needs one now (see
// the package documentation, Markers). An operator's tool can check with
// it that a task waiting for a worker has its marker. A record without
// DueAt, written by an earlier version, calls for the plain
// <prefix>active/<id> of those versions, which workers still read.
func (s *Store) MarkerKey(t *Task) string {
	if t.DueAt.IsZero() {
		return s.markerDir() + t.ID
	}
	return s.markerDir() + t.DueAt.UTC().Format(markerTimeLayout) + "_" + t.ID
}

// parseMarker reads a key in the marker folder; ok is false for anything
// that is not a marker.
func (s *Store) parseMarker(key string) (m marker, ok bool) {
	name, ok := strings.CutPrefix(key, s.markerDir())
	if !ok {
		return marker{}, false
	}
	if ParseID(name) == nil {
		return marker{key: key, id: name}, true
	}
	at, id, ok := strings.Cut(name, "_")
	if !ok || ParseID(id) != nil {
		return marker{}, false
	}
	due, err := time.Parse(markerTimeLayout, at)
	if err != nil {
		return marker{}, false
	}
	return marker{key: key, id: id, due: due}, true
}

// listMarkers returns one page of markers, due first, starting after the
// key after; more says whether the folder holds more. Keys in the folder
// that are not markers go to stray.
func (s *Store) listMarkers(ctx context.Context, after string, limit int) (ms []marker, stray []string, more bool, err error) {
	dir := s.markerDir()
	in := &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: &dir, MaxKeys: aws.Int32(int32(limit))}
	if after != "" {
		in.StartAfter = &after
	}
	out, err := s.client.ListObjectsV2(ctx, in)
	if err != nil {
		return nil, nil, false, fmt.Errorf("s3task: list %s: %w", dir, err)
	}
	s.observe(out.ResultMetadata)
	for _, obj := range out.Contents {
		key := aws.ToString(obj.Key)
		if m, ok := s.parseMarker(key); ok {
			m.written = aws.ToTime(obj.LastModified)
			ms = append(ms, m)
		} else {
			stray = append(stray, key)
		}
	}
	return ms, stray, aws.ToBool(out.IsTruncated) && len(out.Contents) > 0, nil
}

// allMarkers lists the whole marker folder.
func (s *Store) allMarkers(ctx context.Context) (ms []marker, stray []string, err error) {
	after := ""
	for {
		page, st, more, err := s.listMarkers(ctx, after, markerPageSize)
		if err != nil {
			return nil, nil, err
		}
		ms, stray = append(ms, page...), append(stray, st...)
		if !more {
			return ms, stray, nil
		}
		after = max(after, lastKey(page), lastString(st))
	}
}

func lastKey(ms []marker) string {
	if len(ms) == 0 {
		return ""
	}
	return ms[len(ms)-1].key
}

func lastString(ss []string) string {
	if len(ss) == 0 {
		return ""
	}
	return ss[len(ss)-1]
}

// putMarker writes the marker at key, an empty object.
func (s *Store) putMarker(ctx context.Context, key string) error {
	_, err := s.client.PutObject(ctx, &s3.PutObjectInput{Bucket: &s.bucket, Key: &key, Body: bytes.NewReader(nil), ContentLength: aws.Int64(0)})
	if err != nil {
		return fmt.Errorf("s3task: write marker %s: %w", key, err)
	}
	return nil
}

// dropMarker deletes the marker at key. Markers are only an index, so
// callers may ignore the error, which is also logged: a stale marker is
// removed by the next worker that visits it, a missing one restored by
// Reconcile.
func (s *Store) dropMarker(ctx context.Context, key string) error {
	if _, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: &key}); err != nil {
		if ctx.Err() == nil {
			s.log.WarnContext(ctx, "s3task: delete marker", "key", key, "err", err)
		}
		return fmt.Errorf("s3task: delete marker %s: %w", key, err)
	}
	return nil
}

// markerOf returns the key of the marker t calls for, or "" if it needs
// none.
func (s *Store) markerOf(t *record) string {
	if t == nil || !t.needsMarker() {
		return ""
	}
	return s.MarkerKey(&t.Task)
}

// commitMarked is commit with the marker index kept in step: when next
// calls for a marker cur did not, that marker is written first, so a task
// that needs a worker is never without one; after the write, the marker cur
// called for, and the keys in stale (a marker the caller listed), are
// deleted unless next still calls for them. After a lost compare-and-set the
// marker written for next is taken back unless the record as it is now
// calls for it. On an unknown outcome both stay: a stale marker costs a
// visit, a missing one a wait.
func (s *Store) commitMarked(ctx context.Context, cur *record, etag string, next *record, stale ...string) (*record, string, error) {
	old, want := s.markerOf(cur), s.markerOf(next)
	wrote := false
	if want != "" && want != old {
		if err := s.putMarker(ctx, want); err != nil {
			return nil, "", err
		}
		wrote = true
	}
	got, gotETag, err := s.commit(ctx, cur, etag, next)
	switch {
	case err == nil, errors.Is(err, errOvertaken):
		done := map[string]bool{"": true, s.markerOf(got): true}
		for _, key := range append([]string{old, want}, stale...) {
			if !done[key] {
				done[key] = true
				_ = s.dropMarker(ctx, key)
			}
		}
	case errors.Is(err, errLost) && wrote && s.markerOf(got) != want,
		errors.Is(err, errGone) && wrote: // deleted under us (a Purge)
		_ = s.dropMarker(ctx, want)
	}
	return got, gotETag, err
}

// staleSubmitAge is how long a marker written for a change that never
// landed (a Submit that died between its marker and its record, say) is
// kept before Reconcile takes the change for dead.
const staleSubmitAge = 10 * time.Minute

// staleMarker reports whether m, a marker of task t other than the one its
// record calls for, can go: the task is completed or abandoned, which no
// change follows; or the marker was written before the record's last
// change, so it belongs to a phase that is over; or it is newer than the
// record but so old that the change it was written for evidently never
// landed (a Submit that died, say). A marker newer than the record may
// belong to a change under way, which writes its marker first.
//
// A created task's marker is judged by its age alone. Such a task has no
// phase of its own that a marker could outlive: any marker it has was
// written for a change under way (a Submit) or left by one that died. And
// its record may be the first write of a Store that had not yet seen the
// server's clock (Create reads nothing first), so its updated_at can lie
// ahead of the server's time by the error of that Store's clock.
func staleMarker(m marker, t *record, now time.Time) bool {
	switch {
	case t.Status == StatusCompleted || t.Status == StatusAbandoned:
		return true // nothing follows these: no change can be under way
	case t.Status == StatusCreated:
	case m.written.Before(t.UpdatedAt.Add(-markerSkew)):
		return true
	}
	return now.Sub(m.written) > staleSubmitAge
}
