// Package conformance is one test suite for s3task that runs against every
// S3 the project supports: the in-process gofakes3 server and real
// versitygw and SeaweedFS servers. Differences between servers must be absorbed by the
// library, so the suite holds every backend to the same assertions; only
// what a server cannot do at all (move its clock, check signatures) is a
// capability the tests ask about.
//
// A root-package test calls [Run] with a [Backend]:
//
//	conformance.Run(t, conformance.Fake())
//	conformance.Run(t, conformance.Remote("versitygw", s3test.RemoteT(t)))
//	conformance.Run(t, conformance.Remote("seaweedfs", s3test.SeaweedRemoteT(t)))
package conformance

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/s3task/s3task/internal/s3test"
)

// Backend is an S3 to run the suite (or any test) against.
type Backend struct {
	// Name labels the backend in test names and messages.
	Name string
	// open returns a fresh, empty bucket for one test.
	open func(t *testing.T) *Target
}

// Open returns a fresh target for one test: an empty bucket of its own and,
// where the server's clock can move, a server of its own, so that moving
// the clock disturbs no other test. Everything it starts ends with t.
func (b Backend) Open(t *testing.T) *Target {
	t.Helper()
	return b.open(t)
}

// Capabilities say what a backend can do beyond plain S3 requests.
type Capabilities struct {
	// Advance: the server's clock can be moved forward (Target.Advance), so
	// leases expire without waiting.
	Advance bool
	// VerifiesSignatures: the server checks request signatures, refuses
	// expired presigned URLs and enforces POST policies. gofakes3 does none
	// of it.
	VerifiesSignatures bool
}

// Target is one test's bucket on a backend.
type Target struct {
	Backend string
	Bucket  string
	Caps    Capabilities
	// Timing is the lease settings tests on this target use.
	Timing Timing

	endpoint, access, secret string
	advance                  func(time.Duration)
	closer                   *s3test.TransportCloser
}

// Timing holds the lease settings that suit a backend. Where the clock can
// move, leases are long and tests move the clock past them; elsewhere they
// are short and tests wait, on signals, for real time to pass.
type Timing struct {
	Lease     time.Duration
	Margin    time.Duration
	Heartbeat time.Duration
	// PastLease is how far the clock must move, or how long real time must
	// pass, before any worker judges a lease left alone as expired: the
	// lease, the margin, and the one-second resolution of Date headers.
	PastLease time.Duration
	// Wait bounds every wait on a signal. Reaching it is a failure.
	Wait time.Duration
}

// Advance moves the server's clock forward by d. It panics on a target that
// cannot (check Caps.Advance).
func (tg *Target) Advance(d time.Duration) {
	if tg.advance == nil {
		panic("conformance: Advance on a backend whose clock cannot move")
	}
	tg.advance(d)
}

// ExpireLeases makes every lease that is not renewed from now on expire in
// the eyes of every worker: it moves the server's clock by PastLease where
// it can, and otherwise does nothing (real time will pass; wait for the
// signal that follows, bounded by Timing.Wait).
func (tg *Target) ExpireLeases() {
	if tg.advance != nil {
		tg.advance(tg.Timing.PastLease)
	}
}

// Client returns a new S3 client for the target's server with its own HTTP
// transport, as another machine would have. Each wrap wraps the transport,
// innermost first (e.g. a fault injector, then a counter). The SDK's
// retries back off for at most 50ms, so that tests that inject faults do not
// spend their time sleeping. Idle connections are closed when the test
// ends.
func (tg *Target) Client(wrap ...func(http.RoundTripper) http.RoundTripper) *s3.Client {
	ws := append([]func(http.RoundTripper) http.RoundTripper{tg.closer.Wrap}, wrap...)
	base := s3test.NewClientWithKeys(tg.endpoint, tg.access, tg.secret, ws...)
	return s3.New(base.Options(), func(o *s3.Options) {
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
			so.MaxBackoff = 50 * time.Millisecond
		})
	})
}

// HTTPClient returns a plain HTTP client with its own transport, for
// presigned requests, closed like the S3 clients' when the test ends.
func (tg *Target) HTTPClient() *http.Client {
	return &http.Client{Transport: tg.closer.Wrap(&http.Transport{Proxy: nil, MaxIdleConnsPerHost: 8})}
}

// Logger returns the logger for stores and workers: silent, unless
// S3TASK_TEST_LOG is set, in which case warnings and worse go to stderr.
func Logger() *slog.Logger {
	if os.Getenv("S3TASK_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// Fake returns the in-process gofakes3 backend. Each target is a server of
// its own, whose clock tests may move.
func Fake() Backend {
	return Backend{Name: "gofakes3", open: func(t *testing.T) *Target {
		t.Helper()
		srv := s3test.New(t)
		tg := &Target{
			Backend:  "gofakes3",
			Bucket:   srv.Bucket,
			Caps:     Capabilities{Advance: true},
			endpoint: srv.URL, access: "test", secret: "testsecret",
			advance: srv.Advance,
			closer:  &s3test.TransportCloser{},
			Timing: Timing{
				Lease:     10 * time.Second,
				Margin:    2 * time.Second,
				Heartbeat: 50 * time.Millisecond,
				PastLease: 14 * time.Second,
				Wait:      20 * time.Second,
			},
		}
		t.Cleanup(tg.closer.CloseIdleConnections)
		return tg
	}}
}

// Remote returns a backend on the S3-compatible server rc (versitygw or
// SeaweedFS under internal/cmd/s3gw). Each target is a new bucket on it.
// Its clock is real, so leases are a few seconds long.
func Remote(name string, rc s3test.RemoteConfig) Backend {
	return Backend{Name: name, open: func(t *testing.T) *Target {
		t.Helper()
		tg := &Target{
			Backend:  name,
			Caps:     Capabilities{VerifiesSignatures: true},
			endpoint: rc.Endpoint, access: rc.AccessKey, secret: rc.SecretKey,
			closer: &s3test.TransportCloser{},
			Timing: Timing{
				Lease:     3 * time.Second,
				Margin:    time.Second,
				Heartbeat: 500 * time.Millisecond,
				PastLease: 5 * time.Second,
				Wait:      30 * time.Second,
			},
		}
		t.Cleanup(tg.closer.CloseIdleConnections)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		bucket, err := s3test.NewBucket(ctx, tg.Client(), t.Name())
		if err != nil {
			t.Fatal(err)
		}
		tg.Bucket = bucket
		return tg
	}}
}
