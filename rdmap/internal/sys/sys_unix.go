//go:build unix

package sys

import "golang.org/x/sys/unix"

// SockError returns and clears the pending error of the socket fd
// (SO_ERROR), 0 when there is none or it cannot be read. fd must be the
// descriptor RawConn.Control hands its callback.
func SockError(fd uintptr) int {
	serr, _ := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR)
	return serr
}

// readFirst is Readv for the systems whose golang.org/x/sys has no
// readv(2): one read(2) into the first non-empty buffer of iov, a short
// readv as far as the caller can tell (readv may always return fewer
// bytes than iov holds). It returns 0 and no error when every buffer is
// empty, as readv does.
func readFirst(fd uintptr, iov [][]byte) (int, error) {
	for _, b := range iov {
		if len(b) > 0 {
			return unix.Read(int(fd), b)
		}
	}
	return 0, nil
}
