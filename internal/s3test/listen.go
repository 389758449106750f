package s3test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/johannesboyne/gofakes3"
)

// StartOn is [StartBackend] listening on addr (for example "127.0.0.1:0"),
// with extra gofakes3 options applied after the defaults, such as
// gofakes3.WithInsecureCORS() so that a browser page on another loopback
// port may upload to it. It creates [Bucket] in backend if it is missing.
//
// gofakes3 checks no signatures: anyone who can reach addr can read and
// write every object. Keep addr on a loopback interface.
func StartOn(addr string, backend gofakes3.Backend, opts ...gofakes3.Option) (*Server, error) {
	return startOn(addr, backend, &offsetClock{}, opts...)
}

func startOn(addr string, backend gofakes3.Backend, clock *offsetClock, opts ...gofakes3.Option) (*Server, error) {
	s := &Server{Bucket: Bucket, clock: clock}
	all := append([]gofakes3.Option{
		gofakes3.WithTimeSource(clock),
		gofakes3.WithTimeSkewLimit(0),
		gofakes3.WithLogger(gofakes3.DiscardLog()),
	}, opts...)
	h := gofakes3.New(backend, all...).Server()
	s.http = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", s.Now().UTC().Format(http.TimeFormat))
		h.ServeHTTP(w, r)
	}))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("s3test: listen on %s: %w", addr, err)
	}
	s.http.Listener = l
	// gofakes3 writes a second header when a client hangs up mid-answer;
	// net/http logs that, which is only noise here.
	s.http.Config.ErrorLog = log.New(io.Discard, "", 0)
	s.http.Start()
	s.URL = s.http.URL
	if _, err := s.Client().CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String(Bucket)}); err != nil {
		var exists interface{ ErrorCode() string }
		if !asCode(err, &exists) || (exists.ErrorCode() != "BucketAlreadyOwnedByYou" && exists.ErrorCode() != "BucketAlreadyExists") {
			s.Close()
			return nil, fmt.Errorf("s3test: create bucket: %w", err)
		}
	}
	return s, nil
}
