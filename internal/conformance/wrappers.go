package conformance

// Transport wrappers that watch what the library sends.

import (
	"net/http"
	"strings"
	"sync"

	"github.com/s3task/s3task/internal/s3test"
)

// isRecordPut reports whether req writes a task record.
func isRecordPut(req *http.Request) bool {
	return req.Method == http.MethodPut && strings.HasSuffix(req.URL.Path, "/status.json")
}

// statusRecorder is a transport wrapper that keeps the real status code of
// every record PUT that reaches the server.
type statusRecorder struct {
	mu    sync.Mutex
	codes []int
}

func (r *statusRecorder) wrap(next http.RoundTripper) http.RoundTripper {
	return s3test.RoundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := next.RoundTrip(req)
		if err == nil && isRecordPut(req) {
			r.mu.Lock()
			r.codes = append(r.codes, resp.StatusCode)
			r.mu.Unlock()
		}
		return resp, err
	})
}

func (r *statusRecorder) count(code int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.codes {
		if c == code {
			n++
		}
	}
	return n
}

// recordReads is a transport wrapper that counts GETs of one task's record
// and LISTs of the marker folder.
type recordReads struct {
	mu    sync.Mutex
	key   string // the record
	dir   string // the marker folder
	n     int
	lists int
	more  chan struct{} // pinged on every read and listing
}

func (r *recordReads) wrap(next http.RoundTripper) http.RoundTripper {
	return s3test.RoundTripFunc(func(req *http.Request) (*http.Response, error) {
		r.mu.Lock()
		key, dir := r.key, r.dir
		read := req.Method == http.MethodGet && key != "" && strings.HasSuffix(req.URL.Path, "/"+key)
		list := req.Method == http.MethodGet && dir != "" && req.URL.Query().Get("list-type") == "2" && req.URL.Query().Get("prefix") == dir
		if read {
			r.n++
		}
		if list {
			r.lists++
		}
		r.mu.Unlock()
		if read || list {
			select {
			case r.more <- struct{}{}:
			default:
			}
		}
		return next.RoundTrip(req)
	})
}

func (r *recordReads) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

func (r *recordReads) listings() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lists
}
