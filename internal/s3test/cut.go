package s3test

import (
	"net/http"
	"sync"
	"sync/atomic"
)

// ErrCut is the error every request through a cut [Cutter] fails with. The
// AWS SDK does not retry it, so a cut-off client fails at once instead of
// backing off for seconds.
var ErrCut error = cutError{}

type cutError struct{}

func (cutError) Error() string { return "s3test: connection cut" }

// RetryableError tells the AWS SDK's retryer not to resend the request.
func (cutError) RetryableError() bool { return false }

// Cutter is a transport wrapper that can cut a client off from S3, as a
// network partition or a frozen machine would: while cut, every request
// fails with [ErrCut] without reaching the server. Use its Wrap method with
// [Server.Client]. The zero value passes every request through; it is safe
// for concurrent use.
type Cutter struct {
	// mu is held for reading by every request in flight, so Cut can wait
	// for them: once Cut returns, nothing sent before it can still land.
	mu      sync.RWMutex
	cut     bool
	refused atomic.Int64
}

// Wrap returns next wrapped so that it fails while c is cut.
func (c *Cutter) Wrap(next http.RoundTripper) http.RoundTripper {
	return RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		c.mu.RLock()
		defer c.mu.RUnlock()
		if c.cut {
			c.refused.Add(1)
			if r.Body != nil {
				r.Body.Close()
			}
			return nil, ErrCut
		}
		return next.RoundTrip(r)
	})
}

// Cut makes every later request fail. It returns once the requests already
// in flight have got their response, so none of them reaches the server
// afterwards.
func (c *Cutter) Cut() {
	c.mu.Lock()
	c.cut = true
	c.mu.Unlock()
}

// Restore lets requests through again.
func (c *Cutter) Restore() {
	c.mu.Lock()
	c.cut = false
	c.mu.Unlock()
}

// Refused returns how many requests failed because c was cut.
func (c *Cutter) Refused() int { return int(c.refused.Load()) }
