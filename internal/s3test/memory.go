package s3test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/s3task/s3task/mems3"
)

// Memory is an in-process S3 with no sockets, a [mems3.Server] made by
// [mems3.New]: its clients' transport calls gofakes3's HTTP handler
// directly. Nothing in it waits on the network, so it runs inside a
// testing/synctest bubble, where goroutines blocked on timers let the
// bubble's virtual clock jump ahead: hours of leases in milliseconds.
//
// Requests are served one at a time, each applied atomically, so the order in
// which [Memory.OnApply] sees writes is the order in which they took effect.
// A request whose context is done when its turn comes is not applied. The
// server's clock (the Date header) is time.Now plus what [Memory.Advance]
// added.
type Memory struct {
	Bucket string

	srv     *mems3.Server
	backend *s3mem.Backend
	clock   offsetClock
	mu      sync.Mutex // serializes requests
	applied func(Applied)
}

// Applied describes one request that changed the bucket, as [Memory.OnApply]
// reports it.
type Applied struct {
	// Request is the request as received; its context carries whatever the
	// client's transport wrappers put there.
	Request *http.Request
	Method  string
	Key     string // the object key, without the bucket
	Body    []byte // the request body (a PUT's object)
	Status  int    // the status answered
	Time    time.Time
}

// NewMemory returns an empty in-process S3 with one bucket, [Bucket].
func NewMemory() (*Memory, error) {
	m := &Memory{Bucket: Bucket}
	m.backend = s3mem.New(s3mem.WithTimeSource(&m.clock)) // objects' LastModified follows Advance too
	srv, err := mems3.New(&mems3.Options{Bucket: Bucket, Backend: m.backend, Now: m.Now})
	if err != nil {
		return nil, fmt.Errorf("s3test: %w", err)
	}
	m.srv = srv
	return m, nil
}

// Now returns the server's clock.
func (m *Memory) Now() time.Time { return m.clock.Now() }

// Advance moves the server's clock forward by d.
func (m *Memory) Advance(d time.Duration) { m.clock.Advance(d) }

// OnApply sets a function called for every request that changed the bucket
// (a PUT, POST or DELETE answered with a 2xx status), in the order they took
// effect, while no other request is served. It must not make requests.
func (m *Memory) OnApply(f func(Applied)) {
	m.mu.Lock()
	m.applied = f
	m.mu.Unlock()
}

// Transport returns the round tripper that serves requests in process.
func (m *Memory) Transport() http.RoundTripper { return m.serialize(m.srv.Transport()) }

// Client returns an S3 client for the in-process server, like
// [Server.Client]: each wrap wraps the transport, innermost first.
func (m *Memory) Client(wrap ...func(http.RoundTripper) http.RoundTripper) *s3.Client {
	return m.srv.Client(append([]func(http.RoundTripper) http.RoundTripper{m.serialize}, wrap...)...)
}

// Object returns the bytes of an object, read directly from the backend
// without a request, and whether it exists.
func (m *Memory) Object(key string) ([]byte, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	obj, err := m.backend.GetObject(m.Bucket, key, nil)
	if err != nil {
		return nil, false
	}
	defer obj.Contents.Close()
	b, err := io.ReadAll(obj.Contents)
	return b, err == nil
}

// Keys returns the keys under prefix, in order, read directly from the
// backend without a request.
func (m *Memory) Keys(prefix string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	res, err := m.backend.ListBucket(m.Bucket, &gofakes3.Prefix{Prefix: prefix, HasPrefix: true}, gofakes3.ListBucketPage{})
	if err != nil {
		return nil
	}
	keys := make([]string, 0, len(res.Contents))
	for _, c := range res.Contents {
		keys = append(keys, c.Key)
	}
	return keys
}

// serialize wraps mems3's in-process transport so that requests are
// served one at a time, and reports each one that changed the bucket to
// the OnApply function.
func (m *Memory) serialize(next http.RoundTripper) http.RoundTripper {
	return RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		var body []byte
		if r.Body != nil {
			b, err := io.ReadAll(r.Body)
			r.Body.Close()
			if err != nil {
				return nil, err
			}
			body = b
		}
		in := *r
		in.Body = io.NopCloser(bytes.NewReader(body))
		m.mu.Lock()
		defer m.mu.Unlock()
		now := m.Now()
		resp, err := next.RoundTrip(&in) // fails, unapplied, if r's context has ended
		if err != nil {
			return nil, err
		}
		resp.Request = r
		if m.applied != nil && r.Method != http.MethodGet && r.Method != http.MethodHead && resp.StatusCode/100 == 2 {
			key := strings.TrimPrefix(r.URL.Path, "/"+m.Bucket+"/")
			m.applied(Applied{Request: r, Method: r.Method, Key: key, Body: body, Status: resp.StatusCode, Time: now})
		}
		return resp, nil
	})
}
