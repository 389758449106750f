package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"
)

// s3Proxy is a reverse proxy in front of versitygw that counts the requests
// it passes on, by the source it serves and by kind, and can hold new
// requests to imitate a store that stopped answering.
//
// The Host header is passed on unchanged: the processes sign their requests
// (and the API its presigned URLs) for the proxy's address, and the
// gateway checks the signature against the Host it receives.
type s3Proxy struct {
	name string // source label: "api" or "worker1"...
	URL  string // http://127.0.0.1:port
	srv  *http.Server
	ln   net.Listener
	gate *gate
	cnt  *counter
}

// gate holds requests while closed.
type gate struct {
	mu   sync.Mutex
	open chan struct{} // closed while the gate is open
}

func newGate() *gate {
	g := &gate{open: make(chan struct{})}
	close(g.open)
	return g
}

// wait returns when the gate is open or ctx is done.
func (g *gate) wait(ctx context.Context) error {
	g.mu.Lock()
	ch := g.open
	g.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gate) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
		g.open = make(chan struct{})
	default:
	}
}

func (g *gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

// counter counts S3 requests by source and kind, and answers by status.
type counter struct {
	mu       sync.Mutex
	on       bool
	requests map[string]map[string]int // source -> kind -> n
	statuses map[string]int            // "api PUT 412" -> n
	failed   map[string]int            // proxy errors (gateway unreachable...) by source
}

func newCounter() *counter {
	return &counter{requests: map[string]map[string]int{}, statuses: map[string]int{}, failed: map[string]int{}}
}

// start and stop bound the window counted: the load, not the start-up.
func (c *counter) start() { c.mu.Lock(); c.on = true; c.mu.Unlock() }
func (c *counter) stop()  { c.mu.Lock(); c.on = false; c.mu.Unlock() }

// reset forgets the counts.
func (c *counter) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.requests, c.statuses, c.failed = map[string]map[string]int{}, map[string]int{}, map[string]int{}
}

func (c *counter) add(source, kind string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.on {
		return
	}
	m := c.requests[source]
	if m == nil {
		m = map[string]int{}
		c.requests[source] = m
	}
	m[kind]++
}

func (c *counter) status(kind string, code int) {
	if code < 300 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.on {
		c.statuses[fmt.Sprintf("%s %d", kind, code)]++
	}
}

func (c *counter) fail(source string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.on {
		c.failed[source]++
	}
}

// snapshot returns copies of the counts.
func (c *counter) snapshot() (map[string]map[string]int, map[string]int, map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	req := map[string]map[string]int{}
	for s, m := range c.requests {
		req[s] = map[string]int{}
		for k, n := range m {
			req[s][k] = n
		}
	}
	st := map[string]int{}
	for k, n := range c.statuses {
		st[k] = n
	}
	f := map[string]int{}
	for k, n := range c.failed {
		f[k] = n
	}
	return req, st, f
}

// s3Kind names an S3 request: the operation, told from the method, the
// path and the query.
func s3Kind(r *http.Request) string {
	q := r.URL.Query()
	path := strings.Trim(r.URL.Path, "/")
	bucketOnly := path != "" && !strings.Contains(path, "/")
	switch r.Method {
	case http.MethodGet:
		if bucketOnly || path == "" {
			return "LIST"
		}
		return "GET"
	case http.MethodPut:
		if r.Header.Get("X-Amz-Copy-Source") != "" {
			return "COPY"
		}
		return "PUT"
	case http.MethodPost:
		if q.Has("delete") {
			return "DELETE (batch)"
		}
		return "POST"
	}
	return r.Method
}

// keyShape is r's object key without its bucket, with the parts that
// change from task to task (IDs, times) replaced by "*": which object a
// refused conditional write or a 404 was about.
func keyShape(r *http.Request) string {
	path := strings.Trim(r.URL.Path, "/")
	_, key, ok := strings.Cut(path, "/")
	if !ok {
		return "(bucket)"
	}
	parts := strings.Split(key, "/")
	for i, p := range parts {
		if strings.ContainsAny(p, "0123456789") && len(p) >= 10 {
			parts[i] = "*"
		}
	}
	return strings.Join(parts, "/")
}

// presignedRequest reports whether r carries a presigned URL's signature:
// a client's upload or download, not the service's own call.
func presignedRequest(r *http.Request) bool {
	return r.URL.Query().Get("X-Amz-Signature") != ""
}

// source is who sent r through the proxy of the process name.
func source(name string, r *http.Request) string {
	if presignedRequest(r) {
		return "client (presigned)"
	}
	return name
}

// startProxy listens on a free loopback port and forwards to target.
func startProxy(name, target string, g *gate, c *counter, transport http.RoundTripper) (*s3Proxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy %s: %w", name, err)
	}
	p := &s3Proxy{name: name, URL: "http://" + ln.Addr().String(), ln: ln, gate: g, cnt: c}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.Out.Host = pr.In.Host // signed for the proxy's address
		},
		Transport: transport,
		ModifyResponse: func(resp *http.Response) error {
			c.status(source(name, resp.Request)+" "+s3Kind(resp.Request)+" "+keyShape(resp.Request), resp.StatusCode)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() == nil {
				c.fail(name)
			}
			w.WriteHeader(http.StatusBadGateway)
		},
		ErrorLog: log.New(io.Discard, "", 0),
	}
	p.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c.add(source(name, r), s3Kind(r))
			if err := g.wait(r.Context()); err != nil {
				return // the caller gave up during the stall
			}
			rp.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: time.Minute,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

func (p *s3Proxy) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := p.srv.Shutdown(ctx); err != nil {
		p.srv.Close()
	}
}
