package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckFailsOnUnnamedChange records the API of testdata/old (a module
// with a package sub, a Store with Create, a Task with Revision, an
// internal package and a program) as a baseline, then checks testdata/new
// against it (sub removed, Store.Create removed, Task.Revision renamed to
// Rev, a package extra and a constant added, the internal package and the
// program changed). The check fails and names each incompatible change
// until the changelog's Unreleased section names it under Changed or
// Removed.
func TestCheckFailsOnUnnamedChange(t *testing.T) {
	t.Parallel()
	bin := requireAPIDiff(t)
	tmp := t.TempDir()
	oldDir, newDir := filepath.Join(tmp, "old"), filepath.Join(tmp, "new")
	for dst, src := range map[string]string{oldDir: "testdata/old", newDir: "testdata/new"} {
		if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
			t.Fatal(err)
		}
	}
	// The fixture is a module of its own, outside any workspace.
	env := append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local")
	apicheck := func(args ...string) (int, string, string) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		code := run(append([]string{"-apidiff", bin}, args...), env, &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}

	baseline := filepath.Join(newDir, "api", "v0.1.0")
	if code, out, errOut := apicheck("-dir", oldDir, "-write", baseline); code != 0 {
		t.Fatalf("apicheck -write: exit %d\n%s%s", code, out, errOut)
	}
	files, err := filepath.Glob(filepath.Join(baseline, "*"+exportExt))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f))
	}
	if got, want := strings.Join(names, " "), "example.com_apifixture.export example.com_apifixture_sub.export"; got != want {
		t.Errorf("baseline files: %s, want %s (no internal package, no program)", got, want)
	}

	changelog := filepath.Join(newDir, "CHANGELOG.md")
	steps := []struct {
		name       string
		changelog  string
		wantCode   int
		wantNamed  []string // incompatible changes reported as not named
		wantPassed []string // identifiers that must not be reported as not named
	}{
		{
			name: "nothing named",
			changelog: `# Changelog

## [Unreleased]

### Added

- Store.Create and Task.Revision are named here, under Added, which does not count.

## [0.1.0]

### Changed

- Store.Create, Task.Revision and sub are named here, in a release, which does not count.
`,
			wantCode:  exitUnrecorded,
			wantNamed: []string{"Store.Create", "Task.Revision", "example.com/apifixture/sub"},
		},
		{
			name: "one named, one only as part of a longer name",
			changelog: `# Changelog

## [Unreleased]

### Changed

- ` + "`Store.Create`" + ` is gone; use ` + "`Store.CreateForUpload`" + `.
- Task.Revisions, a longer name, names nothing.
`,
			wantCode:   exitUnrecorded,
			wantNamed:  []string{"Task.Revision", "example.com/apifixture/sub"},
			wantPassed: []string{"Store.Create"},
		},
		{
			name: "all named",
			changelog: `# Changelog

## [Unreleased]

### Changed

- ` + "`Task.Revision`" + ` is now ` + "`Task.Rev`" + `.

### Removed

- ` + "`Store.Create`" + `: use ` + "`Store.CreateForUpload`" + `.
- Package ` + "`sub`" + `.

## [0.1.0]
`,
			wantCode:   0,
			wantPassed: []string{"Store.Create", "Task.Revision", "example.com/apifixture/sub"},
		},
	}
	for _, step := range steps {
		if err := os.WriteFile(changelog, []byte(step.changelog), 0o644); err != nil {
			t.Fatal(err)
		}
		code, out, errOut := apicheck("-dir", newDir)
		if code != step.wantCode {
			t.Errorf("%s: exit %d, want %d\n%s%s", step.name, code, step.wantCode, out, errOut)
			continue
		}
		for _, id := range step.wantNamed {
			if !strings.Contains(errOut, "\n  "+id+"  (") || !strings.Contains(out, "[NOT named in CHANGELOG: "+id+"]") {
				t.Errorf("%s: %s not reported as missing from the changelog\n%s%s", step.name, id, out, errOut)
			}
		}
		for _, id := range step.wantPassed {
			if strings.Contains(errOut, "\n  "+id+"  (") || !strings.Contains(out, "[named in CHANGELOG: "+id+"]") {
				t.Errorf("%s: %s not reported as named in the changelog\n%s%s", step.name, id, out, errOut)
			}
		}
		for _, want := range []string{
			"- (*Store).Create: removed",
			"- Task.Revision: removed",
			"- Task.Rev: added",
			"- Version: added",
			"example.com/apifixture/extra\n  compatible:\n    - package added",
			"example.com/apifixture/sub\n  incompatible:\n    - package removed",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: report lacks %q\n%s", step.name, want, out)
			}
		}
		for _, unwanted := range []string{"hidden", "Secret", "cmd/tool", "Run"} {
			if strings.Contains(out, unwanted) {
				t.Errorf("%s: report mentions %q, which is not API\n%s", step.name, unwanted, out)
			}
		}
	}
}

// requireAPIDiff returns the apidiff binary. Without it the test fails
// under CI (CI set) and is skipped elsewhere.
func requireAPIDiff(t *testing.T) string {
	t.Helper()
	bin, err := findAPIDiff(config{dir: filepath.Join("..", "..", "..")})
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set and apidiff is missing: %v", err)
		}
		t.Skipf("apidiff is missing (CI unset, so skipping): %v", err)
	}
	return bin
}

func TestIdentifier(t *testing.T) {
	t.Parallel()
	tests := []struct {
		msg, want string
	}{
		{"(*Store).Create: removed", "Store.Create"},
		{"Task.Revision: changed from int64 to string", "Task.Revision"},
		{"F: changed from func(int) to func(int, int)", "F"},
		{"GR[R].M2: changed from func[T any](R, T) to func[T any](T, R)", "GR.M2"},
		{"(*GR[R]).M: removed", "GR.M"},
		{"(*embedm).EP2, method set of *SM: removed", "embedm.EP2"},
		{"./sub.T: changed from int to string", "sub.T"},
		{"Handler: added unexported method", "Handler"},
	}
	for _, tt := range tests {
		if got := identifier(tt.msg); got != tt.want {
			t.Errorf("identifier(%q) = %q, want %q", tt.msg, got, tt.want)
		}
	}
}

func TestMentions(t *testing.T) {
	t.Parallel()
	changelog := `# Changelog

## [Unreleased]

### Added

- ` + "`Worker.Pause`" + ` is new.

### Changed

- ` + "`Store.Create`" + ` takes a context; s3event.Event.Key is a string.
- Store.CreateForUpload_v2 is not the name of anything.

### Removed (incompatible)

- Task.Revision.

### Fixed

- Store.List pages right.

## [0.1.0] - 2026-12-02

### Removed

- Store.Purge.
`
	text := unreleasedChanges(changelog)
	tests := []struct {
		name string
		want bool
		why  string
	}{
		{"Store.Create", true, "under Changed, in backquotes"},
		{"Event.Key", true, "qualified by its package"},
		{"Task.Revision", true, "under a Removed heading with more words, before a full stop"},
		{"Worker.Pause", false, "under Added"},
		{"Store.List", false, "under Fixed"},
		{"Store.Purge", false, "in a released section"},
		{"Store.CreateForUpload", false, "part of a longer name"},
		{"Store.Cre", false, "part of a longer name"},
		{"Key", true, "a name stands alone after a dot"},
	}
	for _, tt := range tests {
		if got := mentions(text, tt.name); got != tt.want {
			t.Errorf("mentions(%q) = %v, want %v (%s)", tt.name, got, tt.want, tt.why)
		}
	}
	if got := unreleasedChanges("# Changelog\n\n## [0.1.0]\n\n### Changed\n\n- Store.Create\n"); got != "" {
		t.Errorf("a changelog without [Unreleased]: %q, want nothing", got)
	}
}

func TestNewestBaseline(t *testing.T) {
	t.Parallel()
	api := t.TempDir()
	for _, d := range []string{"v0.9.0", "v0.10.0-rc.1", "v0.10.0", "v0.2.0", "notes"} {
		if err := os.Mkdir(filepath.Join(api, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(api, "v1.0.0"), nil, 0o644); err != nil { // a file, not a baseline
		t.Fatal(err)
	}
	got, err := newestBaseline(api)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(api, "v0.10.0"); got != want {
		t.Errorf("newestBaseline = %s, want %s", got, want)
	}
	if _, err := newestBaseline(filepath.Join(api, "notes")); err == nil {
		t.Error("newestBaseline of a folder without versions: no error")
	}
}
