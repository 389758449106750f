package main

import (
	"net/http"
	"strings"
	"testing"
)

// TestStrictRequests: what the API does not know is refused, never
// ignored. A query parameter a path does not take is a 400
// unknown_parameter (a typo such as stauts=dead would otherwise answer
// every task); a body with a key twice is a 400 duplicate_key, at any
// depth; a Content-Type other than application/json, or a body without
// one, is a 400 invalid_content_type; POST /paused refuses a type that
// cannot be one (invalid_type) and one this service does not run
// (unknown_type). A refused request changes nothing.
func TestStrictRequests(t *testing.T) {
	t.Parallel()
	s := startService(t, svcOptions{mode: modeAPI})
	id := s.create("x", typeStats, nil).Task.ID
	ct := http.Header{"Content-Type": {"application/json"}}

	for _, tc := range []struct {
		name, method, path string
		header             http.Header
		body               any
		status             int
		code               string
	}{
		// Query parameters, on every route.
		{"list typo", "GET", "/tasks?stauts=dead", nil, nil, 400, codeUnknownParameter},
		{"list typo with known ones", "GET", "/tasks?limit=5&status=dead&tpye=csv_stats", nil, nil, 400, codeUnknownParameter},
		{"list empty name", "GET", "/tasks?=x", nil, nil, 400, codeUnknownParameter},
		{"list cursor twice", "GET", "/tasks?cursor=a&cursor=b", nil, nil, 400, "invalid_query"},
		{"list undecodable", "GET", "/tasks?status=%zz", nil, nil, 400, "invalid_query"},
		{"get", "GET", "/tasks/" + id + "?verbose=1", nil, nil, 400, codeUnknownParameter},
		{"stats", "GET", "/stats?spam=1h", nil, nil, 400, codeUnknownParameter},
		{"workers", "GET", "/workers?live=true", nil, nil, 400, codeUnknownParameter},
		{"paused", "GET", "/paused?type=csv_stats", nil, nil, 400, codeUnknownParameter},
		{"create", "POST", "/tasks?dry_run=1", ct, map[string]any{"name": "x", "type": typeStats}, 400, codeUnknownParameter},
		{"submit", "POST", "/tasks/" + id + "/submit?force=1", nil, nil, 400, codeUnknownParameter},
		{"cancel", "POST", "/tasks/" + id + "/cancel?reason=r", nil, nil, 400, codeUnknownParameter},
		{"bulk", "POST", "/tasks/bulk?dry_run=true", ct, map[string]any{"action": "cancel", "ids": []string{id}}, 400, codeUnknownParameter},
		{"output", "GET", "/tasks/" + id + "/output?ttl=1h", nil, nil, 400, codeUnknownParameter},
		{"set paused", "POST", "/paused?paused=true", ct, map[string]any{"type": typeStats, "paused": true}, 400, codeUnknownParameter},

		// Duplicate keys, at any depth, and keys differing only in case.
		{"create dup", "POST", "/tasks", ct, `{"name":"x","type":"csv_stats","name":"y"}`, 400, codeDuplicateKey},
		{"create dup by case", "POST", "/tasks", ct, `{"name":"x","type":"csv_stats","Name":"y"}`, 400, codeDuplicateKey},
		{"create dup in payload", "POST", "/tasks", ct, `{"name":"x","type":"csv_enrich","payload":{"required":["a"],"required":["b"]}}`, 400, codeDuplicateKey},
		{"bulk dup in filter", "POST", "/tasks/bulk", ct, `{"action":"cancel","filter":{"status":"queued","status":"created"},"dry_run":true}`, 400, codeDuplicateKey},
		{"cancel dup", "POST", "/tasks/" + id + "/cancel", ct, `{"reason":"a","reason":"b"}`, 400, codeDuplicateKey},
		{"schedule dup", "POST", "/tasks/" + id + "/schedule", ct, `{"run_at":"2030-01-01T00:00:00Z","run_at":"2031-01-01T00:00:00Z"}`, 400, codeDuplicateKey},
		{"paused dup", "POST", "/paused", ct, `{"type":"csv_stats","paused":false,"paused":true}`, 400, codeDuplicateKey},

		// Content types.
		{"create form", "POST", "/tasks", http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}, map[string]any{"name": "x", "type": typeStats}, 400, codeInvalidContentType},
		{"create text", "POST", "/tasks", http.Header{"Content-Type": {"text/plain"}}, map[string]any{"name": "x", "type": typeStats}, 400, codeInvalidContentType},
		{"create no type", "POST", "/tasks", http.Header{"Content-Type": nil}, map[string]any{"name": "x", "type": typeStats}, 400, codeInvalidContentType},
		{"create latin1", "POST", "/tasks", http.Header{"Content-Type": {"application/json; charset=latin1"}}, map[string]any{"name": "x", "type": typeStats}, 400, codeInvalidContentType},
		{"create two types", "POST", "/tasks", http.Header{"Content-Type": {"application/json", "text/plain"}}, map[string]any{"name": "x", "type": typeStats}, 400, codeInvalidContentType},
		{"create malformed", "POST", "/tasks", http.Header{"Content-Type": {"application/json; charset"}}, map[string]any{"name": "x", "type": typeStats}, 400, codeInvalidContentType},
		{"bulk form", "POST", "/tasks/bulk", http.Header{"Content-Type": {"multipart/form-data"}}, map[string]any{"action": "cancel", "ids": []string{id}}, 400, codeInvalidContentType},
		{"paused text", "POST", "/paused", http.Header{"Content-Type": {"text/plain"}}, map[string]any{"type": typeStats, "paused": true}, 400, codeInvalidContentType},
		{"cancel form without body", "POST", "/tasks/" + id + "/cancel", http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}, nil, 400, codeInvalidContentType},

		// Task types POST /paused refuses.
		{"pause misspelt", "POST", "/paused", ct, map[string]any{"type": "csv_stat", "paused": true}, 400, codeUnknownType},
		{"resume misspelt", "POST", "/paused", ct, map[string]any{"type": "csv_stat", "paused": false}, 400, codeUnknownType},
		{"pause untyped", "POST", "/paused", ct, map[string]any{"type": "", "paused": true}, 400, codeUnknownType},
		{"pause newline", "POST", "/paused", ct, map[string]any{"type": "csv_stats\n", "paused": true}, 400, codeInvalidType},
		{"resume newline", "POST", "/paused", ct, map[string]any{"type": "csv\nstats", "paused": false}, 400, codeInvalidType},
		{"pause control", "POST", "/paused", ct, map[string]any{"type": "csv\x00stats", "paused": true}, 400, codeInvalidType},
		{"pause long", "POST", "/paused", ct, map[string]any{"type": strings.Repeat("t", maxTypeBytes+1), "paused": true}, 400, codeInvalidType},
		{"body not utf-8", "POST", "/paused", ct, "{\"type\":\"csv\xffstats\",\"paused\":true}", 400, "invalid_body"},

		// Other places a type is given refuse a malformed one too.
		{"list type newline", "GET", "/tasks?type=csv%0Astats", nil, nil, 400, "invalid_query"},
		{"bulk type newline", "POST", "/tasks/bulk", ct, map[string]any{"action": "cancel", "filter": map[string]any{"type": "a\nb"}, "dry_run": true}, 400, "invalid_argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := s.as(testToken, tc.header)
			c.t = t
			e := c.callError(tc.method, tc.path, tc.body, tc.status, tc.code)
			if len(e.Error.Message) > maxMessage+len("…") {
				t.Errorf("message of %d bytes: %q", len(e.Error.Message), e.Error.Message)
			}
		})
	}

	// Nothing was changed by the refusals.
	if v := s.get(id); v.Status != "created" {
		t.Errorf("the task is %s after the refused requests; want created", v.Status)
	}
	var paused pausedResponse
	s.call("GET", "/paused", nil, http.StatusOK, &paused)
	if len(paused.Paused) != 0 {
		t.Errorf("paused after the refused requests: %v", paused.Paused)
	}

	// What the rules allow: the known parameters, a JSON type with or
	// without charset, an empty body without a type, the same key in two
	// objects, and a served type.
	s.call("GET", "/tasks?limit=5&status=created&type=csv_stats&max_scan=10", nil, http.StatusOK, nil)
	s.call("GET", "/stats?span=1h&max_tasks=5", nil, http.StatusOK, nil)
	s.as(testToken, http.Header{"Content-Type": {"application/json; charset=UTF-8"}}).call("POST", "/tasks",
		map[string]any{"name": "x", "type": typeStats}, http.StatusCreated, nil)
	s.as(testToken, http.Header{"Content-Type": {"Application/JSON"}}).call("POST", "/tasks",
		`{"name":"x","type":"csv_enrich","payload":{"required":["name"],"email_column":"name"}}`, http.StatusCreated, nil)
	s.as(testToken, http.Header{"Content-Type": nil}).call("POST", "/tasks/"+id+"/schedule", nil, http.StatusOK, nil)
	s.call("POST", "/tasks/bulk", `{"action":"cancel","filter":{"status":"queued","type":"csv_stats"},"dry_run":true}`, http.StatusOK, nil)
	s.call("POST", "/paused", map[string]any{"type": typeStats, "paused": true}, http.StatusOK, nil)
}

// TestDuplicateKey checks the scan for keys given twice on its own.
func TestDuplicateKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		json, key string
	}{
		{`{}`, ""},
		{`{"a":1,"b":2}`, ""},
		{`{"a":{"a":1},"b":{"a":2}}`, ""},
		{`[{"a":1},{"a":2}]`, ""},
		{`{"a":["a","a"],"b":"a"}`, ""},
		{`{"a":1,"a":2}`, "a"},
		{`{"a":1,"A":2}`, "A"},
		{`{"x":{"y":[1,{"z":1,"z":2}]}}`, "z"},
		{`{"x":[{"k":1}],"y":{},"x":2}`, "x"},
		{`{"x":{},"y":1,"y":2}`, "y"},
	} {
		key, ok := duplicateKey([]byte(tc.json))
		if key != tc.key || ok != (tc.key != "") {
			t.Errorf("duplicateKey(%s) = %q, %v; want %q", tc.json, key, ok, tc.key)
		}
	}
}
