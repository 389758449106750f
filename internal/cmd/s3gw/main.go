// Command s3gw runs a command next to a versitygw S3 server, started for it
// on 127.0.0.1 with the posix backend in a temporary folder:
//
//	go run ./internal/cmd/s3gw -- go test -race -count=1 ./...
//
// The command gets the server's address and credentials in
// S3TASK_TEST_ENDPOINT, S3TASK_TEST_ACCESS_KEY and S3TASK_TEST_SECRET_KEY,
// and the binary's path in S3TASK_VERSITYGW_BIN so that tests can start
// servers of their own. When the command ends, the server is killed and its
// folder removed, and s3gw exits with the command's status.
//
// The versitygw binary is found as internal/s3test.GatewayBinary says:
// $S3TASK_VERSITYGW_BIN, versitygw on PATH, or .cache/bin/versitygw in the
// module. Install it with
//
//	GOBIN=$PWD/.cache/bin go install github.com/versity/versitygw/cmd/versitygw@v1.8.0
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
	"syscall"
	"time"

	"github.com/s3task/s3task/internal/s3test"
)

func main() {
	os.Exit(run())
}

func run() int {
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: s3gw [-keep] -- command [args...]\n\n"+
			"Runs command next to a versitygw server on 127.0.0.1, with the server's\n"+
			"address and credentials in %s, %s and %s.\n\n",
			s3test.EnvEndpoint, s3test.EnvAccessKey, s3test.EnvSecretKey)
		flag.PrintDefaults()
	}
	keep := flag.Bool("keep", false, "keep the server's folder and log after the command ends")
	timeout := flag.Duration("start-timeout", 60*time.Second, "how long to wait for the server to answer")
	flag.Parse()
	args := flag.Args()
	if len(args) == 0 {
		flag.Usage()
		return 2
	}

	bin, err := s3test.GatewayBinary()
	if err != nil {
		fmt.Fprintln(os.Stderr, "s3gw:", err)
		return 2
	}
	tmp, err := os.MkdirTemp("", "s3gw-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "s3gw:", err)
		return 2
	}
	if *keep {
		fmt.Fprintln(os.Stderr, "s3gw: server folder and log in", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}

	// Stop the server and the command on an interrupt instead of dying and
	// leaving the server behind.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)

	ctx := context.Background()
	gw, err := s3test.StartGateway(ctx, s3test.GatewayConfig{
		Bin:          bin,
		Dir:          filepath.Join(tmp, "root"),
		StartTimeout: *timeout,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "s3gw:", err)
		return 2
	}
	defer func() {
		if err := gw.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "s3gw:", err)
		}
	}()
	fmt.Fprintf(os.Stderr, "s3gw: versitygw (%s) listening on %s\n", bin, gw.Endpoint)

	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(),
		s3test.EnvEndpoint+"="+gw.Endpoint,
		s3test.EnvAccessKey+"="+gw.AccessKey,
		s3test.EnvSecretKey+"="+gw.SecretKey,
		s3test.EnvGatewayBin+"="+bin,
	)
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
