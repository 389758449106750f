package main

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/s3task/s3task/examples/internal/taskview"
)

// TestPauseAPI: POST /paused pauses and resumes a task type through the
// library, and GET /paused lists the paused types with the service's own;
// a task of a paused type waits, queued, and runs once the type is
// resumed; a repeat changes nothing; bad bodies and types are 400s, a
// missing token 401, another method 405.
func TestPauseAPI(t *testing.T) {
	t.Parallel()
	s := startService(t, svcOptions{})
	var got pausedResponse
	s.call("GET", "/paused", nil, http.StatusOK, &got)
	if got.Paused == nil || len(got.Paused) != 0 || !slices.Equal(got.Types, typeNames()) {
		t.Fatalf("GET /paused before any pause: %+v", got)
	}

	s.call("POST", "/paused", map[string]any{"type": typeStats, "paused": true}, http.StatusOK, &got)
	if !slices.Equal(got.Paused, []string{typeStats}) {
		t.Fatalf("after pausing %s: %+v", typeStats, got)
	}
	s.call("POST", "/paused", map[string]any{"type": typeStats, "paused": true}, http.StatusOK, &got) // again: no change
	if lib, err := s.app.store.Paused(t.Context()); err != nil || !slices.Equal(lib, []string{typeStats}) {
		t.Fatalf("Store.Paused = %v, %v; want [%s]", lib, err, typeStats)
	}

	// A task of the paused type waits; one of the other type runs.
	held := s.submit("waits for the resume", typeStats, nil, []byte("a,b\n1,2\n"))
	other := s.submit("runs meanwhile", typeEnrich, nil, []byte("a,b\n1,2\n"))
	s.waitFor(other, "the other type's task completed", func(v taskview.Task) bool { return v.Status == "completed" })
	time.Sleep(3 * s.app.cfg.pollInterval)
	if v := s.get(held); v.Status != "queued" || v.Attempt != 0 {
		t.Fatalf("the paused type's task is %s (attempt %d) while paused; want queued, never claimed", v.Status, v.Attempt)
	}
	s.call("POST", "/paused", map[string]any{"type": typeStats, "paused": false}, http.StatusOK, &got)
	if len(got.Paused) != 0 {
		t.Fatalf("after resuming %s: %+v", typeStats, got)
	}
	s.waitFor(held, "the held task completed after the resume", func(v taskview.Task) bool { return v.Status == "completed" })

	// A type paused elsewhere (s3taskctl pause), which this service does
	// not run, can be resumed here, though not paused.
	if err := s.app.store.Pause(t.Context(), "pdf_render"); err != nil {
		t.Fatal(err)
	}
	s.call("POST", "/paused", map[string]any{"type": "pdf_render", "paused": false}, http.StatusOK, &got)
	if len(got.Paused) != 0 {
		t.Errorf("after resuming a type paused elsewhere: %+v", got)
	}

	for name, body := range map[string]any{
		"no paused":  map[string]any{"type": typeStats},
		"no type":    map[string]any{"paused": true},
		"not JSON":   "pause it",
		"no body":    nil,
		"long type":  map[string]any{"type": strings.Repeat("t", 129), "paused": true},
		"paused str": map[string]any{"type": typeStats, "paused": "yes"},
	} {
		status, data := s.request("POST", "/paused", body)
		if status != http.StatusBadRequest {
			t.Errorf("%s: status %d, want 400; body %s", name, status, data)
		}
	}
	if status, _ := s.as("", nil).request("GET", "/paused", nil); status != http.StatusUnauthorized {
		t.Errorf("GET /paused without the token: %d, want 401", status)
	}
	if status, _ := s.as("", nil).request("POST", "/paused", map[string]any{"type": typeStats, "paused": true}); status != http.StatusUnauthorized {
		t.Errorf("POST /paused without the token: %d, want 401", status)
	}
	s.callError("DELETE", "/paused", nil, http.StatusMethodNotAllowed, "method_not_allowed")
}
