package s3task

import (
	"time"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/smithy-go/middleware"

	"github.com/s3task/s3task/internal/s3x"
)

// serverNow returns the S3 server's time as best known, in UTC, to the
// millisecond: the local clock corrected by the offset estimated from the
// Date headers of the responses seen (see observeTime). A local clock that
// runs ahead of the server by a second or more is never taken for the
// server's, nor one ahead by less once a header shows it; a corrected
// estimate never runs ahead of the server. Every decision about leases and
// retries uses it, but for a holder's own deadline (serverLatest) and
// whether a start or a retry has come (serverEarliest).
func (s *Store) serverNow() time.Time {
	return time.UnixMilli(s.serverClock().UnixMilli()).UTC()
}

// Now returns the S3 server's time as the Store knows it, to the
// millisecond: the clock by which CreateParams.RunAt, [Store.Schedule],
// retries and leases are judged, and which stamps the records. It is the
// local clock corrected by what the Date headers of S3's responses showed;
// before the first response, the local clock. Use it to schedule a start
// relative to the server's time: store.Schedule(ctx, id, store.Now().Add(d)).
// No request.
func (s *Store) Now() time.Time { return s.serverNow() }

// serverClock is serverNow at full resolution, for measuring how long is
// left until a time on the server's clock.
func (s *Store) serverClock() time.Time {
	return s.opts.Clock().Add(time.Duration(s.skew.Load()))
}

// serverEarliest is the earliest time the server's clock may read now, by
// the Date headers seen (see observeTime): the local clock corrected by the
// least offset they allow, in UTC, to the millisecond. serverNow may lie
// anywhere above it within what they allow (the local clock itself, while
// no header rules it out), up to a second ahead of the server. A claim
// judges RunAt and RetryAt by it, which no margin covers, so that a task
// never starts early however little the worker's clock leads the server's.
// Before the first header it is the local clock, as serverNow is.
func (s *Store) serverEarliest() time.Time {
	return time.UnixMilli(s.opts.Clock().Add(time.Duration(s.skewLeast.Load())).UnixMilli()).UTC()
}

// dueLead is how far serverNow may lead serverEarliest, rounded up to a
// millisecond: a worker that sees a start or a retry ahead looks again that
// much after its time by serverNow, when serverEarliest has reached it,
// rather than at its time, when the claim would be refused.
func (s *Store) dueLead() time.Duration {
	d := max(time.Duration(s.skew.Load()-s.skewLeast.Load()), 0)
	if r := d % time.Millisecond; r != 0 {
		d += time.Millisecond - r
	}
	return d
}

// serverLatest is the latest time the server's clock may read now, by the
// Date headers seen (but for the network delay of their responses): a
// holder judges by it how long its own lease is left, so that it stops
// trusting it in time whichever way serverNow errs.
func (s *Store) serverLatest() time.Time {
	return s.opts.Clock().Add(time.Duration(s.skewMost.Load()))
}

// maxStampStepBack is how far serverNow may step back (its offset is
// re-estimated from one-second Date headers with every response) before
// stamp follows it instead of holding still.
const maxStampStepBack = 5 * time.Second

// stamp returns the time for IDs and audit timestamps: serverNow, except that
// it does not go back by small steps, so the tasks and records one Store
// writes in sequence are in order. A larger step back is a real correction
// (the first responses of a Store whose local clock is off), and stamp
// follows it.
func (s *Store) stamp() time.Time {
	t := s.serverNow().UnixMilli()
	for {
		last := s.lastStamp.Load()
		if t <= last && last-t <= maxStampStepBack.Milliseconds() {
			t = last
			break
		}
		if s.lastStamp.CompareAndSwap(last, t) {
			break
		}
	}
	return time.UnixMilli(t).UTC()
}

// observe records the server's clock from a response's Date header.
func (s *Store) observe(md middleware.Metadata) {
	if st, ok := awsmiddleware.GetServerTime(md); ok && !st.IsZero() {
		s.observeTime(st)
	}
}

// observeErr records the server's clock from the response behind an error.
func (s *Store) observeErr(err error) {
	if st, ok := s3x.ServerTime(err); ok {
		s.observeTime(st)
	}
}

// observeTime narrows the offset with a Date header: when it was read, the
// server's clock had reached st and not st+1s (less the response's network
// delay), so the offset lies between st-local and that plus a second. The
// bounds kept are the tightest that every header seen allows: the least
// only rises, the most only falls; a header that contradicts them (a clock
// was set) starts them again from its own window, as does the first one.
// The estimate is kept while it lies within them, so it does not jitter
// from one response to the next, and exact clocks stay exact; one they
// rule out moves to the least, since a header proves only that the server's
// clock had reached its second: from there it never runs ahead of the
// server, and it rises with the least to the tightest bound.
func (s *Store) observeTime(st time.Time) {
	if s.exact {
		return
	}
	lo := int64(st.Sub(s.opts.Clock()))
	hi := lo + int64(time.Second)
	s.clockMu.Lock()
	defer s.clockMu.Unlock()
	least, most := s.skewLeast.Load(), s.skewMost.Load()
	if !s.observed || lo > most || hi < least {
		least, most = lo, hi
		s.observed = true
	} else {
		least, most = max(least, lo), min(most, hi)
	}
	s.skewLeast.Store(least)
	s.skewMost.Store(most)
	if cur := s.skew.Load(); cur < least || cur > most {
		s.reached("clock/lower-edge")
		s.skew.Store(least)
	}
}
