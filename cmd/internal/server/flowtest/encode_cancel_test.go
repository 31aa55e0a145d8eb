package flowtest_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/celflow/celflow/cmd/internal/server/front"
	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
)

// hangingFake records every call it receives; a call matching hang blocks
// until its request context ends (celflow cancelled it) or 5s pass, and is
// counted as cancelled only in the first case.
type hangingFake struct {
	mu        sync.Mutex
	calls     []string // "<EPP-Profile or path>" per call, in arrival order
	hung      int
	cancelled int
	arrived   chan struct{} // one send per hanging call
}

// epdYAML is encode's E/P/D flow workflow (RENDER: the render server's URL).
var epdYAML = func() string {
	b, err := os.ReadFile("../../../../nodes/encode/testdata/epd-flow.yaml")
	if err != nil {
		panic(err)
	}
	return string(b)
}()

func newHangingFake() *hangingFake { return &hangingFake{arrived: make(chan struct{}, 16)} }

func (f *hangingFake) serve(hang func(r *http.Request, body string) bool, answer func(http.ResponseWriter, *http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		name := r.Header.Get("Epp-Profile")
		if r.Header.Get("Prefer") != "" {
			name = "conditional-decode"
		}
		if name == "" {
			name = r.URL.Path
		}
		f.mu.Lock()
		f.calls = append(f.calls, name)
		f.mu.Unlock()
		if !hang(r, string(b)) {
			answer(w, r)
			return
		}
		f.mu.Lock()
		f.hung++
		f.mu.Unlock()
		f.arrived <- struct{}{}
		select {
		case <-r.Context().Done():
			f.mu.Lock()
			f.cancelled++
			f.mu.Unlock()
		case <-time.After(5 * time.Second):
		}
	}
}

func (f *hangingFake) snapshot() (calls []string, hung, cancelled int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...), f.hung, f.cancelled
}

// ACCEPTANCE 183: a client that disconnects during the encode fan-out or
// during the media downloads has every in-flight call cancelled (each fake
// observes its request context end), no further leg starts, and prefill is
// never sent. The request goes through the real front, so the disconnect is
// a closed client connection, not a cancelled context handed to the engine.
func TestClientGoneCancelsFanOut(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x02\x00\x00\x00\x90wS\xde")
	inline := "data:image/png;base64," + base64.StdEncoding.EncodeToString(png)
	for _, tc := range []struct {
		name string
		// remote: the images are URLs on the media fake, which hangs;
		// otherwise they are inline and the encode legs hang.
		remote bool
		// hanging is how many calls must be in flight before the client
		// leaves: 3 downloads, or 2 encode legs (epdYAML has max_parallel 2,
		// so the third item must never be sent).
		hanging int
	}{
		{name: "during media downloads", remote: true, hanging: 3},
		{name: "during encode fan-out", hanging: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			media, workers := newHangingFake(), newHangingFake()
			mediaSrv := httptest.NewServer(media.serve(func(*http.Request, string) bool { return true }, nil))
			defer mediaSrv.Close()
			render := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				_, _ = io.WriteString(w, `{"token_ids":[1,7,7,2,8,8,3,9,9],"features":{"mm_hashes":{"image":["h0","h1","h2"]},`+
					`"mm_placeholders":{"image":[{"offset":1,"length":2},{"offset":4,"length":2},{"offset":7,"length":2}]}}}`)
			}))
			defer render.Close()
			gw := httptest.NewServer(workers.serve(
				func(r *http.Request, _ string) bool { return r.Header.Get("Epp-Profile") == "encode" },
				func(w http.ResponseWriter, r *http.Request) {
					if r.Header.Get("Prefer") != "" {
						w.WriteHeader(http.StatusPreconditionFailed)
						return
					}
					w.Header().Set("Content-Type", "application/json")
					_, _ = io.WriteString(w, `{"choices":[],"kv_transfer_params":{"do_remote_prefill":true,"remote_engine_id":"e"}}`)
				}))
			defer gw.Close()

			up, err := upstream.New(upstream.Config{Gateway: gw.URL})
			if err != nil {
				t.Fatal(err)
			}
			wf, diags := engine.Load("epd.yaml", []byte(strings.Replace(epdYAML, "RENDER", render.URL, 1)), engine.LoadOptions{Upstream: up})
			if len(diags) > 0 || wf == nil {
				t.Fatalf("load: %v", diags)
			}
			log := logrus.New()
			log.SetOutput(io.Discard)
			observed := make(chan front.Observation, 1)
			srv := front.New(front.Options{Runners: map[engine.Route]engine.Runner{engine.RouteChat: wf}, Log: log,
				Observe: func(o *front.Observation) { observed <- *o }})
			celflow := httptest.NewServer(srv.Handler())
			defer celflow.Close()

			var parts []string
			for i := range 3 {
				u := inline
				if tc.remote {
					u = fmt.Sprintf("%s/img%d.png", mediaSrv.URL, i)
				}
				parts = append(parts, `{"type":"image_url","image_url":{"url":"`+u+`"}}`)
			}
			body := `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"three"},` + strings.Join(parts, ",") + `]}]}`
			ctx, leave := context.WithCancel(context.Background())
			defer leave()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, celflow.URL+"/v1/chat/completions", strings.NewReader(body))
			clientDone := make(chan error, 1)
			go func() {
				resp, err := http.DefaultClient.Do(req)
				if err == nil {
					resp.Body.Close()
				}
				clientDone <- err
			}()

			hanging := workers
			if tc.remote {
				hanging = media
			}
			for i := range tc.hanging {
				select {
				case <-hanging.arrived:
				case err := <-clientDone:
					t.Fatalf("the client got an answer before %d calls hung (%d did): %v", tc.hanging, i, err)
				case <-time.After(5 * time.Second):
					t.Fatalf("only %d of %d calls arrived", i, tc.hanging)
				}
			}
			leave() // the client disconnects
			if err := <-clientDone; !errors.Is(err, context.Canceled) {
				t.Fatalf("client: %v, want context.Canceled", err)
			}
			var obs front.Observation
			select {
			case obs = <-observed:
			case <-time.After(5 * time.Second):
				t.Fatal("the run did not end after the client left")
			}
			// Every hanging call must have seen its context end; bounded wait.
			deadline := time.Now().Add(2 * time.Second)
			for {
				_, hung, cancelled := hanging.snapshot()
				if cancelled == hung && hung == tc.hanging {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d of %d in-flight calls saw their request cancelled", cancelled, hung)
				}
				time.Sleep(5 * time.Millisecond)
			}
			time.Sleep(50 * time.Millisecond) // a late leg would arrive now
			calls, _, _ := workers.snapshot()
			mediaCalls, _, _ := media.snapshot()
			want := "conditional-decode,encode,encode"
			if tc.remote {
				want = "" // nothing after the downloads: no render, no worker leg
				if len(mediaCalls) != 3 {
					t.Errorf("%d media GETs, want 3", len(mediaCalls))
				}
			}
			if got := strings.Join(calls, ","); got != want {
				t.Errorf("worker legs %q, want %q (prefill must never be sent)", got, want)
			}
			if obs.Status != 499 {
				t.Errorf("observed status %d, want 499 (the client left before any reply)", obs.Status)
			}
			if obs.Report == nil || engine.AsError(obs.Report.Err) == nil || engine.AsError(obs.Report.Err).Kind != engine.KindCancelled {
				t.Errorf("run report %+v, want a cancelled error", obs.Report)
			}
		})
	}
}

// ACCEPTANCE 118: one of three encode calls answers 500: the node fails, the
// call still in flight sees its request cancelled, the third item (behind
// max_parallel 2) is never sent, nor is prefill, and the client gets 502.
func TestEncodeFailureCancelsSiblings(t *testing.T) {
	png := "data:image/png;base64,iVBORw0KGgo="
	render := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, `{"token_ids":[1,7,7,2,8,8,3,9,9],"features":{"mm_hashes":{"image":["h0","h1","h2"]},`+
			`"mm_placeholders":{"image":[{"offset":1,"length":2},{"offset":4,"length":2},{"offset":7,"length":2}]}}}`)
	}))
	defer render.Close()
	workers := newHangingFake()
	gw := httptest.NewServer(workers.serve(
		func(r *http.Request, body string) bool {
			return r.Header.Get("Epp-Profile") == "encode" && !strings.Contains(body, `"h1"`)
		},
		func(w http.ResponseWriter, r *http.Request) {
			switch {
			case r.Header.Get("Prefer") != "":
				w.WriteHeader(http.StatusPreconditionFailed)
			case r.Header.Get("Epp-Profile") == "encode": // h1: fail once h0 is in flight
				select {
				case <-workers.arrived:
				case <-time.After(2 * time.Second):
				}
				w.WriteHeader(http.StatusInternalServerError)
				_, _ = io.WriteString(w, "ENCODER-DOWN")
			default:
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, `{"kv_transfer_params":{"do_remote_prefill":true}}`)
			}
		}))
	defer gw.Close()
	up, err := upstream.New(upstream.Config{Gateway: gw.URL})
	if err != nil {
		t.Fatal(err)
	}
	wf, diags := engine.Load("epd.yaml", []byte(strings.Replace(epdYAML, "RENDER", render.URL, 1)), engine.LoadOptions{Upstream: up})
	if len(diags) > 0 || wf == nil {
		t.Fatalf("load: %v", diags)
	}
	part := `{"type":"image_url","image_url":{"url":"` + png + `"}}`
	body := `{"model":"m","messages":[{"role":"user","content":[` + part + `,` + part + `,` + part + `]}]}`
	w := httptest.NewRecorder()
	rep := wf.Serve(engine.NewRun(context.Background(), &engine.Request{ID: "r118", Route: engine.RouteChat, Body: []byte(body)}, w))
	if e := rep.Err; e == nil || e.HTTPStatus() != 502 || e.Code() != "bad_gateway" || strings.Contains(e.ClientMessage("r118"), "ENCODER-DOWN") {
		t.Fatalf("run error %+v, want 502 bad_gateway without the upstream body", rep.Err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		if _, hung, cancelled := workers.snapshot(); hung == 1 && cancelled == 1 {
			break
		}
		if time.Now().After(deadline) {
			_, hung, cancelled := workers.snapshot()
			t.Fatalf("%d of %d in-flight encode calls saw their request cancelled", cancelled, hung)
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // a late leg would arrive now
	if calls, _, _ := workers.snapshot(); strings.Join(calls, ",") != "conditional-decode,encode,encode" {
		t.Errorf("worker legs %q: the third item and prefill must never be sent", calls)
	}
}
