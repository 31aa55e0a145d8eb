package kube

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// crds are the custom resource definitions the chart's objects need. Gateway
// and HTTPRoute come from generated (KUBE_BIN/gateway-api-v1.6.3-crds.yaml:
// controller-gen run by .ci/kube.sh on the Go types of sigs.k8s.io/gateway-api
// v1.6.3), so the server checks the routes against the real schemas and CEL
// rules. The others are MINIMAL STRUCTURAL CRDs written here: the same group,
// version, kind and scope as the Inference Extension's InferencePool (its Go
// module is not on the module proxy) and the prometheus-operator's
// ServiceMonitor and PrometheusRule, with the spec left open
// (x-kubernetes-preserve-unknown-fields); nothing is copied from those
// projects. The server checks that these kinds are served and accepts the
// objects; their fields are checked strictly against Go types offline by
// .ci/k8scheck (InferencePool), or not at all (the prometheus-operator kinds).
func crds(t *testing.T, generated string) string {
	t.Helper()
	type crd struct{ group, kind, plural string }
	var b strings.Builder
	minimal := []crd{
		{"inference.networking.k8s.io", "InferencePool", "inferencepools"},
		{"monitoring.coreos.com", "ServiceMonitor", "servicemonitors"},
		{"monitoring.coreos.com", "PrometheusRule", "prometheusrules"},
	}
	if data, err := os.ReadFile(generated); err == nil {
		// *.k8s.io groups are protected; "unapproved, ..." is the documented
		// way to serve one without an approved KEP link.
		const marker = "\n    controller-gen.kubebuilder.io/version:"
		text := string(data)
		if strings.Count(text, marker) != 2 {
			t.Fatalf("%s: want 2 generated CRDs (Gateway, HTTPRoute)", generated)
		}
		b.WriteString(strings.ReplaceAll(text, marker,
			"\n    api-approved.kubernetes.io: \"unapproved, generated from sigs.k8s.io/gateway-api v1.6.3 for celflow CI\""+marker))
		b.WriteString("\n")
	} else {
		if os.Getenv("CI") != "" {
			t.Fatalf("%v (bash .ci/kube.sh generates it)", err)
		}
		t.Logf("%v: Gateway and HTTPRoute as minimal CRDs too (bash .ci/kube.sh gateway-crds generates the real ones)", err)
		minimal = append(minimal, crd{"gateway.networking.k8s.io", "Gateway", "gateways"},
			crd{"gateway.networking.k8s.io", "HTTPRoute", "httproutes"})
	}
	for _, c := range minimal {
		fmt.Fprintf(&b, `---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: %[3]s.%[1]s
  annotations:
    celflow.dev/note: minimal structural CRD for CI, not the upstream definition
    # *.k8s.io groups are protected; "unapproved, ..." is the documented way to
    # serve one without an approved KEP link.
    api-approved.kubernetes.io: "unapproved, celflow CI stand-in"
spec:
  group: %[1]s
  scope: Namespaced
  names: {kind: %[2]s, plural: %[3]s, singular: %[4]s, listKind: %[2]sList}
  versions:
    - name: v1
      served: true
      storage: true
      subresources: {status: {}}
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
            status: {type: object, x-kubernetes-preserve-unknown-fields: true}
`, c.group, c.kind, c.plural, strings.ToLower(c.kind))
	}
	return b.String()
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// start runs a long-lived process with its output in a log file; on cleanup it
// is stopped (SIGTERM, then SIGKILL) and, if the test failed, its log's tail is shown.
func start(t *testing.T, logName, bin string, args ...string) <-chan struct{} {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), logName)
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", bin, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		f.Close()
		if t.Failed() {
			data, _ := os.ReadFile(logPath)
			if len(data) > 4000 {
				data = data[len(data)-4000:]
			}
			t.Logf("--- %s (tail):\n%s", logName, data)
		}
	})
	return done
}

// TestAPIServer starts etcd and kube-apiserver on 127.0.0.1, installs the CRDs,
// server-side dry-runs every variant's rendering, then installs the chart for
// real with helm and checks the config checksum on the pod template, and that
// an upgrade changing a config value changes it (the pods roll).
func TestAPIServer(t *testing.T) {
	apiserver, kubectl, helm := tool(t, "kube-apiserver"), tool(t, "kubectl"), tool(t, "helm")
	etcd, err := exec.LookPath("etcd")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("etcd not on PATH (Debian: apt-get install etcd-server)")
		}
		t.Skip("etcd not on PATH (Debian: apt-get install etcd-server)")
	}
	began := time.Now()
	p := newPKI(t)
	dir := t.TempDir()

	etcdPort, peerPort := freePort(t), freePort(t)
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	start(t, "etcd.log", etcd, "--name", "ci", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "ci="+peerURL, "--log-level", "warn")

	port := freePort(t)
	exited := start(t, "kube-apiserver.log", apiserver,
		"--etcd-servers", etcdURL,
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
		"--secure-port", strconv.Itoa(port),
		"--cert-dir", filepath.Join(dir, "apiserver-certs"),
		"--tls-cert-file", p.cert, "--tls-private-key-file", p.key,
		"--client-ca-file", p.ca, // client certificates: the admin in system:masters
		"--authorization-mode", "RBAC",
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", p.saPub,
		"--service-account-signing-key-file", p.saKey,
		"--service-cluster-ip-range", "10.96.0.0/16",
		// No kubernetes Service endpoints for a loopback address (it would be refused).
		"--endpoint-reconciler-type", "none",
		"--enable-priority-and-fairness=false",
		"--profiling=false",
		"--v", "1")

	kubeconfig := filepath.Join(dir, "kubeconfig")
	b64 := func(path string) string {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return base64.StdEncoding.EncodeToString(data)
	}
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: ci, cluster: {server: "https://127.0.0.1:%d", certificate-authority-data: %s}}]
users: [{name: admin, user: {client-certificate-data: %s, client-key-data: %s}}]
contexts: [{name: ci, context: {cluster: ci, user: admin}}]
current-context: ci
`, port, b64(p.ca), b64(p.client), b64(p.ckey))
	if err := os.WriteFile(kubeconfig, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	env := append(helmEnv(t), "KUBECONFIG="+kubeconfig)
	k := func(stdin []byte, args ...string) string {
		t.Helper()
		out, errOut, err := run(t, env, stdin, kubectl, args...)
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
		}
		return out
	}

	deadline := time.Now().Add(3 * time.Minute)
	for {
		out, errOut, err := run(t, env, nil, kubectl, "get", "--raw", "/readyz")
		if err == nil && strings.TrimSpace(out) == "ok" {
			break
		}
		select {
		case <-exited:
			t.Fatal("kube-apiserver exited (its log follows)")
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("kube-apiserver not ready after 3 minutes: %v %s", err, errOut)
		}
		time.Sleep(500 * time.Millisecond)
	}
	var ver struct {
		Server struct {
			GitVersion string `json:"gitVersion"`
		} `json:"serverVersion"`
	}
	if err := json.Unmarshal([]byte(k(nil, "version", "-o", "json")), &ver); err != nil {
		t.Fatal(err)
	}
	t.Logf("kube-apiserver %s ready in %v", ver.Server.GitVersion, time.Since(began).Round(time.Millisecond))

	k([]byte(crds(t, filepath.Join(os.Getenv("KUBE_BIN"), "gateway-api-v1.6.3-crds.yaml"))), "apply", "--server-side", "-f", "-")
	k(nil, "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
	// The discovery cache must see the new kinds before apply maps them.
	time.Sleep(time.Second)

	for _, v := range variants() {
		t.Run("dry-run/"+v.name, func(t *testing.T) {
			ns := "v-" + v.name
			k(nil, "create", "namespace", ns)
			manifest := render(t, ns, v.args...)
			out := k([]byte(manifest), "apply", "--dry-run=server", "-n", ns, "-f", "-")
			n := strings.Count(strings.TrimSpace(out), "\n") + 1
			want := len(docs(t, manifest))
			if n != want {
				t.Errorf("server-side dry-run reported %d objects, the rendering has %d:\n%s", n, want, out)
			}
			t.Logf("%d objects accepted (server dry-run)", n)
		})
	}

	// The dry-run bites: a value the schema passes through (resources are
	// Kubernetes' to check) is refused by the server.
	t.Run("dry-run refuses a bad quantity", func(t *testing.T) {
		manifest := render(t, "v-default", "--set", "resources.requests.cpu=lots")
		out, errOut, err := run(t, env, []byte(manifest), kubectl, "apply", "--dry-run=server", "-n", "v-default", "-f", "-")
		if err == nil || !strings.Contains(errOut, "quantities must match") {
			t.Errorf("server dry-run accepted cpu: lots (err %v):\n%s%s", err, out, errOut)
		}
	})

	// With the generated Gateway API CRDs the server applies their rules too:
	// a path the schema's "^/" lets through is refused by HTTPRoute's own.
	t.Run("dry-run refuses a bad route path", func(t *testing.T) {
		if !strings.Contains(k(nil, "get", "crd", "httproutes.gateway.networking.k8s.io", "-o", "jsonpath={.metadata.annotations}"), "controller-gen") {
			t.Skip("minimal HTTPRoute CRD: no path rules")
		}
		manifest := render(t, "v-default", "--set", "publicGateway.extraPaths={/v1//models}")
		out, errOut, err := run(t, env, []byte(manifest), kubectl, "apply", "--dry-run=server", "-n", "v-default", "-f", "-")
		if err == nil || !strings.Contains(errOut, "HTTPRoute") {
			t.Errorf("server dry-run accepted the path /v1//models (err %v):\n%s%s", err, out, errOut)
		}
		t.Logf("refused: %.300s", strings.TrimSpace(errOut))
	})

	t.Run("install refuses a bad value", func(t *testing.T) {
		for _, c := range []struct{ set, want string }{
			{"ports.http=70000", "/ports/http"},
			{"tls.enabled=true", "/tls/secretName"},
		} {
			out, errOut, err := run(t, env, nil, helm, "install", "bad", chartDir(), "-n", "default", "--set", c.set)
			if err == nil || !strings.Contains(errOut, c.want) {
				t.Errorf("helm install --set %s: err %v, want a refusal naming %s:\n%s%s", c.set, err, c.want, out, errOut)
			}
		}
		if out := k(nil, "get", "secrets", "-n", "default", "-l", "owner=helm", "-o", "name"); strings.TrimSpace(out) != "" {
			t.Errorf("a refused install left a release behind: %s", out)
		}
	})

	t.Run("install and upgrade roll on a config change", func(t *testing.T) {
		ns := "live"
		h := func(args ...string) {
			t.Helper()
			out, errOut, err := run(t, env, nil, helm, args...)
			if err != nil {
				t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
			}
		}
		type readBack struct{ checksum, config string }
		get := func() readBack {
			t.Helper()
			var dep struct {
				Spec struct {
					Template struct {
						Metadata struct {
							Annotations map[string]string `json:"annotations"`
						} `json:"metadata"`
					} `json:"template"`
				} `json:"spec"`
			}
			if err := json.Unmarshal([]byte(k(nil, "get", "deployment", release, "-n", ns, "-o", "json")), &dep); err != nil {
				t.Fatal(err)
			}
			var cm struct {
				Data map[string]string `json:"data"`
			}
			if err := json.Unmarshal([]byte(k(nil, "get", "configmap", release+"-config", "-n", ns, "-o", "json")), &cm); err != nil {
				t.Fatal(err)
			}
			return readBack{dep.Spec.Template.Metadata.Annotations["checksum/config"], cm.Data["celflow.yaml"]}
		}
		h("install", release, chartDir(), "-n", ns, "--create-namespace")
		first := get()
		if len(first.checksum) != 64 {
			t.Fatalf("pod template checksum/config = %q, want a sha256", first.checksum)
		}
		h("upgrade", release, chartDir(), "-n", ns)
		if again := get(); again.checksum != first.checksum {
			t.Errorf("an upgrade with the same values changed checksum/config (%s -> %s): pods would roll for nothing", first.checksum, again.checksum)
		}
		h("upgrade", release, chartDir(), "-n", ns, "--set", "config.server.write_timeout=90s")
		second := get()
		if !strings.Contains(second.config, "write_timeout: 90s") {
			t.Errorf("the ConfigMap on the server lacks the new value:\n%s", second.config)
		}
		if second.checksum == first.checksum || len(second.checksum) != 64 {
			t.Errorf("checksum/config %q after a config change, was %q: the pods would not roll", second.checksum, first.checksum)
		}
		t.Logf("checksum/config %s… -> %s… after write_timeout 120s -> 90s", first.checksum[:12], second.checksum[:12])
	})
	t.Logf("API server checks took %v", time.Since(began).Round(time.Millisecond))
}
