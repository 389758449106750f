package faults

// The injector against the AWS SDK and an S3 server: what the SDK makes of
// each fault.

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/s3task/s3task/internal/s3test"
)

// TestSDKRetriesInjectedFaults checks that the AWS SDK sees injected faults
// as it sees real ones: it resends after a 500, a 503 and a reset, and a
// lost response is applied once and met by its own resend.
func TestSDKRetriesInjectedFaults(t *testing.T) {
	t.Parallel()
	for _, k := range []Kind{ResetBefore, LostResponse} {
		err := &url.Error{Op: "Put", URL: "http://x", Err: &Error{Kind: k}}
		if got := retry.IsErrorRetryables(retry.DefaultRetryables).IsErrorRetryable(err); got != aws.TrueTernary {
			t.Errorf("the SDK does not retry an injected %s: %v", k, got)
		}
	}

	srv := s3test.New(t)
	clean := srv.Client()
	for _, kind := range []Kind{InternalError, SlowDown, ResetBefore, LostResponse} {
		t.Run(kind.String(), func(t *testing.T) {
			in := newInjector(t, 3, only(kind))
			var sent s3test.Counter // outside the injector: every attempt of the SDK
			c := srv.Client(in.Wrap, sent.Wrap)
			key := "k-" + kind.String()
			_, err := c.PutObject(t.Context(), &s3.PutObjectInput{
				Bucket: aws.String(srv.Bucket), Key: &key, Body: strings.NewReader("v"), IfNoneMatch: aws.String("*"),
			}, func(o *s3.Options) {
				o.Retryer = retry.NewStandard(func(o *retry.StandardOptions) {
					o.MaxAttempts = 3
					o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return 0, nil })
				})
			})
			if err == nil {
				t.Fatal("PutObject succeeded through an injector that fails every request")
			}
			if sent.Total() != 3 || in.Count(kind) != 3 {
				t.Errorf("the SDK sent %d attempts, %d faults injected; want 3 and 3", sent.Total(), in.Count(kind))
			}
			_, herr := clean.HeadObject(t.Context(), &s3.HeadObjectInput{Bucket: aws.String(srv.Bucket), Key: &key})
			if applied := herr == nil; applied != (kind == LostResponse) {
				t.Errorf("object exists afterwards: %v, want %v", applied, kind == LostResponse)
			}
			if kind == InternalError || kind == SlowDown {
				var ae smithy.APIError
				if !errors.As(err, &ae) || ae.ErrorCode() != map[Kind]string{InternalError: "InternalError", SlowDown: "SlowDown"}[kind] {
					t.Errorf("error %v, want the injected S3 error code", err)
				}
			}
		})
	}
}
