package faults

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// backend is a stand-in for S3: it counts what reaches it and answers 200
// with a body, noting whether each body was read to the end and closed.
type backend struct {
	got      atomic.Int64
	drained  atomic.Int64
	closed   atomic.Int64
	bodyText string
}

func (b *backend) RoundTrip(req *http.Request) (*http.Response, error) {
	b.got.Add(1)
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
	return &http.Response{
		StatusCode: http.StatusOK, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{}, Request: req,
		Body: &trackedBody{Reader: strings.NewReader(b.bodyText), b: b},
	}, nil
}

type trackedBody struct {
	*strings.Reader
	b *backend
}

func (t *trackedBody) Close() error {
	if t.Len() == 0 {
		t.b.drained.Add(1)
	}
	t.b.closed.Add(1)
	return nil
}

// sentBody notes whether the transport closed a request body it did not
// send.
type sentBody struct {
	io.Reader
	closed atomic.Bool
}

func (c *sentBody) Close() error { c.closed.Store(true); return nil }

// only returns Rates that inject kind k into every request, delaying by at
// most 2ms if k is Latency.
func only(k Kind) Rates {
	r := Rates{MaxLatency: 2 * time.Millisecond}
	*map[Kind]*float64{
		InternalError: &r.InternalError,
		SlowDown:      &r.SlowDown,
		ResetBefore:   &r.ResetBefore,
		LostResponse:  &r.LostResponse,
		Latency:       &r.Latency,
	}[k] = 1
	return r
}

func newInjector(t *testing.T, seed uint64, r Rates) *Injector {
	t.Helper()
	in, err := New(seed, r)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

func request(t *testing.T, body io.ReadCloser) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, "http://s3.test/bucket/key", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Body = body
	return req
}

func TestNewValidatesRates(t *testing.T) {
	t.Parallel()
	valid := []Rates{
		{},
		Uniform(0.2),
		{InternalError: 0.25, SlowDown: 0.25, ResetBefore: 0.25, LostResponse: 0.25}, // every request fails
	}
	invalid := []Rates{
		{SlowDown: -0.1},
		{Latency: 1.5},
		{InternalError: 0.6, LostResponse: 0.6}, // failures sum over one
		{Latency: 0.1, MaxLatency: -time.Millisecond},
	}
	for _, r := range valid {
		if _, err := New(1, r); err != nil {
			t.Errorf("New(%+v) = %v, want success", r, err)
		}
	}
	for _, r := range invalid {
		if _, err := New(1, r); err == nil {
			t.Errorf("New(%+v) succeeded, want an error", r)
		}
	}
}

// TestEachKind injects one kind with certainty and checks what reaches the
// server, what the client gets, and the counts.
func TestEachKind(t *testing.T) {
	t.Parallel()
	tests := []struct {
		kind       Kind
		forwarded  bool
		wantStatus int    // 0: want a transport error
		wantCode   string // in the error body
	}{
		{InternalError, false, 500, "InternalError"},
		{SlowDown, false, 503, "SlowDown"},
		{ResetBefore, false, 0, ""},
		{LostResponse, true, 0, ""},
		{Latency, true, 200, ""},
	}
	for _, tc := range tests {
		t.Run(tc.kind.String(), func(t *testing.T) {
			t.Parallel()
			be := &backend{bodyText: "real answer"}
			in := newInjector(t, 7, only(tc.kind))
			body := &sentBody{Reader: strings.NewReader("payload")}
			resp, err := in.Wrap(be).RoundTrip(request(t, body))

			if got := be.got.Load() == 1; got != tc.forwarded {
				t.Errorf("request reached the server: %v, want %v", got, tc.forwarded)
			}
			if !tc.forwarded && !body.closed.Load() {
				t.Errorf("the unsent request's body was not closed")
			}
			if tc.wantStatus == 0 {
				var fe *Error
				if !errors.As(err, &fe) || fe.Kind != tc.kind || resp != nil {
					t.Fatalf("RoundTrip = %v, %v; want an injected %s error", resp, err, tc.kind)
				}
				if !strings.Contains(err.Error(), "connection reset") {
					t.Errorf("error %q does not read as a connection reset", err)
				}
			} else {
				if err != nil {
					t.Fatalf("RoundTrip error %v, want status %d", err, tc.wantStatus)
				}
				msg, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != tc.wantStatus || !strings.Contains(string(msg), tc.wantCode) {
					t.Errorf("answer %d %q, want %d with %q", resp.StatusCode, msg, tc.wantStatus, tc.wantCode)
				}
			}
			if tc.kind == LostResponse && (be.drained.Load() != 1 || be.closed.Load() != 1) {
				t.Errorf("the real answer was drained %d and closed %d times, want once each", be.drained.Load(), be.closed.Load())
			}
			for _, k := range Kinds() {
				want := int64(0)
				if k == tc.kind {
					want = 1
				}
				if got := in.Count(k); got != want {
					t.Errorf("Count(%s) = %d, want %d", k, got, want)
				}
			}
			if in.Requests() != 1 {
				t.Errorf("Requests() = %d, want 1", in.Requests())
			}
		})
	}
}

// outcome runs one request and names what happened to it.
func outcome(t *testing.T, rt http.RoundTripper) string {
	t.Helper()
	resp, err := rt.RoundTrip(request(t, nil))
	var fe *Error
	switch {
	case errors.As(err, &fe):
		return fe.Kind.String()
	case err != nil:
		t.Fatalf("unexpected error %v", err)
	}
	resp.Body.Close()
	return resp.Status
}

func TestSameSeedSameDecisions(t *testing.T) {
	t.Parallel()
	run := func(seed uint64) []string {
		r := Uniform(0.5)
		r.MaxLatency = time.Microsecond
		in := newInjector(t, seed, r)
		rt := in.Wrap(&backend{})
		var out []string
		for range 200 {
			out = append(out, outcome(t, rt))
		}
		return out
	}
	a, b, c := run(42), run(42), run(43)
	if strings.Join(a, ",") != strings.Join(b, ",") {
		t.Errorf("seed 42 gave two different sequences")
	}
	if strings.Join(a, ",") == strings.Join(c, ",") {
		t.Errorf("seeds 42 and 43 gave the same sequence of 200 decisions")
	}
}

// TestRatesAndConcurrency sends many requests from several goroutines and
// checks that every request is accounted for and that each kind's share is
// close to its probability. The seed is fixed, so the bounds (about five
// standard deviations) cannot turn flaky.
func TestRatesAndConcurrency(t *testing.T) {
	t.Parallel()
	const (
		goroutines = 8
		each       = 2500
		n          = goroutines * each
	)
	r := Rates{InternalError: 0.05, SlowDown: 0.02, ResetBefore: 0.03, LostResponse: 0.1, Latency: 0.01, MaxLatency: time.Microsecond}
	in := newInjector(t, 2026, r)
	be := &backend{}
	rt := in.Wrap(be)
	var wg sync.WaitGroup
	var passed atomic.Int64
	for range goroutines {
		wg.Go(func() {
			for range each {
				resp, err := rt.RoundTrip(request(t, nil))
				if err == nil {
					if resp.StatusCode == http.StatusOK {
						passed.Add(1)
					}
					resp.Body.Close()
				}
			}
		})
	}
	wg.Wait()

	c := in.Counts()
	failed := c[InternalError] + c[SlowDown] + c[ResetBefore] + c[LostResponse]
	if failed+passed.Load() != n || in.Requests() != n {
		t.Errorf("%d failed + %d passed, %d seen; want %d in all", failed, passed.Load(), in.Requests(), n)
	}
	if want := n - c[InternalError] - c[SlowDown] - c[ResetBefore]; be.got.Load() != want {
		t.Errorf("server saw %d requests, want %d (all but the unsent ones)", be.got.Load(), want)
	}
	for k, p := range map[Kind]float64{InternalError: r.InternalError, SlowDown: r.SlowDown, ResetBefore: r.ResetBefore, LostResponse: r.LostResponse} {
		mean := p * n
		sd := mean * (1 - p)
		if got := float64(c[k]); got < mean-5*math.Sqrt(sd) || got > mean+5*math.Sqrt(sd) {
			t.Errorf("%s: %v injected, want about %.0f", k, got, mean)
		}
	}
	// Latency is drawn for every request but applied only to those sent.
	if c[Latency] == 0 || float64(c[Latency]) > 2*r.Latency*n {
		t.Errorf("latency injected %d times, want about %.0f", c[Latency], r.Latency*n*0.8)
	}
	t.Logf("injected: %s", Format(c))
}

func TestSetEnabled(t *testing.T) {
	t.Parallel()
	in := newInjector(t, 1, Rates{ResetBefore: 1})
	be := &backend{}
	rt := in.Wrap(be)
	in.SetEnabled(false)
	if got := outcome(t, rt); got != "200 OK" {
		t.Errorf("disabled: %s, want the request passed through", got)
	}
	if in.Requests() != 0 || in.Count(ResetBefore) != 0 {
		t.Errorf("disabled injector counted %d requests, %d resets", in.Requests(), in.Count(ResetBefore))
	}
	in.SetEnabled(true)
	if got := outcome(t, rt); got != ResetBefore.String() {
		t.Errorf("enabled again: %s, want a reset", got)
	}
}

// TestLatencyHonoursContext: an injected delay of a cancelled request ends
// at once. The test runs in a synctest bubble, whose clock moves only while
// every goroutine waits, so "at once" means no time at all, however busy
// the machine.
func TestLatencyHonoursContext(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		in := newInjector(t, 1, Rates{Latency: 1, MaxLatency: time.Hour})
		be := &backend{}
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		req := request(t, nil).WithContext(ctx)
		start := time.Now()
		if _, err := in.Wrap(be).RoundTrip(req); err == nil {
			t.Fatal("a cancelled request went through")
		}
		if d := time.Since(start); d > 0 {
			t.Errorf("the delay ignored the cancelled context for %s", d)
		}
		if be.got.Load() != 0 {
			t.Errorf("the cancelled request reached the server")
		}
	})
}
