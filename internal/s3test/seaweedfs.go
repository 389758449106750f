package s3test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// SeaweedVersion is the SeaweedFS module version .ci/seaweedfs.sh builds
// (`weed version` 4.53).
const SeaweedVersion = "v0.0.0-20261109003541-7506e5f91cd6"

// SeaweedBinary returns the weed binary to run: $S3TASK_SEAWEEDFS_BIN, else
// weed on PATH, else .cache/bin/weed under the module root (where
// .ci/seaweedfs.sh builds it). The result is an absolute path.
func SeaweedBinary() (string, error) {
	return findBinary(EnvSeaweedBin, "weed", func(string) string {
		return "bash .ci/seaweedfs.sh, which builds it there in several minutes"
	})
}

// SeaweedConfig says how to start a SeaweedFS server. Zero fields get
// defaults.
type SeaweedConfig struct {
	// Bin is the weed binary. Default: [SeaweedBinary].
	Bin string
	// Dir holds everything the server keeps: volumes, the master's and the
	// filer's metadata, the identities file. Required; it is created if
	// missing and survives a restart.
	Dir string
	// AccessKey and SecretKey are the one identity the S3 gateway accepts;
	// with it, unsigned and wrongly signed requests are refused. Default:
	// random.
	AccessKey, SecretKey string
	// Anonymous starts the gateway without an identities file, as SeaweedFS
	// runs by default: it then serves every request, signed or not, with
	// any keys, and presigned URLs neither expire nor need a valid
	// signature.
	Anonymous bool
	// Log receives the server's output. Default: a file next to Dir
	// (Dir + ".log"), whose tail is quoted when start-up fails.
	Log io.Writer
	// StartTimeout bounds the wait until the server stores an object.
	// Default 90s (it takes about 12s on an idle machine).
	StartTimeout time.Duration
}

// seaweedPorts are the listen ports of one weed server: HTTP and gRPC for
// each of its four parts.
type seaweedPorts struct {
	master, masterGRPC, volume, volumeGRPC, filer, filerGRPC, s3, s3GRPC int
}

// Seaweed is a running SeaweedFS "weed server" (master, volume server,
// filer and S3 gateway in one process) listening on 127.0.0.1 only. Stop
// it when done; [StartSeaweedT] does that for a test.
type Seaweed struct {
	// Endpoint is the S3 gateway's URL, "http://127.0.0.1:port".
	Endpoint  string
	AccessKey string
	SecretKey string

	cfg  SeaweedConfig
	sock string // a short folder for the unix sockets weed opens
	proc process

	mu    sync.Mutex // guards Endpoint and ports across a Restart
	ports seaweedPorts
}

// StartSeaweed starts weed as cfg says and waits, at most cfg.StartTimeout,
// until its S3 gateway stores and deletes an object for a signed request.
// If a port was taken in between (free ports are chosen before the server
// binds them) it tries other ones, a few times.
func StartSeaweed(ctx context.Context, cfg SeaweedConfig) (*Seaweed, error) {
	if cfg.Dir == "" {
		return nil, errors.New("s3test: SeaweedConfig.Dir is required")
	}
	if cfg.Bin == "" {
		bin, err := SeaweedBinary()
		if err != nil {
			return nil, err
		}
		cfg.Bin = bin
	}
	randomKeys(&cfg.AccessKey, &cfg.SecretKey)
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 90 * time.Second
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "data"), 0o755); err != nil {
		return nil, fmt.Errorf("s3test: seaweedfs folder: %w", err)
	}
	if !cfg.Anonymous {
		if err := writeSeaweedIdentities(cfg); err != nil {
			return nil, err
		}
	}
	// Unix socket paths are limited to about 100 bytes; a test's temporary
	// folder can be longer.
	sock, err := os.MkdirTemp("", "s3task-sw-")
	if err != nil {
		return nil, fmt.Errorf("s3test: seaweedfs socket folder: %w", err)
	}
	w := &Seaweed{AccessKey: cfg.AccessKey, SecretKey: cfg.SecretKey, cfg: cfg, sock: sock, proc: process{name: "weed"}}
	if w.cfg.Log, err = w.proc.logTo(cfg.Log, cfg.Dir+".log"); err != nil {
		os.RemoveAll(sock)
		return nil, err
	}
	for try := 0; try < 3; try++ {
		var ports seaweedPorts
		if ports, err = freeSeaweedPorts(); err != nil {
			break
		}
		if err = w.start(ctx, ports); err == nil {
			return w, nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	w.proc.closeLog()
	os.RemoveAll(sock)
	return nil, err
}

// writeSeaweedIdentities writes the S3 gateway's identities file: one
// identity, allowed everything, with cfg's keys.
func writeSeaweedIdentities(cfg SeaweedConfig) error {
	type credential struct {
		AccessKey string `json:"accessKey"`
		SecretKey string `json:"secretKey"`
	}
	type identity struct {
		Name        string       `json:"name"`
		Credentials []credential `json:"credentials"`
		Actions     []string     `json:"actions"`
	}
	doc := struct {
		Identities []identity `json:"identities"`
	}{[]identity{{
		Name:        "s3task",
		Credentials: []credential{{cfg.AccessKey, cfg.SecretKey}},
		Actions:     []string{"Admin", "Read", "Write", "List", "Tagging"},
	}}}
	data, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(cfg.Dir, "s3.json"), data, 0o600); err != nil {
		return fmt.Errorf("s3test: seaweedfs identities: %w", err)
	}
	return nil
}

// freeSeaweedPorts returns eight ports on 127.0.0.1 nobody listens on right
// now, all distinct.
func freeSeaweedPorts() (seaweedPorts, error) {
	var ports [8]int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for i := range ports {
		// Held open until all are chosen, so that no two are the same.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return seaweedPorts{}, fmt.Errorf("s3test: find a free port: %w", err)
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return seaweedPorts{ports[0], ports[1], ports[2], ports[3], ports[4], ports[5], ports[6], ports[7]}, nil
}

// args is the weed command line for ports.
func (w *Seaweed) args(p seaweedPorts) []string {
	dir := w.cfg.Dir
	args := []string{
		// Logging options come before the command. Without -logtostderr
		// weed also writes log files into the system's temporary folder.
		"-logtostderr", "-config_dir=" + dir,
		"server",
		"-dir=" + filepath.Join(dir, "data"),
		"-ip=127.0.0.1", "-ip.bind=127.0.0.1",
		"-master.port=" + strconv.Itoa(p.master), "-master.port.grpc=" + strconv.Itoa(p.masterGRPC),
		"-volume.port=" + strconv.Itoa(p.volume), "-volume.port.grpc=" + strconv.Itoa(p.volumeGRPC),
		"-filer.port=" + strconv.Itoa(p.filer), "-filer.port.grpc=" + strconv.Itoa(p.filerGRPC),
		"-filer.localSocket=" + filepath.Join(w.sock, "filer.sock"),
		"-s3", "-s3.port=" + strconv.Itoa(p.s3), "-s3.port.grpc=" + strconv.Itoa(p.s3GRPC),
		"-s3.localSocket=" + filepath.Join(w.sock, "s3.sock"),
		// The Iceberg and Lance catalogs would listen on fixed ports.
		"-s3.port.iceberg=0", "-s3.port.lance=0",
		// Every bucket is a collection of volumes of its own; the tests make
		// hundreds of buckets. Volumes are sparse files, so many small ones
		// cost nothing.
		"-volume.max=100000", "-master.volumeSizeLimitMB=64",
		// Stop at once on SIGTERM instead of draining for ten seconds.
		"-volume.preStopSeconds=0",
	}
	if !w.cfg.Anonymous {
		args = append(args, "-s3.config="+filepath.Join(dir, "s3.json"))
	}
	return args
}

// start runs the binary on ports and waits until it serves S3.
func (w *Seaweed) start(ctx context.Context, p seaweedPorts) error {
	for _, name := range []string{"filer.sock", "s3.sock"} {
		os.Remove(filepath.Join(w.sock, name)) // left over by a killed server
	}
	cmd := exec.Command(w.cfg.Bin, w.args(p)...)
	cmd.Dir = w.cfg.Dir // weed also reads its toml files from the working folder
	cmd.Env = seaweedEnv()
	cmd.Stdout, cmd.Stderr = w.cfg.Log, w.cfg.Log
	exited, err := w.proc.launch(cmd)
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.ports = p
	w.Endpoint = "http://127.0.0.1:" + strconv.Itoa(p.s3)
	w.mu.Unlock()
	err = w.awaitReady(ctx, exited)
	if err != nil {
		removeGRPCSockets(p) // await killed it
	}
	return err
}

// seaweedEnv is the process environment without the WEED_* settings weed
// reads from it.
func seaweedEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "WEED_") {
			env = append(env, kv)
		}
	}
	return env
}

// awaitReady waits until a signed request stores an object: the gateway
// answers ListBuckets some seconds before the volume server has joined the
// master and writes work. The probe's bucket is deleted again.
func (w *Seaweed) awaitReady(ctx context.Context, exited <-chan struct{}) error {
	tr := &http.Transport{Proxy: nil, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	client := w.Client(func(http.RoundTripper) http.RoundTripper { return tr })
	bucket := "s3task-ready-" + strings.ToLower(rand.Text()[:8])
	key := "probe"
	once := func(o *s3.Options) { o.RetryMaxAttempts = 1 }
	probe := func(ctx context.Context) error {
		if _, err := client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &bucket}, once); err != nil {
			var owned interface{ ErrorCode() string }
			if !errors.As(err, &owned) || (owned.ErrorCode() != "BucketAlreadyOwnedByYou" && owned.ErrorCode() != "BucketAlreadyExists") {
				return err
			}
		}
		if _, err := client.PutObject(ctx, &s3.PutObjectInput{
			Bucket: &bucket, Key: &key, Body: strings.NewReader("ready"), ContentLength: aws.Int64(5),
		}, once); err != nil {
			return err
		}
		if _, err := client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &bucket, Key: &key}, once); err != nil {
			return err
		}
		_, err := client.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: &bucket}, once)
		return err
	}
	return w.proc.await(ctx, exited, w.Endpoint, "store an object", w.cfg.StartTimeout, 250*time.Millisecond, 10*time.Second, probe)
}

// Client returns a new S3 client for the gateway with its own transport;
// see [NewClient].
func (w *Seaweed) Client(wrap ...func(http.RoundTripper) http.RoundTripper) *s3.Client {
	return NewClientWithKeys(w.Endpoint, w.AccessKey, w.SecretKey, wrap...)
}

// Dir returns the server's folder.
func (w *Seaweed) Dir() string { return w.cfg.Dir }

// seaweedStopGrace is how long Stop lets weed shut down after SIGTERM
// before it kills it: left alone it takes half a minute.
const seaweedStopGrace = 3 * time.Second

// Stop ends the server, SIGTERM then, after a few seconds, SIGKILL, and
// waits for the process to end. It is safe to call more than once.
func (w *Seaweed) Stop() error {
	err := w.proc.stop(seaweedStopGrace)
	w.removeSockets()
	w.proc.closeLog()
	os.RemoveAll(w.sock)
	return err
}

// kill ends the process with SIGKILL, as a crash would, if one runs, waits
// for it, and removes the sockets it leaves.
func (w *Seaweed) kill() error {
	err := w.proc.kill()
	w.removeSockets()
	return err
}

// removeSockets removes the gRPC sockets of the current ports.
func (w *Seaweed) removeSockets() {
	w.mu.Lock()
	ports := w.ports
	w.mu.Unlock()
	removeGRPCSockets(ports)
}

// removeGRPCSockets removes the unix sockets weed opens, next to its gRPC
// ports, at paths of its own choosing: /tmp/seaweedfs-<part>-grpc-<port>.sock.
// Nothing else would remove them once it has stopped.
func removeGRPCSockets(p seaweedPorts) {
	for part, port := range map[string]int{"master": p.masterGRPC, "volume": p.volumeGRPC, "filer": p.filerGRPC, "s3": p.s3GRPC} {
		os.Remove(fmt.Sprintf("/tmp/seaweedfs-%s-grpc-%d.sock", part, port))
	}
}

// Restart kills the server (SIGKILL) and starts it again on the same ports
// with the same folder and credentials, as an operator restarting a
// crashed server would. It returns once the server stores objects again.
func (w *Seaweed) Restart(ctx context.Context) error {
	w.mu.Lock()
	ports := w.ports
	w.mu.Unlock()
	if err := w.kill(); err != nil {
		return err
	}
	// The freed ports can be bound again at once: Go's listeners set
	// SO_REUSEADDR, so connections in TIME_WAIT do not block them.
	return w.start(ctx, ports)
}
