package sim

import (
	"testing"

	"github.com/s3task/s3task/internal/probe"
)

// Every required branch is one the library reports.
func TestRequiredBranchesExist(t *testing.T) {
	for _, b := range Required {
		if _, ok := probe.Branches[b]; !ok {
			t.Errorf("required branch %q is not in probe.Branches", b)
		}
	}
}
