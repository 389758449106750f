package s3test

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Environment variables shared by the test programs and the tests that use a
// real S3 server. internal/cmd/s3gw sets them for the command it runs.
const (
	// EnvEndpoint is the URL of an S3-compatible server for the integration
	// tests, e.g. "http://127.0.0.1:7070". Tests that need it skip without it.
	EnvEndpoint = "S3TASK_TEST_ENDPOINT"
	// EnvAccessKey and EnvSecretKey are that server's credentials.
	EnvAccessKey = "S3TASK_TEST_ACCESS_KEY"
	EnvSecretKey = "S3TASK_TEST_SECRET_KEY"
	// EnvGatewayBin is the path of the versitygw binary, so that a test can
	// start (and restart) a server of its own.
	EnvGatewayBin = "S3TASK_VERSITYGW_BIN"

	// EnvSeaweedEndpoint, EnvSeaweedAccessKey and EnvSeaweedSecretKey name
	// a second server, SeaweedFS's S3 gateway under internal/cmd/s3gw, on
	// which the conformance suite and the crash tests run as well.
	EnvSeaweedEndpoint  = "S3TASK_TEST_SEAWEEDFS_ENDPOINT"
	EnvSeaweedAccessKey = "S3TASK_TEST_SEAWEEDFS_ACCESS_KEY"
	EnvSeaweedSecretKey = "S3TASK_TEST_SEAWEEDFS_SECRET_KEY"
	// EnvSeaweedBin is the path of the weed binary, so that a test can start
	// (and restart) a SeaweedFS server of its own.
	EnvSeaweedBin = "S3TASK_SEAWEEDFS_BIN"
)

// RemoteConfig is an S3 server the integration tests were pointed at with
// [EnvEndpoint] and the credentials variables.
type RemoteConfig struct {
	Endpoint  string
	AccessKey string
	SecretKey string
	// GatewayBin is $S3TASK_VERSITYGW_BIN, empty if unset.
	GatewayBin string
	// SeaweedBin is $S3TASK_SEAWEEDFS_BIN, empty if unset.
	SeaweedBin string
}

// Remote returns the server configured in the environment, and ok=false if
// there is none.
func Remote() (RemoteConfig, bool) { return remoteFrom(EnvEndpoint, EnvAccessKey, EnvSecretKey) }

// RemoteT returns the configured server, or skips the test with a message
// saying how to configure one.
func RemoteT(t testing.TB) RemoteConfig {
	t.Helper()
	return remoteOrSkip(t, Remote, "%s is not set: no real S3 server; run `go run ./internal/cmd/s3gw -- go test ./...` (or `make test/integration`) to include this test", EnvEndpoint)
}

// SeaweedRemote returns the SeaweedFS server configured in the environment
// ([EnvSeaweedEndpoint] and its credentials), and ok=false if there is
// none.
func SeaweedRemote() (RemoteConfig, bool) {
	return remoteFrom(EnvSeaweedEndpoint, EnvSeaweedAccessKey, EnvSeaweedSecretKey)
}

// SeaweedRemoteT returns the configured SeaweedFS server, or skips the test
// with a message saying how to configure one.
func SeaweedRemoteT(t testing.TB) RemoteConfig {
	t.Helper()
	return remoteOrSkip(t, SeaweedRemote, "%s is not set: no SeaweedFS server; build it with `bash .ci/seaweedfs.sh` and run `go run ./internal/cmd/s3gw -- go test ./...` to include this test", EnvSeaweedEndpoint)
}

// remoteFrom reads a server's address and credentials from the named
// variables, and the binaries' from theirs.
func remoteFrom(endpoint, access, secret string) (RemoteConfig, bool) {
	c := RemoteConfig{
		Endpoint:   os.Getenv(endpoint),
		AccessKey:  os.Getenv(access),
		SecretKey:  os.Getenv(secret),
		GatewayBin: os.Getenv(EnvGatewayBin),
		SeaweedBin: os.Getenv(EnvSeaweedBin),
	}
	return c, c.Endpoint != ""
}

// remoteOrSkip returns the server remote finds, or skips t with the
// message.
func remoteOrSkip(t testing.TB, remote func() (RemoteConfig, bool), format string, args ...any) RemoteConfig {
	t.Helper()
	c, ok := remote()
	if !ok {
		t.Skipf(format, args...)
	}
	return c
}

// Client returns a new S3 client for the server with its own transport;
// see [NewClient].
func (c RemoteConfig) Client(wrap ...func(http.RoundTripper) http.RoundTripper) *s3.Client {
	return NewClientWithKeys(c.Endpoint, c.AccessKey, c.SecretKey, wrap...)
}

// StartGatewayT starts a gateway for a test in a folder of its own
// (t.TempDir) and stops it when the test ends. It fails the test if the
// server cannot start.
func StartGatewayT(t testing.TB, bin string) *Gateway {
	t.Helper()
	g, err := StartGateway(t.Context(), GatewayConfig{Bin: bin, Dir: filepath.Join(t.TempDir(), "root")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Stop(); err != nil {
			t.Errorf("stop gateway: %v", err)
		}
	})
	return g
}

// StartSeaweedT starts a SeaweedFS server for a test in a folder of its
// own (t.TempDir) and stops it when the test ends. It fails the test if the
// server cannot start.
func StartSeaweedT(t testing.TB, bin string) *Seaweed {
	t.Helper()
	w, err := StartSeaweed(t.Context(), SeaweedConfig{Bin: bin, Dir: filepath.Join(t.TempDir(), "root")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Stop(); err != nil {
			t.Errorf("stop seaweedfs: %v", err)
		}
	})
	return w
}

// NewBucket creates a bucket with a unique lowercase name through client
// and returns the name. Buckets are not deleted: the server's folder goes
// away with the server.
func NewBucket(ctx context.Context, client *s3.Client, hint string) (string, error) {
	hint = strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			return r
		case r >= 'A' && r <= 'Z':
			return r + ('a' - 'A')
		}
		return '-'
	}, hint)
	for strings.Contains(hint, "--") {
		hint = strings.ReplaceAll(hint, "--", "-")
	}
	hint = strings.Trim(hint, "-")
	if len(hint) > 30 {
		hint = strings.Trim(hint[:30], "-")
	}
	if hint == "" {
		hint = "t"
	}
	name := hint + "-" + strings.ToLower(rand.Text()[:12])
	if _, err := client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		return "", fmt.Errorf("s3test: create bucket %s: %w", name, err)
	}
	return name, nil
}
