package fetchmedia

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// fetcher downloads media for one node: a transport that never uses the
// environment's proxy variables, dials only addresses the guard accepts,
// and follows at most maxRedirects redirects, each re-checked.
type fetcher struct {
	cfg    *config
	lookup LookupFunc
	client *http.Client
}

func newFetcher(cfg *config, lookup LookupFunc) *fetcher {
	if lookup == nil {
		lookup = defaultLookup
	}
	f := &fetcher{cfg: cfg, lookup: lookup}
	tr := &http.Transport{
		Proxy:                 nil, // HTTP_PROXY & co. are never used for media
		TLSHandshakeTimeout:   10 * time.Second,
		MaxIdleConns:          64,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       30 * time.Second,
		ForceAttemptHTTP2:     true,
		DisableCompression:    true, // Content-Length is then the real size, checked before reading
		ExpectContinueTimeout: time.Second,
	}
	d := newDialer(cfg.guard, lookup)
	tr.DialContext = d.DialContext
	if cfg.proxy != nil {
		// Every target, http or https, is reached through a CONNECT tunnel
		// to its checked IP literal: the proxy never resolves a name, while
		// Host and TLS SNI (done by the transport over the tunnel) keep it.
		tr.DialContext = (&tunnel{d: d, proxy: cfg.proxy}).DialContext
	}
	f.client = &http.Client{Transport: tr, CheckRedirect: f.checkRedirect}
	return f
}

// close drops the transport's idle connections (Node.Close).
func (f *fetcher) close() { f.client.CloseIdleConnections() }

// rejectError is media the client may not ask for (invalid_media).
type rejectError struct{ msg string }

func (e *rejectError) Error() string { return e.msg }

// fetchError is media that could not be obtained (media_fetch_failed).
type fetchError struct {
	msg   string
	cause error
}

func (e *fetchError) Error() string { return e.msg }
func (e *fetchError) Unwrap() error { return e.cause }

// checkURL applies the checks that need no network: scheme and domain
// allowlist. It runs on the first URL and on every redirect hop.
func (f *fetcher) checkURL(u *url.URL) error {
	if u.Scheme != "http" && u.Scheme != "https" {
		return &rejectError{fmt.Sprintf("URL scheme %q is not allowed (http or https only)", u.Scheme)}
	}
	host := strings.ToLower(u.Hostname())
	if host == "" {
		return &rejectError{"URL has no host"}
	}
	if len(f.cfg.domains) > 0 && !f.cfg.domains[strings.TrimSuffix(host, ".")] {
		return &rejectError{fmt.Sprintf("host %s is not in allowed_domains", host)}
	}
	return nil
}

func (f *fetcher) checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) > maxRedirects {
		return &fetchError{msg: fmt.Sprintf("more than %d redirects", maxRedirects)}
	}
	if err := f.checkURL(req.URL); err != nil {
		return &rejectError{"redirect refused: " + err.Error()}
	}
	return nil
}

// download GETs u and returns the media type (after sniffing) and the
// bytes, enforcing the modality's size cap and type allowlist. The request
// carries no client header, request id or trace context.
func (f *fetcher) download(ctx context.Context, u *url.URL, pol *modPolicy, modality string) (string, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return "", nil, &rejectError{"invalid URL"}
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return "", nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", nil, &fetchError{msg: fmt.Sprintf("media server answered HTTP %d", resp.StatusCode)}
	}
	if resp.ContentLength > pol.maxBytes {
		return "", nil, &tooLargeError{Size: resp.ContentLength, Limit: pol.maxBytes}
	}
	var data []byte
	if resp.ContentLength >= 0 {
		data = make([]byte, resp.ContentLength)
		if _, err := io.ReadFull(resp.Body, data); err != nil {
			return "", nil, readErr(err)
		}
	} else {
		data, err = io.ReadAll(io.LimitReader(resp.Body, pol.maxBytes+1))
		if err != nil {
			return "", nil, readErr(err)
		}
		if int64(len(data)) > pol.maxBytes {
			return "", nil, &tooLargeError{Size: -1, Limit: pol.maxBytes}
		}
	}
	typ := mediaType(resp.Header.Get("Content-Type"))
	if typ == "" || typ == "application/octet-stream" {
		typ = mediaType(http.DetectContentType(data))
	}
	if !pol.types[typ] {
		return "", nil, &rejectError{fmt.Sprintf("media type %s is not allowed for %s", typ, modality)}
	}
	return typ, data, nil
}

func readErr(err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return &fetchError{msg: "media body was truncated", cause: err}
	}
	return err
}

// mediaType strips parameters and lowercases.
func mediaType(ct string) string {
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return strings.ToLower(strings.TrimSpace(ct))
}
