package s3test

import (
	"errors"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/aws/smithy-go"
)

func asCode(err error, target *interface{ ErrorCode() string }) bool {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		*target = ae
		return true
	}
	return false
}

// Op names the kind of an S3 request as it is billed: LIST, GET, HEAD, PUT,
// POST or DELETE.
func Op(r *http.Request) string {
	if r.Method == http.MethodGet && r.URL.Query().Has("list-type") {
		return "LIST"
	}
	return r.Method
}

// Counter is a transport wrapper that counts requests by [Op]. Use its Wrap
// method with [Server.Client]. It is safe for concurrent use.
type Counter struct {
	mu     sync.Mutex
	counts map[string]int
}

// Wrap returns next wrapped so that every request through it is counted.
func (c *Counter) Wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		c.mu.Lock()
		if c.counts == nil {
			c.counts = map[string]int{}
		}
		c.counts[Op(r)]++
		c.mu.Unlock()
		return next.RoundTrip(r)
	})
}

// Counts returns a copy of the counts so far.
func (c *Counter) Counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[string]int, len(c.counts))
	for k, v := range c.counts {
		m[k] = v
	}
	return m
}

// Total returns the number of requests counted.
func (c *Counter) Total() int {
	n := 0
	for _, v := range c.Counts() {
		n += v
	}
	return n
}

// Reset sets every count to zero.
func (c *Counter) Reset() {
	c.mu.Lock()
	c.counts = nil
	c.mu.Unlock()
}

// String formats the counts as "GET=2 PUT=1".
func (c *Counter) String() string {
	m := c.Counts()
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(strconv.Itoa(m[k]))
	}
	return b.String()
}

// StripConditionalHeaders is a transport wrapper that removes If-Match and
// If-None-Match from every request, imitating a store that ignores them.
func StripConditionalHeaders(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		r = r.Clone(r.Context())
		r.Header.Del("If-Match")
		r.Header.Del("If-None-Match")
		return next.RoundTrip(r)
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
