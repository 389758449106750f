package main

import (
	"bytes"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/google/go-cmp/cmp"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/s3test"
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

	var submitted taskJSON
	s.call("POST", "/tasks/"+c.Task.ID+"/submit", nil, http.StatusOK, &submitted)
	if submitted.Status != "queued" || submitted.InputSize != int64(len(peopleCSV)) {
		t.Fatalf("submitted task: %+v", submitted)
	}
	done := s.waitFor(c.Task.ID, "completed", func(t taskJSON) bool { return t.Status == "completed" })
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
	done := s.waitFor(c.Task.ID, "completed", func(t taskJSON) bool { return t.Status == "completed" })
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
	c := s.create("big", typeEnrich, map[string]any{"required": []string{"name", "email"}})
	s.uploadPut(c.Upload.Put, in.Bytes())
	s.call("POST", "/tasks/"+c.Task.ID+"/submit", nil, http.StatusOK, nil)
	mid := s.waitFor(c.Task.ID, "running with progress", func(t taskJSON) bool {
		return t.Status == "completed" || t.Status == "running" && t.ProcessedCount > 0
	})
	if mid.Status != "running" || mid.ProcessedCount >= rows || mid.RowCount < rows*8/10 || mid.RowCount > rows*12/10 {
		t.Errorf("no progress seen while running: %+v; want some of %d rows done and an estimate near it", mid, rows)
	}
	done := s.waitFor(c.Task.ID, "completed", func(t taskJSON) bool { return t.Status == "completed" })
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
	var got taskJSON
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

// TestRetryNonCSV: binary input fails permanently with a readable error,
// and an operator's retry runs it again.
func TestRetryNonCSV(t *testing.T) {
	t.Parallel()
	s := startService(t, svcOptions{})
	c := s.create("a picture", typeEnrich, nil)
	s.uploadPut(c.Upload.Put, []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00"))
	s.call("POST", "/tasks/"+c.Task.ID+"/submit", nil, http.StatusOK, nil)

	failed := s.waitFor(c.Task.ID, "failed for good", func(t taskJSON) bool { return t.Status == "failed" && t.Terminal })
	if failed.Attempt != 1 || failed.RetryAt != "" || !failed.Retryable || !failed.Cancelable {
		t.Errorf("failed task: %+v", failed)
	}
	if !strings.Contains(failed.LastError, "binary file, not CSV") {
		t.Errorf("last_error = %q, want it to say the input is binary", failed.LastError)
	}

	var retried taskJSON
	s.call("POST", "/tasks/"+c.Task.ID+"/retry", nil, http.StatusOK, &retried)
	if retried.Status != "queued" && retried.Status != "running" {
		t.Fatalf("retried task: %+v", retried)
	}
	again := s.waitFor(c.Task.ID, "failed again", func(t taskJSON) bool { return t.Status == "failed" && t.Attempt == 2 })
	if !strings.Contains(again.LastError, "binary") || !again.Terminal {
		t.Errorf("task after retry: %+v", again)
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
	c := s.create("ragged", typeStats, nil)
	s.uploadPut(c.Upload.Put, []byte("a,b,c\n1,2,3\n4,5\n"))
	s.call("POST", "/tasks/"+c.Task.ID+"/submit", nil, http.StatusOK, nil)
	failed := s.waitFor(c.Task.ID, "failed for good", func(t taskJSON) bool { return t.Status == "failed" && t.Terminal })
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
		status, body := s.requestAs(token, "GET", "/tasks", nil)
		if status != http.StatusUnauthorized || !strings.Contains(string(body), `"unauthenticated"`) {
			t.Errorf("token %q: %d %s", token, status, body)
		}
	}
	req, _ := http.NewRequest("POST", s.base+"/tasks", strings.NewReader(`{"type":"csv_stats"}`))
	req.Header.Set("Authorization", "Basic "+testToken)
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
		t.Errorf("Basic auth: %d, WWW-Authenticate %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	// The page itself holds no data and needs no token.
	if status, body := s.requestAs("", "GET", "/", nil); status != http.StatusOK || !bytes.Contains(body, []byte("<title>csvbatch</title>")) {
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
	type page struct {
		Tasks      []taskJSON `json:"tasks"`
		NextCursor string     `json:"next_cursor"`
	}
	var got []string
	path := "/tasks?limit=2"
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("paging does not end")
		}
		var p page
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
	s.callError("POST", "/tasks", `{"name":"`+strings.Repeat("n", maxBodySize)+`"}`, http.StatusRequestEntityTooLarge, "body_too_large")
}

func TestCrossSiteRequestsRefused(t *testing.T) {
	t.Parallel()
	s := startService(t, svcOptions{mode: modeAPI})
	req, _ := http.NewRequest("POST", s.base+"/tasks", strings.NewReader(`{"type":"csv_stats"}`))
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
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
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
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
	a, err := start(ctx, cfg, discardLog())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.close() })
	created, err := a.store.Create(ctx, s3task.CreateParams{Name: "survivor", Type: typeStats})
	if err != nil {
		t.Fatal(err)
	}
	// A second process cannot open the same data folder.
	if _, err := start(ctx, testConfig(t, svcOptions{mode: modeAPI, dataDir: dir}), discardLog()); err == nil || !strings.Contains(err.Error(), "in use") {
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
	a, err := start(t.Context(), cfg, discardLog())
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
	_, err := s.app.objs.client.PutObject(t.Context(), &s3.PutObjectInput{
		Bucket: aws.String(s.app.objs.bucket), Key: aws.String(key), Body: strings.NewReader("{not json"),
	})
	if err != nil {
		t.Fatal(err)
	}
	var page struct {
		Tasks  []taskJSON `json:"tasks"`
		Broken []struct {
			Key   string `json:"key"`
			Error string `json:"error"`
		} `json:"broken"`
	}
	s.call("GET", "/tasks", nil, http.StatusOK, &page)
	if len(page.Tasks) != 1 || page.Tasks[0].ID != good.Task.ID {
		t.Errorf("tasks: %+v", page.Tasks)
	}
	if len(page.Broken) != 1 || page.Broken[0].Key != key || !strings.Contains(page.Broken[0].Error, "corrupt") {
		t.Errorf("broken: %+v", page.Broken)
	}
	s.callError("GET", "/tasks/"+bad.Task.ID, nil, http.StatusInternalServerError, "corrupt_record")
}
