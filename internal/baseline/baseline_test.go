package baseline

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/s3task/s3task/internal/s3test"
)

// gate holds back the first request that matches, so a test can let other
// clients act in between, as a slow network would.
type gate struct {
	match   func(*http.Request) bool
	once    sync.Once
	reached chan struct{} // closed when the held request arrives
	release chan struct{} // close to let it through
}

func newGate(method, keySuffix string) *gate {
	return &gate{
		match: func(r *http.Request) bool {
			return r.Method == method && strings.HasSuffix(r.URL.Path, keySuffix) && r.Header.Get("X-Amz-Copy-Source") == ""
		},
		reached: make(chan struct{}),
		release: make(chan struct{}),
	}
}

func (g *gate) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTrip(func(r *http.Request) (*http.Response, error) {
		if g.match(r) {
			held := false
			g.once.Do(func() { held = true })
			if held {
				close(g.reached)
				select {
				case <-g.release:
				case <-r.Context().Done():
					return nil, r.Context().Err()
				}
			}
		}
		return next.RoundTrip(r)
	})
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// wait waits for ch with a generous deadline, never a sleep.
func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

type result struct {
	id  string
	err error
}

func popAsync(ctx context.Context, q Queue) <-chan result {
	ch := make(chan result, 1)
	go func() {
		id, err := q.Pop(ctx)
		ch <- result{id, err}
	}()
	return ch
}

func pending(t *testing.T, q *SharedQueue) []string {
	t.Helper()
	f, _, err := q.read(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return f.Pending
}

// setupShared returns an initialised shared queue holding ids, and a
// function that makes another client's view of the same queue.
func setupShared(t *testing.T, conditional bool, ids ...string) (*SharedQueue, func(wrap ...func(http.RoundTripper) http.RoundTripper) *SharedQueue) {
	t.Helper()
	srv := s3test.New(t)
	mk := func(wrap ...func(http.RoundTripper) http.RoundTripper) *SharedQueue {
		return &SharedQueue{Client: srv.Client(wrap...), Bucket: srv.Bucket, Key: "baseline/queue.json", Conditional: conditional}
	}
	q := mk()
	if err := q.Init(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if err := q.Push(t.Context(), id); err != nil {
			t.Fatal(err)
		}
	}
	return q, mk
}

// TestSharedQueueTwoWorkers lets worker A read the queue, then worker B pop
// and write, then A write. Without a condition A's stale copy wins: both
// workers get t1. With If-Match, A's write is refused and A takes t2.
func TestSharedQueueTwoWorkers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		conditional bool
		wantA       string
		wantLeft    []string
	}{
		{false, "t1", []string{"t2", "t3"}}, // t1 handed out twice; t2 still queued though B's pop of t1 happened
		{true, "t2", []string{"t3"}},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("conditional=%v", tc.conditional), func(t *testing.T) {
			t.Parallel()
			q, mk := setupShared(t, tc.conditional, "t1", "t2", "t3")
			g := newGate(http.MethodPut, "/queue.json")
			a, b := mk(g.wrap), mk()

			resA := popAsync(t.Context(), a)
			wait(t, g.reached, "worker A's write")
			idB, err := b.Pop(t.Context())
			if err != nil || idB != "t1" {
				t.Fatalf("worker B popped %q, %v; want t1", idB, err)
			}
			close(g.release)
			var rA result
			select {
			case rA = <-resA:
			case <-time.After(10 * time.Second):
				t.Fatal("worker A never returned")
			}
			if rA.err != nil || rA.id != tc.wantA {
				t.Errorf("worker A popped %q, %v; want %q", rA.id, rA.err, tc.wantA)
			}
			if got := pending(t, q); !slices.Equal(got, tc.wantLeft) {
				t.Errorf("queue holds %v, want %v", got, tc.wantLeft)
			}
		})
	}
}

// TestSharedQueueLostPush lets a worker read the queue, a producer push, then
// the worker write. Without a condition the producer's task is gone for good.
func TestSharedQueueLostPush(t *testing.T) {
	t.Parallel()
	tests := []struct {
		conditional bool
		wantLeft    []string
	}{
		{false, []string{}},    // t9 lost
		{true, []string{"t9"}}, // the worker re-read and kept it
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("conditional=%v", tc.conditional), func(t *testing.T) {
			t.Parallel()
			q, mk := setupShared(t, tc.conditional, "t1")
			g := newGate(http.MethodPut, "/queue.json")
			worker, producer := mk(g.wrap), mk()

			res := popAsync(t.Context(), worker)
			wait(t, g.reached, "the worker's write")
			if err := producer.Push(t.Context(), "t9"); err != nil {
				t.Fatal(err)
			}
			close(g.release)
			r := <-res
			if r.err != nil || r.id != "t1" {
				t.Fatalf("worker popped %q, %v; want t1", r.id, r.err)
			}
			if got := pending(t, q); !slices.Equal(got, tc.wantLeft) {
				t.Errorf("queue holds %v, want %v", got, tc.wantLeft)
			}
		})
	}
}

// TestSharedQueueConditionalConcurrent runs producers and workers at once on
// a conditional queue: every task must come out exactly once.
func TestSharedQueueConditionalConcurrent(t *testing.T) {
	t.Parallel()
	const producers, workers, perProducer = 2, 4, 15
	_, mk := setupShared(t, true)
	ctx := t.Context()
	var (
		mu   sync.Mutex
		seen = map[string]int{}
		wg   sync.WaitGroup
		pwg  sync.WaitGroup
		done = make(chan struct{})
	)
	errs := make(chan error, producers+workers)
	for p := range producers {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			pq := mk()
			for i := range perProducer {
				if err := pq.Push(ctx, fmt.Sprintf("p%d-%02d", p, i)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	go func() { pwg.Wait(); close(done) }()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wq := mk()
			for {
				// Only an empty queue seen after every push finished means
				// the end: a pop that began before the last push may miss it.
				var finished bool
				select {
				case <-done:
					finished = true
				default:
				}
				id, err := wq.Pop(ctx)
				if err != nil {
					errs <- err
					return
				}
				if id == "" {
					if finished {
						return
					}
					continue
				}
				mu.Lock()
				seen[id]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(seen) != producers*perProducer {
		t.Errorf("%d distinct tasks popped, want %d", len(seen), producers*perProducer)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("task %s popped %d times", id, n)
		}
	}
}

func setupRename(t *testing.T, ids ...string) (*RenameQueue, func(wrap ...func(http.RoundTripper) http.RoundTripper) *RenameQueue) {
	t.Helper()
	srv := s3test.New(t)
	mk := func(wrap ...func(http.RoundTripper) http.RoundTripper) *RenameQueue {
		return &RenameQueue{Client: srv.Client(wrap...), Bucket: srv.Bucket, Prefix: "baseline/rename/"}
	}
	q := mk()
	if err := q.Init(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if err := q.Push(t.Context(), id); err != nil {
			t.Fatal(err)
		}
	}
	return q, mk
}

func keys(t *testing.T, q *RenameQueue, folder string) []string {
	t.Helper()
	dir := q.Prefix + folder
	out, err := q.Client.ListObjectsV2(t.Context(), &s3.ListObjectsV2Input{Bucket: &q.Bucket, Prefix: &dir})
	if err != nil {
		t.Fatal(err)
	}
	var ks []string
	for _, o := range out.Contents {
		ks = append(ks, strings.TrimPrefix(aws.ToString(o.Key), dir))
	}
	return ks
}

func TestRenameQueueSequential(t *testing.T) {
	t.Parallel()
	q, _ := setupRename(t, "t1", "t2")
	ctx := t.Context()
	var got []string
	for {
		id, err := q.Pop(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if id == "" {
			break
		}
		got = append(got, id)
	}
	if !slices.Equal(got, []string{"t1", "t2"}) {
		t.Errorf("popped %v, want [t1 t2]", got)
	}
	if ks := keys(t, q, "processing/"); !slices.Equal(ks, []string{"t1", "t2"}) {
		t.Errorf("processing holds %v", ks)
	}
	if err := q.Done(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	if ks := keys(t, q, "processing/"); !slices.Equal(ks, []string{"t2"}) {
		t.Errorf("after Done(t1) processing holds %v, want [t2]", ks)
	}
}

// TestRenameQueueBothWin holds worker A between its copy and its delete:
// worker B still lists t1, copies and deletes it, and both think they won.
func TestRenameQueueBothWin(t *testing.T) {
	t.Parallel()
	q, mk := setupRename(t, "t1")
	g := newGate(http.MethodDelete, "/pending/t1")
	a, b := mk(g.wrap), mk()

	resA := popAsync(t.Context(), a)
	wait(t, g.reached, "worker A's delete")
	idB, err := b.Pop(t.Context())
	if err != nil || idB != "t1" {
		t.Fatalf("worker B popped %q, %v; want t1", idB, err)
	}
	close(g.release)
	rA := <-resA
	if rA.err != nil || rA.id != "t1" {
		t.Fatalf("worker A popped %q, %v; want t1 (the duplicate this design allows)", rA.id, rA.err)
	}
	if ks := keys(t, q, "pending/"); len(ks) != 0 {
		t.Errorf("pending holds %v", ks)
	}
}

// TestRenameQueueLoserMovesOn: a worker whose copy finds the source gone
// tries the next task.
func TestRenameQueueLoserMovesOn(t *testing.T) {
	t.Parallel()
	_, mk := setupRename(t, "t1", "t2")
	g := newGate(http.MethodPut, "/processing/t1")
	g.match = func(r *http.Request) bool {
		return r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/processing/t1")
	}
	a, b := mk(g.wrap), mk()
	resA := popAsync(t.Context(), a) // lists t1, t2; its copy of t1 is held
	wait(t, g.reached, "worker A's copy")
	if id, err := b.Pop(t.Context()); err != nil || id != "t1" {
		t.Fatalf("worker B popped %q, %v; want t1", id, err)
	}
	close(g.release)
	if r := <-resA; r.err != nil || r.id != "t2" {
		t.Errorf("worker A popped %q, %v; want t2", r.id, r.err)
	}
}
