package s3task_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/s3tasktest"
)

// scaleArgs names its task type with a value receiver.
type scaleArgs struct {
	Width int `json:"width"`
}

func (scaleArgs) TaskType() string { return "scale" }

// importArgs names its task type with a pointer receiver.
type importArgs struct {
	Table string `json:"table"`
}

func (*importArgs) TaskType() string { return "import" }

// brokenArgs' TaskType panics on its zero value.
type brokenArgs struct{ kind *string }

func (b *brokenArgs) TaskType() string { return *b.kind }

// Create takes the type from Args that name one, with either receiver, and
// refuses a Type that contradicts them or a TaskType that panics; nothing
// is written for a refused call.
func TestCreateTakesTypeFromArgs(t *testing.T) {
	s3 := s3tasktest.NewS3(t)
	store := s3.NewStore(t, nil)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		p    s3task.CreateParams
		want string
	}{
		{"value receiver", s3task.CreateParams{Args: scaleArgs{Width: 64}}, "scale"},
		{"pointer receiver, value given", s3task.CreateParams{Args: importArgs{Table: "t"}}, "import"},
		{"pointer given", s3task.CreateParams{Args: &importArgs{Table: "t"}}, "import"},
		{"the same type given too", s3task.CreateParams{Type: "scale", Args: scaleArgs{}}, "scale"},
		{"args without a type", s3task.CreateParams{Type: "x", Args: map[string]int{"a": 1}}, "x"},
	} {
		task, err := store.Create(ctx, tc.p)
		if err != nil || task.Type != tc.want {
			t.Errorf("%s: Create = %v, %v; want type %q", tc.name, task, err, tc.want)
		}
	}
	before := len(s3.Keys(""))
	for _, tc := range []struct {
		name string
		p    s3task.CreateParams
	}{
		{"contradicting type", s3task.CreateParams{Type: "thumbnail", Args: scaleArgs{}}},
		{"panicking TaskType", s3task.CreateParams{Args: &brokenArgs{}}},
	} {
		if _, err := store.Create(ctx, tc.p); !errors.Is(err, s3task.ErrInvalidArgument) {
			t.Errorf("%s: Create error = %v, want ErrInvalidArgument", tc.name, err)
		}
	}
	if after := len(s3.Keys("")); after != before {
		t.Errorf("refused creates wrote %d objects", after-before)
	}
}

// A store middleware sees the type the Args named, not an empty one.
func TestMiddlewareSeesTypeFromArgs(t *testing.T) {
	var seen string
	store := s3tasktest.NewStore(t, &s3task.StoreOptions{Middleware: []s3task.StoreMiddleware{
		func(next s3task.CallFunc) s3task.CallFunc {
			return func(ctx context.Context, c *s3task.Call) (*s3task.Task, error) {
				if c.Op == s3task.OpCreate {
					seen = c.Params.Type
				}
				return next(ctx, c)
			}
		},
	}})
	if _, err := store.Create(context.Background(), s3task.CreateParams{Args: scaleArgs{}}); err != nil {
		t.Fatal(err)
	}
	if seen != "scale" {
		t.Errorf("middleware saw type %q, want resize", seen)
	}
}

// HandleArgs registers under the type T names, and a task created from the
// same Args reaches the handler with them decoded. HandleJSON refuses a
// type that contradicts T's and takes T's for an empty one.
func TestHandleArgs(t *testing.T) {
	var mux s3task.Mux
	var got scaleArgs
	err := s3task.HandleArgs(&mux, func(ctx context.Context, job *s3task.Job, args scaleArgs) error {
		got = args
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s3task.HandleJSON(&mux, "", func(context.Context, *s3task.Job, *importArgs) error { return nil }); err != nil {
		t.Errorf("HandleJSON with an empty type for Args that name one: %v", err)
	}
	if types := strings.Join(mux.Types(), ","); types != "import,scale" {
		t.Errorf("Types() = %s, want import,scale", types)
	}
	err = s3task.HandleJSON(&mux, "thumbnail", func(context.Context, *s3task.Job, scaleArgs) error { return nil })
	if !errors.Is(err, s3task.ErrInvalidArgument) {
		t.Errorf("HandleJSON under another type = %v, want ErrInvalidArgument", err)
	}
	if err := s3task.HandleArgs(&mux, func(context.Context, *s3task.Job, *brokenArgs) error { return nil }); !errors.Is(err, s3task.ErrInvalidArgument) {
		t.Errorf("HandleArgs with a panicking TaskType = %v, want ErrInvalidArgument", err)
	}
	store := s3tasktest.NewStore(t, nil)
	task := s3tasktest.Submit(t, store, s3task.CreateParams{Args: scaleArgs{Width: 640}}, []byte("img"))
	res := s3tasktest.Run(t, store, &mux, task.ID)
	if res.Task.Status != s3task.StatusCompleted || got.Width != 640 {
		t.Errorf("ran to %s with args %+v, want completed with width 640", res.Task.Status, got)
	}
}

// A store told its fleet's types refuses any other, the empty one
// included unless listed, with both sentinels, and writes nothing.
func TestStoreRefusesTypesTheFleetDoesNotServe(t *testing.T) {
	var mux s3task.Mux
	if err := s3task.HandleArgs(&mux, func(context.Context, *s3task.Job, scaleArgs) error { return nil }); err != nil {
		t.Fatal(err)
	}
	s3 := s3tasktest.NewS3(t)
	store := s3.NewStore(t, &s3task.StoreOptions{Types: mux.Types()})
	ctx := context.Background()
	for _, typ := range []string{"scael", ""} {
		_, err := store.Create(ctx, s3task.CreateParams{Type: typ})
		if !errors.Is(err, s3task.ErrUnknownTaskType) || !errors.Is(err, s3task.ErrInvalidArgument) {
			t.Errorf("Create(type %q) = %v, want ErrUnknownTaskType and ErrInvalidArgument", typ, err)
		}
	}
	if keys := s3.Keys(""); len(keys) != 0 {
		t.Errorf("refused creates wrote %v", keys)
	}
	if _, err := store.Create(ctx, s3task.CreateParams{Args: scaleArgs{}}); err != nil {
		t.Errorf("Create of a served type: %v", err)
	}
	untyped := s3.NewStore(t, &s3task.StoreOptions{Types: []string{"scale", ""}})
	if _, err := untyped.Create(ctx, s3task.CreateParams{}); err != nil {
		t.Errorf("Create of an untyped task with \"\" listed: %v", err)
	}
	if _, err := s3task.NewStore(s3.Client(), s3.Bucket(), &s3task.StoreOptions{Types: []string{strings.Repeat("x", 129)}}); !errors.Is(err, s3task.ErrInvalidOptions) {
		t.Errorf("NewStore with a 129-byte type = %v, want ErrInvalidOptions", err)
	}
}

// CreateOrGet says whether the call made the task: the first call with a
// key did, every later one found it, a call without a key always makes
// one; a middleware reads the same in Call.Found.
func TestCreateOrGetTellsFoundFromMade(t *testing.T) {
	var founds []bool
	store := s3tasktest.NewStore(t, &s3task.StoreOptions{Middleware: []s3task.StoreMiddleware{
		func(next s3task.CallFunc) s3task.CallFunc {
			return func(ctx context.Context, c *s3task.Call) (*s3task.Task, error) {
				task, err := next(ctx, c)
				if c.Op == s3task.OpCreate {
					founds = append(founds, c.Found)
				}
				return task, err
			}
		},
	}})
	ctx := context.Background()
	first, found, err := store.CreateOrGet(ctx, s3task.CreateParams{Key: "order-7"})
	if err != nil || found {
		t.Fatalf("first keyed call: found %v, %v; want made", found, err)
	}
	again, found, err := store.CreateOrGet(ctx, s3task.CreateParams{Key: "order-7"})
	if err != nil || !found || again.ID != first.ID {
		t.Fatalf("second keyed call: %v found %v, %v; want task %s found", again, found, err, first.ID)
	}
	for range 2 {
		if _, found, err := store.CreateOrGet(ctx, s3task.CreateParams{}); err != nil || found {
			t.Fatalf("call without a key: found %v, %v; want made", found, err)
		}
	}
	if want := []bool{false, true, false, false}; !equalBools(founds, want) {
		t.Errorf("middleware saw Found %v, want %v", founds, want)
	}
}

func equalBools(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// The maker of a keyed task whose record write lost its answer still
// learns it made the task (the write is proved by its revision), and the
// caller's resend learns it found it.
func TestCreateOrGetAfterLostAnswer(t *testing.T) {
	s3 := s3tasktest.NewS3(t)
	var lost atomic.Bool
	store := s3.NewStore(t, nil, func(next http.RoundTripper) http.RoundTripper {
		return s3tasktest.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := next.RoundTrip(r)
			if err == nil && r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/status.json") && lost.CompareAndSwap(false, true) {
				resp.Body.Close()
				return nil, errors.New("injected: answer lost")
			}
			return resp, err
		})
	})
	ctx := context.Background()
	task, found, err := store.CreateOrGet(ctx, s3task.CreateParams{Key: "k"})
	if err != nil || found || !lost.Load() {
		t.Fatalf("keyed create with its answer lost: found %v, %v (lost %v); want made", found, err, lost.Load())
	}
	again, found, err := store.CreateOrGet(ctx, s3task.CreateParams{Key: "k"})
	if err != nil || !found || again.ID != task.ID {
		t.Fatalf("resend: %v found %v, %v; want %s found", again, found, err, task.ID)
	}
}

// Sixteen callers on their own clients race one key: exactly one of them
// is told it made the task.
func TestCreateOrGetOneMakerUnderConcurrency(t *testing.T) {
	s3 := s3tasktest.NewS3(t)
	ctx := context.Background()
	var made atomic.Int32
	ids := sync.Map{}
	var wg sync.WaitGroup
	for range 16 {
		store := s3.NewStore(t, nil)
		wg.Go(func() {
			task, found, err := store.CreateOrGet(ctx, s3task.CreateParams{Key: "race"})
			if err != nil {
				t.Error(err)
				return
			}
			ids.Store(task.ID, true)
			if !found {
				made.Add(1)
			}
		})
	}
	wg.Wait()
	n := 0
	ids.Range(func(any, any) bool { n++; return true })
	if made.Load() != 1 || n != 1 {
		t.Errorf("%d callers made the task, %d distinct tasks; want 1 and 1", made.Load(), n)
	}
}

// CreateForUpload issues an upload only while the task can take one: a
// repeat before the upload gets a fresh one, a repeat after submit none.
func TestCreateForUploadOnlyWhileCreated(t *testing.T) {
	s3 := s3tasktest.NewS3(t)
	store := s3.NewStore(t, nil)
	ctx := context.Background()
	p := s3task.CreateParams{Key: "upload-1"}
	task, up, err := store.CreateForUpload(ctx, p, 0)
	if !errors.Is(err, s3task.ErrInvalidArgument) {
		t.Fatalf("zero TTL: %v, %v, %v; want ErrInvalidArgument", task, up, err)
	}
	task, up, err = store.CreateForUpload(ctx, p, 60e9)
	if err != nil || up == nil || up.Put == nil || up.Form == nil {
		t.Fatalf("first call: %v, %v, %v", task, up, err)
	}
	again, up, err := store.CreateForUpload(ctx, p, 60e9)
	if err != nil || again.ID != task.ID || up == nil {
		t.Fatalf("repeat before the upload: %v, %v, %v; want the task with an upload", again, up, err)
	}
	if status, body := s3.Do(t, up.Put, []byte("a,b\n")); status != http.StatusOK {
		t.Fatalf("presigned PUT: %d %s", status, body)
	}
	if _, err := store.Submit(ctx, task.ID); err != nil {
		t.Fatal(err)
	}
	again, up, err = store.CreateForUpload(ctx, p, 60e9)
	if err != nil || again.ID != task.ID || again.Status != s3task.StatusQueued || up != nil {
		t.Fatalf("repeat after submit: %v, %v, %v; want the queued task and no upload", again, up, err)
	}
}

// CreateOrGetForUpload says whether the key found the task: false for the
// call that made it, true for each repeat, with a fresh upload before the
// submit and none after it; without a key, false every time.
func TestCreateOrGetForUploadFound(t *testing.T) {
	s3 := s3tasktest.NewS3(t)
	store := s3.NewStore(t, nil)
	ctx := context.Background()
	p := s3task.CreateParams{Key: "upload-2"}
	steps := []struct {
		name      string
		submitted bool // submit the task before this step
		found     bool
		upload    bool
	}{
		{"first call", false, false, true},
		{"repeat before the upload", false, true, true},
		{"repeat after submit", true, true, false},
	}
	var first *s3task.Task
	for _, step := range steps {
		if step.submitted {
			if err := store.UploadInput(ctx, first.ID, strings.NewReader("a,b\n")); err != nil {
				t.Fatal(err)
			}
			if _, err := store.Submit(ctx, first.ID); err != nil {
				t.Fatal(err)
			}
		}
		task, up, found, err := store.CreateOrGetForUpload(ctx, p, time.Minute)
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if first == nil {
			first = task
		}
		if task.ID != first.ID || found != step.found || (up != nil) != step.upload {
			t.Errorf("%s: task %s, found %v, upload %v; want task %s, found %v, upload %v", step.name, task.ID, found, up != nil, first.ID, step.found, step.upload)
		}
	}
	for i := range 2 {
		task, up, found, err := store.CreateOrGetForUpload(ctx, s3task.CreateParams{Name: "no key"}, time.Minute)
		if err != nil || found || up == nil || task.ID == first.ID {
			t.Errorf("call %d without a key: %v, upload %v, found %v, %v; want a new task with an upload, not found", i, task, up != nil, found, err)
		}
	}
	if _, _, found, err := store.CreateOrGetForUpload(ctx, p, 0); found || !errors.Is(err, s3task.ErrInvalidArgument) {
		t.Errorf("zero TTL: found %v, %v; want ErrInvalidArgument", found, err)
	}
}

// Store.Now is the server's clock: on the kit's S3 exactly, and it moves
// with Advance.
func TestStoreNowIsTheServersClock(t *testing.T) {
	s3 := s3tasktest.NewS3(t)
	store := s3.NewStore(t, nil)
	s3.Advance(90 * 60e9)
	got, want := store.Now(), s3.Now()
	if d := want.Sub(got); d < 0 || d > 2e6 {
		t.Errorf("Store.Now = %v, server %v: %v apart, want within 2ms", got, want, d)
	}
}
