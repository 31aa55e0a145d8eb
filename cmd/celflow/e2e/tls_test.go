//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/celflow/celflow/internal/tlsfiles/tlstest"
)

var listeningTLSRe = regexp.MustCompile(`^out: listening on (https://127\.0\.0\.1:\d+)$`)

// startTLSSim starts celflow-sim (or `celflow-sim gateway`) serving TLS.
func startTLSSim(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	p := startSimProc(t, name, args...)
	if _, err := p.waitLine(listeningTLSRe, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	return p
}

func simURL(t *testing.T, p *proc) string {
	t.Helper()
	u, err := p.waitLine(listeningTLSRe, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// downTLS is an https URL nothing listens on.
func downTLS(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return "https://" + ln.Addr().String()
}

// startTLSCelflow runs `celflow serve` with server.tls and upstream.tls on
// the files in dir and returns its https base URL.
func startTLSCelflow(t *testing.T, name, dir, upstream string) (*proc, string) {
	t.Helper()
	return startTLSCelflowWith(t, name, dir, upstream, `{cert_file: celflow.crt, key_file: celflow.key, min_version: "1.2"}`)
}

// startTLSCelflowWith is startTLSCelflow with its server.tls section.
func startTLSCelflowWith(t *testing.T, name, dir, upstream, serverTLS string) (*proc, string) {
	t.Helper()
	writeFile(t, filepath.Join(dir, "wf.yaml"), []byte("apiVersion: celflow/v1\nkind: Workflow\nmetadata: {name: tls}\n"+
		"nodes:\n  - id: decode\n    type: decode\n"))
	cfg := fmt.Sprintf(`server:
  listen: "127.0.0.1:0"
  drain_delay: 0s
  shutdown_timeout: 5s
  tls: %s
upstream:
%s  tls: {ca_file: ca.pem}
telemetry: {log_level: info, log_format: json}
workflow: ./wf.yaml
`, serverTLS, upstream)
	path := filepath.Join(dir, name+".yaml")
	writeFile(t, path, []byte(cfg))
	p := startProc(t, name, "serve", "--config", path)
	addr, err := p.waitLine(servingRe, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return p, "https://" + addr
}

// openaiTLS is an openai-go client trusting ca, without retries.
func openaiTLS(base string, ca *tlstest.CA) *openai.Client {
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil, ForceAttemptHTTP2: true,
		TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	c := openai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey("e2e-key"), option.WithMaxRetries(0),
		option.WithHTTPClient(hc))
	return &c
}

func modelIDs(t *testing.T, c *openai.Client) ([]string, error) {
	t.Helper()
	page, err := c.Models.List(context.Background())
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, m := range page.Data {
		if m.Object != "model" || m.OwnedBy == "" {
			t.Errorf("model entry %+v", m)
		}
		ids = append(ids, m.ID)
	}
	sort.Strings(ids)
	return ids, nil
}

// TLS on every hop with real processes: the OpenAI SDK → celflow (TLS,
// HTTP/2) → https celflow-sim workers, directly and through an https
// `celflow-sim gateway`. GET /v1/models lists the workers' models with a
// worker down in both modes, and is 503 models_unavailable once all are.
func TestTLSEveryHopAndModels(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "e2e CA")
	writeFile(t, filepath.Join(dir, "ca.pem"), ca.PEM)
	ca.Server(t, "127.0.0.1").Write(t, dir, "celflow")
	sim := ca.Server(t, "127.0.0.1").Write(t, dir, "sim")

	worker := func(name, model string) *proc {
		return startTLSSim(t, name, "--listen", "127.0.0.1:0", "--roles", "decode", "--name", name, "--model", model,
			"--tls-cert", sim.Cert, "--tls-key", sim.Key)
	}
	w1, w2 := worker("w1", "alpha"), worker("w2", "beta")
	u1, u2, down := simURL(t, w1), simURL(t, w2), downTLS(t)

	// Direct mode; the down endpoint sits in the prefill pool, which this
	// decode-only workflow never sends legs to but /v1/models asks.
	direct, directURL := startTLSCelflow(t, "celflow-direct", dir,
		fmt.Sprintf("  pools: {decode: [%q, %q], prefill: [%q]}\n", u1, u2, down))
	c := openaiTLS(directURL, ca)
	ids, err := modelIDs(t, c)
	if err != nil || strings.Join(ids, ",") != "alpha,beta" {
		t.Fatalf("direct /v1/models = %v, %v\n%s", ids, err, direct.tail(20))
	}
	comp, err := c.Completions.New(context.Background(), openai.CompletionNewParams{
		Model: "alpha", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("hi")}, MaxTokens: openai.Int(2)})
	if err != nil || len(comp.Choices) != 1 {
		t.Fatalf("completion over TLS: %v\n%s", err, direct.tail(20))
	}

	// Gateway mode: an https gateway whose first decode member is down.
	gw := startTLSSim(t, "gateway", "gateway", "--listen", "127.0.0.1:0", "--decode", down+","+u2,
		"--tls-cert", sim.Cert, "--tls-key", sim.Key, "--upstream-ca", filepath.Join(dir, "ca.pem"))
	viaGW, gwURL := startTLSCelflow(t, "celflow-gateway", dir, fmt.Sprintf("  gateway: %q\n", simURL(t, gw)))
	ids, err = modelIDs(t, openaiTLS(gwURL, ca))
	if err != nil || strings.Join(ids, ",") != "beta" {
		t.Fatalf("gateway /v1/models = %v, %v\n%s", ids, err, viaGW.tail(20))
	}

	// Every worker down: a reload drops the cached list, and the SDK sees
	// OpenAI's error with 503.
	w1.stop(5 * time.Second)
	w2.stop(5 * time.Second)
	direct.signal(syscall.SIGHUP)
	if _, err := direct.waitLine(regexp.MustCompile(`"msg":"config reloaded"`), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	_, err = modelIDs(t, c)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 503 || apiErr.Code != "models_unavailable" {
		t.Fatalf("all workers down: %v", err)
	}
}

// Rotation under load with the built binary: 4 OpenAI SDK clients × 300
// completions on kept-alive connections (two HTTP/1.1, two HTTP/2) to an
// https worker, while celflow's certificate Secret is swapped twice and
// picked up by the file poll. No request fails, each swap is one
// `TLS material reloaded` line and a new connection sees the new serial.
func TestTLSRotationUnderLoadE2E(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "e2e CA")
	writeFile(t, filepath.Join(dir, "ca.pem"), ca.PEM)
	sim := ca.Server(t, "127.0.0.1").Write(t, dir, "sim")
	sec := tlstest.NewSecret(t, dir, ca.Server(t, "127.0.0.1"))
	w := startTLSSim(t, "w", "--listen", "127.0.0.1:0", "--roles", "decode", "--tls-cert", sim.Cert, "--tls-key", sim.Key)
	cel, base := startTLSCelflowWith(t, "celflow", dir, fmt.Sprintf("  pools: {decode: [%q]}\n", simURL(t, w)),
		`{cert_file: tls.crt, key_file: tls.key, reload_interval: 20ms}`)

	newConnSerial := func() string {
		t.Helper()
		tr := &http.Transport{Proxy: nil, TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(base + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.TLS.PeerCertificates[0].SerialNumber.String()
	}
	reloaded := regexp.MustCompile(`"msg":"TLS material reloaded`)

	const clients, perClient = 4, 300
	var done atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, clients*perClient)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil, ForceAttemptHTTP2: i%2 == 1,
				TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
			defer hc.CloseIdleConnections()
			c := openai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey("k"), option.WithMaxRetries(0), option.WithHTTPClient(hc))
			for j := range perClient {
				_, err := c.Completions.New(context.Background(), openai.CompletionNewParams{Model: "m",
					Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("hi")}, MaxTokens: openai.Int(1)})
				if err != nil {
					errs <- fmt.Errorf("client %d request %d: %w", i, j, err)
				}
				done.Add(1)
			}
		}()
	}
	for rot := 1; rot <= 2; rot++ {
		for deadline := time.Now().Add(60 * time.Second); done.Load() < int32(rot*clients*perClient/3); {
			if time.Now().After(deadline) {
				t.Fatal("the load stalled")
			}
			time.Sleep(5 * time.Millisecond)
		}
		next := ca.Server(t, "127.0.0.1")
		sec.Update(t, next)
		want := next.Cert.SerialNumber.String()
		for deadline := time.Now().Add(10 * time.Second); newConnSerial() != want; {
			if time.Now().After(deadline) {
				t.Fatalf("rotation %d: new connections never saw serial %s\n%s", rot, want, cel.tail(20))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	out := cel.output()
	if n := len(reloaded.FindAllString(out, -1)); n != 2 || strings.Contains(out, "TLS reload failed") {
		t.Fatalf("%d reload lines, want 2:\n%s", n, cel.tail(30))
	}
}
