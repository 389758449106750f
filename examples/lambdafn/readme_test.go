//go:build unix

package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/s3task/s3task/internal/s3test"
)

// TestReadmeRecipe runs the README's recipe as it is written: versitygw
// and its bucket, the function under the Lambda runtime interface
// emulator, a task run to completion by schedule-like invocations, and a
// task longer than the timeout failed, with the category timeout, by the
// fourth give-back. The only changes: the two programs are the binaries
// this test built, versitygw and aws-lambda-rie the ones .ci/run installs,
// and each address a free port. It checks the output the recipe ends
// with.
func TestReadmeRecipe(t *testing.T) {
	var bins []string
	for _, find := range []func() (string, error){s3test.GatewayBinary, s3test.RIEBinary} {
		bin, err := find()
		if err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%v (.ci/run installs it)", err)
			}
			t.Skip(err)
		}
		bins = append(bins, filepath.Dir(bin))
	}
	for _, tool := range []string{"bash", "curl", "jq", "openssl"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is not installed (.ci/run installs it): %v", tool, err)
			}
			t.Skipf("%s is not installed: %v", tool, err)
		}
	}
	dir := t.TempDir()
	for _, pkg := range []string{".", "../s3taskctl"} {
		name := map[string]string{".": "lambdafn", "../s3taskctl": "s3taskctl"}[pkg]
		if out, err := exec.Command("go", "build", "-o", filepath.Join(dir, name), pkg).CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}

	script := recipe(t)
	script = replaceOnce(t, script, "go build -o bootstrap ./examples/lambdafn", `cp "$BIN/lambdafn" bootstrap`)
	script = replaceOnce(t, script, "go build -o s3taskctl ./examples/s3taskctl", `cp "$BIN/s3taskctl" s3taskctl`)
	for _, addr := range []string{"127.0.0.1:7070", "127.0.0.1:9000", "127.0.0.1:9001"} {
		if !strings.Contains(script, addr) {
			t.Fatalf("the recipe no longer has %s:\n%s", addr, script)
		}
		script = strings.ReplaceAll(script, addr, freeAddr(t))
	}
	out := runScript(t, script, []string{
		"BIN=" + dir,
		"PATH=" + strings.Join(append(bins, os.Getenv("PATH")), string(os.PathListSeparator)),
	})
	for _, want := range []string{
		`{"lines":2,"words":5,"bytes":24}` + "\n",
		"failed timeout: attempt ",
		"(the limit is 3)",
		"released shutdown\n",
		" failed timeout\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the recipe's output lacks %q:\n%s", want, out)
		}
	}
	// The attempts the history shows end with three given back and the
	// failure, whatever invocations found nothing to start on the way.
	var outcomes []string
	for line := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(line, "attempt ") {
			_, rest, _ := strings.Cut(strings.TrimPrefix(line, "attempt "), " ")
			outcomes = append(outcomes, rest)
		}
	}
	if got, want := strings.Join(outcomes, ", "), "released shutdown, released shutdown, released shutdown, failed timeout"; !strings.HasSuffix(got, want) {
		t.Errorf("the attempts: %s; want them to end with %s", got, want)
	}
}

// recipe returns the README's sh block that follows the text naming this
// test.
func recipe(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "`TestReadmeRecipe` runs as it is written here:")
	if ok {
		_, rest, ok = strings.Cut(rest, "```sh\n")
	}
	script, _, closed := strings.Cut(rest, "\n```")
	if !ok || !closed {
		t.Fatal("README.md: no sh block after the sentence naming TestReadmeRecipe")
	}
	return script
}

// replaceOnce replaces old, which must occur exactly once in s: a recipe
// that moved on fails the test rather than runs something else.
func replaceOnce(t *testing.T, s, old, new string) string {
	t.Helper()
	if n := strings.Count(s, old); n != 1 {
		t.Fatalf("the recipe has %q %d times, want once:\n%s", old, n, s)
	}
	return strings.Replace(s, old, new, 1)
}

// freeAddr returns a 127.0.0.1 address with a port free at the moment.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// runScript runs script under bash -eu -o pipefail in a folder of its
// own, with env added, and returns its standard output; whatever it started in the background is
// killed with its process group when it ends. It has no time limit of its
// own (a busy machine makes it slow, not wrong): one that never ends is
// killed a minute before go test's deadline, and the test fails with its
// output and the logs it left.
func runScript(t *testing.T, script string, env []string) string {
	t.Helper()
	ctx := t.Context()
	if deadline, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline.Add(-time.Minute))
		defer cancel()
	}
	dir := t.TempDir()
	began := time.Now()
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
	t.Logf("the recipe ran for %s", time.Since(began).Round(time.Millisecond))
	if err != nil {
		var logs strings.Builder
		files, _ := filepath.Glob(filepath.Join(dir, "*.log"))
		for _, f := range files {
			b, _ := os.ReadFile(f)
			logs.WriteString(filepath.Base(f) + ":\n" + string(b) + "\n")
		}
		t.Fatalf("the recipe failed: %v\nstdout:\n%s\nstderr:\n%s\nthe logs it left:\n%s", err, &stdout, &stderr, &logs)
	}
	return stdout.String()
}
