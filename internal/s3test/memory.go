package s3test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// memoryEndpoint is the made-up endpoint of every Memory's clients. Nothing
// listens there: their transport calls the S3 handler directly.
const memoryEndpoint = "http://s3.memory.invalid"

// Memory is an in-process S3 with no sockets: its clients' transport calls
// gofakes3's HTTP handler directly. Nothing in it waits on the network, so it
// runs inside a testing/synctest bubble, where goroutines blocked on timers
// let the bubble's virtual clock jump ahead: hours of leases in milliseconds.
//
// Requests are served one at a time, each applied atomically, so the order in
// which [Memory.OnApply] sees writes is the order in which they took effect.
// A request whose context is done when its turn comes is not applied. The
// server's clock (the Date header) is time.Now plus what [Memory.Advance]
// added.
type Memory struct {
	Bucket string

	h       http.Handler
	backend *s3mem.Backend
	mu      sync.Mutex // serializes requests
	offset  atomic.Int64
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
	m.backend = s3mem.New(s3mem.WithTimeSource(memClock{m})) // objects' LastModified follows Advance too
	m.h = gofakes3.New(m.backend,
		gofakes3.WithTimeSource(memClock{m}),
		gofakes3.WithTimeSkewLimit(0),
		gofakes3.WithLogger(gofakes3.DiscardLog()),
	).Server()
	if err := m.backend.CreateBucket(Bucket); err != nil {
		return nil, fmt.Errorf("s3test: create bucket: %w", err)
	}
	return m, nil
}

// Now returns the server's clock.
func (m *Memory) Now() time.Time { return time.Now().Add(time.Duration(m.offset.Load())) }

// Advance moves the server's clock forward by d.
func (m *Memory) Advance(d time.Duration) { m.offset.Add(int64(d)) }

// OnApply sets a function called for every request that changed the bucket
// (a PUT, POST or DELETE answered with a 2xx status), in the order they took
// effect, while no other request is served. It must not make requests.
func (m *Memory) OnApply(f func(Applied)) {
	m.mu.Lock()
	m.applied = f
	m.mu.Unlock()
}

// Transport returns the round tripper that serves requests in process.
func (m *Memory) Transport() http.RoundTripper { return RoundTripFunc(m.roundTrip) }

// Client returns an S3 client for the in-process server, like
// [Server.Client]: each wrap wraps the transport, innermost first.
func (m *Memory) Client(wrap ...func(http.RoundTripper) http.RoundTripper) *s3.Client {
	return NewClientOn(memoryEndpoint, "us-east-1", "test", "testsecret", m.Transport(), wrap...)
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

func (m *Memory) roundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil {
		b, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil {
			return nil, err
		}
		body = b
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := r.Context().Err(); err != nil {
		return nil, err // never reached the server
	}
	in := r.Clone(r.Context())
	in.Body = io.NopCloser(bytes.NewReader(body))
	in.ContentLength = int64(len(body))
	if r.Method == http.MethodPut || r.Method == http.MethodPost {
		in.Header.Set("Content-Length", strconv.Itoa(len(body)))
	}
	in.RequestURI = r.URL.RequestURI()
	rec := httptest.NewRecorder()
	now := m.Now()
	rec.Header().Set("Date", now.UTC().Format(http.TimeFormat))
	m.h.ServeHTTP(rec, in)
	resp := rec.Result()
	resp.Request = r
	if resp.ContentLength < 0 {
		resp.ContentLength = int64(rec.Body.Len())
	}
	if m.applied != nil && r.Method != http.MethodGet && r.Method != http.MethodHead && resp.StatusCode/100 == 2 {
		key := strings.TrimPrefix(r.URL.Path, "/"+m.Bucket+"/")
		m.applied(Applied{Request: r, Method: r.Method, Key: key, Body: body, Status: resp.StatusCode, Time: now})
	}
	return resp, nil
}

// memClock is the gofakes3 time source that follows Memory.Now.
type memClock struct{ m *Memory }

func (c memClock) Now() time.Time                  { return c.m.Now() }
func (c memClock) Since(t time.Time) time.Duration { return c.m.Now().Sub(t) }
