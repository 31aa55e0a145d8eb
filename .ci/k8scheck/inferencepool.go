package k8scheck

import (
	"fmt"
	"regexp"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// InferencePool mirrors inference.networking.k8s.io/v1 InferencePool (Gateway
// API Inference Extension v1). The extension's Go module is not served by the
// Go proxy this project can reach, so the spec is kept here: field names and
// JSON tags follow the published v1 API, and Validate applies the CRD's
// required-field, enum and range rules that matter for a manifest. Status is
// written by controllers, never by these manifests, and is left out: a status
// block in a manifest is an unknown field.
type InferencePool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              InferencePoolSpec `json:"spec"`
}

// InferencePoolSpec is the desired state of the pool.
type InferencePoolSpec struct {
	Selector          PoolLabelSelector `json:"selector"`
	TargetPorts       []PoolPort        `json:"targetPorts"`
	EndpointPickerRef EndpointPickerRef `json:"endpointPickerRef"`
}

// PoolLabelSelector is the Service-compatible selector (matchLabels only).
type PoolLabelSelector struct {
	MatchLabels map[string]string `json:"matchLabels"`
}

// PoolPort is a port of the selected model server pods.
type PoolPort struct {
	Number int32 `json:"number"`
}

// EndpointPickerRef references the endpoint picker (EPP) extension.
type EndpointPickerRef struct {
	Group       *string   `json:"group,omitempty"`
	Kind        string    `json:"kind,omitempty"` // default Service
	Name        string    `json:"name"`
	Port        *PoolPort `json:"port,omitempty"`
	FailureMode string    `json:"failureMode,omitempty"` // FailOpen | FailClose (default)
}

var (
	dnsLabel   = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	labelValue = regexp.MustCompile(`^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`)
)

// Validate returns the CRD rules this manifest breaks (none when valid).
func (p *InferencePool) Validate() []string {
	var out []string
	add := func(f string, a ...any) { out = append(out, fmt.Sprintf(f, a...)) }
	if !dnsLabel.MatchString(p.Name) {
		add("metadata.name %q is not a DNS label", p.Name)
	}
	s := p.Spec
	if len(s.Selector.MatchLabels) == 0 {
		add("spec.selector.matchLabels is required")
	}
	if len(s.Selector.MatchLabels) > 64 {
		add("spec.selector.matchLabels: at most 64 labels")
	}
	for k, v := range s.Selector.MatchLabels {
		if k == "" || len(v) > 63 || !labelValue.MatchString(v) {
			add("spec.selector.matchLabels[%q]: invalid label value %q", k, v)
		}
	}
	if len(s.TargetPorts) != 1 {
		add("spec.targetPorts: exactly one port, got %d", len(s.TargetPorts))
	}
	for i, tp := range s.TargetPorts {
		if tp.Number < 1 || tp.Number > 65535 {
			add("spec.targetPorts[%d].number %d out of 1-65535", i, tp.Number)
		}
	}
	e := s.EndpointPickerRef
	if e.Name == "" {
		add("spec.endpointPickerRef.name is required")
	}
	if e.Kind != "" && e.Kind != "Service" && e.Group == nil {
		add("spec.endpointPickerRef: kind %q needs a group", e.Kind)
	}
	if e.Port != nil && (e.Port.Number < 1 || e.Port.Number > 65535) {
		add("spec.endpointPickerRef.port.number %d out of 1-65535", e.Port.Number)
	}
	if (e.Kind == "" || e.Kind == "Service") && e.Port == nil {
		// The API lets implementations infer 9002; the manifests say it, so
		// the EPP Service's port is reviewed rather than assumed.
		add("spec.endpointPickerRef.port is required for a Service here (no implicit 9002)")
	}
	switch e.FailureMode {
	case "", "FailOpen", "FailClose":
	default:
		add("spec.endpointPickerRef.failureMode %q: want FailOpen or FailClose", e.FailureMode)
	}
	return out
}
