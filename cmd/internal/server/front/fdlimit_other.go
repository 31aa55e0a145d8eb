//go:build !unix

package front

// fdLimit is unknown off unix: DefaultMaxConnections falls back.
func fdLimit() uint64 { return 0 }
