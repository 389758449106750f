// Package faults injects S3 and network failures into an S3 client's HTTP
// transport, for tests that check what survives them.
//
// An [Injector] wraps a transport (see its Wrap method). Each request draws,
// with the configured probabilities, one of:
//
//   - a 500 InternalError or a 503 SlowDown answer, made up without sending
//     the request;
//   - a connection reset before the request reaches S3 (nothing was sent);
//   - a lost response: the request is sent and applied by S3, its real answer
//     is read and thrown away, and the client gets a connection reset — the
//     ambiguous case, where a resend meets the effect of its first copy;
//
// and, independently, a short added latency before the request goes out.
// Draws come from a seeded generator, so one seed gives one sequence of
// decisions (the order in which concurrent requests draw is up to the
// scheduler). An Injector is safe for concurrent use and counts what it did.
package faults

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/s3task/s3task/internal/s3test"
)

// Kind is a kind of injected fault.
type Kind int

// The kinds of fault, in the order an [Injector] draws them.
const (
	InternalError Kind = iota // 500 InternalError, not forwarded
	SlowDown                  // 503 SlowDown, not forwarded
	ResetBefore               // connection reset; the request never reached S3
	LostResponse              // applied by S3, answer lost, connection reset
	Latency                   // forwarded after a short delay
	numKinds
)

var kindNames = [numKinds]string{"500", "503-slowdown", "reset-before", "lost-response", "latency"}

func (k Kind) String() string {
	if k < 0 || k >= numKinds {
		return fmt.Sprintf("Kind(%d)", int(k))
	}
	return kindNames[k]
}

// Kinds lists every kind, for reports.
func Kinds() []Kind { return []Kind{InternalError, SlowDown, ResetBefore, LostResponse, Latency} }

// Rates are per-request probabilities, each from 0 to 1. The four failures
// are exclusive (their sum must be at most 1); latency is drawn on its own
// and applies to requests that are sent.
type Rates struct {
	InternalError float64
	SlowDown      float64
	ResetBefore   float64
	LostResponse  float64
	Latency       float64
	// MaxLatency bounds an added delay; each is uniform in [0, MaxLatency).
	// Zero means 5ms.
	MaxLatency time.Duration
}

// Uniform returns Rates in which a request fails with probability p, split
// evenly over the four failures, and is delayed with probability p.
func Uniform(p float64) Rates {
	return Rates{InternalError: p / 4, SlowDown: p / 4, ResetBefore: p / 4, LostResponse: p / 4, Latency: p}
}

func (r Rates) validate() error {
	for _, p := range []float64{r.InternalError, r.SlowDown, r.ResetBefore, r.LostResponse, r.Latency} {
		if p < 0 || p > 1 || p != p {
			return fmt.Errorf("faults: probability %v outside [0, 1]", p)
		}
	}
	if s := r.InternalError + r.SlowDown + r.ResetBefore + r.LostResponse; s > 1+1e-9 {
		return fmt.Errorf("faults: failure probabilities sum to %v, over 1", s)
	}
	if r.MaxLatency < 0 {
		return fmt.Errorf("faults: negative MaxLatency %s", r.MaxLatency)
	}
	return nil
}

// Injector decides, request by request, what fault to inject. Create it
// with [New]; the zero value is not usable.
type Injector struct {
	rates   Rates
	enabled atomic.Bool
	counts  [numKinds]atomic.Int64
	total   atomic.Int64 // requests seen while enabled

	mu  sync.Mutex // guards rng
	rng *rand.Rand
}

// New returns an enabled Injector with the given rates, drawing from a
// generator seeded with seed. It returns an error for invalid rates.
func New(seed uint64, rates Rates) (*Injector, error) {
	if err := rates.validate(); err != nil {
		return nil, err
	}
	if rates.MaxLatency == 0 {
		rates.MaxLatency = 5 * time.Millisecond
	}
	in := &Injector{rates: rates, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	in.enabled.Store(true)
	return in, nil
}

// SetEnabled turns injection on or off. While off, requests pass through
// untouched and are not counted. Requests already being delayed or
// forwarded finish as decided.
func (in *Injector) SetEnabled(on bool) { in.enabled.Store(on) }

// Count returns how many faults of kind k were injected.
func (in *Injector) Count(k Kind) int64 {
	if k < 0 || k >= numKinds {
		return 0
	}
	return in.counts[k].Load()
}

// Counts returns the injected faults by kind.
func (in *Injector) Counts() map[Kind]int64 {
	m := make(map[Kind]int64, numKinds)
	for _, k := range Kinds() {
		m[k] = in.counts[k].Load()
	}
	return m
}

// Requests returns how many requests went through the injector while it
// was enabled, faulted or not.
func (in *Injector) Requests() int64 { return in.total.Load() }

// decision is what to do with one request.
type decision struct {
	fail  Kind // a failure kind, or numKinds for none
	delay time.Duration
}

func (in *Injector) decide() decision {
	in.mu.Lock()
	defer in.mu.Unlock()
	r := in.rates
	d := decision{fail: numKinds}
	u := in.rng.Float64()
	for _, c := range []struct {
		k Kind
		p float64
	}{{InternalError, r.InternalError}, {SlowDown, r.SlowDown}, {ResetBefore, r.ResetBefore}, {LostResponse, r.LostResponse}} {
		if u < c.p {
			d.fail = c.k
			break
		}
		u -= c.p
	}
	if in.rng.Float64() < r.Latency {
		d.delay = time.Duration(in.rng.Int64N(int64(r.MaxLatency)))
	}
	return d
}

// Error is the transport error of an injected reset or lost response. Its
// message says "connection reset" and it reports itself as a connection
// error, so the AWS SDK's retryer treats it as the real thing and resends.
type Error struct {
	Kind Kind
}

func (e *Error) Error() string {
	if e.Kind == LostResponse {
		return "faults: connection reset by peer after the request was sent (injected)"
	}
	return "faults: connection reset by peer before the request was sent (injected)"
}

// ConnectionError reports true: the AWS SDK retries connection errors.
func (e *Error) ConnectionError() bool { return true }

// Timeout and Temporary make Error a net.Error, as a real reset would be.
func (e *Error) Timeout() bool   { return false }
func (e *Error) Temporary() bool { return true }

// Wrap returns next wrapped so that requests through it get faults.
func (in *Injector) Wrap(next http.RoundTripper) http.RoundTripper {
	return s3test.RoundTripFunc(func(req *http.Request) (*http.Response, error) {
		if !in.enabled.Load() {
			return next.RoundTrip(req)
		}
		in.total.Add(1)
		d := in.decide()
		if d.delay > 0 && d.fail != InternalError && d.fail != SlowDown && d.fail != ResetBefore {
			in.counts[Latency].Add(1)
			if err := s3test.Sleep(req.Context(), d.delay); err != nil {
				closeBody(req)
				return nil, err
			}
		}
		switch d.fail {
		case InternalError:
			in.counts[InternalError].Add(1)
			closeBody(req)
			return ErrorResponse(req, http.StatusInternalServerError, "InternalError", "We encountered an internal error. Please try again. (injected)"), nil
		case SlowDown:
			in.counts[SlowDown].Add(1)
			closeBody(req)
			return ErrorResponse(req, http.StatusServiceUnavailable, "SlowDown", "Please reduce your request rate. (injected)"), nil
		case ResetBefore:
			in.counts[ResetBefore].Add(1)
			closeBody(req)
			return nil, &Error{Kind: ResetBefore}
		case LostResponse:
			resp, err := next.RoundTrip(req)
			if err != nil {
				return nil, err // a real failure; nothing to lose
			}
			in.counts[LostResponse].Add(1)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return nil, &Error{Kind: LostResponse}
		}
		return next.RoundTrip(req)
	})
}

// closeBody closes a request body that will not be sent, as the
// RoundTripper contract asks.
func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// ErrorResponse makes up an S3-style XML error answer to req, as a server
// would send it, without sending anything.
func ErrorResponse(req *http.Request, status int, code, msg string) *http.Response {
	body := `<?xml version="1.0" encoding="UTF-8"?>` + "\n" +
		`<Error><Code>` + code + `</Code><Message>` + msg + `</Message><RequestId>injected</RequestId></Error>`
	h := http.Header{}
	h.Set("Content-Type", "application/xml")
	h.Set("X-Amz-Request-Id", "injected")
	return &http.Response{
		Status:        fmt.Sprintf("%d %s", status, http.StatusText(status)),
		StatusCode:    status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}

// Sum adds up the counts of several injectors.
func Sum(injectors ...*Injector) map[Kind]int64 {
	m := make(map[Kind]int64, numKinds)
	for _, in := range injectors {
		for k, n := range in.Counts() {
			m[k] += n
		}
	}
	return m
}

// Format renders counts as "500=3 503-slowdown=1 ..." in kind order.
func Format(counts map[Kind]int64) string {
	var b strings.Builder
	for i, k := range Kinds() {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%d", k, counts[k])
	}
	return b.String()
}
