package main

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// readmeShapes reads the table of JSON documents in README.md: for each
// row's label (its first cell, as written), the keys its document always
// has and those it may leave out (marked "?").
func readmeShapes(t *testing.T) map[string][2][]string {
	t.Helper()
	data, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	key := regexp.MustCompile("`([a-z_]+)(\\??)`")
	shapes := map[string][2][]string{}
	in := false
	for line := range strings.SplitSeq(string(data), "\n") {
		switch {
		case strings.HasPrefix(line, "| Command | Keys |"):
			in = true
			continue
		case in && !strings.HasPrefix(line, "|"):
			in = false
		}
		cells := strings.Split(line, " | ")
		if !in || len(cells) < 3 || strings.HasPrefix(line, "|---") {
			continue
		}
		var shape [2][]string
		for _, m := range key.FindAllStringSubmatch(cells[1], -1) {
			if m[2] == "?" {
				shape[1] = append(shape[1], m[1])
			} else {
				shape[0] = append(shape[0], m[1])
			}
		}
		shapes[strings.TrimPrefix(cells[0], "| ")] = shape
	}
	if len(shapes) == 0 {
		t.Fatal("README.md has no table of JSON documents (| Command | Keys | ...)")
	}
	return shapes
}

// checkShape checks that the JSON document out has the keys README.md
// documents for label: every key it always has, and no key it does not
// list.
func checkShape(t *testing.T, label, out string) {
	t.Helper()
	shape, ok := readmeShapes(t)[label]
	if !ok {
		t.Fatalf("README.md documents no JSON document for %s", label)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%s: not a JSON object: %v\n%s", label, err, out)
	}
	var missing, unknown []string
	for _, k := range shape[0] {
		if _, ok := doc[k]; !ok {
			missing = append(missing, k)
		}
	}
	for k := range doc {
		if !slices.Contains(shape[0], k) && !slices.Contains(shape[1], k) {
			unknown = append(unknown, k)
		}
	}
	slices.Sort(unknown)
	if len(missing)+len(unknown) > 0 {
		t.Errorf("%s -json does not match README.md: keys missing %v, keys not documented %v\n%s", label, missing, unknown, out)
	}
}

func TestEscapeRaw(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"{\"a\": 1}":         `{"a": 1}`,
		"a\nb\tc\r":          `a\nb\tc\r`,
		"\x1b[31mred":        `\u001b[31mred`,
		"back\\slash":        `back\\slash`,
		"bad \xff\xfe bytes": `bad \xff\xfe bytes`,
		"héllo ✓":            "héllo ✓",
		"rtl \u202e":         `rtl \u202e`,
		"":                   "",
	} {
		if got := escapeRaw([]byte(in)); got != want {
			t.Errorf("escapeRaw(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestReadmeShapes(t *testing.T) {
	t.Parallel()
	shapes := readmeShapes(t)
	for _, label := range []string{"`list`", "`show`", "`show` (unreadable)", "`stats`", "`workers`", "`periodics`", "`reconcile`", "`purge`", "`check`", "any failure"} {
		if _, ok := shapes[label]; !ok {
			t.Errorf("README.md documents no JSON document for %s", label)
		}
	}
	want := [2][]string{{"dry_run", "cutoff", "tasks", "objects", "kept", "broken"}, {"would_purge", "purged", "error"}}
	if diff := cmp.Diff(want, shapes["`purge`"]); diff != "" {
		t.Errorf("purge's documented keys (-want +got):\n%s", diff)
	}
}
