package s3task_test

import (
	"testing"

	"github.com/s3task/s3task/internal/conformance"
	"github.com/s3task/s3task/internal/s3test"
)

// TestConformance runs the conformance suite against the in-process
// gofakes3 server, always, and against the real S3 server named by
// S3TASK_TEST_ENDPOINT (versitygw under internal/cmd/s3gw) when it is set.
// Without it the versitygw half is skipped, not passed.
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
}
