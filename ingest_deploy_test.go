package s3task

// The Ingester where it meets a deployment: restarts after purges, S3
// outages longer than a sweep, sources that go and come back, Ingests of
// one version at once, long names, and floods of events for objects that
// do not exist.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/s3task/s3task/internal/s3test"
)

// runIngester runs an Ingester of store on "incoming/" until the test
// ends, or stop is called.
func (e *advEnv) runIngester(store *Store, opts IngestOptions) (in *Ingester, stop func()) {
	e.t.Helper()
	opts.Prefix = "incoming/"
	if opts.Logger == nil {
		opts.Logger = advQuiet
	}
	in, err := NewIngester(store, &opts)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = in.Run(ctx)
	}()
	stop = sync.OnceFunc(func() {
		cancel()
		<-done
	})
	e.t.Cleanup(stop)
	return in, stop
}

// versionTasks returns the tasks made of one version of a source.
func (e *advEnv) versionTasks(o Object) []*Task {
	e.t.Helper()
	return e.tasksOf(o.Key)[strings.Trim(o.ETag, `"`)]
}

// TestIngestNotAgainAfterPurgeAndRestart: a file is ingested, its task
// finishes, a routine Purge deletes the task, and the service restarts:
// the new Ingester's first sweep, and any Ingest of the version, make no
// second task. Ingest says the version's task was purged, and names it.
func TestIngestNotAgainAfterPurgeAndRestart(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		o := e.putSource("incoming/partner.csv", "a\n1\n")
		_, stop := e.runIngester(e.store(nil), IngestOptions{SweepInterval: 10 * time.Minute})
		if !advWaitFor(time.Minute, time.Second, func() bool { return len(e.versionTasks(o)) == 1 }) {
			t.Fatal("the file was not ingested")
		}
		stop()
		first := e.versionTasks(o)[0]
		w := e.run(e.store(nil), advSucceed, &WorkerOptions{})
		if !e.awaitTerminal(first.ID, time.Minute) || e.record(first.ID).Status != StatusCompleted {
			t.Fatalf("the task did not complete: %s", e.record(first.ID).Status)
		}
		w.stop()

		time.Sleep(keyHold)
		r, err := e.admin.Purge(e.ctx, time.Now(), PurgeOptions{})
		if err != nil || len(r.Purged) != 1 || r.Purged[0] != first.ID {
			t.Fatalf("Purge: %+v, %v; want task %s purged", r, err, first.ID)
		}

		// The restart: a new Ingester, whose first sweep looks at every
		// object under the folder.
		in, _ := e.runIngester(e.store(nil), IngestOptions{SweepInterval: 10 * time.Minute})
		time.Sleep(time.Hour)
		if n := len(e.tasksOf(o.Key)); n != 0 {
			t.Errorf("after the purge and a restart the file has %d tasks, want none", n)
		}
		if w := in.Waiting(); len(w) != 0 {
			t.Errorf("the purged version waits: %+v", w)
		}
		_, err = e.admin.Ingest(e.ctx, o, CreateParams{})
		var pe *PurgedError
		if !errors.As(err, &pe) || !errors.Is(err, ErrPurged) || pe.ID != first.ID {
			t.Errorf("Ingest of the purged version: %v, want a *PurgedError naming %s", err, first.ID)
		}
		// A Create with the key, as a host would make one by hand, is not
		// held to ingest's rule: it takes the key over.
		c, found, err := e.admin.CreateOrGet(e.ctx, CreateParams{Key: IngestKey(o, e.mem.Bucket)})
		if err != nil || found || c.ID == first.ID {
			t.Errorf("Create with the purged task's key: %v, found %v, %v; want a new task", c, found, err)
		}
	})
}

// outage is a transport wrapper that fails every request but the listings
// while it is down, as a partial S3 outage does (or a bucket policy
// mistake): the sweeps list the folder, and every ingest fails.
type outage struct{ down atomic.Bool }

func (o *outage) wrap(next http.RoundTripper) http.RoundTripper {
	return s3test.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		if o.down.Load() && s3test.Op(r) != "LIST" {
			return nil, errors.New("injected: S3 unreachable")
		}
		return next.RoundTrip(r)
	})
}

// TestIngesterOutageLongerThanSweeps: S3 fails every ingest for 40
// minutes, four sweeps, while a file arrives and its event is delivered.
// The event's tries fail, then every sweep's; the version waits, and says
// so; once S3 answers again, the next sweep ingests it. (A window of
// recent objects would have moved past it.)
func TestIngesterOutageLongerThanSweeps(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		var out outage
		in, _ := e.runIngester(e.store(nil, out.wrap), IngestOptions{SweepInterval: 10 * time.Minute})
		time.Sleep(30 * time.Second)
		out.down.Store(true)
		time.Sleep(30 * time.Second)
		o := e.putSource("incoming/late.csv", "x\n")
		in.Notify(ObjectEvent{Key: o.Key, ETag: o.ETag, Size: o.Size})
		time.Sleep(15 * time.Minute)
		if w := in.Waiting(); len(w) != 1 || w[0].Key != o.Key {
			t.Errorf("during the outage Waiting() = %+v, want the file", w)
		}
		time.Sleep(25 * time.Minute)
		if n := len(e.tasksOf(o.Key)); n != 0 {
			t.Fatalf("the file has %d tasks during the outage", n)
		}
		out.down.Store(false)
		time.Sleep(11 * time.Minute)
		if n := len(e.versionTasks(o)); n != 1 {
			t.Errorf("after the outage the file has %d tasks, want 1", n)
		}
		if w := in.Waiting(); len(w) != 0 {
			t.Errorf("after the outage Waiting() = %+v, want none", w)
		}
	})
}

// TestIngestSameBytesBack: a version whose task was abandoned before it
// was submitted (its source went between Ingest's look and its copy, or an
// earlier version of the library refused it so) is ingested anew when the
// same bytes are put back, even when no event tells of it (the Ingester's
// sweep does not count a version gone as settled): a new task runs, and
// the abandoned one stays on record. A version refused as too large is
// not: the same bytes are as large as before.
func TestIngestSameBytesBack(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		// The source is deleted the moment Ingest has looked at it.
		var vanish atomic.Bool
		vanish.Store(true)
		st := e.store(nil, advWrap(func(r *http.Request, next http.RoundTripper) (*http.Response, error) {
			if s3test.Op(r) == "GET" && strings.HasSuffix(r.URL.Path, "/incoming/flaky.csv") && vanish.Swap(false) {
				_ = e.raw.Delete(r.Context(), "incoming/flaky.csv")
			}
			return next.RoundTrip(r)
		}))
		o := e.putSource("incoming/flaky.csv", "same bytes\n")
		if got, err := st.Ingest(e.ctx, o, CreateParams{}); got != nil || !errors.Is(err, ErrSourceGone) {
			t.Fatalf("a source deleted before its copy: %v, %v; want no task and ErrSourceGone", got, err)
		}
		all := e.versionTasks(o)
		if len(all) != 1 || all[0].Status != StatusAbandoned || !strings.Contains(all[0].CancelReason, "deleted before it was copied") {
			t.Fatalf("a source deleted before its copy left %d tasks; want one abandoned, with the reason", len(all))
		}
		refused := all[0]
		if _, err := st.Ingest(e.ctx, o, CreateParams{}); !errors.Is(err, ErrSourceGone) {
			t.Errorf("Ingest while the source is gone: %v, want ErrSourceGone", err)
		}
		// An Ingester hears of the version while it is gone; the bytes'
		// return has no event, and its next sweep finds them.
		in, _ := e.runIngester(st, IngestOptions{SweepInterval: 10 * time.Minute})
		in.Notify(ObjectEvent{Key: o.Key, ETag: o.ETag, Size: o.Size})
		time.Sleep(time.Minute)
		if again := e.putSource("incoming/flaky.csv", "same bytes\n"); again.ETag != o.ETag {
			t.Fatalf("the same bytes have ETag %s, not %s", again.ETag, o.ETag)
		}
		time.Sleep(10 * time.Minute)
		tasks := e.versionTasks(o)
		var queued []*Task
		for _, task := range tasks {
			if task.Status == StatusQueued {
				queued = append(queued, task)
			}
		}
		if len(tasks) != 2 || len(queued) != 1 || queued[0].ID == refused.ID || e.record(refused.ID).Status != StatusAbandoned {
			t.Errorf("after the same bytes came back: %d tasks (%d queued); want the abandoned one and one new queued task", len(tasks), len(queued))
		}
		for range 2 {
			got, err := st.Ingest(e.ctx, o, CreateParams{})
			if err != nil || len(queued) == 1 && got.ID != queued[0].ID {
				t.Errorf("Ingest of the version again: %v, %v; want the new task", got, err)
			}
		}

		// As an earlier version of the library left it: a task of the key,
		// abandoned before it was submitted.
		old := e.putSource("incoming/legacy.csv", "legacy\n")
		made, err := e.admin.Create(e.ctx, CreateParams{Key: IngestKey(old, e.mem.Bucket)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.admin.Cancel(e.ctx, made.ID, "ingest: the source object changed or was deleted before it was copied"); err != nil {
			t.Fatal(err)
		}
		renewed, err := e.admin.Ingest(e.ctx, old, CreateParams{})
		if err != nil || renewed.ID == made.ID || renewed.Status != StatusQueued {
			t.Errorf("the legacy refusal's version: %v, %v; want a new queued task", renewed, err)
		}

		small := e.store(&StoreOptions{MaxInputSize: 4})
		big := e.putSource("incoming/big.csv", "0123456789")
		first, err := small.Ingest(e.ctx, big, CreateParams{})
		if err != nil || first.Status != StatusAbandoned {
			t.Fatalf("an object over the limit: %v, %v", first, err)
		}
		e.putSource("incoming/big.csv", "0123456789")
		if again, err := small.Ingest(e.ctx, big, CreateParams{}); err != nil || again.ID != first.ID {
			t.Errorf("the same large bytes again: %v, %v; want the refused task %s", again, err, first.ID)
		}
	})
}

// TestIngestConcurrent: Ingests of one version at once, from several
// Stores (Lambda invocations, SQS consumers, two Ingesters), each return
// the one task, without an error: a direct caller never sees a failure
// for a success.
func TestIngestConcurrent(t *testing.T) {
	for round := range 20 {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			inBubble(t, func(t *testing.T, e *advEnv) {
				o := e.putSource("incoming/twice.csv", fmt.Sprintf("round %d\n", round))
				const n = 6
				ids := make([]string, n)
				errs := make([]error, n)
				var wg sync.WaitGroup
				for i := range n {
					// Each Store's requests take a different time, so that the
					// Ingests overlap at every step in some round.
					delay := time.Duration((i*7+round*3)%11) * time.Millisecond
					st := e.store(nil, advWrap(func(r *http.Request, next http.RoundTripper) (*http.Response, error) {
						time.Sleep(delay)
						return next.RoundTrip(r)
					}))
					wg.Go(func() {
						task, err := st.Ingest(e.ctx, o, CreateParams{})
						errs[i] = err
						if task != nil {
							ids[i] = task.ID
						}
					})
				}
				wg.Wait()
				for i := range n {
					if errs[i] != nil || ids[i] != ids[0] {
						t.Errorf("Ingest %d: task %s, %v; want task %s and no error", i, ids[i], errs[i], ids[0])
					}
				}
				if tasks := e.versionTasks(o); len(tasks) != 1 || tasks[0].Status != StatusQueued {
					t.Errorf("the version has %d tasks, want one queued", len(tasks))
				}
			})
		})
	}
}

// TestIngesterLongName: an object whose base name is longer than a task's
// name may be (an S3 key may be 1,024 bytes) is ingested with the default
// parameters: its name is cut to 256 bytes at a character boundary.
func TestIngesterLongName(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		base := strings.Repeat("é", 150) + ".csv" // 304 bytes
		o := e.putSource("incoming/"+base, "x\n")
		e.runIngester(e.store(nil), IngestOptions{SweepInterval: 10 * time.Minute})
		time.Sleep(time.Minute)
		tasks := e.versionTasks(o)
		if len(tasks) != 1 {
			t.Fatalf("the long-named object has %d tasks, want 1", len(tasks))
		}
		name := tasks[0].Name
		if len(name) > 256 || len(name) < 255 || !utf8.ValidString(name) || !strings.HasPrefix(base, name) {
			t.Errorf("task name of %d bytes (valid UTF-8: %v), want the base name's first 255 or 256 bytes", len(name), utf8.ValidString(name))
		}
	})
}

// TestIngesterFlood: 3,000 events for objects under the folder that do
// not exist, as one authenticated webhook could deliver them, make no task
// and cost one HEAD each, and nothing else.
func TestIngesterFlood(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		var c opCounter
		in, _ := e.runIngester(e.store(nil, c.wrap), IngestOptions{SweepInterval: -1})
		const n = 3000
		for i := range n {
			if !in.Notify(ObjectEvent{Key: fmt.Sprintf("incoming/junk-%d.csv", i), ETag: fmt.Sprintf("%032x", i), Size: 10}) {
				t.Fatal("the Ingester refused an event for its folder")
			}
		}
		if !advWaitFor(time.Hour, time.Second, func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			return c.ops["HEAD"] >= n
		}) {
			t.Fatalf("the events were not all handled: %v", c.take())
		}
		time.Sleep(time.Minute)
		if ops := c.take(); total(ops) != n || ops["HEAD"] != n {
			t.Errorf("%d events for missing objects cost %v, want %d HEADs and nothing else", n, ops, n)
		}
		if keys := e.mem.Keys(DefaultPrefix); len(keys) != 0 {
			t.Errorf("the flood wrote %d objects under the Store's prefix, first %s", len(keys), keys[0])
		}
	})
}

// BenchmarkIngesterSweep measures a sweep of a folder whose versions the
// Ingester has all settled: its requests (the LISTs alone, one per 1,000
// objects), its allocations, and the memory the Ingester keeps per settled
// version; and, beside it, the first sweep of a restarted Ingester, which
// settles nothing yet and looks at every version again (4 requests each).
//
//	go test -run '^$' -bench BenchmarkIngesterSweep -benchmem .
func BenchmarkIngesterSweep(b *testing.B) {
	for _, n := range []int{100, 2000} {
		b.Run(fmt.Sprintf("objects=%d", n), func(b *testing.B) {
			mem, err := s3test.NewMemory()
			if err != nil {
				b.Fatal(err)
			}
			raw := s3test.Objects{Client: mem.Client(), Bucket: mem.Bucket}
			ctx := context.Background()
			var c opCounter
			st, err := NewStore(mem.Client(c.wrap), mem.Bucket, &StoreOptions{Logger: advQuiet})
			if err != nil {
				b.Fatal(err)
			}
			for i := range n {
				if _, err := raw.Put(ctx, fmt.Sprintf("incoming/f-%05d.csv", i), []byte(fmt.Sprintf("row %d\n", i))); err != nil {
					b.Fatal(err)
				}
			}
			newIngester := func() *Ingester {
				in, err := NewIngester(st, &IngestOptions{Prefix: "incoming/", Logger: advQuiet})
				if err != nil {
					b.Fatal(err)
				}
				return in
			}
			first := newIngester()
			if got, err := first.Sweep(ctx, time.Time{}); err != nil || got != n {
				b.Fatalf("first sweep: %d, %v; want %d settled", got, err, n)
			}
			c.take()
			restarted := newIngester()
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			if got, err := restarted.Sweep(ctx, time.Time{}); err != nil || got != n {
				b.Fatalf("a restarted Ingester's first sweep: %d, %v", got, err)
			}
			restartOps := total(c.take())
			runtime.GC()
			runtime.ReadMemStats(&after)
			for b.Loop() {
				if _, err := restarted.Sweep(ctx, time.Time{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(total(c.take()))/float64(b.N), "requests/sweep")
			b.ReportMetric(float64(restartOps)/float64(n), "restart-requests/version")
			b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(n), "kept-bytes/version")
		})
	}
}
