package sim

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestRecorderRing(t *testing.T) {
	r := NewRecorder(3, 5)
	req := httptest.NewRequest(http.MethodPost, "/v1/completions", nil)
	req.Header.Add("X-Custom", "a")
	req.Header.Add("X-Custom", "b")
	for _, body := range []string{"one", "two", "three", "four-long"} {
		r.add("w", req, []byte(body))
	}
	p := r.Since(0)
	if len(p.Records) != 3 || p.Records[0].Seq != 2 || p.Next != 4 {
		t.Fatalf("ring: %+v", p)
	}
	last := p.Records[2]
	if last.Body != "four-" || !last.BodyTruncated || strings.Join(last.Headers.Values("X-Custom"), ",") != "a,b" {
		t.Errorf("record: %+v", last)
	}
	if p := r.Since(3); len(p.Records) != 1 || p.Records[0].Seq != 4 {
		t.Errorf("since 3: %+v", p)
	}
	if p := r.Since(4); len(p.Records) != 0 || p.Next != 4 {
		t.Errorf("since 4: %+v", p)
	}
	r.Clear()
	r.add("w", req, nil)
	if p := r.Since(0); len(p.Records) != 1 || p.Records[0].Seq != 5 {
		t.Errorf("after clear: %+v", p)
	}
}

// Records are served over HTTP with every leg's method, path, headers, body,
// role and status; DELETE clears them.
func TestRecordsEndpoint(t *testing.T) {
	_, srv := startWorker(t, Config{Name: "w9", Roles: []Role{RolePrefill}})
	body := `{"prompt":"x","max_tokens":1,"seed":12345678901234567890}`
	post(t, srv.URL+"/v1/completions", body, "EPP-Profile: prefill", "X-Request-Id: id-1")
	ctx := context.Background()
	p, err := FetchRecords(ctx, srv.URL, 0)
	if err != nil || len(p.Records) != 1 {
		t.Fatalf("%v %+v", err, p)
	}
	r := p.Records[0]
	if r.Worker != "w9" || r.Role != RolePrefill || r.Method != "POST" || r.Path != "/v1/completions" || r.Body != body ||
		r.Headers.Get("X-Request-Id") != "id-1" || r.Status != 200 || !r.Done || r.Cancelled || r.Time.IsZero() {
		t.Errorf("record: %+v", r)
	}
	if p, _ := FetchRecords(ctx, srv.URL, p.Next); len(p.Records) != 0 {
		t.Errorf("since next: %+v", p)
	}
	if err := ClearRecords(ctx, srv.URL); err != nil {
		t.Fatal(err)
	}
	if p, _ := FetchRecords(ctx, srv.URL, 0); len(p.Records) != 0 {
		t.Errorf("after DELETE: %+v", p)
	}
	if status, _, _ := post(t, srv.URL+"/sim/records", ""); status != http.StatusMethodNotAllowed {
		t.Errorf("POST /sim/records: %d", status)
	}
}
