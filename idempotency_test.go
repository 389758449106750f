package s3task_test

import (
	"context"
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

// A key is remembered as long as its task exists: after Purge it names a
// new task. A key's writer that stopped between the key and the record
// leaves a key the next caller completes.
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
	rep, err := store.Purge(ctx, time.Now().Add(time.Hour), s3task.PurgeOptions{})
	if err != nil || len(rep.Purged) != 1 {
		t.Fatalf("Purge = %+v, %v", rep, err)
	}
	if keys := s3.Keys(store.Prefix() + "_keys/"); len(keys) != 0 {
		t.Errorf("key objects left after purge: %v", keys)
	}
	second, err := store.Create(ctx, s3task.CreateParams{Key: "nightly"})
	if err != nil || second.ID == first.ID {
		t.Fatalf("create after purge = %v, %v; want a new task", second, err)
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
}

func TestCreateRefusesBadKeys(t *testing.T) {
	store := s3tasktest.NewStore(t, nil)
	for _, key := range []string{strings.Repeat("k", 257), "tab\there", "\xff"} {
		if _, err := store.Create(context.Background(), s3task.CreateParams{Key: key}); !errors.Is(err, s3task.ErrInvalidArgument) {
			t.Errorf("Create with key %.20q = %v, want ErrInvalidArgument", key, err)
		}
	}
}
