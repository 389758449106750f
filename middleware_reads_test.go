package s3task_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/s3test"
	"github.com/s3task/s3task/s3tasktest"
)

type guardTenantKey struct{}

var errOtherTenant = errors.New("not your tenant's task")

// tenantGuard is an authorisation check written once: a create is stamped
// with the caller's tenant, and every call on a task, read or write, is
// refused unless the task's record carries the caller's tenant.
func tenantGuard(next s3task.CallFunc) s3task.CallFunc {
	return func(ctx context.Context, c *s3task.Call) (*s3task.Task, error) {
		tenant, _ := ctx.Value(guardTenantKey{}).(string)
		switch {
		case c.Op == s3task.OpCreate:
			meta := map[string]string{"tenant": tenant}
			for k, v := range c.Params.Metadata {
				meta[k] = v
			}
			c.Params.Metadata = meta
		case c.Op == s3task.OpList:
			filter := map[string]string{"tenant": tenant}
			for k, v := range c.List.Metadata {
				filter[k] = v
			}
			c.List.Metadata = filter
		case c.Op == s3task.OpStats && tenant != "admin":
			return nil, errOtherTenant
		case c.TaskID != "" && c.Task != nil && c.Task.Metadata["tenant"] != tenant:
			return nil, errOtherTenant
		}
		return next(ctx, c)
	}
}

func asTenant(tenant string) context.Context {
	return context.WithValue(context.Background(), guardTenantKey{}, tenant)
}

// One middleware guards every call on a task: another tenant can neither
// read, download, upload, nor change it, and nothing changes when refused;
// the owner can do all of it.
func TestStoreMiddlewareGuardsReadsAndWrites(t *testing.T) {
	s3 := s3tasktest.NewS3(t)
	store := s3.NewStore(t, &s3task.StoreOptions{Middleware: []s3task.StoreMiddleware{tenantGuard}})
	acme, evil := asTenant("acme"), asTenant("evil")
	created, err := store.Create(acme, s3task.CreateParams{Name: "acme's"})
	if err != nil {
		t.Fatal(err)
	}
	id := created.ID
	if created.Metadata["tenant"] != "acme" {
		t.Fatalf("created with metadata %v, want the tenant stamped", created.Metadata)
	}
	before := s3.Keys("")

	refused := map[string]error{}
	_, refused["Get"] = store.Get(evil, id)
	_, refused["PresignUpload"] = store.PresignUpload(evil, id, time.Minute)
	_, refused["PresignUploadForm"] = store.PresignUploadForm(evil, id, time.Minute)
	refused["UploadInput"] = store.UploadInput(evil, id, strings.NewReader("evil"))
	_, refused["Submit"] = store.Submit(evil, id)
	_, refused["Schedule"] = store.Schedule(evil, id, time.Now().Add(time.Hour))
	_, refused["Cancel"] = store.Cancel(evil, id, "mine now")
	for call, err := range refused {
		if !errors.Is(err, errOtherTenant) {
			t.Errorf("%s by another tenant: %v, want the middleware's refusal", call, err)
		}
	}
	if after := s3.Keys(""); strings.Join(after, ",") != strings.Join(before, ",") {
		t.Errorf("refused calls changed the bucket: %v, then %v", before, after)
	}

	if err := store.UploadInput(acme, id, strings.NewReader("a,b\n")); err != nil {
		t.Fatalf("owner's upload: %v", err)
	}
	if _, err := store.Submit(acme, id); err != nil {
		t.Fatalf("owner's submit: %v", err)
	}
	if res := s3tasktest.Run(t, store, s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		return job.WriteOutput(ctx, strings.NewReader("done"))
	}), id); res.Task.Status != s3task.StatusCompleted {
		t.Fatalf("run: %s", res.Task.Status)
	}
	if _, err := store.PresignDownload(evil, id, time.Minute); !errors.Is(err, errOtherTenant) {
		t.Errorf("PresignDownload by another tenant: %v", err)
	}
	if _, err := store.OpenOutput(evil, id); !errors.Is(err, errOtherTenant) {
		t.Errorf("OpenOutput by another tenant: %v", err)
	}
	if _, err := store.Retry(evil, id); !errors.Is(err, errOtherTenant) {
		t.Errorf("Retry by another tenant: %v", err)
	}
	out, err := store.OpenOutput(acme, id)
	if err != nil {
		t.Fatalf("owner's OpenOutput: %v", err)
	}
	b, _ := io.ReadAll(out)
	out.Close()
	if string(b) != "done" {
		t.Errorf("owner read %q", b)
	}
	if _, err := store.PresignDownload(acme, id, time.Minute); err != nil {
		t.Errorf("owner's PresignDownload: %v", err)
	}
	// An unknown task reaches the middleware without a record, and the
	// call fails as before.
	if _, err := store.Get(acme, s3task.NewID()); !errors.Is(err, s3task.ErrNotFound) {
		t.Errorf("Get of no task: %v, want ErrNotFound", err)
	}
}

// The middleware sees the record the call uses, so reads and writes cost
// what they did: Get one GET, a presign one GET, OpenOutput two, Submit and
// Cancel their own requests and no more.
func TestStoreMiddlewareCostsNoRequest(t *testing.T) {
	s3 := s3tasktest.NewS3(t)
	var c s3test.Counter
	seen := map[s3task.Op]bool{}
	store := s3.NewStore(t, &s3task.StoreOptions{Middleware: []s3task.StoreMiddleware{
		func(next s3task.CallFunc) s3task.CallFunc {
			return func(ctx context.Context, call *s3task.Call) (*s3task.Task, error) {
				seen[call.Op] = call.Task != nil || call.TaskID == ""
				return next(ctx, call)
			}
		},
	}}, c.Wrap)
	ctx := context.Background()
	task, err := store.Create(ctx, s3task.CreateParams{})
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		name string
		do   func() error
		want map[string]int
	}{
		{"Get", func() error { _, err := store.Get(ctx, task.ID); return err }, map[string]int{"GET": 1}},
		{"PresignUpload", func() error { _, err := store.PresignUpload(ctx, task.ID, time.Minute); return err }, map[string]int{"GET": 1}},
		{"UploadInput", func() error { return store.UploadInput(ctx, task.ID, strings.NewReader("x")) }, map[string]int{"GET": 1, "PUT": 1}},
		{"Submit", func() error { _, err := store.Submit(ctx, task.ID); return err }, map[string]int{"GET": 2, "HEAD": 1, "PUT": 3}},
	} {
		c.Reset()
		if err := step.do(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		got := c.Counts()
		for op, n := range step.want {
			if got[op] != n {
				t.Errorf("%s: %s, want %v", step.name, c.String(), step.want)
				break
			}
		}
		if total := c.Total(); total != sum(step.want) {
			t.Errorf("%s: %d requests (%s), want %d", step.name, total, c.String(), sum(step.want))
		}
	}
	for _, op := range []s3task.Op{s3task.OpCreate, s3task.OpGet, s3task.OpPresignUpload, s3task.OpUploadInput, s3task.OpSubmit} {
		if !seen[op] {
			t.Errorf("the middleware did not see %s with its record", op)
		}
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// Call.Task is a copy: a middleware that scribbles on it changes neither
// what the call decides nor what it returns. A middleware that returns
// without an error and without passing the call on gets an error back,
// not a panic.
func TestStoreMiddlewareEdgeCases(t *testing.T) {
	scribble := func(next s3task.CallFunc) s3task.CallFunc {
		return func(ctx context.Context, c *s3task.Call) (*s3task.Task, error) {
			if c.Task != nil {
				c.Task.Status, c.Task.Name = s3task.StatusCompleted, "scribbled"
			}
			return next(ctx, c)
		}
	}
	store := s3tasktest.NewStore(t, &s3task.StoreOptions{Middleware: []s3task.StoreMiddleware{scribble}})
	ctx := context.Background()
	task, err := store.Create(ctx, s3task.CreateParams{Name: "plain"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := store.Get(ctx, task.ID)
	if err != nil || got.Name != "plain" || got.Status != s3task.StatusCreated {
		t.Errorf("Get after a scribbling middleware: %v %v", got, err)
	}
	if _, err := store.PresignUpload(ctx, task.ID, time.Minute); err != nil {
		t.Errorf("PresignUpload decided on the scribbled copy: %v", err)
	}

	swallow := func(next s3task.CallFunc) s3task.CallFunc {
		return func(ctx context.Context, c *s3task.Call) (*s3task.Task, error) {
			if c.Op.Writes() {
				return next(ctx, c)
			}
			return nil, nil
		}
	}
	store = s3tasktest.NewStore(t, &s3task.StoreOptions{Middleware: []s3task.StoreMiddleware{swallow}})
	if task, err = store.Create(ctx, s3task.CreateParams{}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.PresignUpload(ctx, task.ID, time.Minute); err == nil || !strings.Contains(err.Error(), "without passing the presign_upload call on") {
		t.Errorf("PresignUpload swallowed by a middleware: %v, want an error that says so", err)
	}
	if _, err := store.Stats(ctx, s3task.StatsOptions{}); err == nil {
		t.Errorf("Stats swallowed by a middleware: no error")
	}
}

// A worker's own reads do not pass through the Store's middleware: one
// that refuses every read leaves RunTask working.
func TestWorkerReadsBypassStoreMiddleware(t *testing.T) {
	noReads := func(next s3task.CallFunc) s3task.CallFunc {
		return func(ctx context.Context, c *s3task.Call) (*s3task.Task, error) {
			if !c.Op.Writes() {
				return nil, errors.New("reads are refused")
			}
			return next(ctx, c)
		}
	}
	store := s3tasktest.NewStore(t, &s3task.StoreOptions{Middleware: []s3task.StoreMiddleware{noReads}})
	task := s3tasktest.Submit(t, store, s3task.CreateParams{}, []byte("x"))
	w, err := s3task.NewWorker(store, s3task.HandlerFunc(func(context.Context, *s3task.Job) error { return nil }), nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := w.RunTask(context.Background(), task.ID)
	if err != nil || got.Status != s3task.StatusCompleted {
		t.Errorf("RunTask under a middleware refusing reads: %v, %v", got, err)
	}
}

func TestOpWrites(t *testing.T) {
	writes := []s3task.Op{s3task.OpCreate, s3task.OpSubmit, s3task.OpCancel, s3task.OpRetry, s3task.OpPurge, s3task.OpSchedule, s3task.OpUploadInput, s3task.OpPause, s3task.OpResume}
	reads := []s3task.Op{s3task.OpGet, s3task.OpPresignUpload, s3task.OpPresignDownload, s3task.OpOpenOutput, s3task.OpList, s3task.OpStats, s3task.OpWorkers, s3task.OpPeriodics, s3task.OpPaused}
	for _, op := range writes {
		if !op.Writes() {
			t.Errorf("%s.Writes() = false", op)
		}
	}
	for _, op := range reads {
		if op.Writes() {
			t.Errorf("%s.Writes() = true", op)
		}
	}
}

// The same middleware narrows every listing to the caller's tenant, and
// the pages stay full: the Store filters as it reads. Stats is for the
// admin only.
func TestStoreMiddlewareNarrowsLists(t *testing.T) {
	store := s3tasktest.NewStore(t, &s3task.StoreOptions{Middleware: []s3task.StoreMiddleware{tenantGuard}})
	acme, evil := asTenant("acme"), asTenant("evil")
	var mine []string
	for i := range 30 {
		ctx := evil
		if i%3 == 0 {
			ctx = acme
		}
		task, err := store.Create(ctx, s3task.CreateParams{})
		if err != nil {
			t.Fatal(err)
		}
		if ctx == acme {
			mine = append([]string{task.ID}, mine...) // newest first
		}
	}
	var got []string
	opts := s3task.ListOptions{Limit: 4}
	for {
		page, err := store.List(acme, opts)
		if err != nil {
			t.Fatal(err)
		}
		if page.NextCursor != "" && len(page.Tasks) != 4 {
			t.Errorf("a page of %d before the end, want full pages of 4", len(page.Tasks))
		}
		for _, task := range page.Tasks {
			got = append(got, task.ID)
		}
		if page.NextCursor == "" {
			break
		}
		opts.Cursor = page.NextCursor
	}
	if strings.Join(got, ",") != strings.Join(mine, ",") {
		t.Errorf("acme listed %d tasks, want its own %d, newest first", len(got), len(mine))
	}
	if _, err := store.Stats(acme, s3task.StatsOptions{}); !errors.Is(err, errOtherTenant) {
		t.Errorf("Stats by a tenant: %v, want refused", err)
	}
	if stats, err := store.Stats(asTenant("admin"), s3task.StatsOptions{}); err != nil || stats.Tasks != 30 {
		t.Errorf("Stats by the admin: %v, %v; want 30 tasks", stats, err)
	}
}
