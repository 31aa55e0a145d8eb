// Package kube checks the Helm chart in docs/deploy/helm/celflow with a helm,
// kubectl and kube-apiserver built from the module proxy (.ci/kube.sh, cached):
// lint, the values schema's refusals, `celflow validate --config` on every
// rendered config, the generated plain manifests in docs/deploy/, and a
// server-side dry-run plus a real install and upgrade against a kube-apiserver
// on 127.0.0.1 backed by Debian's etcd.
//
//	KUBE_BIN=$(bash .ci/kube.sh) CELFLOW_BIN=$PWD/bin/celflow \
//	  bash -c 'cd .ci/kube && go test -count=1 ./...'
//
// It is a module of its own (with the tool lines that pin the builds), so the
// product's go.mod never sees k8s.io/kubernetes or helm.
package kube

import (
	"bytes"
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the generated manifests in docs/deploy/ from the chart")

const (
	repoRoot = "../.."
	chartRel = "docs/deploy/helm/celflow"
	release  = "celflow"
)

func chartDir() string { return filepath.Join(repoRoot, chartRel) }

// variant is one rendering CI checks: the default values and three others.
type variant struct {
	name string
	args []string
}

func variants() []variant {
	ci := filepath.Join(chartDir(), "ci")
	gateway := []string{"-f", filepath.Join(ci, "gateway-values.yaml")}
	// The dashboards and alerting rules the chart ships (files/, maintained
	// with the Prometheus checks) are rendered once they exist.
	if m, _ := filepath.Glob(filepath.Join(chartDir(), "files", "dashboards", "*.json")); len(m) > 0 {
		gateway = append(gateway, "--set", "metrics.dashboards.enabled=true")
	}
	if m, _ := filepath.Glob(filepath.Join(chartDir(), "files", "alerts", "*.yaml")); len(m) > 0 {
		gateway = append(gateway, "--set", "metrics.prometheusRule.enabled=true")
	}
	return []variant{
		{"default", nil},
		{"gateway", gateway},
		{"direct", []string{"-f", filepath.Join(ci, "direct-values.yaml")}},
		{"tls-async", []string{"-f", filepath.Join(ci, "tls-async-values.yaml"),
			"--set-file", "workflow=" + filepath.Join(repoRoot, "workflows", "epd-async.yaml")}},
	}
}

// tool returns the path of a binary .ci/kube.sh built, or skips the test.
func tool(t *testing.T, name string) string {
	t.Helper()
	dir := os.Getenv("KUBE_BIN")
	if dir == "" {
		t.Skip("KUBE_BIN not set: KUBE_BIN=$(bash .ci/kube.sh) builds helm, kubectl and kube-apiserver (cached)")
	}
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s: %v (run bash .ci/kube.sh)", p, err)
	}
	return p
}

// helmEnv keeps helm's cache, config and data out of $HOME.
func helmEnv(t *testing.T) []string {
	t.Helper()
	home := t.TempDir()
	return append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"))
}

// run runs a command with a deadline and returns stdout and stderr.
func run(t *testing.T, env []string, stdin []byte, name string, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}

// render is `helm template` of the chart with the variant's values.
func render(t *testing.T, namespace string, args ...string) string {
	t.Helper()
	helm := tool(t, "helm")
	a := append([]string{"template", release, chartDir(), "--namespace", namespace}, args...)
	out, errOut, err := run(t, helmEnv(t), nil, helm, a...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(a, " "), err, errOut)
	}
	return out
}

// docs splits a rendered stream into its objects (comments and empty documents dropped).
func docs(t *testing.T, stream string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, part := range strings.Split(stream, "\n---") {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(part), &m); err != nil {
			t.Fatalf("rendered YAML: %v\n%s", err, part)
		}
		if len(m) > 0 {
			out = append(out, m)
		}
	}
	return out
}

func find(objs []map[string]any, kind, name string) map[string]any {
	for _, o := range objs {
		md, _ := o["metadata"].(map[string]any)
		if o["kind"] == kind && md["name"] == name {
			return o
		}
	}
	return nil
}

func TestLint(t *testing.T) {
	helm := tool(t, "helm")
	for _, v := range variants() {
		t.Run(v.name, func(t *testing.T) {
			a := append([]string{"lint", "--strict", chartDir()}, v.args...)
			out, errOut, err := run(t, helmEnv(t), nil, helm, a...)
			if err != nil {
				t.Fatalf("helm lint: %v\n%s%s", err, out, errOut)
			}
		})
	}
}

// A deliberate mistake in the values is refused, with a message that names it,
// before anything reaches a cluster (values.schema.json, then the templates'
// own arithmetic checks).
func TestValuesRefused(t *testing.T) {
	helm := tool(t, "helm")
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"port out of range", []string{"--set", "ports.http=70000"}, []string{"/ports/http", "maximum", "65,535"}},
		{"port zero", []string{"--set", "service.port=0"}, []string{"/service/port", "minimum"}},
		{"port not a number", []string{"--set", "ports.metrics=http"}, []string{"/ports/metrics", "integer"}},
		{"TLS on without a Secret", []string{"--set", "tls.enabled=true"}, []string{"/tls/secretName", "minLength"}},
		{"async on without Redis", []string{"--set", "async.enabled=true"}, []string{"/async", "redisURL"}},
		{"direct mode without pools", []string{"--set", "upstream.mode=direct"}, []string{"/upstream/pools"}},
		{"unknown mode", []string{"--set", "upstream.mode=sidecar"}, []string{"/upstream/mode"}},
		{"misspelt key", []string{"--set", "replicas=3"}, []string{"additional properties 'replicas' not allowed"}},
		{"derived key in config", []string{"--set", "config.server.listen=:9000"}, []string{"config.server.listen is set by the chart"}},
		{"readiness slower than the drain delay", []string{"--set", "drain.drainDelaySeconds=3"}, []string{"probes.readiness takes 4s", "drainDelaySeconds (3)"}},
		{"more headers to strip than a route filter holds", []string{"--set", "publicGateway.extraRemoveHeaders={a,b,c,d,e}"}, []string{"would remove 17 headers", "allows 16"}},
		{"route timeout above the drain", []string{"--set", "routeTimeoutSeconds=600"}, []string{"routeTimeoutSeconds (600) exceeds drain.shutdownTimeoutSeconds (300)"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := append([]string{"template", release, chartDir()}, c.args...)
			out, errOut, err := run(t, helmEnv(t), nil, helm, a...)
			if err == nil {
				t.Fatalf("helm template %v accepted the values:\n%.400s", c.args, out)
			}
			for _, w := range c.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("error lacks %q:\n%s", w, errOut)
				}
			}
		})
	}
}

// The chart's derived values land where the Deployment expects them.
func TestRenderedArithmetic(t *testing.T) {
	objs := docs(t, render(t, "default", "--set", "drain.drainDelaySeconds=15", "--set", "drain.shutdownTimeoutSeconds=600",
		"--set", "routeTimeoutSeconds=600", "--set", "drain.graceMarginSeconds=30"))
	dep := find(objs, "Deployment", release)
	if dep == nil {
		t.Fatal("no Deployment")
	}
	spec := dep["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	if g := spec["terminationGracePeriodSeconds"]; g != float64(645) {
		t.Errorf("terminationGracePeriodSeconds = %v, want 15 + 600 + 30 = 645", g)
	}
	cm := find(objs, "ConfigMap", release+"-config")
	cfg := cm["data"].(map[string]any)["celflow.yaml"].(string)
	for _, want := range []string{"drain_delay: 15s", "shutdown_timeout: 600s"} {
		if !strings.Contains(cfg, want) {
			t.Errorf("config lacks %q:\n%s", want, cfg)
		}
	}
}

// The reload mode and the autoscaler change the Deployment as documented.
func TestRenderedModes(t *testing.T) {
	podAnnotations := func(objs []map[string]any) map[string]any {
		dep := find(objs, "Deployment", release)
		md, _ := dep["spec"].(map[string]any)["template"].(map[string]any)["metadata"].(map[string]any)
		a, _ := md["annotations"].(map[string]any)
		return a
	}
	if a := podAnnotations(docs(t, render(t, "default"))); a["checksum/config"] == nil {
		t.Error("configReload rollout (default): no checksum/config on the pod template")
	}
	if a := podAnnotations(docs(t, render(t, "default", "--set", "configReload=sighup"))); a["checksum/config"] != nil {
		t.Error("configReload sighup: the pod template still carries checksum/config (a config change would roll the pods)")
	}
	objs := docs(t, render(t, "default", "--set", "autoscaling.enabled=true"))
	if find(objs, "HorizontalPodAutoscaler", release) == nil {
		t.Error("autoscaling.enabled: no HorizontalPodAutoscaler")
	}
	if _, ok := find(objs, "Deployment", release)["spec"].(map[string]any)["replicas"]; ok {
		t.Error("autoscaling.enabled: the Deployment still sets replicas (each upgrade would fight the HPA)")
	}
	direct := docs(t, render(t, "default", "-f", filepath.Join(chartDir(), "ci", "direct-values.yaml")))
	for _, kind := range []string{"InferencePool", "Gateway", "NetworkPolicy"} {
		for _, o := range direct {
			if o["kind"] == kind {
				t.Errorf("direct mode renders a %s", kind)
			}
		}
	}
}

// TestRenderedConfigValidates runs `celflow validate --config` on the ConfigMap
// of every variant: the chart never ships a config serve would refuse.
func TestRenderedConfigValidates(t *testing.T) {
	bin := celflowBin(t)
	tls := writeTLSFiles(t)
	for _, v := range variants() {
		t.Run(v.name, func(t *testing.T) {
			out, cfg, err := validateRendered(t, bin, tls, v.args...)
			if err != nil {
				t.Fatalf("celflow validate --config (%s): %v\n%s\n--- config:\n%s", v.name, err, out, cfg)
			}
			t.Logf("%s", out)
		})
	}
	// And the check bites: a value celflow refuses, which the chart's schema
	// cannot know (config is celflow's), fails here.
	t.Run("a bad config value is caught", func(t *testing.T) {
		out, _, err := validateRendered(t, bin, tls, "--set", "config.server.read_timeout=5parsecs")
		if err == nil || !strings.Contains(out, "server.read_timeout") {
			t.Fatalf("celflow validate accepted read_timeout 5parsecs (err %v):\n%s", err, out)
		}
	})
}

func celflowBin(t *testing.T) string {
	bin := os.Getenv("CELFLOW_BIN")
	if bin == "" {
		t.Skip("CELFLOW_BIN not set: make build, then CELFLOW_BIN=$PWD/bin/celflow")
	}
	return bin
}

// validateRendered renders the ConfigMap with args and runs celflow validate
// --config on its celflow.yaml; it returns the output, the config and the error.
func validateRendered(t *testing.T, bin string, tls tlsFiles, args ...string) (string, string, error) {
	t.Helper()
	out := render(t, "default", append([]string{"--show-only", "templates/configmap.yaml"}, args...)...)
	objs := docs(t, out)
	if len(objs) != 1 {
		t.Fatalf("%d objects in configmap.yaml", len(objs))
	}
	cfg := objs[0]["data"].(map[string]any)["celflow.yaml"].(string)
	file := filepath.Join(t.TempDir(), "celflow.yaml")
	if err := os.WriteFile(file, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	// Only the variables the pod would have: the TLS files the Secret mounts
	// at /etc/celflow/tls live elsewhere here, and the Redis URL of the async
	// variant comes from a Secret.
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	if strings.Contains(cfg, "/etc/celflow/tls/") {
		env = append(env,
			"CELFLOW_SERVER_TLS_CERT_FILE="+tls.cert,
			"CELFLOW_SERVER_TLS_KEY_FILE="+tls.key,
			"CELFLOW_SERVER_TLS_CLIENT_CA_FILE="+tls.ca)
	}
	if strings.Contains(cfg, "type: async-broker") {
		env = append(env, "CELFLOW_ASYNC_REDIS_URL=redis://redis.llm.svc:6379/0")
	}
	stdout, stderr, err := run(t, env, nil, bin, "validate", "--config", file)
	return strings.TrimSpace(stdout + stderr), cfg, err
}

// generated are the plain manifests in docs/deploy/, one per chart template,
// rendered with the default values (release celflow) for `kubectl apply -k`-less
// users and for .ci/k8scheck's offline checks.
var generated = []string{
	"configmap.yaml", "deployment.yaml", "service.yaml", "poddisruptionbudget.yaml",
	"gateway-public.yaml", "gateway-internal.yaml", "inferencepool.yaml",
}

const generatedHeader = "# GENERATED from the Helm chart docs/deploy/helm/celflow (helm template celflow,\n" +
	"# default values) by `make deploy-manifests`: edit the chart, then regenerate.\n" +
	"# .ci/kube fails when this file and the chart disagree.\n"

// TestManifestsCurrent: docs/deploy/*.yaml are exactly what the chart renders
// (go test -run TestManifestsCurrent -update rewrites them; make deploy-manifests).
func TestManifestsCurrent(t *testing.T) {
	tool(t, "helm")
	for _, f := range generated {
		out := render(t, "default", "--show-only", "templates/"+f)
		want := generatedHeader + strings.TrimPrefix(out, "---\n")
		path := filepath.Join(repoRoot, "docs", "deploy", f)
		if *update {
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("docs/deploy/%s is not what the chart renders: run `make deploy-manifests` and commit", f)
		}
	}
}
