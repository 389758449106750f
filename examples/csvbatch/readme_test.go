//go:build unix

package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/s3task/s3task/internal/s3test"
)

// TestReadmeCurlFlow runs the curl flows of the READMEs as they are
// written, against this program on a real S3 server (versitygw, which
// checks every signature), and checks the output they end with. The only
// changes made to each script: the program is the binary this test built,
// pointed at the server, on a free port. A presigned PUT sent without the
// headers it was signed with, or a flow that races the program's start,
// fails here.
func TestReadmeCurlFlow(t *testing.T) {
	rc := s3test.RemoteT(t)
	for _, tool := range []string{"bash", "curl", "jq", "openssl"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is not installed (.ci/run installs it): %v", tool, err)
			}
			t.Skipf("%s is not installed: %v", tool, err)
		}
	}
	bin := filepath.Join(t.TempDir(), "csvbatch")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := rc.Client(func(http.RoundTripper) http.RoundTripper { return tr })
	for _, doc := range []struct{ file, after string }{
		{"README.md", "## The flow with curl"},
		{"../../README.md", "The same flow with `curl`"},
	} {
		t.Run(doc.file, func(t *testing.T) {
			script := readmeScript(t, doc.file, doc.after)
			bucket, err := s3test.NewBucket(t.Context(), client, "readme")
			if err != nil {
				t.Fatal(err)
			}
			addr := freeAddr(t)
			script = replaceOnce(t, script, "go run ./examples/csvbatch &", `"$CSVBATCH_BIN" $CSVBATCH_FLAGS >service.log 2>&1 &`)
			script = replaceOnce(t, script, "API=http://127.0.0.1:8080", "API=http://"+addr)
			out := runScript(t, script, []string{
				"CSVBATCH_BIN=" + bin,
				"CSVBATCH_FLAGS=-listen " + addr + " -bucket " + bucket + " -s3-endpoint " + rc.Endpoint + " -s3-path-style -poll 100ms",
				"AWS_ACCESS_KEY_ID=" + rc.AccessKey, "AWS_SECRET_ACCESS_KEY=" + rc.SecretKey, "AWS_REGION=us-east-1",
			})
			for _, want := range []string{"Ada Lovelace,ada@example.com,ok", "Bob,,error: missing email"} {
				if !strings.Contains(out, want) {
					t.Errorf("the flow's output lacks %q:\n%s", want, out)
				}
			}
		})
	}
}

// TestReadmeVersitygw runs the README's versitygw recipe as it is
// written: csvbatch first, then versitygw with the same credentials and a
// webhook to csvbatch's -events-listen, the bucket made with curl, a file
// put in incoming/ and its task awaited. The only changes: csvbatch is the
// binary this test built, versitygw the one .ci/run installs, and each of
// the recipe's three addresses a free port (CSVBATCH_LISTEN moves the API
// from its default, 127.0.0.1:8080, with the recipe's API=). It fails if the recipe does
// not start (in either order), if the file's task does not complete, and
// if its event did not reach the ingest (which the webhook metric the
// recipe prints says, whenever the task was made).
func TestReadmeVersitygw(t *testing.T) {
	gw, err := s3test.GatewayBinary()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("versitygw is not installed (.ci/run installs it): %v", err)
		}
		t.Skip(err)
	}
	for _, tool := range []string{"bash", "curl", "jq", "openssl"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is not installed (.ci/run installs it): %v", tool, err)
			}
			t.Skipf("%s is not installed: %v", tool, err)
		}
	}
	bin := filepath.Join(t.TempDir(), "csvbatch")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	script := readmeScript(t, "README.md", "The whole recipe, which\n`TestReadmeVersitygw` runs")
	script = replaceOnce(t, script, "go run ./examples/csvbatch ", `"$CSVBATCH_BIN" `)
	var api string
	for _, addr := range []string{"127.0.0.1:7070", "127.0.0.1:8081", "127.0.0.1:8080"} {
		if !strings.Contains(script, addr) {
			t.Fatalf("the recipe no longer has %s:\n%s", addr, script)
		}
		api = freeAddr(t)
		script = strings.ReplaceAll(script, addr, api)
	}
	out := runScript(t, script, []string{
		"CSVBATCH_BIN=" + bin,
		"CSVBATCH_LISTEN=" + api,
		"PATH=" + filepath.Dir(gw) + string(os.PathListSeparator) + os.Getenv("PATH"),
	})
	if !strings.Contains(out, "june.csv completed, 2 rows\n") {
		t.Errorf("the recipe's output lacks the file's completed task:\n%s", out)
	}
	_, count, found := strings.Cut(out, `s3task_webhook_events_total{to="ingest"} `)
	count, _, _ = strings.Cut(count, "\n")
	if n, err := strconv.Atoi(count); !found || err != nil || n < 1 {
		t.Errorf("events of the file that reached the ingest: %q; want at least 1:\n%s", count, out)
	}
}

// scriptMargin is how long before go test's deadline runScript kills a
// script that has not ended.
const scriptMargin = 30 * time.Second

// readmeScript returns the first sh block of file after the text after.
func readmeScript(t *testing.T, file, after string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), after)
	if !ok {
		t.Fatalf("%s: no %q", file, after)
	}
	_, rest, ok = strings.Cut(rest, "```sh\n")
	script, _, closed := strings.Cut(rest, "\n```")
	if !ok || !closed {
		t.Fatalf("%s: no sh block after %q", file, after)
	}
	return script
}

// replaceOnce replaces old, which must occur exactly once in s: a README
// that moves on fails the test rather than runs something else.
func replaceOnce(t *testing.T, s, old, new string) string {
	t.Helper()
	if n := strings.Count(s, old); n != 1 {
		t.Fatalf("the script has %q %d times, want once:\n%s", old, n, s)
	}
	return strings.Replace(s, old, new, 1)
}

// runScript runs script under bash -eu -o pipefail in a folder of its own,
// with env added, and returns its standard output. Whatever it leaves
// running (the programs it starts in the background) is killed with its
// process group. If it fails, the test fails with its output and the *.log
// files it left.
//
// The script has no time limit of its own: a slow machine makes it slow,
// never a failure. One that never ends (a flow that waits for what never
// comes) is killed scriptMargin before go test's deadline, so that the
// test fails with the script's output rather than the test binary with a
// panic.
func runScript(t *testing.T, script string, env []string) string {
	t.Helper()
	ctx := t.Context()
	if deadline, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline.Add(-scriptMargin))
		defer cancel()
	}
	began := time.Now()
	defer func() { t.Logf("the script ran for %s", time.Since(began).Round(time.Millisecond)) }()
	dir := t.TempDir()
	cmd := exec.CommandContext(ctx, "bash", "-eu", "-o", "pipefail", "-c", script)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if err != nil {
		var logs strings.Builder
		files, _ := filepath.Glob(filepath.Join(dir, "*.log"))
		for _, f := range files {
			b, _ := os.ReadFile(f)
			fmt.Fprintf(&logs, "%s:\n%s\n", filepath.Base(f), b)
		}
		t.Fatalf("the script failed: %v\nstdout:\n%s\nstderr:\n%s\nthe logs it left:\n%s", err, &stdout, &stderr, &logs)
	}
	return stdout.String()
}
