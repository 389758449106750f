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
// the next invocation (the schedule's sweep here) finishes the task.
func TestTimeoutReleases(t *testing.T) {
	e := newEnv(t)
	fn := e.start("fn1", 8*time.Second)
	task, ev := e.submit(`{"hold": true}`)
	_, other := e.submit(`{}`)
	start := time.Now()
	out, err := fn.Invoke(e.ctx, sqsBatch(map[string][]byte{"held": ev, "quick": other}))
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("the invocation took %s, past its timeout of 8s", d)
	}
	var resp events.SQSEventResponse
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatalf("answer %s: %v", out, err)
	}
	if len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != "held" {
		t.Errorf("batch item failures %+v; want the message of the held task only", resp.BatchItemFailures)
	}
	got := e.get(task.ID)
	if got.Status != s3task.StatusQueued || got.AttemptsUsed() != 0 {
		t.Fatalf("after a timeout shorter than the task, it is %s with %d attempts used; want queued with none", got.Status, got.AttemptsUsed())
	}
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
