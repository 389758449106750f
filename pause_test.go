package s3task

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	gocmp "github.com/google/go-cmp/cmp"

	"github.com/s3task/s3task/internal/s3test"
)

// pauseCounter counts a store's requests by operation and object: "GET
// wake", "PUT paused", "GET" (anything else).
type pauseCounter struct {
	mu  sync.Mutex
	ops map[string]int
}

func (c *pauseCounter) wrap(next http.RoundTripper) http.RoundTripper {
	return s3test.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		op := s3test.Op(r)
		switch {
		case strings.HasSuffix(r.URL.Path, "/_wake"):
			op += " wake"
		case strings.HasSuffix(r.URL.Path, "/_paused"):
			op += " paused"
		}
		c.mu.Lock()
		if c.ops == nil {
			c.ops = map[string]int{}
		}
		c.ops[op]++
		c.mu.Unlock()
		return next.RoundTrip(r)
	})
}

// take returns the counts since the last take.
func (c *pauseCounter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	ops := c.ops
	c.ops = nil
	if ops == nil {
		ops = map[string]int{}
	}
	return ops
}

// pauseOpts are the options of the workers of these tests: the default
// PollInterval (2s), no reconciler and no presence.
func pauseOpts(id string) *WorkerOptions {
	return &WorkerOptions{ID: id, ReconcileInterval: -1, PresenceInterval: -1} // no maintenance or presence requests in the counts
}

// wakeBodyNow returns what the wake object's body says now, read without
// a request.
func (e *advEnv) wakeBodyNow() wakeBody {
	e.t.Helper()
	body, ok := e.mem.Object(DefaultPrefix + "_wake")
	if !ok {
		return wakeBody{paused: pausedSet{known: true}}
	}
	b, ok := parseWakeBody(body)
	if !ok {
		e.t.Fatalf("the wake object's body does not parse: %q", body)
	}
	return b
}

// TestPauseHoldsOneType: a paused type waits while another runs; the
// waiting task starts within a PollInterval of the Resume.
func TestPauseHoldsOneType(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		w := e.run(e.store(nil), advSucceed, pauseOpts("w"))
		time.Sleep(time.Second) // the first listing
		if err := e.admin.Pause(e.ctx, "pdf"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(DefaultPollInterval) // the pause is seen
		held := e.submit(CreateParams{Name: "held", Type: "pdf"})
		free := e.submit(CreateParams{Name: "free", Type: "csv"})
		if s := advAwait(t, w.started, time.Minute, "the csv task's start"); s.id != free.ID {
			t.Fatalf("started %s, want the csv task %s", s.id, free.ID)
		}
		time.Sleep(5 * time.Minute)
		if got := e.record(held.ID); got.Status != StatusQueued {
			t.Fatalf("the pdf task is %s after 5 minutes paused, want queued", got.Status)
		}
		if len(w.started) > 0 {
			t.Fatalf("a task started while its type was paused")
		}
		resumed := time.Now()
		if err := e.admin.Resume(e.ctx, "pdf"); err != nil {
			t.Fatal(err)
		}
		s := advAwait(t, w.started, time.Minute, "the pdf task's start")
		if s.id != held.ID || s.at.Sub(resumed) > DefaultPollInterval {
			t.Errorf("started %s %s after the Resume, want %s within %s", s.id, s.at.Sub(resumed), held.ID, DefaultPollInterval)
		}
	})
}

// TestPauseLetsRunningAttemptFinish: an attempt running when its type is
// paused renews its lease and completes as ever.
func TestPauseLetsRunningAttemptFinish(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		release := make(chan struct{})
		e.run(e.store(nil), func(ctx context.Context, job *Job) error {
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}, pauseOpts("w"))
		task := e.submit(CreateParams{Name: "long", Type: "pdf"})
		if !advWaitFor(time.Minute, 100*time.Millisecond, func() bool { return e.record(task.ID).Status == StatusRunning }) {
			t.Fatal("the task did not start")
		}
		lease := e.record(task.ID).LeaseExpiresAt
		if err := e.admin.Pause(e.ctx, "pdf"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * DefaultLeaseDuration) // heartbeats go on through the pause
		got := e.record(task.ID)
		if got.Status != StatusRunning || got.Attempt != 1 || !got.LeaseExpiresAt.After(lease.Add(DefaultLeaseDuration)) {
			t.Fatalf("two leases into the pause: %s, attempt %d, lease to %s (first %s); want running attempt 1, renewed", got.Status, got.Attempt, got.LeaseExpiresAt, lease)
		}
		close(release)
		if !e.awaitTerminal(task.ID, time.Minute) {
			t.Fatal("the attempt did not finish")
		}
		if got := e.record(task.ID); got.Status != StatusCompleted || got.Attempt != 1 {
			t.Errorf("the attempt ended %s at attempt %d; want completed at 1", got.Status, got.Attempt)
		}
	})
}

// TestPauseSeenByEveryWorker: of several workers, each on an S3 client of
// its own, none begins a claim of a paused type a PollInterval after the
// Pause returned, while tasks of that type keep coming; each knows the
// type paused by then, and did so at no request more than its idle polls.
func TestPauseSeenByEveryWorker(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		const workers = 5
		var (
			mu     sync.Mutex
			claims []time.Time // when each claim of a pdf task landed
		)
		var ws []*advWorker
		for i := range workers {
			o := pauseOpts(fmt.Sprintf("w%d", i))
			o.Hooks.OnClaim = func(t *Task) {
				if t.Type == "pdf" {
					mu.Lock()
					claims = append(claims, time.Now())
					mu.Unlock()
				}
			}
			ws = append(ws, e.run(e.store(nil), advSucceed, o))
		}
		time.Sleep(10 * time.Second)
		// A producer submits a pdf task every 700ms throughout.
		stop := make(chan struct{})
		produced := make(chan struct{})
		go func() {
			defer close(produced)
			for {
				select {
				case <-stop:
					return
				case <-time.After(700 * time.Millisecond):
					e.submit(CreateParams{Name: "pdf", Type: "pdf"})
				}
			}
		}()
		time.Sleep(5 * time.Second)
		if err := e.admin.Pause(e.ctx, "pdf"); err != nil {
			t.Fatal(err)
		}
		returned := time.Now()
		time.Sleep(DefaultPollInterval)
		for _, w := range ws {
			seen, _, _ := w.w.pause.view.get()
			if !slices.Contains(seen.types, "pdf") {
				t.Errorf("%s does not know pdf paused a PollInterval after the Pause", w.w.ID())
			}
		}
		time.Sleep(2 * time.Minute)
		close(stop)
		<-produced
		mu.Lock()
		defer mu.Unlock()
		var before, late int
		for _, at := range claims {
			switch {
			case at.Before(returned):
				before++
			case !at.Before(returned.Add(DefaultPollInterval)):
				late++
			}
		}
		if before == 0 {
			t.Errorf("no pdf task was claimed before the pause; the test proves nothing")
		}
		if late > 0 {
			t.Errorf("%d pdf tasks were claimed a PollInterval or more after the Pause returned", late)
		}
	})
}

// TestPauseCostsNoRequestPerPoll: an idle worker makes one conditional GET
// of the wake object per round of its poll loop whether a type is paused
// or not, and a LIST per MaxPollInterval, never a GET of the paused object.
// With no type paused the round that lists for the safety net skips the
// GET; while a type it serves is paused it makes it too (so that it sees
// a Resume within a PollInterval): one GET more per LIST.
func TestPauseCostsNoRequestPerPoll(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		var c pauseCounter
		e.run(e.store(nil, c.wrap), advSucceed, pauseOpts("w"))
		time.Sleep(10 * time.Second)
		c.take()
		time.Sleep(10 * time.Minute)
		unpaused := c.take()
		if err := e.admin.Pause(e.ctx, "pdf"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second) // the worker reads the changed body once
		c.take()
		time.Sleep(10 * time.Minute)
		paused := c.take()
		t.Logf("an idle worker's 10 minutes: %v unpaused, %v with a type paused", unpaused, paused)
		near := func(a, b, d int) bool { return a-b <= d && b-a <= d }
		if !near(unpaused["GET wake"]+paused["LIST"], paused["GET wake"], 10) || !near(unpaused["LIST"], paused["LIST"], 1) {
			t.Errorf("requests of 10 idle minutes: %v unpaused, %v paused; want one GET more per LIST paused, but for the jitter of the polls and the phase of the listings", unpaused, paused)
		}
		if n := paused["GET wake"]; n < 300 || n > 400 {
			t.Errorf("%d GETs of the wake object in 10 minutes, want one per 1.5 to 2 s", n)
		}
		for op := range paused {
			if op != "GET wake" && op != "LIST" {
				t.Errorf("an idle worker sent %s requests: %v", op, paused)
			}
		}
	})
}

// TestPauseRequests counts what Pause, Resume and Paused cost, as
// BENCHMARKS.md reports: go test -run 'TestPauseRequests$' -v .
func TestPauseRequests(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		var c pauseCounter
		st := e.store(nil, c.wrap)
		step := func(name string, call func() error, want map[string]int) {
			t.Helper()
			if err := call(); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			got := c.take()
			t.Logf("%-40s %v", name, got)
			if diff := gocmp.Diff(want, got); diff != "" {
				t.Errorf("%s: requests (-want +got):\n%s", name, diff)
			}
		}
		pause := func() error { return st.Pause(e.ctx, "pdf") }
		resume := func() error { return st.Resume(e.ctx, "pdf") }
		paused := func() error { _, err := st.Paused(e.ctx); return err }
		step("Pause, on a bucket without either object", pause, map[string]int{"GET wake": 1, "GET paused": 1, "PUT paused": 1, "PUT wake": 1})
		step("Pause of a paused type", pause, map[string]int{"GET wake": 1, "GET paused": 1})
		step("Paused", paused, map[string]int{"GET paused": 1})
		step("Resume", resume, map[string]int{"GET wake": 1, "GET paused": 1, "PUT paused": 1, "PUT wake": 1})
		step("Resume of a type not paused", resume, map[string]int{"GET wake": 1, "GET paused": 1})
		e.submit(CreateParams{Name: "announced"})
		step("Pause after an announcement", pause, map[string]int{"GET wake": 1, "GET paused": 1, "PUT paused": 1, "PUT wake": 1})
		task := e.create(CreateParams{Name: "submitted while paused"})
		// The wake object as this Store's Pause left it: written over
		// without a read, the paused type carried over.
		step("Submit while a type is paused", func() error { _, err := st.Submit(e.ctx, task.ID); return err },
			map[string]int{"GET": 1, "HEAD": 1, "PUT": 2, "PUT wake": 1})
		if got, err := st.Paused(e.ctx); err != nil || !slices.Equal(got, []string{"pdf"}) {
			t.Errorf("Paused after the Submit = %v, %v; want [pdf]", got, err)
		}
		body, _, _, err := st.readWake(e.ctx)
		if err != nil || !slices.Equal(body.paused.types, []string{"pdf"}) || !body.paused.known {
			t.Errorf("the wake object after the Submit names the paused types %+v (%v); want [pdf]", body.paused, err)
		}
		c.take()
		// Another Store's announcement changes it: this Store's copy is
		// stale, its write refused, and it reads the object and writes
		// again; then, for a while, it reads first.
		e.submit(CreateParams{Name: "another Store's"})
		for _, want := range []map[string]int{
			{"GET": 1, "HEAD": 1, "PUT": 2, "PUT wake": 2, "GET wake": 1},
			{"GET": 1, "HEAD": 1, "PUT": 2, "PUT wake": 1, "GET wake": 1},
		} {
			task := e.create(CreateParams{Name: "submitted after another Store's"})
			step("Submit after another Store's", func() error { _, err := st.Submit(e.ctx, task.ID); return err }, want)
		}
		time.Sleep(wakeDistrust)
		task = e.create(CreateParams{Name: "submitted a while later"})
		step("Submit a while after the refusal", func() error { _, err := st.Submit(e.ctx, task.ID); return err },
			map[string]int{"GET": 1, "HEAD": 1, "PUT": 2, "PUT wake": 1})
	})
}

// TestPauseBadInput: a type Pause cannot take is refused with
// ErrInvalidArgument, before any request; so is a pause beyond
// MaxPausedTypes, which writes nothing.
func TestPauseBadInput(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		var c pauseCounter
		st := e.store(nil, c.wrap)
		for _, typ := range []string{strings.Repeat("x", maxTypeLen+1), "bad\xffutf8"} {
			for name, call := range map[string]func(context.Context, string) error{"Pause": st.Pause, "Resume": st.Resume} {
				if err := call(e.ctx, typ); !errors.Is(err, ErrInvalidArgument) {
					t.Errorf("%s(%q) = %v, want ErrInvalidArgument", name, typ, err)
				}
			}
		}
		if ops := c.take(); len(ops) > 0 {
			t.Errorf("bad types cost requests: %v", ops)
		}
		typed := e.store(&StoreOptions{Types: []string{"pdf", "csv"}}, c.wrap)
		if err := typed.Pause(e.ctx, "pfd"); !errors.Is(err, ErrInvalidArgument) || !errors.Is(err, ErrUnknownTaskType) {
			t.Errorf("Pause of a type outside StoreOptions.Types = %v, want ErrInvalidArgument and ErrUnknownTaskType", err)
		}
		if ops := c.take(); len(ops) > 0 {
			t.Errorf("a type outside StoreOptions.Types cost requests: %v", ops)
		}
		if err := typed.Pause(e.ctx, "pdf"); err != nil {
			t.Errorf("Pause of a type of StoreOptions.Types: %v", err)
		}
		if err := st.Pause(e.ctx, ""); err != nil {
			t.Errorf("Pause of the empty type (untyped tasks): %v", err)
		}
		for i := range MaxPausedTypes - 2 {
			if err := st.Pause(e.ctx, fmt.Sprintf("t%d", i)); err != nil {
				t.Fatalf("Pause of type %d: %v", i+3, err)
			}
		}
		c.take()
		if err := st.Pause(e.ctx, "one too many"); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "MaxPausedTypes") {
			t.Errorf("Pause of type %d = %v, want ErrInvalidArgument naming MaxPausedTypes", MaxPausedTypes+1, err)
		}
		if ops := c.take(); ops["PUT paused"]+ops["PUT wake"] > 0 {
			t.Errorf("a refused Pause wrote: %v", ops)
		}
		if err := st.Pause(e.ctx, "pdf"); err != nil {
			t.Errorf("Pause of a paused type with MaxPausedTypes paused: %v", err)
		}
		got, err := st.Paused(e.ctx)
		if err != nil || len(got) != MaxPausedTypes || !slices.IsSorted(got) || !slices.Contains(got, "") {
			t.Errorf("Paused = %q, %v; want %d types, sorted, the empty one among them", got, err, MaxPausedTypes)
		}
		if b := e.wakeBodyNow(); !slices.Equal(b.paused.types, got) {
			t.Errorf("the wake object names %q paused, the paused object %q", b.paused.types, got)
		}
		if err := st.Resume(e.ctx, "pdf"); err != nil {
			t.Fatal(err)
		}
		if err := st.Pause(e.ctx, "one more"); err != nil {
			t.Errorf("Pause once a type was resumed: %v", err)
		}
	})
}

// TestPauseRunTask: RunTask refuses a task of a paused type with
// ErrTypePaused, and runs it once the type is resumed.
func TestPauseRunTask(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		w, err := NewWorker(e.store(nil), HandlerFunc(advSucceed), &WorkerOptions{ID: "w", Logger: advQuiet})
		if err != nil {
			t.Fatal(err)
		}
		task := e.submit(CreateParams{Name: "on demand", Type: "pdf"})
		if err := e.admin.Pause(e.ctx, "pdf"); err != nil {
			t.Fatal(err)
		}
		if _, err := w.RunTask(e.ctx, task.ID); !errors.Is(err, ErrTypePaused) {
			t.Fatalf("RunTask of a paused type = %v, want ErrTypePaused", err)
		}
		if got := e.record(task.ID); got.Status != StatusQueued {
			t.Fatalf("the refused task is %s, want queued", got.Status)
		}
		if err := e.admin.Resume(e.ctx, "pdf"); err != nil {
			t.Fatal(err)
		}
		got, err := w.RunTask(e.ctx, task.ID) // at once: a refusal is read afresh
		if err != nil || got.Status != StatusCompleted {
			t.Fatalf("RunTask after the Resume = %v, %v; want it completed", got, err)
		}
	})
}

// TestRunTaskDecidesOnceItHasASlot: a RunTask that waits for a slot (the
// only one is held by a long attempt) reads and claims the task once it
// has the slot: a Pause made while it waited refuses the task, and after a
// wait longer than a lease the claim's lease starts when the attempt does,
// so the handler runs and the task completes.
func TestRunTaskDecidesOnceItHasASlot(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		started := make(chan string, 8)
		release := make(chan struct{})
		w, err := NewWorker(e.store(nil), HandlerFunc(func(ctx context.Context, job *Job) error {
			started <- job.Task.Name
			if job.Task.Name == "long" {
				<-release
			}
			return nil
		}), &WorkerOptions{ID: "w", Concurrency: 1, Logger: advQuiet})
		if err != nil {
			t.Fatal(err)
		}
		type result struct {
			task *Task
			err  error
		}
		runTask := func(id string) chan result {
			out := make(chan result, 1)
			go func() {
				task, err := w.RunTask(e.ctx, id)
				out <- result{task, err}
			}()
			return out
		}
		wait := 3 * DefaultLeaseDuration
		for _, paused := range []bool{true, false} {
			release = make(chan struct{})
			long := runTask(e.submit(CreateParams{Name: "long"}).ID)
			if got := advAwait(t, started, time.Minute, "the long attempt"); got != "long" {
				t.Fatalf("setup: %q started first, want the long attempt", got)
			}
			pdf := e.submit(CreateParams{Name: "pdf", Type: "pdf"})
			waiting := runTask(pdf.ID)
			time.Sleep(wait)
			if paused {
				if err := e.admin.Pause(e.ctx, "pdf"); err != nil {
					t.Fatal(err)
				}
			}
			close(release)
			if r := advAwait(t, long, time.Minute, "the long attempt's RunTask"); r.err != nil {
				t.Fatalf("setup: the long attempt: %v", r.err)
			}
			r := advAwait(t, waiting, time.Minute, "the waiting RunTask")
			switch {
			case paused && !errors.Is(r.err, ErrTypePaused):
				t.Errorf("RunTask that waited %s for a slot while its type was paused = %v, %v; want ErrTypePaused", wait, r.task, r.err)
			case paused:
				if got := e.record(pdf.ID); got.Status != StatusQueued {
					t.Errorf("the refused task is %s, want queued", got.Status)
				}
				if err := e.admin.Resume(e.ctx, "pdf"); err != nil {
					t.Fatal(err)
				}
			case r.err != nil || r.task.Status != StatusCompleted:
				t.Errorf("RunTask that waited %s for a slot = %v, %v; want the task completed", wait, r.task, r.err)
			}
			for len(started) > 0 {
				<-started
			}
		}
	})
}

// TestPauseCheckAnsweredLate: before a claim, a worker whose last read of
// the wake object is a PollInterval old reads it again, and must not trust
// a read answered so late that it was sent a PollInterval ago. It reads
// once more at once rather than give the claim up until its next poll, so
// one slow answer delays the start by that answer, not by a poll more.
func TestPauseCheckAnsweredLate(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		task := e.submit(CreateParams{Name: "claimed after a slow check"})
		record := "/" + e.recordKey(task.ID)
		var mu sync.Mutex
		var recordRead time.Time
		slowed := 0
		st := e.store(nil, advWrap(func(r *http.Request, next http.RoundTripper) (*http.Response, error) {
			mu.Lock()
			var delay time.Duration
			switch {
			case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, record) && slowed == 0:
				// The record's read takes longer than a PollInterval, so
				// the wake object's last read is too old to claim on.
				recordRead, slowed, delay = time.Now(), 1, DefaultPollInterval+100*time.Millisecond
			case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/_wake") && slowed == 1:
				slowed, delay = 2, DefaultPollInterval+500*time.Millisecond // the check before the claim
			}
			mu.Unlock()
			time.Sleep(delay)
			return next.RoundTrip(r)
		}))
		w := e.run(st, advSucceed, &WorkerOptions{ID: "w"})
		start := advAwait(t, w.started, time.Minute, "the claim")
		mu.Lock()
		defer mu.Unlock()
		if slowed != 2 {
			t.Fatalf("setup: %d of the two reads slowed", slowed)
		}
		// The two slow answers take 4.6 s; a poll more would be 1.5 s or more.
		if took := start.at.Sub(recordRead); took > 5*time.Second {
			t.Errorf("the attempt started %s after the record's read, over 5s: the slow check cost a poll", took)
		}
	})
}

// TestPauseRacesAnnouncements: a Pause or Resume and the announcements of
// many Submits, from Stores of their own, all at once: no announcement
// drops the paused types, none is dropped by a Pause, and every body of
// the wake object written once a Pause or Resume has returned names the
// paused types as they then are (or says it does not know them, after the
// fallback).
func TestPauseRacesAnnouncements(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		type wakeWrite struct {
			at   time.Time
			body wakeBody
		}
		var (
			mu     sync.Mutex
			writes []wakeWrite
		)
		e.mem.OnApply(func(a s3test.Applied) {
			if a.Key == DefaultPrefix+"_wake" && a.Method == http.MethodPut {
				b, ok := parseWakeBody(a.Body)
				if !ok {
					t.Errorf("a wake object's body that does not parse: %q", a.Body)
				}
				mu.Lock()
				writes = append(writes, wakeWrite{time.Now(), b})
				mu.Unlock()
			}
		})
		const producers, each = 16, 6
		var tasks []*Task
		for range producers * each {
			tasks = append(tasks, e.create(CreateParams{Name: "racing"}))
		}
		stores := make([]*Store, producers)
		for i := range stores {
			stores[i] = e.store(nil)
		}
		pauser := e.store(nil)
		// The pauser's steps, and what is paused once each has returned.
		steps := []struct {
			pause bool
			typ   string
			after []string
		}{
			{true, "pdf", []string{"pdf"}}, {true, "csv", []string{"csv", "pdf"}}, {false, "pdf", []string{"csv"}},
			{true, "pdf", []string{"csv", "pdf"}}, {false, "csv", []string{"pdf"}}, {true, "png", []string{"pdf", "png"}},
		}
		type mark struct {
			start, end time.Time
			after      []string
		}
		var marks []mark
		var wg sync.WaitGroup
		for i, st := range stores {
			wg.Go(func() {
				for j := range each {
					if _, err := st.Submit(e.ctx, tasks[i*each+j].ID); err != nil {
						t.Errorf("Submit: %v", err)
					}
				}
			})
		}
		wg.Go(func() {
			for _, s := range steps {
				start := time.Now()
				var err error
				if s.pause {
					err = pauser.Pause(e.ctx, s.typ)
				} else {
					err = pauser.Resume(e.ctx, s.typ)
				}
				if err != nil {
					t.Errorf("Pause/Resume: %v", err)
				}
				marks = append(marks, mark{start, time.Now(), s.after})
			}
		})
		wg.Wait()
		got, err := e.admin.Paused(e.ctx)
		if err != nil || !slices.Equal(got, []string{"pdf", "png"}) {
			t.Errorf("Paused at the end = %q, %v; want pdf and png", got, err)
		}
		mu.Lock()
		defer mu.Unlock()
		// After each step returned, and until the next began, every body
		// names what that step left paused.
		for i, m := range marks {
			until := time.Now().Add(time.Hour)
			if i+1 < len(marks) {
				until = marks[i+1].start
			}
			for _, w := range writes {
				if w.at.After(m.end) && w.at.Before(until) && w.body.paused.known && !slices.Equal(w.body.paused.types, m.after) {
					t.Errorf("a wake object written after step %d returned names %q paused, want %q", i+1, w.body.paused.types, m.after)
				}
			}
		}
		// Every Submit's marker was announced in some body, or a body
		// written after its record told every worker to list (the
		// fallback of an announcement that kept losing).
		fallbacks := 0
		for _, w := range writes {
			if !w.body.paused.known {
				fallbacks++
			}
		}
		for _, task := range tasks {
			rec := e.record(task.ID)
			key := e.admin.MarkerKey(&rec.Task)
			found := false
			for _, w := range writes {
				found = found || slices.ContainsFunc(w.body.notes, func(n wakeNote) bool {
					return n.key == key || n.key == "*" && !w.body.paused.known && !w.at.Before(rec.UpdatedAt)
				})
			}
			if !found {
				t.Errorf("the announcement of %s was lost", task.ID)
			}
		}
		t.Logf("%d wake writes (%d fallbacks) for %d submits and %d pauses and resumes", len(writes), fallbacks, len(tasks), len(steps))
	})
}

// TestPauseWakeFallback: a Pause that keeps losing its compare-and-set on
// the wake object writes a body that does not name the paused types
// ("paused ?"); workers then read them from the paused object, so the
// pause holds. An announcement that keeps losing writes nothing blind: it
// gives up, and the next announcement writes the paused types again.
func TestPauseWakeFallback(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		var c pauseCounter
		w := e.run(e.store(nil, c.wrap), advSucceed, pauseOpts("w"))
		time.Sleep(time.Second)
		// A store whose conditional writes of the wake object all lose.
		var blind atomic.Int32
		losing := e.store(nil, advWrap(func(r *http.Request, next http.RoundTripper) (*http.Response, error) {
			if r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/_wake") {
				if r.Header.Get("If-Match") == "" && r.Header.Get("If-None-Match") == "" {
					blind.Add(1)
				} else {
					return &http.Response{StatusCode: http.StatusPreconditionFailed, Status: "412 Precondition Failed", Header: http.Header{},
						Body: http.NoBody, Request: r}, nil
				}
			}
			return next.RoundTrip(r)
		}))
		if err := losing.Pause(e.ctx, "pdf"); err != nil {
			t.Fatal(err)
		}
		if b := e.wakeBodyNow(); b.paused.known {
			t.Fatalf("the fallback's body names the paused types: %+v", b.paused)
		}
		c.take()
		blind.Store(0)
		before := e.wakeBodyNow()
		task := e.create(CreateParams{Name: "held", Type: "pdf"})
		if _, err := losing.Submit(e.ctx, task.ID); err != nil {
			t.Fatal(err)
		}
		if n := blind.Load(); n > 0 {
			t.Errorf("an announcement that kept losing sent %d wake PUTs without a condition", n)
		}
		if after := e.wakeBodyNow(); len(after.notes) != len(before.notes) || after.paused.known {
			t.Errorf("an announcement that kept losing changed the wake object: %+v, was %+v", after, before)
		}
		time.Sleep(time.Minute)
		if got := e.record(task.ID); got.Status != StatusQueued || len(w.started) > 0 {
			t.Fatalf("a pdf task started after the fallback: %s", got.Status)
		}
		if ops := c.take(); ops["GET paused"] != 1 {
			t.Errorf("the worker read the paused object %d times for one body that does not name the paused types, want once: %v", ops["GET paused"], ops)
		}
		e.submit(CreateParams{Name: "next", Type: "csv"})
		if b := e.wakeBodyNow(); !b.paused.known || !slices.Equal(b.paused.types, []string{"pdf"}) {
			t.Errorf("the announcement after the fallback wrote %+v, want pdf paused", b.paused)
		}
	})
}

// TestPauseWakeVersions: what each version does with the other's body of
// the wake object, in a fleet being upgraded.
func TestPauseWakeVersions(t *testing.T) {
	v2 := "s3task-wake 2\n4f0c9a1d2b3e4f50 batch-tasks/active/20261130T144702.123Z_7ZZZX5Q2M4Y7D6N2J3K8H9G0FA\n"
	t.Run("this version reads an earlier one's body", func(t *testing.T) {
		b, ok := parseWakeBody([]byte(v2))
		if !ok || len(b.notes) != 1 || b.paused.known {
			t.Errorf("parseWakeBody(v2) = %+v, %v; want its note, paused types unknown", b, ok)
		}
	})
	t.Run("an earlier version refuses this one's body and lists", func(t *testing.T) {
		// Earlier versions accept a body whose first line is exactly their
		// header, and list at every change of one they refuse.
		body := formatWakeBody(wakeBody{paused: pausedSet{known: true, types: []string{"pdf"}}, notes: []wakeNote{{"r1", "*"}}})
		first, _, _ := strings.Cut(string(body), "\n")
		if first == wakeHeaderV2 {
			t.Errorf("this version's body starts with the earlier header %q", first)
		}
	})
	t.Run("bodies", func(t *testing.T) {
		for _, tc := range []struct {
			body  string
			ok    bool
			known bool
			types []string
		}{
			{"s3task-wake 3\npaused []\nr1 *\n", true, true, nil},
			{"s3task-wake 3\npaused [\"pdf\",\"a b\",\"\"]\n", true, true, []string{"", "a b", "pdf"}},
			{"s3task-wake 3\npaused ?\nr1 *\n", true, false, nil},
			{"s3task-wake 3\nr1 *\n", false, false, nil},
			{"s3task-wake 3\npaused [pdf]\n", false, false, nil},
			{"s3task-wake 3\n", false, false, nil},
			{"s3task-wake 4\npaused []\n", false, false, nil},
		} {
			b, ok := parseWakeBody([]byte(tc.body))
			if ok != tc.ok || b.paused.known != tc.known || !slices.Equal(b.paused.types, tc.types) {
				t.Errorf("parseWakeBody(%q) = %+v, %v; want known %v %q, ok %v", tc.body, b.paused, ok, tc.known, tc.types, tc.ok)
			}
			if ok && tc.known {
				again, _ := parseWakeBody(formatWakeBody(b))
				if !slices.Equal(again.paused.types, b.paused.types) {
					t.Errorf("round trip of %q: %q", tc.body, again.paused.types)
				}
			}
		}
	})
	t.Run("an earlier Store's announcement keeps no pause from this version's workers", func(t *testing.T) {
		inBubble(t, func(t *testing.T, e *advEnv) {
			var c pauseCounter
			w := e.run(e.store(nil, c.wrap), advSucceed, pauseOpts("w"))
			time.Sleep(time.Second)
			if err := e.admin.Pause(e.ctx, "pdf"); err != nil {
				t.Fatal(err)
			}
			time.Sleep(DefaultPollInterval)
			// An earlier Store submits: it writes a body of its own
			// version over this one's, with its marker and without the
			// paused types.
			task := e.create(CreateParams{Name: "old submit", Type: "pdf"})
			if _, err := e.admin.Submit(e.ctx, task.ID); err != nil {
				t.Fatal(err)
			}
			c.take()
			e.putRaw(DefaultPrefix+"_wake", []byte("s3task-wake 2\n0123456789abcdef "+e.markerKey(task.ID)+"\n"))
			time.Sleep(time.Minute)
			if got := e.record(task.ID); got.Status != StatusQueued || len(w.started) > 0 {
				t.Fatalf("a pdf task started under an earlier version's body: %s", got.Status)
			}
			if ops := c.take(); ops["GET paused"] != 1 {
				t.Errorf("the worker read the paused object %d times for one earlier body, want once: %v", ops["GET paused"], ops)
			}
			// This version's next announcement writes its own body, with
			// the paused types as the paused object has them.
			e.submit(CreateParams{Name: "new submit", Type: "csv"})
			b := e.wakeBodyNow()
			if !b.paused.known || !slices.Equal(b.paused.types, []string{"pdf"}) {
				t.Errorf("the announcement over an earlier body wrote %+v, want pdf paused", b.paused)
			}
			if !slices.ContainsFunc(b.notes, func(n wakeNote) bool { return n.key == e.markerKey(task.ID) }) {
				t.Errorf("the announcement over an earlier body dropped its note: %+v", b.notes)
			}
			if err := e.admin.Resume(e.ctx, "pdf"); err != nil {
				t.Fatal(err)
			}
			if !e.awaitTerminal(task.ID, time.Minute) {
				t.Error("the pdf task did not run after the Resume")
			}
		})
	})
}

// TestPauseMiddleware: Store middleware sees Pause, Resume and Paused as
// calls of their own, the first two as writes, and may refuse them; a
// type it changes is validated after it.
func TestPauseMiddleware(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		var seen []string
		refuse := errors.New("not allowed")
		st := e.store(&StoreOptions{Middleware: []StoreMiddleware{func(next CallFunc) CallFunc {
			return func(ctx context.Context, c *Call) (*Task, error) {
				seen = append(seen, fmt.Sprintf("%s %q writes=%v", c.Op, c.Type, c.Op.Writes()))
				switch c.Type {
				case "secret":
					return nil, refuse
				case "long":
					c.Type = strings.Repeat("x", maxTypeLen+1)
				}
				return next(ctx, c)
			}
		}}})
		if err := st.Pause(e.ctx, "pdf"); err != nil {
			t.Fatal(err)
		}
		if err := st.Resume(e.ctx, "pdf"); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Paused(e.ctx); err != nil {
			t.Fatal(err)
		}
		if err := st.Pause(e.ctx, "secret"); !errors.Is(err, refuse) {
			t.Errorf("Pause refused by a middleware = %v", err)
		}
		if err := st.Pause(e.ctx, "long"); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("Pause of a type a middleware made too long = %v, want ErrInvalidArgument", err)
		}
		want := []string{`pause "pdf" writes=true`, `resume "pdf" writes=true`, `paused "" writes=false`, `pause "secret" writes=true`, `pause "long" writes=true`}
		if diff := gocmp.Diff(want, seen); diff != "" {
			t.Errorf("calls the middleware saw (-want +got):\n%s", diff)
		}
	})
}

// TestPauseAfterWakeDeleted pins what Store.Pause says of a deleted wake
// object: the announcement that creates it again states that nothing is
// paused, and a Pause of the type, though it is paused already, writes it
// back.
func TestPauseAfterWakeDeleted(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		if err := e.admin.Pause(e.ctx, "pdf"); err != nil {
			t.Fatal(err)
		}
		key := DefaultPrefix + "_wake"
		if _, err := e.raw.Client.DeleteObject(e.ctx, &s3.DeleteObjectInput{Bucket: &e.mem.Bucket, Key: &key}); err != nil {
			t.Fatal(err)
		}
		e.submit(CreateParams{Name: "announced"})
		if b := e.wakeBodyNow(); !b.paused.known || len(b.paused.types) != 0 {
			t.Fatalf("the recreated wake object names paused types %v (known %t); the doc says it states none", b.paused.types, b.paused.known)
		}
		if err := e.admin.Pause(e.ctx, "pdf"); err != nil {
			t.Fatal(err)
		}
		if b := e.wakeBodyNow(); !b.paused.known || !slices.Equal(b.paused.types, []string{"pdf"}) {
			t.Errorf("after Pause again, the wake object names %v (known %t), want [pdf]", b.paused.types, b.paused.known)
		}
	})
}
