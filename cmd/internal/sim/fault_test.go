package sim

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseFaults(t *testing.T) {
	d := 2 * time.Second
	cases := []struct {
		spec string
		want []Fault
		err  string
	}{
		{"status=503", []Fault{{Status: 503}}, ""},
		{"prefill:status=503,times=1", []Fault{{Role: RolePrefill, Status: 503, Times: 1}}, ""},
		{"decode:slow-headers=2s,reset-mid-stream; encode:reset-before-headers", []Fault{
			{Role: RoleDecode, SlowHeaders: d, ResetMidStream: true}, {Role: RoleEncode, ResetBeforeHeaders: true}}, ""},
		{"render:delay=2s,ttft=2s", []Fault{{Role: RoleRender, Delay: d, TTFT: &d}}, ""},
		{"prefill:stall-body=2s; encode:trickle=2s", []Fault{{Role: RolePrefill, StallBody: d}, {Role: RoleEncode, Trickle: d}}, ""},
		{"trickle=0s", nil, "positive"},
		{"encode:ec-key=img_0_a1", []Fault{{Role: RoleEncode, ECKey: "img_0_a1"}}, ""},
		{"ec-key=", nil, "ec-key"},
		{"prefill:kv-drop", []Fault{{Role: RolePrefill, KVDrop: true}}, ""},
		{"kv-drop=1", nil, "takes no value"},
		{"", nil, ""},
		{"status=99", nil, "status"},
		{"gateway:status=500", nil, "unknown role"},
		{"delay=fast", nil, "duration"},
		{"reset-mid-stream=1", nil, "no value"},
		{"explode", nil, "unknown action"},
		{"times=0", nil, "times"},
		{"decode:cut-after=5", []Fault{{Role: RoleDecode, CutAfter: ptr(5)}}, ""},
		{"exit-after=0,times=1", []Fault{{ExitAfter: ptr(0), Times: 1}}, ""},
		{"cut-after=-1", nil, "token count"},
		{"exit-after=x", nil, "token count"},
		{"cut-after", nil, "token count"},
		{"decode:cut-after=2,every=3", []Fault{{Role: RoleDecode, CutAfter: ptr(2), Every: 3}}, ""},
		{"every=0", nil, "every"},
	}
	for _, tc := range cases {
		got, err := ParseFaults(tc.spec)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want %q", tc.spec, err, tc.err)
			}
			continue
		}
		if err != nil || len(got) != len(tc.want) {
			t.Fatalf("%q: %v %v", tc.spec, got, err)
		}
		for i := range got {
			if got[i].String() != tc.want[i].String() || got[i].Role != tc.want[i].Role || got[i].Times != tc.want[i].Times || got[i].Every != tc.want[i].Every {
				t.Errorf("%q[%d]: %+v, want %+v", tc.spec, i, got[i], tc.want[i])
			}
		}
	}
}

// Flag faults hit their role (times=N fires N times); header faults hit the
// request's role only.
func TestFaultStatus(t *testing.T) {
	faults, _ := ParseFaults("prefill:status=503,times=1")
	w, srv := startWorker(t, Config{Roles: []Role{RolePrefill, RoleDecode}, Faults: faults})
	req := `{"prompt":"x","max_tokens":1}`
	for i, want := range []int{503, 200} {
		if status, _, b := post(t, srv.URL+"/v1/completions", req, "EPP-Profile: prefill"); status != want {
			t.Errorf("prefill call %d: %d, want %d: %s", i, status, want, b)
		}
	}
	if status, _, _ := post(t, srv.URL+"/v1/completions", req, "EPP-Profile: decode"); status != 200 {
		t.Errorf("decode hit by a prefill fault: %d", status)
	}
	hdr := FaultHeader + ": prefill:status=429; decode:status=500"
	for role, want := range map[string]int{"prefill": 429, "decode": 500} {
		status, _, b := post(t, srv.URL+"/v1/completions", req, "EPP-Profile: "+role, hdr)
		if status != want || !strings.Contains(errorMessage(t, b), "simulated fault") {
			t.Errorf("%s with header: %d %s", role, status, b)
		}
	}
	recs := w.Records().Since(0).Records
	if recs[0].Fault != "status=503" || recs[len(recs)-1].Fault == "" {
		t.Errorf("records do not name the fault: %+v", recs)
	}
}

// every=N fires on every Nth matching request (load tests that break a
// share of the streams); with times=M only the first M of those.
func TestFaultEvery(t *testing.T) {
	faults, _ := ParseFaults("decode:status=503,every=3,times=2")
	_, srv := startWorker(t, Config{Roles: []Role{RolePrefill, RoleDecode}, Faults: faults})
	req := `{"prompt":"x","max_tokens":1}`
	// A prefill request in between does not count towards decode's every.
	if status, _, _ := post(t, srv.URL+"/v1/completions", req, "EPP-Profile: prefill"); status != 200 {
		t.Errorf("prefill: %d", status)
	}
	var got []int
	for range 9 {
		status, _, _ := post(t, srv.URL+"/v1/completions", req, "EPP-Profile: decode")
		got = append(got, status)
	}
	if want := []int{200, 200, 503, 200, 200, 503, 200, 200, 200}; !slices.Equal(got, want) {
		t.Errorf("statuses %v, want %v", got, want)
	}
}

// Resets: before headers the client gets no response; mid-stream it gets
// the status and a truncated body.
func TestFaultResets(t *testing.T) {
	_, srv := startWorker(t, Config{Roles: []Role{RoleDecode}})
	do := func(body, fault string) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set(FaultHeader, fault)
		return (&http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}).Do(req)
	}
	chat := `{"messages":[{"role":"user","content":"x"}],"max_tokens":4`
	if _, err := do(chat+"}", "reset-before-headers"); err == nil {
		t.Error("reset-before-headers: got a response")
	}
	for _, stream := range []bool{false, true} {
		body := chat + "}"
		if stream {
			body = chat + `,"stream":true}`
		}
		resp, err := do(body, "decode:reset-mid-stream")
		if err != nil {
			t.Fatalf("stream=%v: %v", stream, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || err == nil || errors.Is(err, io.EOF) {
			t.Errorf("stream=%v: status %d, read error %v (want a truncation)", stream, resp.StatusCode, err)
		}
		if stream && (!strings.Contains(string(b), `"role":"assistant"`) || strings.Contains(string(b), "[DONE]")) {
			t.Errorf("stream: got %q", b)
		}
	}
}

// slow-headers and delay hold the reply; a caller that gives up first
// cancels the request, which the record shows.
func TestFaultSlowHeadersCancels(t *testing.T) {
	w, srv := startWorker(t, Config{Roles: []Role{RoleDecode}})
	for _, fault := range []string{"slow-headers=30s", "delay=30s"} {
		w.Records().Clear()
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/completions", strings.NewReader(`{"prompt":"x"}`))
		req.Header.Set(FaultHeader, fault)
		_, err := http.DefaultClient.Do(req)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: %v, want a client timeout", fault, err)
		}
		p := waitRecords(t, w.Records(), func(p RecordsPage) bool { return len(p.Records) == 1 && p.Records[0].Done })
		if r := p.Records[0]; !r.Cancelled || r.Status != 0 || r.Fault != fault {
			t.Errorf("%s: record %+v", fault, r)
		}
	}
}

// ttft/itl from the header pace the stream: the first event arrives, then
// the caller leaves and the worker stops (record cancelled).
func TestStreamStopsOnDisconnect(t *testing.T) {
	w, srv := startWorker(t, Config{Roles: []Role{RoleDecode}, OutputTokens: 50})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat/completions",
		strings.NewReader(`{"messages":[{"role":"user","content":"x"}],"stream":true}`))
	req.Header.Set(FaultHeader, "itl=1h")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first event: %q %v", line, err)
	}
	cancel()
	resp.Body.Close()
	p := waitRecords(t, w.Records(), func(p RecordsPage) bool { return len(p.Records) == 1 && p.Records[0].Done })
	if r := p.Records[0]; !r.Cancelled || r.Status != 200 {
		t.Errorf("record %+v", r)
	}
}

// stall-body and trickle (issue 10): the status and headers arrive at
// once, then the body stalls (until the caller leaves: the record shows a
// cancelled 200) or drips out byte by byte, whole and valid.
func TestFaultSlowBody(t *testing.T) {
	w, srv := startWorker(t, Config{Roles: []Role{RolePrefill}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/completions", strings.NewReader(`{"prompt":"x","max_tokens":1}`))
	req.Header.Set(FaultHeader, "stall-body=1h")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 || resp.ContentLength <= 0 {
		t.Fatalf("headers: %v %v", resp, err)
	}
	cancel()
	resp.Body.Close()
	p := waitRecords(t, w.Records(), func(p RecordsPage) bool { return len(p.Records) == 1 && p.Records[0].Done })
	if r := p.Records[0]; !r.Cancelled || r.Status != 200 || r.Fault != "stall-body=1h0m0s" {
		t.Errorf("stall record %+v", r)
	}

	w.Records().Clear()
	status, _, b := post(t, srv.URL+"/v1/completions", `{"prompt":"x","max_tokens":1}`, FaultHeader+": trickle=1ms")
	if status != 200 || !strings.HasPrefix(string(b), `{"id":"cmpl-`) || !strings.HasSuffix(strings.TrimSpace(string(b)), "}") {
		t.Fatalf("trickle: %d %q", status, b)
	}
	p = waitRecords(t, w.Records(), func(p RecordsPage) bool { return len(p.Records) == 1 && p.Records[0].Done })
	if r := p.Records[0]; r.Cancelled || r.Status != 200 {
		t.Errorf("trickle record %+v", r)
	}
}
