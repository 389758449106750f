package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestRun starts the program as main does, reads the addresses it prints,
// uses the page and the API, and stops it through its context.
func TestRun(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := run(ctx, []string{"-listen", "127.0.0.1:0", "-data", t.TempDir(), "-poll", "50ms"}, pw, io.Discard)
		pw.CloseWithError(errors.New("run returned"))
		done <- err
	}()

	lines := bufio.NewScanner(pr)
	var page, warning string
	for lines.Scan() {
		line := lines.Text()
		if rest, ok := strings.CutPrefix(line, "csvbatch: page"); ok {
			page = strings.TrimSpace(rest)
		}
		if strings.Contains(line, "WARNING: no token") {
			warning = line
			break // the banner's last part
		}
	}
	go io.Copy(io.Discard, pr) // keep the rest of the output flowing
	if page == "" || warning == "" {
		cancel()
		t.Fatalf("banner without page address or warning (page %q): %v", page, <-done)
	}

	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	for _, c := range []struct{ path, header, want string }{
		{"", "Content-Security-Policy", "script-src 'self'"},
		{"static/app.js", "Content-Type", "javascript"},
		{"tasks", "Content-Type", "application/json"}, // open mode: no token needed
	} {
		resp, err := client.Get(page + c.path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get(c.header); resp.StatusCode != http.StatusOK || !strings.Contains(got, c.want) {
			t.Errorf("GET %s: %d, %s %q; want 200 and %q in it", page+c.path, resp.StatusCode, c.header, got, c.want)
		}
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("run did not return after its context was cancelled")
	}
}

func TestRunRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"public address without a token", []string{"-listen", "0.0.0.0:0", "-data", ""}, "refusing to listen on 0.0.0.0:0 without a token"},
		{"all interfaces without a token", []string{"-listen", ":0", "-data", ""}, "refusing to listen"},
		{"unknown mode", []string{"-mode", "everything"}, `-mode "everything"`},
		{"short token", []string{"-token", "abc"}, "at least 16"},
		{"bad caller name", []string{"-token", "a b:0123456789abcdef"}, "caller name"},
		{"embedded S3 on a public address", []string{"-s3-listen", "0.0.0.0:9000"}, "loopback"},
		{"endpoint without bucket", []string{"-s3-endpoint", "http://127.0.0.1:9000"}, "need -bucket"},
		{"bad size", []string{"-max-input-size", "lots"}, "invalid size"},
		{"selftest without worker", []string{"-mode", "api", "-selftest-rows", "10"}, "needs a worker"},
		{"stray argument", []string{"serve"}, "unexpected arguments"},
		{"presign lifetime", []string{"-upload-ttl", "0s"}, "-upload-ttl 0s"},
		// Every event path offered is live: a webhook that would pass its
		// deliveries to nothing is refused.
		{"events to a worker without a listener", []string{"-mode", "worker", "-events-token", "hook-secret"}, "-events-token with -mode worker needs -events-listen"},
		{"events to an api process without ingest", []string{"-mode", "api", "-events-token", "hook-secret"}, "-events-token with -mode api needs -ingest"},
		{"events listener without a token", []string{"-events-listen", "127.0.0.1:0"}, "-events-listen needs -events-token"},
		{"events in a selftest", []string{"-events-token", "hook-secret", "-selftest-rows", "10"}, "nothing to serve"},
		{"negative S3 wait", []string{"-s3-wait", "-1s"}, "-s3-wait -1s"},
		{"summary schedule", []string{"-summary-schedule", "hourly"}, `-summary-schedule: schedule "hourly"`},
		{"summary period too short", []string{"-summary-schedule", "every:10s"}, "at least 1m0s"},
		{"ingest into a type without input", []string{"-ingest", "incoming/", "-ingest-type", typeSummary}, `-ingest-type "task_summary": want one of csv_enrich, csv_stats`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := run(t.Context(), tc.args, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("run(%q) = %v, want an error containing %q", tc.args, err, tc.want)
			}
		})
	}
	if err := run(t.Context(), []string{"-h"}, io.Discard, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("run(-h) = %v, want flag.ErrHelp", err)
	}
}

// TestSelftest runs the -selftest-rows mode on a small input.
func TestSelftest(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	err := run(t.Context(), []string{"-listen", "127.0.0.1:0", "-data", "", "-poll", "20ms", "-selftest-rows", "3000"}, &out, io.Discard)
	if err != nil {
		t.Fatalf("selftest: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "3000 rows, 2640 ok, 360 bad; output 3000 rows, 2640 ok") {
		t.Errorf("selftest output:\n%s", out.String())
	}
}

func TestEnvironmentConfig(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"CSVBATCH_TOKEN":          "bob:0123456789abcdef0",
		"CSVBATCH_MAX_INPUT_SIZE": "2MiB",
		"CSVBATCH_MODE":           "worker",
		"CSVBATCH_CONCURRENCY":    "4",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	cfg, err := parseConfig([]string{"-concurrency", "3"}, lookup, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	got := []any{cfg.tokens, int64(cfg.maxInput), cfg.mode, cfg.concurrency}
	want := []any{"bob:0123456789abcdef0", int64(2 << 20), modeWorker, 3} // the flag beats the environment
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	env["CSVBATCH_CONCURRENCY"] = "many"
	if _, err := parseConfig(nil, lookup, io.Discard); err == nil || !strings.Contains(err.Error(), "CSVBATCH_CONCURRENCY") {
		t.Errorf("bad environment value: %v", err)
	}
}

func TestByteSize(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{
		"0": 0, "1024": 1024, "64KiB": 64 << 10, "100MiB": 100 << 20, "2GiB": 2 << 30,
		"250MB": 250e6, "1kb": 1000, "7B": 7, " 3 MiB ": 3 << 20,
	} {
		var b byteSize
		if err := b.Set(in); err != nil || int64(b) != want {
			t.Errorf("Set(%q) = %d, %v; want %d", in, b, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "-1", "1.5MiB", "10TB", "99999999999GiB"} {
		var b byteSize
		if err := b.Set(in); err == nil {
			t.Errorf("Set(%q) = %d, want an error", in, b)
		}
	}
}

func TestTokens(t *testing.T) {
	t.Parallel()
	creds, err := parseTokens(" 0123456789abcdef , carol:fedcba9876543210 ,")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range creds {
		names = append(names, c.name)
	}
	if diff := cmp.Diff([]string{defaultCaller, "carol"}, names); diff != "" {
		t.Errorf("callers (-want +got):\n%s", diff)
	}
	if _, err := parseTokens("a:0123456789abcdef,b:0123456789abcdef"); err == nil {
		t.Error("the same secret twice was accepted")
	}
}
