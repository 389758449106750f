package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/examples/internal/taskview"
	"github.com/s3task/s3task/internal/s3test"
	"github.com/s3task/s3task/s3tasktest"
)

const peopleCSV = "name,email,city\n" +
	"  Ada Lovelace , ADA@Example.COM ,London\n" +
	"Bob,,Paris\n" +
	"Carol,carol-at-example,Rome\n" +
	"\"Dee, Jr.\",dee@example.org,\n"

// TestEndToEndEnrich drives the service as a client would: create, upload
// to the presigned PUT URL with a plain HTTP client, submit, poll until
// completed, then download the output through its presigned URL.
func TestEndToEndEnrich(t *testing.T) {
	t.Parallel()
	s := startService(t, svcOptions{})

	c := s.create("people", typeEnrich, map[string]any{"required": []string{"name", "email"}})
	if c.Task.Status != "created" || c.Task.CreatedBy != "alice" || !c.Task.Cancelable || c.Task.Retryable {
		t.Fatalf("created task: %+v", c.Task)
	}
	if c.Upload.Put.Method != "PUT" || c.Upload.Post.URL == "" || c.Upload.Post.Fields["key"] == "" || c.Upload.Post.FileField != "file" {
		t.Fatalf("upload: %+v", c.Upload)
	}
	s.uploadPut(c.Upload.Put, []byte(peopleCSV))

	var submitted taskview.Task
	s.call("POST", "/tasks/"+c.Task.ID+"/submit", nil, http.StatusOK, &submitted)
	if submitted.Status != "queued" || submitted.InputSize != int64(len(peopleCSV)) {
		t.Fatalf("submitted task: %+v", submitted)
	}
	done := s.waitFor(c.Task.ID, "completed", completed)
	if done.RowCount != 4 || done.ProcessedCount != 4 || done.SuccessCount != 2 || done.ErrorCount != 2 {
		t.Errorf("counts: %+v", done)
	}
	if done.Retryable || done.Cancelable || !done.Terminal {
		t.Errorf("flags of a completed task: %+v", done)
	}

	want := [][]string{
		{"name", "email", "city", "row_status"},
		{"Ada Lovelace", "ada@example.com", "London", "ok"},
		{"Bob", "", "Paris", "error: missing email"},
		{"Carol", "carol-at-example", "Rome", "error: invalid email"},
		{"Dee, Jr.", "dee@example.org", "", "ok"},
	}
	if diff := cmp.Diff(want, s.download(c.Task.ID)); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}

	// A completed task can be neither retried nor cancelled.
	s.callError("POST", "/tasks/"+c.Task.ID+"/retry", nil, http.StatusConflict, "invalid_transition")
	s.callError("POST", "/tasks/"+c.Task.ID+"/cancel", nil, http.StatusConflict, "invalid_transition")
}

// TestEndToEndStats uploads with the presigned POST form, as the page does.
func TestEndToEndStats(t *testing.T) {
	t.Parallel()
	s := startService(t, svcOptions{})
	c := s.create("numbers", typeStats, nil)
	s.uploadPost(c, []byte("id,score,label\n1,10,a\n2,,b\n3,2.5,a\n4,x,\n"))
	s.call("POST", "/tasks/"+c.Task.ID+"/submit", nil, http.StatusOK, nil)
	done := s.waitFor(c.Task.ID, "completed", completed)
	if done.ProcessedCount != 4 || done.SuccessCount != 4 {
		t.Errorf("counts: %+v", done)
	}
	want := [][]string{
		{"column", "non_empty", "empty", "distinct", "numeric", "min", "max", "mean"},
		{"id", "4", "0", "4", "4", "1", "4", "2.5"},
		{"score", "3", "1", "3", "2", "2.5", "10", "6.25"},
		{"label", "3", "1", "2", "0", "", "", ""},
	}
	if diff := cmp.Diff(want, s.download(c.Task.ID)); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
}

// TestProgressVisibleWhileRunning: a large input's counters reach the
// record while it runs, with an estimated row count, and are exact at the
// end.
func TestProgressVisibleWhileRunning(t *testing.T) {
	t.Parallel()
	s := startService(t, svcOptions{})
	const rows = 150_000
	var in bytes.Buffer
	want, err := generateCSV(&in, rows)
	if err != nil {
		t.Fatal(err)
	}
	id := s.submit("big", typeEnrich, map[string]any{"required": []string{"name", "email"}}, in.Bytes())
	mid := s.waitFor(id, "running with progress", func(t taskview.Task) bool {
		return t.Status == "completed" || t.Status == "running" && t.ProcessedCount > 0
	})
	if mid.Status != "running" || mid.ProcessedCount >= rows || mid.RowCount < rows*8/10 || mid.RowCount > rows*12/10 {
		t.Errorf("no progress seen while running: %+v; want some of %d rows done and an estimate near it", mid, rows)
	}
	done := s.waitFor(id, "completed", completed)
	if done.RowCount != rows || done.ProcessedCount != rows || done.SuccessCount != want.ok || done.ErrorCount != rows-want.ok {
		t.Errorf("final counts: %+v", done)
	}
}

// TestCancel runs without a worker, so queued tasks stay queued.
func TestCancel(t *testing.T) {
	t.Parallel()
	s := startService(t, svcOptions{mode: modeAPI})

	// A created task, with an empty body.
	c := s.create("never uploaded", typeEnrich, nil)
	var got taskview.Task
	s.call("POST", "/tasks/"+c.Task.ID+"/cancel", nil, http.StatusOK, &got)
	if got.Status != "abandoned" || got.Cancelable || got.Retryable || !got.Terminal || got.CancelReason != "cancelled by alice" {
		t.Fatalf("cancelled task: %+v", got)
	}
	// Cancelling again changes nothing; submitting is refused.
	s.call("POST", "/tasks/"+c.Task.ID+"/cancel", nil, http.StatusOK, &got)
	s.callError("POST", "/tasks/"+c.Task.ID+"/submit", nil, http.StatusConflict, "invalid_transition")

	// A queued task, with a reason.
	c = s.create("wrong file", typeStats, nil)
	s.uploadPut(c.Upload.Put, []byte("a\n1\n"))
	s.call("POST", "/tasks/"+c.Task.ID+"/submit", nil, http.StatusOK, &got)
	if got.Status != "queued" || !got.Cancelable {
		t.Fatalf("queued task: %+v", got)
	}
	s.call("POST", "/tasks/"+c.Task.ID+"/cancel", map[string]string{"reason": "wrong file"}, http.StatusOK, &got)
	if got.Status != "abandoned" || got.CancelReason != "wrong file" {
		t.Fatalf("cancelled task: %+v", got)
	}
	if g := s.get(c.Task.ID); g.Status != "abandoned" {
		t.Fatalf("stored task: %+v", g)
	}
	s.callError("GET", "/tasks/"+c.Task.ID+"/output", nil, http.StatusConflict, "not_completed")
	s.callError("POST", "/tasks/"+c.Task.ID+"/cancel", `{"reason": 7}`, http.StatusBadRequest, "invalid_body")
}

// TestRetryNonCSV: binary input fails permanently with a readable error
// in category bad_input, for which no retry is offered (it would read the
// same file), and an operator's retry through the API runs it again all
// the same.
func TestRetryNonCSV(t *testing.T) {
	t.Parallel()
	s := startService(t, svcOptions{})
	id := s.submit("a picture", typeEnrich, nil, []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00"))
	failed := s.waitFor(id, "failed for good", failedForGood)
	if failed.Attempt != 1 || !failed.RetryAt.IsZero() || failed.Retryable || !failed.Cancelable ||
		failed.ErrorCategory != catBadInput || !strings.Contains(failed.RetryNote, "no retry offered") {
		t.Errorf("failed task: %+v", failed)
	}
	if !strings.Contains(failed.LastError, "binary file, not CSV") {
		t.Errorf("last_error = %q, want it to say the input is binary", failed.LastError)
	}

	var retried taskview.Task
	s.call("POST", "/tasks/"+id+"/retry", nil, http.StatusOK, &retried)
	if retried.Status != "queued" && retried.Status != "running" {
		t.Fatalf("retried task: %+v", retried)
	}
	again := s.waitFor(id, "failed again", func(t taskview.Task) bool { return t.Status == "failed" && t.Attempt == 2 })
	if !strings.Contains(again.LastError, "binary") || !again.Terminal {
		t.Errorf("task after retry: %+v", again)
	}
	// The answer carries the record's attempt history: both attempts,
	// each with its worker, its times, its outcome and its error.
	if h := again.History; len(h) != 2 || h[0].Number != 1 || h[1].Number != 2 {
		t.Fatalf("attempt_history %+v; want attempts 1 and 2", h)
	}
	for _, a := range again.History {
		if a.Outcome != s3task.OutcomeFailed || a.WorkerID == "" || a.StartedAt.IsZero() || a.EndedAt.Before(a.StartedAt) ||
			!strings.Contains(a.Error, "binary") || a.ErrorCategory != again.ErrorCategory || a.HeartbeatInterval <= 0 {
			t.Errorf("attempt %d in the history: %+v", a.Number, a)
		}
	}

	// Only a failed task can be retried.
	other := s.create("fresh", typeEnrich, nil)
	s.callError("POST", "/tasks/"+other.Task.ID+"/retry", nil, http.StatusConflict, "invalid_transition")
}

// TestWrongFieldCount: rows whose field count differs from the header's
// fail the task permanently.
func TestWrongFieldCount(t *testing.T) {
	t.Parallel()
	s := startService(t, svcOptions{})
	failed := s.waitFor(s.submit("ragged", typeStats, nil, []byte("a,b,c\n1,2,3\n4,5\n")), "failed for good", failedForGood)
	if want := "line 3 has 2 fields, the header has 3"; !strings.Contains(failed.LastError, want) || failed.Attempt != 1 {
		t.Errorf("failed task: %+v, want last_error to contain %q", failed, want)
	}
}

func TestBadIDs(t *testing.T) {
	t.Parallel()
	s := startService(t, svcOptions{mode: modeAPI})
	for _, tc := range []struct{ method, path string }{
		{"GET", "/tasks/..%2Fx"},
		{"GET", "/tasks/../x"},
		{"GET", "/tasks/%2e%2e"},
		{"GET", "/tasks/%2E%2E/output"},
		{"POST", "/tasks/%2e%2e/submit"},
		{"POST", "/tasks/..%2F..%2Fstatus.json/cancel"},
		{"GET", "/tasks/active"},
		{"GET", "/tasks/not-an-id"},
		{"GET", "/tasks/7zzzzzzzzzzzzzzzzzzzzzzzzz"}, // lower case is not the stored key
		{"POST", "/tasks/7ZZZZZZZZZZZZZZZZZZZZZZZZ/retry"},
	} {
		s.callError(tc.method, tc.path, nil, http.StatusBadRequest, "invalid_id")
	}
	// Well-formed but unknown.
	s.callError("GET", "/tasks/7ZZZZZZZZZZZZZZZZZZZZZZZZZ", nil, http.StatusNotFound, "not_found")
	s.callError("POST", "/tasks/7ZZZZZZZZZZZZZZZZZZZZZZZZZ/submit", nil, http.StatusNotFound, "not_found")
	// Outside /tasks an unclean path is refused too, not redirected.
	s.callError("GET", "/static/../tasks", nil, http.StatusBadRequest, "invalid_path")
}

func TestUnauthenticated(t *testing.T) {
	t.Parallel()
	s := startService(t, svcOptions{mode: modeAPI})
	for _, token := range []string{"", "wrong-token-0123456789", testToken + "x"} {
		status, body := s.as(token, nil).request("GET", "/tasks", nil)
		if status != http.StatusUnauthorized || !strings.Contains(string(body), `"unauthenticated"`) {
			t.Errorf("token %q: %d %s", token, status, body)
		}
	}
	req, _ := http.NewRequest("POST", s.base+"/tasks", strings.NewReader(`{"type":"csv_stats"}`))
	req.Header.Set("Authorization", "Basic "+testToken)
	resp, _ := s.do(req)
	if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
		t.Errorf("Basic auth: %d, WWW-Authenticate %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	// The page itself holds no data and needs no token.
	if status, body := s.as("", nil).request("GET", "/", nil); status != http.StatusOK || !bytes.Contains(body, []byte("<title>csvbatch</title>")) {
		t.Errorf("page: %d", status)
	}
	s.call("GET", "/tasks", nil, http.StatusOK, nil)
}

func TestOversizedInput(t *testing.T) {
	t.Parallel()
	s := startService(t, svcOptions{mode: modeAPI, maxInput: 1024})
	c := s.create("too big", typeStats, nil)
	if c.Upload.Post.MaxSize != 1024 {
		t.Errorf("post max_size = %d, want 1024", c.Upload.Post.MaxSize)
	}
	s.uploadPut(c.Upload.Put, bytes.Repeat([]byte("a,b\n"), 600))
	e := s.callError("POST", "/tasks/"+c.Task.ID+"/submit", nil, http.StatusRequestEntityTooLarge, "input_too_large")
	if !strings.Contains(e.Error.Message, "2400 bytes") {
		t.Errorf("message %q does not give the size", e.Error.Message)
	}
	if g := s.get(c.Task.ID); g.Status != "created" {
		t.Errorf("task after a refused submit: %+v", g)
	}
}

func TestSubmitWithoutInput(t *testing.T) {
	t.Parallel()
	s := startService(t, svcOptions{mode: modeAPI})
	c := s.create("no upload", typeEnrich, nil)
	s.callError("POST", "/tasks/"+c.Task.ID+"/submit", nil, http.StatusUnprocessableEntity, "input_missing")
	if g := s.get(c.Task.ID); g.Status != "created" {
		t.Errorf("task: %+v", g)
	}
}

func TestListPaging(t *testing.T) {
	t.Parallel()
	s := startService(t, svcOptions{mode: modeAPI})
	var ids []string
	for _, name := range []string{"one", "two", "three", "four", "five"} {
		ids = append(ids, s.create(name, typeStats, nil).Task.ID)
	}
	var got []string
	path := "/tasks?limit=2"
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("paging does not end")
		}
		var p listResponse
		s.call("GET", path, nil, http.StatusOK, &p)
		if len(p.Tasks) > 2 {
			t.Fatalf("page of %d tasks with limit 2", len(p.Tasks))
		}
		for _, task := range p.Tasks {
			got = append(got, task.ID)
			if !task.Cancelable || task.Retryable {
				t.Errorf("flags of a created task: %+v", task)
			}
		}
		if p.NextCursor == "" {
			break
		}
		path = "/tasks?limit=2&cursor=" + p.NextCursor
	}
	want := []string{ids[4], ids[3], ids[2], ids[1], ids[0]} // newest first
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("listed IDs (-want +got):\n%s", diff)
	}
	s.callError("GET", "/tasks?cursor=!!!", nil, http.StatusBadRequest, "invalid_cursor")
	for _, query := range []string{"cursor=%zz", "limit=%zz", "limit=2&cursor=%", "a;b"} {
		s.callError("GET", "/tasks?"+query, nil, http.StatusBadRequest, "invalid_query")
	}
	for _, limit := range []string{"0", "-1", "abc", "1001"} {
		s.callError("GET", "/tasks?limit="+limit, nil, http.StatusBadRequest, "invalid_argument")
	}
}

func TestCreateValidation(t *testing.T) {
	t.Parallel()
	s := startService(t, svcOptions{mode: modeAPI})
	for _, body := range []string{
		``,
		`not json`,
		`{"name":"x","type":"csv_stats"} {}`,
		`{"name":"x","type":"csv_stats","colour":"red"}`,
		`{"name":"x"}`,
		`{"name":"x","type":"pdf_render"}`,
		`{"name":"x","type":"csv_enrich","payload":{"required":"email"}}`,
		`{"name":"x","type":"csv_enrich","payload":{"requird":["email"]}}`,
		`{"name":"x","type":"csv_stats","payload":{"columns":1}}`,
		`[]`,
	} {
		s.callError("POST", "/tasks", body, http.StatusBadRequest, "invalid_body")
	}
	s.callError("POST", "/tasks", `{"name":"`+strings.Repeat("n", 300)+`","type":"csv_stats"}`, http.StatusBadRequest, "invalid_argument")
	s.callError("POST", "/tasks", `{"name":"x","type":"csv_enrich","payload":{"required":["email",""]}}`, http.StatusBadRequest, "invalid_argument")
	s.callError("POST", "/tasks", `{"name":"`+strings.Repeat("n", maxBodySize)+`"}`, http.StatusRequestEntityTooLarge, "body_too_large")
}

// TestIdempotencyKey: a create that repeats its caller's Idempotency-Key
// gets the task of the first, and a bad key is refused.
func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	const bobToken = "bob-secret-0123456789"
	s := startService(t, svcOptions{mode: modeAPI, tokens: "alice:" + testToken + ",bob:" + bobToken})
	body := map[string]any{"name": "June import", "type": typeEnrich, "payload": map[string]any{"required": []string{"email"}}}
	create := func(token, key string) string {
		t.Helper()
		var c createResponse
		s.as(token, http.Header{"Idempotency-Key": {key}}).call("POST", "/tasks", body, http.StatusCreated, &c)
		return c.Task.ID
	}
	first := create(testToken, "june-import 7f3a")
	if again := create(testToken, "june-import 7f3a"); again != first {
		t.Errorf("two creates with one key made tasks %s and %s, want one", first, again)
	}
	// Once the task no longer waits for its input, a repeat still answers
	// with it, without upload URLs.
	var cancelled taskview.Task
	s.call("POST", "/tasks/"+first+"/cancel", nil, http.StatusOK, &cancelled)
	var repeat createResponse
	s.as(testToken, http.Header{"Idempotency-Key": {"june-import 7f3a"}}).call("POST", "/tasks", body, http.StatusCreated, &repeat)
	if repeat.Task.ID != first || repeat.Task.Status != s3task.StatusAbandoned || repeat.Upload != nil {
		t.Errorf("repeat after cancel: task %s %s, upload %+v; want %s abandoned, no upload", repeat.Task.ID, repeat.Task.Status, repeat.Upload, first)
	}
	others := []string{create(testToken, "june-import 7f3b"), create(bobToken, "june-import 7f3a")}
	if slices.Contains(others, first) || others[0] == others[1] {
		t.Errorf("tasks %s, %v: another key, or another caller's same key, named an existing task", first, others)
	}
	if got := s.get(first); got.IdempotencyKey != "alice:june-import 7f3a" || got.Name != "June import" {
		t.Errorf("task %s: idempotency_key %q, name %q", first, got.IdempotencyKey, got.Name)
	}
	var page listResponse
	s.call("GET", "/tasks", nil, http.StatusOK, &page)
	if len(page.Tasks) != 3 {
		t.Errorf("%d tasks, want 3", len(page.Tasks))
	}

	for _, keys := range [][]string{{""}, {strings.Repeat("k", maxIdempotencyKey+1)}, {"tab\tinside"}, {"caf\xe9"}, {"one", "two"}} {
		var e errorResponse
		s.as(testToken, http.Header{"Idempotency-Key": keys}).call("POST", "/tasks", body, http.StatusBadRequest, &e)
		if e.Error.Code != "invalid_idempotency_key" || !strings.Contains(e.Error.Message, "Idempotency-Key") {
			t.Errorf("Idempotency-Key %q: error %+v, want invalid_idempotency_key", keys, e.Error)
		}
	}
	s.call("GET", "/tasks", nil, http.StatusOK, &page)
	if len(page.Tasks) != 3 {
		t.Errorf("%d tasks after the refused creates, want 3", len(page.Tasks))
	}
}

func TestCrossSiteRequestsRefused(t *testing.T) {
	t.Parallel()
	s := startService(t, svcOptions{mode: modeAPI})
	req, _ := http.NewRequest("POST", s.base+"/tasks", strings.NewReader(`{"type":"csv_stats"}`))
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, _ := s.do(req)
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-site POST: %d, want 403", resp.StatusCode)
	}
}

// TestOpenMode: without a token every caller is "local", and only requests
// addressed to a loopback host are answered.
func TestOpenMode(t *testing.T) {
	t.Parallel()
	s := startService(t, svcOptions{mode: modeAPI, tokens: "-"})
	c := s.create("open", typeStats, nil)
	if c.Task.CreatedBy != openCaller {
		t.Errorf("created_by = %q, want %q", c.Task.CreatedBy, openCaller)
	}
	req, _ := http.NewRequest("GET", s.base+"/tasks", nil)
	req.Host = "attacker.example:8080"
	resp, _ := s.do(req)
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("request for host %s: %d, want 403", req.Host, resp.StatusCode)
	}
}

// TestRestartKeepsTasks: with a data folder the embedded S3 keeps its
// objects across a restart.
func TestRestartKeepsTasks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := testConfig(t, svcOptions{mode: modeAPI, dataDir: dir})
	ctx := t.Context()
	a, err := start(ctx, cfg, s3tasktest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.close() })
	created, err := a.store.Create(ctx, s3task.CreateParams{Name: "survivor", Type: typeStats})
	if err != nil {
		t.Fatal(err)
	}
	// A second process cannot open the same data folder.
	if _, err := start(ctx, testConfig(t, svcOptions{mode: modeAPI, dataDir: dir}), s3tasktest.Logger(t)); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("second start on one data folder: %v", err)
	}
	if err := a.close(); err != nil {
		t.Fatal(err)
	}

	s := startConfig(t, testConfig(t, svcOptions{mode: modeAPI, dataDir: dir}))
	if got := s.get(created.ID); got.Name != "survivor" || got.Status != "created" {
		t.Errorf("task after restart: %+v", got)
	}
}

// TestRefusesStoreWithoutConditionalWrites: a store that ignores If-Match
// and If-None-Match is refused at start with a clear message.
func TestRefusesStoreWithoutConditionalWrites(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, svcOptions{})
	cfg.s3Wrap = s3test.StripConditionalHeaders
	a, err := start(t.Context(), cfg, s3tasktest.Logger(t))
	if err == nil {
		a.close()
		t.Fatal("start succeeded on a store that ignores conditional writes")
	}
	if !errors.Is(err, s3task.ErrConditionalWritesUnsupported) || !strings.Contains(err.Error(), "does not enforce conditional writes") {
		t.Errorf("error: %v", err)
	}
}

// TestCorruptRecord: a damaged status.json is listed under "broken" with
// its key, never hides the other tasks, and reading it answers 500.
func TestCorruptRecord(t *testing.T) {
	t.Parallel()
	s := startService(t, svcOptions{mode: modeAPI})
	good := s.create("fine", typeStats, nil)
	bad := s.create("damaged", typeStats, nil)
	key := s3task.DefaultPrefix + bad.Task.ID + "/status.json"
	if _, err := s.objects().Put(t.Context(), key, []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	var page listResponse
	s.call("GET", "/tasks", nil, http.StatusOK, &page)
	if len(page.Tasks) != 1 || page.Tasks[0].ID != good.Task.ID {
		t.Errorf("tasks: %+v", page.Tasks)
	}
	if len(page.Broken) != 1 || page.Broken[0].Key != key || !strings.Contains(page.Broken[0].Error, "corrupt") {
		t.Errorf("broken: %+v", page.Broken)
	}
	s.callError("GET", "/tasks/"+bad.Task.ID, nil, http.StatusInternalServerError, "corrupt_record")
}

// FuzzAPI sends arbitrary paths, query strings and bodies to the control
// API (/tasks, /stats and /workers). Whatever comes in, the service must
// answer with a JSON error or a JSON result and a 2xx or 4xx status, never
// panic or fail inside, and never write an object outside its task prefix.
func FuzzAPI(f *testing.F) {
	for _, seed := range []struct {
		post       bool
		path, body string
	}{
		{true, "/tasks", `{"name":"June","type":"csv_enrich","payload":{"required":["email"]}}`},
		{true, "/tasks", `{"name":"x","type":"csv_enrich","extra":1}`},
		{true, "/tasks", `{"name":` + strings.Repeat("[", 100)},
		{true, "/tasks", `{} {}`},
		{false, "/tasks?limit=-1", ""},
		{false, "/tasks?limit=2&cursor=%2F%2E%2E", ""},
		{false, "/tasks/../x", ""},
		{false, "/tasks/%2e%2e%2factive", ""},
		{true, "/tasks/7ZZZZZZZZZZZZZZZZZZZZZZZZZ/submit", ""},
		{true, "/tasks/7zzzzzzzzzzzzzzzzzzzzzzzzz/cancel", `{"reason":"r"}`},
		{true, "/tasks/active/retry", ""},
		{false, "/tasks/7ZZZZZZZZZZZZZZZZZZZZZZZZZ/output", ""},
		{false, "/tasks?status=dead&type=csv_enrich&max_scan=3", ""},
		{false, "/tasks?status=%zz", ""},
		{true, "/tasks/7ZZZZZZZZZZZZZZZZZZZZZZZZZ/schedule", `{"run_at":"2030-01-01T00:00:00Z"}`},
		{false, "/stats?span=7d&max_tasks=5", ""},
		{false, "/stats?span=-1", ""},
		{false, "/workers", ""},
		{true, "/tasks/bulk", `{"action":"retry","filter":{"status":"dead","type":"csv_enrich"},"dry_run":true}`},
		{true, "/tasks/bulk", `{"action":"purge","ids":["7ZZZZZZZZZZZZZZZZZZZZZZZZZ","x"],"limit":1}`},
		{true, "/tasks/bulk", `{"action":"cancel","filter":{"status":"scheduled"},"reason":"r","cursor":"%"}`},
	} {
		f.Add(seed.post, seed.path, seed.body)
	}
	svc := startService(f, svcOptions{mode: "api"})
	f.Fuzz(func(t *testing.T, post bool, path, body string) {
		u, err := url.Parse(path)
		if err != nil || (u.Path != "/tasks" && !strings.HasPrefix(u.Path, "/tasks/") && u.Path != "/stats" && u.Path != "/workers") {
			return
		}
		method := http.MethodGet
		if post {
			method = http.MethodPost
		}
		req := httptest.NewRequest(method, "http://127.0.0.1/", strings.NewReader(body))
		req.URL, req.RequestURI = u, u.RequestURI()
		req.Header.Set("Authorization", "Bearer "+testToken)
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		svc.app.srv.Handler.ServeHTTP(rec, req)

		res := rec.Result()
		data, _ := io.ReadAll(res.Body)
		if res.StatusCode >= 500 {
			t.Fatalf("%s %q: status %d: %s", method, path, res.StatusCode, data)
		}
		if res.StatusCode >= 300 && res.StatusCode < 400 {
			return // the mux's clean-path redirects carry no JSON
		}
		if !json.Valid(data) {
			t.Fatalf("%s %q: status %d, body is not JSON: %q", method, path, res.StatusCode, data)
		}
		if res.StatusCode >= 400 {
			var e errorResponse
			if err := json.Unmarshal(data, &e); err != nil || e.Error.Code == "" {
				t.Fatalf("%s %q: status %d without an error code: %s", method, path, res.StatusCode, data)
			}
		}
		keys, err := svc.objects().Keys(t.Context(), "")
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range keys {
			if !strings.HasPrefix(key, svc.app.cfg.prefix) {
				t.Fatalf("%s %q wrote %q, outside the prefix %q", method, path, key, svc.app.cfg.prefix)
			}
		}
	})
}

// TestMethodNotAllowed: a path the API has, asked with a method it does
// not take, answers 405 with an Allow header and the JSON error; a path it
// does not have answers 404 no_route.
func TestMethodNotAllowed(t *testing.T) {
	t.Parallel()
	s := startService(t, svcOptions{mode: modeAPI})
	id := s.create("x", typeStats, nil).Task.ID
	for _, tc := range []struct{ method, path, allow string }{
		{"DELETE", "/tasks/" + id, "GET, HEAD"},
		{"PUT", "/tasks/" + id, "GET, HEAD"},
		{"POST", "/tasks/" + id, "GET, HEAD"},
		{"GET", "/tasks/" + id + "/submit", "POST"},
		{"GET", "/tasks/" + id + "/cancel", "POST"},
		{"DELETE", "/tasks", "GET, HEAD, POST"},
		{"PATCH", "/tasks", "GET, HEAD, POST"},
		{"POST", "/tasks/" + id + "/output", "GET, HEAD"},
		{"DELETE", "/tasks/not-an-id", "GET, HEAD"}, // the method is wrong whatever the ID
		{"GET", "/tasks/bulk", "POST"},              // not read as a task ID
		{"DELETE", "/tasks/bulk", "POST"},
	} {
		resp, data := s.send(tc.method, tc.path, "")
		var e errorResponse
		if err := json.Unmarshal(data, &e); err != nil || resp.StatusCode != http.StatusMethodNotAllowed || e.Error.Code != "method_not_allowed" {
			t.Errorf("%s %s: %d %s, want 405 method_not_allowed", tc.method, tc.path, resp.StatusCode, data)
			continue
		}
		// The routes another change adds to a path join its Allow header
		// by themselves: ask only for the ones this test knows.
		allow := resp.Header.Get("Allow")
		for m := range strings.SplitSeq(tc.allow, ", ") {
			if !slices.Contains(strings.Split(allow, ", "), m) {
				t.Errorf("%s %s: Allow %q, want it to hold %s", tc.method, tc.path, allow, m)
			}
		}
		if slices.Contains(strings.Split(allow, ", "), tc.method) {
			t.Errorf("%s %s: Allow %q holds the method refused", tc.method, tc.path, allow)
		}
	}
	for _, tc := range []struct{ method, path string }{
		{"GET", "/tasks/" + id + "/nothing"},
		{"POST", "/tasks/" + id + "/submit/more"},
		{"GET", "/tasks/"},
	} {
		s.callError(tc.method, tc.path, nil, http.StatusNotFound, "no_route")
	}
	// A HEAD of a task answers like its GET, without the body.
	if resp, _ := s.send("HEAD", "/tasks/"+id, ""); resp.StatusCode != http.StatusOK {
		t.Errorf("HEAD /tasks/%s: %d", id, resp.StatusCode)
	}
	// Without a token the answer is still 401: a 405 tells nothing before
	// the caller is known.
	if status, _ := s.as("", nil).request("DELETE", "/tasks/"+id, nil); status != http.StatusUnauthorized {
		t.Errorf("DELETE without a token: %d, want 401", status)
	}
}

// TestCreateNeedsName: a create without a name, or with only spaces, is
// refused and creates nothing.
func TestCreateNeedsName(t *testing.T) {
	t.Parallel()
	s := startService(t, svcOptions{mode: modeAPI})
	for _, body := range []string{
		`{"type":"csv_stats"}`,
		`{"name":"","type":"csv_stats"}`,
		`{"name":"   ","type":"csv_stats"}`,
		`{"name":"\t\n","type":"csv_enrich","payload":{"required":["email"]}}`,
		`{"name":null,"type":"csv_stats"}`,
	} {
		e := s.callError("POST", "/tasks", body, http.StatusBadRequest, "invalid_argument")
		if !strings.Contains(e.Error.Message, "name") {
			t.Errorf("%s: message %q does not name the field", body, e.Error.Message)
		}
	}
	var page listResponse
	s.call("GET", "/tasks", nil, http.StatusOK, &page)
	if len(page.Tasks) != 0 {
		t.Errorf("%d tasks created by refused creates", len(page.Tasks))
	}
	if c := s.create(" x ", typeStats, nil); c.Task.Name != " x " {
		t.Errorf("name %q, want it kept as sent", c.Task.Name)
	}
	s.create(strings.Repeat("é", maxNameBytes/2), typeStats, nil)
	s.callError("POST", "/tasks", `{"name":"`+strings.Repeat("n", maxNameBytes+1)+`","type":"csv_stats"}`, http.StatusBadRequest, "invalid_argument")
}

// TestLongIDNotEchoed: an invalid ID, a path or a type of any length is
// repeated in the error at most maxEcho characters long, so the answer
// stays small.
func TestLongIDNotEchoed(t *testing.T) {
	t.Parallel()
	s := startService(t, svcOptions{mode: modeAPI})
	long := strings.Repeat("A", 7000)
	for _, tc := range []struct {
		method, path, body string
		status             int
		code               string
	}{
		{"GET", "/tasks/" + long, "", http.StatusBadRequest, "invalid_id"},
		{"GET", "/tasks/" + long + "/output", "", http.StatusBadRequest, "invalid_id"},
		{"POST", "/tasks/" + long + "/submit", "", http.StatusBadRequest, "invalid_id"},
		{"POST", "/tasks/" + long + "/cancel", "", http.StatusBadRequest, "invalid_id"},
		{"POST", "/tasks/" + long + "/retry", "", http.StatusBadRequest, "invalid_id"},
		{"GET", "/tasks/" + long + "/nothing", "", http.StatusNotFound, "no_route"},
		{"GET", "/tasks/x/../" + long, "", http.StatusBadRequest, "invalid_id"},
		{"POST", "/tasks", `{"name":"x","type":"` + long + `"}`, http.StatusBadRequest, "invalid_body"},
		{"GET", "/tasks?limit=" + long, "", http.StatusBadRequest, "invalid_argument"},
		{"GET", "/tasks?cursor=" + long, "", http.StatusBadRequest, "invalid_cursor"},
	} {
		resp, data := s.send(tc.method, tc.path, tc.body)
		var e errorResponse
		if err := json.Unmarshal(data, &e); err != nil || resp.StatusCode != tc.status || e.Error.Code != tc.code {
			t.Errorf("%s %.60s: %d %.300s, want %d %s", tc.method, tc.path, resp.StatusCode, data, tc.status, tc.code)
			continue
		}
		if len(data) > 400 || strings.Contains(e.Error.Message, strings.Repeat("A", maxEcho+1)) {
			t.Errorf("%s %.60s: %d bytes, message %q: the input is echoed", tc.method, tc.path, len(data), e.Error.Message)
		}
		if !strings.Contains(e.Error.Message, strings.Repeat("A", 10)+"…") && tc.code != "invalid_cursor" {
			t.Errorf("%s %.60s: message %q does not show the start of the input", tc.method, tc.path, e.Error.Message)
		}
	}
	// A short invalid ID is still repeated whole, with the reason.
	e := s.callError("GET", "/tasks/not-an-id", nil, http.StatusBadRequest, "invalid_id")
	if !strings.Contains(e.Error.Message, `"not-an-id"`) || !strings.Contains(e.Error.Message, "length 9") {
		t.Errorf("message %q", e.Error.Message)
	}
}

func TestClip(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"", 3, ""},
		{"abc", 3, "abc"},
		{"abcd", 3, "abc…"},
		{"ééééé", 2, "éé…"},
		{"a\xffbc", 2, "a\xff…"},
	} {
		if got := clip(tc.in, tc.n); got != tc.want {
			t.Errorf("clip(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}
