package conformance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/s3task/s3task"
)

// Run runs the whole suite against b, each test in parallel on a target of
// its own. Tests that need a capability b lacks are skipped, saying so.
func Run(t *testing.T, b Backend) {
	tests := []struct {
		name string
		run  func(t *testing.T, b Backend)
	}{
		// The store: the calls and what they leave in the bucket.
		{"CheckBackend", testCheckBackend},
		{"Lifecycle", testLifecycle},
		{"Paging", testPaging},
		// Conditional writes, raw and through the library.
		{"CreateRace", testCreateRace},
		{"CompareAndSetRace", testCompareAndSetRace},
		{"StaleWriter", testStaleWriter},
		{"IfMatchOnMissingKey", testIfMatchOnMissingKey},
		{"Behaviours", testBehaviours},
		{"ConditionalReads", testConditionalReads},
		{"ClaimRace", testClaimRace},
		{"IdempotentCreateRace", testIdempotentCreateRace},
		{"Contention", testContention},
		// Workers.
		{"WorkerEndToEnd", testWorkerEndToEnd},
		{"RetriesToMaxAttempts", testRetriesToMaxAttempts},
		{"CrashRecovery", testCrashRecovery},
		{"ScheduledStart", testScheduledStart},
		{"CancelWhileRunning", testCancelWhileRunning},
		{"RecordVanishesWhileRunning", testRecordVanishesWhileRunning},
		{"InputReplacedAfterSubmit", testInputReplacedAfterSubmit},
		// Files straight to and from S3.
		{"PresignedUpload", testPresignedUpload},
		{"PresignedForm", testPresignedForm},
		{"PresignedDownload", testPresignedDownload},
		{"FormSizeCap", testFormSizeCap},
		{"PresignExpiry", testPresignExpiry},
		{"PresignTampered", testPresignTampered},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, b) })
	}
}

// testCheckBackend: the server enforces conditional writes, and the check
// says so in its report, as it says whether presigned URLs are checked; the
// check would refuse the server if it ignored the headers. The report is
// logged: docs/compatibility.md quotes it.
func testCheckBackend(t *testing.T, b Backend) {
	h := open(t, b, nil)
	report, err := h.store.CheckBackend(h.ctx)
	if err != nil {
		t.Fatalf("CheckBackend: %v", err)
	}
	t.Logf("%s: CheckBackend report: %+v", h.tg.Backend, *report)
	presign := s3task.NotEnforced
	if h.tg.Caps.VerifiesSignatures {
		presign = s3task.Enforced
	}
	want := s3task.BackendReport{
		ConditionalCreate: s3task.Enforced, ConditionalUpdate: s3task.Enforced,
		AtomicUpdate: s3task.Enforced, RaceWinners: 1,
		IfMatchMissingKey: s3task.Enforced, IfMatchMissingKeyAnswer: report.IfMatchMissingKeyAnswer,
		PresignSignature: presign, PresignExpiry: presign,
	}
	if diff := cmp.Diff(want, *report, cmpopts.IgnoreFields(s3task.BackendReport{}, "ServerClockOffset", "Notes")); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
	switch report.IfMatchMissingKeyAnswer {
	case "404 NoSuchKey", "412 PreconditionFailed":
	default:
		t.Errorf("If-Match on a missing key answered %q, want 404 NoSuchKey or 412 PreconditionFailed", report.IfMatchMissingKeyAnswer)
	}
	if len(report.Notes) > 0 {
		t.Errorf("notes: %q", report.Notes)
	}

	// The same server through a client that drops the conditional headers
	// before signing is a store that ignores them: the check must refuse it.
	// (Stripping them from the signed request instead would break the
	// signature on a server that checks it.)
	blind, err := s3task.NewStore(s3.New(h.tg.Client().Options(), func(o *s3.Options) {
		o.APIOptions = append(o.APIOptions, dropConditions)
	}), h.tg.Bucket, &s3task.StoreOptions{Logger: Logger()})
	if err != nil {
		t.Fatal(err)
	}
	report, err = blind.CheckBackend(h.ctx)
	if !errors.Is(err, s3task.ErrConditionalWritesUnsupported) {
		t.Errorf("CheckBackend without conditional headers = %v, want ErrConditionalWritesUnsupported", err)
	}
	if report.ConditionalCreate != s3task.NotEnforced || report.ConditionalUpdate != s3task.NotEnforced || report.RaceWinners != racersInCheck {
		t.Errorf("report without conditional headers: %+v; want creates and updates not enforced, every racer winning", *report)
	}
}

// racersInCheck is how many writers race in CheckBackend.
const racersInCheck = 4

// dropConditions is an SDK stack option that removes If-Match and
// If-None-Match from every PutObject before it is signed.
func dropConditions(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("DropConditions",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			if p, ok := in.Parameters.(*s3.PutObjectInput); ok {
				c := *p
				c.IfMatch, c.IfNoneMatch = nil, nil
				in.Parameters = &c
			}
			return next.HandleInitialize(ctx, in)
		}), middleware.Before)
}

// testLifecycle walks tasks through create, submit, cancel, fail, retry and
// complete, checking the record and the marker after each step.
func testLifecycle(t *testing.T, b Backend) {
	h := open(t, b, nil)
	ctx, st := h.ctx, h.store
	ignoreStamp := cmp.FilterPath(func(p cmp.Path) bool {
		f := p.Last().String()
		return f == ".UpdatedAt" || f == ".Revision"
	}, cmp.Ignore())

	// Create: a record in status created, no marker.
	created, err := st.Create(ctx, s3task.CreateParams{
		Name: "lifecycle", Type: "csv", Payload: []byte(`{"k": 1}`), CreatedBy: "conformance",
	})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if created.Status != s3task.StatusCreated || created.Attempt != 0 || string(created.Payload) != `{"k":1}` {
		t.Errorf("created: status %s, attempt %d, payload %s", created.Status, created.Attempt, created.Payload)
	}
	if diff := cmp.Diff(created, h.get(created.ID)); diff != "" {
		t.Errorf("Get after Create (-created +stored):\n%s", diff)
	}
	if h.hasMarker(created.ID) {
		t.Errorf("a created task has a marker")
	}

	// Submit without input: refused, nothing changes.
	if _, err := st.Submit(ctx, created.ID); !errors.Is(err, s3task.ErrInputMissing) {
		t.Errorf("Submit without input = %v, want ErrInputMissing", err)
	}
	if diff := cmp.Diff(created, h.get(created.ID)); diff != "" || h.hasMarker(created.ID) {
		t.Errorf("a refused Submit changed the task (marker %v):\n%s", h.hasMarker(created.ID), diff)
	}

	// Submit with input: queued, marker written.
	input := "a,b\n1,2\n"
	if err := st.UploadInput(ctx, created.ID, strings.NewReader(input)); err != nil {
		t.Fatalf("UploadInput: %v", err)
	}
	queued, err := st.Submit(ctx, created.ID)
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	if queued.Status != s3task.StatusQueued || queued.InputSize != int64(len(input)) {
		t.Errorf("submitted: status %s, input size %d", queued.Status, queued.InputSize)
	}
	if !h.hasMarker(created.ID) {
		t.Errorf("a queued task has no marker")
	}
	again, err := st.Submit(ctx, created.ID)
	if err != nil || again.Revision != queued.Revision {
		t.Errorf("second Submit = %v (revision %q, was %q); want no change", err, again.Revision, queued.Revision)
	}

	// Cancel: abandoned, marker gone, and it stays that way.
	abandoned, err := st.Cancel(ctx, created.ID, "changed my mind")
	if err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	if abandoned.Status != s3task.StatusAbandoned || abandoned.CancelReason != "changed my mind" {
		t.Errorf("cancelled: status %s, reason %q", abandoned.Status, abandoned.CancelReason)
	}
	if h.hasMarker(created.ID) {
		t.Errorf("an abandoned task kept its marker")
	}
	if again, err := st.Cancel(ctx, created.ID, "twice"); err != nil || again.Revision != abandoned.Revision {
		t.Errorf("second Cancel = %v; want success without a write", err)
	}
	if _, err := st.Retry(ctx, created.ID); !errors.Is(err, s3task.ErrInvalidTransition) {
		t.Errorf("Retry of an abandoned task = %v, want ErrInvalidTransition", err)
	}
	if _, err := st.Submit(ctx, created.ID); !errors.Is(err, s3task.ErrInvalidTransition) {
		t.Errorf("Submit of an abandoned task = %v, want ErrInvalidTransition", err)
	}

	// A permanent failure, an operator's Retry, then success.
	ev := newEvents()
	h.startWorker(h.newStore(nil), s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		if job.Task.Attempt == 1 {
			return s3task.Permanent(errors.New("bad rows"))
		}
		return job.WriteOutput(ctx, strings.NewReader(fmt.Sprintf("ok attempt %d", job.Task.Attempt)))
	}), h.workerOptions("lifecycle-worker", ev.hooks()))
	task := h.submit(s3task.CreateParams{Name: "fails then succeeds"}, "x\n")
	f := await(h, ev.failed, "the permanent failure")
	if !f.task.Terminal() || f.task.Attempt != 1 {
		t.Errorf("failure: terminal %v, attempt %d; want a final failure of attempt 1", f.task.Terminal(), f.task.Attempt)
	}
	h.waitFor("the failed task's marker to go", func() bool { return !h.hasMarker(task.ID) })
	failed := h.get(task.ID)
	if failed.Status != s3task.StatusFailed || !failed.RetryAt.IsZero() || !strings.Contains(failed.LastError, "bad rows") {
		t.Errorf("failed record: status %s, retry at %v, last error %q", failed.Status, failed.RetryAt, failed.LastError)
	}
	retried, err := st.Retry(ctx, task.ID)
	if err != nil {
		t.Fatalf("Retry: %v", err)
	}
	if retried.Status != s3task.StatusQueued || retried.MaxAttempts < 2 {
		t.Errorf("retried: status %s, max attempts %d", retried.Status, retried.MaxAttempts)
	}
	done := await(h, ev.completed, "the retried task to complete")
	if done.ID != task.ID || done.Attempt != 2 {
		t.Errorf("completed %s attempt %d, want %s attempt 2", done.ID, done.Attempt, task.ID)
	}
	h.waitFor("the completed task's marker to go", func() bool { return !h.hasMarker(task.ID) })
	completed := h.get(task.ID)
	if completed.Status != s3task.StatusCompleted || completed.OutputPath != h.outputKey(task.ID, 2) {
		t.Errorf("completed record: status %s, output %q", completed.Status, completed.OutputPath)
	}
	if out := h.output(task.ID); out != "ok attempt 2" {
		t.Errorf("output %q, want the second attempt's", out)
	}
	if _, err := st.Cancel(ctx, task.ID, "too late"); !errors.Is(err, s3task.ErrInvalidTransition) {
		t.Errorf("Cancel of a completed task = %v, want ErrInvalidTransition", err)
	}
	if diff := cmp.Diff(completed, h.get(task.ID), ignoreStamp); diff != "" {
		t.Errorf("a refused Cancel changed the completed record:\n%s", diff)
	}

	// List shows both, newest first.
	page, err := st.List(ctx, s3task.ListOptions{})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	var got []string
	for _, x := range page.Tasks {
		got = append(got, x.ID+" "+string(x.Status))
	}
	want := []string{task.ID + " completed", created.ID + " abandoned"}
	if diff := cmp.Diff(want, got); diff != "" || len(page.Broken) != 0 || page.NextCursor != "" {
		t.Errorf("List (-want +got):\n%s\nbroken %v, cursor %q", diff, page.Broken, page.NextCursor)
	}
}
