package s3task_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/s3tasktest"
)

// spoolFiles returns the names of the files named s3task-* in dir.
func spoolFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "s3task-*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// openSpoolFiles returns how many of this process's open files are spool
// files in dir that were unlinked: Linux shows them in /proc/self/fd as
// "<dir>/s3task-... (deleted)".
func openSpoolFiles(t *testing.T, dir string) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err == nil && strings.HasPrefix(target, filepath.Join(dir, "s3task-")) && strings.HasSuffix(target, " (deleted)") {
			n++
		}
	}
	return n
}

func needLinux(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("unlink-on-create is checked through /proc on Linux")
	}
}

// TestSpoolDirOutputUnlinked: CreateOutput spools to a file in
// StoreOptions.SpoolDir that no one can see there, and the output still
// arrives whole.
func TestSpoolDirOutputUnlinked(t *testing.T) {
	needLinux(t)
	dir := t.TempDir()
	store := s3tasktest.NewS3(t).NewStore(t, &s3task.StoreOptions{SpoolDir: dir})
	task := s3tasktest.Submit(t, store, s3task.CreateParams{Name: "spooled"}, []byte("in"))
	want := strings.Repeat("row,1\n", 10000)
	var seen []string
	var open int
	res := s3tasktest.Run(t, store, s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		out, err := job.CreateOutput(ctx)
		if err != nil {
			return err
		}
		if _, err := io.WriteString(out, want); err != nil {
			return err
		}
		seen, open = spoolFiles(t, dir), openSpoolFiles(t, dir)
		return out.Close()
	}), task.ID)
	if res.Err != nil || res.Task.Status != s3task.StatusCompleted {
		t.Fatalf("attempt: err %v, status %s", res.Err, res.Task.Status)
	}
	if len(seen) != 0 {
		t.Errorf("while the output was written, %s held %q", dir, seen)
	}
	if open != 1 {
		t.Errorf("%d unlinked spool files of %s open while the output was written, want 1", open, dir)
	}
	if string(res.Output) != want {
		t.Errorf("output is %d bytes, want %d", len(res.Output), len(want))
	}
	if left := spoolFiles(t, dir); len(left) != 0 || openSpoolFiles(t, dir) != 0 {
		t.Errorf("after the attempt: files %q, %d still open", left, openSpoolFiles(t, dir))
	}
}

// TestSpoolDirUploadUnlinked: a reader that cannot seek, given to
// WriteOutput or UploadInput, is spooled to SpoolDir invisibly while its
// PUT is under way.
func TestSpoolDirUploadUnlinked(t *testing.T) {
	needLinux(t)
	dir := t.TempDir()
	srv := s3tasktest.NewS3(t)
	var mu sync.Mutex
	var during []string
	puts, open := 0, 0
	store := srv.NewStore(t, &s3task.StoreOptions{SpoolDir: dir}, func(next http.RoundTripper) http.RoundTripper {
		return s3tasktest.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodPut && (strings.Contains(r.URL.Path, "/input") || strings.Contains(r.URL.Path, "/output-attempt-")) {
				mu.Lock()
				puts++
				during = append(during, spoolFiles(t, dir)...)
				open += openSpoolFiles(t, dir)
				mu.Unlock()
			}
			return next.RoundTrip(r)
		})
	})
	ctx := t.Context()
	task, err := store.Create(ctx, s3task.CreateParams{Name: "piped"})
	if err != nil {
		t.Fatal(err)
	}
	input := strings.Repeat("a,b\n", 5000)
	if err := store.UploadInput(ctx, task.ID, io.MultiReader(strings.NewReader(input))); err != nil {
		t.Fatalf("UploadInput: %v", err)
	}
	if _, err := store.Submit(ctx, task.ID); err != nil {
		t.Fatal(err)
	}
	res := s3tasktest.Run(t, store, s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		in, err := job.OpenInput(ctx)
		if err != nil {
			return err
		}
		defer in.Close()
		return job.WriteOutput(ctx, io.MultiReader(in)) // cannot seek: spooled
	}), task.ID)
	if res.Err != nil || string(res.Output) != input {
		t.Fatalf("attempt: err %v, output %d bytes, want %d", res.Err, len(res.Output), len(input))
	}
	mu.Lock()
	defer mu.Unlock()
	if puts != 2 || len(during) != 0 || open != 2 {
		t.Errorf("%d PUTs of the input and output; files seen in %s during them %q; %d unlinked spool files open, want 2, none, 2", puts, dir, during, open)
	}
}

// TestSpoolSweep: a worker that starts running removes the s3task-* files
// of SpoolDir older than SpoolStaleAfter, and nothing else.
func TestSpoolSweep(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-s3task.SpoolStaleAfter - time.Minute)
	plant := func(name string, mod time.Time) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("left over"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mod, mod); err != nil {
			t.Fatal(err)
		}
		return p
	}
	stale := plant("s3task-output-123", old)
	fresh := plant("s3task-456", time.Now().Add(-time.Minute))
	other := plant("report.csv", old)
	store := s3tasktest.NewS3(t).NewStore(t, &s3task.StoreOptions{SpoolDir: dir})
	stop := runWorker(t, store, succeed, quickWorker("sweeper", s3task.Hooks{}))
	waitUntil(t, "the stale spool file to go", func() bool {
		_, err := os.Stat(stale)
		return errors.Is(err, os.ErrNotExist)
	})
	stop()
	for _, p := range []string{fresh, other} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: %v; want it kept", p, err)
		}
	}
}

// TestSpoolDirInvalid: NewStore refuses a SpoolDir that is missing or not a
// folder.
func TestSpoolDirInvalid(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	client := s3tasktest.NewS3(t).Client()
	for _, d := range []string{filepath.Join(dir, "missing"), file} {
		if _, err := s3task.NewStore(client, "b", &s3task.StoreOptions{SpoolDir: d}); !errors.Is(err, s3task.ErrInvalidOptions) || !strings.Contains(err.Error(), "SpoolDir") {
			t.Errorf("SpoolDir %q: NewStore = %v, want ErrInvalidOptions naming SpoolDir", d, err)
		}
	}
	if _, err := s3task.NewStore(client, "b", &s3task.StoreOptions{SpoolDir: dir}); err != nil {
		t.Errorf("SpoolDir %q: %v", dir, err)
	}
}

// TestInputContentTypePinned: with StoreOptions.InputContentType the
// presigned PUT signs Content-Type (the client must send it as given) and
// the POST form's policy requires it, with the field in Fields. Without
// it, neither names a type.
func TestInputContentTypePinned(t *testing.T) {
	e := newEnv(t, nil)
	pinned := e.newStore(t, &s3task.StoreOptions{InputContentType: "text/csv"})
	_, up, err := pinned.CreateForUpload(e.ctx, s3task.CreateParams{Name: "pinned"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got := up.Put.Header.Get("Content-Type"); got != "text/csv" {
		t.Errorf("PUT header Content-Type %q, want text/csv", got)
	}
	u, err := url.Parse(up.Put.URL)
	if err != nil {
		t.Fatal(err)
	}
	if signed := strings.Split(u.Query().Get("X-Amz-SignedHeaders"), ";"); !contains(signed, "content-type") || !contains(signed, "if-none-match") {
		t.Errorf("signed headers %q, want content-type and if-none-match among them", signed)
	}
	if got := up.Form.Fields["Content-Type"]; got != "text/csv" {
		t.Errorf("form field Content-Type %q, want text/csv", got)
	}
	if conds := policyConditions(t, up.Form.Fields["policy"]); !strings.Contains(conds, `["eq","$Content-Type","text/csv"]`) {
		t.Errorf("policy conditions %s lack the Content-Type", conds)
	}
	// Sent as given, the upload goes through (gofakes3 checks no
	// signatures, so the refusal of another type is the conformance
	// suite's to show).
	req, err := http.NewRequestWithContext(e.ctx, up.Put.Method, up.Put.URL, strings.NewReader("a,b\n"))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range up.Put.Header {
		if !strings.EqualFold(k, "Host") {
			req.Header[k] = vs
		}
	}
	resp, err := e.httpClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Errorf("presigned PUT with its headers: %s", resp.Status)
	}

	_, plain, err := e.store.CreateForUpload(e.ctx, s3task.CreateParams{Name: "plain"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := plain.Put.Header["Content-Type"]; ok {
		t.Errorf("unpinned PUT header %v names a Content-Type", plain.Put.Header)
	}
	if _, ok := plain.Form.Fields["Content-Type"]; ok || strings.Contains(policyConditions(t, plain.Form.Fields["policy"]), "Content-Type") {
		t.Errorf("unpinned form names a Content-Type: %v", plain.Form.Fields)
	}
	for _, bad := range []string{"text", "text/csv\r\nX: y", "/"} {
		if _, err := s3task.NewStore(e.srv.Client(), "b", &s3task.StoreOptions{InputContentType: bad}); !errors.Is(err, s3task.ErrInvalidOptions) {
			t.Errorf("InputContentType %q: NewStore = %v, want ErrInvalidOptions", bad, err)
		}
	}
}

func contains(ss []string, s string) bool {
	for _, v := range ss {
		if v == s {
			return true
		}
	}
	return false
}

// policyConditions returns the conditions of a POST form's policy as JSON.
func policyConditions(t *testing.T, policy string) string {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(policy)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Conditions json.RawMessage `json:"conditions"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	return string(doc.Conditions)
}
