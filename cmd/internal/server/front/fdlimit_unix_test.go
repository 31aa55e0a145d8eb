//go:build unix

package front

import (
	"syscall"
	"testing"
)

// Go raises the soft RLIMIT_NOFILE to the hard limit at start-up (os
// package, Go 1.19+); the derived cap is half of it.
func TestFDLimitRaisedAndDerivedCap(t *testing.T) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		t.Skip(err)
	}
	if l.Cur != l.Max && l.Max != ^uint64(0) {
		t.Errorf("soft RLIMIT_NOFILE %d, hard %d: Go did not raise it", l.Cur, l.Max)
	}
	want := int(min(max(l.Cur/2, minDerivedConns), maxDerivedConns))
	if got := DefaultMaxConnections(); got != want {
		t.Errorf("DefaultMaxConnections() = %d, want %d (limit %d)", got, want, l.Cur)
	}
}
