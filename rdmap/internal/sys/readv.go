//go:build darwin || linux || openbsd

package sys

import "golang.org/x/sys/unix"

// Readv reads from the socket fd into iov with one readv(2) and returns
// what it returned: the bytes read, or the bare syscall.Errno (EINTR and
// EAGAIN included, for the caller to retry or to let the poller wait).
// fd must be the descriptor RawConn.Read hands its callback.
func Readv(fd uintptr, iov [][]byte) (int, error) {
	return unix.Readv(int(fd), iov)
}
