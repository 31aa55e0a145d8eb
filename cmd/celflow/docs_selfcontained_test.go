package main

import (
	"fmt"
	"iter"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// The user-facing docs must be readable from the repository alone: a user
// cannot open the design notes the project was built from, so a doc that
// cites them ("PROTOCOL 12", "FIELD-NOTES 4", "ACCEPTANCE.md") or links a
// path outside the repository sends the reader nowhere. These tests keep
// README.md, docs/**, nodes/*/README.md and connectors/*/README.md
// self-contained.

// reInternalCitation matches a citation of the internal design notes: a
// note's file name, a numbered section or item of one, or the names that are
// only ever used for them. Environment variables such as
// OTEL_EXPORTER_OTLP_PROTOCOL do not match (no word boundary before the
// name), and neither does the test-comment convention "`// ACCEPTANCE n`"
// that docs/acceptance.md explains (no digit).
var reInternalCitation = regexp.MustCompile(
	`\b(?:PROTOCOL|ACCEPTANCE|ASYNC|FIELD-NOTES|ENGINE|PERFORMANCE|STYLE)\.md\b` +
		`|\b(?:PROTOCOL|ACCEPTANCE|ASYNC|ENGINE|PERFORMANCE|STYLE)(?:\.md)?,?\s+(?:sections?\s+|property\s+|items?\s+)?\d+` +
		`|\b(?:PROTOCOL|FIELD-NOTES|PERFORMANCE)\b` +
		`|shared/docs|(?:^|[\s(\x60"'])/work/`)

// upstreamDocHosts are the public upstream projects whose own documentation
// a user may be sent to. Any other absolute URL in a Markdown link fails.
var upstreamDocHosts = map[string]bool{
	"docs.vllm.ai":                                               true,
	"github.com/vllm-project":                                    true,
	"gateway-api-inference-extension.sigs.k8s.io":                true,
	"github.com/kubernetes-sigs/gateway-api-inference-extension": true,
	"redis.io": true,
}

// userDocs lists the files under test, relative to root.
func userDocs(t *testing.T, root string) []string {
	t.Helper()
	files := []string{"README.md"}
	for _, g := range []string{"nodes/*/README.md", "connectors/*/README.md"} {
		m, err := filepath.Glob(filepath.Join(root, g))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range m {
			rel, _ := filepath.Rel(root, p)
			files = append(files, filepath.ToSlash(rel))
		}
	}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		files = append(files, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	return files
}

func TestDocsCiteNoInternalNotes(t *testing.T) {
	root := "../.."
	files := userDocs(t, root)
	if len(files) < 10 {
		t.Fatalf("only %d doc files found: %v", len(files), files)
	}
	// Users also read the shipped workflows as examples, and the schemas'
	// descriptions in their editors.
	for _, g := range []string{"workflows/*.yaml", "schema/*.json", "nodes/*/schema.json"} {
		m, err := filepath.Glob(filepath.Join(root, g))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range m {
			rel, _ := filepath.Rel(root, p)
			files = append(files, filepath.ToSlash(rel))
		}
	}
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range internalCitations(string(data)) {
			t.Errorf("%s:%d: %q cites the internal design notes; state the fact here or link the doc under docs/ that states it", f, p.line, p.text)
		}
	}
}

func TestDocsLinksStayInRepository(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range userDocs(t, root) {
		if !strings.HasSuffix(f, ".md") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range markdownLinks(string(data)) {
			if msg := checkLink(root, f, l.target); msg != "" {
				t.Errorf("%s:%d: link %q: %s", f, l.line, l.target, msg)
			}
		}
	}
}

type found struct {
	line   int
	text   string
	target string
}

func internalCitations(doc string) []found {
	var out []found
	for i, line := range strings.Split(doc, "\n") {
		for _, m := range reInternalCitation.FindAllString(line, -1) {
			out = append(out, found{line: i + 1, text: strings.TrimSpace(m)})
		}
	}
	return out
}

var (
	reInlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	reRefDef     = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$`)
	reAutolink   = regexp.MustCompile(`<((?:https?|ftp|file)://[^>\s]+)>`)
	reCodeSpan   = regexp.MustCompile("`+[^`]*`+")
)

// outsideFences yields the lines of a Markdown document (0-based index and
// text) that are not inside a fenced code block, fences excluded.
func outsideFences(doc string) iter.Seq2[int, string] {
	return func(yield func(int, string) bool) {
		fence := ""
		for i, line := range strings.Split(doc, "\n") {
			trim := strings.TrimSpace(line)
			if fence != "" {
				if strings.HasPrefix(trim, fence) {
					fence = ""
				}
				continue
			}
			if strings.HasPrefix(trim, "```") || strings.HasPrefix(trim, "~~~") {
				fence = trim[:3]
				continue
			}
			if !yield(i, line) {
				return
			}
		}
	}
}

// markdownLinks returns the targets of the inline links, images, reference
// definitions and autolinks of a Markdown document, outside code.
func markdownLinks(doc string) []found {
	var out []found
	for i, line := range outsideFences(doc) {
		line = reCodeSpan.ReplaceAllString(line, "")
		for _, m := range reInlineLink.FindAllStringSubmatch(line, -1) {
			out = append(out, found{line: i + 1, target: m[1]})
		}
		if m := reRefDef.FindStringSubmatch(line); m != nil {
			out = append(out, found{line: i + 1, target: m[1]})
		}
		for _, m := range reAutolink.FindAllStringSubmatch(line, -1) {
			out = append(out, found{line: i + 1, target: m[1]})
		}
	}
	return out
}

// checkLink says what is wrong with a link from the repository file from
// (slash-separated, relative to root), or "" when it is fine: a relative
// link must name an existing file or directory inside the repository (and,
// for a Markdown file, an existing heading when it has a fragment); an
// absolute URL must point at an upstream project's documentation.
func checkLink(root, from, target string) string {
	u, err := url.Parse(target)
	if err != nil {
		return "does not parse: " + err.Error()
	}
	switch {
	case u.Scheme == "http" || u.Scheme == "https":
		if upstreamDocHosts[u.Host] {
			return ""
		}
		if parts := strings.SplitN(strings.TrimPrefix(u.Path, "/"), "/", 3); len(parts) >= 1 {
			if upstreamDocHosts[u.Host+"/"+parts[0]] || len(parts) >= 2 && upstreamDocHosts[u.Host+"/"+parts[0]+"/"+parts[1]] {
				return ""
			}
		}
		return "points outside the repository; state the fact in the docs, or link only an upstream project's public documentation (vLLM, the Gateway API Inference Extension, Redis)"
	case u.Scheme != "" || u.Host != "":
		return "points outside the repository"
	case strings.HasPrefix(u.Path, "/"):
		return "is an absolute path; link a repository file by a relative path"
	}
	file := from
	if u.Path != "" {
		p := filepath.Join(filepath.Dir(filepath.Join(root, from)), filepath.FromSlash(u.Path))
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return "leaves the repository"
		}
		if _, err := os.Stat(p); err != nil {
			return "names no file of the repository"
		}
		file = filepath.ToSlash(rel)
	}
	if u.Fragment == "" || !strings.HasSuffix(file, ".md") {
		return ""
	}
	data, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		return err.Error()
	}
	if !markdownAnchors(string(data))[u.Fragment] {
		return fmt.Sprintf("%s has no heading or anchor %q", file, u.Fragment)
	}
	return ""
}

var (
	reHeading  = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	reHTMLID   = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	reSlugDrop = regexp.MustCompile(`[^\p{L}\p{N}\s_-]`)
)

// markdownAnchors returns the fragments a renderer such as GitHub's gives
// the headings of doc (lower case, punctuation dropped, spaces to hyphens,
// "-1", "-2" for repeats), plus explicit <a id="..."> anchors.
func markdownAnchors(doc string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, line := range outsideFences(doc) {
		for _, m := range reHTMLID.FindAllStringSubmatch(line, -1) {
			anchors[m[1]] = true
		}
		m := reHeading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		slug := strings.ReplaceAll(reSlugDrop.ReplaceAllString(strings.ToLower(m[1]), ""), " ", "-")
		if n := seen[slug]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	}
	return anchors
}

func TestDocCitationPattern(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"as PROTOCOL 12 says", 1},
		{"(PROTOCOL.md section 5)", 1},
		{"see FIELD-NOTES 4", 1},
		{"ACCEPTANCE 18 requires", 1},
		{"ENGINE.md property 12", 1},
		{"`../shared/docs/ASYNC.md`", 2},
		{"do not (PERFORMANCE.md)", 1},
		{"a file under /work/shared", 1},
		{"`OTEL_EXPORTER_OTLP_PROTOCOL` and `CELFLOW_TELEMETRY_TRACING_PROTOCOL`", 0},
		{"a test comment `// ACCEPTANCE n`", 0},
		{"docs/protocol.md, the acceptance list", 0},
		{"ec-shared-storage", 0},
	} {
		if got := len(internalCitations(tc.in)); got != tc.want {
			t.Errorf("internalCitations(%q): %d, want %d", tc.in, got, tc.want)
		}
	}
}

func TestDocCheckLink(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		from, target string
		ok           bool
	}{
		{"docs/deploy.md", "errors.md", true},
		{"docs/deploy.md", "configuration.md#shutdown", true},
		{"docs/deploy.md", "#the-trust-boundary-two-gateways", true},
		{"docs/deploy.md", "#no-such-heading", false},
		{"docs/deploy.md", "deploy/configmap.yaml", true},
		{"nodes/decode/README.md", "../../docs/protocol.md#decode", true},
		{"docs/deploy.md", "nosuch.md", false},
		{"docs/async.md", "../shared/docs/ASYNC.md", false},
		{"docs/async.md", "../../shared/docs/ASYNC.md", false},
		{"docs/async.md", "/work/shared/docs/ASYNC.md", false},
		{"docs/async.md", "file:///work/shared/docs/ASYNC.md", false},
		{"docs/deploy.md", "https://gateway-api-inference-extension.sigs.k8s.io/", true},
		{"docs/deploy.md", "https://docs.vllm.ai/en/latest/", true},
		{"docs/deploy.md", "https://github.com/vllm-project/vllm/issues/1", true},
		{"docs/deploy.md", "https://github.com/someone/notes", false},
		{"docs/deploy.md", "https://example.com/internal", false},
	} {
		msg := checkLink(root, tc.from, tc.target)
		if (msg == "") != tc.ok {
			t.Errorf("checkLink(%s, %q) = %q, want ok=%v", tc.from, tc.target, msg, tc.ok)
		}
	}
}

func TestDocMarkdownLinks(t *testing.T) {
	doc := "see [a](x.md) and ![img](i.png \"t\") and <https://redis.io/docs/>\n" +
		"`[not](a-link.md)`\n```\n[nor](this.md)\n```\n[ref]: https://docs.vllm.ai/\n"
	var got []string
	for _, l := range markdownLinks(doc) {
		got = append(got, fmt.Sprintf("%d:%s", l.line, l.target))
	}
	want := "1:x.md 1:i.png 1:https://redis.io/docs/ 6:https://docs.vllm.ai/"
	if strings.Join(got, " ") != want {
		t.Errorf("markdownLinks: %v, want %s", got, want)
	}
}
