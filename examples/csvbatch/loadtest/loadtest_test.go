package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/s3task/s3task/internal/s3test"
)

// TestSmallLoad runs the load test with tiny numbers against a versitygw
// of its own. The binary is found as the root module's tests find it
// (S3TASK_VERSITYGW_BIN, which `go run ./internal/cmd/s3gw -- go test ...`
// sets, versitygw on PATH, or .cache/bin/versitygw).
func TestSmallLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the load test builds csvbatch and runs it for a few seconds")
	}
	bin, err := s3test.GatewayBinary()
	if err != nil {
		t.Skipf("no versitygw, so no load test (run it with `go run ./internal/cmd/s3gw -- go test ./examples/...`, or install it): %v", err)
	}
	cfg := DefaultConfig()
	cfg.Clients, cfg.Duration, cfg.Drain, cfg.Rows, cfg.Idle = 2, 3*time.Second, time.Minute, 20, time.Second
	cfg.GatewayBin = bin
	var progress bytes.Buffer
	cfg.Progress = &progress
	res, err := Run(t.Context(), cfg)
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	var table bytes.Buffer
	res.WriteTable(&table)
	t.Log(table.String())
	if n := res.ErrorCount(); n != 0 {
		t.Errorf("%d errors: %v", n, res.Errors)
	}
	if res.TasksCompleted < 1 {
		t.Errorf("no task completed")
	}
	if res.Verify.Completed != res.TasksCompleted || res.Verify.WorkerCompletions != res.TasksCompleted {
		t.Errorf("the clients checked %d tasks, the bucket holds %d completed, the workers counted %d",
			res.TasksCompleted, res.Verify.Completed, res.Verify.WorkerCompletions)
	}
	if res.S3PerTask["total"] <= 0 || res.APIRSSEndKB <= 0 {
		t.Errorf("no S3 requests per task (%v) or no RSS (%d kB)", res.S3PerTask, res.APIRSSEndKB)
	}
}

func TestDataset(t *testing.T) {
	d := newDataset(22)
	if d.success+d.failed != 22 || d.failed != 5 {
		t.Fatalf("success %d, failed %d", d.success, d.failed)
	}
	if !bytes.Contains(d.output, []byte("User 3,,3,error: missing email\n")) ||
		!bytes.Contains(d.output, []byte("User 5,not-an-address,5,error: invalid email\n")) ||
		!bytes.Contains(d.output, []byte("User 0,user.0@example.com,0,ok\n")) {
		t.Fatalf("unexpected output:\n%s", d.output)
	}
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i))
	}
	if p := percentile(ds, 0.5); p != 50 {
		t.Errorf("p50 = %d", p)
	}
	if p := percentile(ds, 0.99); p != 99 {
		t.Errorf("p99 = %d", p)
	}
	if p := percentile(ds[:1], 0.99); p != 1 {
		t.Errorf("p99 of one = %d", p)
	}
}
