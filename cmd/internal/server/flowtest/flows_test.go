package flowtest

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/celflow/celflow/internal/telemetry"
)

var update = flag.Bool("update", false, "rewrite the goldens of testdata/flows")

// root is the repository root, where workflows/ and testdata/flows/ live.
const root = "../../../.."

func TestMain(m *testing.M) {
	// Tracing is on for every case, as in a traced deployment: legs must
	// carry celflow's span as traceparent (PROTOCOL 2.2). The provider
	// samples everything and exports nowhere.
	telemetry.Install(sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample())))
	logrus.StandardLogger().SetOutput(io.Discard)
	os.Exit(m.Run())
}

func caseDirs(t *testing.T) []string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(root, "testdata", "flows", "*", "case.yaml"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no cases under testdata/flows: %v", err)
	}
	for i, d := range dirs {
		dirs[i] = filepath.Dir(d)
	}
	sort.Strings(dirs)
	return dirs
}

// TestFlows runs every case of testdata/flows against its goldens.
func TestFlows(t *testing.T) {
	for _, dir := range caseDirs(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) { runOne(t, dir) })
	}
}

func runOne(t *testing.T, dir string) {
	c, err := loadCase(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ACCEPTANCE %s", joinInts(c.Acceptance))
	for k, v := range c.Env {
		t.Setenv(k, v)
	}
	res, f, err := runCase(c, root)
	if f != nil {
		defer f.close()
	}
	if err != nil {
		t.Fatal(err)
	}
	failed := false
	for _, e := range checkInvariants(c, res) {
		t.Error("protocol: " + e)
		failed = true
	}
	n := newNormaliser(f.urls, clientHeader(c).Get("Traceparent"))
	legs := n.apply(renderLegs(c, sortLegs(res.legs)))
	resp := n.apply(renderResponse(c, res))
	for raw := range n.seen["UUID"] {
		if !reUUIDv4.MatchString(raw) {
			t.Errorf("UUID %s is not a version 4 UUID (PROTOCOL 1.2)", raw)
		}
	}
	deviation := ""
	for _, g := range []struct{ file, text string }{{"legs.golden", legs}, {"response.golden", resp}} {
		path := filepath.Join(dir, g.file)
		if x := c.Xfail; x != nil && x.File == g.file {
			d, err := compareXfail(path, g.text, x, *update)
			if err != nil {
				t.Error(err)
				failed = true
			}
			deviation = d
			continue
		}
		if err := compareGolden(path, g.text, *update); err != nil {
			t.Error(err)
			failed = true
		}
	}
	if failed || t.Failed() {
		t.Logf("logs:\n%s", cutLog(res.logs))
		return
	}
	if deviation != "" {
		t.Skip(deviation)
	}
}

// compareXfail compares a golden that holds the protocol-correct Want line
// while celflow produces Got. It returns the deviation text when exactly
// that difference remains, and an error when celflow was fixed (remove the
// xfail entry) or anything else differs.
func compareXfail(path, got string, x *xfailSpec, update bool) (string, error) {
	if !strings.Contains(got, x.Got) {
		if err := compareGolden(path, got, update); err != nil {
			return "", err
		}
		return "", fmt.Errorf("known deviation fixed (%s): remove the xfail entry of the case", x.Reason)
	}
	fixed := strings.Replace(got, x.Got, x.Want, 1)
	if err := compareGolden(path, fixed, update); err != nil {
		return "", err
	}
	return "KNOWN PROTOCOL DEVIATION: " + x.Reason + "\n  golden: " + x.Want + "\n  celflow: " + x.Got, nil
}

func cutLog(s string) string {
	if len(s) > 6000 {
		return s[:6000] + "\n…"
	}
	return s
}

// TestShippedWorkflowsHaveCases: every workflow in workflows/ is exercised
// by at least one flow case (issue 3: "exercised by a test against
// httptest fakes that assert path, headers and body of every leg").
func TestShippedWorkflowsHaveCases(t *testing.T) {
	used := map[string]bool{}
	for _, dir := range caseDirs(t) {
		c, err := loadCase(dir)
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		used[c.Workflow] = true
	}
	files, _ := filepath.Glob(filepath.Join(root, "workflows", "*.yaml"))
	if len(files) == 0 {
		t.Fatal("no shipped workflows")
	}
	for _, f := range files {
		rel := "workflows/" + filepath.Base(f)
		if !used[rel] {
			t.Errorf("%s has no flow case in testdata/flows", rel)
		}
	}
}

// TestCaseFormat: case.yaml is strict, and a golden is compared byte for
// byte with a readable diff.
func TestCaseFormat(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) {
		if err := os.WriteFile(filepath.Join(dir, "case.yaml"), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct{ name, yaml, want string }{
		{"unknown key", "acceptance: [1]\nworkflow: w\nrequest: {route: chat}\nbogus: 1\n", "field bogus not found"},
		{"no workflow", "acceptance: [1]\nrequest: {route: chat}\n", "exactly one of workflow"},
		{"bad leg", "acceptance: [1]\nworkflow: w\nrequest: {route: chat}\nreplies: [{leg: media}]\n", "replies[0].leg"},
		{"bad header pair", "acceptance: [1]\nworkflow: w\nrequest: {route: chat, headers: [[A]]}\n", "want [name, value]"},
		{"pools without direct", "acceptance: [1]\nworkflow: w\nupstream: {pools: {decode: [{}]}}\nrequest: {route: chat}\n", "needs mode: direct"},
		{"no acceptance", "workflow: w\nrequest: {route: chat}\n", "acceptance"},
		{"bad pool role", "acceptance: [1]\nworkflow: w\nupstream: {mode: direct, pools: {prefil: [{}]}}\nrequest: {route: chat}\n", "upstream.pools.prefil"},
		{"bad xfail", "acceptance: [1]\nworkflow: w\nrequest: {route: chat}\nxfail: {reason: r}\n", "xfail: set"},
	} {
		write(tc.yaml)
		_, err := loadCase(dir)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
	p := filepath.Join(dir, "x.golden")
	if err := os.WriteFile(p, []byte("a\nb\nc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := compareGolden(p, "a\nb\nc\n", false); err != nil {
		t.Errorf("equal golden: %v", err)
	}
	err := compareGolden(p, "a\nB\nc\n", false)
	if err == nil || !strings.Contains(err.Error(), " - b") || !strings.Contains(err.Error(), " + B") {
		t.Errorf("diff = %v", err)
	}
}

// TestNormaliser: values are numbered by first appearance, equal values
// share a name, and the client's trace id survives.
func TestNormaliser(t *testing.T) {
	n := newNormaliser(map[string]string{"http://127.0.0.1:4242": "render"},
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	in := "X: 3f1e0b5c-8a7d-4e2b-9c4d-1a2b3c4d5e6f\nY: 3f1e0b5c-8a7d-4e2b-9c4d-1a2b3c4d5e6f 11111111-2222-4333-8444-555555555555\n" +
		"Traceparent: 00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01\n" +
		"Traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-b7ad6b7169203331-01\n" +
		`{"bootstrap_room":5729301466131981311,"u":"http://127.0.0.1:4242/x"}` + "\n" +
		`{"bootstrap_room":5729301466131981311}`
	want := "X: <UUID1>\nY: <UUID1> <UUID2>\n" +
		"Traceparent: 00-0af7651916cd43dd8448eb211c80319c-<SPAN1>-01\n" +
		"Traceparent: 00-<TRACE1>-b7ad6b7169203331-01\n" +
		`{"bootstrap_room":<ROOM1>,"u":"http://render/x"}` + "\n" +
		`{"bootstrap_room":<ROOM1>}`
	if got := n.apply(in); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// TestXfail: a known deviation skips only while exactly that difference
// remains; its fix, or any other difference, fails.
func TestXfail(t *testing.T) {
	p := filepath.Join(t.TempDir(), "legs.golden")
	x := &xfailSpec{Reason: "r", File: "legs.golden", Want: "reply 200", Got: "reply none"}
	if err := os.WriteFile(p, []byte("a\nreply 200\nb\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		got       string
		deviation bool
		err       string
	}{
		{got: "a\nreply none\nb\n", deviation: true},
		{got: "a\nreply 200\nb\n", err: "known deviation fixed"},
		{got: "a\nreply none\nB\n", err: "differs"},
		{got: "A\nreply 200\nb\n", err: "differs"},
	} {
		d, err := compareXfail(p, tc.got, x, false)
		if (d != "") != tc.deviation {
			t.Errorf("%q: deviation %q", tc.got, d)
		}
		if (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%q: err %v, want %q", tc.got, err, tc.err)
		}
	}
	// -update writes the protocol-correct line.
	if _, err := compareXfail(p, "c\nreply none\n", x, true); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "c\nreply 200\n" {
		t.Errorf("updated golden %q", b)
	}
}
