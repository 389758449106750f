package s3task_test

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/s3task/s3task/internal/sim"
)

var (
	simSeeds = flag.Int("sim.seeds", 200, "TestSimulation: number of seeds to simulate (20 with -short)")
	simTasks = flag.Int("sim.tasks", 50, "TestSimulation: task lives per seed")
	simSeed  = flag.Uint64("sim.seed", 0, "TestSimulation: simulate only this seed")
	simTrace = flag.String("sim.trace", "", "TestSimulation: print the story of these tasks (IDs, comma-separated; \"all\": those with violations; \"kind=K\": those with violations of kind K)")
	simReqs  = flag.Bool("sim.requests", false, "TestSimulation: with -sim.trace, also tell of every request near the tasks: theirs, listings and the wake object's")
)

// simTally gathers what the seeds of TestSimulation found.
type simTally struct {
	mu         sync.Mutex
	lives      int
	seeds      int
	violations int
	byKind     map[sim.Kind][]simFinding
}

// simFinding is one violation with the seed that found it.
type simFinding struct {
	seed uint64
	v    sim.Violation
}

func (t *simTally) add(seed uint64, h *sim.History, vs []sim.Violation) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lives += h.TaskLives()
	t.seeds++
	t.violations += len(vs)
	for _, v := range vs {
		t.byKind[v.Kind] = append(t.byKind[v.Kind], simFinding{seed, v})
	}
}

// report prints, per kind, how many violations how many seeds found, with
// the first example, then the summary line.
func (t *simTally) report() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, k := range sim.Kinds() {
		fs := t.byKind[k]
		if len(fs) == 0 {
			continue
		}
		seeds := map[uint64]bool{}
		for _, f := range fs {
			seeds[f.seed] = true
		}
		first := slices.MinFunc(fs, func(a, b simFinding) int { return int(a.seed) - int(b.seed) })
		fmt.Printf("sim: %-11s %4d in %3d seeds; replay: go test -run 'TestSimulation$' -sim.seed=%d -v . ; e.g. %s\n",
			k, len(fs), len(seeds), first.seed, first.v.Msg)
	}
	fmt.Printf("simulated: %d task lives, %d seeds, %d violations\n", t.lives, t.seeds, t.violations)
}

// TestSimulation plays the whole protocol, seed by seed, in a deterministic
// simulation with virtual time (see internal/sim) and checks the recorded
// history against the guarantees of the design. -sim.seeds and -sim.tasks
// size it, -sim.seed=K replays one seed, and S3TASK_SIM_SOAK=<task lives>
// runs a long soak instead.
func TestSimulation(t *testing.T) {
	t.Parallel()
	var seeds []uint64
	tasks := *simTasks
	switch soak := os.Getenv("S3TASK_SIM_SOAK"); {
	case *simSeed != 0:
		seeds = []uint64{*simSeed}
	case soak != "":
		lives, err := strconv.Atoi(soak)
		if err != nil || lives <= 0 {
			t.Fatalf("S3TASK_SIM_SOAK=%q: want a number of task lives", soak)
		}
		for s := 1; s <= (lives+tasks-1)/tasks; s++ {
			seeds = append(seeds, uint64(s))
		}
	default:
		n := *simSeeds
		if testing.Short() && n > 20 {
			n = 20
		}
		for s := 1; s <= n; s++ {
			seeds = append(seeds, uint64(s))
		}
	}
	tally := &simTally{byKind: map[sim.Kind][]simFinding{}}
	t.Cleanup(tally.report)
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				h, err := sim.Run(sim.Config{Seed: seed, Tasks: tasks, Requests: *simReqs})
				if err != nil {
					t.Fatal(err)
				}
				vs := sim.Check(h)
				tally.add(seed, h, vs)
				simTraces(t, h, vs)
				if len(vs) == 0 {
					return
				}
				var b strings.Builder
				for i, v := range vs {
					if i == 20 {
						fmt.Fprintf(&b, "\n  ... and %d more", len(vs)-i)
						break
					}
					fmt.Fprintf(&b, "\n  %s", v)
				}
				t.Errorf("seed %d: %d violations; replay: go test -run 'TestSimulation$' -sim.seed=%d -v .%s", seed, len(vs), seed, b.String())
			})
		})
	}
}

// simTraces logs the story of the tasks -sim.trace names.
func simTraces(t *testing.T, h *sim.History, vs []sim.Violation) {
	if *simTrace == "" {
		return
	}
	ids := strings.Split(*simTrace, ",")
	if kind, ok := strings.CutPrefix(*simTrace, "kind="); ok || *simTrace == "all" {
		ids = nil
		for _, v := range vs {
			if v.Task != "" && !slices.Contains(ids, v.Task) && (!ok || string(v.Kind) == kind) {
				ids = append(ids, v.Task)
			}
		}
	}
	for _, id := range ids {
		var b strings.Builder
		sim.Trace(&b, h, id)
		t.Logf("task %s:\n%s", id, b.String())
	}
}
