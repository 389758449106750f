package main

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: every
// service, worker, browser and HTTP connection a test starts must end with
// it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
