package k8scheck

import (
	"fmt"
	"net"
	"path"
	"slices"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// fixture is the decoded set the Deployment checks read.
type fixture struct {
	docs   []Doc
	dep    *appsv1.Deployment
	ctr    corev1.Container
	cm     *corev1.ConfigMap
	config *ServeConfig
}

func loadFixture(t *testing.T) fixture {
	t.Helper()
	docs := load(t)
	f := fixture{docs: docs}
	f.dep = Find[appsv1.Deployment](docs, "Deployment", "celflow")
	f.cm = Find[corev1.ConfigMap](docs, "ConfigMap", "celflow-config")
	if f.dep == nil || f.cm == nil {
		t.Fatal("Deployment/celflow or ConfigMap/celflow-config missing")
	}
	cs := f.dep.Spec.Template.Spec.Containers
	if len(cs) != 1 {
		t.Fatalf("Deployment has %d containers, want 1", len(cs))
	}
	f.ctr = cs[0]
	raw, ok := f.cm.Data["celflow.yaml"]
	if !ok {
		t.Fatal("ConfigMap celflow-config has no celflow.yaml key")
	}
	c, err := ParseServeConfig([]byte(raw))
	if err != nil {
		t.Fatalf("celflow.yaml in the ConfigMap: %v", err)
	}
	f.config = c
	return f
}

// PROTOCOL 14 / FIELD-NOTES 10: SIGKILL must not cut the drain.
func TestGracePeriodCoversDrain(t *testing.T) {
	f := loadFixture(t)
	delay, shutdown, err := f.config.Drain()
	if err != nil {
		t.Fatal(err)
	}
	g := f.dep.Spec.Template.Spec.TerminationGracePeriodSeconds
	if g == nil {
		t.Fatal("terminationGracePeriodSeconds unset: Kubernetes' 30s equals the default drain exactly, leaving no margin")
	}
	grace := time.Duration(*g) * time.Second
	if grace <= delay+shutdown {
		t.Fatalf("terminationGracePeriodSeconds %v must exceed drain_delay %v + shutdown_timeout %v = %v",
			grace, delay, shutdown, delay+shutdown)
	}
	// The readiness probe must take the pod out of rotation before the
	// listener closes at drain_delay, or new requests hit a closed port.
	rp := f.ctr.ReadinessProbe
	if rp == nil {
		t.Fatal("no readiness probe")
	}
	out := time.Duration(rp.PeriodSeconds*rp.FailureThreshold) * time.Second
	if out >= delay {
		t.Errorf("readiness needs %v (period x failureThreshold) to fail, not less than drain_delay %v", out, delay)
	}
}

func TestDeploymentShape(t *testing.T) {
	f := loadFixture(t)
	d, c := f.dep, f.ctr
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas unset or not 2 (stateless, two for availability): %v", ptrString(d.Spec.Replicas))
	}
	if want := []string{"serve", "--config", "/etc/celflow/config/celflow.yaml"}; !slices.Equal(c.Args, want) {
		t.Errorf("args = %q, want %q", c.Args, want)
	}
	// listen port == containerPort named http, which the probes use.
	_, port, err := net.SplitHostPort(f.config.Server.Listen)
	if err != nil {
		t.Fatalf("server.listen %q: %v", f.config.Server.Listen, err)
	}
	var http *corev1.ContainerPort
	for i := range c.Ports {
		if c.Ports[i].Name == "http" {
			http = &c.Ports[i]
		}
	}
	if http == nil || strconv.Itoa(int(http.ContainerPort)) != port {
		t.Errorf("container port http = %+v, server.listen port %s", http, port)
	}
	// PROTOCOL 1.1: readiness on /readyz, liveness on /healthz.
	probes := []struct {
		name string
		p    *corev1.Probe
		path string
	}{
		{"readiness", c.ReadinessProbe, "/readyz"},
		{"liveness", c.LivenessProbe, "/healthz"},
	}
	for _, pr := range probes {
		if pr.p == nil || pr.p.HTTPGet == nil {
			t.Errorf("%s probe: want httpGet %s", pr.name, pr.path)
			continue
		}
		if pr.p.HTTPGet.Path != pr.path || pr.p.HTTPGet.Port != intstr.FromString("http") {
			t.Errorf("%s probe: got %s on %s, want %s on port http", pr.name, pr.p.HTTPGet.Path, pr.p.HTTPGet.Port.String(), pr.path)
		}
	}
	// Non-root, read-only root filesystem, no privilege escalation.
	ps, sc := d.Spec.Template.Spec.SecurityContext, c.SecurityContext
	if ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot || ps.RunAsUser == nil || *ps.RunAsUser == 0 {
		t.Errorf("pod securityContext must run as a non-root uid: %+v", ps)
	}
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("container securityContext must be read-only, no escalation, drop ALL: %+v", sc)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources: want cpu+memory requests and a memory limit, got %+v", c.Resources)
	}
	env := map[string]bool{}
	for _, e := range c.Env {
		env[e.Name] = true
	}
	for _, k := range []string{"OTEL_SERVICE_NAME", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
		if !env[k] {
			t.Errorf("env %s missing (the OTEL_* example)", k)
		}
	}
}

// The config file the args name is the ConfigMap's celflow.yaml.
func TestConfigMounted(t *testing.T) {
	f := loadFixture(t)
	cfg := f.ctr.Args[len(f.ctr.Args)-1]
	dir, file := path.Split(cfg)
	var vol string
	for _, m := range f.ctr.VolumeMounts {
		if path.Clean(m.MountPath) == path.Clean(dir) {
			vol = m.Name
			if !m.ReadOnly {
				t.Errorf("config mount %s is writable", m.MountPath)
			}
		}
	}
	if vol == "" {
		t.Fatalf("no volume mounted at %s", dir)
	}
	for _, v := range f.dep.Spec.Template.Spec.Volumes {
		if v.Name != vol {
			continue
		}
		if v.ConfigMap == nil || v.ConfigMap.Name != f.cm.Name {
			t.Fatalf("volume %s is not ConfigMap %s", vol, f.cm.Name)
		}
		if len(v.ConfigMap.Items) == 0 {
			return // every key is a file: celflow.yaml included
		}
		for _, it := range v.ConfigMap.Items {
			if it.Key == "celflow.yaml" && it.Path == file {
				return
			}
		}
		t.Fatalf("volume %s does not project key celflow.yaml to %s", vol, file)
	}
	t.Fatalf("volume %s not defined", vol)
}

func TestServiceAndBudgetSelectThePods(t *testing.T) {
	f := loadFixture(t)
	pod := f.dep.Spec.Template.Labels
	for k, v := range f.dep.Spec.Selector.MatchLabels {
		if pod[k] != v {
			t.Errorf("Deployment selector %s=%s does not match its pod template", k, v)
		}
	}
	svc := Find[corev1.Service](f.docs, "Service", "celflow")
	if svc == nil {
		t.Fatal("Service/celflow missing")
	}
	if len(svc.Spec.Selector) == 0 {
		t.Error("Service/celflow selects nothing")
	}
	for k, v := range svc.Spec.Selector {
		if pod[k] != v {
			t.Errorf("Service selector %s=%s does not match the pods", k, v)
		}
	}
	// Port http carries the clients' requests, port metrics the scrape (the
	// separate server.metrics_listen listener); each targets its named port.
	for _, p := range svc.Spec.Ports {
		if (p.Name != "http" && p.Name != "metrics") || p.TargetPort != intstr.FromString(p.Name) {
			t.Errorf("Service port %s/%d targets %s, want port http or metrics targeting the container port of that name", p.Name, p.Port, p.TargetPort.String())
		}
	}
	if svc.Spec.Type != corev1.ServiceTypeClusterIP {
		t.Errorf("Service/celflow type %s: clients come through the public Gateway only", svc.Spec.Type)
	}
	pdb := Find[policyv1.PodDisruptionBudget](f.docs, "PodDisruptionBudget", "celflow")
	if pdb == nil || pdb.Spec.Selector == nil {
		t.Fatal("PodDisruptionBudget/celflow missing or without selector")
	}
	for k, v := range pdb.Spec.Selector.MatchLabels {
		if pod[k] != v {
			t.Errorf("PDB selector %s=%s does not match the pods", k, v)
		}
	}
}

func ptrString[T any](p *T) string {
	if p == nil {
		return "<unset>"
	}
	return fmt.Sprint(*p)
}
