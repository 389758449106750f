package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.uber.org/goleak"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/examples/internal/taskview"
	"github.com/s3task/s3task/internal/s3test"
	"github.com/s3task/s3task/s3tasktest"
)

// TestMain fails the package's tests if a goroutine outlives them: every
// S3 server, worker and proxy a test starts must end with it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// cmdWait bounds one run of the command; reaching it is a failure.
const cmdWait = time.Minute

// buildCommand builds s3taskctl into a temporary folder.
func buildCommand(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "s3taskctl")
	out, err := exec.CommandContext(t.Context(), "go", "build", "-o", bin, ".").CombinedOutput()
	switch {
	case errors.Is(err, exec.ErrNotFound):
		t.Skipf("no go tool to build the command with: %v", err)
	case err != nil:
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// fixture is an in-process S3 with a Store to prepare tasks, and the
// environment that points the command at it.
type fixture struct {
	t     *testing.T
	ctx   context.Context
	bin   string
	srv   *s3test.Server
	store *s3task.Store
	objs  s3test.Objects // the bucket, behind the store's back
	env   []string
}

func newFixture(t *testing.T, bin string) *fixture {
	t.Helper()
	srv := s3test.New(t)
	f := &fixture{t: t, ctx: t.Context(), bin: bin, srv: srv, objs: s3test.Objects{Client: srv.Client(), Bucket: srv.Bucket}}
	f.store = f.newStore(nil)
	f.env = append(baseEnv(t),
		"S3TASKCTL_BUCKET="+srv.Bucket,
		"S3TASKCTL_S3_ENDPOINT="+srv.URL,
		"S3TASKCTL_S3_PATH_STYLE=true",
	)
	return f
}

// baseEnv is a clean environment with the test server's credentials, and
// no AWS configuration files that could change what the command does.
func baseEnv(t *testing.T) []string {
	dir := t.TempDir()
	return []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + dir,
		"AWS_ACCESS_KEY_ID=test",
		"AWS_SECRET_ACCESS_KEY=testsecret",
		"AWS_REGION=us-east-1",
		"AWS_CONFIG_FILE=" + filepath.Join(dir, "no-config"),
		"AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(dir, "no-credentials"),
		"AWS_EC2_METADATA_DISABLED=true",
	}
}

func (f *fixture) newStore(clock func() time.Time) *s3task.Store {
	f.t.Helper()
	st, err := s3task.NewStore(f.srv.Client(), f.srv.Bucket, &s3task.StoreOptions{
		InputExt: ".csv", OutputExt: ".csv", Clock: clock, Logger: s3tasktest.Logger(f.t),
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return st
}

// result is what one run of the command did.
type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// run runs the command with the fixture's environment plus extra.
func (f *fixture) run(args ...string) result { return f.runWith(f.env, args...) }

func (f *fixture) runWith(env []string, args ...string) result {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(f.ctx, cmdWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, f.bin, args...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ctx.Err() == nil:
	default:
		f.t.Fatalf("s3taskctl %s: %v\nstderr: %s", strings.Join(args, " "), err, stderr.String())
	}
	return result{stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()}
}

// want runs the command, checks the exit code, and decodes stdout as one
// JSON document into out (if not nil).
func (f *fixture) want(code int, out any, args ...string) result {
	f.t.Helper()
	r := f.run(args...)
	if r.code != code {
		f.t.Fatalf("s3taskctl %s: exit %d, want %d\n%s", strings.Join(args, " "), r.code, code, r)
	}
	if out != nil {
		dec := json.NewDecoder(strings.NewReader(r.stdout))
		dec.DisallowUnknownFields()
		if err := dec.Decode(out); err != nil {
			f.t.Fatalf("s3taskctl %s: stdout is not the expected JSON document: %v\n%s", strings.Join(args, " "), err, r)
		}
		if dec.More() {
			f.t.Fatalf("s3taskctl %s: more than one JSON document\n%s", strings.Join(args, " "), r)
		}
	}
	return r
}

// errorDoc is the -json answer of a failed command.
type errorDoc struct {
	Error struct {
		Code     string `json:"code"`
		Message  string `json:"message"`
		ExitCode int    `json:"exit_code"`
	} `json:"error"`
}

// wantError runs a command with -json (first, so that it counts even when
// a later argument is bad) that must fail with code and errCode.
func (f *fixture) wantError(code int, errCode string, args ...string) {
	f.t.Helper()
	var doc errorDoc
	r := f.want(code, &doc, append([]string{"-json"}, args...)...)
	if doc.Error.Code != errCode || doc.Error.ExitCode != code || doc.Error.Message == "" {
		f.t.Errorf("s3taskctl %s: error %+v, want code %q, exit_code %d and a message", strings.Join(args, " "), doc.Error, errCode, code)
	}
	if !strings.Contains(r.stderr, "s3taskctl: ") {
		f.t.Errorf("s3taskctl %s: nothing on stderr: %s", strings.Join(args, " "), r)
	}
}

// task creates a task and brings it to state: created, queued, running,
// completed (with an output), failed (final, category bad_input),
// failed-waiting (retry in an hour), abandoned. Records carry the DueAt a
// worker would set, and markers are as it would leave them: running and
// failed-waiting have theirs, due at the lease's end and at the retry;
// finished tasks keep none.
func (f *fixture) task(st *s3task.Store, state, name string) *s3task.Task {
	f.t.Helper()
	t, err := st.Create(f.ctx, s3task.CreateParams{Name: name, Type: "csv_enrich", Metadata: map[string]string{"tenant": "acme"}})
	if err != nil {
		f.t.Fatal(err)
	}
	id := t.ID
	if err := f.store.UploadInput(f.ctx, id, strings.NewReader("name,email\nAda,ada@example.com\n")); err != nil {
		f.t.Fatal(err)
	}
	switch state {
	case "created":
		return f.get(id)
	case "abandoned":
		if _, err := f.store.Cancel(f.ctx, id, "not needed"); err != nil {
			f.t.Fatal(err)
		}
		return f.get(id)
	}
	if _, err := f.store.Submit(f.ctx, id); err != nil {
		f.t.Fatal(err)
	}
	later := time.Now().UTC().Add(time.Hour).Truncate(time.Millisecond)
	switch state {
	case "queued":
		return f.get(id)
	case "running":
		f.rewrite(id, func(x *s3task.Task) {
			x.Status, x.Attempt, x.WorkerID, x.LeaseExpiresAt = s3task.StatusRunning, 1, "worker-1", later
			x.DueAt = later.Add(s3task.DefaultClockMargin)
			x.Progress = s3task.Progress{RowCount: 10, ProcessedCount: 4, SuccessCount: 4}
		})
		f.moveMarker(id)
	case "completed":
		key, _ := f.store.OutputKey(id, 1)
		f.put(key, []byte("name,email,row_status\nAda,ada@example.com,ok\n"))
		f.rewrite(id, func(x *s3task.Task) {
			x.Status, x.Attempt, x.OutputPath = s3task.StatusCompleted, 1, key
			x.Progress = s3task.Progress{RowCount: 1, ProcessedCount: 1, SuccessCount: 1}
		})
		f.delMarker(id)
	case "failed":
		f.rewrite(id, func(x *s3task.Task) {
			x.Status, x.Attempt, x.LastError, x.ErrorCategory = s3task.StatusFailed, 1, "line 3 has 2 fields", "bad_input"
		})
		f.delMarker(id)
	case "failed-waiting":
		f.rewrite(id, func(x *s3task.Task) {
			x.Status, x.Attempt, x.LastError, x.ErrorCategory, x.RetryAt = s3task.StatusFailed, 1, "timeout", s3task.CategoryTransient, later
			x.DueAt = later
		})
		f.moveMarker(id)
	default:
		f.t.Fatalf("unknown state %q", state)
	}
	return f.get(id)
}

func (f *fixture) get(id string) *s3task.Task {
	f.t.Helper()
	t, err := f.store.Get(f.ctx, id)
	if err != nil {
		f.t.Fatal(err)
	}
	return t
}

// rewrite edits a record and writes it back raw, as a worker's write would
// look: a new revision, stamped with the server's time.
func (f *fixture) rewrite(id string, edit func(*s3task.Task)) {
	f.t.Helper()
	t := f.get(id)
	edit(t)
	t.Revision = strings.ToLower(rand.Text())
	t.UpdatedAt = f.srv.Now().UTC().Truncate(time.Millisecond)
	body, err := json.Marshal(t)
	if err != nil {
		f.t.Fatal(err)
	}
	f.put(f.store.Prefix()+id+"/status.json", body)
}

func (f *fixture) put(key string, body []byte) {
	f.t.Helper()
	if _, err := f.objs.Put(f.ctx, key, body); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) del(key string) {
	f.t.Helper()
	if err := f.objs.Delete(f.ctx, key); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) markerKey(id string) string {
	return s3test.Marker(f.ctx, f.objs.Client, f.objs.Bucket, f.store.Prefix(), id)
}

// moveMarker leaves task id with only the marker its record calls for.
func (f *fixture) moveMarker(id string) {
	f.t.Helper()
	want := f.store.MarkerKey(f.get(id))
	f.put(want, nil)
	for _, key := range f.keys(f.store.Prefix() + "active/") {
		if key != want && strings.HasSuffix(key, id) {
			f.del(key)
		}
	}
}

func (f *fixture) delMarker(id string) { f.del(f.markerKey(id)) }

func (f *fixture) exists(key string) bool {
	f.t.Helper()
	_, _, err := f.objs.Get(f.ctx, key)
	if err != nil && !isNotFound(err) {
		f.t.Fatal(err)
	}
	return err == nil
}

// keys lists the keys under prefix.
func (f *fixture) keys(prefix string) []string {
	f.t.Helper()
	keys, err := f.objs.Keys(f.ctx, prefix)
	if err != nil {
		f.t.Fatal(err)
	}
	return keys
}

// oldStore returns a Store whose first write is stamped ago in the past:
// the tasks it creates are that old.
func (f *fixture) oldStore(ago time.Duration) *s3task.Store {
	return f.newStore(func() time.Time { return time.Now().Add(-ago) })
}

// startWorker runs a worker in the test process until the test ends.
func (f *fixture) startWorker(h s3task.HandlerFunc) {
	f.t.Helper()
	w, err := s3task.NewWorker(f.newStore(nil), h, &s3task.WorkerOptions{
		PollInterval: 10 * time.Millisecond, MaxPollInterval: 100 * time.Millisecond,
		LeaseDuration: 10 * time.Second, HeartbeatInterval: 50 * time.Millisecond, ClockMargin: 2 * time.Second,
		ShutdownTimeout: time.Second, ReconcileInterval: -1, Logger: s3tasktest.Logger(f.t),
	})
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Run(ctx)
	}()
	f.t.Cleanup(func() { cancel(); <-done })
}

// The JSON documents, decoded strictly so that a renamed field fails.

type taskJSON struct {
	// Error is there in watch's document of a task that did not complete.
	Error          *errorBody        `json:"error"`
	SchemaVersion  int               `json:"schema_version"`
	ID             string            `json:"task_id"`
	Type           string            `json:"task_type"`
	Name           string            `json:"task_name"`
	Payload        json.RawMessage   `json:"payload"`
	Status         string            `json:"status"`
	Attempt        int               `json:"attempt_id"`
	MaxAttempts    int               `json:"max_attempts"`
	Released       int               `json:"released_attempts"`
	LastError      string            `json:"last_error"`
	ErrorCategory  string            `json:"error_category"`
	RetryAt        *time.Time        `json:"retry_at"`
	RunAt          *time.Time        `json:"run_at"`
	DueAt          *time.Time        `json:"due_at"`
	CancelReason   string            `json:"cancel_reason"`
	Purging        bool              `json:"purging"`
	NotifyPending  bool              `json:"notify_pending"`
	WorkerID       string            `json:"worker_id"`
	LeaseExpiresAt *time.Time        `json:"lease_expires_at"`
	RowCount       int64             `json:"row_count"`
	ProcessedCount int64             `json:"processed_count"`
	SuccessCount   int64             `json:"success_count"`
	ErrorCount     int64             `json:"error_count"`
	InputPath      string            `json:"input_object_path"`
	InputETag      string            `json:"input_etag"`
	InputSize      int64             `json:"input_size"`
	OutputPath     string            `json:"output_object_path"`
	CreatedAt      time.Time         `json:"created_at"`
	UpdatedAt      time.Time         `json:"updated_at"`
	CreatedBy      string            `json:"created_by"`
	SubmittedAt    *time.Time        `json:"submitted_at"`
	StartedAt      *time.Time        `json:"started_at"`
	IdempotencyKey string            `json:"idempotency_key"`
	Metadata       map[string]string `json:"metadata"`
	Revision       string            `json:"revision"`
	AttemptHistory []attemptJSON     `json:"attempt_history"`
	Writes         int64             `json:"writes"`
	PriorRevisions []string          `json:"prior_revisions"`
	Terminal       bool              `json:"terminal"`
	Retryable      bool              `json:"retryable"`
	Cancelable     bool              `json:"cancelable"`
	// taskview's report and upload fields (issue 13).
	RetryNote        string     `json:"retry_note"`
	UploadReissuable bool       `json:"upload_reissuable"`
	LastReportAt     *time.Time `json:"last_report_at"`
	SilentSeconds    int64      `json:"silent_seconds"`
	ReportOverdue    bool       `json:"report_overdue"`
	RecoversAt       *time.Time `json:"recovers_at"`
}

// attemptJSON is an entry of a task's attempt_history.
type attemptJSON struct {
	Attempt       int        `json:"attempt"`
	WorkerID      string     `json:"worker_id"`
	StartedAt     time.Time  `json:"started_at"`
	EndedAt       *time.Time `json:"ended_at"`
	Outcome       string     `json:"outcome"`
	ErrorCategory string     `json:"error_category"`
	Error         string     `json:"error"`
	HeartbeatMS   int64      `json:"heartbeat_interval_ms"`
}

type listJSON struct {
	Tasks        []taskJSON        `json:"tasks"`
	Broken       []taskview.Broken `json:"broken"`
	NextCursor   string            `json:"next_cursor"`
	Read         int               `json:"read"`
	StatusFilter []string          `json:"status_filter"`
	Note         string            `json:"note"`
}

func ids(ts []taskJSON) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.ID)
	}
	return out
}

// TestCommands builds the command and runs it as an operator would,
// against an in-process S3 the fixtures prepare: a subtest per command.
func TestCommands(t *testing.T) {
	t.Parallel()
	bin := buildCommand(t)
	// sub runs test in parallel with the others, on a fixture of its own.
	sub := func(name string, test func(t *testing.T, f *fixture)) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, newFixture(t, bin))
		})
	}

	sub("usage", func(t *testing.T, f *fixture) {
		if r := f.want(exitUsage, nil); !strings.Contains(r.stderr, "Usage: s3taskctl") {
			t.Errorf("no arguments: no usage on stderr\n%s", r)
		}
		for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}} {
			r := f.want(exitOK, nil, args...)
			for _, want := range []string{"Usage: s3taskctl", "Exit codes:", "S3TASKCTL_BUCKET", "CSVBATCH_", "list", "purge", "-s3-endpoint"} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("%v: help lacks %q\n%s", args, want, r)
				}
			}
		}
		if r := f.want(exitOK, nil, "list", "-h"); !strings.Contains(r.stdout, "client-side") || !strings.Contains(r.stdout, "page by page") {
			t.Errorf("list -h does not say -status filters client-side, page by page\n%s", r)
		}
		if r := f.want(exitOK, nil, "help", "purge"); !strings.Contains(r.stdout, "-yes") || !strings.Contains(r.stdout, "dry run") {
			t.Errorf("help purge does not explain -yes and the dry run\n%s", r)
		}
		f.wantError(exitUsage, "usage", "frobnicate")
		f.wantError(exitUsage, "usage", "list", "-no-such-flag")
		f.wantError(exitUsage, "usage", "show")
		f.wantError(exitUsage, "usage", "show", s3task.NewID(), s3task.NewID())
		f.wantError(exitUsage, "usage", "list", "-limit", "0")
		noBucket := slices.DeleteFunc(slices.Clone(f.env), func(kv string) bool { return strings.HasPrefix(kv, "S3TASKCTL_BUCKET=") })
		if r := f.runWith(noBucket, "list"); r.code != exitUsage || !strings.Contains(r.stderr, "no bucket") {
			t.Errorf("without a bucket: %s", r)
		}
	})

	sub("settings", func(t *testing.T, f *fixture) {
		task := f.task(f.store, "queued", "settings")
		check := func(name string, env []string, args ...string) {
			t.Helper()
			r := f.runWith(env, append(args, "list", "-json")...)
			var doc listJSON
			if r.code != exitOK || json.Unmarshal([]byte(r.stdout), &doc) != nil || len(doc.Tasks) != 1 || doc.Tasks[0].ID != task.ID {
				t.Errorf("%s: %s", name, r)
			}
		}
		check("flags", baseEnv(t), "-bucket", f.srv.Bucket, "-s3-endpoint", f.srv.URL, "--s3-path-style")
		check("csvbatch's environment", append(baseEnv(t), "CSVBATCH_BUCKET="+f.srv.Bucket, "CSVBATCH_S3_ENDPOINT="+f.srv.URL, "CSVBATCH_S3_PATH_STYLE=true"))
		check("S3TASKCTL_ wins over CSVBATCH_", append(slices.Clone(f.env), "CSVBATCH_BUCKET=no-such-bucket"))
		check("a flag wins over the environment", append(baseEnv(t), "S3TASKCTL_BUCKET=no-such-bucket", "S3TASKCTL_S3_ENDPOINT="+f.srv.URL, "S3TASKCTL_S3_PATH_STYLE=1"), "-bucket", f.srv.Bucket)
		if r := f.runWith(append(slices.Clone(f.env), "S3TASKCTL_S3_PATH_STYLE=perhaps"), "list"); r.code != exitUsage {
			t.Errorf("a bad boolean in the environment: %s", r)
		}
		jobs, err := s3task.NewStore(f.srv.Client(), f.srv.Bucket, &s3task.StoreOptions{Prefix: "jobs/", Logger: s3tasktest.Logger(f.t)})
		if err != nil {
			t.Fatal(err)
		}
		jt, err := jobs.Create(f.ctx, s3task.CreateParams{Name: "under jobs/"})
		if err != nil {
			t.Fatal(err)
		}
		var doc listJSON
		f.want(exitOK, &doc, "-prefix", "jobs/", "list", "-json")
		if diff := cmp.Diff([]string{jt.ID}, ids(doc.Tasks)); diff != "" {
			t.Errorf("-prefix jobs/ (-want +got):\n%s", diff)
		}
		f.wantError(exitUsage, "usage", "-prefix", "/bad", "list")
	})

	sub("list", func(t *testing.T, f *fixture) {
		// Oldest first; the listing is newest first.
		var made []*s3task.Task
		for _, state := range []string{"created", "queued", "failed", "completed", "abandoned"} {
			made = append(made, f.task(f.store, state, state+" task"))
		}
		slices.Reverse(made)
		var newest []string
		for _, t := range made {
			newest = append(newest, t.ID)
		}

		var p1, p2, p3 listJSON
		f.want(exitOK, &p1, "list", "-json", "-limit", "2")
		f.want(exitOK, &p2, "list", "-json", "-limit", "2", "-cursor", p1.NextCursor)
		f.want(exitOK, &p3, "list", "-limit", "2", "-cursor", p2.NextCursor, "-json")
		if diff := cmp.Diff([][]string{newest[:2], newest[2:4], newest[4:]}, [][]string{ids(p1.Tasks), ids(p2.Tasks), ids(p3.Tasks)}); diff != "" {
			t.Errorf("pages (-want +got):\n%s", diff)
		}
		if p1.NextCursor == "" || p2.NextCursor == "" || p3.NextCursor != "" || p1.Read != 2 || p1.Note != "" {
			t.Errorf("cursors %q, %q, %q, read %d, note %q; want two cursors, then none, 2 read, no note", p1.NextCursor, p2.NextCursor, p3.NextCursor, p1.Read, p1.Note)
		}
		if got := p1.Tasks[0]; got.Status != "abandoned" || !got.Terminal || got.Cancelable || got.Name != "abandoned task" || got.CancelReason != "not needed" {
			t.Errorf("first task: %+v", got)
		}

		r := f.want(exitOK, nil, "list")
		for _, want := range append([]string{"ID", "STATUS", "ATTEMPT", "failed (final)"}, newest...) {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("table lacks %q\n%s", want, r.stdout)
			}
		}
		if strings.Contains(r.stdout, "next page") || strings.Contains(r.stdout, "note:") {
			t.Errorf("a complete unfiltered listing offers another page or a note\n%s", r.stdout)
		}
		r = f.want(exitOK, nil, "list", "-limit", "2")
		if !strings.Contains(r.stdout, "next page: s3taskctl list -cursor "+p1.NextCursor+" -limit 2") {
			t.Errorf("a page without the command for the next one\n%s", r.stdout)
		}

		// -status filters the page it reads, and says so.
		var failed listJSON
		f.want(exitOK, &failed, "list", "-json", "-status", "failed", "-limit", "10")
		if diff := cmp.Diff([]string{made[2].ID}, ids(failed.Tasks)); diff != "" {
			t.Errorf("-status failed (-want +got):\n%s", diff)
		}
		if failed.Read != 5 || !slices.Equal(failed.StatusFilter, []string{"failed"}) || !strings.Contains(failed.Note, "5 tasks and 1 matched") {
			t.Errorf("-status failed: read %d, filter %v, note %q", failed.Read, failed.StatusFilter, failed.Note)
		}
		r = f.want(exitOK, nil, "list", "-status", "failed", "-limit", "2")
		if !strings.Contains(r.stdout, "(no tasks)") || !strings.Contains(r.stdout, "note: -status is applied here, not by S3: this page read 2 tasks and 0 matched; more may match further on (-cursor "+p1.NextCursor+")") {
			t.Errorf("a filtered page with no match does not explain itself\n%s", r.stdout)
		}
		var two listJSON
		f.want(exitOK, &two, "list", "-json", "-status", "queued,created", "-limit", "2", "-cursor", p2.NextCursor)
		if len(two.Tasks) != 1 || two.Tasks[0].Status != "created" || !strings.Contains(two.Note, "end of the listing") {
			t.Errorf("-status queued,created on the last page: %+v", two)
		}

		broken := s3task.NewID()
		f.put(f.store.Prefix()+broken+"/status.json", []byte("{oops"))
		var withBroken listJSON
		f.want(exitOK, &withBroken, "list", "-json")
		if len(withBroken.Broken) != 1 || withBroken.Broken[0].Key != f.store.Prefix()+broken+"/status.json" || len(withBroken.Tasks) != 5 {
			t.Errorf("a broken record: %+v", withBroken)
		}
		if r := f.want(exitOK, nil, "list"); !strings.Contains(r.stdout, "UNREADABLE "+f.store.Prefix()+broken) {
			t.Errorf("table does not show the unreadable record\n%s", r.stdout)
		}

		f.wantError(exitUsage, "usage", "list", "-status", "paused")
		f.wantError(exitUsage, "invalid_cursor", "list", "-cursor", "not/a cursor")
	})

	sub("show", func(t *testing.T, f *fixture) {
		done := f.task(f.store, "completed", "June import")
		var doc struct {
			Task     taskJSON     `json:"task"`
			Marker   bool         `json:"marker"`
			Attempts []attemptDoc `json:"attempts"`
			Objects  []objectDoc  `json:"objects"`
		}
		r := f.want(exitOK, &doc, "show", done.ID, "-json")
		checkShape(t, "`show`", r.stdout)
		dir := f.store.Prefix() + done.ID + "/"
		if doc.Task.ID != done.ID || doc.Task.Status != "completed" || doc.Task.OutputPath != dir+"output-attempt-1.csv" || doc.Marker ||
			doc.Task.Metadata["tenant"] != "acme" || doc.Task.SubmittedAt == nil {
			t.Errorf("show: task %+v, marker %t", doc.Task, doc.Marker)
		}
		if diff := cmp.Diff([]attemptDoc{{Attempt: 1, Output: dir + "output-attempt-1.csv", Latest: true}}, doc.Attempts); diff != "" {
			t.Errorf("attempts (-want +got):\n%s", diff)
		}
		var kinds []string
		for _, o := range doc.Objects {
			kinds = append(kinds, strings.TrimPrefix(o.Key, dir)+"="+o.Kind)
			if o.Size <= 0 || o.LastModified.IsZero() {
				t.Errorf("object %+v without size or time", o)
			}
		}
		if diff := cmp.Diff([]string{"input.csv=input", "output-attempt-1.csv=output", "status.json=record"}, kinds); diff != "" {
			t.Errorf("objects (-want +got):\n%s", diff)
		}
		r = f.want(exitOK, nil, "show", done.ID)
		for _, want := range []string{done.ID, "June import", "completed", "1 of 3", "Attempts:", "output " + dir + "output-attempt-1.csv", "(latest)", "status.json", "record",
			"Metadata tenant", "acme", "Submitted"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("show lacks %q\n%s", want, r.stdout)
			}
		}

		lost := f.task(f.store, "queued", "lost marker")
		f.want(exitOK, &doc, "show", lost.ID, "-json")
		if !doc.Marker || doc.Task.DueAt == nil {
			t.Errorf("show of a queued task: marker %t, due_at %v; want its marker found, a due_at", doc.Marker, doc.Task.DueAt)
		}
		f.delMarker(lost.ID)
		if r := f.want(exitOK, nil, "show", lost.ID); !strings.Contains(r.stdout, "MISSING") || !strings.Contains(r.stdout, "reconcile") {
			t.Errorf("a queued task without marker is not flagged\n%s", r.stdout)
		}

		f.wantError(exitNotFound, "not_found", "show", s3task.NewID())
		f.wantError(exitUsage, "invalid_id", "show", "../x")
		f.wantError(exitUsage, "invalid_id", "show", strings.ToLower(done.ID))
	})

	sub("show history", func(t *testing.T, f *fixture) {
		// Attempt 1 fails, attempt 2 completes: show tells both, from the
		// record's attempt history, attempt 1's error included.
		f.startWorker(func(ctx context.Context, job *s3task.Job) error {
			if job.Task.Attempt == 1 {
				return s3task.RetryAfter(s3task.WithCategory(errors.New("upstream answered 503"), "upstream"), 0)
			}
			return nil
		})
		task := f.task(f.store, "queued", "flaky upstream")
		for deadline := time.Now().Add(cmdWait); f.get(task.ID).Status != s3task.StatusCompleted; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the task did not complete: %+v", f.get(task.ID))
			}
		}
		var doc struct {
			Task     taskJSON     `json:"task"`
			Marker   bool         `json:"marker"`
			Attempts []attemptDoc `json:"attempts"`
			Objects  []objectDoc  `json:"objects"`
		}
		r := f.want(exitOK, &doc, "show", task.ID, "-json")
		checkShape(t, "`show`", r.stdout)
		if len(doc.Attempts) != 2 || len(doc.Task.AttemptHistory) != 2 {
			t.Fatalf("attempts %+v, history %+v; want two of each", doc.Attempts, doc.Task.AttemptHistory)
		}
		first, second := doc.Attempts[0], doc.Attempts[1]
		worker := doc.Task.AttemptHistory[0].WorkerID
		if first.Attempt != 1 || first.Outcome != "failed" || first.ErrorCategory != "upstream" || first.Error != "upstream answered 503" ||
			first.WorkerID != worker || worker == "" || first.StartedAt == nil || first.EndedAt == nil || first.EndedAt.Before(*first.StartedAt) || first.Latest {
			t.Errorf("attempt 1: %+v", first)
		}
		if second.Attempt != 2 || second.Outcome != "completed" || second.Error != "" || second.ErrorCategory != "" || !second.Latest ||
			second.StartedAt == nil || second.EndedAt == nil || second.StartedAt.Before(*first.EndedAt) {
			t.Errorf("attempt 2: %+v", second)
		}
		if h := doc.Task.AttemptHistory[1]; h.HeartbeatMS != 50 || h.Outcome != "completed" || doc.Task.LastError != "" {
			t.Errorf("record: history entry %+v, last_error %q; want the worker's 50 ms heartbeat, completed, no last error", h, doc.Task.LastError)
		}

		r = f.want(exitOK, nil, "show", task.ID)
		for _, row := range [][]string{
			{"#", "OUTCOME", "WORKER", "STARTED", "TOOK", "OUTPUT", "ERROR"},
			{"1", "failed", worker},
			{"2", "completed", worker},
		} {
			if !hasRow(r.stdout, row...) {
				t.Errorf("show lacks a row %v\n%s", row, r.stdout)
			}
		}
		for _, want := range []string{"no output [upstream] upstream answered 503", "no output (latest)"} {
			if !strings.Contains(strings.Join(strings.Fields(r.stdout), " "), want) {
				t.Errorf("show lacks %q\n%s", want, r.stdout)
			}
		}
	})

	sub("show unreadable", func(t *testing.T, f *fixture) {
		// show must show what it can of a record it cannot read, as the
		// README tells operators to, and exit 1 (not 2: not a usage error;
		// not 3: the task's folder is there).
		showBroken := func(id string) (unreadableDoc, result) {
			t.Helper()
			var doc unreadableDoc
			r := f.want(exitFailed, &doc, "show", id, "-json")
			checkShape(t, "`show` (unreadable)", r.stdout)
			if !strings.Contains(r.stderr, "s3taskctl: ") {
				t.Errorf("show -json of an unreadable record: nothing on stderr\n%s", r)
			}
			if strings.Contains(r.stdout, "\x1b") {
				t.Errorf("an escape character reached stdout\n%s", r)
			}
			table := f.want(exitFailed, nil, "show", id)
			for _, want := range []string{"UNREADABLE", f.store.Prefix() + id + "/status.json", "Objects in ", "input.csv"} {
				if !strings.Contains(table.stdout, want) {
					t.Errorf("show %s: table lacks %q\n%s", id, want, table)
				}
			}
			if strings.Contains(table.stdout, "\x1b") || !strings.Contains(table.stderr, "s3taskctl: ") {
				t.Errorf("show table of an unreadable record: an escape on stdout, or nothing on stderr\n%s", table)
			}
			return doc, table
		}
		kinds := func(doc unreadableDoc, id string) []string {
			var out []string
			for _, o := range doc.Objects {
				out = append(out, strings.TrimPrefix(o.Key, f.store.Prefix()+id+"/")+"="+o.Kind)
			}
			return out
		}

		// Corrupt JSON, with a terminal escape and a byte that is not UTF-8.
		corrupt := f.task(f.store, "completed", "corrupt")
		key := f.store.Prefix() + corrupt.ID + "/status.json"
		f.put(key, []byte("{\"status\": \"comp\x1b[31mleted\n\xff"))
		doc, table := showBroken(corrupt.ID)
		want := unreadableDoc{Key: key, Problem: "corrupt", Size: 28, Raw: `{"status": "comp\u001b[31mleted\n\xff`,
			Error: errorBody{Code: "corrupt_record", ExitCode: exitFailed, Message: doc.Error.Message}}
		if diff := cmp.Diff(want, doc, cmpopts.IgnoreFields(unreadableDoc{}, "Objects"), cmpopts.IgnoreUnexported(unreadableDoc{})); diff != "" || !strings.Contains(doc.Error.Message, "corrupt") {
			t.Errorf("corrupt record (-want +got):\n%s\nmessage %q", diff, doc.Error.Message)
		}
		if diff := cmp.Diff([]string{"input.csv=input", "output-attempt-1.csv=output", "status.json=record"}, kinds(doc, corrupt.ID)); diff != "" {
			t.Errorf("corrupt record's objects (-want +got):\n%s", diff)
		}
		for _, want := range []string{"corrupt", `{"status": "comp\u001b[31mleted`, `\xff`, "28 bytes"} {
			if !strings.Contains(table.stdout, want) {
				t.Errorf("corrupt record: table lacks %q\n%s", want, table.stdout)
			}
		}

		// A newer schema, longer than show prints.
		newer := f.task(f.store, "queued", "newer")
		key = f.store.Prefix() + newer.ID + "/status.json"
		body := `{"schema_version": 9, "task_id": "` + newer.ID + `", "pad": "` + strings.Repeat("x", 5000) + `"}`
		f.put(key, []byte(body))
		doc, table = showBroken(newer.ID)
		if doc.Problem != "newer_schema" || doc.SchemaVersion != 9 || doc.Error.Code != "unsupported_record" || doc.Error.ExitCode != exitFailed ||
			doc.Size != int64(len(body)) || !doc.RawTruncated || doc.Raw != body[:rawLimit] {
			t.Errorf("newer schema: %+v", doc)
		}
		for _, want := range []string{"newer schema_version 9", "the first 4096 of " + fmt.Sprint(len(body)) + " bytes"} {
			if !strings.Contains(table.stdout, want) {
				t.Errorf("newer schema: table lacks %q\n%s", want, table.stdout)
			}
		}

		// A folder without its record.
		missing := f.task(f.store, "created", "missing")
		key = f.store.Prefix() + missing.ID + "/status.json"
		f.del(key)
		doc, table = showBroken(missing.ID)
		want = unreadableDoc{Key: key, Problem: "missing", Error: errorBody{Code: "missing_record", ExitCode: exitFailed, Message: doc.Error.Message}}
		if diff := cmp.Diff(want, doc, cmpopts.IgnoreFields(unreadableDoc{}, "Objects"), cmpopts.IgnoreUnexported(unreadableDoc{})); diff != "" {
			t.Errorf("missing record (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"input.csv=input"}, kinds(doc, missing.ID)); diff != "" {
			t.Errorf("missing record's objects (-want +got):\n%s", diff)
		}
		if !strings.Contains(table.stdout, "no status.json") {
			t.Errorf("missing record: table does not say so\n%s", table.stdout)
		}

		// Nothing at all: no such task, as before.
		f.wantError(exitNotFound, "not_found", "show", s3task.NewID())
	})

	sub("reserved objects", func(t *testing.T, f *fixture) {
		// A keyed task puts an object under _keys/, submitting one writes
		// _wake, and a check cut short leaves one under _check/: none of
		// them is a task folder.
		keyed := func(st *s3task.Store, key, state string) *s3task.Task {
			t.Helper()
			tk, err := st.Create(f.ctx, s3task.CreateParams{Name: "keyed " + key, Type: "csv_enrich", Key: key})
			if err != nil {
				t.Fatal(err)
			}
			if err := f.store.UploadInput(f.ctx, tk.ID, strings.NewReader("a\n")); err != nil {
				t.Fatal(err)
			}
			if _, err := f.store.Submit(f.ctx, tk.ID); err != nil {
				t.Fatal(err)
			}
			if state == "completed" {
				f.rewrite(tk.ID, func(x *s3task.Task) { x.Status, x.Attempt = s3task.StatusCompleted, 1 })
				f.delMarker(tk.ID)
			}
			return f.get(tk.ID)
		}
		old := keyed(f.oldStore(2*time.Hour), "k", "completed")
		live := keyed(f.store, "k2", "queued")
		probe := f.store.Prefix() + "_check/" + s3task.NewID()
		f.put(probe, []byte("first"))
		f.put(f.store.Prefix()+"_reconciler", []byte("{}"))
		if !f.exists(f.store.Prefix() + "_wake") {
			t.Fatal("submitting wrote no _wake object")
		}
		keys := f.keys(f.store.Prefix() + "_keys/")
		if len(keys) != 2 {
			t.Fatalf("keyed tasks left %v under _keys/, want two objects", keys)
		}

		var page listJSON
		f.want(exitOK, &page, "list", "-json")
		if diff := cmp.Diff([]string{live.ID, old.ID}, ids(page.Tasks)); diff != "" || len(page.Broken) != 0 {
			t.Errorf("list (-want +got):\n%s\nbroken %+v", diff, page.Broken)
		}
		var st statsDoc
		f.want(exitOK, &st, "stats", "-json")
		if st.Tasks != 2 || st.Broken != 0 || st.Unfinished != 1 {
			t.Errorf("stats: %+v", st)
		}
		var rec reconcileDoc
		f.want(exitOK, &rec, "reconcile", "-json")
		if !rec.Clean || rec.Tasks != 2 || len(rec.Removed)+len(rec.Restored)+len(rec.Broken) != 0 {
			t.Errorf("reconcile: %+v", rec)
		}
		var show showDoc
		f.want(exitOK, &show, "show", live.ID, "-json")
		if show.Task.ID != live.ID || !show.Marker {
			t.Errorf("show of a keyed task: %+v", show)
		}
		var dry, done purgeDoc
		f.srv.Advance(11 * time.Minute) // Purge keeps a keyed task for 10 minutes after its key was written
		f.want(exitOK, &dry, "purge", "-older-than", "1h", "-json")
		if dry.WouldPurge == nil || !slices.Equal(*dry.WouldPurge, []string{old.ID}) || len(dry.Broken) != 0 || dry.Tasks != 1 {
			t.Errorf("purge dry run: %+v", dry)
		}
		f.want(exitOK, &done, "purge", "-older-than", "1h", "-yes", "-json")
		if done.Purged == nil || !slices.Equal(*done.Purged, []string{old.ID}) || len(done.Broken) != 0 {
			t.Errorf("purge: %+v", done)
		}
		// The purged task's key object stays, for the next Create with the
		// key to take over; the probe, the wake object and the lease are
		// left alone.
		if left := f.keys(f.store.Prefix() + "_keys/"); len(left) != 2 {
			t.Errorf("after purge, _keys/ holds %v; want both keys' objects", left)
		}
		if again, err := f.store.Create(f.ctx, s3task.CreateParams{Key: "k"}); err != nil || again.ID == old.ID {
			t.Errorf("Create with the purged task's key = %v, %v; want a new task", again, err)
		}
		for _, k := range []string{probe, f.store.Prefix() + "_reconciler", f.store.Prefix() + "_wake"} {
			if !f.exists(k) {
				t.Errorf("purge deleted %s", k)
			}
		}
		if again, err := f.store.Create(f.ctx, s3task.CreateParams{Key: "k2"}); err != nil || again.ID != live.ID {
			t.Errorf("the live task's key names %v, %v; want %s", again, err, live.ID)
		}
	})

	sub("watch", func(t *testing.T, f *fixture) {
		progressed := make(chan struct{})
		var once sync.Once
		f.startWorker(func(ctx context.Context, job *s3task.Job) error {
			switch job.Task.Name {
			case "fails":
				return s3task.Permanent(errors.New("no email column"))
			case "slow":
				// Report progress, then wait until the test has seen
				// watch draw it.
				job.SetProgress(s3task.Progress{RowCount: 10, ProcessedCount: 5, SuccessCount: 5})
				select {
				case <-progressed:
				case <-ctx.Done():
					return ctx.Err()
				}
				job.SetProgress(s3task.Progress{RowCount: 10, ProcessedCount: 10, SuccessCount: 10})
			}
			return nil
		})
		t.Cleanup(func() { once.Do(func() { close(progressed) }) })

		slow := f.task(f.store, "queued", "slow")
		ctx, cancel := context.WithTimeout(f.ctx, cmdWait)
		defer cancel()
		cmd := exec.CommandContext(ctx, f.bin, "watch", slow.ID, "-interval", "20ms", "-timeout", "30s")
		cmd.Env = f.env
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var lines []string
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines = append(lines, sc.Text())
			if strings.Contains(sc.Text(), " 50%  5/10 rows  running, attempt 1 of 3") {
				once.Do(func() { close(progressed) })
			}
		}
		err = cmd.Wait()
		if err != nil || len(lines) == 0 {
			t.Fatalf("watch: %v\nstdout:\n%s\nstderr:\n%s", err, strings.Join(lines, "\n"), stderr.String())
		}
		out := strings.Join(lines, "\n")
		for _, want := range []string{"[###############...............]  50%  5/10 rows  running, attempt 1 of 3", "[##############################] 100%  10/10 rows  completed", "task " + slow.ID + " completed"} {
			if !strings.Contains(out, want) {
				t.Errorf("watch output lacks %q:\n%s", want, out)
			}
		}

		fails := f.task(f.store, "queued", "fails")
		if r := f.want(exitFailed, nil, "watch", fails.ID, "-interval", "20ms", "-timeout", "30s"); !strings.Contains(r.stdout, "task "+fails.ID+" failed") || !strings.Contains(r.stderr, "no email column") {
			t.Errorf("watch of a failing task:\n%s", r)
		}
		var failedDoc taskJSON
		f.want(exitFailed, &failedDoc, "watch", fails.ID, "-json")
		if failedDoc.Status != "failed" || !failedDoc.Terminal || failedDoc.ErrorCategory != s3task.CategoryPermanent ||
			failedDoc.Error == nil || failedDoc.Error.Code != "task_failed" || failedDoc.Error.ExitCode != exitFailed {
			t.Errorf("watch -json of a failed task: %+v", failedDoc)
		}
		quick := f.task(f.store, "queued", "quick")
		var doneDoc taskJSON
		f.want(exitOK, &doneDoc, "-json", "watch", quick.ID, "-interval", "20ms", "-timeout", "30s")
		if doneDoc.ID != quick.ID || doneDoc.Status != "completed" || doneDoc.Error != nil {
			t.Errorf("watch -json: %+v", doneDoc)
		}
		abandoned := f.task(f.store, "abandoned", "abandoned")
		f.want(exitFailed, nil, "watch", abandoned.ID)

		f.wantError(exitNotFound, "not_found", "watch", s3task.NewID())
		f.wantError(exitUsage, "invalid_id", "watch", "nope")
		f.wantError(exitUsage, "usage", "watch", slow.ID, "-interval", "1ns")
	})

	sub("watch times out", func(t *testing.T, f *fixture) {
		// No worker: the task stays queued.
		waiting := f.task(f.store, "queued", "nobody runs me")
		r := f.want(exitFailed, nil, "watch", waiting.ID, "-interval", "20ms", "-timeout", "300ms")
		if !strings.Contains(r.stderr, "still queued") {
			t.Errorf("watch timing out:\n%s", r)
		}
		f.wantError(exitFailed, "timeout", "watch", waiting.ID, "-interval", "20ms", "-timeout", "300ms")
	})

	sub("retry and cancel", func(t *testing.T, f *fixture) {
		failed := f.task(f.store, "failed", "failed")
		var retried taskJSON
		f.want(exitOK, &retried, "retry", failed.ID, "-json")
		own := f.store.MarkerKey(f.get(failed.ID))
		if retried.Status != "queued" || retried.ID != failed.ID || retried.DueAt == nil || !f.exists(own) {
			t.Errorf("retry: %+v (marker %s there: %t)", retried, own, f.exists(own))
		}
		waiting := f.task(f.store, "failed-waiting", "waiting")
		if r := f.want(exitOK, nil, "retry", waiting.ID); !strings.Contains(r.stdout, "queued for attempt 2 of 3") {
			t.Errorf("retry: %s", r)
		}

		queued := f.task(f.store, "queued", "queued")
		var cancelled taskJSON
		f.want(exitOK, &cancelled, "cancel", queued.ID, "-reason", "wrong file", "-json")
		if cancelled.Status != "abandoned" || cancelled.CancelReason != "wrong file" || f.get(queued.ID).Status != s3task.StatusAbandoned {
			t.Errorf("cancel: %+v", cancelled)
		}
		// A task abandoned already is not abandoned again: exit 4, as
		// cancel by ID over several tasks skips it.
		f.wantError(exitConflict, "invalid_transition", "cancel", queued.ID)
		if got := f.get(queued.ID); got.CancelReason != "wrong file" {
			t.Errorf("a second cancel changed the reason to %q", got.CancelReason)
		}

		done := f.task(f.store, "completed", "done")
		f.wantError(exitConflict, "invalid_transition", "retry", done.ID)
		f.wantError(exitConflict, "invalid_transition", "cancel", done.ID)
		f.wantError(exitConflict, "invalid_transition", "retry", queued.ID)
		f.wantError(exitNotFound, "not_found", "retry", s3task.NewID())
		f.wantError(exitNotFound, "not_found", "cancel", s3task.NewID())
		f.wantError(exitUsage, "invalid_id", "retry", "active")
		f.wantError(exitUsage, "invalid_id", "cancel", "../"+done.ID)
		if got := f.get(done.ID); got.Status != s3task.StatusCompleted {
			t.Errorf("refused calls changed the completed task: %s", got.Status)
		}
	})

	sub("schedule", func(t *testing.T, f *fixture) {

		// A created task keeps its start for when it is submitted.
		created := f.task(f.store, "created", "created")
		var doc taskJSON
		f.want(exitOK, &doc, "schedule", created.ID, "+90m", "-json")
		if doc.Status != "created" || doc.RunAt == nil || time.Until(*doc.RunAt) < 85*time.Minute || time.Until(*doc.RunAt) > 95*time.Minute || doc.DueAt != nil {
			t.Errorf("schedule of a created task: %+v", doc)
		}

		// A queued task's marker moves to its start.
		queued := f.task(f.store, "queued", "queued")
		before := f.markerKey(queued.ID)
		at := time.Now().Add(3 * time.Hour).UTC().Truncate(time.Second)
		r := f.want(exitOK, nil, "schedule", queued.ID, at.Format(time.RFC3339))
		if !strings.Contains(r.stdout, "task "+queued.ID+" starts no earlier than "+at.Format(time.RFC3339)) {
			t.Errorf("schedule: %s", r)
		}
		got := f.get(queued.ID)
		if !got.RunAt.Equal(at) || !got.DueAt.Equal(at) || f.exists(before) || !f.exists(f.store.MarkerKey(got)) {
			t.Errorf("after schedule: run_at %v, due_at %v, old marker there %t, new marker %s there %t; want both %v, the marker moved",
				got.RunAt, got.DueAt, f.exists(before), f.store.MarkerKey(got), f.exists(f.store.MarkerKey(got)), at)
		}
		if r := f.want(exitOK, nil, "list"); !strings.Contains(r.stdout, "queued (scheduled in ") {
			t.Errorf("list does not show the task as scheduled\n%s", r.stdout)
		}

		// "now" runs it at once.
		var now taskJSON
		f.want(exitOK, &now, "schedule", queued.ID, "now", "-json")
		got = f.get(queued.ID)
		if now.RunAt != nil || got.Scheduled(time.Now()) || !f.exists(f.store.MarkerKey(got)) || f.exists(f.store.MarkerKey(&s3task.Task{ID: got.ID, DueAt: at})) {
			t.Errorf("schedule now: %+v, markers %v", now, f.keys(f.store.Prefix()+"active/"))
		}
		if r := f.want(exitOK, nil, "schedule", queued.ID, "now"); !strings.Contains(r.stdout, "runs as soon as a worker is free") {
			t.Errorf("schedule now: %s", r)
		}

		done := f.task(f.store, "completed", "done")
		f.wantError(exitConflict, "invalid_transition", "schedule", done.ID, "+1h")
		f.wantError(exitNotFound, "not_found", "schedule", s3task.NewID(), "+1h")
		f.wantError(exitUsage, "invalid_id", "schedule", "../x", "+1h")
		f.wantError(exitUsage, "usage", "schedule", queued.ID, "tomorrow")
		f.wantError(exitUsage, "usage", "schedule", queued.ID)
	})

	sub("stats", func(t *testing.T, f *fixture) {
		old := f.task(f.oldStore(time.Hour), "queued", "an hour old")
		for _, state := range []string{"queued", "running", "completed", "failed", "failed-waiting", "created", "abandoned"} {
			f.task(f.store, state, state)
		}
		// Queued, but to start in two hours: unfinished, not waiting.
		if _, err := f.store.Schedule(f.ctx, f.task(f.store, "queued", "scheduled").ID, time.Now().Add(2*time.Hour)); err != nil {
			t.Fatal(err)
		}
		f.put(f.store.Prefix()+s3task.NewID()+"/status.json", []byte("not json"))

		var st statsDoc
		f.want(exitOK, &st, "stats", "-json")
		want := map[string]int{"created": 1, "queued": 3, "running": 1, "completed": 1, "failed": 2, "abandoned": 1}
		if diff := cmp.Diff(want, st.ByStatus); diff != "" {
			t.Errorf("by_status (-want +got):\n%s", diff)
		}
		if st.Tasks != 9 || st.Truncated || st.Unfinished != 5 || st.WaitingRetry != 1 || st.Scheduled != 1 || st.Broken != 1 || st.MaxTasks != s3task.DefaultStatsMaxTasks {
			t.Errorf("stats: %+v", st)
		}
		if diff := cmp.Diff(map[string]int{"csv_enrich": 5}, st.UnfinishedByType); diff != "" {
			t.Errorf("unfinished_by_type (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(map[string]int{"bad_input": 1, s3task.CategoryTransient: 1}, st.Failures); diff != "" {
			t.Errorf("failures (-want +got):\n%s", diff)
		}
		if st.OldestUnfinished == nil || st.OldestUnfinished.ID != old.ID || st.OldestUnfinishedAgeSeconds < 3500 || st.OldestUnfinishedAgeSeconds > 3700 {
			t.Errorf("oldest unfinished %+v, age %.0fs; want %s, about an hour", st.OldestUnfinished, st.OldestUnfinishedAgeSeconds, old.ID)
		}
		// The hour-old task was submitted just now, first of the queued
		// ones: it waits from then. The retry and the scheduled start are
		// an hour or more ahead, so they do not wait.
		if st.OldestWaiting == nil || st.OldestWaiting.ID != old.ID || st.OldestWaitingAgeSeconds > 600 {
			t.Errorf("oldest waiting %+v, age %.0fs; want %s, waiting since its submit", st.OldestWaiting, st.OldestWaitingAgeSeconds, old.ID)
		}
		if w, ok := st.WaitByType["csv_enrich"]; !ok || len(st.WaitByType) != 1 || w != st.OldestWaitingAgeSeconds {
			t.Errorf("wait_by_type %v, want csv_enrich alone, at %.3fs", st.WaitByType, st.OldestWaitingAgeSeconds)
		}

		var capped statsDoc
		f.want(exitOK, &capped, "stats", "-json", "-max-tasks", "2")
		if !capped.Truncated || capped.Tasks+capped.Broken != 2 {
			t.Errorf("-max-tasks 2: %+v", capped)
		}
		var recent statsDoc
		f.want(exitOK, &recent, "stats", "-json", "-since", "30m")
		if recent.Tasks != 8 || recent.ByStatus["queued"] != 2 || recent.Since == nil {
			t.Errorf("-since 30m: %+v", recent)
		}
		r := f.want(exitOK, nil, "stats", "-max-tasks", "2")
		for _, want := range []string{"unfinished", "oldest waiting", "oldest unfinished", "note: -max-tasks 2 stopped the count"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("stats table lacks %q\n%s", want, r.stdout)
			}
		}
		r = f.want(exitOK, nil, "stats")
		for _, want := range [][]string{{"oldest unfinished", old.ID, "queued,"}, {"oldest waiting", old.ID, "queued, due"}, {"scheduled", "1"},
			{"bad_input", "1"}, {s3task.CategoryTransient, "1"}, {"unreadable records", "1"}, {"unfinished", "5"}, {"csv_enrich", "5"}} {
			if !hasRow(r.stdout, want...) {
				t.Errorf("stats table has no row %q\n%s", want, r.stdout)
			}
		}
		f.wantError(exitUsage, "usage", "stats", "-since", "yesterday")
		f.wantError(exitUsage, "usage", "stats", "-max-tasks", "0")
	})

	sub("reconcile", func(t *testing.T, f *fixture) {
		lost := f.task(f.store, "queued", "lost its marker")
		f.delMarker(lost.ID)
		lostKey := f.store.MarkerKey(lost)
		// A task that completed after its queued marker was written (more
		// than the two seconds Reconcile allows for the marker's one-second
		// time stamp), a worker's delete of it lost.
		stale := f.task(f.store, "queued", "stale marker")
		staleKey := f.markerKey(stale.ID)
		time.Sleep(3 * time.Second)
		f.rewrite(stale.ID, func(x *s3task.Task) { x.Status, x.Attempt = s3task.StatusCompleted, 1 })

		var dry, real, again reconcileDoc
		f.want(exitOK, &dry, "reconcile", "-dry-run", "-json")
		want := reconcileDoc{DryRun: true, Tasks: 2, Restored: []string{lost.ID}, Removed: []string{staleKey}, Broken: []taskview.Broken{}}
		if diff := cmp.Diff(want, dry); diff != "" {
			t.Errorf("dry run (-want +got):\n%s", diff)
		}
		if f.exists(lostKey) || !f.exists(staleKey) {
			t.Error("the dry run changed markers")
		}
		f.want(exitOK, &real, "reconcile", "-json")
		want.DryRun = false
		if diff := cmp.Diff(want, real); diff != "" {
			t.Errorf("run (-want +got):\n%s", diff)
		}
		if !f.exists(lostKey) || f.exists(staleKey) {
			t.Error("reconcile did not repair the markers")
		}
		f.want(exitOK, &again, "reconcile", "-json")
		if !again.Clean || again.Tasks != 2 {
			t.Errorf("second run: %+v", again)
		}
		if r := f.want(exitOK, nil, "reconcile", "-since", "1h"); !strings.Contains(r.stdout, "clean: the index matches the records") {
			t.Errorf("reconcile table: %s", r.stdout)
		}
		f.wantError(exitUsage, "usage", "reconcile", "-since", "-5m")
	})

	sub("purge", func(t *testing.T, f *fixture) {
		oldDone := f.task(f.oldStore(2*time.Hour), "completed", "old and done")
		oldQueued := f.task(f.oldStore(2*time.Hour), "queued", "old but queued")
		recent := f.task(f.store, "completed", "recent")
		f.srv.Advance(2 * time.Minute) // Purge leaves a task until a minute after its last change

		var dry purgeDoc
		f.want(exitOK, &dry, "purge", "-older-than", "1h", "-json")
		if !dry.DryRun || dry.WouldPurge == nil || !slices.Equal(*dry.WouldPurge, []string{oldDone.ID}) || dry.Purged != nil || dry.Tasks != 2 || dry.Kept != 1 || dry.Objects != 0 {
			t.Errorf("dry run: %+v", dry)
		}
		checkShape(t, "`purge`", f.run("purge", "-older-than", "1h", "-json").stdout)
		if len(f.keys(f.store.Prefix()+oldDone.ID+"/")) != 3 {
			t.Error("the dry run deleted something")
		}
		if r := f.want(exitOK, nil, "purge", "-older-than", "1h"); !strings.Contains(r.stdout, "dry run: 1 finished task would be deleted; run again with -yes") {
			t.Errorf("dry run table: %s", r.stdout)
		}

		var done purgeDoc
		f.want(exitOK, &done, "purge", "-older-than", "1h", "-yes", "-json")
		if done.DryRun || done.Purged == nil || !slices.Equal(*done.Purged, []string{oldDone.ID}) || done.WouldPurge != nil || done.Objects != 3 {
			t.Errorf("purge -yes: %+v", done)
		}
		var none purgeDoc
		r := f.want(exitOK, &none, "purge", "-older-than", "1h", "-yes", "-json")
		checkShape(t, "`purge`", r.stdout)
		if none.Purged == nil || len(*none.Purged) != 0 || !strings.Contains(r.stdout, `"purged": []`) {
			t.Errorf("purge -yes with nothing to purge: want \"purged\": []\n%s", r.stdout)
		}
		if left := f.keys(f.store.Prefix() + oldDone.ID + "/"); len(left) != 0 {
			t.Errorf("purged task left %v", left)
		}
		for _, id := range []string{oldQueued.ID, recent.ID} {
			if f.get(id) == nil {
				t.Errorf("%s is gone", id)
			}
		}
		var days purgeDoc
		f.want(exitOK, &days, "purge", "-older-than", "1d", "-json")
		if days.Tasks != 0 || time.Since(days.Cutoff) < 23*time.Hour {
			t.Errorf("-older-than 1d: %+v", days)
		}

		f.wantError(exitUsage, "usage", "purge")
		f.wantError(exitUsage, "usage", "purge", "-older-than", "banana")
		f.wantError(exitUsage, "usage", "purge", "-older-than", "-1h")
		f.wantError(exitUsage, "usage", "purge", "-older-than", "1h", "-limit", "-2")
	})

	sub("check", func(t *testing.T, f *fixture) {
		var ok checkDoc
		r := f.want(exitOK, &ok, "check", "-json")
		checkShape(t, "`check`", r.stdout)
		// gofakes3 enforces conditional writes and checks no signatures.
		report := &s3task.BackendReport{
			ConditionalCreate: s3task.Enforced, ConditionalUpdate: s3task.Enforced,
			AtomicUpdate: s3task.Enforced, RaceWinners: 1,
			IfMatchMissingKey: s3task.Enforced, IfMatchMissingKeyAnswer: "412 PreconditionFailed",
			PresignSignature: s3task.NotEnforced, PresignExpiry: s3task.NotEnforced,
		}
		if diff := cmp.Diff(checkDoc{Bucket: f.srv.Bucket, Prefix: s3task.DefaultPrefix, Endpoint: f.srv.URL, Reachable: true, ConditionalWrites: true, Listing: true, Report: report}, ok,
			cmpopts.IgnoreFields(s3task.BackendReport{}, "ServerClockOffset")); diff != "" {
			t.Errorf("check (-want +got):\n%s", diff)
		}
		r = f.want(exitOK, nil, "check")
		for _, want := range []string{
			"OK: s3task can run on this store",
			"If-Match on a missing key         refused (412 PreconditionFailed)",
			"4 If-Match writes racing          1 won, as it must",
			"presigned URL, expired            NOT ENFORCED: served: URLs never expire",
		} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("check table lacks %q:\n%s", want, r.stdout)
			}
		}

		// A store that ignores conditional headers: a proxy strips them.
		target, err := url.Parse(f.srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		tr := &http.Transport{}
		proxy := httptest.NewServer(&httputil.ReverseProxy{
			Rewrite: func(r *httputil.ProxyRequest) {
				r.SetURL(target)
				r.Out.Host = target.Host
				r.Out.Header.Del("If-Match")
				r.Out.Header.Del("If-None-Match")
			},
			Transport: tr,
		})
		t.Cleanup(func() { proxy.Close(); tr.CloseIdleConnections() })
		lax := append(slices.Clone(f.env), "S3TASKCTL_S3_ENDPOINT="+proxy.URL)
		r = f.runWith(append(lax, "S3TASKCTL_JSON=true"), "check")
		var bad checkDoc
		if r.code != exitUnavailable || json.Unmarshal([]byte(r.stdout), &bad) != nil || bad.ConditionalWrites || !bad.Reachable || !strings.Contains(bad.Detail, "does not enforce conditional writes") ||
			bad.Report == nil || bad.Report.ConditionalCreate != s3task.NotEnforced || bad.Report.ConditionalUpdate != s3task.NotEnforced {
			t.Errorf("check of a store that ignores conditional writes:\n%s", r)
		}
		if r := f.runWith(lax, "check"); r.code != exitUnavailable || !strings.Contains(r.stdout, "NOT ENFORCED") {
			t.Errorf("check table of a lax store:\n%s", r)
		}

		// Nothing listening.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closed := "http://" + l.Addr().String()
		l.Close()
		down := append(slices.Clone(f.env), "S3TASKCTL_S3_ENDPOINT="+closed, "S3TASKCTL_TIMEOUT=10s")
		for _, args := range [][]string{{"check"}, {"list"}, {"show", s3task.NewID()}, {"stats"}} {
			if r := f.runWith(down, args...); r.code != exitUnavailable {
				t.Errorf("%v against a closed port: %s", args, r)
			}
		}
		r = f.runWith(append(down, "S3TASKCTL_JSON=1"), "retry", s3task.NewID())
		var doc errorDoc
		if r.code != exitUnavailable || json.Unmarshal([]byte(r.stdout), &doc) != nil || doc.Error.Code != "unavailable" {
			t.Errorf("retry against a closed port, -json: %s", r)
		}
	})
}

// hasRow reports whether a line of a table holds the cells, in order,
// whatever the padding between them.
func hasRow(out string, cells ...string) bool {
	for line := range strings.SplitSeq(out, "\n") {
		rest := strings.Join(strings.Fields(line), " ")
		if strings.HasPrefix(rest, strings.Join(cells, " ")) {
			return true
		}
	}
	return false
}

func TestParseAge(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{"36h": 36 * time.Hour, "90m": 90 * time.Minute, "30d": 30 * 24 * time.Hour, "0d": 0} {
		if got, err := parseAge(in); err != nil || got != want {
			t.Errorf("parseAge(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range []string{"", "d", "1.5d", "x", "30 days", "-d"} {
		if got, err := parseAge(in); err == nil {
			t.Errorf("parseAge(%q) = %s, want an error", in, got)
		}
	}
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"":                     {},
		"24h":                  now.Add(-24 * time.Hour),
		"7d":                   now.Add(-7 * 24 * time.Hour),
		"2025-05-01T00:00:00Z": time.Date(2025, 5, 1, 0, 0, 0, 0, time.UTC),
	} {
		if got, err := parseSince(in, now); err != nil || !got.Equal(want) {
			t.Errorf("parseSince(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range []string{"0s", "-1h", "May 1", "yesterday"} {
		if _, err := parseSince(in, now); err == nil {
			t.Errorf("parseSince(%q) succeeded", in)
		}
	}
}

func TestParseWhen(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"now":                       {},
		"+90m":                      now.Add(90 * time.Minute),
		"+0s":                       now,
		"2025-06-02T08:00:00Z":      time.Date(2025, 6, 2, 8, 0, 0, 0, time.UTC),
		"2025-06-02T10:00:00+02:00": time.Date(2025, 6, 2, 8, 0, 0, 0, time.UTC),
	} {
		if got, err := parseWhen(in, now); err != nil || !got.Equal(want) {
			t.Errorf("parseWhen(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range []string{"", "later", "+", "+-5m", "90m", "+1d", "2025-06-02"} {
		if got, err := parseWhen(in, now); err == nil {
			t.Errorf("parseWhen(%q) = %s, want an error", in, got)
		}
	}
}

// TestStatsByType runs stats in process on the test kit's S3: unfinished
// tasks are counted by type, so that a type no worker serves shows.
func TestStatsByType(t *testing.T) {
	t.Parallel()
	srv := s3tasktest.NewS3(t)
	store := srv.NewStore(t, nil)
	// One a minute by the server's clock, the last a minute ago.
	for _, typ := range []string{"csv_enrich", "pdf_render", "csv_enrich", "", "csv_stats"} {
		s3tasktest.Submit(t, store, s3task.CreateParams{Type: typ}, []byte("a\n"))
		srv.Advance(time.Minute)
	}
	// A worker that serves csv_stats finishes its task; the others wait.
	var mux s3task.Mux
	if err := mux.HandleFunc("csv_stats", func(context.Context, *s3task.Job) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if ran := s3tasktest.Drain(t, store, &mux); len(ran) != 1 {
		t.Fatalf("drain ran %d tasks, want the csv_stats one", len(ran))
	}
	stats := func(args ...string) (int, string) {
		var out bytes.Buffer
		c := newCLI(&out, io.Discard, func(string) (string, bool) { return "", false })
		c.store = store
		return c.run(t.Context(), append([]string{"stats"}, args...)), out.String()
	}

	code, out := stats("-json")
	var st statsDoc
	if err := json.Unmarshal([]byte(out), &st); code != exitOK || err != nil {
		t.Fatalf("stats -json: exit %d, %v\n%s", code, err, out)
	}
	if diff := cmp.Diff(map[string]int{"csv_enrich": 2, "pdf_render": 1, "": 1}, st.UnfinishedByType); diff != "" {
		t.Errorf("unfinished_by_type (-want +got):\n%s", diff)
	}
	// Each type waits since its oldest task's submit, in whole minutes
	// by the server's clock, and a few moments of the machine's.
	wantWait := map[string]float64{"csv_enrich": 300, "pdf_render": 240, "": 120}
	for typ, want := range wantWait {
		if got, ok := st.WaitByType[typ]; !ok || got < want || got > want+10 {
			t.Errorf("wait_by_type[%q] = %v, want about %v s", typ, got, want)
		}
	}
	if st.OldestWaiting == nil {
		t.Fatalf("no oldest waiting task: %+v", st)
	}
	if len(st.WaitByType) != len(wantWait) || st.OldestWaitingAgeSeconds != st.WaitByType["csv_enrich"] {
		t.Errorf("wait_by_type %v, oldest waiting %+v after %v s; want the 3 waiting types, the first csv_enrich task the oldest", st.WaitByType, st.OldestWaiting, st.OldestWaitingAgeSeconds)
	}
	code, out = stats()
	for _, want := range [][]string{{"unfinished", "4"}, {"unfinished tasks by type:"}, {"(no type)", "1"}, {"csv_enrich", "2"}, {"pdf_render", "1"},
		{"longest wait by type:"}, {"(no type)", "2m0s"}, {"csv_enrich", "5m0s"}, {"pdf_render", "4m0s"}, {"oldest waiting", st.OldestWaiting.ID, "queued, due 5m0s ago"}} {
		if code != exitOK || !hasRow(out, want...) {
			t.Errorf("stats table has no row %q (exit %d)\n%s", want, code, out)
		}
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		exit int
	}{
		{fmt.Errorf("x: %w", s3task.ErrNotFound), exitNotFound},
		{&s3task.TransitionError{}, exitConflict},
		{s3task.ErrConflict, exitConflict},
		{&s3task.IDError{ID: "x"}, exitUsage},
		{s3task.ErrInvalidCursor, exitUsage},
		{fmt.Errorf("check: %w", s3task.ErrConditionalWritesUnsupported), exitUnavailable},
		{context.DeadlineExceeded, exitUnavailable},
		{fmt.Errorf("list: %w", context.Canceled), exitFailed},
		{&net.OpError{Op: "dial", Err: errors.New("refused")}, exitUnavailable},
		{&s3task.RecordError{Key: "k", Err: s3task.ErrCorruptRecord}, exitFailed},
		{errors.New("something else"), exitFailed},
		{usageErr(errors.New("bad flag")), exitUsage},
	} {
		if got, _ := classify(c.err); got != c.exit {
			t.Errorf("classify(%v) = %d, want %d", c.err, got, c.exit)
		}
	}
	var buf bytes.Buffer
	if code := runEnv(t.Context(), []string{"help"}, &buf, io.Discard, func(string) (string, bool) { return "", false }); code != exitOK || !strings.Contains(buf.String(), exitCodes) {
		t.Errorf("help in process: exit %d\n%s", code, buf.String())
	}
}
