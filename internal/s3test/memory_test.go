package s3test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
)

// TestMemory runs the in-process S3 inside a synctest bubble: conditional
// writes are enforced, OnApply sees writes in order, a request whose context
// ended is not applied, and the Date header follows the virtual clock.
func TestMemory(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		m, err := NewMemory()
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var applied []string
		m.OnApply(func(a Applied) {
			mu.Lock()
			applied = append(applied, a.Method+" "+a.Key+" "+string(a.Body))
			mu.Unlock()
		})
		var dates []time.Time
		client := m.Client(func(next http.RoundTripper) http.RoundTripper {
			return RoundTripFunc(func(r *http.Request) (*http.Response, error) {
				resp, err := next.RoundTrip(r)
				if err == nil {
					d, _ := http.ParseTime(resp.Header.Get("Date"))
					dates = append(dates, d)
				}
				return resp, err
			})
		})
		if err := put(t, client, "k", "one", aws.String("*"), nil); err != nil {
			t.Fatal(err)
		}
		var ae smithy.APIError
		if err := put(t, client, "k", "two", aws.String("*"), nil); !errors.As(err, &ae) || ae.ErrorCode() != "PreconditionFailed" {
			t.Fatalf("second create = %v, want PreconditionFailed", err)
		}
		if err := put(t, client, "k", "three", nil, aws.String(`"0000"`)); !errors.As(err, &ae) || ae.ErrorCode() != "PreconditionFailed" {
			t.Fatalf("wrong If-Match = %v, want PreconditionFailed", err)
		}
		time.Sleep(90 * time.Minute) // virtual: returns at once
		if err := put(t, client, "l", "four", nil, nil); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(Bucket), Key: aws.String("gone"), Body: io.NopCloser(nil)}); err == nil {
			t.Fatal("a PUT with a cancelled context succeeded")
		}
		if body, ok := m.Object("k"); !ok || string(body) != "one" {
			t.Errorf("k = %q, %v; want one", body, ok)
		}
		if _, ok := m.Object("gone"); ok {
			t.Error("a PUT with a cancelled context was applied")
		}
		if got, want := m.Keys(""), []string{"k", "l"}; !slices.Equal(got, want) {
			t.Errorf("keys %v, want %v", got, want)
		}
		if want := []string{"PUT k one", "PUT l four"}; !slices.Equal(applied, want) {
			t.Errorf("applied %v, want %v", applied, want)
		}
		// Four answers (the refusals have a Date too), the last one 90
		// virtual minutes after the others.
		if len(dates) != 4 || dates[3].Sub(dates[0]) != 90*time.Minute {
			t.Errorf("Date headers %v, want four, the last 90 virtual minutes after the first", dates)
		}
	})
}
