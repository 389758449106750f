package s3task

import (
	"time"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/smithy-go/middleware"

	"github.com/s3task/s3task/internal/s3x"
)

// serverNow returns the S3 server's time as best known: the local clock
// corrected by the offset seen in the last response, in UTC, to the
// millisecond. Every decision about leases and retries uses it.
func (s *Store) serverNow() time.Time {
	return time.UnixMilli(s.serverClock().UnixMilli()).UTC()
}

// serverClock is serverNow at full resolution, for measuring how long is
// left until a time on the server's clock.
func (s *Store) serverClock() time.Time {
	return s.opts.Clock().Add(time.Duration(s.skew.Load()))
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
// server's clock stood between st and st+1s, so the offset lies between
// st-local and that plus a second. An estimate already in that window is
// kept, so the offset does not jitter from one response to the next; one
// outside it moves to the window's nearer edge.
func (s *Store) observeTime(st time.Time) {
	lo := int64(st.Sub(s.opts.Clock()))
	hi := lo + int64(time.Second)
	switch cur := s.skew.Load(); {
	case cur < lo:
		s.skew.Store(lo)
	case cur > hi:
		s.skew.Store(hi)
	}
}
