package flowtest_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/celflow/celflow/cmd/internal/server/front"
	"github.com/celflow/celflow/cmd/internal/sim"
	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
)

// mediaShapes is connectors/mm/testdata/vllm_shapes.json: every content-part
// shape vLLM's chat parser reads as media, with celflow's outcome.
type mediaShapes struct {
	VLLM string `json:"vllm"`
	Rows []struct {
		Name     string          `json:"name"`
		Part     json.RawMessage `json:"part"`
		Outcome  string          `json:"outcome"`
		Modality string          `json:"modality"`
	} `json:"rows"`
}

// startSim runs a celflow sim (its command line) in-process on 127.0.0.1.
func startSim(t *testing.T, args ...string) string {
	t.Helper()
	u, stop, err := sim.Start(append(args, "--listen", "127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop() })
	return u
}

// simRecords is every record a sim took after seq since, and the next seq.
func simRecords(t *testing.T, base string, since int64) ([]sim.Record, int64) {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("%s/sim/records?since=%d", base, since))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var page sim.RecordsPage
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		t.Fatal(err)
	}
	return page.Records, page.Next
}

// Issue 17, item 1: a media url in any shape vLLM's chat parser reads (typed
// or typeless, bare string or object, input_image, the uuid branch) never
// reaches a worker leg raw. The E/P/D flow runs the real front, fetch-media
// (loopback allowed for the test's media host), render, conditional decode,
// encode, prefill and decode against celflow sim workers behind the sim
// gateway; every body each sim received is read back from its records. A
// shape celflow cannot guard is refused with 400 and the part's path before
// any leg, also by a P/D workflow without fetch-media. Before the scanner
// followed vLLM, the bare, typeless, input_image and uuid-branch urls went
// to render, encode, prefill and decode untouched.
func TestMediaShapesNeverReachWorkersRaw(t *testing.T) {
	raw, err := os.ReadFile("../../../../connectors/mm/testdata/vllm_shapes.json")
	if err != nil {
		t.Fatal(err)
	}
	var tab mediaShapes
	if err := json.Unmarshal(raw, &tab); err != nil {
		t.Fatal(err)
	}

	// The media host: one small payload per modality, typed by its header.
	payload := map[string][2]string{
		"/image": {"image/png", "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x02\x00\x00\x00\x90wS\xde"},
		"/video": {"video/mp4", "\x00\x00\x00\x18ftypmp42\x00\x00\x00\x00mp42isom"},
		"/audio": {"audio/wav", "RIFF\x24\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00"},
	}
	var downloads atomic.Int32
	mediaSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := payload[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		downloads.Add(1)
		w.Header().Set("Content-Type", p[0])
		_, _ = io.WriteString(w, p[1])
	}))
	defer mediaSrv.Close()

	worker := startSim(t, "--roles", "render,encode,prefill,decode", "--name", "w0")
	gateway := startSim(t, "gateway", "--encode", worker, "--prefill", worker, "--decode", worker)
	sims := []string{worker, gateway}

	up, err := upstream.New(upstream.Config{Gateway: gateway})
	if err != nil {
		t.Fatal(err)
	}
	serve := func(t *testing.T, name, yaml string) string {
		wf, diags := engine.Load(name, []byte(yaml), engine.LoadOptions{Upstream: up})
		if len(diags) > 0 || wf == nil {
			t.Fatalf("load %s: %v", name, diags)
		}
		log := logrus.New()
		log.SetOutput(io.Discard)
		srv := front.New(front.Options{Runners: map[engine.Route]engine.Runner{engine.RouteChat: wf}, Log: log})
		celflow := httptest.NewServer(srv.Handler())
		t.Cleanup(celflow.Close)
		return celflow.URL
	}
	epd := serve(t, "epd.yaml", strings.Replace(epdYAML, "RENDER", worker, 1))
	pd := serve(t, "pd.yaml", `apiVersion: celflow/v1
kind: Workflow
metadata: {name: pd-no-fetch, version: "1"}
defaults: {kv_connector: kv-nixl}
nodes:
  - {id: prefill, type: prefill}
  - {id: decode, type: decode, needs: [prefill]}
`)

	next := map[string]int64{}
	drain := func(t *testing.T) []sim.Record {
		var all []sim.Record
		for _, s := range sims {
			recs, n := simRecords(t, s, next[s])
			next[s] = n
			all = append(all, recs...)
		}
		return all
	}
	ran := 0
	for i, r := range tab.Rows {
		if r.Outcome == "skipped" {
			continue // no url vLLM would fetch: nothing to guard
		}
		ran++
		t.Run(r.Name, func(t *testing.T) {
			mod := r.Modality
			if mod == "" {
				mod = "image"
			}
			url := mediaSrv.URL + "/" + mod
			part := strings.ReplaceAll(string(r.Part), "MEDIA_URL", url)
			// Distinct text per row, so that no decode prefix cache answers
			// early: every row runs encode, prefill and decode.
			body := fmt.Sprintf(`{"model":"m","max_tokens":3,"messages":[{"role":"user","content":[{"type":"text","text":"row %d"},%s]}]}`, i, part)
			flows := []string{epd}
			if r.Outcome == "refused" {
				flows = append(flows, pd)
			}
			for _, base := range flows {
				drain(t)
				before := downloads.Load()
				resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				reply, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				legs := drain(t)
				for _, l := range legs {
					if strings.Contains(l.Body, mediaSrv.URL) || l.BodyTruncated {
						t.Errorf("%s leg %s %s (%s) carried the client's url: %.300s", l.Worker, l.Method, l.Path, l.Headers.Get("Epp-Profile"), l.Body)
					}
				}
				if strings.Contains(string(reply), mediaSrv.URL) {
					t.Errorf("the reply repeats the url: %s", reply)
				}
				switch r.Outcome {
				case "refused":
					var e struct {
						Error struct {
							Type  string  `json:"type"`
							Param *string `json:"param"`
						} `json:"error"`
					}
					_ = json.Unmarshal(reply, &e)
					if resp.StatusCode != http.StatusBadRequest || e.Error.Param == nil || *e.Error.Param != "messages[0].content[1]" {
						t.Fatalf("status %d %s, want 400 with param messages[0].content[1]", resp.StatusCode, reply)
					}
					if len(legs) != 0 || downloads.Load() != before {
						t.Fatalf("%d legs and %d downloads for a refused part", len(legs), downloads.Load()-before)
					}
				default:
					if resp.StatusCode != http.StatusOK {
						t.Fatalf("status %d: %s", resp.StatusCode, reply)
					}
					kinds := map[string]bool{}
					for _, l := range legs {
						if l.Worker == "w0" {
							kinds[legKind(l)] = true
						}
					}
					for _, k := range []string{"render", "encode", "prefill", "decode"} {
						if !kinds[k] {
							t.Errorf("no %s leg reached the worker (legs: %v)", k, kinds)
						}
					}
					if r.Outcome == "fetched" {
						if downloads.Load() == before {
							t.Error("fetch-media did not download the url")
						}
						want := "data:" + payload["/"+mod][0] + ";base64," + base64.StdEncoding.EncodeToString([]byte(payload["/"+mod][1]))
						for _, l := range legs {
							if legKind(l) == "render" && !strings.Contains(l.Body, want) {
								t.Errorf("render leg lacks the data URI: %.300s", l.Body)
							}
						}
					}
				}
			}
		})
	}
	if ran < 20 {
		t.Fatalf("only %d rows ran", ran)
	}
}

// legKind is render, encode, prefill or decode (conditional-decode counts as
// decode) for a record of the worker.
func legKind(r sim.Record) string {
	if strings.HasPrefix(r.Path, "/render") || strings.Contains(r.Path, "/render") {
		return "render"
	}
	if p := r.Headers.Get("Epp-Profile"); p != "" {
		return p
	}
	return string(r.Role)
}
