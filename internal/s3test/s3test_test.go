package s3test

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/google/go-cmp/cmp"
)

func TestOp(t *testing.T) {
	t.Parallel()
	tests := []struct {
		method, url, want string
	}{
		{http.MethodGet, "http://h/b?list-type=2&prefix=x", "LIST"},
		{http.MethodGet, "http://h/b/key", "GET"},
		{http.MethodGet, "http://h/b/key?list-type-ish=1", "GET"},
		{http.MethodHead, "http://h/b/key", "HEAD"},
		{http.MethodPut, "http://h/b/key", "PUT"},
		{http.MethodPost, "http://h/b", "POST"},
		{http.MethodDelete, "http://h/b/key", "DELETE"},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.url, func(t *testing.T) {
			u, err := url.Parse(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			if got := Op(&http.Request{Method: tc.method, URL: u}); got != tc.want {
				t.Errorf("Op = %q, want %q", got, tc.want)
			}
		})
	}
}

func put(t *testing.T, c *s3.Client, key, body string, ifNoneMatch, ifMatch *string) error {
	t.Helper()
	_, err := c.PutObject(t.Context(), &s3.PutObjectInput{
		Bucket: aws.String(Bucket), Key: &key, Body: strings.NewReader(body),
		ContentLength: aws.Int64(int64(len(body))), IfNoneMatch: ifNoneMatch, IfMatch: ifMatch,
	})
	return err
}

func TestCounter(t *testing.T) {
	t.Parallel()
	srv := New(t)
	var c Counter
	client := srv.Client(c.Wrap)
	if err := put(t, client, "a", "1", nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := client.HeadObject(t.Context(), &s3.HeadObjectInput{Bucket: aws.String(Bucket), Key: aws.String("a")}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := client.ListObjectsV2(t.Context(), &s3.ListObjectsV2Input{Bucket: aws.String(Bucket)}); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff(map[string]int{"PUT": 1, "HEAD": 1, "LIST": 2}, c.Counts()); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
	if got, want := c.String(), "HEAD=1 LIST=2 PUT=1"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if c.Total() != 4 {
		t.Errorf("Total() = %d, want 4", c.Total())
	}
	c.Reset()
	if c.Total() != 0 {
		t.Errorf("Total() after Reset = %d", c.Total())
	}
}

// TestConditionalWrites: the server refuses conditional writes that fail,
// unless StripConditionalHeaders hides the conditions from it.
func TestConditionalWrites(t *testing.T) {
	t.Parallel()
	for _, stripped := range []bool{false, true} {
		t.Run(fmt.Sprintf("stripped=%v", stripped), func(t *testing.T) {
			t.Parallel()
			srv := New(t)
			c := srv.Client()
			if stripped {
				c = srv.Client(StripConditionalHeaders)
			}
			if err := put(t, c, "k", "one", aws.String("*"), nil); err != nil {
				t.Fatal(err)
			}
			refused := func(err error) bool {
				var ae smithy.APIError
				return errors.As(err, &ae) && ae.ErrorCode() == "PreconditionFailed"
			}
			err := put(t, c, "k", "two", aws.String("*"), nil)
			if refused(err) == stripped {
				t.Errorf("second If-None-Match create: %v, want refused %v", err, !stripped)
			}
			err = put(t, c, "k", "three", nil, aws.String(`"0123456789abcdef0123456789abcdef"`))
			if refused(err) == stripped {
				t.Errorf("wrong If-Match write: %v, want refused %v", err, !stripped)
			}
		})
	}
}

func TestAdvance(t *testing.T) {
	t.Parallel()
	srv := New(t)
	before := srv.Now()
	srv.Advance(time.Hour)
	if d := srv.Now().Sub(before); d < time.Hour {
		t.Fatalf("Now moved %v after Advance(1h)", d)
	}
	resp, err := http.Get(srv.URL + "/" + Bucket)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	date, err := http.ParseTime(resp.Header.Get("Date"))
	if err != nil {
		t.Fatal(err)
	}
	if d := date.Sub(before); d < time.Hour-time.Second {
		t.Errorf("Date header %v is only %v past the start, want about an hour", date, d)
	}
}
