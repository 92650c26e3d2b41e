//go:build unix && !(darwin || linux || openbsd)

package sys

import "golang.org/x/sys/unix"

// Readv reads from the socket fd into iov and returns the bytes read, or
// the bare syscall.Errno (EINTR and EAGAIN included, for the caller to
// retry or to let the poller wait). golang.org/x/sys has no readv(2) for
// this system: it reads into the first non-empty buffer only (a short
// read). fd must be the descriptor RawConn.Read hands its callback.
func Readv(fd uintptr, iov [][]byte) (int, error) { return readFirst(fd, iov) }

// WritevMaxIOV is the most iovecs Writev takes from its argument.
const WritevMaxIOV = 8

// Writev writes to the socket fd from iov and returns the bytes written,
// or the bare syscall.Errno (EINTR and EAGAIN included). golang.org/x/sys
// has no writev(2) for this system: it writes the first non-empty buffer
// only (a short write, which every caller handles).
func Writev(fd uintptr, iov [][]byte) (int, error) { return writeFirst(fd, iov) }

// writeFirst is Writev for the systems whose golang.org/x/sys has no
// writev(2): one write(2) of the first non-empty buffer of iov, a short
// writev as far as the caller can tell. It returns 0 and no error when
// every buffer is empty.
func writeFirst(fd uintptr, iov [][]byte) (int, error) {
	for _, b := range iov {
		if len(b) > 0 {
			return unix.Write(int(fd), b)
		}
	}
	return 0, nil
}
