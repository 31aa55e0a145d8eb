package main

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// acceptanceItems is the number of items in ACCEPTANCE.md (1–200).
const acceptanceItems = 200

// reClaim matches a claim in a comment: "ACCEPTANCE" followed by item
// numbers and ranges separated by commas, "and" or "or", e.g.
// "ACCEPTANCE 5, 14, 36", "ACCEPTANCE 100–104", "ACCEPTANCE 185 and 186".
// Comment groups are joined before matching, so a list may wrap lines.
var reClaim = regexp.MustCompile(`ACCEPTANCE\s+(\d+(?:\s*[–-]\s*\d+)?(?:\s*(?:,|\band\b|\bor\b)\s*\d+(?:\s*[–-]\s*\d+)?)*)`)

var reNum = regexp.MustCompile(`\d+(?:\s*[–-]\s*\d+)?`)

// parseClaims returns the item numbers claimed in text, ranges expanded.
func parseClaims(text string) ([]int, error) {
	var out []int
	for _, m := range reClaim.FindAllStringSubmatch(text, -1) {
		for _, part := range reNum.FindAllString(m[1], -1) {
			lo, hi := part, part
			if i := strings.IndexAny(part, "–-"); i >= 0 {
				lo, hi = strings.TrimSpace(part[:i]), strings.TrimSpace(strings.TrimLeft(part[i:], "–- "))
			}
			a, _ := strconv.Atoi(lo)
			b, _ := strconv.Atoi(hi)
			if a < 1 || b > acceptanceItems || a > b {
				return nil, fmt.Errorf("bad item or range %q in %q", part, m[0])
			}
			for n := a; n <= b; n++ {
				out = append(out, n)
			}
		}
	}
	return out, nil
}

// collectClaims scans every *_test.go under root (comments only, whatever
// the build tags) and every testdata/flows/*/case.yaml (its acceptance list
// and its # comments), and maps each claimed item to the places claiming it.
func collectClaims(root string) (map[int][]string, error) {
	claims := map[int][]string{}
	add := func(where string, items []int) {
		for _, n := range items {
			claims[n] = append(claims[n], where)
		}
	}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		// This file's own comments quote claims as examples.
		if !strings.HasSuffix(path, "_test.go") || filepath.Base(path) == "acceptance_test.go" && filepath.Base(filepath.Dir(path)) == "celflow" {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for _, g := range f.Comments {
			items, err := parseClaims(g.Text())
			if err != nil {
				return fmt.Errorf("%s: %w", fset.Position(g.Pos()), err)
			}
			add(rel, items)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	cases, err := filepath.Glob(filepath.Join(root, "testdata", "flows", "*", "case.yaml"))
	if err != nil {
		return nil, err
	}
	for _, path := range cases {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		var c struct {
			Acceptance []int `yaml:"acceptance"`
		}
		if err := yaml.Unmarshal(data, &c); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		var comments []string
		for _, line := range strings.Split(string(data), "\n") {
			if s := strings.TrimSpace(line); strings.HasPrefix(s, "#") {
				comments = append(comments, strings.TrimLeft(s, "# "))
			}
		}
		items, err := parseClaims(strings.Join(comments, "\n"))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		add(rel, append(c.Acceptance, items...))
	}
	return claims, nil
}

func TestParseClaims(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
	}{
		{"ACCEPTANCE 37", []int{37}},
		{"ACCEPTANCE 5, 14, 36.", []int{5, 14, 36}},
		{"ACCEPTANCE 100–104", []int{100, 101, 102, 103, 104}},
		{"(ACCEPTANCE 185 and 186)", []int{185, 186}},
		{"ACCEPTANCE 55,\n57, 165,\n168", []int{55, 57, 165, 168}},
		{"ACCEPTANCE 17 (decode side), PROTOCOL 12", []int{17}},
		{"ACCEPTANCE 1-3 or 9", []int{1, 2, 3, 9}},
		{"acceptance 5, ACCEPTANCE: 6, PROTOCOL 7", nil},
	} {
		got, err := parseClaims(tc.in)
		if err != nil || fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("parseClaims(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"ACCEPTANCE 0", "ACCEPTANCE 201", "ACCEPTANCE 9–3"} {
		if _, err := parseClaims(bad); err == nil {
			t.Errorf("parseClaims(%q): no error", bad)
		}
	}
}

// TestAcceptanceClaimed fails when an ACCEPTANCE.md item is claimed by no
// test comment and no flow case, so coverage cannot silently regress. A
// claim is not proof: docs/acceptance.md records whether each claim's
// assertion really covers the item's "then" clause.
func TestAcceptanceClaimed(t *testing.T) {
	claims, err := collectClaims("../..")
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for n := 1; n <= acceptanceItems; n++ {
		if len(claims[n]) == 0 {
			missing = append(missing, strconv.Itoa(n))
		}
	}
	if len(missing) > 0 {
		t.Errorf("ACCEPTANCE items claimed by no test (write a test, then name the item in a comment `// ACCEPTANCE n` or in a flow case's acceptance list): %s",
			strings.Join(missing, ", "))
	}
	if testing.Verbose() {
		for n := 1; n <= acceptanceItems; n++ {
			where := append([]string(nil), claims[n]...)
			sort.Strings(where)
			t.Logf("%3d: %s", n, strings.Join(uniq(where), " "))
		}
	}
}

func uniq(s []string) []string {
	var out []string
	for i, x := range s {
		if i == 0 || x != s[i-1] {
			out = append(out, x)
		}
	}
	return out
}
