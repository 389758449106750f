package mems3

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Client returns a new S3 client for the server, configured as [NewClient]
// says, on a transport of its own: the in-process one for a server made
// by [New], a new HTTP transport for a listening one. Clients do not share
// connections, so several of them act as several machines would.
//
// Each wrap, if any, wraps the transport, innermost first: use one to log,
// count, delay or fail requests.
func (s *Server) Client(wrap ...func(http.RoundTripper) http.RoundTripper) *s3.Client {
	var rt http.RoundTripper
	if s.http == nil {
		rt = s.Transport()
	} else {
		rt = &http.Transport{
			Proxy:               nil, // the server is on this machine
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     30 * time.Second,
		}
	}
	for _, w := range wrap {
		rt = w(rt)
	}
	return NewClient(s.url, rt)
}

// Transport returns a round tripper that serves requests in process: it
// calls the server's handler directly, with no socket, whatever host the
// request names. Use it to follow an in-process server's presigned URLs:
//
//	resp, err := (&http.Client{Transport: srv.Transport()}).Do(req)
//
// After [Server.Close] its requests fail with [ErrClosed].
func (s *Server) Transport() http.RoundTripper { return roundTripFunc(s.roundTrip) }

// NewClient returns an S3 client for the S3 server at endpoint, such as a
// mems3 server another process started, whose URL it was given. Requests
// go through rt (http.DefaultTransport if nil). The client uses path-style
// addressing (http://host/bucket/key), region us-east-1, static
// credentials that the server does not check, and checksums only where S3
// requires them. Each optFn, if any, adjusts the options after these, as
// in s3.New: to set the credentials of another local server, for example.
func NewClient(endpoint string, rt http.RoundTripper, optFns ...func(*s3.Options)) *s3.Client {
	if rt == nil {
		rt = http.DefaultTransport
	}
	return s3.New(s3.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider("test", "testsecret", ""),
		HTTPClient:   &http.Client{Transport: rt},
		// With the SDK's default, a checksum on every upload, an upload
		// from a stream that cannot seek fails over plain HTTP.
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	}, optFns...)
}

// roundTrip serves r in process. The body is read whole first, so the
// handler sees a request with a known length, as it would from a socket.
// A request whose context has ended is not served.
func (s *Server) roundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil {
		b, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil {
			return nil, err
		}
		body = b
	}
	if s.closed.Load() {
		return nil, ErrClosed
	}
	if err := r.Context().Err(); err != nil {
		return nil, err
	}
	in := r.Clone(r.Context())
	in.Body = io.NopCloser(bytes.NewReader(body))
	in.ContentLength = int64(len(body))
	if r.Method == http.MethodPut || r.Method == http.MethodPost {
		in.Header.Set("Content-Length", strconv.Itoa(len(body)))
	}
	in.RequestURI = r.URL.RequestURI()
	rec := httptest.NewRecorder()
	s.handler.ServeHTTP(rec, in)
	resp := rec.Result()
	resp.Request = r
	if resp.ContentLength < 0 {
		resp.ContentLength = int64(rec.Body.Len())
	}
	return resp, nil
}

// roundTripFunc adapts a function to an http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
