package s3task_test

import (
	"testing"

	"github.com/s3task/s3task/internal/conformance"
	"github.com/s3task/s3task/internal/s3test"
)

// TestConformance runs the conformance suite against the in-process
// gofakes3 server, always, and against the real S3 servers internal/cmd/s3gw
// starts: versitygw (S3TASK_TEST_ENDPOINT) and SeaweedFS
// (S3TASK_TEST_SEAWEEDFS_ENDPOINT). A real server that is not configured is
// skipped, not passed.
func TestConformance(t *testing.T) {
	t.Parallel()
	t.Run("gofakes3", func(t *testing.T) {
		t.Parallel()
		conformance.Run(t, conformance.Fake())
	})
	t.Run("versitygw", func(t *testing.T) {
		t.Parallel()
		conformance.Run(t, conformance.Remote("versitygw", s3test.RemoteT(t)))
	})
	t.Run("seaweedfs", func(t *testing.T) {
		t.Parallel()
		conformance.Run(t, conformance.Remote("seaweedfs", s3test.SeaweedRemoteT(t)))
	})
}
