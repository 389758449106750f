package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/s3task/s3task"
)

// silentS3 is a transport to an S3 that never answers: each request
// waits until its context ends. It records each request's method, when
// it was sent, and its context's deadline.
type silentS3 struct {
	mu   sync.Mutex
	sent []silentRequest
}

type silentRequest struct {
	method   string
	at       time.Time
	deadline time.Time // zero: none
}

func (s *silentS3) RoundTrip(req *http.Request) (*http.Response, error) {
	d, _ := req.Context().Deadline()
	s.mu.Lock()
	s.sent = append(s.sent, silentRequest{req.Method, time.Now(), d})
	s.mu.Unlock()
	<-req.Context().Done()
	return nil, req.Context().Err()
}

// TestTimeoutBoundsCheck: with S3 frozen, "check -timeout 5s" returns by
// its deadline, clean-up included: the check leaves the clean-up time
// within the deadline, and every request, the clean-up's DELETE too, has
// the command's deadline. It runs in a synctest bubble, so time is the
// bubble's: the bound is exact, and does not depend on the machine being
// idle.
func TestTimeoutBoundsCheck(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "testsecret")
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_CONFIG_FILE", t.TempDir()+"/no-config")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", t.TempDir()+"/no-credentials")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	// A CA bundle would need the SDK's own HTTP client; the test's sends
	// nothing anywhere.
	t.Setenv("AWS_CA_BUNDLE", "")
	os.Unsetenv("AWS_CA_BUNDLE")
	synctest.Test(t, func(t *testing.T) {
		s3 := &silentS3{}
		var out, errOut bytes.Buffer
		c := newCLI(&out, &errOut, func(string) (string, bool) { return "", false })
		c.set.s3.HTTPClient = &http.Client{Transport: s3}
		const timeout = 5 * time.Second
		start := time.Now()
		deadline := start.Add(timeout)
		code := c.run(t.Context(), []string{"-bucket", "tasks", "-s3-endpoint", "http://s3.test", "-s3-path-style",
			"-timeout", timeout.String(), "-json", "check"})
		if took := time.Since(start); took > timeout {
			t.Errorf("check -timeout %s returned after %s", timeout, took)
		}
		if code != exitUnavailable {
			t.Errorf("exit %d, want %d\n%s%s", code, exitUnavailable, out.String(), errOut.String())
		}
		checkShape(t, "`check`", out.String())
		var doc checkDoc
		dec := json.NewDecoder(&out)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&doc); err != nil || dec.More() {
			t.Fatalf("stdout is not one check document: %v\n%s", err, out.String())
		}
		if doc.Reachable || doc.Error == nil || doc.Error.ExitCode != exitUnavailable || doc.Error.Code != "unavailable" || doc.Error.Message == "" {
			t.Errorf("check of a frozen S3: %+v, error %+v", doc, doc.Error)
		}

		s3.mu.Lock()
		defer s3.mu.Unlock()
		var methods []string
		for _, r := range s3.sent {
			methods = append(methods, r.method)
			if r.deadline.IsZero() || r.deadline.After(deadline) {
				t.Errorf("%s sent at +%s with deadline %v; want the command's, +%s, or earlier", r.method, r.at.Sub(start), r.deadline, timeout)
			}
		}
		i := slices.Index(methods, http.MethodDelete)
		if !slices.Contains(methods, http.MethodPut) || i < 0 {
			t.Fatalf("requests %v: want the probe's PUT and the clean-up's DELETE", methods)
		}
		if at := s3.sent[i].at; !at.Before(deadline) {
			t.Errorf("the clean-up's DELETE was sent at +%s, not within -timeout", at.Sub(start))
		}
	})
}

// TestExitCodesAgree: a task a command does not fit ends the command
// with the same exit code and error code whether it is named alone (the
// one-task path) or with others, or in a dry run (the bulk path); a task
// a filter chose and the action skipped is no error. Every failure's
// -json document has its error object.
func TestExitCodesAgree(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "")
	run := func(args ...string) (int, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		c := newCLI(&out, &errOut, func(string) (string, bool) { return "", false })
		c.store = f.store
		return c.run(t.Context(), append(args, "-json")), out.String()
	}
	for _, tc := range []struct {
		action string
		state  string // the task's, "" for one that does not exist
		extra  []string
		exit   int
		code   string
	}{
		{"cancel", "abandoned", nil, exitConflict, "invalid_transition"},
		{"cancel", "completed", nil, exitConflict, "invalid_transition"},
		{"cancel", "", nil, exitNotFound, "not_found"},
		{"cancel", "queued", nil, exitOK, ""},
		{"cancel", "failed", nil, exitOK, ""},
		{"retry", "queued", nil, exitConflict, "invalid_transition"},
		{"retry", "abandoned", nil, exitConflict, "invalid_transition"},
		{"retry", "", nil, exitNotFound, "not_found"},
		{"retry", "failed", nil, exitOK, ""},
	} {
		for _, path := range []string{"one", "several", "dry run"} {
			t.Run(tc.action+" "+cmpOr(tc.state, "missing")+", "+path, func(t *testing.T) {
				id := s3task.NewID()
				if tc.state != "" {
					id = f.task(f.store, tc.state, tc.action+" "+path).ID
				}
				args := []string{tc.action, id}
				switch path {
				case "several":
					// With a task the action fits: it is done, and the
					// other still decides the exit code.
					fits := "queued"
					if tc.action == "retry" {
						fits = "failed"
					}
					args = append(args, f.task(f.store, fits, "fits").ID)
				case "dry run":
					args = append(args, "-dry-run")
				}
				code, out := run(args...)
				if code != tc.exit {
					t.Fatalf("s3taskctl %s: exit %d, want %d\n%s", strings.Join(args, " "), code, tc.exit, out)
				}
				var doc struct {
					Error *errorBody `json:"error"`
				}
				if err := json.Unmarshal([]byte(out), &doc); err != nil {
					t.Fatalf("stdout is not JSON: %v\n%s", err, out)
				}
				switch {
				case tc.exit == exitOK && doc.Error != nil:
					t.Errorf("s3taskctl %s: exit 0 with an error object %+v", strings.Join(args, " "), doc.Error)
				case tc.exit != exitOK && (doc.Error == nil || doc.Error.Code != tc.code || doc.Error.ExitCode != tc.exit || doc.Error.Message == ""):
					t.Errorf("s3taskctl %s: error object %+v, want code %q and exit_code %d\n%s", strings.Join(args, " "), doc.Error, tc.code, tc.exit, out)
				}
			})
		}
	}

	// A filter reads what the action does not fit too: skipping it is
	// no error.
	f.task(f.store, "abandoned", "chosen by a filter")
	if code, out := run("cancel", "-status", "abandoned"); code != exitOK || !strings.Contains(out, `"skipped"`) {
		t.Errorf("cancel -status abandoned: exit %d, want 0\n%s", code, out)
	}
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// TestFailuresHaveErrorObject: a command that fails after printing its
// own -json document (a bulk report, watch's task, check's report; see
// TestTimeoutBoundsCheck) puts the error object in it, as every failure's
// document has one.
func TestFailuresHaveErrorObject(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "")
	run := func(args ...string) (int, map[string]json.RawMessage) {
		t.Helper()
		var out, errOut bytes.Buffer
		c := newCLI(&out, &errOut, func(string) (string, bool) { return "", false })
		c.store = f.store
		code := c.run(t.Context(), append([]string{"-json"}, args...))
		var doc map[string]json.RawMessage
		if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
			t.Fatalf("s3taskctl %s: stdout is not one JSON object: %v\n%s", strings.Join(args, " "), err, out.String())
		}
		return code, doc
	}
	failed := f.task(f.store, "failed", "watched")
	abandoned := f.task(f.store, "abandoned", "cancelled twice")
	for _, tc := range []struct {
		args []string
		exit int
		code string
		has  string // a key of the command's own document
	}{
		{[]string{"watch", failed.ID}, exitFailed, "task_failed", "task_id"},
		{[]string{"watch", abandoned.ID}, exitFailed, "task_abandoned", "task_id"},
		{[]string{"cancel", abandoned.ID, failed.ID, "-dry-run"}, exitConflict, "invalid_transition", "results"},
		{[]string{"cancel", abandoned.ID}, exitConflict, "invalid_transition", ""},
		{[]string{"retry", s3task.NewID()}, exitNotFound, "not_found", ""},
		{[]string{"nosuch"}, exitUsage, "usage", ""},
	} {
		code, doc := run(tc.args...)
		var e errorBody
		if err := json.Unmarshal(doc["error"], &e); code != tc.exit || err != nil || e.Code != tc.code || e.ExitCode != tc.exit || e.Message == "" {
			t.Errorf("s3taskctl -json %s: exit %d (want %d), error %s (want code %q)", strings.Join(tc.args, " "), code, tc.exit, doc["error"], tc.code)
		}
		if _, ok := doc[tc.has]; tc.has != "" && !ok {
			t.Errorf("s3taskctl -json %s: no %q in its document", strings.Join(tc.args, " "), tc.has)
		}
	}
}
