package main

import (
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestMutationsApply checks every mutation against the tree as it is, with
// no simulation: Old occurs exactly once in its file, New differs, and the
// mutated file still parses. It fails when the code moves under a
// mutation, which must then be rewritten.
func TestMutationsApply(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root, err := repoRoot(wd)
	if err != nil {
		t.Fatal(err)
	}
	kebab := regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)
	names := map[string]bool{}
	for _, m := range mutations {
		t.Run(m.Name, func(t *testing.T) {
			if !kebab.MatchString(m.Name) {
				t.Errorf("name %q is not kebab-case", m.Name)
			}
			if names[m.Name] {
				t.Errorf("name %q is used twice", m.Name)
			}
			names[m.Name] = true
			if strings.TrimSpace(m.Promise) == "" {
				t.Error("no Promise")
			}
			for _, e := range m.edits() {
				if e.Old == e.New {
					t.Errorf("%s: Old and New are the same", e.File)
				}
				if strings.TrimSpace(e.Old) == "" {
					t.Errorf("%s: Old is empty", e.File)
				}
				if strings.HasSuffix(e.File, "_test.go") || strings.HasPrefix(e.File, "internal/sim/") {
					t.Errorf("%s: mutate the library, not its tests or the simulation", e.File)
				}
			}
			files, err := m.mutate(root)
			if err != nil {
				t.Fatal(err)
			}
			for path, mutated := range files {
				if _, err := parser.ParseFile(token.NewFileSet(), path, mutated, parser.SkipObjectResolution); err != nil {
					t.Errorf("the mutated file does not parse: %v", err)
				}
			}
		})
	}
}

// TestParse checks the reading of TestSimulation's report.
func TestParse(t *testing.T) {
	out := `--- FAIL: TestSimulation (31.20s)
    --- FAIL: TestSimulation/seed=4 (0.41s)
        sim_test.go:125: seed 4: 2 violations; replay: go test -run 'TestSimulation$' -sim.seed=4 -v .
    --- FAIL: TestSimulation/seed=9 (0.40s)
        sim_test.go:125: seed 9: 1 violations; replay: go test -run 'TestSimulation$' -sim.seed=9 -v .
sim: overlap        2 in   2 seeds; replay: go test -run 'TestSimulation$' -sim.seed=4 -v . ; e.g. two handlers
sim: late-write     1 in   1 seeds; replay: go test -run 'TestSimulation$' -sim.seed=9 -v . ; e.g. a write
simulated: 5001 task lives, 100 seeds, 3 violations
FAIL
`
	var res result
	parse(&res, []byte(out))
	if res.seeds != 100 || res.violations != 3 || res.bad != 2 {
		t.Errorf("seeds %d, violations %d, bad seeds %d; want 100, 3, 2", res.seeds, res.violations, res.bad)
	}
	want := []kinds{{"overlap", 2, 2}, {"late-write", 1, 1}}
	if len(res.kinds) != len(want) || res.kinds[0] != want[0] || res.kinds[1] != want[1] {
		t.Errorf("kinds %v; want %v", res.kinds, want)
	}
}
