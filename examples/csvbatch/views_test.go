package main

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/examples/internal/taskview"
)

// viewsSetup starts a service without a worker, so that tasks stay where
// the test puts them, and makes one task in each state the state views
// show, oldest first:
//
//	created     waiting for its input (csv_enrich)
//	queued      submitted, due now
//	scheduled   submitted, then scheduled an hour ahead (csv_enrich)
//	retrying    failed in category io, a retry due in an hour
//	dead        failed for good in category io
//	badInput    failed for good in category bad_input (csv_enrich)
//	completed   as a worker leaves it
//	abandoned   cancelled
func viewsSetup(t *testing.T) (*service, map[string]string) {
	t.Helper()
	s := startService(t, svcOptions{mode: modeAPI})
	ids := map[string]string{}
	submitted := func(name, typ string) string {
		c := s.create(name, typ, nil)
		s.uploadPut(c.Upload.Put, []byte("a,b\n1,2\n"))
		s.call("POST", "/tasks/"+c.Task.ID+"/submit", nil, http.StatusOK, nil)
		return c.Task.ID
	}
	ids["created"] = s.create("created", typeEnrich, nil).Task.ID
	ids["queued"] = submitted("queued", typeStats)
	ids["scheduled"] = submitted("scheduled", typeEnrich)
	var scheduled taskview.Task
	s.call("POST", "/tasks/"+ids["scheduled"]+"/schedule", map[string]any{"run_at": time.Now().Add(time.Hour)}, http.StatusOK, &scheduled)
	if scheduled.Status != s3task.StatusQueued || !scheduled.Scheduled(time.Now()) {
		t.Fatalf("scheduled task: %+v", scheduled)
	}
	ids["retrying"] = submitted("retrying", typeStats)
	s.failRecord(ids["retrying"], catIO, "attempt 1: reading the input: connection reset", time.Now().Add(time.Hour))
	ids["dead"] = submitted("dead", typeStats)
	s.failRecord(ids["dead"], catIO, "attempt 3: storing the output: 503 SlowDown", time.Time{})
	ids["badInput"] = submitted("bad input", typeEnrich)
	s.failRecord(ids["badInput"], catBadInput, "line 3 has 2 fields, the header has 3", time.Time{})
	ids["completed"] = submitted("completed", typeStats)
	s.editRecord(ids["completed"], func(rec map[string]any) {
		// Two minutes ago: past the minute Purge leaves a task after its
		// last change.
		rec["status"], rec["attempt_id"], rec["updated_at"] = "completed", 1, rfc3339(time.Now().Add(-2*time.Minute))
		rec["output_object_path"] = s.app.store.Prefix() + ids["completed"] + "/output-1.csv"
	})
	ids["abandoned"] = s.create("abandoned", typeStats, nil).Task.ID
	s.call("POST", "/tasks/"+ids["abandoned"]+"/cancel", nil, http.StatusOK, nil)
	s.editRecord(ids["abandoned"], func(rec map[string]any) { rec["updated_at"] = rfc3339(time.Now().Add(-2 * time.Minute)) })
	return s, ids
}

// listIDs lists every page of path (a /tasks query without a cursor),
// checking that each page but the last is full, and returns the IDs.
func (s *service) listIDs(path string, limit int) []string {
	s.t.Helper()
	var ids []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 50 {
			s.t.Fatalf("%s: paging does not end", path)
		}
		var p listResponse
		q := path + "&limit=" + strconv.Itoa(limit)
		if cursor != "" {
			q += "&cursor=" + cursor
		}
		s.call("GET", q, nil, http.StatusOK, &p)
		for _, task := range p.Tasks {
			ids = append(ids, task.ID)
		}
		if p.NextCursor == "" {
			return ids
		}
		if len(p.Tasks) != limit && !p.ScanLimited {
			s.t.Errorf("%s: a page of %d tasks with limit %d, neither the last nor scan-limited", q, len(p.Tasks), limit)
		}
		cursor = p.NextCursor
	}
}

// TestListByState: GET /tasks?status= answers the tasks of each state
// view, newest first, the library's statuses and the API's parts of them
// (scheduled, retrying, dead) alike, and type= narrows any of them.
func TestListByState(t *testing.T) {
	t.Parallel()
	s, ids := viewsSetup(t)
	for _, tc := range []struct {
		status string
		want   []string // names in ids, newest first
	}{
		{"created", []string{"created"}},
		{"queued", []string{"scheduled", "queued"}},
		{"scheduled", []string{"scheduled"}},
		{"running", nil},
		{"failed", []string{"badInput", "dead", "retrying"}},
		{"retrying", []string{"retrying"}},
		{"dead", []string{"badInput", "dead"}},
		{"completed", []string{"completed"}},
		{"abandoned", []string{"abandoned"}},
	} {
		var want []string
		for _, name := range tc.want {
			want = append(want, ids[name])
		}
		if diff := cmp.Diff(want, s.listIDs("/tasks?status="+tc.status, 10)); diff != "" {
			t.Errorf("status=%s (-want +got):\n%s", tc.status, diff)
		}
	}
	if diff := cmp.Diff([]string{ids["badInput"]}, s.listIDs("/tasks?status=dead&type="+typeEnrich, 10)); diff != "" {
		t.Errorf("status=dead&type=%s (-want +got):\n%s", typeEnrich, diff)
	}
	if diff := cmp.Diff([]string{ids["badInput"], ids["scheduled"], ids["created"]}, s.listIDs("/tasks?type="+typeEnrich, 10)); diff != "" {
		t.Errorf("type=%s (-want +got):\n%s", typeEnrich, diff)
	}
	if got := s.listIDs("/tasks?type=pdf_render", 10); len(got) != 0 {
		t.Errorf("type=pdf_render: %v", got)
	}

	// What a failed task says of its failure: final or not, its category,
	// and whether a retry is offered.
	var page listResponse
	s.call("GET", "/tasks?status=failed", nil, http.StatusOK, &page)
	byID := map[string]taskview.Task{}
	for _, task := range page.Tasks {
		byID[task.ID] = task
	}
	if r := byID[ids["retrying"]]; r.Terminal || r.RetryAt.IsZero() || !r.Retryable || r.ErrorCategory != catIO {
		t.Errorf("retrying: terminal %v, retry_at %v, retryable %v, category %q", r.Terminal, r.RetryAt, r.Retryable, r.ErrorCategory)
	}
	if d := byID[ids["dead"]]; !d.Terminal || !d.Retryable || d.RetryNote != "" {
		t.Errorf("dead in io: terminal %v, retryable %v, note %q; want a plain retry offered", d.Terminal, d.Retryable, d.RetryNote)
	}
	if b := byID[ids["badInput"]]; !b.Terminal || b.Retryable || !strings.Contains(b.RetryNote, "bad_input") || b.ErrorCategory != catBadInput {
		t.Errorf("dead in bad_input: terminal %v, retryable %v, note %q; want no retry offered, and why", b.Terminal, b.Retryable, b.RetryNote)
	}
}

// TestListStatePagesStayFull: a state the library does not filter by
// (dead, among failed tasks that mostly wait for a retry) comes in full
// pages whose cursors go on right after their last task, so that paging
// shows each dead task once; with a scan bound, pages stop short at it,
// say so, and paging on still shows them all.
func TestListStatePagesStayFull(t *testing.T) {
	t.Parallel()
	s := startService(t, svcOptions{mode: modeAPI})
	var dead []string
	for i := range 12 {
		id := s.create("failed "+strconv.Itoa(i), typeStats, nil).Task.ID
		if i%3 == 0 {
			s.failRecord(id, catIO, "gave up", time.Time{})
			dead = append([]string{id}, dead...) // newest first
		} else {
			s.failRecord(id, catIO, "will retry", time.Now().Add(time.Hour))
		}
	}
	for _, limit := range []int{1, 2, 3, 5} {
		if diff := cmp.Diff(dead, s.listIDs("/tasks?status=dead", limit)); diff != "" {
			t.Errorf("status=dead, limit %d (-want +got):\n%s", limit, diff)
		}
	}

	var p listResponse
	s.call("GET", "/tasks?status=dead&limit=10&max_scan=4", nil, http.StatusOK, &p)
	if !p.ScanLimited || p.Scanned > 4 || p.NextCursor == "" || len(p.Tasks) > 2 {
		t.Errorf("max_scan=4: %d tasks, scanned %d, scan_limited %v, cursor %q", len(p.Tasks), p.Scanned, p.ScanLimited, p.NextCursor)
	}
	if diff := cmp.Diff(dead, s.listIDs("/tasks?status=dead&max_scan=4", 10)); diff != "" {
		t.Errorf("status=dead, max_scan=4, all pages (-want +got):\n%s", diff)
	}
}

// TestListQueryRefused: a status, type or scan bound the API does not
// take is refused with invalid_query, never ignored.
func TestListQueryRefused(t *testing.T) {
	t.Parallel()
	s := startService(t, svcOptions{mode: modeAPI})
	for _, query := range []string{
		"status=bogus", "status=Failed", "status=failed&status=dead", "status=dead,failed",
		"type=" + strings.Repeat("t", maxTypeBytes+1), "type=a&type=b", "type=%ff",
		"max_scan=0", "max_scan=10001", "max_scan=x", "max_scan=%zz",
	} {
		e := s.callError("GET", "/tasks?"+query, nil, http.StatusBadRequest, "invalid_query")
		if len(e.Error.Message) > 200 {
			t.Errorf("%s: message of %d bytes", query, len(e.Error.Message))
		}
	}
	s.callError("GET", "/tasks?limit=0&status=dead", nil, http.StatusBadRequest, "invalid_argument")
	s.callError("GET", "/tasks?status=dead&cursor=!!!", nil, http.StatusBadRequest, "invalid_cursor")
	if status, _ := s.as("", nil).request("GET", "/tasks?status=dead", nil); status != http.StatusUnauthorized {
		t.Errorf("status=dead without a token: %d, want 401", status)
	}
}

// TestSchedule: POST /tasks/{id}/schedule moves a queued task's start, and
// without a time (the page's "Run now") makes a scheduled task due now; a
// finished task or a bad time is refused.
func TestSchedule(t *testing.T) {
	t.Parallel()
	s, ids := viewsSetup(t)
	id := ids["scheduled"]
	var now taskview.Task
	s.call("POST", "/tasks/"+id+"/schedule", nil, http.StatusOK, &now)
	if now.Status != s3task.StatusQueued || now.Scheduled(time.Now()) || now.RunAt.After(time.Now().Add(time.Second)) {
		t.Errorf("after Run now: status %s, run_at %v", now.Status, now.RunAt)
	}
	if got := s.listIDs("/tasks?status=scheduled", 10); len(got) != 0 {
		t.Errorf("scheduled after Run now: %v", got)
	}
	if got := s.listIDs("/tasks?status=queued", 10); !slices.Contains(got, id) {
		t.Errorf("queued after Run now: %v, want it to hold %s", got, id)
	}
	// An empty object does the same; a time ahead schedules again.
	s.call("POST", "/tasks/"+id+"/schedule", `{}`, http.StatusOK, nil)
	at := time.Now().Add(2 * time.Hour).UTC().Truncate(time.Second)
	var later taskview.Task
	s.call("POST", "/tasks/"+id+"/schedule", map[string]any{"run_at": at}, http.StatusOK, &later)
	if !later.RunAt.Equal(at) || !later.Scheduled(time.Now()) {
		t.Errorf("scheduled for %v: run_at %v", at, later.RunAt)
	}

	for _, name := range []string{"completed", "dead", "abandoned"} {
		s.callError("POST", "/tasks/"+ids[name]+"/schedule", nil, http.StatusConflict, "invalid_transition")
	}
	for _, body := range []string{`{"run_at":"tomorrow"}`, `{"run_at":1}`, `{"when":"now"}`, `[]`} {
		s.callError("POST", "/tasks/"+id+"/schedule", body, http.StatusBadRequest, "invalid_body")
	}
	s.callError("POST", "/tasks/7ZZZZZZZZZZZZZZZZZZZZZZZZZ/schedule", nil, http.StatusNotFound, "not_found")
	s.callError("POST", "/tasks/not-an-id/schedule", nil, http.StatusBadRequest, "invalid_id")
	if status, _ := s.as("", nil).request("POST", "/tasks/"+id+"/schedule", nil); status != http.StatusUnauthorized {
		t.Errorf("schedule without a token: %d, want 401", status)
	}
	if got := s.get(id); !got.RunAt.Equal(at) {
		t.Errorf("run_at after the refused calls: %v, want %v", got.RunAt, at)
	}
}

// TestRetryBadInputStillAccepted: the view offers no retry for a
// bad_input failure, but the endpoint takes one, for a handler fixed
// since.
func TestRetryBadInputStillAccepted(t *testing.T) {
	t.Parallel()
	s, ids := viewsSetup(t)
	var retried taskview.Task
	s.call("POST", "/tasks/"+ids["badInput"]+"/retry", nil, http.StatusOK, &retried)
	if retried.Status != s3task.StatusQueued || retried.RetryNote != "" {
		t.Errorf("retried: %+v", retried)
	}
}
