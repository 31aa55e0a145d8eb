package k8scheck

import (
	"encoding/json"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// The routing-header trust boundary (FIELD-NOTES 9, docs/deploy.md): routes
// that reach the workers by EPP-Profile live on an internal Gateway only
// celflow can reach; the client-facing Gateway leads to celflow alone.

var profiles = []string{"encode", "prefill", "decode"}

func isPool(b gatewayv1.HTTPBackendRef) bool {
	return b.Kind != nil && *b.Kind == "InferencePool" &&
		b.Group != nil && *b.Group == "inference.networking.k8s.io"
}

func isService(b gatewayv1.HTTPBackendRef, name string) bool {
	return (b.Kind == nil || *b.Kind == "Service") && (b.Group == nil || *b.Group == "") &&
		string(b.Name) == name && b.Namespace == nil
}

// routeGateways lists the Gateways a route attaches to (same namespace only).
func routeGateways(t *testing.T, r *gatewayv1.HTTPRoute) []string {
	var out []string
	for _, p := range r.Spec.ParentRefs {
		if (p.Kind != nil && *p.Kind != "Gateway") || p.Namespace != nil {
			t.Errorf("HTTPRoute/%s: parentRef %+v is not a same-namespace Gateway", r.Name, p)
			continue
		}
		out = append(out, string(p.Name))
	}
	return out
}

// boundary classifies the Gateways: public = where celflow's route attaches,
// internal = where the InferencePool routes attach.
type boundary struct {
	public, internal     string
	publicRs, internalRs []*gatewayv1.HTTPRoute
	gateways             map[string]*gatewayv1.Gateway
}

func classify(t *testing.T, docs []Doc) boundary {
	t.Helper()
	b := boundary{gateways: map[string]*gatewayv1.Gateway{}}
	for _, g := range All[gatewayv1.Gateway](docs) {
		b.gateways[g.Name] = g
	}
	pub, in := map[string]bool{}, map[string]bool{}
	for _, r := range All[gatewayv1.HTTPRoute](docs) {
		gws := routeGateways(t, r)
		toPool, toCelflow := false, false
		for _, rule := range r.Spec.Rules {
			for _, br := range rule.BackendRefs {
				toPool = toPool || isPool(br)
				toCelflow = toCelflow || isService(br, "celflow")
			}
		}
		switch {
		case toPool && toCelflow:
			t.Errorf("HTTPRoute/%s sends traffic to both celflow and the InferencePool", r.Name)
		case toPool:
			b.internalRs = append(b.internalRs, r)
			for _, g := range gws {
				in[g] = true
			}
		case toCelflow:
			b.publicRs = append(b.publicRs, r)
			for _, g := range gws {
				pub[g] = true
			}
		default:
			t.Errorf("HTTPRoute/%s reaches neither celflow nor the InferencePool", r.Name)
		}
	}
	for g := range pub {
		if in[g] {
			t.Errorf("Gateway/%s carries both the client route and the worker route: a client setting EPP-Profile would bypass celflow", g)
		}
	}
	if len(pub) != 1 || len(in) != 1 {
		t.Fatalf("want one client-facing and one internal Gateway, got public %v internal %v", pub, in)
	}
	for g := range pub {
		b.public = g
	}
	for g := range in {
		b.internal = g
	}
	for _, g := range []string{b.public, b.internal} {
		if b.gateways[g] == nil {
			t.Fatalf("Gateway/%s is referenced but not defined", g)
		}
	}
	return b
}

func TestTrustBoundaryRoutes(t *testing.T) {
	docs := load(t)
	b := classify(t, docs)

	// Client-facing: celflow only, and the header stripped at the edge.
	for _, r := range b.publicRs {
		for i, rule := range r.Spec.Rules {
			for _, br := range rule.BackendRefs {
				if !isService(br, "celflow") {
					t.Errorf("HTTPRoute/%s rule %d: client-facing backend %s is not Service/celflow", r.Name, i, br.Name)
				}
			}
			for _, h := range ownedHeaders {
				if !removesHeader(rule.Filters, h) {
					t.Errorf("HTTPRoute/%s rule %d: does not remove a client %s header", r.Name, i, h)
				}
			}
		}
	}

	// Worker-facing: every match requires an EPP-Profile that celflow sets.
	covered := map[string]bool{}
	for _, r := range b.internalRs {
		for i, rule := range r.Spec.Rules {
			if len(rule.Matches) == 0 {
				t.Errorf("HTTPRoute/%s rule %d matches every request; it must require EPP-Profile", r.Name, i)
			}
			for j, m := range rule.Matches {
				v, ok := profileMatch(m)
				if !ok {
					t.Errorf("HTTPRoute/%s rule %d match %d does not require an exact EPP-Profile of %v", r.Name, i, j, profiles)
				}
				covered[v] = true
			}
		}
	}
	for _, p := range profiles {
		if !covered[p] {
			t.Errorf("no internal route for EPP-Profile %s", p)
		}
	}
}

// ownedHeaders are the headers naming a phase or an endpoint that the
// public edge removes (celflow's built-in list, connectors/upstream.OwnedHeaders,
// docs/threat-model.md; this module does not import celflow's).
var ownedHeaders = []string{"EPP-Profile", "Prefer",
	"x-gateway-destination-endpoint", "x-gateway-destination-endpoint-subset", "x-gateway-destination-endpoint-served",
	"x-prefiller-host-port", "x-encoder-hosts-ports",
	"x-llm-d-inference-objective", "x-llm-d-inference-fairness-id", "x-celflow-pool",
	"x-gateway-inference-objective", "x-gateway-inference-fairness-id"}

func removesHeader(fs []gatewayv1.HTTPRouteFilter, name string) bool {
	for _, f := range fs {
		if f.Type == gatewayv1.HTTPRouteFilterRequestHeaderModifier && f.RequestHeaderModifier != nil {
			for _, h := range f.RequestHeaderModifier.Remove {
				if strings.EqualFold(h, name) {
					return true
				}
			}
		}
	}
	return false
}

func profileMatch(m gatewayv1.HTTPRouteMatch) (string, bool) {
	for _, h := range m.Headers {
		exact := h.Type == nil || *h.Type == gatewayv1.HeaderMatchExact
		if strings.EqualFold(string(h.Name), "EPP-Profile") && exact {
			for _, p := range profiles {
				if h.Value == p {
					return p, true
				}
			}
		}
	}
	return "", false
}

func TestInternalGatewayIsUnreachableFromOutside(t *testing.T) {
	docs := load(t)
	b := classify(t, docs)
	for _, name := range []string{b.public, b.internal} {
		for _, l := range b.gateways[name].Spec.Listeners {
			ar := l.AllowedRoutes
			if ar == nil || ar.Namespaces == nil || ar.Namespaces.From == nil || *ar.Namespaces.From != gatewayv1.NamespacesFromSame {
				t.Errorf("Gateway/%s listener %s: allowedRoutes must be from Same namespace, so no other team attaches a route", name, l.Name)
			}
		}
	}
	g := b.gateways[b.internal]
	if g.Spec.GatewayClassName == "istio" {
		inf := g.Spec.Infrastructure
		if inf == nil || inf.Annotations["networking.istio.io/service-type"] != "ClusterIP" {
			t.Errorf("Gateway/%s: Istio would give it a LoadBalancer Service; set infrastructure.annotations networking.istio.io/service-type: ClusterIP", g.Name)
		}
	}
	// The NetworkPolicy admits celflow's pods, nothing else.
	dep := loadFixture(t).dep
	var np *networkingv1.NetworkPolicy
	for _, p := range All[networkingv1.NetworkPolicy](docs) {
		if p.Spec.PodSelector.MatchLabels["gateway.networking.k8s.io/gateway-name"] == b.internal {
			np = p
		}
	}
	if np == nil {
		t.Fatalf("no NetworkPolicy selects the pods of Gateway/%s", b.internal)
	}
	if len(np.Spec.Ingress) == 0 {
		t.Fatalf("NetworkPolicy/%s has no ingress rule: combined with policyTypes it would block celflow too", np.Name)
	}
	for i, rule := range np.Spec.Ingress {
		if len(rule.From) == 0 {
			t.Errorf("NetworkPolicy/%s ingress %d admits every source", np.Name, i)
		}
		for _, peer := range rule.From {
			if peer.IPBlock != nil || peer.NamespaceSelector != nil || peer.PodSelector == nil || len(peer.PodSelector.MatchLabels) == 0 {
				t.Errorf("NetworkPolicy/%s ingress %d: peer %+v is wider than celflow's pods", np.Name, i, peer)
				continue
			}
			for k, v := range peer.PodSelector.MatchLabels {
				if dep.Spec.Template.Labels[k] != v {
					t.Errorf("NetworkPolicy/%s ingress %d: %s=%s does not select celflow's pods", np.Name, i, k, v)
				}
			}
		}
	}
}

// celflow's config points where the manifests say: the internal Gateway for
// worker legs, a defined Service for render, the defined InferencePool.
func TestConfigTargetsMatchManifests(t *testing.T) {
	f := loadFixture(t)
	b := classify(t, f.docs)
	if f.config.Upstream.Mode != "gateway" {
		t.Fatalf("upstream.mode %q, want gateway", f.config.Upstream.Mode)
	}
	u, err := url.Parse(f.config.Upstream.Gateway)
	if err != nil || u.Hostname() == "" {
		t.Fatalf("upstream.gateway %q: %v", f.config.Upstream.Gateway, err)
	}
	if !strings.HasPrefix(u.Hostname(), b.internal) {
		t.Errorf("upstream.gateway host %q is not the internal Gateway %s's Service", u.Hostname(), b.internal)
	}
	if strings.HasPrefix(u.Hostname(), b.public) {
		t.Errorf("upstream.gateway points at the client-facing Gateway %s", b.public)
	}

	var wf struct {
		Nodes []struct {
			Type   string          `json:"type"`
			Params json.RawMessage `json:"params"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal(f.config.Workflow, &wf); err != nil {
		t.Fatalf("workflow: %v", err)
	}
	renders := 0
	for _, n := range wf.Nodes {
		if n.Type != "render" {
			continue
		}
		renders++
		var p struct {
			Address string `json:"address"`
		}
		if len(n.Params) > 0 {
			if err := json.Unmarshal(n.Params, &p); err != nil {
				t.Fatal(err)
			}
		}
		if p.Address == "" {
			p.Address = f.config.Upstream.Render // upstream.render serves every render node without one
		}
		ru, err := url.Parse(p.Address)
		if err != nil {
			t.Fatalf("render address %q: %v", p.Address, err)
		}
		svc := Find[corev1.Service](f.docs, "Service", ru.Hostname())
		if svc == nil {
			t.Errorf("render address %s: no Service %s in the manifests", p.Address, ru.Hostname())
			continue
		}
		port := ru.Port()
		if port == "" {
			port = "80"
		}
		found := false
		for _, sp := range svc.Spec.Ports {
			found = found || strconv.Itoa(int(sp.Port)) == port
		}
		if !found {
			t.Errorf("render address %s: Service %s has no port %s", p.Address, svc.Name, port)
		}
	}
	if renders == 0 {
		t.Error("the workflow has no render node")
	}
	for _, r := range b.internalRs {
		for _, rule := range r.Spec.Rules {
			for _, br := range rule.BackendRefs {
				if isPool(br) && Find[InferencePool](f.docs, "InferencePool", string(br.Name)) == nil {
					t.Errorf("HTTPRoute/%s references InferencePool/%s, not defined", r.Name, br.Name)
				}
			}
		}
	}
}

// A stream may last as long as the route's request timeout; the drain must
// let one that started just before SIGTERM finish (FIELD-NOTES 10).
func TestRouteTimeoutsWithinDrain(t *testing.T) {
	f := loadFixture(t)
	_, shutdown, err := f.config.Drain()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range All[gatewayv1.HTTPRoute](f.docs) {
		for i, rule := range r.Spec.Rules {
			if rule.Timeouts == nil || rule.Timeouts.Request == nil {
				t.Errorf("HTTPRoute/%s rule %d: no timeouts.request; implementations default to as little as 15s, cutting streams", r.Name, i)
				continue
			}
			d, err := time.ParseDuration(string(*rule.Timeouts.Request))
			if err != nil {
				t.Errorf("HTTPRoute/%s rule %d: timeouts.request: %v", r.Name, i, err)
				continue
			}
			if d == 0 || d > shutdown {
				t.Errorf("HTTPRoute/%s rule %d: request timeout %v (the longest stream) must be set and at most shutdown_timeout %v", r.Name, i, d, shutdown)
			}
		}
	}
}
