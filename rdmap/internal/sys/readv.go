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

// WritevMaxIOV is the most iovecs Writev passes to one writev(2), which
// keeps the call free of allocations.
const WritevMaxIOV = 8

// Writev writes the first WritevMaxIOV (at most) slices of iov to the
// socket fd with one writev(2) and returns what it returned: the bytes
// written (perhaps fewer than given), or the bare syscall.Errno (EINTR
// and EAGAIN included). fd must be the descriptor RawConn.Write hands its
// callback. One slice (a small FPDU, which mpa.Writer builds contiguous)
// goes out with write(2), the same for the kernel without the iovec
// array to build and copy in.
func Writev(fd uintptr, iov [][]byte) (int, error) {
	if len(iov) == 1 {
		return unix.Write(int(fd), iov[0])
	}
	if len(iov) > WritevMaxIOV {
		iov = iov[:WritevMaxIOV]
	}
	return unix.Writev(int(fd), iov)
}
