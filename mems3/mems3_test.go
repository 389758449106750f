package mems3_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/google/go-cmp/cmp"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/mems3"
	"github.com/s3task/s3task/s3tasktest"
)

// modes are the two ways a server serves, for the tests that hold for both.
var modes = []struct {
	name  string
	start func(*mems3.Options) (*mems3.Server, error)
}{
	{"in process", mems3.New},
	{"listening", listen},
}

// listen is Listen on a free loopback port.
func listen(o *mems3.Options) (*mems3.Server, error) { return mems3.Listen("", o) }

// setup starts a server with opts in the mode named, and closes it when
// the test ends.
func setup(t *testing.T, start func(*mems3.Options) (*mems3.Server, error), opts *mems3.Options) *mems3.Server {
	t.Helper()
	srv, err := start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
	})
	return srv
}

func put(ctx context.Context, c *s3.Client, bucket, key, body string, ifNoneMatch *string) error {
	_, err := c.PutObject(ctx, &s3.PutObjectInput{
		Bucket: &bucket, Key: &key, Body: strings.NewReader(body),
		ContentLength: aws.Int64(int64(len(body))), IfNoneMatch: ifNoneMatch,
	})
	return err
}

func get(ctx context.Context, c *s3.Client, bucket, key string) (string, error) {
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: &key})
	if err != nil {
		return "", err
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	return string(b), err
}

func list(ctx context.Context, c *s3.Client, bucket string) ([]string, error) {
	var keys []string
	p := s3.NewListObjectsV2Paginator(c, &s3.ListObjectsV2Input{Bucket: &bucket})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, o := range page.Contents {
			keys = append(keys, *o.Key)
		}
	}
	return keys, nil
}

func preconditionFailed(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorCode() == "PreconditionFailed"
}

// TestClientsShareBucket: what one client writes, another client of the
// same server reads and lists, and a conditional create through the second
// is refused because the first made the object; in both modes, and with a
// bucket name of the caller's.
func TestClientsShareBucket(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			srv := setup(t, m.start, &mems3.Options{Bucket: "shared-bucket"})
			if srv.Bucket() != "shared-bucket" {
				t.Fatalf("Bucket() = %q, want shared-bucket", srv.Bucket())
			}
			ctx := t.Context()
			a, b := srv.Client(), srv.Client()
			if err := put(ctx, a, srv.Bucket(), "dir/one", "first", aws.String("*")); err != nil {
				t.Fatal(err)
			}
			if err := put(ctx, a, srv.Bucket(), "dir/two", "second", nil); err != nil {
				t.Fatal(err)
			}
			if got, err := get(ctx, b, srv.Bucket(), "dir/one"); err != nil || got != "first" {
				t.Errorf("b reads dir/one = %q, %v; want first", got, err)
			}
			keys, err := list(ctx, b, srv.Bucket())
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{"dir/one", "dir/two"}, keys); diff != "" {
				t.Errorf("b lists (-want +got):\n%s", diff)
			}
			if err := put(ctx, b, srv.Bucket(), "dir/one", "again", aws.String("*")); !preconditionFailed(err) {
				t.Errorf("b's create of an existing key = %v, want PreconditionFailed", err)
			}
			if got, _ := get(ctx, a, srv.Bucket(), "dir/one"); got != "first" {
				t.Errorf("after the refused create, dir/one = %q, want first", got)
			}
		})
	}
}

// TestNow: the Date header of every answer is the clock of Options.Now, in
// both modes, so a test can move the server's time.
func TestNow(t *testing.T) {
	t.Parallel()
	at := time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			srv := setup(t, m.start, &mems3.Options{Now: func() time.Time { return at }})
			var dates []string
			var mu sync.Mutex
			c := srv.Client(func(next http.RoundTripper) http.RoundTripper {
				return roundTripFunc(func(r *http.Request) (*http.Response, error) {
					resp, err := next.RoundTrip(r)
					if err == nil {
						mu.Lock()
						dates = append(dates, resp.Header.Get("Date"))
						mu.Unlock()
					}
					return resp, err
				})
			})
			if err := put(t.Context(), c, srv.Bucket(), "k", "v", nil); err != nil {
				t.Fatal(err)
			}
			if _, err := get(t.Context(), c, srv.Bucket(), "missing"); err == nil {
				t.Fatal("GET of a missing key succeeded")
			}
			want := at.Format(http.TimeFormat)
			if diff := cmp.Diff([]string{want, want}, dates); diff != "" {
				t.Errorf("Date headers (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPresignedWithNetHTTP: on a listening server, the presigned PUT of a
// Store uploads a task's input from a plain net/http client, and once a
// worker has completed the task, its presigned GET downloads the output
// from one.
func TestPresignedWithNetHTTP(t *testing.T) {
	t.Parallel()
	srv := setup(t, listen, nil)
	u, err := url.Parse(srv.URL())
	if err != nil || u.Scheme != "http" || !net.ParseIP(u.Hostname()).IsLoopback() || u.Port() == "0" {
		t.Fatalf("URL() = %q (%v), want http://127.0.0.1:<a port>", srv.URL(), err)
	}
	ctx := t.Context()
	store, err := s3task.NewStore(srv.Client(), srv.Bucket(), &s3task.StoreOptions{Logger: s3tasktest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	task, err := store.Create(ctx, s3task.CreateParams{Name: "presigned", Type: "reverse"})
	if err != nil {
		t.Fatal(err)
	}
	up, err := store.PresignUpload(ctx, task.ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(up.URL, srv.URL()+"/") {
		t.Fatalf("presigned PUT %s is not on the server's URL %s", up.URL, srv.URL())
	}
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(hc.CloseIdleConnections)
	if code, _ := send(t, hc, up.Method, up.URL, up.Header, "hello"); code != http.StatusOK {
		t.Fatalf("presigned PUT: status %d, want 200", code)
	}
	if _, err := store.Submit(ctx, task.ID); err != nil {
		t.Fatal(err)
	}
	reverse := s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		in, err := job.OpenInput(ctx)
		if err != nil {
			return err
		}
		defer in.Close()
		b, err := io.ReadAll(in)
		if err != nil {
			return err
		}
		slices.Reverse(b)
		return job.WriteOutput(ctx, bytes.NewReader(b))
	})
	if res := s3tasktest.Run(t, store, reverse, task.ID); res.Err != nil || res.Task.Status != s3task.StatusCompleted {
		t.Fatalf("run: %v, status %s", res.Err, res.Task.Status)
	}
	down, err := store.PresignDownload(ctx, task.ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	code, body := send(t, hc, down.Method, down.URL, down.Header, "")
	if code != http.StatusOK || body != "olleh" {
		t.Errorf("presigned GET: status %d, body %q; want 200, olleh", code, body)
	}
}

// send makes one request with net/http and returns its status and body.
func send(t *testing.T, hc *http.Client, method, url string, h http.Header, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for name, values := range h {
		req.Header[name] = values
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestTransport: an in-process server's presigned URL names a host that
// does not resolve, and the server's Transport follows it anyway.
func TestTransport(t *testing.T) {
	t.Parallel()
	srv := setup(t, mems3.New, nil)
	ctx := t.Context()
	if err := put(ctx, srv.Client(), srv.Bucket(), "k", "in process", nil); err != nil {
		t.Fatal(err)
	}
	req, err := s3.NewPresignClient(srv.Client()).PresignGetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(srv.Bucket()), Key: aws.String("k")})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(req.URL, srv.URL()+"/") {
		t.Fatalf("presigned GET %s is not on the server's URL %s", req.URL, srv.URL())
	}
	code, body := send(t, &http.Client{Transport: srv.Transport()}, req.Method, req.URL, req.SignedHeader, "")
	if code != http.StatusOK || body != "in process" {
		t.Errorf("GET through Transport: status %d, body %q; want 200, in process", code, body)
	}
}

// TestClose: after Close, a listening server refuses connections and its
// clients' requests fail; an in-process server's fail with ErrClosed; a
// second Close is harmless.
func TestClose(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			srv, err := m.start(nil)
			if err != nil {
				t.Fatal(err)
			}
			c := srv.Client()
			if err := put(t.Context(), c, srv.Bucket(), "k", "v", nil); err != nil {
				t.Fatal(err)
			}
			if err := srv.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if err := srv.Close(); err != nil {
				t.Errorf("second Close: %v", err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			_, err = get(ctx, c, srv.Bucket(), "k")
			if m.name == "in process" {
				if !errors.Is(err, mems3.ErrClosed) {
					t.Errorf("a GET after Close = %v, want ErrClosed", err)
				}
				return
			}
			if err == nil {
				t.Error("a GET after Close succeeded")
			}
			u, err := url.Parse(srv.URL())
			if err != nil {
				t.Fatal(err)
			}
			if conn, err := net.DialTimeout("tcp", u.Host, 5*time.Second); err == nil {
				conn.Close()
				t.Errorf("%s still accepts connections after Close", u.Host)
			}
		})
	}
}

// TestConcurrent: goroutines sharing several clients write and read their
// own objects and race to create the same ones; every object is there at
// the end and each contested create had exactly one winner. Run it with
// -race.
func TestConcurrent(t *testing.T) {
	t.Parallel()
	const (
		clients    = 4
		goroutines = 16
		rounds     = 10
	)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			srv := setup(t, m.start, nil)
			ctx := t.Context()
			cs := make([]*s3.Client, clients)
			for i := range cs {
				cs[i] = srv.Client()
			}
			var (
				wg      sync.WaitGroup
				mu      sync.Mutex
				winners = map[string][]int{}
				errs    []error
			)
			fail := func(err error) {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
			for g := range goroutines {
				c := cs[g%clients]
				wg.Go(func() {
					for r := range rounds {
						own := fmt.Sprintf("own/%02d/%02d", g, r)
						if err := put(ctx, c, srv.Bucket(), own, own, nil); err != nil {
							fail(err)
							return
						}
						if got, err := get(ctx, c, srv.Bucket(), own); err != nil || got != own {
							fail(fmt.Errorf("read back %s = %q, %v", own, got, err))
							return
						}
						contested := fmt.Sprintf("contested/%02d", r)
						switch err := put(ctx, c, srv.Bucket(), contested, own, aws.String("*")); {
						case err == nil:
							mu.Lock()
							winners[contested] = append(winners[contested], g)
							mu.Unlock()
						case !preconditionFailed(err):
							fail(fmt.Errorf("create %s: %w", contested, err))
							return
						}
					}
				})
			}
			wg.Wait()
			if len(errs) > 0 {
				t.Fatal(errors.Join(errs...))
			}
			keys, err := list(ctx, srv.Client(), srv.Bucket())
			if err != nil {
				t.Fatal(err)
			}
			if want := rounds + goroutines*rounds; len(keys) != want {
				t.Errorf("%d objects, want %d", len(keys), want)
			}
			for r := range rounds {
				key := fmt.Sprintf("contested/%02d", r)
				if len(winners[key]) != 1 {
					t.Errorf("%s was created by goroutines %v, want exactly one", key, winners[key])
				}
			}
		})
	}
}

// TestOptions: a bad bucket name is refused with the field named, and a
// server over a backend that already holds the bucket keeps its objects,
// as one over a file does across restarts.
func TestOptions(t *testing.T) {
	t.Parallel()
	if _, err := mems3.New(&mems3.Options{Bucket: "Not_Valid"}); err == nil || !strings.Contains(err.Error(), "Options.Bucket") {
		t.Errorf("New with bucket Not_Valid = %v, want an error naming Options.Bucket", err)
	}
	if _, err := mems3.Listen("256.0.0.1:0", nil); err == nil {
		t.Error("Listen on 256.0.0.1:0 succeeded")
	}
	backend := s3mem.New()
	first := setup(t, mems3.New, &mems3.Options{Backend: backend})
	if first.Bucket() != mems3.DefaultBucket {
		t.Errorf("default Bucket() = %q, want %q", first.Bucket(), mems3.DefaultBucket)
	}
	if err := put(t.Context(), first.Client(), first.Bucket(), "kept", "yes", nil); err != nil {
		t.Fatal(err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	second := setup(t, mems3.New, &mems3.Options{Backend: backend})
	if got, err := get(t.Context(), second.Client(), second.Bucket(), "kept"); err != nil || got != "yes" {
		t.Errorf("the second server reads kept = %q, %v; want yes", got, err)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
