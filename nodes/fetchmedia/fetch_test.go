package fetchmedia

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/celflow/celflow/engine"
)

func pngServer(t *testing.T, img []byte, ctype string) *mediaServer {
	return newMediaServer(t, func(w http.ResponseWriter, r *http.Request) {
		if ctype != "" {
			w.Header().Set("Content-Type", ctype)
		}
		_, _ = w.Write(img)
	})
}

// ACCEPTANCE 58, 62: a remote image is downloaded and rewritten; items keep
// the order of appearance with inline ones; the download carries no client
// header, request id or trace context.
func TestFetchRemoteAndInline(t *testing.T) {
	img := pngBytes(t, 8)
	srv := pngServer(t, img, "image/png")
	n := mustNode(t, `{"allow_loopback":true}`, nil)
	inline := "data:image/jpeg;base64," + base64.StdEncoding.EncodeToString([]byte("\xff\xd8\xff jpeg"))
	for _, order := range []string{"remote-first", "inline-first"} {
		t.Run(order, func(t *testing.T) {
			parts := []string{imagePart(srv.URL + "/cat.png"), imagePart(inline)}
			if order == "inline-first" {
				parts[0], parts[1] = parts[1], parts[0]
			}
			res, st := run(t, n, chat(parts...))
			if res.Err != nil {
				t.Fatal(res.Err)
			}
			urls := checkParts(t, st)
			want := "data:image/png;base64," + base64.StdEncoding.EncodeToString(img)
			ri, ii := 0, 1
			if order == "inline-first" {
				ri, ii = 1, 0
			}
			if urls[ri] != want || urls[ii] != inline {
				t.Fatalf("urls %.60q", urls)
			}
			r, in := st.Media[ri], st.Media[ii]
			if !r.Remote || r.Type != "image/png" || r.Size != len(img) || r.Index != ri || r.Modality != "image" || r.Part != ri {
				t.Errorf("remote item %+v", r)
			}
			if in.Remote || in.Type != "image/jpeg" || in.Size != 8 || in.Index != ii {
				t.Errorf("inline item %+v", in)
			}
			if !strings.Contains(string(st.Body), `"seed":12345678901234567890`) {
				t.Error("body not byte-faithful outside the url")
			}
			h := srv.lastHdr.Load().(http.Header)
			for _, k := range []string{"Authorization", "X-Request-Id", "Traceparent", "Tracestate"} {
				if h.Get(k) != "" {
					t.Errorf("download carried %s", k)
				}
			}
		})
	}
}

// ACCEPTANCE 59, 68
func TestFetchNoItems(t *testing.T) {
	n := mustNode(t, `{}`, nil)
	for _, body := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		`{"prompt":"no messages"}`,
		`{"messages":[1,{"content":{}},{"content":[2,{"type":"image_url","image_url":7},{"type":"image_url","image_url":{"url":3}}]}]}`,
	} {
		res, st := run(t, n, body)
		if res.Err != nil || len(st.Media) != 0 || string(st.Body) != body {
			t.Errorf("%s: err %v items %d", body, res.Err, len(st.Media))
		}
	}
}

// ACCEPTANCE 60: the media behind the client's URL cannot be obtained.
func TestFetchFailures(t *testing.T) {
	srv := newMediaServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/404":
			http.NotFound(w, r)
		case "/500":
			w.WriteHeader(500)
		case "/short":
			w.Header().Set("Content-Type", "image/png")
			w.Header().Set("Content-Length", "1000")
			_, _ = w.Write([]byte("\x89PNG\r\n\x1a\n"))
		case "/slow":
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		}
	})
	n := mustNode(t, `{"allow_loopback":true,"download_timeout":"150ms"}`, hosts(map[string]string{"img.example": "127.0.0.1"}))
	cases := map[string]string{
		srv.URL + "/404":   "HTTP 404",
		srv.URL + "/500":   "HTTP 500",
		srv.URL + "/short": "truncated",
		srv.URL + "/slow":  "timed out",
		"http://nx.example:" + srv.port() + "/a.png": "does not resolve",
	}
	for url, msg := range cases {
		res, st := run(t, n, chat(imagePart(url)))
		e := wantErr(t, res, engine.KindMediaFetchFailed, msg)
		if e.HTTPStatus() != 400 || e.Code() != "media_fetch_failed" || st.Media != nil {
			t.Errorf("%s: status %d code %s", url, e.HTTPStatus(), e.Code())
		}
	}
	// A refused connection is a fetch failure too.
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := l.Addr().String()
	l.Close()
	res, _ := run(t, n, chat(imagePart("http://"+dead+"/x.png")))
	wantErr(t, res, engine.KindMediaFetchFailed, "could not connect")
}

// ACCEPTANCE 66
func TestFetchAdmission(t *testing.T) {
	srv := pngServer(t, pngBytes(t, 2), "image/png")
	n := mustNode(t, `{"allow_loopback":true,"max_multimodal_entries":2}`, nil)
	u := srv.URL + "/a.png"
	res, st := run(t, n, chat(imagePart(u), imagePart(u+"?2"), imagePart(u+"?3")))
	wantErr(t, res, engine.KindInvalidRequest, "got 3", "max 2")
	if srv.count.Load() != 0 || st.Media != nil {
		t.Fatalf("downloads %d, items %d", srv.count.Load(), len(st.Media))
	}
	res, st = run(t, n, chat(imagePart(u), imagePart(u+"?2")))
	if res.Err != nil || len(st.Media) != 2 {
		t.Fatalf("at the limit: %v", res.Err)
	}
}

// ACCEPTANCE 67, 82: three URLs are all fetched; an identical URL is fetched once.
func TestFetchManyAndDedup(t *testing.T) {
	img := pngBytes(t, 4)
	srv := pngServer(t, img, "image/png")
	n := mustNode(t, `{"allow_loopback":true}`, nil)
	res, st := run(t, n, chat(imagePart(srv.URL+"/1"), imagePart(srv.URL+"/2"), imagePart(srv.URL+"/3")))
	if res.Err != nil || len(st.Media) != 3 || srv.count.Load() != 3 {
		t.Fatalf("err %v items %d gets %d", res.Err, len(st.Media), srv.count.Load())
	}
	srv.count.Store(0)
	res, st = run(t, n, chat(imagePart(srv.URL+"/same"), imagePart(srv.URL+"/same")))
	if res.Err != nil || len(st.Media) != 2 || srv.count.Load() != 1 {
		t.Fatalf("dedup: err %v items %d gets %d", res.Err, len(st.Media), srv.count.Load())
	}
	urls := checkParts(t, st)
	if urls[0] != urls[1] || !strings.HasPrefix(urls[0], "data:image/png;base64,") {
		t.Fatalf("parts not both rewritten: %.40q", urls)
	}
}

// ACCEPTANCE 69: a missing or octet-stream type is sniffed.
func TestFetchSniffing(t *testing.T) {
	img := pngBytes(t, 4)
	html := []byte("<!DOCTYPE html><html><body>hi</body></html>")
	srv := newMediaServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/none":
			w.Header()["Content-Type"] = nil // suppress Go's own sniffing
			_, _ = w.Write(img)
		case "/octet":
			w.Header().Set("Content-Type", "application/octet-stream")
			_, _ = w.Write(img)
		case "/html":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			_, _ = w.Write(html)
		case "/html-octet":
			w.Header().Set("Content-Type", "application/octet-stream")
			_, _ = w.Write(html)
		}
	})
	n := mustNode(t, `{"allow_loopback":true}`, nil)
	for _, p := range []string{"/none", "/octet"} {
		res, st := run(t, n, chat(imagePart(srv.URL+p)))
		if res.Err != nil || st.Media[0].Type != "image/png" {
			t.Errorf("%s: err %v item %+v", p, res.Err, st.Media)
		}
	}
	for _, p := range []string{"/html", "/html-octet"} {
		res, _ := run(t, n, chat(imagePart(srv.URL+p)))
		wantErr(t, res, engine.KindInvalidMedia, "text/html", "not allowed")
	}
}

// ACCEPTANCE 70
func TestFetchVideoAudio(t *testing.T) {
	srv := newMediaServer(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, ".mp4") {
			w.Header().Set("Content-Type", "video/mp4")
		} else {
			w.Header().Set("Content-Type", "audio/wav")
		}
		_, _ = w.Write([]byte("media bytes"))
	})
	n := mustNode(t, `{"allow_loopback":true}`, nil)
	res, st := run(t, n, chat(`{"type":"video_url","video_url":{"url":"`+srv.URL+`/v.mp4"}}`,
		`{"type":"audio_url","audio_url":{"url":"`+srv.URL+`/a.wav"}}`))
	if res.Err != nil || len(st.Media) != 2 {
		t.Fatalf("err %v items %+v", res.Err, st.Media)
	}
	urls := checkParts(t, st)
	if st.Media[0].Modality != "video" || st.Media[0].Type != "video/mp4" || !strings.HasPrefix(urls[0], "data:video/mp4;base64,") {
		t.Errorf("video %+v %.30s", st.Media[0], urls[0])
	}
	if st.Media[1].Modality != "audio" || st.Media[1].Type != "audio/wav" || !strings.HasPrefix(urls[1], "data:audio/wav;base64,") {
		t.Errorf("audio %+v %.30s", st.Media[1], urls[1])
	}
}

// ACCEPTANCE 72: rejected before any network call.
func TestFetchRejectedBeforeIO(t *testing.T) {
	var lookups atomic.Int32
	lookup := LookupFunc(func(ctx context.Context, host string) ([]netip.Addr, error) {
		lookups.Add(1)
		return nil, fmt.Errorf("must not resolve")
	})
	n := mustNode(t, `{}`, lookup)
	for _, u := range []string{"file:///etc/passwd", "ftp://h/x.png", "gopher://h/x", "http://h/a\\u0000b.png", "http://h/a\\nb.png", "http://h/a\\u007fb", "//h/x.png"} {
		res, _ := run(t, n, chat(imagePart(u)))
		wantErr(t, res, engine.KindInvalidMedia)
	}
	if lookups.Load() != 0 {
		t.Fatalf("%d lookups", lookups.Load())
	}
}

// ACCEPTANCE 73, 74: size caps.
func TestFetchSizeCaps(t *testing.T) {
	const mib = 1 << 20
	exact := make([]byte, mib)
	copy(exact, pngBytes(t, 2))
	// overDone reports how the /over-cl handler ended: true when celflow
	// dropped the connection before the 64 slow chunks were all written
	// (the body was not read), false when it read them all.
	overDone := make(chan bool, 1)
	srv := newMediaServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		switch r.URL.Path {
		case "/exact":
			_, _ = w.Write(exact)
		case "/over-cl":
			w.Header().Set("Content-Length", strconv.Itoa(mib+1))
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			// Write the body slowly: a client that reads it would keep us here.
			for i := 0; i < 64; i++ {
				if _, err := w.Write(make([]byte, mib/64+1)); err != nil {
					overDone <- true
					return
				}
				select {
				case <-r.Context().Done():
					overDone <- true
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
			overDone <- false
		case "/over-chunked":
			for i := 0; i < 3; i++ {
				_, _ = w.Write(make([]byte, mib/2))
				w.(http.Flusher).Flush()
			}
		}
	})
	n := mustNode(t, `{"allow_loopback":true,"image":{"max_download_size":1}}`, nil)
	res, st := run(t, n, chat(imagePart(srv.URL+"/exact")))
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if urls := checkParts(t, st); urls[0] != "data:image/png;base64,"+base64.StdEncoding.EncodeToString(exact) || st.Media[0].Size != mib {
		t.Fatal("exact-cap body not encoded correctly")
	}
	res, st = run(t, n, chat(imagePart(srv.URL+"/over-cl")))
	wantErr(t, res, engine.KindInvalidMedia, "1048577 bytes", "1 MiB")
	if st.Media != nil {
		t.Error("items after a failure")
	}
	select {
	case early := <-overDone:
		if !early {
			t.Error("a Content-Length over the cap: the body was read to its end")
		}
	case <-time.After(3 * time.Second):
		t.Error("the over-cap download was neither read nor dropped")
	}
	res, _ = run(t, n, chat(imagePart(srv.URL+"/over-chunked")))
	wantErr(t, res, engine.KindInvalidMedia, "larger than the 1 MiB limit")
	res, _ = run(t, n, chat(imagePart(srv.URL+"/exact?1"), imagePart(srv.URL+"/over-chunked"), imagePart(srv.URL+"/exact?3")))
	wantErr(t, res, engine.KindInvalidMedia)
}

// ACCEPTANCE 77: loopback needs allow_loopback, even with private networks open.
func TestFetchLoopbackOptIn(t *testing.T) {
	srv := pngServer(t, pngBytes(t, 2), "image/png")
	for _, params := range []string{`{}`, `{"allow_private_networks":true}`} {
		res, _ := run(t, mustNode(t, params, nil), chat(imagePart(srv.URL+"/a.png")))
		wantErr(t, res, engine.KindInvalidMedia, "loopback")
	}
	if srv.count.Load() != 0 {
		t.Fatal("blocked address was connected to")
	}
	res, _ := run(t, mustNode(t, `{"allow_loopback":true}`, nil), chat(imagePart(srv.URL+"/a.png")))
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	// ::1 when the machine has IPv6 loopback.
	l, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skip("no IPv6 loopback")
	}
	img := pngBytes(t, 2)
	go func() {
		_ = http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(img) }))
	}()
	defer l.Close()
	res, st := run(t, mustNode(t, `{"allow_loopback":true}`, nil), chat(imagePart("http://"+l.Addr().String()+"/a.png")))
	if res.Err != nil || st.Media[0].Type != "image/png" {
		t.Fatalf("::1: %v", res.Err)
	}
	res, _ = run(t, mustNode(t, `{}`, nil), chat(imagePart("http://"+l.Addr().String()+"/a.png")))
	wantErr(t, res, engine.KindInvalidMedia, "loopback")
}

// ACCEPTANCE 75, 78: through real dials — a redirect to the metadata address
// is refused before connecting; a name resolving to loopback (rebinding) is
// refused at dial time.
func TestFetchRedirectAndRebinding(t *testing.T) {
	srv := newMediaServer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://169.254.169.254/latest/meta-data", http.StatusFound)
	})
	n := mustNode(t, `{"allow_loopback":true}`, nil)
	res, _ := run(t, n, chat(imagePart(srv.URL+"/a.png")))
	wantErr(t, res, engine.KindInvalidMedia, "link-local", "blocked")
	img := pngBytes(t, 2)
	target := pngServer(t, img, "image/png")
	rebind := hosts(map[string]string{"localhost": "127.0.0.1", "evil.example": "127.0.0.1", "meta.example": "169.254.169.254", "ten.example": "10.0.0.1"})
	off := mustNode(t, `{}`, rebind)
	for _, h := range []string{"localhost", "evil.example", "meta.example", "ten.example"} {
		res, _ := run(t, off, chat(imagePart("http://"+h+":"+target.port()+"/a.png")))
		wantErr(t, res, engine.KindInvalidMedia, "blocked")
	}
	if target.count.Load() != 0 {
		t.Fatal("blocked target was reached")
	}
	// Redirect hops re-dial through the guard: a loopback hop is refused
	// even when the first hop was public-looking.
	hop := newMediaServer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://localhost:"+target.port()+"/a.png", http.StatusFound)
	})
	res, _ = run(t, mustNode(t, `{"allow_loopback":true}`, hosts(map[string]string{"localhost": "169.254.169.254"})), chat(imagePart(hop.URL+"/x")))
	wantErr(t, res, engine.KindInvalidMedia, "blocked")
}

// ACCEPTANCE 79: allowed_domains on the first URL and every redirect, before connecting.
func TestFetchAllowedDomains(t *testing.T) {
	img := pngBytes(t, 2)
	var srv *mediaServer
	srv = newMediaServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hop" {
			http.Redirect(w, r, "http://other.example:"+srv.port()+"/a.png", http.StatusFound)
			return
		}
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write(img)
	})
	lk := hosts(map[string]string{"img.example": "127.0.0.1", "other.example": "127.0.0.1"})
	n := mustNode(t, `{"allow_loopback":true,"allowed_domains":["Img.Example"]}`, lk)
	res, _ := run(t, n, chat(imagePart("http://IMG.example:"+srv.port()+"/a.png")))
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	srv.count.Store(0)
	res, _ = run(t, n, chat(imagePart("http://other.example:"+srv.port()+"/a.png")))
	wantErr(t, res, engine.KindInvalidMedia, "other.example", "allowed_domains")
	if srv.count.Load() != 0 {
		t.Fatal("disallowed host was contacted")
	}
	res, _ = run(t, n, chat(imagePart("http://img.example:"+srv.port()+"/hop")))
	wantErr(t, res, engine.KindInvalidMedia, "redirect refused", "other.example")
	if srv.count.Load() != 1 {
		t.Fatalf("%d requests, want only the first hop", srv.count.Load())
	}
	// An empty list allows any (guard-approved) host.
	res, _ = run(t, mustNode(t, `{"allow_loopback":true,"allowed_domains":[]}`, lk), chat(imagePart("http://other.example:"+srv.port()+"/a.png")))
	if res.Err != nil {
		t.Fatal(res.Err)
	}
}

// ACCEPTANCE 80: the environment's proxy is never used for media.
func TestFetchIgnoresEnvProxy(t *testing.T) {
	t.Setenv("HTTP_PROXY", "http://127.0.0.1:1")
	t.Setenv("HTTPS_PROXY", "http://127.0.0.1:1")
	img := pngBytes(t, 2)
	srv := pngServer(t, img, "image/png")
	n := mustNode(t, `{"allow_loopback":true}`, hosts(map[string]string{"img.example": "127.0.0.1"}))
	if tr, ok := n.fetch.client.Transport.(*http.Transport); !ok || tr.Proxy != nil {
		t.Fatal("media transport has a Proxy")
	}
	res, _ := run(t, n, chat(imagePart("http://img.example:"+srv.port()+"/a.png")))
	if res.Err != nil {
		t.Fatal(res.Err)
	}
}

// ACCEPTANCE 83: the cache across requests.
func TestFetchCache(t *testing.T) {
	img := pngBytes(t, 4)
	var fail atomic.Bool
	srv := newMediaServer(t, func(w http.ResponseWriter, r *http.Request) {
		if fail.Load() {
			w.WriteHeader(503)
			return
		}
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write(img)
	})
	// Off by default: every request fetches.
	n := mustNode(t, `{"allow_loopback":true}`, nil)
	run(t, n, chat(imagePart(srv.URL+"/a")))
	run(t, n, chat(imagePart(srv.URL+"/a")))
	if srv.count.Load() != 2 {
		t.Fatalf("cache off: %d GETs", srv.count.Load())
	}
	srv.count.Store(0)
	c := mustNode(t, fmt.Sprintf(`{"allow_loopback":true,"cache":{"max_bytes":%d,"ttl":"1m"}}`, len(img)+1), nil)
	res1, st1 := run(t, c, chat(imagePart(srv.URL+"/a")))
	res2, st2 := run(t, c, chat(imagePart(srv.URL+"/a")))
	if res1.Err != nil || res2.Err != nil || srv.count.Load() != 1 || string(st1.Body) != string(st2.Body) {
		t.Fatalf("cache on: %d GETs, errs %v %v", srv.count.Load(), res1.Err, res2.Err)
	}
	if res2.Attrs["celflow.media.cache_hits"] != 1 {
		t.Errorf("hit not recorded: %v", res2.Attrs)
	}
	// A hit still passes this request's checks (scheme/domain are URL checks
	// made first; here the size of the cached entry against a smaller cap).
	// Failures are never cached.
	fail.Store(true)
	for i := 0; i < 2; i++ {
		res, _ := run(t, c, chat(imagePart(srv.URL+"/b")))
		wantErr(t, res, engine.KindMediaFetchFailed, "HTTP 503")
	}
	if srv.count.Load() != 3 {
		t.Fatalf("failure cached: %d GETs", srv.count.Load())
	}
	fail.Store(false)
	run(t, c, chat(imagePart(srv.URL+"/b"))) // evicts /a: the bound is one image
	if c.cache.bytes() > int64(len(img)+1) {
		t.Fatalf("cache holds %d bytes", c.cache.bytes())
	}
	srv.count.Store(0)
	run(t, c, chat(imagePart(srv.URL+"/a")))
	if srv.count.Load() != 1 {
		t.Fatal("evicted entry served from cache")
	}
}

func TestCacheTTL(t *testing.T) {
	c := newCache(100, time.Minute)
	now := time.Unix(1000, 0)
	c.now = func() time.Time { return now }
	c.put("u", "image/png", []byte("abc"))
	if _, _, ok := c.get("u"); !ok {
		t.Fatal("miss")
	}
	now = now.Add(2 * time.Minute)
	if _, _, ok := c.get("u"); ok || c.bytes() != 0 {
		t.Fatal("expired entry served")
	}
	c.put("big", "image/png", make([]byte, 101))
	if c.bytes() != 0 {
		t.Fatal("oversized entry stored")
	}
}

// ACCEPTANCE 84: at most max_concurrent_downloads in flight; the first
// failure cancels the rest.
func TestFetchConcurrencyAndCancel(t *testing.T) {
	var inFlight, peak, cancelled atomic.Int32
	srv := newMediaServer(t, func(w http.ResponseWriter, r *http.Request) {
		cur := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			p := peak.Load()
			if cur <= p || peak.CompareAndSwap(p, cur) {
				break
			}
		}
		if r.URL.Path == "/fail" {
			time.Sleep(50 * time.Millisecond)
			w.WriteHeader(500)
			return
		}
		select {
		case <-r.Context().Done():
			cancelled.Add(1)
		case <-time.After(3 * time.Second):
			_, _ = w.Write(pngBytes(t, 2))
		}
	})
	n := mustNode(t, `{"allow_loopback":true,"max_concurrent_downloads":2}`, nil)
	res, _ := run(t, n, chat(imagePart(srv.URL+"/s1"), imagePart(srv.URL+"/fail"), imagePart(srv.URL+"/s3"),
		imagePart(srv.URL+"/s4"), imagePart(srv.URL+"/s5")))
	wantErr(t, res, engine.KindMediaFetchFailed, "HTTP 500")
	// Let the server observe the cancellations (bounded wait).
	for i := 0; i < 100 && inFlight.Load() > 0; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if peak.Load() > 2 {
		t.Errorf("peak in flight %d, max 2", peak.Load())
	}
	if cancelled.Load() < 1 {
		t.Error("the slow download in flight was not cancelled")
	}
	if srv.count.Load() == 5 && cancelled.Load() < 2 {
		t.Errorf("downloads went on after the failure: %d started, %d cancelled", srv.count.Load(), cancelled.Load())
	}
}

// ACCEPTANCE 191: an already-cancelled context parses and fetches nothing.
func TestFetchCancelledContext(t *testing.T) {
	srv := pngServer(t, pngBytes(t, 2), "image/png")
	n := mustNode(t, `{"allow_loopback":true}`, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, st := runCtx(ctx, n, `{"messages":[not json`+srv.URL)
	wantErr(t, res, engine.KindCancelled)
	if srv.count.Load() != 0 || st.Media != nil {
		t.Fatal("work done on a cancelled context")
	}
	// Cancelled mid-download: the client left.
	slow := newMediaServer(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(3 * time.Second):
		}
	})
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	res, _ = runCtx(ctx, n, chat(imagePart(slow.URL+"/a")))
	wantErr(t, res, engine.KindCancelled)
}
