package main

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/s3tasktest"
)

// postBulk sends POST /tasks/bulk with body and decodes the answer,
// failing the test unless its status is wantStatus.
func (s *service) postBulk(body any, wantStatus int) bulkResponse {
	s.t.Helper()
	var resp bulkResponse
	s.call("POST", "/tasks/bulk", body, wantStatus, &resp)
	return resp
}

// snapshot returns every object in the service's bucket with its bytes.
func (s *service) snapshot() map[string]string {
	s.t.Helper()
	keys, err := s.objects().Keys(s.t.Context(), "")
	if err != nil {
		s.t.Fatal(err)
	}
	objs := make(map[string]string, len(keys))
	for _, key := range keys {
		body, _, err := s.objects().Get(s.t.Context(), key)
		if err != nil {
			s.t.Fatal(err)
		}
		objs[key] = string(body)
	}
	return objs
}

// outcome is what the tests compare of a bulk result.
type outcome struct{ Outcome, Status, Code string }

// outcomes returns the results of resp by task ID.
func outcomes(resp bulkResponse) map[string]outcome {
	m := map[string]outcome{}
	for _, r := range resp.Results {
		m[r.ID] = outcome{r.Outcome, r.Status, r.Code}
	}
	return m
}

// wouldDo returns the IDs resp would act on, or acted on, in its order.
func wouldDo(resp bulkResponse) []string {
	var ids []string
	for _, r := range resp.Results {
		if r.Outcome == "would_do" || r.Outcome == "done" {
			ids = append(ids, r.ID)
		}
	}
	return ids
}

// checkCounts checks that resp's counts add up its results.
func checkCounts(t *testing.T, resp bulkResponse) {
	t.Helper()
	n := map[string]int{}
	for _, r := range resp.Results {
		n[r.Outcome]++
	}
	if resp.Acted != n["done"]+n["would_do"] || resp.Skipped != n["skipped"] || resp.Failed != n["failed"] {
		t.Errorf("counts acted %d, skipped %d, failed %d; the results hold %v", resp.Acted, resp.Skipped, resp.Failed, n)
	}
}

// TestBulkOutcomes runs each action over one task in every state, by ID,
// first as a dry run, which must write nothing, then for real: a task
// the action applies to is done (would_do in the dry run), one it does
// not apply to is skipped with the reason, an ID that names no task is
// skipped as not_found, one that is not an ID fails. A bulk retry skips
// the failures the service offers no retry for (bad_input), and one the
// library refuses (its input is gone) fails with the error.
func TestBulkOutcomes(t *testing.T) {
	t.Parallel()
	const (
		unknown = "7ZZZZZZZZZZZZZZZZZZZZZZZZZ"
		invalid = "not-an-id"
	)
	skipped := func(status string) outcome { return outcome{"skipped", status, "invalid_transition"} }
	for _, tc := range []struct {
		action, reason string
		// want is the dry run's outcome per task; the run's is the same
		// with done for would_do, except as run says.
		want map[string]outcome
		run  map[string]outcome
		// after is each task's status once the run is over ("" for one
		// purged).
		after map[string]s3task.Status
	}{{
		action: "retry",
		want: map[string]outcome{
			"created": skipped("created"), "queued": skipped("queued"), "scheduled": skipped("queued"),
			"retrying": {"would_do", "failed", ""}, "dead": {"would_do", "failed", ""},
			"badInput":  {"skipped", "failed", codeRetryNotOffered},
			"completed": skipped("completed"), "abandoned": skipped("abandoned"),
			"noInput": {"would_do", "failed", ""},
		},
		run: map[string]outcome{
			"retrying": {"done", "queued", ""}, "dead": {"done", "queued", ""},
			"noInput": {"failed", "", "input_missing"},
		},
		after: map[string]s3task.Status{
			"created": "created", "queued": "queued", "scheduled": "queued", "retrying": "queued", "dead": "queued",
			"badInput": "failed", "completed": "completed", "abandoned": "abandoned", "noInput": "failed",
		},
	}, {
		action: "cancel", reason: "wrong batch",
		want: map[string]outcome{
			"created": {"would_do", "created", ""}, "queued": {"would_do", "queued", ""}, "scheduled": {"would_do", "queued", ""},
			"retrying": {"would_do", "failed", ""}, "dead": {"would_do", "failed", ""}, "badInput": {"would_do", "failed", ""},
			"noInput": {"would_do", "failed", ""}, "completed": skipped("completed"), "abandoned": skipped("abandoned"),
		},
		run: map[string]outcome{
			"created": {"done", "abandoned", ""}, "queued": {"done", "abandoned", ""}, "scheduled": {"done", "abandoned", ""},
			"retrying": {"done", "abandoned", ""}, "dead": {"done", "abandoned", ""}, "badInput": {"done", "abandoned", ""},
			"noInput": {"done", "abandoned", ""},
		},
		after: map[string]s3task.Status{
			"created": "abandoned", "queued": "abandoned", "scheduled": "abandoned", "retrying": "abandoned", "dead": "abandoned",
			"badInput": "abandoned", "completed": "completed", "abandoned": "abandoned", "noInput": "abandoned",
		},
	}, {
		// Purge takes finished tasks only: completed, failed for good,
		// cancelled.
		action: "purge",
		want: map[string]outcome{
			"created": skipped("created"), "queued": skipped("queued"), "scheduled": skipped("queued"),
			"retrying": skipped("failed"), "dead": {"would_do", "failed", ""}, "badInput": {"would_do", "failed", ""},
			"noInput": {"would_do", "failed", ""}, "completed": {"would_do", "completed", ""}, "abandoned": {"would_do", "abandoned", ""},
		},
		run: map[string]outcome{
			"dead": {"done", "failed", ""}, "badInput": {"done", "failed", ""}, "noInput": {"done", "failed", ""},
			"completed": {"done", "completed", ""}, "abandoned": {"done", "abandoned", ""},
		},
		after: map[string]s3task.Status{
			"created": "created", "queued": "queued", "scheduled": "queued", "retrying": "failed",
			"dead": "", "badInput": "", "completed": "", "abandoned": "", "noInput": "",
		},
	}} {
		t.Run(tc.action, func(t *testing.T) {
			t.Parallel()
			s, ids := viewsSetup(t)
			// A dead task whose input was never uploaded: the view offers
			// a retry, which the library refuses.
			ids["noInput"] = s.create("no input", typeStats, nil).Task.ID
			s.failRecord(ids["noInput"], catIO, "attempt 3: reading the input: connection reset", time.Time{})
			names := map[string]string{unknown: "unknown", invalid: "invalid"}
			var all []string
			for name, id := range ids {
				names[id] = name
				all = append(all, id)
			}
			all = append(all, unknown, invalid)
			byName := func(resp bulkResponse) map[string]outcome {
				m := map[string]outcome{}
				for id, o := range outcomes(resp) {
					m[names[id]] = o
				}
				return m
			}
			want := map[string]outcome{"unknown": {"skipped", "", "not_found"}, "invalid": {"failed", "", "invalid_id"}}
			for name, o := range tc.want {
				want[name] = o
			}
			body := map[string]any{"action": tc.action, "ids": all, "dry_run": true}
			if tc.reason != "" {
				body["reason"] = tc.reason
			}

			before := s.snapshot()
			dry := s.postBulk(body, http.StatusOK)
			if diff := cmp.Diff(want, byName(dry)); diff != "" {
				t.Errorf("dry run (-want +got):\n%s", diff)
			}
			if !dry.DryRun || dry.Action != tc.action || dry.NextCursor != "" {
				t.Errorf("dry run: dry_run %v, action %q, next_cursor %q", dry.DryRun, dry.Action, dry.NextCursor)
			}
			checkCounts(t, dry)
			if diff := cmp.Diff(before, s.snapshot()); diff != "" {
				t.Fatalf("the dry run changed the bucket (-before +after):\n%s", diff)
			}
			for _, r := range dry.Results {
				if r.Outcome == "would_do" && (r.Name == "" || r.Type == "") {
					t.Errorf("%s: task_name %q, task_type %q", names[r.ID], r.Name, r.Type)
				}
				if (r.Outcome == "skipped" || r.Outcome == "failed") && r.Reason == "" {
					t.Errorf("%s: %s without a reason", names[r.ID], r.Outcome)
				}
			}

			body["dry_run"] = false
			run := s.postBulk(body, http.StatusOK)
			for name, o := range tc.run {
				want[name] = o
			}
			if diff := cmp.Diff(want, byName(run)); diff != "" {
				t.Errorf("run (-want +got):\n%s", diff)
			}
			checkCounts(t, run)
			if run.DryRun {
				t.Error("the run says dry_run")
			}
			for name, status := range tc.after {
				if status == "" {
					s.callError("GET", "/tasks/"+ids[name], nil, http.StatusNotFound, "not_found")
					continue
				}
				got := s.get(ids[name])
				if got.Status != status {
					t.Errorf("%s after the run: %s, want %s", name, got.Status, status)
				}
				if tc.action == "cancel" && tc.run[name].Outcome == "done" && got.CancelReason != tc.reason {
					t.Errorf("%s: cancel_reason %q, want %q", name, got.CancelReason, tc.reason)
				}
			}
		})
	}
}

// TestBulkByFilter selects by state and type as the state views do: a
// status the library filters by, and the states the API derives
// (scheduled, retrying, dead), alone or with a type.
func TestBulkByFilter(t *testing.T) {
	t.Parallel()
	s, ids := viewsSetup(t)
	for _, tc := range []struct {
		action string
		filter bulkFilter
		want   []string // names in ids, newest first: the tasks would_do
	}{
		// dead: the bad_input failure is skipped, for want of a retry.
		{"retry", bulkFilter{Status: "dead"}, []string{"dead"}},
		{"retry", bulkFilter{Status: "dead", Type: typeEnrich}, nil},
		{"retry", bulkFilter{Status: "retrying"}, []string{"retrying"}},
		{"retry", bulkFilter{Status: "failed"}, []string{"dead", "retrying"}},
		{"cancel", bulkFilter{Status: "scheduled"}, []string{"scheduled"}},
		{"cancel", bulkFilter{Status: "queued"}, []string{"scheduled", "queued"}},
		{"cancel", bulkFilter{Type: typeEnrich}, []string{"badInput", "scheduled", "created"}},
		{"purge", bulkFilter{Status: "dead"}, []string{"badInput", "dead"}},
		{"purge", bulkFilter{Status: "completed"}, []string{"completed"}},
		{"purge", bulkFilter{Status: "retrying"}, nil},
	} {
		var want []string
		for _, name := range tc.want {
			want = append(want, ids[name])
		}
		dry := s.postBulk(map[string]any{"action": tc.action, "filter": tc.filter, "dry_run": true}, http.StatusOK)
		if diff := cmp.Diff(want, wouldDo(dry)); diff != "" {
			t.Errorf("%s %+v (-want +got):\n%s", tc.action, tc.filter, diff)
		}
		if dry.Scanned == 0 || dry.NextCursor != "" {
			t.Errorf("%s %+v: scanned %d, next_cursor %q", tc.action, tc.filter, dry.Scanned, dry.NextCursor)
		}
		checkCounts(t, dry)
	}
	if o := outcomes(s.postBulk(map[string]any{"action": "retry", "filter": bulkFilter{Status: "dead"}, "dry_run": true}, http.StatusOK)); o[ids["badInput"]].Code != codeRetryNotOffered {
		t.Errorf("retry of the dead tasks: bad_input task %+v, want it skipped as %s", o[ids["badInput"]], codeRetryNotOffered)
	}

	// The runs act on what the filter selects now.
	run := s.postBulk(map[string]any{"action": "retry", "filter": bulkFilter{Status: "dead", Type: typeStats}}, http.StatusOK)
	if diff := cmp.Diff([]string{ids["dead"]}, wouldDo(run)); diff != "" || run.Results[0].Outcome != "done" {
		t.Errorf("retry of the dead csv_stats tasks: %+v", run.Results)
	}
	run = s.postBulk(map[string]any{"action": "cancel", "filter": bulkFilter{Status: "scheduled"}, "reason": "not tonight"}, http.StatusOK)
	if got := s.get(ids["scheduled"]); got.Status != s3task.StatusAbandoned || got.CancelReason != "not tonight" || run.Acted != 1 {
		t.Errorf("cancel of the scheduled tasks: %+v; task %s, %q", run.Results, got.Status, got.CancelReason)
	}
	s.postBulk(map[string]any{"action": "purge", "filter": bulkFilter{Status: "completed"}}, http.StatusOK)
	s.callError("GET", "/tasks/"+ids["completed"], nil, http.StatusNotFound, "not_found")
	if got := s.get(ids["dead"]); got.Status != s3task.StatusQueued {
		t.Errorf("the dead csv_stats task after its retry: %s", got.Status)
	}
	if got := s.get(ids["badInput"]); got.Status != s3task.StatusFailed {
		t.Errorf("the bad_input task after the retries: %s", got.Status)
	}
}

// TestBulkLimitCursor: limit caps the tasks one call acts on, and
// next_cursor goes on from where it stopped, so that calls with the same
// selection reach each task once; max_scan cuts a filter's listing short
// and says so.
func TestBulkLimitCursor(t *testing.T) {
	t.Parallel()
	s := startService(t, svcOptions{mode: modeAPI})
	var all, dead []string // newest first
	for i := range 12 {
		c := s.create("failed "+strconv.Itoa(i), typeStats, nil)
		s.uploadPut(c.Upload.Put, []byte("a\n1\n"))
		id := c.Task.ID
		if i%3 == 0 {
			s.failRecord(id, catIO, "gave up", time.Time{})
			dead = append([]string{id}, dead...)
		} else {
			s.failRecord(id, catIO, "will retry", time.Now().Add(time.Hour))
		}
		all = append([]string{id}, all...)
	}
	// pages sends body with each next_cursor until there is none, checking
	// each call acts on at most limit tasks, and returns the tasks acted
	// on (or that would be) in order.
	pages := func(body map[string]any, limit int) []string {
		t.Helper()
		var got []string
		body["limit"] = limit
		delete(body, "cursor")
		for calls := 0; ; calls++ {
			if calls > 20 {
				t.Fatalf("%v: paging does not end", body)
			}
			resp := s.postBulk(body, http.StatusOK)
			if resp.Acted > limit {
				t.Fatalf("%v: acted on %d tasks with limit %d", body, resp.Acted, limit)
			}
			got = append(got, wouldDo(resp)...)
			if resp.NextCursor == "" {
				return got
			}
			body["cursor"] = resp.NextCursor
		}
	}
	for _, limit := range []int{1, 3} {
		if diff := cmp.Diff(dead, pages(map[string]any{"action": "retry", "filter": bulkFilter{Status: "dead"}, "dry_run": true}, limit)); diff != "" {
			t.Errorf("dead, limit %d (-want +got):\n%s", limit, diff)
		}
		if diff := cmp.Diff(all, pages(map[string]any{"action": "retry", "filter": bulkFilter{Status: "failed"}, "dry_run": true}, limit)); diff != "" {
			t.Errorf("failed, limit %d (-want +got):\n%s", limit, diff)
		}
		if diff := cmp.Diff(all, pages(map[string]any{"action": "retry", "ids": all, "dry_run": true}, limit)); diff != "" {
			t.Errorf("ids, limit %d (-want +got):\n%s", limit, diff)
		}
	}

	resp := s.postBulk(map[string]any{"action": "retry", "filter": bulkFilter{Status: "dead"}, "limit": 10, "max_scan": 4, "dry_run": true}, http.StatusOK)
	if !resp.ScanLimited || resp.Scanned > 4 || resp.NextCursor == "" || resp.Acted > 2 {
		t.Errorf("max_scan 4: acted %d, scanned %d, scan_limited %v, cursor %q", resp.Acted, resp.Scanned, resp.ScanLimited, resp.NextCursor)
	}
	if diff := cmp.Diff(dead, pages(map[string]any{"action": "retry", "filter": bulkFilter{Status: "dead"}, "max_scan": 4, "dry_run": true}, 10)); diff != "" {
		t.Errorf("dead, max_scan 4, every call (-want +got):\n%s", diff)
	}

	// For real, two at a time: each dead task is retried once, and the
	// others are left waiting for their retry.
	if diff := cmp.Diff(dead, pages(map[string]any{"action": "retry", "filter": bulkFilter{Status: "dead"}}, 2)); diff != "" {
		t.Errorf("retry of the dead tasks, two at a time (-want +got):\n%s", diff)
	}
	for _, id := range all {
		want := s3task.StatusFailed
		if slices.Contains(dead, id) {
			want = s3task.StatusQueued
		}
		if got := s.get(id); got.Status != want {
			t.Errorf("task %s: %s, want %s", id, got.Status, want)
		}
	}
}

// TestBulkRefused: a body the endpoint does not take is refused with 400
// and its code, and changes nothing; so is a call without the token.
func TestBulkRefused(t *testing.T) {
	t.Parallel()
	s, ids := viewsSetup(t)
	id := ids["dead"]
	many := make([]string, s3task.MaxBulkIDs+1)
	for i := range many {
		many[i] = id
	}
	manyJSON, _ := json.Marshal(many)
	before := s.snapshot()
	for _, tc := range []struct{ body, code string }{
		{``, "invalid_body"},
		{`not json`, "invalid_body"},
		{`[]`, "invalid_body"},
		{`{"action":"retry","ids":["` + id + `"]} {}`, "invalid_body"},
		{`{"action":"retry","ids":["` + id + `"],"colour":"red"}`, "invalid_body"},
		{`{"action":"retry","ids":"` + id + `"}`, "invalid_body"},
		{`{"action":"delete","ids":["` + id + `"]}`, "invalid_body"},
		{`{"action":"Retry","ids":["` + id + `"]}`, "invalid_body"},
		{`{"ids":["` + id + `"]}`, "invalid_body"},
		{`{"action":"retry","filter":{"status":"broken"}}`, "invalid_body"},
		{`{"action":"retry","filter":{"status":"dead","colour":"red"}}`, "invalid_body"},
		{`{"action":"retry","ids":["` + id + `"],"filter":{"status":"dead"}}`, "invalid_argument"},
		{`{"action":"retry"}`, "invalid_argument"},
		{`{"action":"retry","ids":[]}`, "invalid_argument"},
		{`{"action":"retry","filter":{}}`, "invalid_argument"},
		{`{"action":"retry","ids":` + string(manyJSON) + `}`, "invalid_argument"},
		{`{"action":"retry","ids":["` + id + `"],"limit":-1}`, "invalid_argument"},
		{`{"action":"retry","ids":["` + id + `"],"limit":1001}`, "invalid_argument"},
		{`{"action":"retry","ids":["` + id + `"],"max_scan":10}`, "invalid_argument"},
		{`{"action":"retry","filter":{"status":"dead"},"max_scan":10001}`, "invalid_argument"},
		{`{"action":"retry","ids":["` + id + `"],"reason":"why"}`, "invalid_argument"},
		{`{"action":"purge","ids":["` + id + `"],"reason":"why"}`, "invalid_argument"},
		{`{"action":"cancel","ids":["` + id + `"],"reason":"` + strings.Repeat("r", maxCancelReason+1) + `"}`, "invalid_argument"},
		{`{"action":"retry","filter":{"type":"` + strings.Repeat("t", maxTypeBytes+1) + `"}}`, "invalid_argument"},
		{`{"action":"retry","filter":{"status":"dead"},"cursor":"!!!"}`, "invalid_cursor"},
		{`{"action":"retry","ids":["` + id + `"],"cursor":"!!!"}`, "invalid_cursor"},
	} {
		e := s.callError("POST", "/tasks/bulk", tc.body, http.StatusBadRequest, tc.code)
		if len(e.Error.Message) > 300 {
			t.Errorf("%.60s: message of %d bytes", tc.body, len(e.Error.Message))
		}
	}
	s.callError("POST", "/tasks/bulk", `{"action":"retry","ids":["`+strings.Repeat("A", maxBodySize)+`"]}`, http.StatusRequestEntityTooLarge, "body_too_large")

	// The token is checked first, as for every call; a browser's
	// cross-site POST is refused.
	body := `{"action":"purge","ids":["` + ids["completed"] + `"]}`
	for _, token := range []string{"", "wrong-token-0123456789"} {
		if status, data := s.as(token, nil).request("POST", "/tasks/bulk", body); status != http.StatusUnauthorized || !strings.Contains(string(data), `"unauthenticated"`) {
			t.Errorf("token %q: %d %s", token, status, data)
		}
	}
	if status, _ := s.as(testToken, http.Header{"Sec-Fetch-Site": {"cross-site"}}).request("POST", "/tasks/bulk", body); status != http.StatusForbidden {
		t.Errorf("cross-site POST: %d, want 403", status)
	}
	if diff := cmp.Diff(before, s.snapshot()); diff != "" {
		t.Errorf("refused calls changed the bucket (-before +after):\n%s", diff)
	}

	// An ID that is not one is a failed result, not a refused call, and
	// one of any length is repeated short.
	resp := s.postBulk(map[string]any{"action": "retry", "ids": []string{strings.Repeat("A", 7000)}}, http.StatusOK)
	if len(resp.Results) != 1 || resp.Results[0].Code != "invalid_id" || len(resp.Results[0].ID) > maxEcho+3 || len(resp.Results[0].Reason) > 200 {
		t.Errorf("a long invalid ID: %+v", resp.Results)
	}
}

// TestBulkStoppedPartWay: a bulk run that S3's deadline cuts short answers
// 503 s3_unavailable with what it did (the tasks it retried, and those it
// was acting on when time ran out, as failed) and a next_cursor; once S3
// answers again, the same call with that cursor goes on after them, and
// the tasks cut short are retried by a call from the start.
func TestBulkStoppedPartWay(t *testing.T) {
	t.Parallel()
	var (
		stalling atomic.Bool
		stalled  atomic.Value // []string: the tasks whose writes hang
	)
	stalled.Store([]string(nil))
	cfg := testConfig(t, svcOptions{mode: modeAPI})
	cfg.s3Timeout = time.Second
	cfg.statsInterval = 0
	cfg.s3Wrap = func(next http.RoundTripper) http.RoundTripper {
		return s3tasktest.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			if stalling.Load() && r.Method == http.MethodPut {
				for _, id := range stalled.Load().([]string) {
					if strings.Contains(r.URL.Path, id) {
						if r.Body != nil {
							r.Body.Close()
						}
						<-r.Context().Done()
						return nil, r.Context().Err()
					}
				}
			}
			return next.RoundTrip(r)
		})
	}
	s := startConfig(t, cfg)
	var ids []string // newest first
	for i := range 9 {
		c := s.create("dead "+strconv.Itoa(i), typeStats, nil)
		s.uploadPut(c.Upload.Put, []byte("a\n1\n"))
		category := catIO
		if i == 0 {
			category = catBadInput // the oldest: skipped, for want of a retry
		}
		s.failRecord(c.Task.ID, category, "gave up", time.Time{})
		ids = append([]string{c.Task.ID}, ids...)
	}
	// The run takes the newest first, four at a time: the first two are
	// retried, the next four hang until the deadline, and the last two
	// are never reached; nor is the oldest, which the call does not
	// report, since the next one does.
	stalled.Store(ids[2:6])
	stalling.Store(true)
	body := map[string]any{"action": "retry", "filter": bulkFilter{Status: "failed"}}
	resp, data := s.send("POST", "/tasks/bulk", mustJSON(t, body))
	var stopped bulkResponse
	if err := json.Unmarshal(data, &stopped); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a run cut short: %d %s, want 503 with the report", resp.StatusCode, data)
	}
	if e := stopped.Error; e == nil || e.Code != codeS3Unavailable || !strings.Contains(e.Message, "stopped part way") {
		t.Errorf("error %+v, want %s saying the action stopped part way", e, codeS3Unavailable)
	}
	if resp.Header.Get("Retry-After") == "" {
		t.Error("no Retry-After")
	}
	want := map[string]outcome{ids[0]: {"done", "queued", ""}, ids[1]: {"done", "queued", ""}}
	for _, id := range ids[2:6] {
		want[id] = outcome{"failed", "", codeS3Unavailable}
	}
	if diff := cmp.Diff(want, outcomes(stopped)); diff != "" || stopped.NextCursor == "" {
		t.Errorf("the report of a run cut short (-want +got):\n%s\nnext_cursor %q", diff, stopped.NextCursor)
	}
	checkCounts(t, stopped)

	stalling.Store(false)
	body["cursor"] = stopped.NextCursor
	rest := s.postBulk(body, http.StatusOK)
	if diff := cmp.Diff(ids[6:8], wouldDo(rest)); diff != "" || rest.NextCursor != "" || outcomes(rest)[ids[8]].Code != codeRetryNotOffered {
		t.Errorf("going on from next_cursor (-want +got):\n%s\nnext_cursor %q", diff, rest.NextCursor)
	}
	delete(body, "cursor")
	again := s.postBulk(body, http.StatusOK)
	if diff := cmp.Diff(ids[2:6], wouldDo(again)); diff != "" {
		t.Errorf("from the start, the tasks cut short (-want +got):\n%s", diff)
	}
	for _, id := range ids[:8] {
		if got := s.get(id); got.Status != s3task.StatusQueued {
			t.Errorf("task %s: %s, want queued", id, got.Status)
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
