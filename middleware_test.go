package s3task_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/s3tasktest"
)

// trail records the steps of middleware and handlers, safe for concurrent
// use.
type trail struct {
	mu    sync.Mutex
	steps []string
}

func (tr *trail) add(format string, args ...any) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.steps = append(tr.steps, fmt.Sprintf(format, args...))
}

func (tr *trail) get() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]string(nil), tr.steps...)
}

type ctxKey struct{}

// named returns a middleware that notes its name around the call, passes
// its name to the handler in the context, and hands the error on through
// change.
func named(tr *trail, name string, change func(error) error) s3task.Middleware {
	return func(next s3task.Handler) s3task.Handler {
		return s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
			tr.add("%s in: attempt %d, tenant %s", name, job.Task.Attempt, job.Task.Metadata["tenant"])
			err := next.Work(context.WithValue(ctx, ctxKey{}, name), job)
			tr.add("%s out: %v", name, err)
			return change(err)
		})
	}
}

func same(err error) error { return err }

// Middleware runs outermost first around every attempt, sees the job and
// its metadata, reaches the handler through the context, and the error
// the outermost returns is what the worker records.
func TestWorkerMiddlewareOrderAndResult(t *testing.T) {
	s3 := s3tasktest.NewS3(t)
	store := s3.NewStore(t, nil)
	var tr trail
	handler := s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		tr.add("handler: innermost middleware %v", ctx.Value(ctxKey{}))
		return errors.New("boom")
	})
	opts := &s3task.WorkerOptions{Middleware: []s3task.Middleware{
		named(&tr, "outer", func(err error) error { return s3task.Permanent(fmt.Errorf("outer saw: %w", err)) }),
		named(&tr, "inner", same),
	}}
	task := s3tasktest.Submit(t, store, s3task.CreateParams{Name: "m", MaxAttempts: 3, Metadata: map[string]string{"tenant": "acme"}}, []byte("x"))
	res := s3tasktest.Run(t, store, handler, task.ID, opts)

	want := []string{
		"outer in: attempt 1, tenant acme",
		"inner in: attempt 1, tenant acme",
		"handler: innermost middleware inner",
		"inner out: boom",
		"outer out: boom",
	}
	if diff := gocmp.Diff(want, tr.get()); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
	if res.Err == nil || res.Err.Error() != "boom" {
		t.Errorf("Result.Err = %v, want the handler's own error", res.Err)
	}
	// The outer middleware made the error permanent: no retry, with its
	// message, although attempts were left.
	if got := res.Task; got.Status != s3task.StatusFailed || !got.Terminal() ||
		got.LastError != "outer saw: boom" || got.ErrorCategory != s3task.CategoryPermanent {
		t.Errorf("record = %s, terminal %v, %q, %q; want the outer middleware's permanent failure",
			got.Status, got.Terminal(), got.LastError, got.ErrorCategory)
	}
}

// A middleware may turn a failure into a success, and the worker then
// completes the task.
func TestWorkerMiddlewareCanCompleteAttempt(t *testing.T) {
	store := s3tasktest.NewStore(t, nil)
	task := s3tasktest.Submit(t, store, s3task.CreateParams{Name: "m"}, []byte("x"))
	forgive := func(next s3task.Handler) s3task.Handler {
		return s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
			if err := next.Work(ctx, job); err != nil {
				return job.WriteOutput(ctx, strings.NewReader("forgiven: "+err.Error()))
			}
			return nil
		})
	}
	h := s3task.HandlerFunc(func(context.Context, *s3task.Job) error { return errors.New("late") })
	res := s3tasktest.Run(t, store, h, task.ID, &s3task.WorkerOptions{Middleware: []s3task.Middleware{forgive}})
	if res.Task.Status != s3task.StatusCompleted || string(res.Output) != "forgiven: late" {
		t.Errorf("status %s, output %q; want completed with the middleware's output", res.Task.Status, res.Output)
	}
}

// A panic in the handler passes up through the middleware, where a
// deferred recover sees it; the worker still records it as a panic when
// the middleware panics again, and as the middleware's error when it
// does not.
func TestWorkerMiddlewareSeesPanic(t *testing.T) {
	for _, repanic := range []bool{true, false} {
		t.Run(fmt.Sprintf("repanic=%v", repanic), func(t *testing.T) {
			store := s3tasktest.NewStore(t, nil)
			task := s3tasktest.Submit(t, store, s3task.CreateParams{Name: "p", MaxAttempts: 1}, []byte("x"))
			var seen any
			catch := func(next s3task.Handler) s3task.Handler {
				return s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) (err error) {
					defer func() {
						if r := recover(); r != nil {
							seen = r
							if repanic {
								panic(r)
							}
							err = s3task.WithCategory(fmt.Errorf("recovered: %v", r), "crashed")
						}
					}()
					return next.Work(ctx, job)
				})
			}
			h := s3task.HandlerFunc(func(context.Context, *s3task.Job) error { panic("kaput") })
			res := s3tasktest.Run(t, store, h, task.ID, &s3task.WorkerOptions{Middleware: []s3task.Middleware{catch}})
			if seen != "kaput" {
				t.Errorf("middleware recovered %v, want the handler's panic value", seen)
			}
			want := "crashed"
			if repanic {
				want = s3task.CategoryPanic
			}
			if res.Task.Status != s3task.StatusFailed || res.Task.ErrorCategory != want {
				t.Errorf("record: %s, category %q; want failed, %q", res.Task.Status, res.Task.ErrorCategory, want)
			}
		})
	}
}

// Wrapping a Mux in middleware does not widen what the worker claims: a
// task of a type the Mux does not serve stays queued.
func TestWorkerMiddlewareKeepsTypes(t *testing.T) {
	store := s3tasktest.NewStore(t, nil)
	var mux s3task.Mux
	if err := mux.HandleFunc("resize", func(context.Context, *s3task.Job) error { return nil }); err != nil {
		t.Fatal(err)
	}
	var tr trail
	opts := &s3task.WorkerOptions{Middleware: []s3task.Middleware{named(&tr, "m", same)}}
	served := s3tasktest.Submit(t, store, s3task.CreateParams{Type: "resize"}, []byte("x"))
	other := s3tasktest.Submit(t, store, s3task.CreateParams{Type: "transcode"}, []byte("x"))
	ran := s3tasktest.Drain(t, store, &mux, opts)
	if len(ran) != 1 || ran[0].Task.ID != served.ID || ran[0].Task.Status != s3task.StatusCompleted {
		t.Fatalf("drain ran %d tasks, want only the resize task, completed", len(ran))
	}
	if got, err := store.Get(context.Background(), other.ID); err != nil || got.Status != s3task.StatusQueued || got.Attempt != 0 {
		t.Errorf("the transcode task: %v, %v; want it queued and untouched", got, err)
	}
	if n := len(tr.get()); n != 2 {
		t.Errorf("middleware ran %d steps, want 2 (in and out of the one attempt)", n)
	}
}

func TestMiddlewareOptionsRefused(t *testing.T) {
	store := s3tasktest.NewStore(t, nil)
	h := s3task.HandlerFunc(func(context.Context, *s3task.Job) error { return nil })
	for name, mw := range map[string][]s3task.Middleware{
		"nil middleware": {nil},
		"nil handler":    {func(s3task.Handler) s3task.Handler { return nil }},
	} {
		if _, err := s3task.NewWorker(store, h, &s3task.WorkerOptions{Middleware: mw}); !errors.Is(err, s3task.ErrInvalidOptions) {
			t.Errorf("worker, %s: %v, want ErrInvalidOptions", name, err)
		}
	}
	s3 := s3tasktest.NewS3(t)
	for name, mw := range map[string][]s3task.StoreMiddleware{
		"nil middleware": {nil},
		"nil call":       {func(s3task.CallFunc) s3task.CallFunc { return nil }},
	} {
		if _, err := s3task.NewStore(s3.Client(), s3.Bucket(), &s3task.StoreOptions{Middleware: mw}); !errors.Is(err, s3task.ErrInvalidOptions) {
			t.Errorf("store, %s: %v, want ErrInvalidOptions", name, err)
		}
	}
}

// Store middleware sees every create and change, outermost first, with
// its arguments, and the result; it may add metadata (validated after it),
// or refuse a call, which then changes nothing.
func TestStoreMiddleware(t *testing.T) {
	var tr trail
	logCalls := func(name string) s3task.StoreMiddleware {
		return func(next s3task.CallFunc) s3task.CallFunc {
			return func(ctx context.Context, c *s3task.Call) (*s3task.Task, error) {
				tr.add("%s %s %s", name, c.Op, c.TaskID)
				task, err := next(ctx, c)
				if task != nil {
					tr.add("%s done %s: %s", name, c.Op, task.Status)
				}
				return task, err
			}
		}
	}
	stamp := func(next s3task.CallFunc) s3task.CallFunc {
		return func(ctx context.Context, c *s3task.Call) (*s3task.Task, error) {
			if c.Op == s3task.OpCreate {
				md := maps.Clone(c.Params.Metadata)
				if md == nil {
					md = map[string]string{}
				}
				md["region"] = "eu-1"
				c.Params.Metadata = md
			}
			if c.Op == s3task.OpCancel && c.Reason == "forbidden" {
				return nil, errors.New("refused by policy")
			}
			return next(ctx, c)
		}
	}
	s3 := s3tasktest.NewS3(t)
	store := s3.NewStore(t, &s3task.StoreOptions{Middleware: []s3task.StoreMiddleware{logCalls("outer"), stamp, logCalls("inner")}})
	ctx := context.Background()

	given := map[string]string{"tenant": "acme"}
	task, err := store.Create(ctx, s3task.CreateParams{Name: "a", Metadata: given})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"tenant": "acme", "region": "eu-1"}; !maps.Equal(task.Metadata, want) {
		t.Errorf("metadata %v, want %v", task.Metadata, want)
	}
	if len(given) != 1 {
		t.Errorf("the caller's map was changed: %v", given)
	}
	id := task.ID
	if err := store.UploadInput(ctx, id, strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Schedule(ctx, id, s3.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Submit(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Cancel(ctx, id, "forbidden"); err == nil || err.Error() != "refused by policy" {
		t.Fatalf("refused cancel: %v", err)
	}
	if got, _ := store.Get(ctx, id); got.Status != s3task.StatusQueued {
		t.Fatalf("after the refused cancel the task is %s, want queued", got.Status)
	}
	if _, err := store.Cancel(ctx, id, "no longer needed"); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Retry(ctx, id); !errors.Is(err, s3task.ErrInvalidTransition) {
		t.Fatalf("retry of an abandoned task: %v", err)
	}
	_, _, err = store.CreateForUpload(ctx, s3task.CreateParams{Name: "b"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"outer create ", "inner create ", "inner done create: created", "outer done create: created",
		"outer upload_input " + id, "inner upload_input " + id, "inner done upload_input: created", "outer done upload_input: created",
		"outer schedule " + id, "inner schedule " + id, "inner done schedule: created", "outer done schedule: created",
		"outer submit " + id, "inner submit " + id, "inner done submit: queued", "outer done submit: queued",
		"outer cancel " + id, // refused by stamp, between the two
		"outer get " + id, "inner get " + id, "inner done get: queued", "outer done get: queued",
		"outer cancel " + id, "inner cancel " + id, "inner done cancel: abandoned", "outer done cancel: abandoned",
		"outer retry " + id, "inner retry " + id,
		"outer create ", "inner create ", "inner done create: created", "outer done create: created",
	}
	if diff := gocmp.Diff(want, tr.get()); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}

	// What a middleware adds is validated like the caller's own.
	bad := s3.NewStore(t, &s3task.StoreOptions{Middleware: []s3task.StoreMiddleware{
		func(next s3task.CallFunc) s3task.CallFunc {
			return func(ctx context.Context, c *s3task.Call) (*s3task.Task, error) {
				c.Params.Metadata = map[string]string{"no spaces": "x"}
				return next(ctx, c)
			}
		},
	}})
	if _, err := bad.Create(ctx, s3task.CreateParams{Name: "c"}); !errors.Is(err, s3task.ErrInvalidArgument) {
		t.Errorf("create with invalid metadata from a middleware: %v, want ErrInvalidArgument", err)
	}
}

// Metadata is stored as given, copied from the caller, and the same after
// every change: attempts, a failure, a Retry, completion.
func TestMetadataKeptThroughLife(t *testing.T) {
	s3 := s3tasktest.NewS3(t)
	store := s3.NewStore(t, nil)
	ctx := context.Background()
	md := map[string]string{"tenant": "acme", "request-id": "r-42", "note": "ünïcode ok"}
	task := s3tasktest.Submit(t, store, s3task.CreateParams{Name: "m", MaxAttempts: 1, Metadata: md}, []byte("x"))
	md["tenant"] = "changed by the caller later"
	want := map[string]string{"tenant": "acme", "request-id": "r-42", "note": "ünïcode ok"}

	var seen []map[string]string
	fail := true
	h := s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		seen = append(seen, maps.Clone(job.Task.Metadata))
		if fail {
			return errors.New("first time fails")
		}
		return job.WriteOutput(ctx, strings.NewReader("ok"))
	})
	res := s3tasktest.Run(t, store, h, task.ID)
	if res.Task.Status != s3task.StatusFailed || !maps.Equal(res.Task.Metadata, want) {
		t.Fatalf("after the failure: %s, %v", res.Task.Status, res.Task.Metadata)
	}
	if _, err := store.Retry(ctx, task.ID); err != nil {
		t.Fatal(err)
	}
	fail = false
	res = s3tasktest.Run(t, store, h, task.ID)
	got := res.Task
	if got.Status != s3task.StatusCompleted || !maps.Equal(got.Metadata, want) {
		t.Fatalf("after the retry: %s, %v", got.Status, got.Metadata)
	}
	if len(seen) != 2 || !maps.Equal(seen[0], want) || !maps.Equal(seen[1], want) {
		t.Errorf("handlers saw %v, want %v twice", seen, want)
	}
	// The times the record keeps for the queue wait.
	if got.SubmittedAt.IsZero() || got.StartedAt.Before(got.SubmittedAt) || got.StartedAt.After(got.UpdatedAt) {
		t.Errorf("submitted %v, started %v, updated %v: want submitted <= started <= updated", got.SubmittedAt, got.StartedAt, got.UpdatedAt)
	}
}

func TestMetadataRefused(t *testing.T) {
	store := s3tasktest.NewStore(t, nil)
	many := map[string]string{}
	for i := range s3task.MaxMetadataEntries + 1 {
		many[fmt.Sprintf("k%d", i)] = "v"
	}
	big := map[string]string{}
	for i := range 9 {
		big[fmt.Sprintf("k%d", i)] = strings.Repeat("v", s3task.MaxMetadataValueLen)
	}
	cases := map[string]map[string]string{
		"too many entries":    many,
		"empty key":           {"": "v"},
		"space in key":        {"a b": "v"},
		"non-ASCII key":       {"tenänt": "v"},
		"long key":            {strings.Repeat("k", s3task.MaxMetadataKeyLen+1): "v"},
		"long value":          {"k": strings.Repeat("v", s3task.MaxMetadataValueLen+1)},
		"invalid UTF-8 value": {"k": "\xff"},
		"too large in all":    big,
	}
	for name, md := range cases {
		if _, err := store.Create(context.Background(), s3task.CreateParams{Name: name, Metadata: md}); !errors.Is(err, s3task.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
	page, err := store.List(context.Background(), s3task.ListOptions{})
	if err != nil || len(page.Tasks) != 0 {
		t.Errorf("refused creates left %d tasks (%v)", len(page.Tasks), err)
	}
	// The limits themselves are allowed.
	edge := map[string]string{strings.Repeat("k", s3task.MaxMetadataKeyLen): strings.Repeat("v", s3task.MaxMetadataValueLen)}
	if _, err := store.Create(context.Background(), s3task.CreateParams{Metadata: edge}); err != nil {
		t.Errorf("metadata at the limits: %v", err)
	}
}
