// Package k8scheck checks the Kubernetes manifests under docs/deploy offline
// (the Helm chart docs/deploy/helm/celflow rendered with its default values by
// `make deploy-manifests`; .ci/kube checks they are current):
// every document is decoded strictly into its Kubernetes API type, so a
// misspelt or misplaced field fails CI instead of being pruned silently by the
// API server (or rejected only at `kubectl apply`).
//
// It is a module of its own so that celflow's go.mod stays free of k8s.io/*.
// The modules come from the Go proxy at build time; the tests use no network.
package k8scheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Part is one YAML document of a file, with the 1-based line it starts on.
type Part struct {
	Line int
	Data []byte
}

// Doc is a decoded manifest document.
type Doc struct {
	File       string // base name under the manifest directory
	Line       int    // first line of the document in File
	APIVersion string
	Kind       string
	Name       string
	Namespace  string
	Obj        any // pointer to the typed object (see kinds)
}

// Where names the document for error messages: "deployment.yaml:3 Deployment/celflow".
func (d Doc) Where() string {
	return fmt.Sprintf("%s:%d %s/%s", d.File, d.Line, d.Kind, d.Name)
}

// kinds maps apiVersion/kind to a constructor of its Go type. A document of
// any other kind is an error: the check must never pass a document it did
// not look at.
var kinds = map[string]func() any{
	"v1/ConfigMap":                                 func() any { return &corev1.ConfigMap{} },
	"v1/Service":                                   func() any { return &corev1.Service{} },
	"apps/v1/Deployment":                           func() any { return &appsv1.Deployment{} },
	"policy/v1/PodDisruptionBudget":                func() any { return &policyv1.PodDisruptionBudget{} },
	"autoscaling/v2/HorizontalPodAutoscaler":       func() any { return &autoscalingv2.HorizontalPodAutoscaler{} },
	"networking.k8s.io/v1/NetworkPolicy":           func() any { return &networkingv1.NetworkPolicy{} },
	"gateway.networking.k8s.io/v1/Gateway":         func() any { return &gatewayv1.Gateway{} },
	"gateway.networking.k8s.io/v1/HTTPRoute":       func() any { return &gatewayv1.HTTPRoute{} },
	"inference.networking.k8s.io/v1/InferencePool": func() any { return &InferencePool{} },
}

// SplitDocuments splits a multi-document YAML stream on "---" lines. Documents
// holding only comments or blank lines are dropped.
func SplitDocuments(data []byte) []Part {
	var parts []Part
	var cur bytes.Buffer
	start, line := 1, 0
	flush := func() {
		if hasContent(cur.Bytes()) {
			parts = append(parts, Part{Line: start, Data: bytes.Clone(cur.Bytes())})
		}
		cur.Reset()
	}
	for _, l := range strings.SplitAfter(string(data), "\n") {
		line++
		trimmed := strings.TrimRight(l, " \t\r\n")
		if trimmed == "---" || strings.HasPrefix(trimmed, "--- ") || strings.HasPrefix(trimmed, "---\t") {
			flush()
			start = line + 1
			continue
		}
		if cur.Len() == 0 && !hasContent([]byte(l)) {
			start = line + 1 // a document starts at its first line with content
			continue
		}
		cur.WriteString(l)
	}
	flush()
	return parts
}

func hasContent(b []byte) bool {
	for _, l := range strings.Split(string(b), "\n") {
		t := strings.TrimSpace(l)
		if t != "" && !strings.HasPrefix(t, "#") {
			return true
		}
	}
	return false
}

// DecodeStrict converts one YAML document to JSON (duplicate keys are errors)
// and decodes it into the Go type of its kind with unknown and duplicate
// fields as errors. sigs.k8s.io/json is the decoder the API server uses: unlike
// encoding/json it is case-sensitive, so `Replicas:` is unknown, not replicas.
func DecodeStrict(file string, p Part) (Doc, error) {
	d := Doc{File: file, Line: p.Line}
	j, err := yaml.YAMLToJSONStrict(p.Data)
	if err != nil {
		return d, fmt.Errorf("%s:%d: %w", file, p.Line, err)
	}
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(j, &head); err != nil {
		return d, fmt.Errorf("%s:%d: %w", file, p.Line, err)
	}
	d.APIVersion, d.Kind = head.APIVersion, head.Kind
	d.Name, d.Namespace = head.Metadata.Name, head.Metadata.Namespace
	mk, ok := kinds[head.APIVersion+"/"+head.Kind]
	if !ok {
		return d, fmt.Errorf("%s:%d: unsupported apiVersion/kind %q/%q (known: %s)",
			file, p.Line, head.APIVersion, head.Kind, strings.Join(knownKinds(), ", "))
	}
	obj := mk()
	strict, err := kjson.UnmarshalStrict(j, obj, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return d, fmt.Errorf("%s: %w", d.Where(), err)
	}
	if len(strict) > 0 {
		msgs := make([]string, len(strict))
		for i, e := range strict {
			msgs[i] = e.Error()
		}
		return d, fmt.Errorf("%s: %s", d.Where(), strings.Join(msgs, "; "))
	}
	if v, ok := obj.(interface{ Validate() []string }); ok {
		if problems := v.Validate(); len(problems) > 0 {
			return d, fmt.Errorf("%s: %s", d.Where(), strings.Join(problems, "; "))
		}
	}
	d.Obj = obj
	return d, nil
}

func knownKinds() []string {
	out := make([]string, 0, len(kinds))
	for k := range kinds {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// LoadDir decodes every *.yaml file directly under dir, in name order, and
// returns all documents that decoded plus every error (all at once).
func LoadDir(dir string) ([]Doc, []error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, []error{err}
	}
	if len(files) == 0 {
		return nil, []error{fmt.Errorf("%s: no *.yaml manifests", dir)}
	}
	sort.Strings(files)
	var docs []Doc
	var errs []error
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		parts := SplitDocuments(data)
		if len(parts) == 0 {
			errs = append(errs, fmt.Errorf("%s: no YAML document", filepath.Base(f)))
		}
		for _, p := range parts {
			d, err := DecodeStrict(filepath.Base(f), p)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			docs = append(docs, d)
		}
	}
	return docs, errs
}

// Find returns the decoded object of the given kind and name, or nil.
func Find[T any](docs []Doc, kind, name string) *T {
	for _, d := range docs {
		if d.Kind == kind && d.Name == name {
			if o, ok := d.Obj.(*T); ok {
				return o
			}
		}
	}
	return nil
}

// All returns every decoded object of Go type T.
func All[T any](docs []Doc) []*T {
	var out []*T
	for _, d := range docs {
		if o, ok := d.Obj.(*T); ok {
			out = append(out, o)
		}
	}
	return out
}
