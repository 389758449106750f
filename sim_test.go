package s3task_test

import (
	"bytes"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"regexp"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/s3task/s3task/internal/probe"
	"github.com/s3task/s3task/internal/sim"
)

var (
	simSeeds = flag.Int("sim.seeds", 200, "TestSimulation: number of seeds to simulate (20 with -short)")
	simTasks = flag.Int("sim.tasks", 50, "TestSimulation: task lives per seed")
	simSeed  = flag.Uint64("sim.seed", 0, "TestSimulation: simulate only this seed")
	simCover = flag.Bool("sim.require", true, "TestSimulation: fail a run of 100 seeds or more that misses a required branch of the library (the mutants command turns it off: a mutation may remove a branch)")
	simFrom  = flag.Uint64("sim.from", 1, "TestSimulation: the first seed (with -sim.seeds or S3TASK_SIM_SOAK, to shard a long run over processes)")
	simTrace = flag.String("sim.trace", "", "TestSimulation: print the story of these tasks (IDs, comma-separated; \"all\": those with violations; \"kind=K\": those with violations of kind K)")
	simReqs  = flag.Bool("sim.requests", false, "TestSimulation: with -sim.trace, also tell of every request near the tasks: theirs, listings and the wake object's")
	simStop  = flag.Bool("sim.stop", false, "TestSimulation: begin no seed after one found a violation (those begun end; the rest are skipped): a mutation is caught at its first catching seed")
)

// simTally gathers what the seeds of TestSimulation found.
type simTally struct {
	mu         sync.Mutex
	lives      int
	seeds      int
	violations int
	byKind     map[sim.Kind][]simFinding
	reached    map[string]int // branches of the library reached, over the seeds simulated here
	here       int            // seeds simulated in this process
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
	t.here++
	t.violations += len(vs)
	for b, n := range h.Reached {
		t.reached[b] += n
	}
	for _, v := range vs {
		t.byKind[v.Kind] = append(t.byKind[v.Kind], simFinding{seed, v})
	}
}

// found reports whether a seed simulated so far found a violation.
func (t *simTally) found() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.violations > 0
}

// report prints the branches of the library the seeds reached and,
// per kind, how many violations how many seeds found, with the first
// example, then the summary line. A run of 100 seeds or more fails if it
// missed a branch of sim.Required.
func (t *simTally) report(tb testing.TB) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var missed []string
	for _, b := range slices.Sorted(maps.Keys(probe.Branches)) {
		required := slices.Contains(sim.Required, b)
		mark := " "
		if required {
			mark = "*"
		}
		if t.here >= 100 && (testing.Verbose() || t.reached[b] == 0) {
			fmt.Printf("sim: reached %s %-26s %7d  %s\n", mark, b, t.reached[b], probe.Branches[b])
		}
		if required && t.reached[b] == 0 {
			missed = append(missed, b)
		}
	}
	if len(missed) > 0 && t.here >= 100 && *simCover {
		tb.Errorf("%d seeds never reached %d required branches of the library: %s", t.here, len(missed), strings.Join(missed, ", "))
	}
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

// simRaceSeeds is how many of the seeds a test binary built with the race
// detector simulates itself; see TestSimulation.
const simRaceSeeds = 24

// TestSimulation plays the whole protocol, seed by seed, in a deterministic
// simulation with virtual time (see internal/sim) and checks the recorded
// history against the guarantees of the design. -sim.seeds and -sim.tasks
// size it, -sim.seed=K replays one seed, and S3TASK_SIM_SOAK=<task lives>
// runs a long soak instead.
//
// The race detector makes the simulation several times slower and finds
// nothing more in it after a few dozen seeds, so a binary built with it
// (the README's test command) simulates the first simRaceSeeds seeds
// itself, and the rest at the same time in a `go test` of its own without
// it; the summary line counts both. Without the go command it simulates
// them all.
func TestSimulation(t *testing.T) {
	t.Parallel()
	var seeds []uint64
	tasks := *simTasks
	var rest *simRest
	switch soak := os.Getenv("S3TASK_SIM_SOAK"); {
	case *simSeed != 0:
		seeds = []uint64{*simSeed}
	case soak != "":
		lives, err := strconv.Atoi(soak)
		if err != nil || lives <= 0 {
			t.Fatalf("S3TASK_SIM_SOAK=%q: want a number of task lives", soak)
		}
		for s := range uint64((lives + tasks - 1) / tasks) {
			seeds = append(seeds, *simFrom+s)
		}
	default:
		n := *simSeeds
		if testing.Short() && n > 20 {
			n = 20
		}
		if simRace && n > simRaceSeeds {
			rest = startSimRest(t, *simFrom+simRaceSeeds, n-simRaceSeeds, tasks)
			if rest != nil {
				n = simRaceSeeds
			}
		}
		for s := range uint64(n) {
			seeds = append(seeds, *simFrom+s)
		}
	}
	if os.Getenv("GOGC") == "" {
		old := debug.SetGCPercent(simGOGC)
		t.Cleanup(func() { debug.SetGCPercent(old) })
	}
	tally := &simTally{byKind: map[sim.Kind][]simFinding{}, reached: map[string]int{}}
	t.Cleanup(func() {
		if rest != nil {
			rest.wait(t, tally)
		}
		tally.report(t)
	})
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			if *simStop && tally.found() {
				t.SkipNow()
			}
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

// simRest is a `go test` of the simulation's other seeds, without the race
// detector, running beside the test that started it.
type simRest struct {
	cmd      *exec.Cmd
	out      bytes.Buffer
	from     uint64
	n        int
	finished chan error
}

// startSimRest starts simulating n seeds from from in a `go test` without
// the race detector; nil if the go command cannot be started.
func startSimRest(t *testing.T, from uint64, n, tasks int) *simRest {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Logf("no go command (%v): simulating every seed under the race detector", err)
		return nil
	}
	r := &simRest{from: from, n: n, finished: make(chan error, 1)}
	// Its time is this test's: it has until this binary's deadline, if any.
	// It runs at the priority of the tests beside it, which must not mind
	// waiting for a core, rather than niced: on a machine kept busy by other
	// work, a niced simulation gets a tenth of a core or so and runs out of
	// time.
	timeout := time.Duration(0)
	if deadline, ok := t.Deadline(); ok {
		timeout = max(time.Until(deadline), time.Second)
	}
	args := []string{goTool, "test", "-run", "^TestSimulation$", "-count=1", "-timeout=" + timeout.Round(time.Second).String(),
		fmt.Sprintf("-sim.from=%d", from), fmt.Sprintf("-sim.seeds=%d", n), fmt.Sprintf("-sim.tasks=%d", tasks), "."}
	r.cmd = exec.Command(args[0], args[1:]...)
	r.cmd.Env = simGCEnv(os.Environ())
	r.cmd.Stdout, r.cmd.Stderr = &r.out, &r.out
	if err := r.cmd.Start(); err != nil {
		t.Logf("cannot start %s (%v): simulating every seed under the race detector", r.cmd, err)
		return nil
	}
	go func() { r.finished <- r.cmd.Wait() }()
	return r
}

// simGOGC is the garbage collector's target the simulation runs with
// unless GOGC says otherwise. A seed's heap is small and made of short-lived
// requests, so collecting a quarter as often saves about 30% of its CPU
// (BENCHMARKS.md, section 8) for some 30 MiB more.
const simGOGC = 400

// simGCEnv is env with GOGC=simGOGC added if it sets no GOGC.
func simGCEnv(env []string) []string {
	for _, kv := range env {
		if strings.HasPrefix(kv, "GOGC=") {
			return env
		}
	}
	return append(env, fmt.Sprintf("GOGC=%d", simGOGC))
}

var simSummary = regexp.MustCompile(`(?m)^simulated: (\d+) task lives, (\d+) seeds, (\d+) violations$`)

// wait waits for the other seeds and adds them to tally; their violations
// fail t, with their report.
func (r *simRest) wait(t *testing.T, tally *simTally) {
	err := <-r.finished
	m := simSummary.FindSubmatch(r.out.Bytes())
	if m == nil {
		t.Errorf("%s: %v, and no summary:\n%s", r.cmd, err, r.out.Bytes())
		return
	}
	lives, _ := strconv.Atoi(string(m[1]))
	seeds, _ := strconv.Atoi(string(m[2]))
	violations, _ := strconv.Atoi(string(m[3]))
	tally.mu.Lock()
	tally.lives, tally.seeds, tally.violations = tally.lives+lives, tally.seeds+seeds, tally.violations+violations
	tally.mu.Unlock()
	if err != nil || violations > 0 {
		t.Errorf("seeds %d to %d, simulated without the race detector by %s, failed: %v\n%s",
			r.from, r.from+uint64(r.n)-1, r.cmd, err, r.out.Bytes())
	}
}

func TestSimGCEnv(t *testing.T) {
	if got := simGCEnv([]string{"A=1"}); !slices.Equal(got, []string{"A=1", fmt.Sprintf("GOGC=%d", simGOGC)}) {
		t.Errorf("without GOGC: %q", got)
	}
	if got := simGCEnv([]string{"GOGC=off", "A=1"}); !slices.Equal(got, []string{"GOGC=off", "A=1"}) {
		t.Errorf("with GOGC=off: %q, want it kept", got)
	}
}
