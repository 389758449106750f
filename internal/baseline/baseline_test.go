package baseline

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/s3task/s3task/internal/s3test"
)

// hold holds back the first request with method to a key ending in
// keySuffix, other than a copy, until released.
func hold(t *testing.T, method, keySuffix string) *s3test.Hold {
	return s3test.NewHold(t, func(r *http.Request) bool {
		return r.Method == method && strings.HasSuffix(r.URL.Path, keySuffix) && r.Header.Get("X-Amz-Copy-Source") == ""
	})
}

// popWhileHeld has worker a pop while g holds the request named by what:
// once that request is held it runs meanwhile, then lets the request go on,
// and returns what a's Pop returned. It waits for a signal, never a sleep.
func popWhileHeld(t *testing.T, a Queue, g *s3test.Hold, what string, meanwhile func()) (string, error) {
	t.Helper()
	type result struct {
		id  string
		err error
	}
	res := make(chan result, 1)
	go func() {
		id, err := a.Pop(t.Context())
		res <- result{id, err}
	}()
	select {
	case <-g.Arrived():
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
	meanwhile()
	g.Release()
	select {
	case r := <-res:
		return r.id, r.err
	case <-time.After(10 * time.Second):
		t.Fatalf("worker A never returned after %s", what)
		panic("unreachable")
	}
}

// popsT1 is a meanwhile for popWhileHeld: worker b pops t1.
func popsT1(t *testing.T, b Queue) func() {
	return func() {
		if id, err := b.Pop(t.Context()); err != nil || id != "t1" {
			t.Fatalf("worker B popped %q, %v; want t1", id, err)
		}
	}
}

func pending(t *testing.T, q *SharedQueue) []string {
	t.Helper()
	f, _, err := q.read(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return f.Pending
}

// setup returns a queue made by mk on a new server, initialised and
// holding ids, and a function that makes another client's view of it.
func setup[Q Queue](t *testing.T, mk func(c *s3.Client, bucket string) Q, ids ...string) (Q, func(wrap ...func(http.RoundTripper) http.RoundTripper) Q) {
	t.Helper()
	srv := s3test.New(t)
	view := func(wrap ...func(http.RoundTripper) http.RoundTripper) Q { return mk(srv.Client(wrap...), srv.Bucket) }
	q := view()
	if err := q.Init(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if err := q.Push(t.Context(), id); err != nil {
			t.Fatal(err)
		}
	}
	return q, view
}

// setupShared is setup for a shared queue.
func setupShared(t *testing.T, conditional bool, ids ...string) (*SharedQueue, func(wrap ...func(http.RoundTripper) http.RoundTripper) *SharedQueue) {
	t.Helper()
	return setup(t, func(c *s3.Client, bucket string) *SharedQueue {
		return &SharedQueue{Client: c, Bucket: bucket, Key: "baseline/queue.json", Conditional: conditional}
	}, ids...)
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
			g := hold(t, http.MethodPut, "/queue.json")
			idA, err := popWhileHeld(t, mk(g.Wrap), g, "worker A's write", popsT1(t, mk()))
			if err != nil || idA != tc.wantA {
				t.Errorf("worker A popped %q, %v; want %q", idA, err, tc.wantA)
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
			g := hold(t, http.MethodPut, "/queue.json")
			producer := mk()
			id, err := popWhileHeld(t, mk(g.Wrap), g, "the worker's write", func() {
				if err := producer.Push(t.Context(), "t9"); err != nil {
					t.Fatal(err)
				}
			})
			if err != nil || id != "t1" {
				t.Fatalf("worker popped %q, %v; want t1", id, err)
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

// setupRename is setup for a rename queue.
func setupRename(t *testing.T, ids ...string) (*RenameQueue, func(wrap ...func(http.RoundTripper) http.RoundTripper) *RenameQueue) {
	t.Helper()
	return setup(t, func(c *s3.Client, bucket string) *RenameQueue {
		return &RenameQueue{Client: c, Bucket: bucket, Prefix: "baseline/rename/"}
	}, ids...)
}

// keys lists the IDs in folder of q.
func keys(t *testing.T, q *RenameQueue, folder string) []string {
	t.Helper()
	dir := q.Prefix + folder
	ks, err := s3test.Objects{Client: q.Client, Bucket: q.Bucket}.Keys(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := range ks {
		ks[i] = strings.TrimPrefix(ks[i], dir)
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
	g := hold(t, http.MethodDelete, "/pending/t1")
	idA, err := popWhileHeld(t, mk(g.Wrap), g, "worker A's delete", popsT1(t, mk()))
	if err != nil || idA != "t1" {
		t.Fatalf("worker A popped %q, %v; want t1 (the duplicate this design allows)", idA, err)
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
	g := s3test.NewHold(t, func(r *http.Request) bool { // the copy into processing/
		return r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/processing/t1")
	})
	// A lists t1 and t2; its copy of t1 is held while B takes t1.
	if id, err := popWhileHeld(t, mk(g.Wrap), g, "worker A's copy", popsT1(t, mk())); err != nil || id != "t2" {
		t.Errorf("worker A popped %q, %v; want t2", id, err)
	}
}
