package s3test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// EnvNATSBin is the path of the nats-server binary, for the tests that
// receive S3 event notifications through NATS.
const EnvNATSBin = "S3TASK_NATS_BIN"

// NATSBinary returns the nats-server binary to run: $S3TASK_NATS_BIN, else
// nats-server on PATH, else .cache/bin/nats-server under the module root.
func NATSBinary() (string, error) {
	return findBinary(EnvNATSBin, "nats-server", func(bin string) string {
		return "GOBIN=" + bin + " go install github.com/nats-io/nats-server/v2@v2.15.2"
	})
}

// NATS is a running nats-server on 127.0.0.1.
type NATS struct {
	// URL is the server's client URL, "nats://127.0.0.1:port".
	URL  string
	proc process
}

// StartNATS starts nats-server bin on a free port of 127.0.0.1, logging to
// dir/nats.log, and waits until it accepts connections.
func StartNATS(ctx context.Context, bin, dir string) (*NATS, error) {
	if bin == "" {
		var err error
		if bin, err = NATSBinary(); err != nil {
			return nil, err
		}
	}
	n := &NATS{proc: process{name: "nats-server"}}
	log, err := n.proc.logTo(nil, filepath.Join(dir, "nats.log"))
	if err != nil {
		return nil, err
	}
	addrs, err := n.proc.startListening(ctx, 1, log, func(addrs []string) *exec.Cmd {
		_, port, _ := strings.Cut(addrs[0], ":")
		return exec.Command(bin, "-a", "127.0.0.1", "-p", port)
	})
	if err == nil {
		n.URL = "nats://" + addrs[0]
		return n, nil
	}
	n.proc.closeLog()
	return nil, fmt.Errorf("s3test: start nats-server: %w", err)
}

// Stop stops the server and waits for it.
func (n *NATS) Stop() error {
	err := n.proc.stop(5 * time.Second)
	n.proc.closeLog()
	return err
}

// StartNATST starts a nats-server for a test, in its temporary folder, and
// stops it when the test ends. It fails the test if there is no binary or
// the server cannot start.
func StartNATST(t testing.TB) *NATS {
	t.Helper()
	n, err := StartNATS(t.Context(), "", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Stop(); err != nil {
			t.Errorf("stop nats-server: %v", err)
		}
	})
	return n
}
