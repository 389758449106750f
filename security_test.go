package s3task_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/conformance"
	"github.com/s3task/s3task/internal/s3test"
)

// s3Actions maps each S3 client method the library calls to the IAM
// action that authorizes it. A call missing here fails
// TestSecurityPoliciesNameCalledActions: add it, and to docs/security.md.
var s3Actions = map[string]string{
	"PutObject":         "s3:PutObject",
	"GetObject":         "s3:GetObject",
	"HeadObject":        "s3:GetObject",
	"ListObjectsV2":     "s3:ListBucket",
	"DeleteObject":      "s3:DeleteObject",
	"DeleteObjects":     "s3:DeleteObject",
	"PresignPutObject":  "s3:PutObject",
	"PresignPostObject": "s3:PutObject",
	"PresignGetObject":  "s3:GetObject",
}

// iamPolicy is the part of an IAM policy document the tests read.
type iamPolicy struct {
	Version   string
	Statement []iamStatement
}

type iamStatement struct {
	Sid       string `json:",omitempty"`
	Effect    string
	Principal any `json:",omitempty"`
	Action    any // a string or a list
	Resource  any
	Condition map[string]map[string]any `json:",omitempty"`
}

func (st iamStatement) list(v any) []string {
	switch v := v.(type) {
	case string:
		return []string{v}
	case []any:
		var out []string
		for _, x := range v {
			out = append(out, fmt.Sprint(x))
		}
		return out
	}
	return nil
}

// securityPolicies reads the role policies of docs/security.md: each JSON
// block after a "<!-- policy: ROLE -->" line.
func securityPolicies(t *testing.T) map[string]iamPolicy {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("docs", "security.md"))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile("(?s)<!-- policy: ([a-z]+) -->\\s*```json\\n(.*?)```")
	policies := map[string]iamPolicy{}
	for _, m := range re.FindAllSubmatch(data, -1) {
		var p iamPolicy
		dec := json.NewDecoder(bytes.NewReader(m[2]))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("docs/security.md, policy %s: %v", m[1], err)
		}
		policies[string(m[1])] = p
	}
	for _, role := range []string{"api", "worker", "operator", "purge"} {
		if _, ok := policies[role]; !ok {
			t.Fatalf("docs/security.md has no policy for %s", role)
		}
	}
	return policies
}

// TestSecurityPoliciesNameCalledActions checks docs/security.md against the
// code: the S3 calls of the library's own (non-test) files map to IAM
// actions, and the role policies together name exactly those actions,
// each scoped to the prefix.
func TestSecurityPoliciesNameCalledActions(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	call := regexp.MustCompile(`\.(?:client|presign)\.([A-Z][A-Za-z0-9]+)\(`)
	called := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range call.FindAllSubmatch(data, -1) {
			op := string(m[1])
			if op == "Options" {
				continue // the client's settings, not a request
			}
			action, ok := s3Actions[op]
			if !ok {
				t.Errorf("%s calls S3 %s, which docs/security.md does not cover (add it to s3Actions and to the policies)", f, op)
				continue
			}
			called[action] = true
		}
	}
	named := map[string]bool{}
	for role, p := range securityPolicies(t) {
		for _, st := range p.Statement {
			if st.Effect != "Allow" {
				t.Errorf("policy %s, %s: effect %q, want only Allow statements", role, st.Sid, st.Effect)
			}
			for _, a := range st.list(st.Action) {
				named[a] = true
				if !called[a] {
					t.Errorf("policy %s, %s: grants %s, which the library never needs", role, st.Sid, a)
				}
			}
			for _, r := range st.list(st.Resource) {
				switch {
				case strings.HasPrefix(r, "arn:aws:s3:::BUCKET/batch-tasks/"):
				case r == "arn:aws:s3:::BUCKET" && fmt.Sprint(st.Condition["StringLike"]["s3:prefix"]) == "[batch-tasks/*]":
				default:
					t.Errorf("policy %s, %s: resource %s is not scoped to the prefix", role, st.Sid, r)
				}
			}
		}
	}
	for a := range called {
		if !named[a] {
			t.Errorf("the library needs %s, which no policy grants", a)
		}
	}
}

// TestLeastPrivilegePolicies applies the four role policies of
// docs/security.md to a versitygw server, as one bucket policy with a user
// per role, and runs the task life cycle with each role's own
// credentials: the API creates (with an idempotency key), checks the
// backend, uploads through its presigned URL, submits and downloads; the
// worker claims, fails one task for good and completes the others, and
// runs the fleet's reconciler; the operator retries the failed task,
// cancels one and reconciles; purge deletes the finished tasks. Each role
// is then refused what its policy leaves out.
func TestLeastPrivilegePolicies(t *testing.T) {
	t.Parallel()
	rc := s3test.RemoteT(t)
	gw, err := s3test.StartGateway(t.Context(), s3test.GatewayConfig{
		Bin: rc.GatewayBin, Dir: filepath.Join(t.TempDir(), "root"), IAMDir: filepath.Join(t.TempDir(), "iam"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := gw.Stop(); err != nil {
			t.Errorf("stop gateway: %v", err)
		}
	})
	ctx := t.Context()
	var closer s3test.TransportCloser
	t.Cleanup(closer.CloseIdleConnections)
	root := gw.Client(closer.Wrap)
	bucket, err := s3test.NewBucket(ctx, root, t.Name())
	if err != nil {
		t.Fatal(err)
	}

	// A user per role, and the roles' statements, each given its user as
	// principal, as the bucket's policy. Statements the roles share (the
	// same actions on the same resources) become one with several
	// principals: versitygw keeps the policy in an extended attribute,
	// which holds a few kilobytes at most.
	var all iamPolicy
	all.Version = "2012-10-17"
	clients := map[string]*s3.Client{}
	principals := map[string][]string{}
	var order []string
	grants := map[string]iamStatement{}
	for role, p := range securityPolicies(t) {
		access, secret := "s3task"+role, "secret-of-"+role
		if err := gw.CreateUser(ctx, access, secret); err != nil {
			t.Fatal(err)
		}
		clients[role] = s3test.NewClientWithKeys(gw.Endpoint, access, secret, closer.Wrap)
		for _, st := range p.Statement {
			st.Sid = ""
			st.Resource = bucketed(st.list(st.Resource), bucket)
			key, err := json.Marshal(st)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := grants[string(key)]; !ok {
				order = append(order, string(key))
				grants[string(key)] = st
			}
			principals[string(key)] = append(principals[string(key)], access)
		}
	}
	for _, key := range order {
		st := grants[key]
		st.Principal = map[string]any{"AWS": principals[key]}
		all.Statement = append(all.Statement, st)
	}
	doc, err := json.Marshal(all)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := root.PutBucketPolicy(ctx, &s3.PutBucketPolicyInput{Bucket: &bucket, Policy: aws.String(string(doc))}); err != nil {
		t.Fatalf("put bucket policy: %v", err)
	}
	opts := &s3task.StoreOptions{InputExt: ".csv", OutputExt: ".txt", Logger: conformance.Logger()}
	stores := map[string]*s3task.Store{}
	for role, c := range clients {
		if stores[role], err = s3task.NewStore(c, bucket, opts); err != nil {
			t.Fatal(err)
		}
	}
	api, op, purger := stores["api"], stores["operator"], stores["purge"]
	rootStore, err := s3task.NewStore(root, bucket, opts)
	if err != nil {
		t.Fatal(err)
	}

	// The API: check, create with a key, upload through the URL, submit.
	for _, role := range []string{"api", "worker", "operator"} {
		if _, err := stores[role].CheckBackend(ctx); err != nil {
			t.Errorf("CheckBackend as %s: %v", role, err)
		}
	}
	// Only "good" has an idempotency key: Purge keeps a keyed task for 10
	// minutes after its key was written, longer than this test runs.
	upload := func(name, body string) *s3task.Task {
		t.Helper()
		params := s3task.CreateParams{Name: name}
		if name == "good" {
			params.Key = "key-good"
		}
		task, up, err := api.CreateForUpload(ctx, params, 5*time.Minute)
		if err != nil {
			t.Fatalf("CreateForUpload %s: %v", name, err)
		}
		req, err := http.NewRequestWithContext(ctx, up.Put.Method, up.Put.URL, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for k, vs := range up.Put.Header {
			if !strings.EqualFold(k, "Host") {
				req.Header[k] = vs
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("presigned upload of %s: %s", name, resp.Status)
		}
		return task
	}
	good := upload("good", "a,b\n")
	bad := upload("bad", "c,d\n")
	idle := upload("idle", "e,f\n")
	if again, err := api.Create(ctx, s3task.CreateParams{Name: "good", Key: "key-good"}); err != nil || again.ID != good.ID {
		t.Errorf("Create with the same key = %v, %v; want task %s again", again, err, good.ID)
	}
	for _, task := range []*s3task.Task{good, bad} {
		if _, err := api.Submit(ctx, task.ID); err != nil {
			t.Fatalf("Submit %s: %v", task.Name, err)
		}
	}
	if page, err := api.List(ctx, s3task.ListOptions{}); err != nil || len(page.Tasks) != 3 {
		t.Errorf("List as the API: %v (%d tasks), want 3 tasks", err, len(page.Tasks))
	}

	// The worker: one task fails for good, the other completes.
	handler := s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
		in, err := job.OpenInput(ctx)
		if err != nil {
			return err
		}
		data, err := io.ReadAll(in)
		in.Close()
		if err != nil {
			return err
		}
		if job.Task.Name == "bad" && job.Task.Attempt == 1 {
			return s3task.Permanent(errors.New("bad input"))
		}
		return job.WriteOutput(ctx, bytes.NewReader(bytes.ToUpper(data)))
	})
	w, err := s3task.NewWorker(stores["worker"], handler, &s3task.WorkerOptions{
		PollInterval: 50 * time.Millisecond, MaxPollInterval: 200 * time.Millisecond,
		LeaseDuration: 6 * time.Second, ClockMargin: time.Second, ReconcileInterval: time.Second, Logger: conformance.Logger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		_ = w.Run(wctx)
	}()
	stop := func() { cancel(); <-ran }
	t.Cleanup(stop)
	await := func(id string, want s3task.Status) *s3task.Task {
		t.Helper()
		var task *s3task.Task
		var err error
		waitEvery(t, 50*time.Millisecond, fmt.Sprintf("task %s is %s", id, want), func() bool {
			task, err = api.Get(ctx, id)
			return err == nil && task.Status == want
		}, func() string { return fmt.Sprintf("last: %v, %v", task, err) })
		return task
	}
	await(good.ID, s3task.StatusCompleted)
	await(bad.ID, s3task.StatusFailed)

	// The API hands out the download; the operator retries and cancels.
	dl, err := api.PresignDownload(ctx, good.ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(dl.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "A,B\n" {
		t.Errorf("presigned download: %s %q, want the output", resp.Status, body)
	}
	if _, err := op.Retry(ctx, bad.ID); err != nil {
		t.Errorf("Retry as the operator: %v", err)
	}
	await(bad.ID, s3task.StatusCompleted)
	if _, err := op.Cancel(ctx, idle.ID, "not needed"); err != nil {
		t.Errorf("Cancel as the operator: %v", err)
	}
	if _, err := op.Reconcile(ctx, s3task.ReconcileOptions{}); err != nil {
		t.Errorf("Reconcile as the operator: %v", err)
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		waitEvery(t, 50*time.Millisecond, what, ok, nil)
	}
	raw := s3test.Objects{Client: root, Bucket: bucket}
	waitFor("the worker's reconciler to take its lease", func() bool {
		_, _, err := raw.Get(ctx, rootStore.Prefix()+"_reconciler")
		return err == nil
	})
	// The worker announces itself under _workers/, and the operator lists
	// it; its Stop deletes the object.
	waitFor("the operator to list the running worker", func() bool {
		list, err := op.Workers(ctx)
		return err == nil && len(list.Workers) == 1 && list.Workers[0].Err == nil && list.Workers[0].Live
	})
	stop()
	if list, err := op.Workers(ctx); err != nil || len(list.Workers) != 0 {
		t.Errorf("Workers as the operator after the worker stopped: %+v, %v; want none", list, err)
	}

	// What each role's policy leaves out.
	denied := func(role, what string, err error) {
		t.Helper()
		var ae smithy.APIError
		if !errors.As(err, &ae) || ae.ErrorCode() != "AccessDenied" {
			t.Errorf("%s may %s: %v; want AccessDenied", role, what, err)
		}
	}
	put := func(role, key string) error {
		_, err := clients[role].PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: &key, Body: strings.NewReader("x"), ContentLength: aws.Int64(1)})
		return err
	}
	del := func(role, key string) error {
		_, err := clients[role].DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &bucket, Key: &key})
		return err
	}
	input, _ := api.InputKey(good.ID)
	output, _ := api.OutputKey(good.ID, 1)
	record := api.Prefix() + good.ID + "/status.json"
	for role := range clients {
		denied(role, "write outside the prefix", put(role, "elsewhere/object"))
		_, err := clients[role].ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &bucket})
		denied(role, "list the whole bucket", err)
		if role != "purge" {
			denied(role, "delete a record", del(role, record))
			denied(role, "delete an input", del(role, input))
		}
	}
	denied("worker", "replace an input", put("worker", input))
	denied("api", "write an output", put("api", output))
	denied("api", "write a presence object", put("api", api.Prefix()+"_workers/fake.json"))
	denied("operator", "write a presence object", put("operator", api.Prefix()+"_workers/fake.json"))
	denied("operator", "write an output", put("operator", output))
	denied("operator", "replace an input", put("operator", input))
	denied("purge", "write an input", put("purge", input))

	// Purge leaves a task until a minute after its last change, and a real
	// server's clock cannot be moved on: the records are set back two
	// minutes, as if the tasks had finished then.
	for _, task := range []*s3task.Task{good, bad, idle} {
		key := rootStore.Prefix() + task.ID + "/status.json"
		body, _, err := raw.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		var rec map[string]any
		if err := json.Unmarshal(body, &rec); err != nil {
			t.Fatal(err)
		}
		at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(rec["updated_at"]))
		if err != nil {
			t.Fatal(err)
		}
		rec["updated_at"] = at.Add(-2 * time.Minute).Format(time.RFC3339Nano)
		if body, err = json.Marshal(rec); err != nil {
			t.Fatal(err)
		}
		if _, err := raw.Put(ctx, key, body); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := api.Purge(ctx, time.Now().Add(time.Hour), s3task.PurgeOptions{}); err == nil {
		t.Errorf("Purge as the API succeeded; want AccessDenied")
	}

	// Purge: every finished task goes, folder and record, but the keyed
	// one, whose key is minutes old (the purge role reads the key to know).
	report, err := purger.Purge(ctx, time.Now().Add(time.Hour), s3task.PurgeOptions{})
	if err != nil {
		t.Fatalf("Purge: %v", err)
	}
	slices.Sort(report.Purged)
	want := []string{bad.ID, idle.ID}
	slices.Sort(want)
	if !slices.Equal(report.Purged, want) || report.Kept != 1 {
		t.Errorf("purged %v and kept %d, want %v purged and the keyed task kept", report.Purged, report.Kept, want)
	}
	out, err := root.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &bucket, Prefix: aws.String(api.Prefix())})
	if err != nil {
		t.Fatal(err)
	}
	kept := api.Prefix() + good.ID + "/"
	for _, obj := range out.Contents {
		key := aws.ToString(obj.Key)
		if !strings.HasPrefix(key, api.Prefix()+"_") && !strings.HasPrefix(key, kept) {
			t.Errorf("%s is left after the purge", key)
		}
	}
	if _, _, err := raw.Get(ctx, kept+"status.json"); err != nil {
		t.Errorf("the keyed task's record: %v; want it kept", err)
	}
}

// bucketed puts bucket in place of BUCKET in resources.
func bucketed(resources []string, bucket string) []string {
	out := make([]string, len(resources))
	for i, r := range resources {
		out[i] = strings.Replace(r, "arn:aws:s3:::BUCKET", "arn:aws:s3:::"+bucket, 1)
	}
	return out
}
