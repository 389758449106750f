package sim

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"testing/synctest"
)

// TestReplay: a seed played twice gives byte-identical histories. The
// library's randomness is seeded (internal/entropy), every random decision
// of the world is keyed by what it decides, and no two requests reach S3 at
// the same instant of virtual time, so neither the Go scheduler nor the
// race detector's shuffling of it changes what happens.
func TestReplay(t *testing.T) {
	t.Parallel()
	for _, seed := range []uint64{3, 4, 15, 19, 20, 22, 31, 47} {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			var runs [2][]byte
			for i := range runs {
				synctest.Test(t, func(t *testing.T) {
					// Seed 4 with event notifications as well, whatever
					// its draw.
					h, err := Run(Config{Seed: seed, Tasks: 30, Events: seed == 4})
					if err != nil {
						t.Fatal(err)
					}
					var b bytes.Buffer
					if err := h.Encode(&b); err != nil {
						t.Fatal(err)
					}
					runs[i] = b.Bytes()
					if dir := os.Getenv("SIM_REPLAY_DIR"); dir != "" {
						os.WriteFile(fmt.Sprintf("%s/%d-%d.txt", dir, seed, i), runs[i], 0o644)
					}
				})
			}
			if bytes.Equal(runs[0], runs[1]) {
				return
			}
			a, b := strings.Split(string(runs[0]), "\n"), strings.Split(string(runs[1]), "\n")
			for i := range min(len(a), len(b)) {
				if a[i] != b[i] {
					t.Fatalf("the histories of two runs of seed %d differ at line %d of %d/%d:\n  first:  %s\n  second: %s", seed, i+1, len(a), len(b), a[i], b[i])
				}
			}
			t.Fatalf("the history of one run of seed %d has %d lines, the other's %d", seed, len(a), len(b))
		})
	}
}
