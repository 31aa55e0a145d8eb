package bench

import (
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
		rp.ServeHTTP(w, r)
	})
}
