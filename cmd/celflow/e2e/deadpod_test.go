//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/celflow/celflow/cmd/internal/demo"
	simlib "github.com/celflow/celflow/cmd/internal/sim"
)

// Issue 19, "no stranded KV", with real processes: one prefill and two
// decode celflow-sim processes (and, in gateway mode, celflow-sim gateway
// over them), celflow serve with the shipped pd.yaml; one decode process
// is SIGKILLed and stays listed (in the direct pool, and as a gateway
// member). Every request must be answered, and every prefill the prefill
// worker answered must have been followed by a decode that answered 200
// (a sim decode answers only after pulling the prefill's KV): the count of
// prefills whose decode never arrived is 0.
func TestDeadDecodePod(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		gateway bool
		n, conc int
	}{
		// Direct: celflow excludes the endpoint it tried; concurrent.
		{"direct", false, 60, 8},
		// Gateway: celflow asks the gateway again; one at a time, so the
		// gateway's round robin sends every first decode to the dead pod.
		{"gateway", true, 30, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			sim := func(name, role string) *simProc {
				return startSim(t, name, "--listen", "127.0.0.1:0", "--roles", role, "--name", name, "--shared-dir", filepath.Join(dir, "kv"))
			}
			p0, d0, d1 := sim("p0", "prefill"), sim("d0", "decode"), sim("d1", "decode")
			// The decode worker dies, the process (not a simulated error); the
			// pools still list it. failure_threshold keeps it in rotation.
			d1.p.signal(syscall.SIGKILL)
			if _, ok := d1.p.wait(10 * time.Second); !ok {
				t.Fatal("d1 did not die")
			}
			up := fmt.Sprintf("  mode: direct\n  health: {failure_threshold: 1000}\n  pools:\n    prefill: [%s]\n    decode: [%s, %s]\n", p0.url, d1.url, d0.url)
			sims := []*simProc{p0, d0}
			if tc.gateway {
				gw := startSim(t, "gateway", "gateway", "--listen", "127.0.0.1:0", "--prefill", p0.url, "--decode", d1.url+","+d0.url)
				up = fmt.Sprintf("  mode: gateway\n  gateway: %s\n", gw.url)
			}
			wf, err := demo.Workflow("pd.yaml", demo.Overrides{})
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(dir, "workflow.yaml"), wf)
			cfg := fmt.Sprintf("server:\n  listen: 127.0.0.1:0\n  drain_delay: 0s\nupstream:\n%stelemetry:\n  log_level: info\n  log_format: json\nworkflow: ./workflow.yaml\n", up)
			writeFile(t, filepath.Join(dir, "celflow.yaml"), []byte(cfg))
			cf := startProc(t, "celflow serve", "serve", "--config", filepath.Join(dir, "celflow.yaml"))
			addr, err := cf.waitLine(servingRe, 15*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			st := &stack{t: t, url: "http://" + addr}
			st.waitReady(10 * time.Second)

			var failed atomic.Int32
			var wg sync.WaitGroup
			sem := make(chan struct{}, tc.conc)
			for i := range tc.n {
				wg.Add(1)
				sem <- struct{}{}
				go func() {
					defer wg.Done()
					defer func() { <-sem }()
					id := fmt.Sprintf("e2e-deadpod-%s-%d", tc.name, i)
					msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt(id))}
					params := openai.ChatCompletionNewParams{Model: model, MaxTokens: openai.Int(4), Messages: msgs}
					if i%2 == 0 {
						s := st.client().Chat.Completions.NewStreaming(context.Background(), params, option.WithHeader("X-Request-Id", id))
						for s.Next() {
						}
						if err := s.Err(); err != nil {
							failed.Add(1)
							t.Errorf("%s (stream): %v", id, err)
						}
						return
					}
					if _, err := st.client().Chat.Completions.New(context.Background(), params, option.WithHeader("X-Request-Id", id)); err != nil {
						failed.Add(1)
						t.Errorf("%s: %v", id, err)
					}
				}()
			}
			wg.Wait()

			prefilled, decoded := map[string]bool{}, map[string]bool{}
			for _, s := range sims {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				page, err := simlib.FetchRecords(ctx, s.url, 0)
				cancel()
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range page.Records {
					if r.Status != http.StatusOK {
						continue
					}
					switch r.Role {
					case simlib.RolePrefill:
						prefilled[r.Headers.Get("X-Request-Id")] = true
					case simlib.RoleDecode:
						decoded[r.Headers.Get("X-Request-Id")] = true
					}
				}
			}
			stranded := 0
			for id := range prefilled {
				if !decoded[id] {
					stranded++
				}
			}
			t.Logf("%s: %d requests, %d failed, %d prefills, %d decodes answered, %d prefills whose decode never arrived",
				tc.name, tc.n, failed.Load(), len(prefilled), len(decoded), stranded)
			if failed.Load() != 0 || stranded != 0 || len(prefilled) != tc.n || len(decoded) != tc.n {
				t.Fatalf("failed %d, stranded %d, prefilled %d, decoded %d of %d", failed.Load(), stranded, len(prefilled), len(decoded), tc.n)
			}
		})
	}
}
