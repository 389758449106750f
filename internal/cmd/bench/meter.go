package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/s3task/s3task/internal/s3test"
)

// kinds are the request kinds S3 bills, in the order tables show them.
var kinds = []string{"LIST", "GET", "HEAD", "PUT", "POST", "DELETE"}

// labelKey names one sort of request within one phase, e.g. phase "submit",
// label "PUT record If-Match".
type labelKey struct{ phase, label string }

// counts is a snapshot of a meter.
type counts struct {
	kinds  map[string]int
	labels map[labelKey]int
	// lostCAS counts PUTs of a status.json with If-Match answered 412: a
	// compare-and-set that lost.
	lostCAS int
	// wall is the summed duration of the requests, for their mean.
	wall time.Duration
}

func newCounts() counts { return counts{kinds: map[string]int{}, labels: map[labelKey]int{}} }

func (c counts) total() int {
	n := 0
	for _, v := range c.kinds {
		n += v
	}
	return n
}

// minus returns c - old.
func (c counts) minus(old counts) counts {
	d := newCounts()
	for k, v := range c.kinds {
		if v -= old.kinds[k]; v != 0 {
			d.kinds[k] = v
		}
	}
	for k, v := range c.labels {
		if v -= old.labels[k]; v != 0 {
			d.labels[k] = v
		}
	}
	d.lostCAS = c.lostCAS - old.lostCAS
	d.wall = c.wall - old.wall
	return d
}

// plus returns c + o.
func (c counts) plus(o counts) counts {
	d := newCounts()
	for _, m := range []counts{c, o} {
		for k, v := range m.kinds {
			d.kinds[k] += v
		}
		for k, v := range m.labels {
			d.labels[k] += v
		}
		d.lostCAS += m.lostCAS
		d.wall += m.wall
	}
	return d
}

// meanRTT is the mean duration of the counted requests.
func (c counts) meanRTT() time.Duration {
	if n := c.total(); n > 0 {
		return c.wall / time.Duration(n)
	}
	return 0
}

// meter is a transport wrapper that counts S3 requests by kind and by
// label, and the compare-and-sets that lost. Requests are attributed to the
// phase set when they start. It is safe for concurrent use.
type meter struct {
	mu    sync.Mutex
	phase string
	c     counts
}

func newMeter() *meter { return &meter{c: newCounts()} }

// setPhase attributes the requests started from now on to phase.
func (m *meter) setPhase(p string) {
	m.mu.Lock()
	m.phase = p
	m.mu.Unlock()
}

// snapshot returns a copy of the counts so far.
func (m *meter) snapshot() counts {
	m.mu.Lock()
	defer m.mu.Unlock()
	return newCounts().plus(m.c)
}

// wrap counts every request through next.
func (m *meter) wrap(next http.RoundTripper) http.RoundTripper {
	return s3test.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		kind := s3test.Op(r)
		m.mu.Lock()
		phase := m.phase
		m.mu.Unlock()
		start := time.Now()
		resp, err := next.RoundTrip(r)
		took := time.Since(start)
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		lbl := label(r, kind, status, err)
		lost := kind == "PUT" && status == http.StatusPreconditionFailed &&
			r.Header.Get("If-Match") != "" && strings.HasSuffix(r.URL.Path, "/status.json")
		m.mu.Lock()
		m.c.kinds[kind]++
		m.c.labels[labelKey{phase, lbl}]++
		if lost {
			m.c.lostCAS++
		}
		m.c.wall += took
		m.mu.Unlock()
		return resp, err
	})
}

// label describes a request in a few words: its kind, the sort of object it
// touches, its condition, and its status unless it succeeded. For example
// "PUT record If-Match", "GET wake If-None-Match →304", "LIST markers".
func label(r *http.Request, kind string, status int, err error) string {
	var b strings.Builder
	b.WriteString(kind)
	b.WriteByte(' ')
	if kind == "LIST" {
		p := r.URL.Query().Get("prefix")
		switch {
		case strings.HasSuffix(p, "/active/"):
			b.WriteString("markers")
		case strings.HasSuffix(p, "/pending/"):
			b.WriteString("pending/")
		default:
			b.WriteString("tasks")
		}
	} else {
		if r.Header.Get("X-Amz-Copy-Source") != "" {
			b.WriteString("(copy) ")
		}
		b.WriteString(objectClass(r.URL.Path))
	}
	if r.Header.Get("If-Match") != "" {
		b.WriteString(" If-Match")
	}
	if r.Header.Get("If-None-Match") != "" {
		b.WriteString(" If-None-Match")
	}
	switch {
	case err != nil:
		b.WriteString(" →error")
	case status >= 300:
		b.WriteString(" →" + strconv.Itoa(status))
	}
	return b.String()
}

// labelCount sums the requests of c whose label starts with prefix, across
// phases and statuses: "GET record" counts "GET record →404" too.
func labelCount(c counts, prefix string) int {
	n := 0
	for k, v := range c.labels {
		if k.label == prefix || strings.HasPrefix(k.label, prefix+" ") {
			n += v
		}
	}
	return n
}

// statusCount sums the requests of c answered with status, an error status.
func statusCount(c counts, status int) int {
	n := 0
	for k, v := range c.labels {
		if strings.HasSuffix(k.label, " →"+strconv.Itoa(status)) {
			n += v
		}
	}
	return n
}

// labelList lists the labels of c across phases, in order, each with its
// count divided by n and marked with mark: "PUT record If-Match ×2, ...".
func labelList(c counts, n int, mark string) string {
	m := map[labelKey]float64{}
	for k, v := range c.labels {
		m[labelKey{"", k.label}] += float64(v) / float64(n)
	}
	s := ""
	for i, k := range sortedKeys(m) {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s %s%s", k.label, mark, num(m[k]))
	}
	return s
}

// objectClasses are the sorts of object a path can address, each known by
// a suffix (is) or a part (has) of the path, tried in order.
var objectClasses = []struct{ is, has, class string }{
	{is: "/status.json", class: "record"},
	{has: "/active/", class: "marker"},
	{is: "/_wake", class: "wake"},
	{is: "/_paused", class: "paused"},
	{has: "/input", class: "input"},
	{has: "/output-attempt-", class: "output"},
	{is: "/queue.json", class: "queue.json"},
	{has: "/pending/", class: "pending/<id>"},
	{has: "/processing/", class: "processing/<id>"},
}

// objectClass names the sort of object a (path-style) URL path addresses.
func objectClass(path string) string {
	for _, c := range objectClasses {
		if (c.is != "" && strings.HasSuffix(path, c.is)) || (c.has != "" && strings.Contains(path, c.has)) {
			return c.class
		}
	}
	return "other"
}

// delay adds a random latency in [lo, hi] to every request, half before it
// is sent and half after its answer, as a network round trip would.
func delay(lo, hi time.Duration) wrapper {
	return func(next http.RoundTripper) http.RoundTripper {
		if hi <= 0 {
			return next
		}
		return s3test.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			d := lo
			if hi > lo {
				d += time.Duration(mrand.Int64N(int64(hi - lo)))
			}
			if err := s3test.Sleep(r.Context(), d/2); err != nil {
				if r.Body != nil {
					r.Body.Close()
				}
				return nil, err
			}
			resp, err := next.RoundTrip(r)
			if err == nil {
				if err := s3test.Sleep(r.Context(), d-d/2); err != nil {
					resp.Body.Close()
					return nil, err
				}
			}
			return resp, err
		})
	}
}

// randHex returns 2n random hex digits.
func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// percentile returns the p-th percentile (0-100) of ds, nearest rank.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(p/100*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}
