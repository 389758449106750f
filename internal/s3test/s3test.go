// Package s3test runs an in-process S3 (package mems3: gofakes3 over a
// loopback HTTP server, or with no socket at all) for tests, examples and
// the demo, and builds S3 clients for it and for the other servers the
// tests run against.
//
// The server's clock, as S3 clients see it in the Date header, can be moved
// forward with [Server.Advance], so lease expiry can be tested without
// sleeping. Each [Server.Client] call returns a client with its own HTTP
// transport, so a test can stand in for many machines.
package s3test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/johannesboyne/gofakes3"

	"github.com/s3task/s3task/mems3"
)

// Bucket is the bucket every Server starts with.
const Bucket = mems3.DefaultBucket

// Server is an S3 endpoint on 127.0.0.1, a [mems3.Server] whose clock can
// be moved forward.
type Server struct {
	URL    string
	Bucket string

	srv   *mems3.Server
	clock *offsetClock
}

// Start starts a server with an empty in-memory backend and one bucket.
// Objects' LastModified follows [Server.Advance] as the Date header does.
func Start() (*Server, error) { return StartBackend(nil) }

// StartBackend starts a server on a free loopback port over the given
// gofakes3 backend (nil means an empty in-memory one) and creates [Bucket]
// in it if it is missing.
func StartBackend(backend gofakes3.Backend) (*Server, error) {
	c := &offsetClock{}
	srv, err := mems3.Listen("", &mems3.Options{Bucket: Bucket, Backend: backend, Now: c.Now})
	if err != nil {
		return nil, fmt.Errorf("s3test: %w", err)
	}
	return &Server{URL: srv.URL(), Bucket: srv.Bucket(), srv: srv, clock: c}, nil
}

// New starts a server for a test and stops it when the test ends.
func New(t testing.TB) *Server {
	t.Helper()
	s, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// Close stops the server. A listener that failed shows in the requests
// made to it, so Close does not report it.
func (s *Server) Close() { _ = s.srv.Close() }

// Now returns the server's clock.
func (s *Server) Now() time.Time { return s.clock.Now() }

// Advance moves the server's clock forward by d.
func (s *Server) Advance(d time.Duration) { s.clock.Advance(d) }

// Client returns a new S3 client for the server with its own HTTP
// transport. Each wrap, if any, wraps the transport (innermost first), e.g. to
// count requests or inject faults.
func (s *Server) Client(wrap ...func(http.RoundTripper) http.RoundTripper) *s3.Client {
	return s.srv.Client(wrap...)
}

// NewClient returns an S3 client for an S3-compatible endpoint with static
// test credentials, path-style addressing and checksums only when required.
func NewClient(endpoint string, wrap ...func(http.RoundTripper) http.RoundTripper) *s3.Client {
	return NewClientWithKeys(endpoint, "test", "testsecret", wrap...)
}

// NewClientWithKeys is [NewClient] with the given static credentials.
func NewClientWithKeys(endpoint, access, secret string, wrap ...func(http.RoundTripper) http.RoundTripper) *s3.Client {
	var rt http.RoundTripper = &http.Transport{
		Proxy:               nil,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     30 * time.Second,
	}
	return NewClientOn(endpoint, "us-east-1", access, secret, rt, wrap...)
}

// NewClientOn returns a client like [NewClientWithKeys]'s for region, over
// the transport rt, each wrap wrapping it, innermost first: a
// [mems3.NewClient] with these credentials and region.
func NewClientOn(endpoint, region, access, secret string, rt http.RoundTripper, wrap ...func(http.RoundTripper) http.RoundTripper) *s3.Client {
	for _, w := range wrap {
		rt = w(rt)
	}
	return mems3.NewClient(endpoint, rt, func(o *s3.Options) {
		o.Region = region
		o.Credentials = credentials.NewStaticCredentialsProvider(access, secret, "")
	})
}

// offsetClock is the real clock plus an offset.
type offsetClock struct {
	offset atomic.Int64 // nanoseconds
}

func (c *offsetClock) Now() time.Time                  { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *offsetClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) } // with Now, a gofakes3.TimeSource
func (c *offsetClock) Advance(d time.Duration)         { c.offset.Add(int64(d)) }

// Marker returns the key of the active marker of task id under prefix:
// the one found by listing the marker folder (the newest, by key, if there
// are several), or, when there is none, the plain key active/<id> that
// earlier versions of s3task wrote and the library still reads, so that a
// test can plant one there.
func Marker(ctx context.Context, client *s3.Client, bucket, prefix, id string) string {
	dir := prefix + "active/"
	found := dir + id
	keys, _ := Objects{Client: client, Bucket: bucket}.Keys(ctx, dir) // on an error, what was listed
	for _, key := range keys {
		if strings.HasSuffix(key, "_"+id) || key == dir+id {
			found = key
		}
	}
	return found
}
