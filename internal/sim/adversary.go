package sim

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/s3task/s3task/internal/entropy"
	"github.com/s3task/s3task/internal/faults"
	"github.com/s3task/s3task/internal/s3test"
)

// Per-request fault probabilities at Config.Faults = 1: about 2% of the
// requests fail in some way and 2% are delayed.
const (
	rateLost    = 0.005 // applied, then the answer is lost
	rate500     = 0.003
	rate503     = 0.003
	rateReset   = 0.003 // connection reset before the request was sent
	rate409     = 0.005 // of conditional PUTs: ConditionalRequestConflict
	rateZombie  = 0.003 // of writes: the client is told it failed, S3 applies it later
	rateLatency = 0.02
	maxLatency  = 3 * time.Second

	// Of output writes in a world with a tidier (Config.Tidy).
	rateTidyZombie = 0.2

	rateAnswerDelay = 0.03 // answers delivered late, after S3 stamped their Date

	// rateWake409 is, in worlds with a pauser, the chance that a
	// conditional PUT of the wake object is refused with a 409: one
	// announcement in about 40 loses three times and falls back.
	rateWake409 = 0.3
	// wakeSlow is how long a request for the wake or the paused object
	// may take before it excuses an announcement that did not get
	// written (see EventWakeSlow).
	wakeSlow = 500 * time.Millisecond
)

// procKey is the context key of the name of the process a request is from.
type procKey struct{}

// procOf returns the name of the process that sent r, or "".
func procOf(r *http.Request) string {
	name, _ := r.Context().Value(procKey{}).(string)
	return name
}

// tag is the transport wrapper that puts the process name into every
// request's context, so the writes S3 applies can be attributed.
func (p *proc) tag(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		return next.RoundTrip(r.WithContext(context.WithValue(r.Context(), procKey{}, p.name)))
	})
}

// link is the network of one process as the adversary shapes it.
type link struct {
	w    *World
	name string
	// ingesting: an Ingester's or a direct caller of Ingest, which the
	// world's brownouts hit (see World.brownedOut).
	ingesting bool
	// net draws what happens to each request, keyed by the request (see
	// request), so that concurrent goroutines of the process draw the same
	// numbers on every run of a seed, whichever sends first.
	net *entropy.Source

	mu          sync.Mutex
	pausedUntil time.Time
	outageUntil time.Time
	slowUntil   time.Time // every request is slowed down by seconds until then
	freezes     []span    // when the process was frozen

	// cutMu is held for reading by each request while S3 serves it, so a
	// crash can wait for those in flight: nothing sent before it lands after.
	cutMu   sync.RWMutex
	cut     bool
	crashed chan struct{}
	once    sync.Once
}

func newLink(w *World, name string) *link {
	return &link{w: w, name: name, net: entropy.New(w.cfg.Seed, "net/"+name), crashed: make(chan struct{})}
}

// request returns the random numbers of one request, drawn from what it
// is (method, operation, object key) and when it is sent: the same on every
// run, whichever goroutine of the process sends first. Two goroutines
// sending the same request at the same instant draw the same numbers.
func (n *link) request(r *http.Request) *Rand {
	return &Rand{r: n.net.At(r.Method+" "+s3test.Op(r)+" "+r.URL.Path, time.Now())}
}

// crash cuts the process off for good.
func (n *link) crash() {
	n.once.Do(func() {
		close(n.crashed)
		n.cutMu.Lock()
		n.cut = true
		n.cutMu.Unlock()
	})
}

// dead reports whether the process crashed.
func (n *link) dead() bool {
	select {
	case <-n.crashed:
		return true
	default:
		return false
	}
}

// pause makes every request of the process hang for d from now, and
// records it as an event.
func (n *link) pause(d time.Duration) {
	now := time.Now()
	n.mu.Lock()
	n.pausedUntil = now.Add(d)
	n.mu.Unlock()
	n.w.event(n.name, EventPause, now, now.Add(d))
}

// freeze stops the whole process for d from now: its requests hang, and
// its handlers and timers stand still, so whatever a handler or the
// library would have done meanwhile happens when the freeze ends (see
// thawed). It records the freeze as an event.
func (n *link) freeze(d time.Duration) {
	now := time.Now()
	n.mu.Lock()
	n.pausedUntil = later(n.pausedUntil, now.Add(d))
	n.freezes = append(n.freezes, span{now, now.Add(d)})
	n.mu.Unlock()
	n.w.event(n.name, EventFreeze, now, now.Add(d))
}

// freezeAt freezes the process for d from at, unless the world is over by
// then.
func (n *link) freezeAt(at time.Time, d time.Duration) {
	n.w.wg.Go(func() {
		if pause(time.Until(at), n.w.over) == 0 {
			n.freeze(d)
		}
	})
}

// thawed returns when something the process did at t happened for the
// world: t, or the end of the freeze t falls in.
func (n *link) thawed(t time.Time) time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, f := range n.freezes {
		if !t.Before(f.From) && t.Before(f.To) {
			return f.To
		}
	}
	return t
}

// outage makes every request of the process fail for d from now.
func (n *link) outage(d time.Duration) { n.trouble(&n.outageUntil, EventOutage, d) }

// slow makes every request of the process take seconds longer for d from
// now, as a congested network would.
func (n *link) slow(d time.Duration) { n.trouble(&n.slowUntil, EventSlow, d) }

// trouble extends the trouble that lasts until *until to d from now, and
// records it as an event of kind.
func (n *link) trouble(until *time.Time, kind EventKind, d time.Duration) {
	n.mu.Lock()
	*until = later(*until, time.Now().Add(d))
	n.mu.Unlock()
	now := time.Now()
	n.w.event(n.name, kind, now, now.Add(d))
}

// wait blocks for d, or until ctx ends, the process crashes or the world
// ends; it returns the error the request then fails with.
//
// What has ended already is taken in the order it ends in, not as select
// would pick among ready channels, at random: a crash cuts the link
// before it cancels the process's contexts, and the end of the world
// cancels them before it closes over. A request that meets its wait with
// two of them ended (a worker's last requests, sent at the instant the
// fleet stops) fails the same way on every run of the seed.
func (n *link) wait(ctx context.Context, d time.Duration) error {
	switch {
	case n.dead():
		return s3test.ErrCut
	case ctx.Err() != nil:
		return ctx.Err()
	case n.w.closed():
		return s3test.ErrCut
	}
	switch pause(d, ctx.Done(), n.crashed, n.w.over) {
	case 0:
		return nil
	case 1:
		return ctx.Err()
	default: // crashed, or the world is over
		return s3test.ErrCut
	}
}

// fault is one drawn fault.
type fault int

const (
	noFault fault = iota
	faultLost
	fault500
	fault503
	faultReset
	fault409
	faultZombie
)

var faultNames = map[fault]string{
	faultLost: "lost-response", fault500: "500", fault503: "503",
	faultReset: "reset", fault409: "409", faultZombie: "zombie",
}

func (n *link) draw(r *http.Request, rng *Rand) (fault, time.Duration) {
	s := n.w.cfg.Faults
	if s == 0 {
		return noFault, 0
	}
	var delay time.Duration
	if rng.Chance(rateLatency * s) {
		delay = rng.Dur(0, maxLatency)
	}
	conditional := r.Method == http.MethodPut && (r.Header.Get("If-Match") != "" || r.Header.Get("If-None-Match") != "")
	write := r.Method != http.MethodGet && r.Method != http.MethodHead
	if n.w.cfg.Pause && conditional && strings.HasSuffix(r.URL.Path, "/_wake") && rng.Chance(rateWake409*s) {
		// Crowd the wake object, so that announcements, Pauses and
		// Resumes fall back now and then to the write that does not
		// carry the paused types over.
		return fault409, delay
	}
	if n.w.cfg.Tidy && r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/output-") && rng.Chance(rateTidyZombie*s) {
		return faultZombie, delay
	}
	u := rng.Float64()
	for _, c := range []struct {
		f fault
		p float64
	}{{faultLost, rateLost}, {fault500, rate500}, {fault503, rate503}, {faultReset, rateReset}, {fault409, rate409}, {faultZombie, rateZombie}} {
		if c.f == fault409 && !conditional || c.f == faultZombie && !write {
			continue
		}
		if u < c.p*s {
			return c.f, delay
		}
		u -= c.p * s
	}
	return noFault, delay
}

// wrap is the adversary's transport wrapper.
func (n *link) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		start := time.Now()
		resp, sent, err := n.roundTrip(next, r)
		// A refused compare-and-set (412) is no failure: another writer's
		// write landed first, and the library tries again.
		if (strings.HasSuffix(r.URL.Path, "/_wake") || strings.HasSuffix(r.URL.Path, "/_paused")) &&
			(err != nil || resp.StatusCode >= 400 && resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusPreconditionFailed) {
			n.w.event(n.name, EventWakeFailed, start, time.Now())
		} else if (strings.HasSuffix(r.URL.Path, "/_wake") || strings.HasSuffix(r.URL.Path, "/_paused")) && time.Since(start) > wakeSlow {
			n.w.event(n.name, EventWakeSlow, start, time.Now())
		}
		if n.w.cfg.Requests {
			q := Request{Proc: n.name, Op: s3test.Op(r), Key: r.URL.Path, Sent: start, Done: time.Now()}
			if resp != nil {
				q.Status = resp.StatusCode
			}
			if err != nil {
				q.Err = err.Error()
			}
			n.w.mu.Lock()
			n.w.h.Requests = append(n.w.h.Requests, q)
			n.w.mu.Unlock()
		}
		if !sent && r.Body != nil {
			r.Body.Close()
		}
		return resp, err
	})
}

// roundTrip serves r as the adversary decides; sent says whether it was
// passed on (which then closed its body).
func (n *link) roundTrip(next http.RoundTripper, r *http.Request) (_ *http.Response, sent bool, _ error) {
	ctx := r.Context()
	n.w.countRequest(r)
	rng := n.request(r)
	// Every request takes a moment of its own, under a millisecond, once
	// it is through whatever held it up, and whatever becomes of it: no
	// two requests reach S3, and no two goroutines learn what became of
	// theirs, at the same instant of virtual time, even when a pause ends
	// for all of them at once. What happens is then ordered by the
	// bubble's clock, not by the Go scheduler, and a seed replays exactly.
	moment := func() { pause(time.Microsecond + time.Duration(rng.IntN(int(time.Millisecond)))) }
	if n.dead() {
		moment()
		return nil, false, s3test.ErrCut
	}
	// A paused process: the request hangs until the pause ends.
	for {
		n.mu.Lock()
		d := time.Until(n.pausedUntil)
		n.mu.Unlock()
		if d <= 0 {
			break
		}
		if err := n.wait(ctx, d); err != nil {
			moment()
			return nil, false, err
		}
	}
	f, delay := n.draw(r, rng)
	if strings.HasPrefix(n.name, "op") && r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/status.json") && rng.Chance(0.1*n.w.cfg.Faults) {
		// An operator's change held up for seconds, while workers and the
		// notifier write the record, once or more: the call must tell from
		// the prior revisions that its write did not land.
		delay += rng.Dur(2*time.Second, 10*time.Second)
	}
	if n.name == impatientProc && r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/status.json") {
		// The impatient operator's Cancel of a long run, held up for
		// minutes on a stalled connection while the task's worker renews
		// its lease more times than the record keeps revisions of: the
		// 412 it then gets cannot tell whether the write landed, and the
		// call must settle that by deciding again.
		n.w.count("held-minutes")
		delay += rng.Dur(3*time.Minute, 4*time.Minute)
	}
	n.mu.Lock()
	if time.Now().Before(n.slowUntil) {
		delay += rng.Dur(time.Second, 8*time.Second)
	}
	n.mu.Unlock()
	if delay > 0 {
		n.w.count("latency")
		start := time.Now()
		err := n.wait(ctx, delay)
		n.w.event(n.name, EventDelayed, start, time.Now())
		if err != nil {
			moment()
			return nil, false, err
		}
	}
	moment()
	n.mu.Lock()
	out := time.Now().Before(n.outageUntil)
	n.mu.Unlock()
	if n.ingesting && s3test.Op(r) != "LIST" && n.w.brownedOut() {
		n.w.count("brownout-refused")
		return nil, false, &faults.Error{Kind: faults.ResetBefore}
	}
	if n.ingesting && r.Method == http.MethodGet {
		n.w.vanish(r)
	}
	if out {
		n.w.count("outage-refused")
		return nil, false, &faults.Error{Kind: faults.ResetBefore}
	}
	if f != noFault {
		n.w.count(faultNames[f])
	}
	// An operator's record write refused in a made-up way is answered
	// seconds later, so that others may write the record meanwhile, once
	// or more: the call must then tell from the prior revisions that its
	// write did not land, rather than take the later writes for its own.
	if (f == fault500 || f == fault503 || f == fault409) && strings.HasPrefix(n.name, "op") &&
		r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/status.json") {
		n.w.count("slow-refusal")
		if err := n.wait(ctx, rng.Dur(2*time.Second, 10*time.Second)); err != nil {
			return nil, false, err
		}
	}
	switch f {
	case fault500:
		return n.answer(ctx, rng, errorResponse(r, http.StatusInternalServerError, "InternalError", "We encountered an internal error. (simulated)"), false)
	case fault503:
		return n.answer(ctx, rng, errorResponse(r, http.StatusServiceUnavailable, "SlowDown", "Please reduce your request rate. (simulated)"), false)
	case fault409:
		return n.answer(ctx, rng, errorResponse(r, http.StatusConflict, "ConditionalRequestConflict", "A conflicting conditional operation is in progress. (simulated)"), false)
	case faultReset:
		return nil, false, &faults.Error{Kind: faults.ResetBefore}
	case faultZombie:
		return nil, n.zombie(next, r, rng), &faults.Error{Kind: faults.ResetBefore}
	}
	n.cutMu.RLock()
	if n.cut {
		n.cutMu.RUnlock()
		return nil, false, s3test.ErrCut
	}
	resp, err := next.RoundTrip(r)
	n.cutMu.RUnlock()
	if err == nil {
		if struck, resp, err := n.farMoved(ctx, rng, r, resp); struck {
			return resp, true, err
		}
	}
	if err == nil && f == faultLost {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		// The connection that lost it is in trouble for a little while.
		if rng.Chance(0.3) {
			n.outage(rng.Dur(2*time.Second, 8*time.Second))
		} else {
			n.slow(5 * time.Second)
		}
		return nil, true, &faults.Error{Kind: faults.LostResponse}
	}
	if err != nil {
		return nil, true, err
	}
	if resp.StatusCode == http.StatusNotFound && r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/status.json") {
		n.w.readGone(n.name, r.URL.Path)
	}
	return n.answer(ctx, rng, resp, true)
}

// answer hands resp to the client as the timing adversary decides: its
// Date header off by up to DateSpread, as the clocks of S3's servers
// disagree, and now and then late, by up to MaxAnswerDelay after S3
// stamped its Date, as a congested network delivers it. A client that
// gives up meanwhile, or a process that crashes, gets no answer.
func (n *link) answer(ctx context.Context, rng *Rand, resp *http.Response, sent bool) (*http.Response, bool, error) {
	if n.w.cfg.Faults == 0 {
		return resp, sent, nil
	}
	p := n.w.h.Params
	if resp.Header.Get("Date") != "" {
		// The server stamped the time it read, to the second; a server
		// whose clock is off read another time.
		read := time.Now().Add(time.Duration(rng.IntN(int(2*p.DateSpread+1))) - p.DateSpread)
		resp.Header.Set("Date", read.UTC().Format(http.TimeFormat))
	}
	if rng.Chance(rateAnswerDelay * n.w.cfg.Faults) {
		n.w.count("late-answer")
		start := time.Now()
		err := n.wait(ctx, time.Duration(rng.IntN(int(p.MaxAnswerDelay))))
		n.w.event(n.name, EventDelayed, start, time.Now())
		if err != nil {
			resp.Body.Close()
			return nil, sent, err
		}
	}
	return resp, sent, nil
}

// zombie sends r on after its client was told it failed: S3 applies it
// later, by up to MaxZombieDelay, as a request stuck in a network applies
// after the client that sent it gave up. It reports whether it took the
// request (and so closed its body).
func (n *link) zombie(next http.RoundTripper, r *http.Request, rng *Rand) bool {
	var body []byte
	if r.Body != nil {
		b, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil {
			return true
		}
		body = b
	}
	late := r.Clone(context.WithValue(context.WithoutCancel(r.Context()), zombieKey{}, true))
	late.Body = io.NopCloser(bytes.NewReader(body))
	late.ContentLength = int64(len(body))
	d := time.Duration(rng.IntN(int(n.w.h.Params.MaxZombieDelay)))
	n.w.count("zombie")
	n.w.wg.Go(func() {
		if pause(d, n.w.over) != 0 {
			return
		}
		if resp, err := next.RoundTrip(late); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
	return true
}

// zombieKey marks the context of a request the zombie adversary sent on.
type zombieKey struct{}

// isZombie reports whether r is a zombie's.
func isZombie(r *http.Request) bool { return r.Context().Value(zombieKey{}) != nil }

// errorResponse makes up an S3 error answer, dated by the virtual clock as
// the in-process S3's own answers are.
func errorResponse(r *http.Request, status int, code, msg string) *http.Response {
	resp := faults.ErrorResponse(r, status, code, msg)
	resp.Header.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	return resp
}

// roundTripFunc adapts a function to an http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

// RoundTrip calls f(r).
func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
