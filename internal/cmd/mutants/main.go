// Command mutants tests the simulation by breaking the library on purpose:
// each mutation of the table in mutations.go replaces one snippet of the
// library's code with a faulty version (the lease trusted to its very end,
// an output written after the attempt ended, ...), and the command runs the
// simulation (TestSimulation in the root package) against the broken
// library. A mutation is caught when the simulation's checker reports
// violations, and survived when the run passes: then the simulation cannot
// see that guarantee break, and needs a sharper world or checker.
//
//	go run ./internal/cmd/mutants                       # every mutation, 100 seeds each (minutes)
//	go run ./internal/cmd/mutants -list                 # the table of mutations
//	go run ./internal/cmd/mutants -run '^lease-margin$' # one mutation
//	go run ./internal/cmd/mutants -run late -seeds 20 -v
//	go run ./internal/cmd/mutants -- -sim.tasks=20      # extra go test flags after --
//	go run ./internal/cmd/mutants -- -sim.stop          # each mutation up to its first catching seed
//
// The repository is never copied and its working tree never modified: the
// mutated file is written to a temporary directory, and `go test
// -overlay=<json>` compiles it in place of the original (see `go help
// build`, -overlay). So a run may be interrupted at any moment, and other
// work may go on in the same tree, though a change to a mutated file shows
// only in the runs that start after it.
//
// For each mutation the command checks that Old occurs exactly once in its
// file; if not, the code has moved on and the mutation is reported stale,
// to be rewritten. Then it runs, in the repository's root,
//
//	go test -overlay=<json> -run 'TestSimulation$' -count=1 -sim.seeds=N [flags after --] .
//
// without the race detector, one mutation after the other (the simulation
// already keeps every core busy), each within -timeout. The verdict comes
// from the summary line of TestSimulation, "simulated: L task lives, S
// seeds, V violations": caught if V > 0, SURVIVED if V = 0 and the run
// passed, error otherwise (a mutation that does not compile, a crash, a
// timeout: the tail of the output is printed). The violations by kind come
// from its "sim: <kind> N in M seeds" lines. A row is printed as each
// mutation ends, and the whole table with the score at the end. The exit
// status is 1 if any mutation survived, was stale or ended in an error.
//
// To add a mutation, append to the table in mutations.go: a short
// kebab-case Name; the Promise, one sentence of the documentation's
// guarantee it breaks; the File; Old, an exact snippet of it, long enough
// to occur only once; and New. Break the library, never the simulation,
// and keep the breakage small and faithful, the kind of bug a change could
// bring in. Check it with
//
//	go test ./internal/cmd/mutants             # Old occurs once, New differs and parses
//	go run ./internal/cmd/mutants -run '^name$'
//
// A mutation the simulation does not catch is a finding, not a failure of
// the mutation: keep it in the table, and improve the simulation.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// module is the path of the module whose root the command looks for.
const module = "github.com/s3task/s3task"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the command; it returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mutants", flag.ContinueOnError)
	fs.SetOutput(stderr)
	list := fs.Bool("list", false, "print the table of mutations and exit")
	runRE := fs.String("run", "", "run only the mutations whose name matches this regular expression")
	seeds := fs.Int("seeds", 100, "seeds to simulate per mutation (-sim.seeds)")
	timeout := fs.Duration("timeout", 10*time.Minute, "time allowed for each mutation's go test")
	verbose := fs.Bool("v", false, "stream the output of go test")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: go run ./internal/cmd/mutants [flags] [-- go test flags]\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	extra := fs.Args()
	if len(extra) > 0 && !slices.Contains(args, "--") {
		fmt.Fprintf(stderr, "mutants: unexpected argument %q: go test flags go after --\n", extra[0])
		return 2
	}
	selected := mutations
	if *runRE != "" {
		re, err := regexp.Compile(*runRE)
		if err != nil {
			fmt.Fprintf(stderr, "mutants: -run: %v\n", err)
			return 2
		}
		selected = nil
		for _, m := range mutations {
			if re.MatchString(m.Name) {
				selected = append(selected, m)
			}
		}
		if len(selected) == 0 {
			fmt.Fprintf(stderr, "mutants: no mutation matches -run %q\n", *runRE)
			return 2
		}
	}
	if *list {
		printList(stdout, selected)
		return 0
	}
	wd, err := os.Getwd()
	if err != nil {
		fmt.Fprintf(stderr, "mutants: %v\n", err)
		return 2
	}
	root, err := repoRoot(wd)
	if err != nil {
		fmt.Fprintf(stderr, "mutants: %v\n", err)
		return 2
	}

	r := &runner{root: root, seeds: *seeds, timeout: *timeout, extra: extra, verbose: *verbose, out: stdout}
	t := newTable(stdout, selected)
	each := fmt.Sprintf("%d seeds each", *seeds)
	if slices.ContainsFunc(extra, func(a string) bool { return a == "-sim.stop" || a == "-sim.stop=true" }) {
		each = fmt.Sprintf("up to %d seeds each, each stopped at its first catching seed", *seeds)
	}
	fmt.Fprintf(stdout, "mutants: %d mutations, %s, in %s\n", len(selected), each, root)
	t.header()
	start := time.Now()
	var results []result
	for _, m := range selected {
		res := r.run(m)
		results = append(results, res)
		t.row(res)
		if _, more, ok := strings.Cut(res.detail, "\n"); ok {
			fmt.Fprintf(stdout, "%s\n", indent(more)) // the tail of the output
		}
	}
	total := time.Since(start)

	fmt.Fprintln(stdout)
	t.header()
	caught, failed := 0, false
	for _, res := range results {
		t.row(res)
		if res.verdict == verdictCaught {
			caught++
		} else {
			failed = true
		}
	}
	fmt.Fprintf(stdout, "caught %d of %d in %s\n", caught, len(results), total.Round(time.Second))
	if failed {
		return 1
	}
	return 0
}

// repoRoot returns the directory, dir or one above it, that holds the
// go.mod of module.
func repoRoot(dir string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && modulePath(b) == module {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod of %s in %s or above it", module, dir)
		}
	}
}

// modulePath returns the module path a go.mod declares.
func modulePath(gomod []byte) string {
	for line := range strings.Lines(string(gomod)) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}

// apply returns src, the content of e.File, with e applied, or an error if
// e.Old does not occur exactly once in it.
func (e edit) apply(src string) (string, error) {
	switch n := strings.Count(src, e.Old); n {
	case 1:
		return strings.Replace(src, e.Old, e.New, 1), nil
	case 0:
		return "", fmt.Errorf("stale: %s no longer holds %.40q; rewrite the mutation", e.File, e.Old)
	default:
		return "", fmt.Errorf("stale: %.40q occurs %d times in %s; make it longer", e.Old, n, e.File)
	}
}

// mutate returns the mutated content of every file m changes, by path.
func (m mutation) mutate(root string) (map[string]string, error) {
	files := map[string]string{}
	for _, e := range m.edits() {
		path := filepath.Join(root, filepath.FromSlash(e.File))
		src, ok := files[path]
		if !ok {
			b, err := os.ReadFile(path)
			if err != nil {
				return nil, err
			}
			src = string(b)
		}
		mutated, err := e.apply(src)
		if err != nil {
			return nil, err
		}
		files[path] = mutated
	}
	return files, nil
}

type verdict string

const (
	verdictCaught   verdict = "caught"
	verdictSurvived verdict = "SURVIVED"
	verdictError    verdict = "error"
	verdictStale    verdict = "stale"
)

// result is what one mutation's run found.
type result struct {
	m          mutation
	verdict    verdict
	violations int
	seeds      int     // seeds simulated
	bad        int     // seeds with violations
	kinds      []kinds // violations by kind, in the order printed
	took       time.Duration
	detail     string // for an error or a stale mutation: why
}

// kinds is one "sim: <kind> N in M seeds" line.
type kinds struct {
	kind         string
	count, seeds int
}

// runner runs mutations against the simulation.
type runner struct {
	root    string
	seeds   int
	timeout time.Duration
	extra   []string // go test flags
	verbose bool
	out     io.Writer
}

// run applies m in an overlay and runs the simulation against it.
func (r *runner) run(m mutation) (res result) {
	start := time.Now()
	res = result{m: m, verdict: verdictError}
	defer func() { res.took = time.Since(start) }()
	files, err := m.mutate(r.root)
	if err != nil {
		res.verdict, res.detail = verdictStale, err.Error()
		return res
	}
	dir, err := os.MkdirTemp("", "mutants-*")
	if err != nil {
		res.detail = err.Error()
		return res
	}
	defer os.RemoveAll(dir)
	overlay, err := writeOverlay(dir, files)
	if err != nil {
		res.detail = err.Error()
		return res
	}

	// A mutation may remove a branch the simulation requires a run to
	// reach: the verdict goes by the violations alone.
	args := []string{"test", "-overlay=" + overlay, "-run", "TestSimulation$", "-count=1",
		"-sim.seeds=" + strconv.Itoa(r.seeds), "-sim.require=false", "-timeout=" + r.timeout.String()}
	args = append(append(args, r.extra...), ".")
	// The test binary stops itself at -timeout with a dump of its
	// goroutines; the context is the backstop for a build that hangs.
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = r.root
	killGroup(cmd)
	var buf bytes.Buffer
	var w io.Writer = &buf
	if r.verbose {
		fmt.Fprintf(r.out, "== %s: go %s\n", m.Name, strings.Join(args, " "))
		w = io.MultiWriter(&buf, r.out)
	}
	cmd.Stdout, cmd.Stderr = w, w
	runErr := cmd.Run()
	parse(&res, buf.Bytes())
	switch {
	case ctx.Err() != nil:
		res.verdict = verdictError
		res.detail = fmt.Sprintf("killed after %s\n%s", r.timeout+time.Minute, tail(buf.Bytes(), 30))
	case res.seeds == 0 && !summarized(buf.Bytes()):
		res.verdict = verdictError
		res.detail = fmt.Sprintf("no summary line (%v)\n%s", runErr, tail(buf.Bytes(), 30))
	case res.violations > 0:
		res.verdict = verdictCaught
	case runErr == nil:
		res.verdict = verdictSurvived
	default:
		res.verdict = verdictError
		res.detail = fmt.Sprintf("failed with 0 violations (%v)\n%s", runErr, tail(buf.Bytes(), 30))
	}
	return res
}

// writeOverlay writes the mutated content of path into dir, with the
// overlay file that tells go build to read it instead of path, and returns
// the overlay file's name.
func writeOverlay(dir string, files map[string]string) (string, error) {
	replace := map[string]string{}
	for path, content := range files {
		replacement := filepath.Join(dir, strconv.Itoa(len(replace))+"-"+filepath.Base(path))
		if err := os.WriteFile(replacement, []byte(content), 0o644); err != nil {
			return "", err
		}
		replace[path] = replacement
	}
	b, err := json.Marshal(map[string]map[string]string{"Replace": replace})
	if err != nil {
		return "", err
	}
	overlay := filepath.Join(dir, "overlay.json")
	return overlay, os.WriteFile(overlay, b, 0o644)
}

var (
	summaryRE = regexp.MustCompile(`(?m)^simulated: (\d+) task lives, (\d+) seeds, (\d+) violations$`)
	kindRE    = regexp.MustCompile(`(?m)^sim: (\S+)\s+(\d+) in\s+(\d+) seeds;`)
	badSeedRE = regexp.MustCompile(`seed (\d+): \d+ violations; replay`)
)

func summarized(out []byte) bool { return summaryRE.Match(out) }

// parse reads TestSimulation's report from out into res.
func parse(res *result, out []byte) {
	if m := summaryRE.FindSubmatch(out); m != nil {
		res.seeds, _ = strconv.Atoi(string(m[2]))
		res.violations, _ = strconv.Atoi(string(m[3]))
	}
	for _, m := range kindRE.FindAllSubmatch(out, -1) {
		k := kinds{kind: string(m[1])}
		k.count, _ = strconv.Atoi(string(m[2]))
		k.seeds, _ = strconv.Atoi(string(m[3]))
		res.kinds = append(res.kinds, k)
	}
	bad := map[string]bool{}
	for _, m := range badSeedRE.FindAllSubmatch(out, -1) {
		bad[string(m[1])] = true
	}
	res.bad = len(bad)
}

// tail returns the last n lines of out.
func tail(out []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{"..."}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

func indent(s string) string {
	var b strings.Builder
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		b.WriteString("    | ")
		b.WriteString(sc.Text())
		b.WriteByte('\n')
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// table prints results in columns whose widths are known before the first
// row, so that rows can be printed as they come; the violations by kind,
// the only column of unbounded width, come last.
type table struct {
	w    io.Writer
	name int // width of the name column
}

func newTable(w io.Writer, ms []mutation) *table {
	t := &table{w: w, name: len("mutation")}
	for _, m := range ms {
		t.name = max(t.name, len(m.Name))
	}
	return t
}

const rowFormat = "%-*s  %-8s  %9s  %6s  %s\n"

func (t *table) header() {
	fmt.Fprintf(t.w, rowFormat, t.name, "mutation", "verdict", "bad/seeds", "time", "violations by kind (count in seeds)")
}

func (t *table) row(r result) {
	seeds, took := "-", fmt.Sprint(r.took.Round(time.Second))
	if r.seeds > 0 {
		seeds = fmt.Sprintf("%d/%d", r.bad, r.seeds)
	}
	var vs []string
	for _, k := range r.kinds {
		vs = append(vs, fmt.Sprintf("%s %d in %d", k.kind, k.count, k.seeds))
	}
	v := strings.Join(vs, ", ")
	switch {
	case r.verdict == verdictStale || r.verdict == verdictError:
		v = firstLine(r.detail)
	case v == "":
		v = "0"
	}
	fmt.Fprintf(t.w, rowFormat, t.name, r.m.Name, r.verdict, seeds, took, v)
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// printList prints the table of mutations.
func printList(w io.Writer, ms []mutation) {
	width := 0
	for _, m := range ms {
		width = max(width, len(m.Name))
	}
	for _, m := range ms {
		fmt.Fprintf(w, "%-*s  %s\n%-*s  %s\n", width, m.Name, m.File, width, "", m.Promise)
	}
}
