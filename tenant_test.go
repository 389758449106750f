package s3task_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"maps"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/s3tasktest"
)

// Two tenants, one idempotency key: each gets a task of its own through
// the README's guard; through a guard without the key scope (the README's
// before it had one), the second gets the guard's error, never the first
// tenant's task.

type tenantCtxKey struct{}

var errForbidden = errors.New("forbidden")

func tenantOf(ctx context.Context) string { s, _ := ctx.Value(tenantCtxKey{}).(string); return s }

func withEntry(m map[string]string, k, v string) map[string]string {
	m = maps.Clone(m)
	if m == nil {
		m = map[string]string{}
	}
	m[k] = v
	return m
}

// readmeGuard is the README's tenant guard, as written there.
func readmeGuard(scoped bool) s3task.StoreMiddleware {
	guard := func(next s3task.CallFunc) s3task.CallFunc {
		return func(ctx context.Context, c *s3task.Call) (*s3task.Task, error) {
			tenant := tenantOf(ctx)
			switch {
			case c.Op == s3task.OpCreate:
				c.Params.Metadata = withEntry(c.Params.Metadata, "tenant", tenant) // a copy: the map is the caller's
				if scoped {
					c.Params.KeyScope = tenant // idempotency keys are per tenant
				}
			case c.Op == s3task.OpList:
				c.List.Metadata = map[string]string{"tenant": tenant}
			case c.Task != nil && c.Task.Metadata["tenant"] != tenant:
				return nil, errForbidden
			}
			return next(ctx, c)
		}
	}
	return guard
}

func TestTenantsShareAKey(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "c.Params.KeyScope = tenant") {
		t.Fatal("README.md's guard does not set c.Params.KeyScope: this test runs it as written")
	}
	as := func(tenant string) context.Context {
		return context.WithValue(context.Background(), tenantCtxKey{}, tenant)
	}
	p := s3task.CreateParams{Name: "export", Key: "form-1"}

	t.Run("scoped", func(t *testing.T) {
		store := s3tasktest.NewStore(t, &s3task.StoreOptions{Middleware: []s3task.StoreMiddleware{readmeGuard(true)}})
		a, found, err := store.CreateOrGet(as("acme"), p)
		if err != nil || found {
			t.Fatalf("acme's create: found %t, err %v", found, err)
		}
		b, found, err := store.CreateOrGet(as("globex"), p)
		if err != nil || found {
			t.Fatalf("globex's create with acme's key: found %t, err %v; want a task of its own", found, err)
		}
		if a.ID == b.ID || b.Metadata["tenant"] != "globex" || b.KeyScope != "globex" || b.IdempotencyKey != "form-1" {
			t.Errorf("globex got %+v; want a task of its own (acme's is %s)", b, a.ID)
		}
		again, found, err := store.CreateOrGet(as("acme"), p)
		if err != nil || !found || again.ID != a.ID {
			t.Errorf("acme again: %v, found %t, err %v; want its own task %s, found", again, found, err, a.ID)
		}
		if _, err := store.Get(as("globex"), a.ID); !errors.Is(err, errForbidden) {
			t.Errorf("globex reads acme's task: err %v, want the guard's", err)
		}
	})

	t.Run("unscoped", func(t *testing.T) {
		store := s3tasktest.NewStore(t, &s3task.StoreOptions{Middleware: []s3task.StoreMiddleware{readmeGuard(false)}})
		a, _, err := store.CreateOrGet(as("acme"), p)
		if err != nil {
			t.Fatal(err)
		}
		got, found, err := store.CreateOrGet(as("globex"), p)
		if !errors.Is(err, errForbidden) || got != nil {
			t.Errorf("globex's create with acme's key, no scope: %+v, found %t, err %v; want the guard's error and no task (acme's is %s)", got, found, err, a.ID)
		}
		if again, found, err := store.CreateOrGet(as("acme"), p); err != nil || !found || again.ID != a.ID {
			t.Errorf("acme again: %v, found %t, err %v; want its own task %s", again, found, err, a.ID)
		}
	})
}

// A scoped key has an object of its own, beside the same key's in the
// empty scope, which keeps the name earlier versions gave it (the SHA-256
// of the key); Purge leaves each its tombstone, and a Create in a scope
// takes over only its own.
func TestScopedKeyObjects(t *testing.T) {
	s3 := s3tasktest.NewS3(t)
	store := s3.NewStore(t, nil)
	ctx := context.Background()
	plain, err := store.Create(ctx, s3task.CreateParams{Key: "nightly"})
	if err != nil {
		t.Fatal(err)
	}
	scoped, err := store.Create(ctx, s3task.CreateParams{Key: "nightly", KeyScope: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("nightly"))
	plainKey := store.Prefix() + "_keys/" + hex.EncodeToString(sum[:])
	if body, ok := s3.Object(plainKey); !ok || string(body) != plain.ID {
		t.Fatalf("the unscoped key's object %s holds %q, want %s", plainKey, body, plain.ID)
	}
	keys := s3.Keys(store.Prefix() + "_keys/")
	if len(keys) != 2 || scoped.ID == plain.ID {
		t.Fatalf("key objects %v for two tasks %s and %s; want two", keys, plain.ID, scoped.ID)
	}
	scopedKey := keys[0]
	if scopedKey == plainKey {
		scopedKey = keys[1]
	}
	for _, task := range []*s3task.Task{plain, scoped} {
		if _, err := store.Cancel(ctx, task.ID, "test"); err != nil {
			t.Fatal(err)
		}
	}
	s3.Advance(11 * time.Minute)
	if rep, err := store.Purge(ctx, s3.Now().Add(time.Hour), s3task.PurgeOptions{}); err != nil || len(rep.Purged) != 2 {
		t.Fatalf("Purge = %+v, %v", rep, err)
	}
	for key, id := range map[string]string{plainKey: plain.ID, scopedKey: scoped.ID} {
		if body, _ := s3.Object(key); string(body) != "purged "+id {
			t.Errorf("%s holds %q after the purge, want the tombstone of %s", key, body, id)
		}
	}
	again, found, err := store.CreateOrGet(ctx, s3task.CreateParams{Key: "nightly", KeyScope: "acme"})
	if err != nil || found {
		t.Fatalf("scoped create after the purge: %v, found %t, %v", again, found, err)
	}
	if body, _ := s3.Object(scopedKey); string(body) != again.ID {
		t.Errorf("the scoped key's object holds %q, want the new task %s", body, again.ID)
	}
	if body, _ := s3.Object(plainKey); string(body) != "purged "+plain.ID {
		t.Errorf("the unscoped key's object holds %q, want its tombstone still", body)
	}
	if _, err := store.Create(ctx, s3task.CreateParams{Key: "k", KeyScope: "bad\nscope"}); !errors.Is(err, s3task.ErrInvalidArgument) {
		t.Errorf("a scope with a newline: %v, want ErrInvalidArgument", err)
	}
}
