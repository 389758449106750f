package s3task_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if any test leaves a goroutine behind: a worker
// that did not stop, a lease whose heartbeat kept going, a server left open.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
