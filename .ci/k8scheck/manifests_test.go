package k8scheck

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// manifestDir is docs/deploy, seen from this module's directory.
const manifestDir = "../../docs/deploy"

// load decodes every manifest once per test and fails on any error.
func load(t *testing.T) []Doc {
	t.Helper()
	docs, errs := LoadDir(manifestDir)
	for _, e := range errs {
		t.Error(e)
	}
	if len(errs) > 0 {
		t.FailNow()
	}
	return docs
}

func TestManifestsDecodeStrictly(t *testing.T) {
	docs := load(t)
	want := []string{
		"ConfigMap/celflow-config",
		"Deployment/celflow",
		"Gateway/inference-internal",
		"Gateway/inference-public",
		"HTTPRoute/celflow",
		"HTTPRoute/vllm-epd",
		"InferencePool/vllm",
		"NetworkPolicy/inference-internal-ingress",
		"PodDisruptionBudget/celflow",
		"Service/celflow",
		"Service/vllm-render",
	}
	var got []string
	seen := map[string]bool{}
	for _, d := range docs {
		id := d.Kind + "/" + d.Name
		if seen[id] {
			t.Errorf("%s: duplicate object %s", d.Where(), id)
		}
		seen[id] = true
		got = append(got, id)
		// Namespace-less: the operator picks the namespace at apply time
		// (kubectl apply -n NS -f docs/deploy/).
		if d.Namespace != "" {
			t.Errorf("%s: sets metadata.namespace %q; manifests are namespace-less", d.Where(), d.Namespace)
		}
	}
	sort.Strings(got)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("objects:\n got %v\nwant %v", got, want)
	}
}

// The checker itself must reject what the API server would prune or refuse:
// otherwise a green run proves nothing.
func TestDecodeStrictRejects(t *testing.T) {
	cases := []struct {
		name, doc, wantErr string
	}{
		{"unknown field", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  replica: 2\n", `unknown field "spec.replica"`},
		{"field in the wrong case", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  Replicas: 2\n", `unknown field "spec.Replicas"`},
		{"field at the wrong level", "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec:\n  ports:\n    - port: 80\n      readinessProbe: {}\n", `unknown field "spec.ports[0].readinessProbe"`},
		{"duplicate key", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: b}\ndata: {c: d}\n", `already set in map`},
		{"wrong type", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  replicas: two\n", `cannot unmarshal string`},
		{"unknown kind", "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n", `unsupported apiVersion/kind "v1"/"Pod"`},
		{"old gateway api version", "apiVersion: gateway.networking.k8s.io/v1beta1\nkind: HTTPRoute\nmetadata: {name: x}\n", `unsupported apiVersion/kind`},
		{"httproute unknown filter field", "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: x}\nspec:\n  rules:\n    - filters:\n        - type: RequestHeaderModifier\n          requestHeaderModifier: {delete: [a]}\n", `unknown field "spec.rules[0].filters[0].requestHeaderModifier.delete"`},
		{"pool unknown field", "apiVersion: inference.networking.k8s.io/v1\nkind: InferencePool\nmetadata: {name: p}\nspec:\n  selector: {matchLabels: {a: b}}\n  targetPortNumber: 8000\n", `unknown field "spec.targetPortNumber"`},
		{"pool two ports", "apiVersion: inference.networking.k8s.io/v1\nkind: InferencePool\nmetadata: {name: p}\nspec:\n  selector: {matchLabels: {a: b}}\n  targetPorts: [{number: 1}, {number: 2}]\n  endpointPickerRef: {name: e, port: {number: 9002}}\n", `exactly one port, got 2`},
		{"pool no picker", "apiVersion: inference.networking.k8s.io/v1\nkind: InferencePool\nmetadata: {name: p}\nspec:\n  selector: {matchLabels: {a: b}}\n  targetPorts: [{number: 8000}]\n", `endpointPickerRef.name is required`},
		{"pool bad failure mode", "apiVersion: inference.networking.k8s.io/v1\nkind: InferencePool\nmetadata: {name: p}\nspec:\n  selector: {matchLabels: {a: b}}\n  targetPorts: [{number: 8000}]\n  endpointPickerRef: {name: e, port: {number: 9002}, failureMode: Open}\n", `want FailOpen or FailClose`},
		{"pool status written by hand", "apiVersion: inference.networking.k8s.io/v1\nkind: InferencePool\nmetadata: {name: p}\nspec:\n  selector: {matchLabels: {a: b}}\n  targetPorts: [{number: 8000}]\n  endpointPickerRef: {name: e, port: {number: 9002}}\nstatus: {}\n", `unknown field "status"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeStrict("case.yaml", Part{Line: 1, Data: []byte(c.doc)})
			if err == nil {
				t.Fatalf("decoded without error; want %q", c.wantErr)
			}
			if !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("error %q does not contain %q", err, c.wantErr)
			}
		})
	}
}

func TestDecodeStrictAcceptsValidPool(t *testing.T) {
	doc := "apiVersion: inference.networking.k8s.io/v1\nkind: InferencePool\nmetadata: {name: p}\nspec:\n  selector: {matchLabels: {app: vllm}}\n  targetPorts: [{number: 8000}]\n  endpointPickerRef: {name: e, kind: Service, port: {number: 9002}, failureMode: FailOpen}\n"
	d, err := DecodeStrict("case.yaml", Part{Line: 1, Data: []byte(doc)})
	if err != nil {
		t.Fatal(err)
	}
	p := d.Obj.(*InferencePool)
	if p.Spec.TargetPorts[0].Number != 8000 || p.Spec.EndpointPickerRef.Port.Number != 9002 {
		t.Fatalf("decoded %+v", p.Spec)
	}
}

func TestSplitDocuments(t *testing.T) {
	cases := []struct {
		name  string
		in    string
		lines []int
	}{
		{"single", "a: 1\n", []int{1}},
		{"a document starts at its first content line", "# c\n\na: 1\n", []int{3}},
		{"two", "a: 1\n---\nb: 2\n", []int{1, 3}},
		{"leading separator", "---\na: 1\n", []int{2}},
		{"comment-only document dropped", "a: 1\n---\n# only a comment\n---\n\nb: 2\n", []int{1, 6}},
		{"separator with trailing comment", "a: 1\n--- # next\nb: 2\n", []int{1, 3}},
		{"dashes inside a block scalar are content", "a: |\n  x\n  ---x\n", []int{1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			parts := SplitDocuments([]byte(c.in))
			var got []int
			for _, p := range parts {
				got = append(got, p.Line)
			}
			if len(got) != len(c.lines) {
				t.Fatalf("documents at lines %v, want %v", got, c.lines)
			}
			for i := range got {
				if got[i] != c.lines[i] {
					t.Fatalf("documents at lines %v, want %v", got, c.lines)
				}
			}
		})
	}
}

// docs/deploy.md is the manual for these files: each one is named there.
func TestDeployDocNamesEveryManifest(t *testing.T) {
	doc, err := os.ReadFile("../../docs/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(manifestDir, "*.yaml"))
	for _, f := range files {
		name := "deploy/" + filepath.Base(f)
		if !strings.Contains(string(doc), name) {
			t.Errorf("docs/deploy.md does not mention %s", name)
		}
	}
}
