package upstream

import "net/http"

// CopyReplyHeaders copies a worker reply's headers to the client's, as the
// relay does: hop-by-hop headers, the ones Connection names and
// X-Request-Id (celflow sets its own) stay behind; the worker's value wins.
// For relays that rewrite the body (decode failover, nodes/internal/replay).
func CopyReplyHeaders(dst, src http.Header) { copyReplyHeaders(dst, src) }
