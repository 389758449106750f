package s3test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// process is an S3 server the tests run as a child process (versitygw,
// weed): what both need to start one, wait until it serves, quote its log
// and stop it.
type process struct {
	name string // the program, for messages

	mu     sync.Mutex
	cmd    *exec.Cmd     // nil when not running
	exited chan struct{} // closed when cmd has been waited for
	logF   *os.File      // the default log file, if used
}

// logTo returns log, or, when it is nil, a log file at path that the
// process owns and whose tail failed start-ups quote.
func (p *process) logTo(log io.Writer, path string) (io.Writer, error) {
	if log != nil {
		return log, nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("s3test: %s log: %w", p.name, err)
	}
	p.logF = f
	return f, nil
}

// launch starts cmd and returns the channel closed when it has exited.
func (p *process) launch(cmd *exec.Cmd) (<-chan struct{}, error) {
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("s3test: start %s: %w", cmd.Path, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	p.mu.Lock()
	p.cmd, p.exited = cmd, exited
	p.mu.Unlock()
	return exited, nil
}

// await calls probe every interval, each call given at most each, until
// it succeeds, the process exits, or timeout passes. On failure it kills
// the process and quotes the end of its log. ready says in an error what
// the server did not do in time, e.g. "answer".
func (p *process) await(ctx context.Context, exited <-chan struct{}, endpoint, ready string, timeout, interval, each time.Duration, probe func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var err error
	for {
		pctx, pcancel := context.WithTimeout(ctx, each)
		last := probe(pctx)
		pcancel()
		if last == nil {
			return nil
		}
		select {
		case <-exited:
			err = fmt.Errorf("s3test: %s on %s exited during start-up (last probe: %v)", p.name, endpoint, last)
		case <-ctx.Done():
			err = fmt.Errorf("s3test: %s on %s did not %s within %s: %v", p.name, endpoint, ready, timeout, last)
		case <-tick.C:
			continue
		}
		_ = p.kill()
		return fmt.Errorf("%w%s", err, p.logTail())
	}
}

// logTail returns the end of the default log file, for error messages.
func (p *process) logTail() string {
	p.mu.Lock()
	f := p.logF
	p.mu.Unlock()
	if f == nil {
		return ""
	}
	data, err := os.ReadFile(f.Name())
	if err != nil || len(data) == 0 {
		return ""
	}
	if len(data) > 3000 {
		data = data[len(data)-3000:]
	}
	return "\n" + p.name + " output:\n" + string(data)
}

// kill ends the process with SIGKILL, as a crash would, if one runs, and
// waits for it.
func (p *process) kill() error {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	if err := cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("s3test: kill %s: %w", p.name, err)
	}
	select {
	case <-exited:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("s3test: %s (pid %d) did not exit within 10s of SIGKILL", p.name, cmd.Process.Pid)
	}
}

// stop asks the process to end with SIGTERM and kills it if it has not
// after grace; it waits for it either way.
func (p *process) stop(grace time.Duration) error {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		p.mu.Lock()
		p.cmd = nil
		p.mu.Unlock()
		return nil
	case <-time.After(grace):
		return p.kill()
	}
}

// closeLog closes the default log file, if one is open.
func (p *process) closeLog() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.logF != nil {
		p.logF.Close()
		p.logF = nil
	}
}

// startListening starts the program cmd builds for n free addresses of
// 127.0.0.1, logging to log, and waits until the first address accepts
// connections; if the port was taken in between, it tries other ones, a few
// times. It returns the addresses.
func (p *process) startListening(ctx context.Context, n int, log io.Writer, cmd func(addrs []string) *exec.Cmd) ([]string, error) {
	var err error
	for try := 0; try < 5; try++ {
		addrs := make([]string, n)
		for i := range addrs {
			if addrs[i], err = freeAddr(); err != nil {
				return nil, err
			}
		}
		c := cmd(addrs)
		c.Stdout, c.Stderr = log, log
		var exited <-chan struct{}
		if exited, err = p.launch(c); err != nil {
			return nil, err
		}
		err = p.await(ctx, exited, addrs[0], "accept connections", 30*time.Second, 20*time.Millisecond, time.Second,
			func(ctx context.Context) error {
				var d net.Dialer
				conn, err := d.DialContext(ctx, "tcp", addrs[0])
				if err == nil {
					conn.Close()
				}
				return err
			})
		if err == nil || ctx.Err() != nil {
			return addrs, err
		}
	}
	return nil, err
}
