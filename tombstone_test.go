package s3task_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/s3task/s3task"
)

// TestPurgeLeavesTombstone: Purge rewrites a keyed task's key object as a
// tombstone naming the task, which a Create with the key takes over at
// once, and which a second Purge of the same task (one cut short and run
// again) leaves alone.
func TestPurgeLeavesTombstone(t *testing.T) {
	s3, store, first := cancelledWithKey(t, "nightly")
	ctx := context.Background()
	if rep, err := store.Purge(ctx, s3.Now().Add(time.Hour), s3task.PurgeOptions{}); err != nil || len(rep.Purged) != 1 {
		t.Fatalf("Purge = %+v, %v", rep, err)
	}
	keys := s3.Keys(store.Prefix() + "_keys/")
	if len(keys) != 1 {
		t.Fatalf("key objects after the purge: %v, want one", keys)
	}
	if body, _ := s3.Object(keys[0]); string(body) != "purged "+first.ID {
		t.Errorf("the key object holds %q after the purge, want the tombstone of %s", body, first.ID)
	}
	second, found, err := store.CreateOrGet(ctx, s3task.CreateParams{Key: "nightly"})
	if err != nil || found || second.ID == first.ID {
		t.Fatalf("Create after the purge = %v, found %v, %v; want a new task at once", second, found, err)
	}
	if body, _ := s3.Object(keys[0]); string(body) != second.ID {
		t.Errorf("the key object holds %q, want the new task's ID", body)
	}
}

// TestPurgeTombstoneRacingCreate: once Purge has marked the record, a
// Create may take the key over before the Purge writes its tombstone. The
// tombstone, written with If-Match, must not then replace the new task's
// key, or an Ingest of the key would take the live task for a purged one,
// and a Create would make a second task for the key.
func TestPurgeTombstoneRacingCreate(t *testing.T) {
	s3, store, first := cancelledWithKey(t, "k")
	ctx := context.Background()
	held, release := make(chan struct{}), make(chan struct{})
	slow := s3.NewStore(t, nil, holdFirst(func(r *http.Request) bool {
		return r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/_keys/")
	}, held, release))
	done := make(chan error, 1)
	go func() {
		_, err := slow.Purge(ctx, s3.Now().Add(time.Hour), s3task.PurgeOptions{})
		done <- err
	}()
	select {
	case <-held: // the record is marked purging; the tombstone is about to go
	case err := <-done:
		t.Fatalf("the Purge ended (%v) without writing a tombstone", err)
	}
	second, found, err := store.CreateOrGet(ctx, s3task.CreateParams{Key: "k", Name: "second"})
	if err != nil || found || second.ID == first.ID {
		t.Fatalf("Create during the purge = %v, found %v, %v; want a new task", second, found, err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("the Purge: %v", err)
	}
	again, found, err := store.CreateOrGet(ctx, s3task.CreateParams{Key: "k"})
	if err != nil || !found || again.ID != second.ID {
		t.Errorf("Create after the purge = %v, found %v, %v; want %s, found", again, found, err, second.ID)
	}
	if live := liveWithKey(t, s3, store.Prefix(), "k"); len(live) != 1 || live[0] != second.ID {
		t.Errorf("live tasks with the key: %v, want %s alone", live, second.ID)
	}
}

// TestIngestOfTaskBeingPurged: an Ingest whose version's task is marked
// purging, its deletion under way or cut short, says so, and does not take
// the key over.
func TestIngestOfTaskBeingPurged(t *testing.T) {
	s3, store, _ := cancelledWithKey(t, "unused")
	ctx := context.Background()
	bucket, key := s3.Bucket(), "incoming/a.csv"
	put, err := s3.Client().PutObject(ctx, &awss3.PutObjectInput{Bucket: &bucket, Key: &key, Body: strings.NewReader("a\n")})
	if err != nil {
		t.Fatal(err)
	}
	o := s3task.Object{Key: key, ETag: *put.ETag}
	task, err := store.Ingest(ctx, o, s3task.CreateParams{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Cancel(ctx, task.ID, "done"); err != nil {
		t.Fatal(err)
	}
	s3.Advance(11 * time.Minute)
	// The Purge stops after marking the record: every later request fails.
	var marked bool
	dying := s3.NewStore(t, nil, func(next http.RoundTripper) http.RoundTripper {
		return roundTrip(func(r *http.Request) (*http.Response, error) {
			if marked {
				return nil, errors.New("process killed")
			}
			if r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/status.json") {
				marked = true
			}
			return next.RoundTrip(r)
		})
	})
	if _, err := dying.Purge(ctx, s3.Now().Add(time.Hour), s3task.PurgeOptions{}); err == nil {
		t.Fatal("the dying Purge succeeded")
	}
	_, err = store.Ingest(ctx, o, s3task.CreateParams{})
	var pe *s3task.PurgedError
	if !errors.As(err, &pe) || pe.ID != task.ID {
		t.Errorf("Ingest of a version whose task is being purged: %v, want a *PurgedError naming %s", err, task.ID)
	}
	if rep, err := store.Purge(ctx, s3.Now().Add(time.Hour), s3task.PurgeOptions{}); err != nil || !slices.Contains(rep.Purged, task.ID) {
		t.Fatalf("the Purge run again = %+v, %v; want %s purged", rep, err, task.ID)
	}
	if _, err := store.Ingest(ctx, o, s3task.CreateParams{}); !errors.As(err, &pe) || pe.ID != task.ID {
		t.Errorf("Ingest after the purge was completed: %v, want a *PurgedError naming %s", err, task.ID)
	}
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
