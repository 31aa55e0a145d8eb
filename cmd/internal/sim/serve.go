package sim

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// DefaultKeepAlive is uvicorn's idle keep-alive, which vLLM runs behind: a
// client that pools connections longer meets server-closed connections, as
// it would in production (uvicorn closes idle connections after 5 s).
const DefaultKeepAlive = 5 * time.Second

// Serve listens on addr, prints `listening on http://HOST:PORT` as the first
// line of out (so a test can start it on port 0 and read the address), and
// serves h until ctx ends; then it shuts down, giving in-flight requests up
// to 5 s. keepAlive is the idle timeout of client connections.
func Serve(ctx context.Context, addr string, h http.Handler, out io.Writer, keepAlive time.Duration) error {
	return ServeTLS(ctx, addr, h, out, keepAlive, nil)
}

// ServeTLS is Serve with TLS when conf is set (HTTP/1.1 only, as vLLM's
// uvicorn serves it); the first line then reads `listening on https://…`.
func ServeTLS(ctx context.Context, addr string, h http.Handler, out io.Writer, keepAlive time.Duration, conf *tls.Config) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: keepAlive, TLSConfig: conf,
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){}}
	scheme := "http"
	if conf != nil {
		scheme = "https"
	}
	if _, err := fmt.Fprintf(out, "listening on %s://%s\n", scheme, ln.Addr()); err != nil {
		ln.Close()
		return err
	}
	errc := make(chan error, 1)
	go func() {
		if conf != nil {
			errc <- srv.ServeTLS(ln, "", "")
			return
		}
		errc <- srv.Serve(ln)
	}()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
