package s3tasklambda_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/s3test"
	"github.com/s3task/s3task/s3tasklambda"
)

var (
	buildOnce sync.Once
	bootstrap string
	buildErr  error
)

// function builds the test function once per run.
func function(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "s3tasklambda-")
		if err != nil {
			buildErr = err
			return
		}
		bootstrap = filepath.Join(dir, "bootstrap")
		out, err := exec.Command("go", "build", "-o", bootstrap, "./internal/testfunc").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("build the test function: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return bootstrap
}

func TestMain(m *testing.M) {
	code := m.Run()
	if bootstrap != "" {
		os.RemoveAll(filepath.Dir(bootstrap))
	}
	os.Exit(code)
}

// env is a bucket on the test's S3 server, a Store on it, and the
// function's environment.
type env struct {
	t      *testing.T
	ctx    context.Context
	rc     s3test.RemoteConfig
	bucket string
	store  *s3task.Store
}

func newEnv(t *testing.T) *env {
	rc := s3test.RemoteT(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	t.Cleanup(cancel)
	bucket, err := s3test.NewBucket(ctx, rc.Client(), "lambda")
	if err != nil {
		t.Fatal(err)
	}
	store, err := s3task.NewStore(rc.Client(), bucket, &s3task.StoreOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, ctx: ctx, rc: rc, bucket: bucket, store: store}
}

// start runs the function under the emulator with the given timeout.
func (e *env) start(id string, timeout time.Duration) *s3test.RIE {
	t := e.t
	r, err := s3test.StartRIE(e.ctx, function(t), []string{
		"S3TASK_TEST_ENDPOINT=" + e.rc.Endpoint, "S3TASK_TEST_ACCESS_KEY=" + e.rc.AccessKey, "S3TASK_TEST_SECRET_KEY=" + e.rc.SecretKey,
		"TESTFUNC_BUCKET=" + e.bucket, "TESTFUNC_ID=" + id,
	}, timeout, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("function %s:%s", id, r.Log())
		}
		r.Stop()
	})
	return r
}

// submit makes a queued task with payload and returns it with the S3 event
// notification of its marker, as S3 would send it.
func (e *env) submit(payload string) (*s3task.Task, []byte) {
	t := e.t
	task, err := e.store.Create(e.ctx, s3task.CreateParams{Name: "on lambda", Payload: json.RawMessage(payload)})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.UploadInput(e.ctx, task.ID, strings.NewReader("x\n")); err != nil {
		t.Fatal(err)
	}
	if task, err = e.store.Submit(e.ctx, task.ID); err != nil {
		t.Fatal(err)
	}
	keys, err := (s3test.Objects{Client: e.rc.Client(), Bucket: e.bucket}).Keys(e.ctx, e.store.Prefix()+"active/")
	if err != nil {
		t.Fatal(err)
	}
	var marker string
	for _, k := range keys {
		if strings.HasSuffix(k, task.ID) {
			marker = k
		}
	}
	if marker == "" {
		t.Fatalf("no marker for %s among %v", task.ID, keys)
	}
	ev := fmt.Sprintf(`{"Records":[{"eventVersion":"2.1","eventSource":"aws:s3","eventName":"ObjectCreated:Put","s3":{"bucket":{"name":%q},"object":{"key":%q,"size":0}}}]}`, e.bucket, marker)
	return task, []byte(ev)
}

func sqsBatch(bodies map[string][]byte) []byte {
	var batch events.SQSEvent
	for id, b := range bodies {
		batch.Records = append(batch.Records, events.SQSMessage{MessageId: id, Body: string(b), EventSource: "aws:sqs"})
	}
	out, _ := json.Marshal(batch)
	return out
}

// awaitDue returns once task is due by any worker's clock. Its marker is
// named after when it fell due by the test's Store, which never runs ahead
// of the S3 server's clock once it has seen a response; a worker's
// estimate may lag the server's by up to a second (Date headers tell the
// second) and the network's delay, and a sweep that lists the marker
// before then leaves it for the next sweep, as it should. The wait is for
// a reading of the clock, whatever the machine's load.
func (e *env) awaitDue(task *s3task.Task) {
	time.Sleep(task.DueAt.Add(2 * time.Second).Sub(e.store.Now()))
}

func (e *env) get(id string) *s3task.Task {
	got, err := e.store.Get(e.ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return got
}

func (e *env) output(task *s3task.Task) string {
	body, _, err := (s3test.Objects{Client: e.rc.Client(), Bucket: e.bucket}).Get(e.ctx, task.OutputPath)
	if err != nil {
		e.t.Fatal(err)
	}
	return string(body)
}

// TestS3EventRunsTask: an invocation by S3's notification of a task's
// marker runs the task to completion and returns.
func TestS3EventRunsTask(t *testing.T) {
	e := newEnv(t)
	fn := e.start("fn1", 30*time.Second)
	task, ev := e.submit(`{}`)
	if _, err := fn.Invoke(e.ctx, ev); err != nil {
		t.Fatal(err)
	}
	got := e.get(task.ID)
	if got.Status != s3task.StatusCompleted || got.AttemptsUsed() != 1 {
		t.Fatalf("after the invocation the task is %s after %d attempts; want completed after 1", got.Status, got.AttemptsUsed())
	}
	if out := e.output(got); out != "done by fn1" {
		t.Errorf("output %q", out)
	}
}

// TestTimeoutReleases: a function whose timeout is shorter than the task
// gives the attempt back before its deadline, not using it up, and reports
// the SQS message that named the task as failed, for SQS to deliver again;
// the next invocation (the schedule's sweep here), once the task is due
// again by any clock, finishes the task.
func TestTimeoutReleases(t *testing.T) {
	e := newEnv(t)
	fn := e.start("fn1", 10*time.Second) // Reserve 5s: the held task is stopped 5s in
	task, ev := e.submit(`{"hold": true}`)
	_, other := e.submit(`{}`)
	// An invocation still running at its timeout fails with an error
	// (the emulator answers "Task timed out"): one without an error
	// returned in time.
	out, err := fn.Invoke(e.ctx, sqsBatch(map[string][]byte{"held": ev, "quick": other}))
	if err != nil {
		t.Fatal(err)
	}
	var resp events.SQSEventResponse
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatalf("answer %s: %v", out, err)
	}
	if len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != "held" {
		t.Errorf("batch item failures %+v; want the message of the held task only", resp.BatchItemFailures)
	}
	got := e.get(task.ID)
	if got.Status != s3task.StatusQueued || got.AttemptsUsed() != 0 || got.ReleasedAttempts != 1 {
		t.Fatalf("after a timeout shorter than the task, it is %s with %d attempts used, %d given back; want queued with none used, 1 given back",
			got.Status, got.AttemptsUsed(), got.ReleasedAttempts)
	}
	// The release named its marker after the function's estimate of the
	// server's clock, which may step back by up to a second as Date
	// headers narrow it: a sweep that lists the marker before that second
	// is over leaves it to the next sweep.
	e.awaitDue(got)
	if _, err := fn.Invoke(e.ctx, []byte(`{"source":"aws.events","detail-type":"Scheduled Event"}`)); err != nil {
		t.Fatal(err)
	}
	if got = e.get(task.ID); got.Status != s3task.StatusCompleted || got.AttemptsUsed() != 1 {
		t.Errorf("after the sweep the task is %s with %d attempts used; want completed with 1", got.Status, got.AttemptsUsed())
	}
}

// TestDuplicateEvents: the same notification invokes two execution
// environments at once (S3 and SQS deliver at least once): the task runs
// once, in one of them.
func TestDuplicateEvents(t *testing.T) {
	e := newEnv(t)
	a, b := e.start("fnA", 30*time.Second), e.start("fnB", 30*time.Second)
	task, ev := e.submit(`{"work": 2000000000}`)
	var wg sync.WaitGroup
	for _, fn := range []*s3test.RIE{a, b} {
		wg.Go(func() {
			if _, err := fn.Invoke(e.ctx, ev); err != nil {
				t.Errorf("invoke: %v", err)
			}
		})
	}
	wg.Wait()
	got := e.get(task.ID)
	if got.Status != s3task.StatusCompleted || got.AttemptsUsed() != 1 {
		t.Fatalf("the task is %s after %d attempts; want completed after 1", got.Status, got.AttemptsUsed())
	}
	keys, err := (s3test.Objects{Client: e.rc.Client(), Bucket: e.bucket}).Keys(e.ctx, e.store.Prefix()+task.ID+"/output")
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 {
		t.Errorf("outputs %v; want one attempt's", keys)
	}
	t.Logf("ran in %s", e.output(got))
}

// TestNonJSONPayloadSweeps: a payload that is not JSON (a schedule's
// constant text) runs a sweep, as the package documentation says, instead
// of failing in aws-lambda-go's decoding before the function sees it.
func TestNonJSONPayloadSweeps(t *testing.T) {
	e := newEnv(t)
	fn := e.start("fn1", 30*time.Second)
	task, _ := e.submit(`{}`)
	e.awaitDue(task)
	if _, err := fn.Invoke(e.ctx, []byte("sweep, please")); err != nil {
		t.Fatal(err)
	}
	if got := e.get(task.ID); got.Status != s3task.StatusCompleted {
		t.Errorf("after an invocation with a payload that is not JSON, the task is %s; want completed by the sweep", got.Status)
	}
}

// TestLongTaskFailsAfterReleaseLimit: a task longer than the function's
// timeout less Reserve is given back by each invocation that starts it,
// and the fourth give-back in a row (the default ReleaseLimit is 3) fails
// it for good, with the category timeout and a last error that says why;
// later invocations leave it alone. The loop counts give-backs from the
// task's history, not invocations: one that ends before its worker claims
// the task (a busy machine) changes nothing.
func TestLongTaskFailsAfterReleaseLimit(t *testing.T) {
	e := newEnv(t)
	fn := e.start("fn1", 9*time.Second) // Reserve 5s: each invocation holds the task about 4s
	task, _ := e.submit(`{"forever": true}`)
	e.awaitDue(task)
	sweep := []byte(`{"source":"aws.events","detail-type":"Scheduled Event"}`)
	var got *s3task.Task
	for i := 1; ; i++ {
		if i > 3*(s3tasklambda.DefaultReleaseLimit+1) {
			t.Fatalf("after %d invocations the task is %s with %d attempts given back; want it failed after %d", i-1, got.Status, got.ReleasedAttempts, s3tasklambda.DefaultReleaseLimit)
		}
		if _, err := fn.Invoke(e.ctx, sweep); err != nil {
			t.Fatal(err)
		}
		got = e.get(task.ID)
		if got.Status != s3task.StatusQueued {
			break
		}
		if got.AttemptsUsed() != 0 || got.ReleasedAttempts > s3tasklambda.DefaultReleaseLimit {
			t.Fatalf("after invocation %d the task is queued with %d attempts used, %d given back; want none used, at most %d given back",
				i, got.AttemptsUsed(), got.ReleasedAttempts, s3tasklambda.DefaultReleaseLimit)
		}
	}
	if got.Status != s3task.StatusFailed || !got.Terminal() || got.ErrorCategory != s3task.CategoryTimeout || got.AttemptsUsed() != 1 ||
		got.ReleasedAttempts != s3tasklambda.DefaultReleaseLimit || !strings.Contains(got.LastError, "limit is 3") {
		t.Fatalf("the task is %s (terminal %v), category %q, %d attempts used, %d given back, last error %q; want failed for good, %q, 1 used, %d given back, the limit named",
			got.Status, got.Terminal(), got.ErrorCategory, got.AttemptsUsed(), got.ReleasedAttempts, got.LastError, s3task.CategoryTimeout, s3tasklambda.DefaultReleaseLimit)
	}
	var outcomes []string
	for _, a := range got.History {
		outcomes = append(outcomes, string(a.Outcome)+"/"+a.ErrorCategory)
	}
	if want := "released/shutdown,released/shutdown,released/shutdown,failed/timeout"; strings.Join(outcomes, ",") != want {
		t.Errorf("attempt history %v; want %s", outcomes, want)
	}
	if _, err := fn.Invoke(e.ctx, sweep); err != nil {
		t.Fatal(err)
	}
	if again := e.get(task.ID); again.Revision != got.Revision {
		t.Errorf("an invocation after the failure changed the task: %s at attempt %d", again.Status, again.Attempt)
	}
}
