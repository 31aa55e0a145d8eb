package bench

import (
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"
)

// NewProxy is the practical floor for one hop (issue 7): a bare
// httputil.ReverseProxy to target, with the same upstream pool settings
// celflow uses by default (docs/configuration.md: 256 idle connections per
// host, 4 s idle timeout) so the comparison is not won or lost on connection
// churn. SSE is flushed per write (ReverseProxy does so for
// text/event-stream). GET /healthz answers locally.
//
// One deviation from the zero-configuration proxy: the inbound body is
// wrapped so that it reports EOF after Content-Length bytes by itself.
// Without it, net/http's server closes the inbound body when the proxy
// writes the response headers, the transport's final EOF check on the
// request body then fails, and the transport tears down the upstream
// connection in the middle of a streamed reply (golang/go#40747): about
// 1 stream in 20 was cut here. The wrapper copies nothing.
func NewProxy(target *url.URL) http.Handler {
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     4 * time.Second,
		DisableCompression:  true,
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == "/healthz" {
			w.WriteHeader(http.StatusOK)
			return
		}
		if r.ContentLength > 0 {
			r.Body = &exactBody{ReadCloser: r.Body, left: r.ContentLength}
		}
		rp.ServeHTTP(w, r)
	})
}

// exactBody ends a body of known length without reading past it.
type exactBody struct {
	io.ReadCloser
	left int64
}

func (b *exactBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	if b.left == 0 && err == nil {
		err = io.EOF
	}
	return n, err
}
