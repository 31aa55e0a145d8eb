package k8scheck

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// chartDir is the Helm chart the files under docs/deploy are rendered from.
const chartDir = "../../docs/deploy/helm/celflow"

// TestChartVariantsDecodeStrictly renders the chart's CI variants (the same
// as .ci/kube's: gateway mode with HPA and ServiceMonitor, direct mode, TLS
// with async) with the pinned helm and decodes every object strictly, as
// docs/deploy/*.yaml are: .ci/kube's API server sees the Gateway API and
// Inference Extension kinds through minimal CRDs, so their fields are checked
// here, against the Go types. prometheus-operator kinds have no Go types here
// and are skipped. Needs KUBE_BIN (bash .ci/kube.sh helm).
func TestChartVariantsDecodeStrictly(t *testing.T) {
	dir := os.Getenv("KUBE_BIN")
	if dir == "" {
		t.Skip("KUBE_BIN not set: KUBE_BIN=$(bash .ci/kube.sh helm) renders the chart's variants")
	}
	ci := filepath.Join(chartDir, "ci")
	variants := map[string][]string{
		"gateway": {"-f", filepath.Join(ci, "gateway-values.yaml")},
		"direct":  {"-f", filepath.Join(ci, "direct-values.yaml")},
		"tls-async": {"-f", filepath.Join(ci, "tls-async-values.yaml"),
			"--set-file", "workflow=" + filepath.Join("..", "..", "workflows", "epd-async.yaml")},
	}
	skip := map[string]bool{
		"monitoring.coreos.com/v1/ServiceMonitor": true,
		"monitoring.coreos.com/v1/PrometheusRule": true,
	}
	for name, args := range variants {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(filepath.Join(dir, "helm"), append([]string{"template", "celflow", chartDir}, args...)...)
			home := t.TempDir()
			cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("helm template: %v\n%s", err, stderr.String())
			}
			n := 0
			for _, p := range SplitDocuments(out) {
				d, err := DecodeStrict(name+".yaml", p)
				if err != nil {
					if skip[d.APIVersion+"/"+d.Kind] {
						continue
					}
					t.Error(err)
					continue
				}
				n++
				if d.Namespace != "" {
					t.Errorf("%s: sets metadata.namespace", d.Where())
				}
			}
			if n == 0 {
				t.Fatal("no objects decoded")
			}
			t.Logf("%d objects decode strictly", n)
		})
	}
}
