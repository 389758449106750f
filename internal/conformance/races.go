package conformance

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/s3test"
	"github.com/s3task/s3task/internal/s3x"
)

// racers is how many clients race for one conditional write.
const racers = 8

// race runs put from racers clients at once, released together, and
// returns each one's error.
func race(h *harness, put func(ctx context.Context, c *s3.Client, i int) error) []error {
	h.t.Helper()
	clients := make([]*s3.Client, racers)
	for i := range clients {
		clients[i] = h.tg.Client()
	}
	errs := make([]error, racers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() {
			<-start
			errs[i] = put(h.ctx, c, i)
		})
	}
	close(start)
	wg.Wait()
	return errs
}

// oneWinner checks that exactly one racer succeeded and every other was
// refused the way the library reads as a lost race. It returns the winner
// and the refusal codes seen.
func oneWinner(t *testing.T, errs []error, what string) (int, map[string]int) {
	t.Helper()
	winner, codes := -1, map[string]int{}
	for i, err := range errs {
		if err == nil {
			if winner >= 0 {
				t.Errorf("%s: racers %d and %d both succeeded", what, winner, i)
			}
			winner = i
			continue
		}
		codes[wantLost(t, err, fmt.Sprintf("%s: racer %d", what, i))]++
	}
	if winner < 0 {
		t.Errorf("%s: no racer succeeded: %v", what, errs)
	}
	return winner, codes
}

func putBody(ctx context.Context, c *s3.Client, bucket, key, body string, ifNoneMatch, ifMatch *string) (string, error) {
	out, err := c.PutObject(ctx, &s3.PutObjectInput{
		Bucket: &bucket, Key: &key, Body: strings.NewReader(body), ContentLength: aws.Int64(int64(len(body))),
		IfNoneMatch: ifNoneMatch, IfMatch: ifMatch,
	}, noRetry)
	if err != nil {
		return "", err
	}
	return aws.ToString(out.ETag), nil
}

// noRetry sends a request once: in a race, a resend would blur who won.
func noRetry(o *s3.Options) { o.RetryMaxAttempts = 1 }

// testCreateRace: racers create one key with If-None-Match: *; exactly one
// wins and its body is what is stored. Through the library, concurrent
// Creates all get distinct tasks.
func testCreateRace(t *testing.T, b Backend) {
	h := open(t, b, nil)
	seen := map[string]int{}
	for round := range 5 {
		key := fmt.Sprintf("race/create-%d", round)
		errs := race(h, func(ctx context.Context, c *s3.Client, i int) error {
			_, err := putBody(ctx, c, h.tg.Bucket, key, fmt.Sprintf("racer %d", i), aws.String("*"), nil)
			return err
		})
		winner, codes := oneWinner(t, errs, "create "+key)
		for c, n := range codes {
			seen[c] += n
		}
		if body, _ := h.object(key); winner >= 0 && string(body) != fmt.Sprintf("racer %d", winner) {
			t.Errorf("%s holds %q, want racer %d's body", key, body, winner)
		}
	}
	t.Logf("losing creates were refused with %v", seen)

	const n = 32
	ids := make([]string, n)
	var wg sync.WaitGroup
	stores := []*s3task.Store{h.newStore(nil), h.newStore(nil), h.newStore(nil), h.newStore(nil)}
	for i := range n {
		wg.Go(func() {
			task, err := stores[i%len(stores)].Create(h.ctx, s3task.CreateParams{Name: fmt.Sprintf("concurrent %d", i)})
			if err != nil {
				t.Errorf("Create %d: %v", i, err)
				return
			}
			ids[i] = task.ID
		})
	}
	wg.Wait()
	unique := map[string]bool{}
	for i, id := range ids {
		if id == "" {
			continue
		}
		if unique[id] {
			t.Errorf("two concurrent Creates returned task %s", id)
		}
		unique[id] = true
		if got := h.get(id); got.Name != fmt.Sprintf("concurrent %d", i) {
			t.Errorf("task %s is named %q, want %q", id, got.Name, fmt.Sprintf("concurrent %d", i))
		}
	}
}

// testCompareAndSetRace: racers overwrite one object with If-Match on the
// same ETag; exactly one wins each round, and the chain of ETags goes on
// from the winner's.
func testCompareAndSetRace(t *testing.T, b Backend) {
	h := open(t, b, nil)
	key := "race/cas"
	etag := h.put(key, []byte("round -1"))
	seen := map[string]int{}
	for round := range 5 {
		etags := make([]string, racers)
		errs := race(h, func(ctx context.Context, c *s3.Client, i int) error {
			var err error
			etags[i], err = putBody(ctx, c, h.tg.Bucket, key, fmt.Sprintf("round %d racer %d", round, i), nil, aws.String(etag))
			return err
		})
		winner, codes := oneWinner(t, errs, fmt.Sprintf("round %d", round))
		for c, n := range codes {
			seen[c] += n
		}
		if winner < 0 {
			return
		}
		if body, _ := h.object(key); string(body) != fmt.Sprintf("round %d racer %d", round, winner) {
			t.Fatalf("round %d: object holds %q, want racer %d's body", round, body, winner)
		}
		etag = etags[winner]
	}
	t.Logf("losing writes were refused with %v", seen)
}

// testIdempotentCreateRace: racers Stores, each on its own client, create
// with one key at once; one task is made and all of them return it. Purge
// keeps it for 10 minutes after its key was written, even finished, and the
// key goes on naming it. (That the key names a new task after a purge,
// the simulation and the package's tests check, on a server clock they can
// move.)
func testIdempotentCreateRace(t *testing.T, b Backend) {
	h := open(t, b, nil)
	stores := make([]*s3task.Store, racers)
	for i := range stores {
		stores[i] = h.newStore(nil)
	}
	ids := make([]string, racers)
	errs := race(h, func(ctx context.Context, _ *s3.Client, i int) error {
		task, err := stores[i].Create(ctx, s3task.CreateParams{Key: "upload-7f3a", Name: fmt.Sprint("racer ", i)})
		if err == nil {
			ids[i] = task.ID
		}
		return err
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("racer %d: %v", i, err)
		}
		if ids[i] != ids[0] {
			t.Fatalf("racer %d got task %s, racer 0 got %s", i, ids[i], ids[0])
		}
	}
	page, err := h.store.List(h.ctx, s3task.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Tasks) != 1 {
		t.Fatalf("%d tasks after %d keyed creates, want 1", len(page.Tasks), racers)
	}
	if _, err := h.store.Cancel(h.ctx, ids[0], "done"); err != nil {
		t.Fatal(err)
	}
	if rep, err := h.store.Purge(h.ctx, time.Now().Add(time.Hour), s3task.PurgeOptions{}); err != nil || len(rep.Purged) != 0 || rep.Kept != 1 {
		t.Fatalf("Purge right after the cancel = %+v, %v; want the keyed task kept", rep, err)
	}
	again, err := h.store.Create(h.ctx, s3task.CreateParams{Key: "upload-7f3a"})
	if err != nil || again.ID != ids[0] {
		t.Errorf("create after the cancel = %v, %v; want the cancelled task %s", again, err, ids[0])
	}
}

// testStaleWriter: a writer holding an ETag that is no longer current is
// refused, and the newer content stays.
func testStaleWriter(t *testing.T, b Backend) {
	h := open(t, b, nil)
	key := "stale/object"
	old := h.put(key, []byte("v1"))
	c := h.tg.Client()
	cur, err := putBody(h.ctx, c, h.tg.Bucket, key, "v2", nil, aws.String(old))
	if err != nil {
		t.Fatalf("write with the current ETag: %v", err)
	}
	_, err = putBody(h.ctx, c, h.tg.Bucket, key, "v3 from a stale writer", nil, aws.String(old))
	t.Logf("a stale If-Match was refused with %s", wantLost(t, err, "write with a stale ETag"))
	if body, _ := h.object(key); string(body) != "v2" {
		t.Errorf("object holds %q after the stale write, want v2", body)
	}
	// The same bytes written again get the same ETag: an ETag alone cannot
	// tell two writes apart, which is why every record write carries a
	// fresh revision.
	same, err := putBody(h.ctx, c, h.tg.Bucket, key, "v2", nil, aws.String(cur))
	if err != nil {
		t.Fatalf("rewrite with the current ETag: %v", err)
	}
	if same != cur {
		t.Logf("note: this server gives identical bodies different ETags (%s, %s)", cur, same)
	}
}

// testIfMatchOnMissingKey: If-Match on a key that does not exist is refused
// (AWS, versitygw and SeaweedFS answer 404, gofakes3 412), and the library
// reads either as "the record is not what we expected": a Cancel whose
// record vanishes between its read and its write creates nothing, and
// reports ErrOutcomeUnknown (only Purge deletes records, and only finished
// ones, so the refusal may answer a resend of a write that landed).
func testIfMatchOnMissingKey(t *testing.T, b Backend) {
	h := open(t, b, nil)
	_, err := putBody(h.ctx, h.raw.Client, h.tg.Bucket, "missing/key", "x", nil, aws.String(`"0123456789abcdef0123456789abcdef"`))
	t.Logf("%s answers If-Match on a missing key with %s", h.tg.Backend, wantLost(t, err, "If-Match on a missing key"))
	if _, ok := h.object("missing/key"); ok {
		t.Errorf("If-Match on a missing key created it")
	}

	task := h.submit(s3task.CreateParams{Name: "vanishing"}, "x\n")
	var once sync.Once
	vanish := func(next http.RoundTripper) http.RoundTripper {
		return s3test.RoundTripFunc(func(req *http.Request) (*http.Response, error) {
			if isRecordPut(req) {
				once.Do(func() {
					key := h.recordKey(task.ID)
					if err := h.raw.Delete(h.ctx, key); err != nil {
						t.Errorf("delete record: %v", err)
					}
				})
			}
			return next.RoundTrip(req)
		})
	}
	st := h.newStore(nil, vanish)
	got, err := st.Cancel(h.ctx, task.ID, "gone")
	if !errors.Is(err, s3task.ErrOutcomeUnknown) || got != nil {
		t.Errorf("Cancel of a record deleted under it = %+v, %v; want ErrOutcomeUnknown", got, err)
	}
	if _, ok := h.object(h.recordKey(task.ID)); ok {
		t.Errorf("the deleted record was written again")
	}
}

// barrier holds the first record write of each of n parties until all n
// have sent theirs, so that their compare-and-sets reach S3 together.
type barrier struct {
	mu      sync.Mutex
	arrived int
	n       int
	all     chan struct{}
	wait    time.Duration
}

func newBarrier(n int, wait time.Duration) *barrier {
	return &barrier{n: n, all: make(chan struct{}), wait: wait}
}

// wrap returns a transport wrapper for one party.
func (b *barrier) wrap(t *testing.T) func(http.RoundTripper) http.RoundTripper {
	var once sync.Once
	return func(next http.RoundTripper) http.RoundTripper {
		return s3test.RoundTripFunc(func(req *http.Request) (*http.Response, error) {
			if isRecordPut(req) {
				once.Do(func() {
					b.mu.Lock()
					b.arrived++
					if b.arrived == b.n {
						close(b.all)
					}
					b.mu.Unlock()
					select {
					case <-b.all:
					case <-time.After(b.wait):
						t.Errorf("barrier: only %d of %d parties arrived within %s", b.arrived, b.n, b.wait)
					}
				})
			}
			return next.RoundTrip(req)
		})
	}
}

// testClaimRace: two workers read the same queued record and send their
// claims together; S3 accepts exactly one, the other worker moves on, and
// the task runs once.
func testClaimRace(t *testing.T, b Backend) {
	h := open(t, b, nil)
	task := h.submit(s3task.CreateParams{Name: "contested"}, "x\n")
	bar := newBarrier(2, h.tg.Timing.Wait)
	var codes statusRecorder
	evs := []*events{newEvents(), newEvents()}
	var mu sync.Mutex
	runs := 0
	handler := s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		mu.Lock()
		runs++
		mu.Unlock()
		return job.WriteOutput(ctx, strings.NewReader("done"))
	})
	var workers []*runningWorker
	for i, ev := range evs {
		st := h.newStore(nil, codes.wrap, bar.wrap(t))
		workers = append(workers, h.startWorker(st, handler, h.workerOptions(fmt.Sprintf("racer-%d", i), ev.hooks())))
	}
	var winner *s3task.Task
	select {
	case winner = <-evs[0].completed:
	case winner = <-evs[1].completed:
	case <-time.After(h.tg.Timing.Wait):
		t.Fatalf("no worker completed the task within %s", h.tg.Timing.Wait)
	}
	for _, w := range workers {
		w.stop()
	}
	claims := len(evs[0].claimed) + len(evs[1].claimed)
	if claims != 1 {
		t.Errorf("%d claims succeeded, want exactly 1", claims)
	}
	if lost := codes.count(http.StatusPreconditionFailed) + codes.count(http.StatusConflict); lost < 1 {
		t.Errorf("no claim was refused: the two claims did not race (answers %v)", codes.codes)
	}
	mu.Lock()
	if runs != 1 {
		t.Errorf("the handler ran %d times, want once", runs)
	}
	mu.Unlock()
	if got := h.get(task.ID); got.Status != s3task.StatusCompleted || got.Attempt != 1 || got.WorkerID != winner.WorkerID {
		t.Errorf("record: %s attempt %d by %q; want completed attempt 1 by %q", got.Status, got.Attempt, got.WorkerID, winner.WorkerID)
	}
}

// testContention: four workers share twenty tasks; each task is claimed and
// run exactly once.
func testContention(t *testing.T, b Backend) {
	h := open(t, b, nil)
	const tasks = 20
	var mu sync.Mutex
	claims := map[string]int{}
	runs := map[string]int{}
	completions := map[string]int{}
	done := make(chan struct{})
	hooks := s3task.Hooks{
		OnClaim: func(task *s3task.Task) {
			mu.Lock()
			defer mu.Unlock()
			claims[fmt.Sprintf("%s/%d", task.ID, task.Attempt)]++
		},
		OnComplete: func(task *s3task.Task) {
			mu.Lock()
			defer mu.Unlock()
			completions[task.ID]++
			if len(completions) == tasks {
				select {
				case <-done:
				default:
					close(done)
				}
			}
		},
	}
	handler := s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		mu.Lock()
		runs[job.Task.ID]++
		mu.Unlock()
		return job.WriteOutput(ctx, strings.NewReader(job.Task.ID))
	})
	var ids []string
	for i := range tasks {
		ids = append(ids, h.submit(s3task.CreateParams{Name: fmt.Sprintf("contended %d", i)}, "x\n").ID)
	}
	for i := range 4 {
		opts := h.workerOptions(fmt.Sprintf("contender-%d", i), hooks)
		opts.Concurrency = 4
		h.startWorker(h.newStore(nil), handler, opts)
	}
	select {
	case <-done:
	case <-time.After(h.tg.Timing.Wait):
		t.Fatalf("only %d of %d tasks completed within %s", len(completions), tasks, h.tg.Timing.Wait)
	}
	mu.Lock()
	for _, id := range ids {
		if claims[id+"/1"] != 1 || runs[id] != 1 || completions[id] != 1 || len(claims) != tasks {
			t.Errorf("task %s: %d claims of attempt 1, %d runs, %d completions; want one each (%d claims in all)",
				id, claims[id+"/1"], runs[id], completions[id], len(claims))
		}
	}
	mu.Unlock()
	for _, id := range ids {
		if got := h.output(id); got != id {
			t.Errorf("task %s output %q", id, got)
		}
	}
}

// testConditionalReads: the conditional GETs the library relies on. An idle
// worker checks the wake object with If-None-Match, and a 304 must read as
// "not modified", not as an error. A worker reads its input with If-Match
// on the ETag Submit verified; gofakes3 ignores If-Match on GET, which the
// library absorbs by comparing the ETag it gets (see
// testInputReplacedAfterSubmit), so a store may refuse or ignore it here.
// Every answer carries the Date the library takes the server's clock from.
func testConditionalReads(t *testing.T, b Backend) {
	h := open(t, b, nil)
	key := "cond/object"
	etag := h.put(key, []byte("v1"))
	var gotETag string
	get := func(ifMatch, ifNoneMatch *string) error {
		out, err := h.raw.Client.GetObject(h.ctx, &s3.GetObjectInput{Bucket: &h.tg.Bucket, Key: &key, IfMatch: ifMatch, IfNoneMatch: ifNoneMatch}, noRetry)
		if err == nil {
			out.Body.Close()
			gotETag = aws.ToString(out.ETag)
			if when, ok := awsmiddleware.GetServerTime(out.ResultMetadata); !ok || when.IsZero() {
				t.Errorf("GET answered without a Date header")
			} else if d := time.Since(when); d > time.Hour || d < -time.Hour {
				t.Logf("the server's clock is %s off this machine's", d)
			}
		}
		return err
	}
	other := aws.String(`"0123456789abcdef0123456789abcdef"`)
	if err := get(aws.String(etag), nil); err != nil {
		t.Errorf("GET If-Match the current ETag: %v", err)
	}
	switch err := get(other, nil); {
	case err == nil && gotETag == etag:
		t.Logf("%s ignores If-Match on GET; the ETag it returns still tells", h.tg.Backend)
	case err == nil:
		t.Errorf("GET If-Match another ETag returned ETag %s, want a refusal or the current ETag %s", gotETag, etag)
	default:
		wantLost(t, err, "GET If-Match another ETag")
	}
	if err := get(nil, aws.String(etag)); !s3x.NotModified(err) {
		t.Errorf("GET If-None-Match the current ETag = %v, want 304 Not Modified", err)
	}
	if err := get(nil, other); err != nil {
		t.Errorf("GET If-None-Match another ETag: %v", err)
	}
}
