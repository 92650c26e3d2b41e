//go:build unix && !(darwin || linux || openbsd)

package sys

// Readv reads from the socket fd into iov and returns the bytes read, or
// the bare syscall.Errno (EINTR and EAGAIN included, for the caller to
// retry or to let the poller wait). golang.org/x/sys has no readv(2) for
// this system: it reads into the first non-empty buffer only (a short
// read). fd must be the descriptor RawConn.Read hands its callback.
func Readv(fd uintptr, iov [][]byte) (int, error) { return readFirst(fd, iov) }
