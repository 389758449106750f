package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// exportExt ends the name of a baseline's export data file.
const exportExt = ".export"

// exportFileName is the baseline file of the package at importPath: the
// path with each slash made an underscore.
func exportFileName(importPath string) string {
	return strings.ReplaceAll(importPath, "/", "_") + exportExt
}

// change is one entry of the report.
type change struct {
	pkg        string   // import path of the package
	message    string   // apidiff's line, or ours for a package added or removed
	ident      string   // the identifier the changelog must name
	names      []string // each form of it that counts as named
	compatible bool
}

// pkgChanges are the changes of one package, in apidiff's order.
type pkgChanges struct {
	pkg     string
	changes []change
}

// findAPIDiff returns the apidiff binary: c.apidiff, else apidiff on PATH,
// in $GOBIN, or in .cache/bin under c.dir.
func findAPIDiff(c config) (string, error) {
	if c.apidiff != "" {
		return c.apidiff, nil
	}
	if p, err := exec.LookPath("apidiff"); err == nil {
		return p, nil
	}
	var tried []string
	for _, dir := range []string{os.Getenv("GOBIN"), filepath.Join(c.dir, ".cache", "bin")} {
		if dir == "" {
			continue
		}
		p, err := filepath.Abs(filepath.Join(dir, "apidiff"))
		if err != nil {
			return "", err
		}
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, nil
		}
		tried = append(tried, p)
	}
	return "", fmt.Errorf("apidiff is not on PATH nor at %s; install it with GOBIN=$PWD/.cache/bin go install golang.org/x/exp/cmd/apidiff@v0.0.0-20261113113407-e3970619a1a4",
		strings.Join(tried, " or "))
}

// runTool runs name with args in c.dir and returns its standard output;
// its error names the command and holds its standard error.
func runTool(c config, name string, args ...string) ([]byte, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = c.dir
	cmd.Env = c.env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// publicPackages lists the import paths of the public packages of the
// modules under c.dir (the workspace's, or the one module's), sorted: not
// in a module c.exclude names, not main, not internal.
func publicPackages(c config) ([]string, error) {
	root, err := canonical(c.dir)
	if err != nil {
		return nil, err
	}
	mods, err := runTool(c, "go", "list", "-m", "-f", "{{.Dir}}")
	if err != nil {
		return nil, err
	}
	var patterns []string
	for _, dir := range strings.Fields(string(mods)) {
		dir, err := canonical(dir)
		if err != nil {
			return nil, err
		}
		rel, err := filepath.Rel(root, dir)
		if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return nil, fmt.Errorf("module at %s is outside %s", dir, root)
		}
		if slices.Contains(c.exclude, rel) {
			continue
		}
		patterns = append(patterns, "./"+filepath.ToSlash(filepath.Join(rel, "...")))
	}
	if len(patterns) == 0 {
		return nil, fmt.Errorf("no module under %s to check", root)
	}
	out, err := runTool(c, "go", append([]string{"list", "-f", "{{.ImportPath}} {{.Name}}"}, patterns...)...)
	if err != nil {
		return nil, err
	}
	var pkgs []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, name, ok := strings.Cut(line, " ")
		if !ok {
			return nil, fmt.Errorf("go list: unexpected line %q", line)
		}
		if name == "main" || isInternal(path) {
			continue
		}
		pkgs = append(pkgs, path)
	}
	slices.Sort(pkgs)
	return pkgs, nil
}

func canonical(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(abs)
}

// isInternal reports whether an import path has an element "internal",
// which makes it importable only from inside its tree.
func isInternal(path string) bool {
	return slices.Contains(strings.Split(path, "/"), "internal")
}

// newestBaseline returns the folder under api named for the highest
// version vMAJOR.MINOR.PATCH (a pre-release ranks below its release).
func newestBaseline(api string) (string, error) {
	entries, err := os.ReadDir(api)
	if err != nil {
		return "", fmt.Errorf("no baseline: %w", err)
	}
	best, bestV := "", version{}
	for _, e := range entries {
		v, ok := parseVersion(e.Name())
		if !e.IsDir() || !ok {
			continue
		}
		if best == "" || v.compare(bestV) > 0 {
			best, bestV = e.Name(), v
		}
	}
	if best == "" {
		return "", fmt.Errorf("no baseline: no folder vX.Y.Z in %s (make api VERSION=vX.Y.Z writes one)", api)
	}
	return filepath.Join(api, best), nil
}

// version is a semantic version without build metadata.
type version struct {
	n   [3]int
	pre string
}

func parseVersion(s string) (version, bool) {
	var v version
	rest, ok := strings.CutPrefix(s, "v")
	if !ok {
		return v, false
	}
	rest, v.pre, _ = strings.Cut(rest, "-")
	parts := strings.Split(rest, ".")
	if len(parts) != 3 {
		return v, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return v, false
		}
		v.n[i] = n
	}
	return v, true
}

func (v version) compare(w version) int {
	for i := range v.n {
		if v.n[i] != w.n[i] {
			return v.n[i] - w.n[i]
		}
	}
	switch {
	case v.pre == w.pre:
		return 0
	case v.pre == "":
		return 1
	case w.pre == "":
		return -1
	}
	return strings.Compare(v.pre, w.pre)
}

// readBaseline maps each package of the baseline folder to its export
// data file, read from the file's first line.
func readBaseline(dir string) (map[string]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*"+exportExt))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no baseline: no %s file in %s", exportExt, dir)
	}
	pkgs := map[string]string{}
	for _, f := range files {
		path, err := firstLine(f)
		if err != nil {
			return nil, err
		}
		abs, err := filepath.Abs(f)
		if err != nil {
			return nil, err
		}
		pkgs[path] = abs
	}
	return pkgs, nil
}

func firstLine(file string) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", err
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil || strings.TrimSpace(line) == "" {
		return "", errors.Join(fmt.Errorf("%s: no import path on its first line", file), err)
	}
	return strings.TrimSpace(line), nil
}

// diff compares each package of the baseline (import path to export file)
// with the tree's package of that path, and reports the packages only one
// side has, in the order of their import paths.
func diff(c config, bin string, old map[string]string, current []string) ([]pkgChanges, error) {
	all := slices.Clone(current)
	for p := range old {
		if !slices.Contains(all, p) {
			all = append(all, p)
		}
	}
	slices.Sort(all)
	var out []pkgChanges
	for _, p := range all {
		file, inOld := old[p]
		inNew := slices.Contains(current, p)
		pc := pkgChanges{pkg: p}
		switch {
		case !inNew:
			pc.changes = []change{{
				pkg: p, message: "package removed (or no longer public)",
				ident: p, names: []string{p, p[strings.LastIndex(p, "/")+1:]},
			}}
		case !inOld:
			pc.changes = []change{{pkg: p, message: "package added", ident: p, compatible: true}}
		default:
			report, err := runTool(c, bin, file, p)
			if err != nil {
				return nil, err
			}
			if pc.changes, err = parseReport(p, string(report)); err != nil {
				return nil, err
			}
		}
		out = append(out, pc)
	}
	return out, nil
}

// parseReport reads the text apidiff prints for one package: an
// "Incompatible changes:" and a "Compatible changes:" header, each
// followed by lines "- message".
func parseReport(pkg, report string) ([]change, error) {
	var out []change
	compatible, inSection := false, false
	for _, line := range strings.Split(report, "\n") {
		switch {
		case line == "":
		case line == "Incompatible changes:":
			compatible, inSection = false, true
		case line == "Compatible changes:":
			compatible, inSection = true, true
		case inSection && strings.HasPrefix(line, "- "):
			msg := strings.TrimPrefix(line, "- ")
			id := identifier(msg)
			out = append(out, change{pkg: pkg, message: msg, ident: id, names: []string{id}, compatible: compatible})
		default:
			return nil, fmt.Errorf("apidiff's report on %s: unexpected line %q", pkg, line)
		}
	}
	return out, nil
}

// identifier returns the name a changelog gives the object of one of
// apidiff's messages: the text before ": ", without a ", method set of"
// note, a pointer receiver's "(*" and ")", type parameters, or a "./"
// before a child package.
//
//	(*Store).Create: removed                      -> Store.Create
//	Task.Revision: changed from int64 to string   -> Task.Revision
//	GR[R].M2: changed from ...                     -> GR.M2
//	(*embedm).EP2, method set of *SM: removed     -> embedm.EP2
func identifier(msg string) string {
	name, _, _ := strings.Cut(msg, ": ")
	name, _, _ = strings.Cut(name, ", ")
	name = strings.TrimPrefix(name, "./")
	if rest, ok := strings.CutPrefix(name, "(*"); ok {
		if recv, tail, ok := strings.Cut(rest, ")"); ok {
			name = recv + tail
		}
	}
	var b strings.Builder
	depth := 0
	for _, r := range name {
		switch {
		case r == '[':
			depth++
		case r == ']' && depth > 0:
			depth--
		case depth == 0:
			b.WriteRune(r)
		}
	}
	return b.String()
}
