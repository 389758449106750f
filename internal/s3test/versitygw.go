package s3test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// modulePath names this module's go.mod, used to find the module root.
const modulePath = "github.com/s3task/s3task"

// GatewayBinary returns the versitygw binary to run: $S3TASK_VERSITYGW_BIN,
// else versitygw on PATH, else .cache/bin/versitygw under the module root
// (where `GOBIN=$PWD/.cache/bin go install` puts it). The result is an
// absolute path.
func GatewayBinary() (string, error) {
	return findBinary(EnvGatewayBin, "versitygw", func(bin string) string {
		return "GOBIN=" + bin + " go install github.com/versity/versitygw/cmd/versitygw@v1.8.0"
	})
}

// findBinary returns the absolute path of the program name: $env, else
// name on PATH, else .cache/bin/name under the module root. install says,
// for that folder, how to put the program there.
func findBinary(env, name string, install func(bin string) string) (string, error) {
	if p := os.Getenv(env); p != "" {
		abs, err := filepath.Abs(p)
		if err != nil {
			return "", err
		}
		if _, err := os.Stat(abs); err != nil {
			return "", fmt.Errorf("s3test: %s=%s: %w", env, p, err)
		}
		return abs, nil
	}
	if p, err := exec.LookPath(name); err == nil {
		return filepath.Abs(p)
	}
	root, err := moduleRoot()
	if err != nil {
		return "", fmt.Errorf("s3test: %s is not on PATH and %w", name, err)
	}
	bin := filepath.Join(root, ".cache", "bin")
	p := filepath.Join(bin, name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("s3test: %s not found (set %s, put it on PATH, or run %s): %w", name, env, install(bin), err)
	}
	return p, nil
}

// moduleRoot walks up from the working directory to this module's go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.Contains(data, []byte("module "+modulePath+"\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of %s above the working directory", modulePath)
		}
		dir = parent
	}
}

// GatewayConfig says how to start a versitygw server. Zero fields get
// defaults.
type GatewayConfig struct {
	// Bin is the versitygw binary. Default: [GatewayBinary].
	Bin string
	// Dir is the posix backend's root folder: each subfolder is a bucket.
	// Required; it is created if missing and survives a restart.
	Dir string
	// Addr is the listen address. It must be on 127.0.0.1. Default: a free
	// port on 127.0.0.1.
	Addr string
	// AccessKey and SecretKey are the root credentials. Default: random.
	AccessKey, SecretKey string
	// Log receives the server's output. Default: a file next to Dir
	// (Dir + ".log"), whose tail is quoted when start-up fails.
	Log io.Writer
	// StartTimeout bounds the wait until the server answers. Default 30s.
	StartTimeout time.Duration
	// IAMDir, if set, runs versitygw's internal IAM service in that folder,
	// so that [Gateway.CreateUser] can add accounts besides the root one
	// (whose access bucket policies then decide).
	IAMDir string
	// EventWebhookURL, if set, has the server post an S3 event notification
	// for every object written or deleted to that URL. Something must
	// listen there before the server starts: it posts a test event first,
	// and refuses to start if the connection is refused.
	EventWebhookURL string
	// EventNATSURL and EventNATSTopic, if set, have the server publish the
	// same notifications on a NATS server.
	EventNATSURL, EventNATSTopic string
}

// Gateway is a running versitygw process serving the posix backend on
// 127.0.0.1. Stop it when done; [StartGatewayT] does that for a test.
type Gateway struct {
	// Endpoint is the server's URL, "http://127.0.0.1:port".
	Endpoint  string
	AccessKey string
	SecretKey string

	cfg  GatewayConfig
	proc process
	mu   sync.Mutex // guards Endpoint across a Restart
}

// StartGateway starts versitygw as cfg says and waits, at most
// cfg.StartTimeout, until it answers a signed request with its
// credentials. If the port was taken in between (a free port is chosen
// before the server binds it) it tries another one, a few times.
func StartGateway(ctx context.Context, cfg GatewayConfig) (*Gateway, error) {
	if cfg.Dir == "" {
		return nil, errors.New("s3test: GatewayConfig.Dir is required")
	}
	if cfg.Bin == "" {
		bin, err := GatewayBinary()
		if err != nil {
			return nil, err
		}
		cfg.Bin = bin
	}
	randomKeys(&cfg.AccessKey, &cfg.SecretKey)
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 30 * time.Second
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("s3test: gateway root: %w", err)
	}
	g := &Gateway{AccessKey: cfg.AccessKey, SecretKey: cfg.SecretKey, cfg: cfg, proc: process{name: "versitygw"}}
	var err error
	if g.cfg.Log, err = g.proc.logTo(cfg.Log, cfg.Dir+".log"); err != nil {
		return nil, err
	}
	fixed := cfg.Addr != ""
	for try := 0; try < 5; try++ {
		addr := cfg.Addr
		if !fixed {
			if addr, err = freeAddr(); err != nil {
				break
			}
		}
		if err = g.start(ctx, addr); err == nil {
			return g, nil
		}
		if fixed || ctx.Err() != nil {
			break
		}
	}
	g.proc.closeLog()
	return nil, err
}

// randomKeys sets each empty key to a random one.
func randomKeys(access, secret *string) {
	if *access == "" {
		*access = "ak" + strings.ToLower(rand.Text()[:14])
	}
	if *secret == "" {
		*secret = strings.ToLower(rand.Text())
	}
}

// freeAddr returns 127.0.0.1 with a port nobody listens on right now.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("s3test: find a free port: %w", err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr, nil
}

// start runs the binary on addr and waits until it answers.
func (g *Gateway) start(ctx context.Context, addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host != "127.0.0.1" {
		return fmt.Errorf("s3test: gateway address %q: it must be 127.0.0.1:port", addr)
	}
	args := []string{"--port", addr, "--quiet", "--keep-alive"}
	if g.cfg.IAMDir != "" {
		if err := os.MkdirAll(g.cfg.IAMDir, 0o755); err != nil {
			return fmt.Errorf("s3test: gateway IAM folder: %w", err)
		}
		args = append(args, "--iam-dir", g.cfg.IAMDir)
	}
	if g.cfg.EventWebhookURL != "" {
		args = append(args, "--event-webhook-url", g.cfg.EventWebhookURL)
	}
	if g.cfg.EventNATSURL != "" {
		args = append(args, "--event-nats-url", g.cfg.EventNATSURL, "--event-nats-topic", g.cfg.EventNATSTopic)
	}
	cmd := exec.Command(g.cfg.Bin, append(args, "posix", g.cfg.Dir)...)
	cmd.Env = gatewayEnv(g.cfg.AccessKey, g.cfg.SecretKey)
	cmd.Stdout, cmd.Stderr = g.cfg.Log, g.cfg.Log
	exited, err := g.proc.launch(cmd)
	if err != nil {
		return err
	}
	g.mu.Lock()
	g.Endpoint = "http://" + addr
	g.mu.Unlock()
	return g.awaitReady(ctx, exited)
}

// gatewayEnv is the process environment without any setting versitygw
// reads from it (VGW_*, ROOT_*), plus the root credentials.
func gatewayEnv(access, secret string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "VGW_") || strings.HasPrefix(kv, "ROOT_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "ROOT_ACCESS_KEY="+access, "ROOT_SECRET_KEY="+secret)
}

// awaitReady polls with a signed ListBuckets until the server answers it,
// the process exits, or the start timeout passes.
func (g *Gateway) awaitReady(ctx context.Context, exited <-chan struct{}) error {
	tr := &http.Transport{Proxy: nil, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	client := g.Client(func(http.RoundTripper) http.RoundTripper { return tr })
	once := func(o *s3.Options) { o.RetryMaxAttempts = 1 }
	return g.proc.await(ctx, exited, g.Endpoint, "answer", g.cfg.StartTimeout, 50*time.Millisecond, 2*time.Second,
		func(ctx context.Context) error {
			_, err := client.ListBuckets(ctx, &s3.ListBucketsInput{}, once)
			return err
		})
}

// Client returns a new S3 client for the gateway with its own transport;
// see [NewClient].
func (g *Gateway) Client(wrap ...func(http.RoundTripper) http.RoundTripper) *s3.Client {
	return NewClientWithKeys(g.Endpoint, g.AccessKey, g.SecretKey, wrap...)
}

// Dir returns the posix root folder.
func (g *Gateway) Dir() string { return g.cfg.Dir }

// CreateUser adds an account with role "user" (it owns no bucket; a
// bucket policy grants it access) through versitygw's admin command. The
// gateway must run with GatewayConfig.IAMDir.
func (g *Gateway) CreateUser(ctx context.Context, access, secret string) error {
	if g.cfg.IAMDir == "" {
		return errors.New("s3test: CreateUser needs a gateway started with IAMDir")
	}
	g.mu.Lock()
	endpoint := g.Endpoint
	g.mu.Unlock()
	cmd := exec.CommandContext(ctx, g.cfg.Bin, "admin", "--access", g.AccessKey, "--secret", g.SecretKey,
		"--endpoint-url", endpoint, "create-user", "--access", access, "--secret", secret, "--role", "user")
	cmd.Env = gatewayEnv(g.AccessKey, g.SecretKey)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("s3test: versitygw admin create-user %s: %w\n%s", access, err, out)
	}
	return nil
}

// Stop kills the server (SIGKILL, as a crash would) and waits for the
// process to end. It is safe to call more than once.
func (g *Gateway) Stop() error {
	err := g.proc.kill()
	g.proc.closeLog()
	return err
}

// Restart kills the server and starts it again on the same address with the
// same folder and credentials, as an operator restarting it would.
func (g *Gateway) Restart(ctx context.Context) error {
	g.mu.Lock()
	addr := strings.TrimPrefix(g.Endpoint, "http://")
	g.mu.Unlock()
	if err := g.proc.kill(); err != nil {
		return err
	}
	// The freed port can be bound again at once: Go's listeners set
	// SO_REUSEADDR, so connections in TIME_WAIT do not block it.
	return g.start(ctx, addr)
}
