package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The layering of the module's folders (docs/architecture.md, "The tree
// and the direction of imports"), checked on the real import graph of
// every non-test package:
//
//   - no package imports a package in a folder above it (an ancestor
//     folder): a parent may use its children, never the reverse, so
//     cmd/internal/server/front may not import cmd/internal/server, nor
//     engine/celenv import engine;
//   - the engine core (engine and everything under engine/) imports only
//     engine/*, schema and internal/*: no node, connector or server
//     package, and in particular no inference package (connectors/mm,
//     connectors/upstream);
//   - internal/ holds leaf libraries: a package under internal/ imports no
//     module package outside internal/.
//
// Test files are not checked: a package's tests may use fixtures from
// anywhere below the composition root (the engine's tests use the
// stand-in node types of nodes/nodetest).
func TestLayout(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("the go command is not on PATH: cannot list the module's imports")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	module, err := modulePath(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./... in %s: %v\n%s", root, err, stderr.Bytes())
	}
	pkgs := parseGoList(string(out))
	if len(pkgs) == 0 {
		t.Fatalf("go list ./... in %s listed no package", root)
	}
	for _, v := range checkLayout(module, pkgs) {
		t.Error(v)
	}
}

// TestLayoutCheck pins the rules of checkLayout on small synthetic graphs.
func TestLayoutCheck(t *testing.T) {
	const m = "example.com/mod"
	cases := []struct {
		name string
		pkgs []layoutPkg
		want []string
	}{
		{
			name: "ancestor import",
			pkgs: []layoutPkg{{m + "/cmd/internal/server/front", []string{m + "/cmd/internal/server"}}},
			want: []string{"cmd/internal/server/front imports cmd/internal/server, a package in a folder above it"},
		},
		{
			name: "engine subpackage importing the core",
			pkgs: []layoutPkg{{m + "/engine/celenv", []string{m + "/engine"}}},
			want: []string{"engine/celenv imports engine, a package in a folder above it"},
		},
		{
			name: "a package importing the module root",
			pkgs: []layoutPkg{{m + "/nodes/decode", []string{m}}},
			want: []string{"nodes/decode imports . (the module root), a package in a folder above it"},
		},
		{
			name: "sibling and child imports are fine",
			pkgs: []layoutPkg{
				{m + "/cmd/internal/server/metrics", []string{m + "/cmd/internal/server/front", m + "/cmd/internal/server/admission"}},
				{m + "/connectors/async/redistest", []string{m + "/connectors/async/redisproc"}},
				{m + "/nodes/all", []string{m + "/nodes/decode", m + "/nodes/render"}},
			},
		},
		{
			name: "a name prefix is not a folder",
			pkgs: []layoutPkg{{m + "/engineering/x", []string{m + "/engine"}}},
		},
		{
			name: "the core importing an inference package",
			pkgs: []layoutPkg{{m + "/engine", []string{m + "/connectors/mm", m + "/engine/graph", m + "/schema", m + "/internal/jsonb", "github.com/sirupsen/logrus", "context"}}},
			want: []string{"engine imports connectors/mm: the engine core imports only engine/*, schema and internal/*"},
		},
		{
			name: "a core subpackage importing a node package",
			pkgs: []layoutPkg{{m + "/engine/graph", []string{m + "/nodes/decode"}}},
			want: []string{"engine/graph imports nodes/decode: the engine core imports only engine/*, schema and internal/*"},
		},
		{
			name: "internal leaf importing the engine",
			pkgs: []layoutPkg{{m + "/internal/jsonb", []string{m + "/engine"}}},
			want: []string{"internal/jsonb imports engine: a package under internal/ is a leaf and imports only internal/*"},
		},
		{
			name: "internal leaves may use each other",
			pkgs: []layoutPkg{
				{m + "/internal/telemetry", []string{m + "/internal/redact"}},
				{m + "/internal/tlsfiles/tlstest", nil},
			},
		},
		{
			name: "a nested internal folder is not the leaf folder",
			pkgs: []layoutPkg{{m + "/nodes/internal/leg", []string{m + "/engine", m + "/connectors/upstream", m + "/internal/jsonb"}}},
		},
		{
			name: "standard library and other modules are ignored",
			pkgs: []layoutPkg{{m + "/internal/jsonb", []string{"encoding/json", "example.com/modx/engine", "example.com/mod2"}}},
		},
		{
			name: "every offence of a package is named",
			pkgs: []layoutPkg{{m + "/engine", []string{m + "/connectors/mm", m + "/connectors/upstream"}}},
			want: []string{
				"engine imports connectors/mm: the engine core imports only engine/*, schema and internal/*",
				"engine imports connectors/upstream: the engine core imports only engine/*, schema and internal/*",
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := checkLayout(m, c.pkgs)
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("checkLayout:\n got %q\nwant %q", got, c.want)
			}
		})
	}
}

func TestLayoutParseGoList(t *testing.T) {
	out := "example.com/mod/a example.com/mod/b fmt\nexample.com/mod/b \n\nexample.com/mod/c\n"
	want := []layoutPkg{
		{"example.com/mod/a", []string{"example.com/mod/b", "fmt"}},
		{"example.com/mod/b", nil},
		{"example.com/mod/c", nil},
	}
	if got := parseGoList(out); !reflect.DeepEqual(got, want) {
		t.Errorf("parseGoList:\n got %q\nwant %q", got, want)
	}
}

// layoutPkg is one package of the module and its (non-test) imports.
type layoutPkg struct {
	path    string
	imports []string
}

// parseGoList reads the output of
// go list -f '{{.ImportPath}} {{join .Imports " "}}': one package a line,
// its import path first.
func parseGoList(out string) []layoutPkg {
	var pkgs []layoutPkg
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		p := layoutPkg{path: f[0]}
		if len(f) > 1 {
			p.imports = f[1:]
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// checkLayout returns one message per broken rule, per offending import,
// in the order of pkgs and their imports. Paths in messages are relative
// to the module ("." for its root).
func checkLayout(module string, pkgs []layoutPkg) []string {
	rel := func(p string) (string, bool) {
		if p == module {
			return ".", true
		}
		if r, ok := strings.CutPrefix(p, module+"/"); ok {
			return r, true
		}
		return "", false
	}
	// under reports whether r is dir or inside it ("engine/x" is under
	// "engine", "engineering" is not).
	under := func(r, dir string) bool { return r == dir || strings.HasPrefix(r, dir+"/") }

	var out []string
	for _, p := range pkgs {
		from, ok := rel(p.path)
		if !ok {
			continue
		}
		for _, imp := range p.imports {
			to, ok := rel(imp)
			if !ok {
				continue
			}
			if to == "." || strings.HasPrefix(from, to+"/") {
				name := to
				if to == "." {
					name = ". (the module root)"
				}
				out = append(out, from+" imports "+name+", a package in a folder above it")
			}
			if under(from, "engine") && !under(to, "engine") && !under(to, "schema") && !under(to, "internal") {
				out = append(out, from+" imports "+to+": the engine core imports only engine/*, schema and internal/*")
			}
			if under(from, "internal") && !under(to, "internal") {
				out = append(out, from+" imports "+to+": a package under internal/ is a leaf and imports only internal/*")
			}
		}
	}
	return out
}

// modulePath reads the module line of a go.mod file.
func modulePath(gomod string) (string, error) {
	data, err := os.ReadFile(gomod)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`), nil
		}
	}
	return "", fmt.Errorf("%s: no module line", gomod)
}
