// Command s3gw runs a command next to real S3 servers it starts for it on
// 127.0.0.1, each in a temporary folder: versitygw with its posix backend,
// and SeaweedFS ("weed server": master, volume server, filer and S3
// gateway in one process). Both start at once, to save time:
//
//	go run ./internal/cmd/s3gw -- go test -race -count=1 ./...
//
// The command gets versitygw's address and credentials in
// S3TASK_TEST_ENDPOINT, S3TASK_TEST_ACCESS_KEY and S3TASK_TEST_SECRET_KEY,
// SeaweedFS's in S3TASK_TEST_SEAWEEDFS_ENDPOINT,
// S3TASK_TEST_SEAWEEDFS_ACCESS_KEY and S3TASK_TEST_SEAWEEDFS_SECRET_KEY,
// and the binaries' paths in S3TASK_VERSITYGW_BIN and S3TASK_SEAWEEDFS_BIN
// so that tests can start servers of their own. When the command ends, the
// servers are stopped and their folders removed, and s3gw exits with the
// command's status. -bucket creates a bucket of that name on each server
// first, for a command such as s3taskctl that expects one. Without the
// weed binary s3gw runs versitygw alone and SeaweedFS's tests skip, except
// under CI=true, where it fails; -servers names the servers to start, each
// then required.
//
// The binaries are found as internal/s3test.GatewayBinary and
// SeaweedBinary say: the variables above, PATH, or .cache/bin in the
// module. Install them with
//
//	GOBIN=$PWD/.cache/bin go install github.com/versity/versitygw/cmd/versitygw@v1.8.0
//	bash .ci/seaweedfs.sh
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/s3task/s3task/internal/s3test"
)

func main() {
	os.Exit(run())
}

func run() int {
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: s3gw [-keep] [-servers list] -- command [args...]\n\n"+
			"Runs command next to versitygw and SeaweedFS servers on 127.0.0.1, with their\n"+
			"addresses and credentials in %s (%s, %s)\nand %s (%s, %s).\n\n",
			s3test.EnvEndpoint, s3test.EnvAccessKey, s3test.EnvSecretKey,
			s3test.EnvSeaweedEndpoint, s3test.EnvSeaweedAccessKey, s3test.EnvSeaweedSecretKey)
		flag.PrintDefaults()
	}
	keep := flag.Bool("keep", false, "keep the servers' folders and logs after the command ends")
	timeout := flag.Duration("start-timeout", 90*time.Second, "how long to wait for each server to answer")
	bucket := flag.String("bucket", "", "create this bucket on every server before the command runs")
	servers := flag.String("servers", "", "comma-separated servers to start, each required: versitygw, seaweedfs\n"+
		"(default: versitygw, and seaweedfs if its binary is found; under CI=true both are required)")
	flag.Parse()
	args := flag.Args()
	if len(args) == 0 {
		flag.Usage()
		return 2
	}
	want := map[string]bool{}
	list := *servers
	if list == "" {
		list = "versitygw,seaweedfs"
		if _, err := s3test.SeaweedBinary(); err != nil && os.Getenv("CI") != "true" {
			fmt.Fprintf(os.Stderr, "s3gw: no SeaweedFS, so its tests will skip (%v)\n", err)
			list = "versitygw"
		}
	}
	for _, name := range strings.Split(list, ",") {
		switch name = strings.TrimSpace(name); name {
		case "versitygw", "seaweedfs":
			want[name] = true
		case "":
		default:
			fmt.Fprintf(os.Stderr, "s3gw: unknown server %q in -servers\n", name)
			return 2
		}
	}

	tmp, err := os.MkdirTemp("", "s3gw-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "s3gw:", err)
		return 2
	}
	if *keep {
		fmt.Fprintln(os.Stderr, "s3gw: server folders and logs in", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}

	// Stop the servers and the command on an interrupt instead of dying and
	// leaving the servers behind.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)

	// Start the servers at once: SeaweedFS takes some seconds to serve.
	ctx := context.Background()
	var (
		mu    sync.Mutex
		env   []string
		stops []func() error
		errs  []error
		wg    sync.WaitGroup
	)
	add := func(vars []string, stop func() error, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs = append(errs, err)
			return
		}
		env = append(env, vars...)
		stops = append(stops, stop)
	}
	defer func() {
		for _, stop := range stops {
			if err := stop(); err != nil {
				fmt.Fprintln(os.Stderr, "s3gw:", err)
			}
		}
	}()
	for _, sv := range kinds(ctx, *timeout) {
		if !want[sv.name] {
			continue
		}
		wg.Go(func() {
			bin, err := sv.binary()
			if err != nil {
				add(nil, nil, err)
				return
			}
			begin := time.Now()
			run, err := sv.start(bin, filepath.Join(tmp, sv.name))
			if err != nil {
				add(nil, nil, err)
				return
			}
			fmt.Fprintf(os.Stderr, "s3gw: %s (%s) listening on %s, ready in %s\n", sv.name, bin, run.endpoint, time.Since(begin).Round(time.Millisecond))
			if err := makeBucket(ctx, run.client, *bucket); err != nil {
				add(nil, nil, fmt.Errorf("%s: %w", sv.name, errors.Join(err, run.stop())))
				return
			}
			add([]string{
				sv.vars[0] + "=" + run.endpoint,
				sv.vars[1] + "=" + run.access,
				sv.vars[2] + "=" + run.secret,
				sv.vars[3] + "=" + bin,
			}, run.stop, nil)
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		fmt.Fprintln(os.Stderr, "s3gw:", errors.Join(errs...))
		return 2
	}

	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "s3gw:", err)
		return 2
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case sig := <-sigs:
			// Pass it on; the command decides how to end.
			_ = cmd.Process.Signal(sig)
			continue
		case err := <-done:
			var exit *exec.ExitError
			switch {
			case err == nil:
				return 0
			case errors.As(err, &exit):
				if code := exit.ExitCode(); code >= 0 {
					return code
				}
				return 1 // killed by a signal
			}
			fmt.Fprintln(os.Stderr, "s3gw:", err)
			return 1
		}
	}
}

// makeBucket creates bucket through client, unless bucket is empty.
func makeBucket(ctx context.Context, client *s3.Client, bucket string) error {
	if bucket == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err := client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &bucket})
	return err
}

// running is what s3gw needs of a server it started.
type running struct {
	endpoint, access, secret string
	client                   *s3.Client
	stop                     func() error
}

// server is one kind of server s3gw can start: how to find its binary,
// how to start it in a folder, and the variables that pass it on (the
// endpoint's, the access key's, the secret key's and the binary's).
type server struct {
	name   string
	binary func() (string, error)
	start  func(bin, dir string) (running, error)
	vars   [4]string
}

// kinds lists the servers s3gw can start, each within timeout.
func kinds(ctx context.Context, timeout time.Duration) []server {
	return []server{
		{"versitygw", s3test.GatewayBinary, func(bin, dir string) (running, error) {
			gw, err := s3test.StartGateway(ctx, s3test.GatewayConfig{Bin: bin, Dir: dir, StartTimeout: timeout})
			if err != nil {
				return running{}, err
			}
			return running{gw.Endpoint, gw.AccessKey, gw.SecretKey, gw.Client(), gw.Stop}, nil
		}, [4]string{s3test.EnvEndpoint, s3test.EnvAccessKey, s3test.EnvSecretKey, s3test.EnvGatewayBin}},
		{"seaweedfs", s3test.SeaweedBinary, func(bin, dir string) (running, error) {
			sw, err := s3test.StartSeaweed(ctx, s3test.SeaweedConfig{Bin: bin, Dir: dir, StartTimeout: timeout})
			if err != nil {
				return running{}, err
			}
			return running{sw.Endpoint, sw.AccessKey, sw.SecretKey, sw.Client(), sw.Stop}, nil
		}, [4]string{s3test.EnvSeaweedEndpoint, s3test.EnvSeaweedAccessKey, s3test.EnvSeaweedSecretKey, s3test.EnvSeaweedBin}},
	}
}
