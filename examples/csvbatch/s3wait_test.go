package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/mems3"
)

func TestS3Retry(t *testing.T) {
	var got []time.Duration
	for n := 1; n <= 8; n++ {
		got = append(got, s3Retry(n))
	}
	want := []time.Duration{1 * time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second, 10 * time.Second, 10 * time.Second}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("waits between tries (-want +got):\n%s", diff)
	}
	if got := s3Retry(1000); got != 10*time.Second {
		t.Errorf("s3Retry(1000) = %s, want 10s", got)
	}
}

// TestAwaitS3 runs the start-up wait for S3 in a bubble, where time is
// fake: it tries again with backoff, logging each try, until S3 answers;
// it gives up at the -s3-wait bound, or when its context ends, with the
// last try's error; and a store that does not enforce conditional writes
// ends it at once.
func TestAwaitS3(t *testing.T) {
	refused := errors.New("dial tcp 127.0.0.1:7070: connect: connection refused")
	// run runs awaitS3 with a check that fails fails times (-1: always)
	// and returns when each try began, the log, and its error.
	run := func(ctx context.Context, bound time.Duration, fails int, failWith error) ([]time.Duration, string, error) {
		var logs bytes.Buffer
		log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}}))
		began := time.Now()
		var tries []time.Duration
		err := awaitS3(ctx, log, "S3 bucket \"tasks\" at http://127.0.0.1:7070", bound, func(ctx context.Context) error {
			tries = append(tries, time.Since(began))
			if fails < 0 || len(tries) <= fails {
				return failWith
			}
			return nil
		})
		return tries, logs.String(), err
	}
	secs := func(s ...int) []time.Duration {
		var d []time.Duration
		for _, n := range s {
			d = append(d, time.Duration(n)*time.Second)
		}
		return d
	}

	t.Run("answers at the fifth try", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			tries, logs, err := run(t.Context(), 0, 4, refused)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(secs(0, 1, 3, 7, 15), tries); diff != "" {
				t.Errorf("tries began at (-want +got):\n%s", diff)
			}
			for i, wait := range []string{"1s", "2s", "4s", "8s"} {
				line := fmt.Sprintf(`level=WARN msg="csvbatch: S3 does not answer, or the bucket is missing; trying again" s3="S3 bucket \"tasks\" at http://127.0.0.1:7070" try=%d retry_in=%s err="dial tcp 127.0.0.1:7070: connect: connection refused"`+"\n", i+1, wait)
				if !strings.Contains(logs, line) {
					t.Errorf("the log lacks try %d's line %q:\n%s", i+1, line, logs)
				}
			}
			if !strings.HasSuffix(logs, `level=INFO msg="csvbatch: S3 answers" s3="S3 bucket \"tasks\" at http://127.0.0.1:7070" tries=5`+"\n") {
				t.Errorf("the log does not end with the try that succeeded:\n%s", logs)
			}
		})
	})
	t.Run("answers at once", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			tries, logs, err := run(t.Context(), 0, 0, refused)
			if err != nil || len(tries) != 1 || logs != "" {
				t.Errorf("err %v, %d tries, log %q; want nil, 1 try and nothing logged", err, len(tries), logs)
			}
		})
	})
	t.Run("gives up at the bound", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			began := time.Now()
			tries, _, err := run(t.Context(), 30*time.Second, -1, refused)
			if !errors.Is(err, refused) || !strings.Contains(err.Error(), "did not answer within -s3-wait 30s (6 tries)") {
				t.Errorf("err = %v; want the last try's error, saying the bound and the tries", err)
			}
			if diff := cmp.Diff(secs(0, 1, 3, 7, 15, 25), tries); diff != "" {
				t.Errorf("tries began at (-want +got):\n%s", diff)
			}
			if took := time.Since(began); took != 30*time.Second {
				t.Errorf("gave up after %s, want the bound, 30s", took)
			}
		})
	})
	t.Run("stops with its context", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			time.AfterFunc(5*time.Second, cancel)
			tries, _, err := run(ctx, 0, -1, refused)
			if !errors.Is(err, refused) || !strings.Contains(err.Error(), "stopped while waiting for S3 bucket \"tasks\" at http://127.0.0.1:7070 (3 tries)") {
				t.Errorf("err = %v; want the last try's error, saying it was stopped", err)
			}
			if len(tries) != 3 {
				t.Errorf("%d tries in 5s, want 3 (at 0, 1 and 3s)", len(tries))
			}
		})
	})
	t.Run("conditional writes not enforced", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			unsafe := fmt.Errorf("checking: %w", s3task.ErrConditionalWritesUnsupported)
			tries, logs, err := run(t.Context(), 0, -1, unsafe)
			if !errors.Is(err, s3task.ErrConditionalWritesUnsupported) || len(tries) != 1 || logs != "" {
				t.Errorf("err %v, %d tries, log %q; want ErrConditionalWritesUnsupported after 1 try, nothing logged", err, len(tries), logs)
			}
		})
	})
}

// logLines is a log a test can wait on.
type logLines struct {
	mu      sync.Mutex
	b       strings.Builder
	changed chan struct{}
}

func newLogLines() *logLines { return &logLines{changed: make(chan struct{})} }

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.Write(p)
	close(l.changed)
	l.changed = make(chan struct{})
	return len(p), nil
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// await waits until the log holds s, and reports true, or until stop is
// closed, and reports false.
func (l *logLines) await(s string, stop <-chan struct{}) bool {
	for {
		l.mu.Lock()
		found, changed := strings.Contains(l.b.String(), s), l.changed
		l.mu.Unlock()
		if found {
			return true
		}
		select {
		case <-changed:
		case <-stop:
			return strings.Contains(l.String(), s)
		}
	}
}

// TestStartBeforeS3 starts csvbatch before its S3, as the versitygw recipe
// of the README does: start logs each failed try and keeps trying, the
// webhook on -events-listen answers meanwhile (versitygw tests it when it
// starts), and once S3 listens start returns a service that runs tasks.
func TestStartBeforeS3(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	s3Addr, hookAddr := freeAddr(t), freeAddr(t)
	cfg := testConfig(t, svcOptions{args: []string{"-bucket", "tasks", "-s3-endpoint", "http://" + s3Addr, "-s3-path-style",
		"-events-token", "hook-secret", "-events-listen", hookAddr}})
	logs := newLogLines()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type started struct {
		a   *app
		err error
	}
	done, returned := make(chan started, 1), make(chan struct{})
	go func() {
		defer close(returned)
		a, err := start(ctx, cfg, slog.New(slog.NewTextHandler(logs, nil)))
		done <- started{a, err}
	}()
	if !logs.await("trying again", returned) {
		got := <-done
		if got.a != nil {
			got.a.close()
		}
		t.Fatalf("start returned (%v) before S3 listened, without a try logged:\n%s", got.err, logs)
	}

	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	post := func(target, body string) int {
		resp, err := client.Post("http://"+hookAddr+target, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatalf("the webhook, while csvbatch waits for S3: %v", err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	testEvent := `{"Service":"S3","Event":"s3:TestEvent","Bucket":"tasks"}`
	if code := post("/s3-events?token=hook-secret", testEvent); code != http.StatusNoContent {
		t.Errorf("S3's test event while csvbatch waits for S3: %d, want 204", code)
	}
	if code := post("/s3-events", testEvent); code != http.StatusUnauthorized {
		t.Errorf("a delivery without the token: %d, want 401", code)
	}

	srv, err := mems3.Listen(s3Addr, &mems3.Options{Bucket: "tasks"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	got := <-done
	if got.err != nil {
		t.Fatalf("start: %v\nlog:\n%s", got.err, logs)
	}
	s := &service{t: t, app: got.a, base: got.a.baseURL, token: testToken, client: &http.Client{Transport: &http.Transport{}}}
	defer func() {
		cancel()
		if err := s.app.close(); err != nil {
			t.Errorf("close: %v", err)
		}
		s.client.CloseIdleConnections()
	}()
	if !strings.Contains(logs.String(), `msg="csvbatch: S3 answers"`) {
		t.Errorf("the log does not say S3 answered in the end:\n%s", logs)
	}
	if banner := bannerOf(s.app); !strings.Contains(banner, "csvbatch: events  POST http://"+hookAddr+"/s3-events (its own listener), token required: wake this worker for the tasks they name\n") {
		t.Errorf("banner:\n%s", banner)
	}
	s.waitFor(s.submit("after the wait", typeStats, nil, []byte("a\n1\n")), "completed", completed)
}
