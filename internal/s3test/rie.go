package s3test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// EnvRIEBin is the path of the AWS Lambda Runtime Interface Emulator
// (aws-lambda-rie), for the tests that run a function as Lambda would.
const EnvRIEBin = "S3TASK_RIE_BIN"

// RIEBinary returns the aws-lambda-rie binary to run: $S3TASK_RIE_BIN, else
// aws-lambda-rie on PATH, else .cache/bin/aws-lambda-rie under the module
// root.
func RIEBinary() (string, error) {
	return findBinary(EnvRIEBin, "aws-lambda-rie", func(bin string) string {
		return "GOBIN=" + bin + " go install github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie@v0.0.0-20261030222936-bef5c4ba774d"
	})
}

// RIE is a running Runtime Interface Emulator with one function: one
// execution environment, as a warm Lambda has, which takes one invocation
// at a time.
type RIE struct {
	// URL is the function's invocation endpoint.
	URL  string
	proc process
}

// StartRIE runs the function bootstrap (a program built with
// aws-lambda-go) under aws-lambda-rie on free ports of 127.0.0.1, with the
// environment env added to this process's and a timeout of the given whole
// seconds, logging to dir/rie.log; it returns once the emulator accepts
// connections. The function itself starts at the first invocation.
func StartRIE(ctx context.Context, bootstrap string, env []string, timeout time.Duration, dir string) (*RIE, error) {
	bin, err := RIEBinary()
	if err != nil {
		return nil, err
	}
	r := &RIE{proc: process{name: "aws-lambda-rie"}}
	log, err := r.proc.logTo(nil, filepath.Join(dir, "rie.log"))
	if err != nil {
		return nil, err
	}
	addrs, err := r.proc.startListening(ctx, 2, log, func(addrs []string) *exec.Cmd {
		cmd := exec.Command(bin, "--log-level", "error", "--runtime-interface-emulator-address", addrs[0], "--runtime-api-address", addrs[1], bootstrap)
		cmd.Env = append(append(os.Environ(), env...), "AWS_LAMBDA_FUNCTION_TIMEOUT="+strconv.Itoa(int(timeout/time.Second)))
		return cmd
	})
	if err == nil {
		r.URL = "http://" + addrs[0] + "/2015-03-31/functions/function/invocations"
		return r, nil
	}
	r.proc.closeLog()
	return nil, fmt.Errorf("s3test: start aws-lambda-rie: %w", err)
}

// Invoke invokes the function with payload and returns what it answered.
func (r *RIE) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.URL, bytes.NewReader(payload))
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return body, fmt.Errorf("s3test: invoke: %s: %s", resp.Status, body)
	}
	// The emulator answers 200 to a function that returned an error, with
	// the error as the body.
	var fail struct {
		Message string `json:"errorMessage"`
		Type    string `json:"errorType"`
	}
	if json.Unmarshal(body, &fail) == nil && fail.Message != "" {
		return body, fmt.Errorf("s3test: invoke: the function failed (%s): %s", fail.Type, fail.Message)
	}
	return body, nil
}

// Log returns the end of the emulator's and the function's output.
func (r *RIE) Log() string { return r.proc.logTail() }

// Stop stops the emulator and its function.
func (r *RIE) Stop() error {
	err := r.proc.stop(5 * time.Second)
	r.proc.closeLog()
	return err
}
