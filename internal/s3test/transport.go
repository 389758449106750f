package s3test

import (
	"context"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Op names the kind of an S3 request as it is billed: LIST, GET, HEAD, PUT,
// POST or DELETE.
func Op(r *http.Request) string {
	if r.Method == http.MethodGet && r.URL.Query().Has("list-type") {
		return "LIST"
	}
	return r.Method
}

// Counter is a transport wrapper that counts requests by [Op]. Use its Wrap
// method with [Server.Client]. It is safe for concurrent use.
type Counter struct {
	mu     sync.Mutex
	counts map[string]int
}

// Wrap returns next wrapped so that every request through it is counted.
func (c *Counter) Wrap(next http.RoundTripper) http.RoundTripper {
	return RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		c.mu.Lock()
		if c.counts == nil {
			c.counts = map[string]int{}
		}
		c.counts[Op(r)]++
		c.mu.Unlock()
		return next.RoundTrip(r)
	})
}

// Counts returns a copy of the counts so far.
func (c *Counter) Counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[string]int, len(c.counts))
	for k, v := range c.counts {
		m[k] = v
	}
	return m
}

// Total returns the number of requests counted.
func (c *Counter) Total() int {
	n := 0
	for _, v := range c.Counts() {
		n += v
	}
	return n
}

// Reset sets every count to zero.
func (c *Counter) Reset() {
	c.mu.Lock()
	c.counts = nil
	c.mu.Unlock()
}

// String formats the counts as "GET=2 PUT=1".
func (c *Counter) String() string {
	m := c.Counts()
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(strconv.Itoa(m[k]))
	}
	return b.String()
}

// StripConditionalHeaders is a transport wrapper that removes If-Match and
// If-None-Match from every request, imitating a store that ignores them.
func StripConditionalHeaders(next http.RoundTripper) http.RoundTripper {
	return RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		r = r.Clone(r.Context())
		r.Header.Del("If-Match")
		r.Header.Del("If-None-Match")
		return next.RoundTrip(r)
	})
}

// RoundTripFunc adapts a function to an [http.RoundTripper], for transport
// wrappers.
type RoundTripFunc func(*http.Request) (*http.Response, error)

// RoundTrip calls f(r).
func (f RoundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Sleep waits for d and returns nil, or returns ctx.Err() as soon as ctx
// ends: a transport wrapper that adds latency does not hold a cancelled
// request for the rest of it.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// SpinLimit is how many requests a client wrapped by [SpinGuard] may send
// at one instant of a synctest bubble's clock before the guard calls it a
// busy loop. Setting up a test sends a few hundred at most.
const SpinLimit = 10000

// SpinGuard returns a transport wrapper that catches a busy loop in a
// testing/synctest bubble. There, the clock stands still while any
// goroutine runs, so a client that sends requests again and again without
// waiting (as it would, in real time, for the millisecond until a deadline
// it computed) hangs the test for good. Past [SpinLimit] requests at one
// instant, the guard fails t, naming the last request, and from then on
// lets each further request at that instant wait a millisecond, as real
// time would pass, so that the test can go on to its end. Outside a bubble
// it only counts.
func SpinGuard(t testing.TB) func(http.RoundTripper) http.RoundTripper {
	var (
		mu    sync.Mutex
		at    time.Time
		n     int
		fired bool
	)
	return func(next http.RoundTripper) http.RoundTripper {
		return RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			mu.Lock()
			if now := time.Now(); !now.Equal(at) {
				at, n = now, 0
			}
			n++
			spinning := n > SpinLimit
			if spinning && !fired {
				fired = true
				t.Errorf("a client sent %d requests at %s without waiting, the last %s %s: a busy loop (a bubble's clock stands still while it runs)",
					n, at.UTC().Format(time.RFC3339Nano), Op(r), r.URL.Path)
			}
			mu.Unlock()
			if spinning {
				time.Sleep(time.Millisecond)
			}
			return next.RoundTrip(r)
		})
	}
}

// Hold is a transport wrapper that holds back the first request it is
// given that matches, until [Hold.Release], so that a test can let other
// clients act while that request is on its way, as a slow network would.
// A held request whose context ends fails with the context's error. Make
// one with [NewHold]; use its Wrap method with [Server.Client].
type Hold struct {
	match    func(*http.Request) bool
	taken    atomic.Bool
	arrived  chan struct{}
	released chan struct{}
	once     sync.Once
}

// NewHold returns a Hold for the first request that matches. It is
// released when t ends, so that no request stays held behind a finished
// test.
func NewHold(t testing.TB, match func(*http.Request) bool) *Hold {
	h := &Hold{match: match, arrived: make(chan struct{}), released: make(chan struct{})}
	t.Cleanup(h.Release)
	return h
}

// Arrived is closed when the held request has got to the hold.
func (h *Hold) Arrived() <-chan struct{} { return h.arrived }

// Release lets the held request, and any later one, through. It can be
// called more than once.
func (h *Hold) Release() { h.once.Do(func() { close(h.released) }) }

// Wrap returns next wrapped so that the first matching request waits for
// Release.
func (h *Hold) Wrap(next http.RoundTripper) http.RoundTripper {
	return RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		if h.match(r) && h.taken.CompareAndSwap(false, true) {
			close(h.arrived)
			select {
			case <-h.released:
			case <-r.Context().Done():
				return nil, r.Context().Err()
			}
		}
		return next.RoundTrip(r)
	})
}

// TransportCloser is a transport wrapper that remembers the transport it
// wraps, so a test can close its idle connections when it ends: a
// keep-alive connection to a server that outlives the test would otherwise
// leave the transport's goroutines running.
type TransportCloser struct {
	mu  sync.Mutex
	trs []interface{ CloseIdleConnections() }
}

// Wrap returns next unchanged after remembering it. Pass it innermost.
func (c *TransportCloser) Wrap(next http.RoundTripper) http.RoundTripper {
	if ci, ok := next.(interface{ CloseIdleConnections() }); ok {
		c.mu.Lock()
		c.trs = append(c.trs, ci)
		c.mu.Unlock()
	}
	return next
}

// CloseIdleConnections closes the idle connections of every transport seen.
func (c *TransportCloser) CloseIdleConnections() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, tr := range c.trs {
		tr.CloseIdleConnections()
	}
}
