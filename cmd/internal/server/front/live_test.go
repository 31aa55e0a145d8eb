package front

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/celflow/celflow/engine"
)

// named answers {"w":"<name>"}; a request carrying X-Hold waits for release
// first (a request in flight across a swap).
func named(name string, held chan<- struct{}, release <-chan struct{}) *fakeRunner {
	return &fakeRunner{serve: func(r *engine.Run) *engine.Report {
		if r.Req.Header.Get("X-Hold") != "" {
			held <- struct{}{}
			<-release
		}
		return answerJSON(r, `{"w":"`+name+`"}`)
	}}
}

// post is h.do for goroutines other than the test's: it returns errors
// instead of failing the test.
func post(h *harness, path string, hold bool) (int, string, error) {
	req, err := http.NewRequest("POST", h.url+path, strings.NewReader(`{}`))
	if err != nil {
		return 0, "", err
	}
	if hold {
		req.Header.Set("X-Hold", "1")
	}
	resp, err := testClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func allRoutes(r engine.Runner) map[engine.Route]engine.Runner {
	m := map[engine.Route]engine.Runner{}
	for _, rt := range engine.Routes {
		m[rt] = r
	}
	return m
}

// SetRunners while requests are served (run with -race): a request in
// flight finishes on the runner it started with, every request answers from
// one of the two sets, and once the last swap is done every new request
// gets the new set.
func TestSetRunnersUnderLoad(t *testing.T) {
	held, release := make(chan struct{}, 1), make(chan struct{})
	a, b := named("a", held, release), named("b", held, release)
	h := start(t, a, nil)

	// A request on a, held in its runner across the swaps below.
	heldReply := make(chan string, 1)
	go func() {
		_, body, err := post(h, "/v1/chat/completions", true)
		if err != nil {
			body = err.Error()
		}
		heldReply <- body
	}()
	select {
	case <-held:
	case <-time.After(5 * time.Second):
		t.Fatal("held request never reached the runner")
	}

	// Clients and a swapper race; every reply is a whole answer of a or b.
	const clients, perClient, maxSwaps = 8, 20, 100000
	var wg sync.WaitGroup
	errs := make(chan string, clients*perClient)
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perClient; i++ {
				status, body, err := post(h, "/v1/completions", false)
				if err != nil || status != 200 || (body != `{"w":"a"}` && body != `{"w":"b"}`) {
					errs <- fmt.Sprintf("%d %s %v", status, body, err)
				}
			}
		}()
	}
	clientsDone := make(chan struct{})
	go func() { wg.Wait(); close(clientsDone) }()
	swapped := 0
	for ; swapped < maxSwaps; swapped++ {
		select {
		case <-clientsDone:
		default:
			if swapped%2 == 0 {
				h.srv.SetRunners(allRoutes(b))
			} else {
				h.srv.SetRunners(allRoutes(a))
			}
			time.Sleep(50 * time.Microsecond)
			continue
		}
		break
	}
	h.srv.SetRunners(allRoutes(b))
	<-clientsDone
	close(errs)
	for e := range errs {
		t.Error("reply during swaps:", e)
	}

	if swapped < 2 {
		t.Errorf("only %d swaps while clients ran", swapped)
	}
	for i := 0; i < 5; i++ {
		if _, body := h.do(t, "POST", "/v1/chat/completions", `{}`, nil); string(body) != `{"w":"b"}` {
			t.Fatalf("after the swap: %s", body)
		}
	}
	close(release)
	select {
	case body := <-heldReply:
		if body != `{"w":"a"}` {
			t.Fatalf("the request in flight answered %s, want the old runner's", body)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("held request never finished")
	}
}

// SetRunners and SetLive change what new requests see; the server keeps its
// own copy of the map.
func TestSetLive(t *testing.T) {
	a := named("a", nil, nil)
	b := named("b", nil, nil)
	h := start(t, a, nil)

	m := map[engine.Route]engine.Runner{engine.RouteChat: b}
	h.srv.SetRunners(m)
	m[engine.RouteCompletions] = b // after the call: must not reach the server
	tests := []struct {
		name, path, body string
		status           int
		want             string // reply body, or the error code
	}{
		{"chat swapped", "/v1/chat/completions", `{}`, 200, `{"w":"b"}`},
		{"completions dropped", "/v1/completions", `{}`, 404, "not_found"},
		{"generate dropped", "/inference/v1/generate", `{}`, 404, "not_found"},
	}
	check := func(t *testing.T, path, body string, status int, want string) {
		t.Helper()
		resp, got := h.do(t, "POST", path, body, nil)
		if resp.StatusCode != status {
			t.Fatalf("%s: status %d, want %d: %s", path, resp.StatusCode, status, got)
		}
		if status == 200 {
			if string(got) != want {
				t.Fatalf("%s: %s, want %s", path, got, want)
			}
			return
		}
		if _, _, code := errorReply(t, resp, got); code != want {
			t.Fatalf("%s: code %s, want %s", path, code, want)
		}
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { check(t, tc.path, tc.body, tc.status, tc.want) })
	}

	// The body cap is live too; SetRunners keeps the rest of the set.
	big := `{"pad":"` + strings.Repeat("x", 64) + `"}`
	h.srv.SetLive(Live{Runners: allRoutes(a), MaxBodyBytes: 32, WriteTimeout: time.Second, ShutdownTimeout: 3 * time.Second})
	check(t, "/v1/completions", big, 413, "request_too_large")
	check(t, "/v1/completions", `{}`, 200, `{"w":"a"}`)
	h.srv.SetRunners(allRoutes(b))
	check(t, "/v1/completions", big, 413, "request_too_large")
	if l := h.srv.Live(); l.MaxBodyBytes != 32 || l.ShutdownTimeout != 3*time.Second || len(l.Runners) != len(engine.Routes) {
		t.Fatalf("live set after SetRunners: %+v", l)
	}
	// Zero is the default cap, as in Options.
	h.srv.SetLive(Live{Runners: allRoutes(b)})
	check(t, "/v1/completions", big, 200, `{"w":"b"}`)
	if l := h.srv.Live(); l.MaxBodyBytes != DefaultMaxBodyBytes {
		t.Fatalf("default cap: %d", l.MaxBodyBytes)
	}
}
