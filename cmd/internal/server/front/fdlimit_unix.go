//go:build unix

package front

import "syscall"

// fdLimit is the soft RLIMIT_NOFILE (0 when unknown). Go's os package has
// already raised the soft limit to the hard one at start-up (Go 1.19+, on
// Linux and the BSDs; on macOS to OPEN_MAX at most), so this is the limit
// the process really has.
func fdLimit() uint64 {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) != nil {
		return 0
	}
	return l.Cur
}
