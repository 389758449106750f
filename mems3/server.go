package mems3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// DefaultBucket is the name of the bucket when [Options.Bucket] is empty.
const DefaultBucket = "tasks"

// DefaultAddr is the address [Listen] listens on when given "": a free
// port of the IPv4 loopback interface.
const DefaultAddr = "127.0.0.1:0"

// inProcessURL is the endpoint of an in-process server's clients. Nothing
// listens there (.invalid never resolves): their transport calls the
// handler directly.
const inProcessURL = "http://s3.memory.invalid"

// closeGrace is how long [Server.Close] lets requests under way finish
// before it closes their connections.
const closeGrace = 5 * time.Second

// ErrClosed is the error of a request made through [Server.Transport],
// or through an in-process server's client, after [Server.Close].
var ErrClosed = errors.New("mems3: server closed")

// Options configures a [Server]. A nil *Options means the defaults.
type Options struct {
	// Bucket is the name of the server's bucket, created when the server
	// starts if the backend does not have it yet. It must be a valid S3
	// bucket name: 3 to 63 lower-case letters, digits, dots and hyphens.
	// Default: [DefaultBucket].
	Bucket string

	// Backend stores the objects. Default: a new in-memory backend
	// (gofakes3's s3mem) whose objects' LastModified follows Now. Pass
	// another gofakes3 backend, such as s3bolt over a bbolt file, to keep
	// objects across restarts.
	Backend gofakes3.Backend

	// Now is the server's clock: the Date header of its answers, which
	// s3task judges leases by, and the default backend's LastModified.
	// A test can return a time ahead of the real one to make leases expire
	// without waiting. It must be safe for concurrent use. Default:
	// time.Now.
	Now func() time.Time
}

// Server is an S3 server with one bucket whose objects live in memory. It
// serves in process ([New]) or on a TCP address ([Listen]). It is safe for
// concurrent use. Its zero value is not usable.
type Server struct {
	bucket  string
	url     string
	handler http.Handler // gofakes3, with the Date header from the clock
	now     func() time.Time

	http   *http.Server // nil in process
	served chan error   // what http.Serve returned
	closed atomic.Bool
	once   sync.Once
	err    error // Close's answer
}

// New returns a server that serves in process, with no socket: its
// clients' transport calls its handler directly. Its URL is a made-up one
// that no network request can reach.
//
// Errors: an invalid [Options.Bucket], or the backend's error creating
// the bucket.
func New(opts *Options) (*Server, error) {
	s, err := newServer(opts)
	if err != nil {
		return nil, err
	}
	s.url = inProcessURL
	return s, nil
}

// Listen returns a server listening on addr, a host:port such as
// "127.0.0.1:9000" ("" means [DefaultAddr]; port 0 picks a free one). Its
// clients reach it over HTTP, and so does anything else that can reach
// addr: a browser, curl, another process. Its answers allow requests from
// every origin (CORS), so a page served from another port can upload with
// a presigned PUT or POST form.
//
// The server checks no credentials: keep addr on a loopback interface.
//
// Errors: as [New], and the error listening on addr.
func Listen(addr string, opts *Options) (*Server, error) {
	if addr == "" {
		addr = DefaultAddr
	}
	s, err := newServer(opts)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("mems3: listen on %s: %w", addr, err)
	}
	s.url = "http://" + l.Addr().String()
	s.http = &http.Server{
		Handler: s.handler,
		// gofakes3 writes a second header when a client hangs up in the
		// middle of an answer; net/http would log that, which is noise.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	s.served = make(chan error, 1)
	go func() { s.served <- s.http.Serve(l) }()
	return s, nil
}

// newServer sets up gofakes3 and the bucket, as both New and Listen do.
func newServer(opts *Options) (*Server, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Bucket == "" {
		o.Bucket = DefaultBucket
	}
	if err := gofakes3.ValidateBucketName(o.Bucket); err != nil {
		return nil, fmt.Errorf("mems3: Options.Bucket %q: %w", o.Bucket, err)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	clock := timeSource(o.Now)
	if o.Backend == nil {
		o.Backend = s3mem.New(s3mem.WithTimeSource(clock))
	}
	exists, err := o.Backend.BucketExists(o.Bucket)
	if err == nil && !exists {
		err = o.Backend.CreateBucket(o.Bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("mems3: create bucket %s: %w", o.Bucket, err)
	}
	h := gofakes3.New(o.Backend,
		gofakes3.WithTimeSource(clock),
		gofakes3.WithTimeSkewLimit(0), // a clock moved ahead must not make requests "too skewed"
		gofakes3.WithLogger(gofakes3.DiscardLog()),
	).Server()
	s := &Server{bucket: o.Bucket, now: o.Now}
	s.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", s.now().UTC().Format(http.TimeFormat))
		h.ServeHTTP(w, r)
	})
	return s, nil
}

// Bucket returns the name of the server's bucket.
func (s *Server) Bucket() string { return s.bucket }

// URL returns the server's endpoint, such as "http://127.0.0.1:40123" for
// a listening server. An in-process server's URL names a host that does
// not exist: only its own clients and [Server.Transport] reach it.
func (s *Server) URL() string { return s.url }

// Close stops the server. A listening server stops listening at once, lets
// requests under way finish for up to 5 seconds, then closes every
// connection. Afterwards requests through [Server.Transport] and an
// in-process server's clients fail with [ErrClosed], and a listening
// server's refuse connections. The objects of the default backend are
// dropped with the server. Close can be called more than once; it returns
// an error only if the listening server failed.
func (s *Server) Close() error {
	s.once.Do(func() {
		s.closed.Store(true)
		if s.http == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), closeGrace)
		defer cancel()
		if err := s.http.Shutdown(ctx); err != nil {
			s.http.Close()
		}
		if err := <-s.served; !errors.Is(err, http.ErrServerClosed) {
			s.err = fmt.Errorf("mems3: serve %s: %w", s.url, err)
		}
	})
	return s.err
}

// timeSource adapts a clock function to gofakes3's TimeSource.
type timeSource func() time.Time

func (f timeSource) Now() time.Time                  { return f() }
func (f timeSource) Since(t time.Time) time.Duration { return f().Sub(t) }
