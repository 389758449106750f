package s3task_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/s3test"
	"github.com/s3task/s3task/s3tasktest"
)

// Sixteen callers, each with its own client, create with one key at once:
// one task is made, and every caller gets it.
func TestCreateWithKeyMakesOneTaskUnderConcurrency(t *testing.T) {
	s3 := s3tasktest.NewS3(t)
	ctx := context.Background()
	const callers = 16
	ids := make([]string, callers)
	var wg sync.WaitGroup
	for i := range callers {
		store := s3.NewStore(t, nil)
		wg.Go(func() {
			task, err := store.Create(ctx, s3task.CreateParams{Key: "order-1234", Name: "import"})
			if err != nil {
				t.Errorf("caller %d: %v", i, err)
				return
			}
			ids[i] = task.ID
		})
	}
	wg.Wait()
	for i, id := range ids {
		if id != ids[0] {
			t.Fatalf("caller %d got task %s, caller 0 got %s", i, id, ids[0])
		}
	}
	store := s3.NewStore(t, nil)
	page, err := store.List(ctx, s3task.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Tasks) != 1 || page.Tasks[0].ID != ids[0] || page.Tasks[0].IdempotencyKey != "order-1234" {
		t.Fatalf("bucket holds %d tasks, want the one task with the key", len(page.Tasks))
	}
	if other, err := store.Create(ctx, s3task.CreateParams{Key: "order-1235"}); err != nil || other.ID == ids[0] {
		t.Errorf("another key: %v, %v; want a new task", other, err)
	}
}

// The cost the docs state: a keyed create is one PUT more than a plain one;
// a repeat is a refused PUT and two GETs, and writes nothing.
func TestCreateWithKeyCost(t *testing.T) {
	s3 := s3tasktest.NewS3(t)
	var c s3test.Counter
	store := s3.NewStore(t, nil, c.Wrap)
	ctx := context.Background()
	first, err := store.Create(ctx, s3task.CreateParams{Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Counts(); got["PUT"] != 2 || c.Total() != 2 {
		t.Errorf("first keyed create: %v, want 2 PUT", c.String())
	}
	c.Reset()
	again, err := store.Create(ctx, s3task.CreateParams{Key: "k", Name: "ignored"})
	if err != nil || again.ID != first.ID || again.Name != "" {
		t.Fatalf("repeat = %v, %v; want the first task as it was", again, err)
	}
	if got := c.Counts(); got["PUT"] != 1 || got["GET"] != 2 || c.Total() != 3 {
		t.Errorf("repeated keyed create: %v, want 1 PUT (refused) and 2 GET", c.String())
	}
}

// A key is remembered as long as its task exists: Purge keeps a keyed task
// until 10 minutes after the key was written, and after it the key names a
// new task. A key's writer that stopped between the key and the record leaves
// a key the next caller completes within a minute, and takes over after
// two.
func TestCreateWithKeyAfterPurgeAndAfterACrash(t *testing.T) {
	s3 := s3tasktest.NewS3(t)
	store := s3.NewStore(t, nil)
	ctx := context.Background()
	first, err := store.Create(ctx, s3task.CreateParams{Key: "nightly"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Cancel(ctx, first.ID, "test"); err != nil {
		t.Fatal(err)
	}
	purge := func() *s3task.PurgeReport {
		t.Helper()
		rep, err := store.Purge(ctx, s3.Now().Add(time.Hour), s3task.PurgeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	if rep := purge(); len(rep.Purged) != 0 || rep.Kept != 1 {
		t.Fatalf("Purge right after the cancel = %+v, want the keyed task kept", rep)
	}
	s3.Advance(10*time.Minute + time.Second)
	if rep := purge(); len(rep.Purged) != 1 {
		t.Fatalf("Purge 10 minutes after the key = %+v, want it purged", rep)
	}
	if keys := s3.Keys(store.Prefix() + "_keys/"); len(keys) != 1 {
		t.Errorf("key objects after purge: %v, want the one of the purged task's key", keys)
	}
	second, err := store.Create(ctx, s3task.CreateParams{Key: "nightly"})
	if err != nil || second.ID == first.ID {
		t.Fatalf("create after purge = %v, %v; want a new task", second, err)
	}
	if again, err := store.Create(ctx, s3task.CreateParams{Key: "nightly"}); err != nil || again.ID != second.ID {
		t.Fatalf("create again = %v, %v; want %s", again, err, second.ID)
	}

	// A crash between the key and the record: the record is missing.
	cut := s3tasktest.NewS3(t)
	failRecord := func(next http.RoundTripper) http.RoundTripper {
		return s3tasktest.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/status.json") {
				return nil, errors.New("connection reset")
			}
			return next.RoundTrip(r)
		})
	}
	crashing := cut.NewStore(t, &s3task.StoreOptions{}, failRecord)
	if _, err := crashing.Create(ctx, s3task.CreateParams{Key: "k", Name: "first"}); err == nil {
		t.Fatal("create with its record write failing succeeded")
	}
	got, err := cut.NewStore(t, nil).Create(ctx, s3task.CreateParams{Key: "k", Name: "second"})
	if err != nil || got.Name != "second" {
		t.Fatalf("create after a half-made one = %v, %v; want the task made under the key's ID", got, err)
	}
	again, err := cut.NewStore(t, nil).Create(ctx, s3task.CreateParams{Key: "k"})
	if err != nil || again.ID != got.ID {
		t.Errorf("third create = %v, %v; want %s", again, err, got.ID)
	}

	// Too late to write the task under the key's ID, too early to take the
	// key over: a conflict, which a later try resolves with a new task.
	if _, err := crashing.Create(ctx, s3task.CreateParams{Key: "late", Name: "first"}); err == nil {
		t.Fatal("create with its record write failing succeeded")
	}
	cut.Advance(90 * time.Second)
	if got, err := cut.NewStore(t, nil).Create(ctx, s3task.CreateParams{Key: "late"}); !errors.Is(err, s3task.ErrConflict) {
		t.Errorf("create 90 s after a half-made one = %v, %v; want ErrConflict", got, err)
	}
	cut.Advance(time.Minute)
	late, err := cut.NewStore(t, nil).Create(ctx, s3task.CreateParams{Key: "late", Name: "new"})
	if err != nil || late.Name != "new" {
		t.Fatalf("create 150 s after a half-made one = %v, %v; want a new task", late, err)
	}
	if again, err := cut.NewStore(t, nil).Create(ctx, s3task.CreateParams{Key: "late"}); err != nil || again.ID != late.ID {
		t.Errorf("create after the takeover = %v, %v; want %s", again, err, late.ID)
	}
}

// liveWithKey returns the IDs of the tasks whose records carry key and are
// not being purged, read behind the library's back.
func liveWithKey(t *testing.T, s3 *s3tasktest.S3, prefix, key string) []string {
	t.Helper()
	var ids []string
	for _, k := range s3.Keys(prefix) {
		if !strings.HasSuffix(k, "/status.json") {
			continue
		}
		body, _ := s3.Object(k)
		var rec struct {
			ID      string `json:"task_id"`
			Key     string `json:"idempotency_key"`
			Purging bool   `json:"purging"`
		}
		if err := json.Unmarshal(body, &rec); err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		if rec.Key == key && !rec.Purging {
			ids = append(ids, rec.ID)
		}
	}
	return ids
}

// holdFirst returns a transport wrapper that holds the first request match
// accepts until release is closed, and closes held when it holds it.
func holdFirst(match func(r *http.Request) bool, held, release chan struct{}) func(http.RoundTripper) http.RoundTripper {
	var once sync.Once
	return func(next http.RoundTripper) http.RoundTripper {
		return s3tasktest.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			if match(r) {
				hold := false
				once.Do(func() { hold = true })
				if hold {
					close(held)
					<-release
				}
			}
			return next.RoundTrip(r)
		})
	}
}

// cancelledWithKey returns an in-process S3, a Store on it, and a task
// created with key and cancelled, whose key was written 11 minutes ago by
// the server's clock: a Purge may delete it.
func cancelledWithKey(t *testing.T, key string) (*s3tasktest.S3, *s3task.Store, *s3task.Task) {
	t.Helper()
	s3 := s3tasktest.NewS3(t)
	store := s3.NewStore(t, nil)
	ctx := context.Background()
	task, err := store.Create(ctx, s3task.CreateParams{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Cancel(ctx, task.ID, "test"); err != nil {
		t.Fatal(err)
	}
	s3.Advance(11 * time.Minute)
	return s3, store, task
}

// TestCreateWithKeyRacingPurge: a Create that finds its key naming a task
// and reads the task's record while a Purge deletes it must not write that
// task again. It did: the purged task came back (status created) under a
// key the Purge had deleted, and the next Create with the key made another
// task, so one key had two live tasks.
func TestCreateWithKeyRacingPurge(t *testing.T) {
	s3, store, first := cancelledWithKey(t, "k")
	ctx := context.Background()

	held, release := make(chan struct{}), make(chan struct{})
	racing := s3.NewStore(t, nil, holdFirst(func(r *http.Request) bool {
		return r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/"+first.ID+"/status.json")
	}, held, release))
	type result struct {
		task *s3task.Task
		err  error
	}
	done := make(chan result, 1)
	go func() {
		got, err := racing.Create(ctx, s3task.CreateParams{Key: "k", Name: "racing"})
		done <- result{got, err}
	}()
	<-held // it has read the key, which names the first task
	if rep, err := store.Purge(ctx, s3.Now().Add(time.Hour), s3task.PurgeOptions{}); err != nil || len(rep.Purged) != 1 {
		t.Fatalf("Purge = %+v, %v", rep, err)
	}
	close(release)
	r := <-done
	if r.err != nil {
		t.Fatalf("the racing Create: %v", r.err)
	}
	if r.task.ID == first.ID {
		t.Errorf("the racing Create returned the purged task %s", first.ID)
	}
	if _, ok := s3.Object(store.Prefix() + first.ID + "/status.json"); ok {
		t.Errorf("the purged task %s has a record again", first.ID)
	}
	next, err := store.Create(ctx, s3task.CreateParams{Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if next.ID != r.task.ID {
		t.Errorf("the next Create returned %s, want the racing Create's %s", next.ID, r.task.ID)
	}
	if live := liveWithKey(t, s3, store.Prefix(), "k"); len(live) != 1 {
		t.Errorf("live tasks with the key: %v, want one", live)
	}
}

// TestCreateWithKeyRacingTwoPurges: two Purges of one keyed task race,
// and a Create of the key comes between them. Each Purge read the key's
// object and then deleted it, whatever it named by then: the second
// deleted the key of the new task, and the next Create made another one.
func TestCreateWithKeyRacingTwoPurges(t *testing.T) {
	s3, store, first := cancelledWithKey(t, "k")
	ctx := context.Background()

	// The first Purge is held at its delete of the key's object, if it
	// deletes it.
	held, release := make(chan struct{}), make(chan struct{})
	slow := s3.NewStore(t, nil, holdFirst(func(r *http.Request) bool {
		return r.Method == http.MethodDelete && strings.Contains(r.URL.Path, "/_keys/")
	}, held, release))
	done := make(chan error, 1)
	go func() {
		_, err := slow.Purge(ctx, s3.Now().Add(time.Hour), s3task.PurgeOptions{})
		done <- err
	}()
	finished := false
	select {
	case <-held:
	case err := <-done: // it did not touch the key
		if err != nil {
			t.Fatal(err)
		}
		finished = true
	}
	if _, err := store.Purge(ctx, s3.Now().Add(time.Hour), s3task.PurgeOptions{}); err != nil {
		t.Fatal(err)
	}
	second, err := store.Create(ctx, s3task.CreateParams{Key: "k", Name: "second"})
	if err != nil || second.ID == first.ID {
		t.Fatalf("Create after the purge = %v, %v; want a new task", second, err)
	}
	close(release)
	if !finished {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	third, err := store.Create(ctx, s3task.CreateParams{Key: "k", Name: "third"})
	if err != nil || third.ID != second.ID {
		t.Errorf("Create after both purges = %v, %v; want %s", third, err, second.ID)
	}
	if live := liveWithKey(t, s3, store.Prefix(), "k"); len(live) != 1 {
		t.Errorf("live tasks with the key: %v, want one", live)
	}
}

func TestCreateRefusesBadKeys(t *testing.T) {
	store := s3tasktest.NewStore(t, nil)
	for _, key := range []string{strings.Repeat("k", 257), "tab\there", "\xff"} {
		if _, err := store.Create(context.Background(), s3task.CreateParams{Key: key}); !errors.Is(err, s3task.ErrInvalidArgument) {
			t.Errorf("Create with key %.20q = %v, want ErrInvalidArgument", key, err)
		}
	}
}
