// Command apicheck compares the public API of the repository's modules with
// the baseline recorded at the last release, and fails on an incompatible
// change that the changelog does not announce.
//
//	go run ./internal/cmd/apicheck            # check the tree against the newest api/vX.Y.Z
//	go run ./internal/cmd/apicheck -write api/v0.2.0   # record a baseline (make api does it from the tag)
//
// The public packages are found, not listed: every package of every module
// in the workspace (go.work), except the modules named by -exclude
// (examples by default), main packages, and packages with an internal
// element in their import path. A baseline is a folder of export data
// files, one a package, written by golang.org/x/exp/cmd/apidiff -w; the
// first line of each names its package.
//
// Each package of the baseline is compared with the same package of the
// tree by apidiff, and the report lists its compatible and incompatible
// changes. A package of the baseline that is gone from the tree (or is no
// longer public) is an incompatible change; a package new in the tree is a
// compatible one.
//
// The rule for the changelog: every incompatible change must be named in
// the "## [Unreleased]" section of CHANGELOG.md, in the text under a
// "### Changed" or "### Removed" heading of that section. A change is named
// by its identifier as apidiff reports it, without a pointer receiver's
// parentheses and star or a generic type's parameters: "(*Store).Create:
// removed" is named by Store.Create, "Task.Revision: changed from int64 to
// string" by Task.Revision, a removed function F by F. The identifier must
// stand alone, not inside a longer name: Store.CreateForUpload does not
// name Store.Create, while s3task.Store.Create and `Store.Create` do. A
// removed package is named by its import path or by the last element of
// it. apicheck exits with 1 when an incompatible change is not named, with
// 2 when it cannot run (apidiff missing, a package that does not load), and
// with 0 otherwise.
//
// apidiff is looked up on PATH, then in $GOBIN, then in .cache/bin under
// -dir; -apidiff names it. Install it with
//
//	GOBIN=$PWD/.cache/bin go install golang.org/x/exp/cmd/apidiff@v0.0.0-20261113113407-e3970619a1a4
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// exitUnrecorded is apicheck's status when an incompatible change is not
// named in the changelog; exitError when the check could not run.
const (
	exitUnrecorded = 1
	exitError      = 2
)

func main() {
	os.Exit(run(os.Args[1:], nil, os.Stdout, os.Stderr))
}

// run runs apicheck with the command-line arguments args and returns its
// exit status. env is the environment of the go and apidiff commands it
// runs, nil for its own.
func run(args, env []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("apicheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	var exclude string
	fs.StringVar(&c.dir, "dir", ".", "root of the repository (the folder of go.work or of the only go.mod)")
	fs.StringVar(&c.baseline, "baseline", "", "baseline folder to compare with (default: the newest api/vX.Y.Z under -dir)")
	fs.StringVar(&c.changelog, "changelog", "", "changelog whose [Unreleased] section must name each incompatible change (default: CHANGELOG.md under -dir)")
	fs.StringVar(&c.write, "write", "", "write the baseline of the tree's public packages into this folder instead of checking")
	fs.StringVar(&exclude, "exclude", "examples", "comma-separated folders, relative to -dir, of workspace modules that are not public API")
	fs.StringVar(&c.apidiff, "apidiff", "", "the apidiff binary (default: PATH, $GOBIN, then .cache/bin under -dir)")
	if err := fs.Parse(args); err != nil {
		return exitError
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "apicheck: unexpected arguments %q\n", fs.Args())
		return exitError
	}
	for _, e := range strings.Split(exclude, ",") {
		if e = strings.TrimSpace(e); e != "" {
			c.exclude = append(c.exclude, filepath.Clean(e))
		}
	}
	c.env, c.stdout = env, stdout
	if c.write != "" {
		err := writeBaseline(c)
		if err != nil {
			fmt.Fprintf(stderr, "apicheck: %v\n", err)
			return exitError
		}
		return 0
	}
	err := check(c)
	var unrec *unrecordedError
	switch {
	case errors.As(err, &unrec):
		fmt.Fprintf(stderr, "apicheck: %v\n", err)
		return exitUnrecorded
	case err != nil:
		fmt.Fprintf(stderr, "apicheck: %v\n", err)
		return exitError
	}
	return 0
}

// config is what one run of apicheck works on.
type config struct {
	dir       string   // root of the repository
	baseline  string   // baseline folder; "" for the newest under dir/api
	changelog string   // "" for dir/CHANGELOG.md
	write     string   // baseline folder to write, in write mode
	exclude   []string // module folders, relative to dir, left out
	apidiff   string   // apidiff binary; "" to look it up
	env       []string // environment of go and apidiff; nil for apicheck's own
	stdout    io.Writer
}

// unrecordedError lists the incompatible changes the changelog does not
// name.
type unrecordedError struct {
	changelog string
	missing   []change
}

func (e *unrecordedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d incompatible change(s) not named under ### Changed or ### Removed in the [Unreleased] section of %s; name each identifier there:", len(e.missing), e.changelog)
	for _, c := range e.missing {
		fmt.Fprintf(&b, "\n  %s  (%s: %s)", c.ident, c.pkg, c.message)
	}
	return b.String()
}

// writeBaseline writes the export data of each public package of c.dir
// into c.write, replacing the export files already there.
func writeBaseline(c config) error {
	bin, err := findAPIDiff(c)
	if err != nil {
		return err
	}
	out, err := filepath.Abs(c.write)
	if err != nil {
		return err
	}
	pkgs, err := publicPackages(c)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	old, err := filepath.Glob(filepath.Join(out, "*"+exportExt))
	if err != nil {
		return err
	}
	for _, f := range old {
		if err := os.Remove(f); err != nil {
			return err
		}
	}
	for _, p := range pkgs {
		file := filepath.Join(out, exportFileName(p))
		if _, err := runTool(c, bin, "-w", file, p); err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "wrote %s (%s)\n", file, p)
	}
	return nil
}

// check compares the tree's public packages with the baseline, prints the
// changes package by package, and returns an *unrecordedError when an
// incompatible change is not named in the changelog.
func check(c config) error {
	bin, err := findAPIDiff(c)
	if err != nil {
		return err
	}
	base := c.baseline
	if base == "" {
		if base, err = newestBaseline(filepath.Join(c.dir, "api")); err != nil {
			return err
		}
	}
	old, err := readBaseline(base)
	if err != nil {
		return err
	}
	current, err := publicPackages(c)
	if err != nil {
		return err
	}
	changes, err := diff(c, bin, old, current)
	if err != nil {
		return err
	}
	clPath := c.changelog
	if clPath == "" {
		clPath = filepath.Join(c.dir, "CHANGELOG.md")
	}
	cl, err := os.ReadFile(clPath)
	if err != nil {
		return err
	}
	text := unreleasedChanges(string(cl))

	var missing []change
	incompatible, compatible := 0, 0
	for _, pc := range changes {
		fmt.Fprintf(c.stdout, "%s\n", pc.pkg)
		if len(pc.changes) == 0 {
			fmt.Fprintf(c.stdout, "  no changes\n")
		}
		for _, compat := range []bool{false, true} {
			head := "  incompatible:"
			if compat {
				head = "  compatible:"
			}
			printed := false
			for _, ch := range pc.changes {
				if ch.compatible != compat {
					continue
				}
				if !printed {
					fmt.Fprintln(c.stdout, head)
					printed = true
				}
				note := ""
				if compat {
					compatible++
				} else {
					incompatible++
					if mentions(text, ch.names...) {
						note = "  [named in CHANGELOG: " + ch.ident + "]"
					} else {
						note = "  [NOT named in CHANGELOG: " + ch.ident + "]"
						missing = append(missing, ch)
					}
				}
				fmt.Fprintf(c.stdout, "    - %s%s\n", ch.message, note)
			}
		}
	}
	fmt.Fprintf(c.stdout, "%d package(s) against %s: %d incompatible change(s), %d not named in the changelog; %d compatible\n",
		len(changes), base, incompatible, len(missing), compatible)
	if len(missing) > 0 {
		return &unrecordedError{changelog: clPath, missing: missing}
	}
	return nil
}
