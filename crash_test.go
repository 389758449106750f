package s3task_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/conformance"
	"github.com/s3task/s3task/internal/s3test"
)

// The crash tests run workers as real processes (internal/cmd/crashworker)
// against versitygw, kill one with SIGKILL in the middle of a task, and
// restart the S3 server itself under running workers. They need a real
// server, so they skip without S3TASK_TEST_ENDPOINT.

// Lease settings of the worker processes: real time passes on a real
// server, so leases are short.
const (
	crashLease     = 3 * time.Second
	crashMargin    = time.Second
	crashHeartbeat = 500 * time.Millisecond
	crashWait      = 90 * time.Second // bound on every wait; reaching it is a failure
)

// crashEvent is one line a worker process printed.
type crashEvent struct {
	Event   string    `json:"event"`
	Worker  string    `json:"worker"`
	Task    string    `json:"task"`
	Attempt int       `json:"attempt"`
	Detail  string    `json:"detail"`
	At      time.Time `json:"at"`
}

// crashEvents collects the events of every process of a test.
type crashEvents struct {
	mu   sync.Mutex
	all  []crashEvent
	more chan struct{} // pinged on every event
}

func newCrashEvents() *crashEvents { return &crashEvents{more: make(chan struct{}, 1)} }

func (c *crashEvents) add(e crashEvent) {
	c.mu.Lock()
	c.all = append(c.all, e)
	c.mu.Unlock()
	select {
	case c.more <- struct{}{}:
	default:
	}
}

func (c *crashEvents) snapshot() []crashEvent {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]crashEvent(nil), c.all...)
}

// await returns the first event for which match (given all events so far)
// holds, waiting for it on the event signal, at most crashWait.
func (c *crashEvents) await(t *testing.T, what string, match func(e crashEvent, all []crashEvent) bool) crashEvent {
	t.Helper()
	deadline := time.After(crashWait)
	for {
		all := c.snapshot()
		for _, e := range all {
			if match(e, all) {
				return e
			}
		}
		select {
		case <-c.more:
		case <-deadline:
			t.Fatalf("timed out after %s waiting for %s", crashWait, what)
		}
	}
}

// buildCrashWorker builds the worker program into the test's temporary
// folder and returns its path.
func buildCrashWorker(t *testing.T) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the crash tests build internal/cmd/crashworker and need the go command: %v", err)
	}
	out := filepath.Join(t.TempDir(), "crashworker")
	cmd := exec.CommandContext(t.Context(), gobin, "build", "-o", out, "./internal/cmd/crashworker")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./internal/cmd/crashworker: %v\n%s", err, msg)
	}
	return out
}

// crashProc is a running worker process.
type crashProc struct {
	id     string
	cmd    *exec.Cmd
	exited chan struct{}
	stderr *crashStderr
}

type crashStderr struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *crashStderr) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *crashStderr) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// crashServer is where worker processes connect.
type crashServer struct {
	endpoint, access, secret, bucket string
}

// startCrashWorker starts a worker process; it is killed when the test
// ends if it still runs.
func startCrashWorker(t *testing.T, bin string, srv crashServer, id string, work time.Duration, concurrency int, events *crashEvents) *crashProc {
	t.Helper()
	cmd := exec.Command(bin,
		"-endpoint", srv.endpoint, "-bucket", srv.bucket, "-id", id,
		"-lease", crashLease.String(), "-margin", crashMargin.String(), "-heartbeat", crashHeartbeat.String(),
		"-work", work.String(), "-concurrency", fmt.Sprint(concurrency))
	cmd.Env = append(os.Environ(), s3test.EnvAccessKey+"="+srv.access, s3test.EnvSecretKey+"="+srv.secret)
	p := &crashProc{id: id, cmd: cmd, exited: make(chan struct{}), stderr: &crashStderr{}}
	cmd.Stderr = p.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", id, err)
	}
	go func() {
		defer close(p.exited)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var e crashEvent
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				events.add(e)
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		p.kill(t)
		if t.Failed() {
			t.Logf("%s stderr:\n%s", id, p.stderr.String())
		}
	})
	return p
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *crashProc) kill(t *testing.T) {
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("kill %s: %v", p.id, err)
	}
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		t.Errorf("%s (pid %d) still runs 10s after SIGKILL", p.id, p.cmd.Process.Pid)
	}
}

func (p *crashProc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// crashClient returns an S3 client whose idle connections close when the
// test ends.
func crashClient(t *testing.T, srv crashServer) *s3.Client {
	var closer s3test.TransportCloser
	t.Cleanup(closer.CloseIdleConnections)
	return s3test.NewClientWithKeys(srv.endpoint, srv.access, srv.secret, closer.Wrap)
}

func crashStore(t *testing.T, srv crashServer) *s3task.Store {
	t.Helper()
	st, err := s3task.NewStore(crashClient(t, srv), srv.bucket, &s3task.StoreOptions{InputExt: ".csv", OutputExt: ".txt", Logger: conformance.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// crashSubmit creates n tasks with inputs and submits them.
func crashSubmit(t *testing.T, st *s3task.Store, n int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		task, err := st.Create(t.Context(), s3task.CreateParams{Name: fmt.Sprintf("crash %d", i)})
		if err != nil {
			t.Fatal(err)
		}
		if err := st.UploadInput(t.Context(), task.ID, strings.NewReader("input of "+task.ID)); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Submit(t.Context(), task.ID); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, task.ID)
	}
	return ids
}

// crashAwaitCompleted waits until every task is completed, reading the
// records every 200ms (a read that fails, as while the server restarts, is
// tried again), at most crashWait.
func crashAwaitCompleted(t *testing.T, st *s3task.Store, ids []string, events *crashEvents) map[string]*s3task.Task {
	t.Helper()
	deadline := time.Now().Add(crashWait)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		done := map[string]*s3task.Task{}
		var open []string
		for _, id := range ids {
			task, err := st.Get(t.Context(), id)
			switch {
			case err != nil:
				open = append(open, fmt.Sprintf("%s: %v", id, err))
			case task.Status == s3task.StatusCompleted:
				done[id] = task
			case task.Terminal():
				t.Fatalf("task %s ended %s: %s", id, task.Status, task.LastError)
			default:
				open = append(open, fmt.Sprintf("%s: %s attempt %d worker %q", id, task.Status, task.Attempt, task.WorkerID))
			}
		}
		if len(open) == 0 {
			return done
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s, %d tasks are not completed:\n%s\nevents: %+v", crashWait, len(open), strings.Join(open, "\n"), events.snapshot())
		}
		<-tick.C
	}
}

// crashCheck checks what every test here promises once all tasks are
// completed: each was completed once, by its final attempt, whose output it
// points to; no attempt was claimed twice.
func crashCheck(t *testing.T, st *s3task.Store, raw *s3.Client, bucket string, done map[string]*s3task.Task, events []crashEvent) {
	t.Helper()
	claims := map[string]int{}
	completes := map[string][]crashEvent{}
	for _, e := range events {
		switch e.Event {
		case "claim":
			claims[fmt.Sprintf("%s/%d", e.Task, e.Attempt)]++
		case "complete":
			completes[e.Task] = append(completes[e.Task], e)
		}
	}
	for k, n := range claims {
		if n > 1 {
			t.Errorf("task/attempt %s claimed %d times", k, n)
		}
	}
	for id, task := range done {
		cs := completes[id]
		if len(cs) > 1 {
			t.Errorf("task %s completed %d times: %+v", id, len(cs), cs)
		}
		if len(cs) == 1 && (cs[0].Attempt != task.Attempt || cs[0].Worker != task.WorkerID) {
			t.Errorf("task %s: completion reported for attempt %d by %s, record says attempt %d by %s",
				id, cs[0].Attempt, cs[0].Worker, task.Attempt, task.WorkerID)
		}
		if task.Attempt > task.MaxAttempts {
			t.Errorf("task %s: attempt_id %d over max_attempts %d", id, task.Attempt, task.MaxAttempts)
		}
		want, _ := st.OutputKey(id, task.Attempt)
		if task.OutputPath != want {
			t.Errorf("task %s: output_object_path %q, want %q", id, task.OutputPath, want)
			continue
		}
		out, err := raw.GetObject(t.Context(), &s3.GetObjectInput{Bucket: aws.String(bucket), Key: &want})
		if err != nil {
			t.Errorf("task %s: output: %v", id, err)
			continue
		}
		body, _ := io.ReadAll(out.Body)
		out.Body.Close()
		if wantBody := fmt.Sprintf("task=%s attempt=%d worker=%s\n", id, task.Attempt, task.WorkerID); string(body) != wantBody {
			t.Errorf("task %s: output %q, want %q", id, body, wantBody)
		}
	}
}

// TestCrashKilledWorker runs three worker processes, kills the one that
// started a task first with SIGKILL while its handler works, and shows the
// task recovered as a new attempt by another process once the lease has
// expired, with every task completed exactly once.
func TestCrashKilledWorker(t *testing.T) {
	t.Parallel()
	rc := s3test.RemoteT(t)
	bin := buildCrashWorker(t)
	srv := crashServer{endpoint: rc.Endpoint, access: rc.AccessKey, secret: rc.SecretKey}
	raw := crashClient(t, srv)
	bucket, err := s3test.NewBucket(t.Context(), raw, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	srv.bucket = bucket
	st := crashStore(t, srv)

	events := newCrashEvents()
	procs := map[string]*crashProc{}
	for i := range 3 {
		id := fmt.Sprintf("proc-%d", i)
		procs[id] = startCrashWorker(t, bin, srv, id, 2*time.Second, 1, events)
	}
	ids := crashSubmit(t, st, 6)

	first := events.await(t, "a handler to start", func(e crashEvent, _ []crashEvent) bool { return e.Event == "start" })
	victim := procs[first.Worker]
	victim.kill(t) // in the middle of its task: the handler works for 2s
	killedAt := time.Now()
	t.Logf("killed %s (pid %d) %s into attempt %d of task %s", victim.id, victim.cmd.Process.Pid,
		killedAt.Sub(first.At).Round(time.Millisecond), first.Attempt, first.Task)

	done := crashAwaitCompleted(t, st, ids, events)
	all := events.snapshot()
	crashCheck(t, st, raw, bucket, done, all)

	// The killed attempt's task: recovered as a new attempt by a survivor,
	// once the lease had run out.
	task := done[first.Task]
	if task.Attempt <= first.Attempt || task.WorkerID == victim.id {
		t.Errorf("task %s completed as attempt %d by %s; want a later attempt than %d by another process",
			task.ID, task.Attempt, task.WorkerID, first.Attempt)
	}
	for _, e := range all {
		if e.Event == "claim" && e.Task == first.Task && e.Attempt == first.Attempt+1 {
			// The killed claim's lease ran for crashLease from its claim at
			// the least; allow a second for the Date header's resolution.
			if earliest := first.At.Add(crashLease - time.Second); e.At.Before(earliest) {
				t.Errorf("attempt %d was claimed at %s, before the killed attempt's lease could have expired (%s)",
					e.Attempt, e.At.Format(time.StampMilli), earliest.Format(time.StampMilli))
			}
			t.Logf("recovered by %s as attempt %d, %s after the kill", e.Worker, e.Attempt, e.At.Sub(killedAt).Round(time.Millisecond))
		}
	}
	killedOutput, _ := st.OutputKey(first.Task, first.Attempt)
	if _, err := raw.HeadObject(t.Context(), &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: &killedOutput}); err == nil {
		t.Errorf("the killed attempt left an output at %s", killedOutput)
	}
	for id, p := range procs {
		if p != victim && !p.running() {
			t.Errorf("%s exited:\n%s", id, p.stderr.String())
		}
	}
}

// TestCrashGatewayRestart runs three worker processes against a versitygw
// server of its own, kills the server with SIGKILL while tasks run and
// starts it again on the same port and folder; the workers ride through it
// and every task completes exactly once.
func TestCrashGatewayRestart(t *testing.T) {
	t.Parallel()
	rc := s3test.RemoteT(t)
	bin := buildCrashWorker(t)
	gw := s3test.StartGatewayT(t, rc.GatewayBin)
	srv := crashServer{endpoint: gw.Endpoint, access: gw.AccessKey, secret: gw.SecretKey}
	raw := crashClient(t, srv)
	bucket, err := s3test.NewBucket(t.Context(), raw, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	srv.bucket = bucket
	st := crashStore(t, srv)

	events := newCrashEvents()
	var procs []*crashProc
	for i := range 3 {
		procs = append(procs, startCrashWorker(t, bin, srv, fmt.Sprintf("proc-%d", i), time.Second, 2, events))
	}
	ids := crashSubmit(t, st, 12)

	// Restart once some tasks are done and another is running.
	events.await(t, "three completions", func(_ crashEvent, all []crashEvent) bool {
		n := 0
		for _, e := range all {
			if e.Event == "complete" {
				n++
			}
		}
		return n >= 3
	})
	running := events.await(t, "a handler running", func(e crashEvent, all []crashEvent) bool {
		if e.Event != "start" {
			return false
		}
		for _, o := range all {
			if o.Task == e.Task && o.Attempt == e.Attempt && (o.Event == "complete" || o.Event == "fail" || o.Event == "stopped") {
				return false
			}
		}
		return true
	})
	start := time.Now()
	if err := gw.Restart(t.Context()); err != nil {
		t.Fatalf("restart versitygw: %v", err)
	}
	t.Logf("versitygw was down for %s (restarted while attempt %d of %s ran on %s)",
		time.Since(start).Round(time.Millisecond), running.Attempt, running.Task, running.Worker)

	done := crashAwaitCompleted(t, st, ids, events)
	crashCheck(t, st, raw, bucket, done, events.snapshot())
	for _, p := range procs {
		if !p.running() {
			t.Errorf("%s exited during the restart:\n%s", p.id, p.stderr.String())
		}
	}
	lost := 0
	for _, e := range events.snapshot() {
		if e.Event == "lost" {
			lost++
		}
	}
	t.Logf("%d tasks completed across the restart; %d leases lost on the way", len(done), lost)
}
