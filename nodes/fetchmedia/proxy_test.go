package fetchmedia

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/celflow/celflow/engine"
)

// connectProxy is a minimal CONNECT proxy recording what it was asked for.
type connectProxy struct {
	*httptest.Server
	count  atomic.Int32
	target atomic.Value // the CONNECT authority
}

func newConnectProxy(t *testing.T) *connectProxy {
	p := &connectProxy{}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.count.Add(1)
		if r.Method != http.MethodConnect {
			http.Error(w, "CONNECT only", http.StatusMethodNotAllowed)
			return
		}
		p.target.Store(r.Host)
		up, err := net.Dial("tcp", r.Host)
		if err != nil {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			up.Close()
			return
		}
		_, _ = conn.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n"))
		go func() { _, _ = io.Copy(up, brw); up.Close() }()
		_, _ = io.Copy(conn, up)
		conn.Close()
	}))
	t.Cleanup(p.Close)
	return p
}

// ACCEPTANCE 81: with an explicit proxy celflow resolves and checks the
// target itself, then asks the proxy for the checked IP literal; the Host
// header keeps the name.
func TestFetchExplicitProxy(t *testing.T) {
	img := pngBytes(t, 2)
	media := pngServer(t, img, "image/png")
	proxy := newConnectProxy(t)
	lk := hosts(map[string]string{"meta.example": "169.254.169.254", "img.example": "127.0.0.1"})
	n := mustNode(t, `{"allow_loopback":true,"proxy":"`+proxy.URL+`"}`, lk)

	res, _ := run(t, n, chat(imagePart("http://meta.example/latest/meta-data")))
	wantErr(t, res, engine.KindInvalidMedia, "blocked")
	if proxy.count.Load() != 0 {
		t.Fatal("the proxy was asked for a blocked target")
	}

	res, st := run(t, n, chat(imagePart("http://img.example:"+media.port()+"/a.png")))
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if st.Media[0].Type != "image/png" || st.Media[0].Size != len(img) {
		t.Errorf("item %+v", st.Media[0])
	}
	if got := proxy.target.Load(); got != "127.0.0.1:"+media.port() {
		t.Errorf("proxy asked for %v, want the checked IP literal", got)
	}
	if got := media.lastHost.Load(); got != "img.example:"+media.port() {
		t.Errorf("Host header %v, want the name", got)
	}

	// Without allow_loopback the checked address is refused before the proxy.
	strict := mustNode(t, `{"proxy":"`+proxy.URL+`"}`, lk)
	proxy.count.Store(0)
	res, _ = run(t, strict, chat(imagePart("http://img.example:"+media.port()+"/a.png")))
	wantErr(t, res, engine.KindInvalidMedia, "loopback")
	if proxy.count.Load() != 0 {
		t.Fatal("the proxy was asked for a blocked target")
	}

	// An unreachable media proxy is celflow's infrastructure failing: 502.
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := l.Addr().String()
	l.Close()
	down := mustNode(t, `{"allow_loopback":true,"proxy":"http://`+dead+`"}`, lk)
	res, _ = run(t, down, chat(imagePart("http://img.example:"+media.port()+"/a.png")))
	e := wantErr(t, res, engine.KindBadGateway, "media proxy unreachable")
	if e.HTTPStatus() != 502 {
		t.Errorf("status %d", e.HTTPStatus())
	}
}
