package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The processes the load test runs, and what it reads of them.

// proc is a csvbatch process.
type proc struct {
	name       string
	cmd        *exec.Cmd
	logPath    string
	exited     chan struct{}
	err        error // set before exited is closed
	metricsURL string
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM, waits for a graceful exit, then kills.
func (p *proc) stop() {
	if !p.running() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// logTail returns the end of the process's log.
func (p *proc) logTail() string {
	data, _ := os.ReadFile(p.logPath)
	if len(data) > 3000 {
		data = data[len(data)-3000:]
	}
	return string(data)
}

// logLevels counts the process's log lines by slog level (WARN, ERROR).
func (p *proc) logLevels() map[string]int {
	out := map[string]int{}
	f, err := os.Open(p.logPath)
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		for _, lvl := range []string{"WARN", "ERROR"} {
			if strings.Contains(line, "level="+lvl) || strings.Contains(line, `"level":"`+lvl+`"`) {
				out[lvl]++
			}
		}
	}
	return out
}

// buildCsvbatch builds the example into out.
func buildCsvbatch(ctx context.Context, out string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("building csvbatch needs the go command on PATH (or pass -csvbatch): %w", err)
	}
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", out, "github.com/s3task/s3task/examples/csvbatch")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build csvbatch: %v\n%s", err, b)
	}
	return nil
}

// gatewayPID finds the versitygw process this one started from bin to
// listen on endpoint (s3test does not expose its PID): a child of this
// process running bin with that address on its command line.
func gatewayPID(bin, endpoint string) (int, error) {
	want, err := filepath.EvalSymlinks(bin)
	if err != nil {
		return 0, err
	}
	addr := strings.TrimPrefix(endpoint, "http://")
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, fmt.Errorf("find the versitygw process (the stall needs /proc): %w", err)
	}
	me := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err != nil || exe != want || ppid(pid) != me {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && slices.Contains(strings.Split(string(cmdline), "\x00"), addr) {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no child process %s listening on %s found in /proc", want, addr)
}

// ppid reads a process's parent from /proc/PID/status.
func ppid(pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "PPid:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// cpuSeconds returns the CPU time (user and system) a process has used,
// from /proc/PID/stat; 0 if it cannot be read.
func cpuSeconds(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name, in parentheses, may hold spaces: count from after it.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / clockTicks
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on every
// Linux architecture Go runs on.
const clockTicks = 100

// rss returns VmRSS and VmHWM (peak) of a process, in kB.
func rss(pid int) (cur, peak int) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		field := func(name string) (int, bool) {
			v, ok := strings.CutPrefix(line, name+":")
			if !ok {
				return 0, false
			}
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return n, true
		}
		if n, ok := field("VmRSS"); ok {
			cur = n
		}
		if n, ok := field("VmHWM"); ok {
			peak = n
		}
	}
	return cur, peak
}

// processEnv is this process's environment without any AWS or csvbatch
// setting, plus the gateway's credentials and the API token.
func processEnv(access, secret, token string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "AWS_") || strings.HasPrefix(kv, "CSVBATCH_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env,
		"AWS_ACCESS_KEY_ID="+access, "AWS_SECRET_ACCESS_KEY="+secret, "AWS_REGION=us-east-1",
		"AWS_EC2_METADATA_DISABLED=true", "CSVBATCH_TOKEN="+token)
}

// startProc starts bin with args, its output in dir/name.log.
func startProc(dir, name, bin string, env, args []string) (*proc, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Dir = dir
	// A group of its own: a Ctrl-C reaches this program, which stops the
	// processes in order, not each of them at once.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.exited)
	}()
	return p, nil
}

// freeAddr returns 127.0.0.1 with a port free right now.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// awaitReady waits until the API lists tasks, or a process exits.
func awaitReady(ctx context.Context, hc *http.Client, apiURL, token string, procs []*proc) error {
	deadline := time.Now().Add(60 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		for _, p := range procs {
			if !p.running() {
				return fmt.Errorf("csvbatch %s exited at start: %v\n%s", p.name, p.err, p.logTail())
			}
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, apiURL+"/tasks?limit=1", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := hc.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("GET /tasks: %s", resp.Status)
		}
		last = err
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("the csvbatch API did not answer within 60s: %v\n%s", last, procs[0].logTail())
}

// awaitMetrics waits until a worker serves its metrics.
func awaitMetrics(ctx context.Context, hc *http.Client, p *proc, token string) error {
	deadline := time.Now().Add(60 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		if !p.running() {
			return fmt.Errorf("csvbatch %s exited at start: %v\n%s", p.name, p.err, p.logTail())
		}
		if _, err := scrapeCompletions(ctx, hc, p.metricsURL, token); err == nil {
			return nil
		} else {
			last = err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("csvbatch %s served no metrics within 60s: %v\n%s", p.name, last, p.logTail())
}

// scrapeCompletions reads s3task_worker_completions_total, summed over
// task types, from a worker's /metrics.
func scrapeCompletions(ctx context.Context, hc *http.Client, url, token string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	total := 0.0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "s3task_worker_completions_total") {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("metrics line %q: %w", line, err)
		}
		total += v
	}
	return int(total), sc.Err()
}
