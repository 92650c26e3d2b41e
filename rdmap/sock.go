package rdmap

import (
	"net"
	"os"
	"syscall"

	"github.com/gosiw/gosiw/rdmap/internal/sys"
)

// Socket helpers of the engines: the EMSS, abort, the pending socket
// error and half-close.

// emssOf returns the connection's EMSS: TCP_MAXSEG, or defaultEMSS for a
// connection without one.
func emssOf(c net.Conn) int {
	if sc, ok := c.(syscall.Conn); ok {
		if mss, err := sys.TCPMaxSeg(sc); err == nil && mss > 0 {
			return mss
		}
	}
	return defaultEMSS
}

// abortConn resets the connection: RST instead of FIN (SO_LINGER 0).
func abortConn(c net.Conn) {
	if c == nil {
		return
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// rawConnOf returns the connection's RawConn, or nil when it has none
// (net.Pipe, for instance: then every send goes through the send
// goroutine, and placements read through the connection).
func rawConnOf(c any) syscall.RawConn {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// sockError returns the socket's pending error (SO_ERROR; reading it
// clears it), or nil for a connection without one.
func sockError(c net.Conn) error {
	rc := rawConnOf(c)
	if rc == nil {
		return nil
	}
	var serr int
	if err := rc.Control(func(fd uintptr) {
		serr = sys.SockError(fd)
	}); err != nil || serr == 0 {
		return nil
	}
	return os.NewSyscallError("recv", syscall.Errno(serr))
}

// closeWrite sends a FIN if the connection supports half-close. It
// reports false when it does not.
func closeWrite(c net.Conn) bool {
	cw, ok := c.(interface{ CloseWrite() error })
	if !ok {
		return false
	}
	_ = cw.CloseWrite()
	return true
}
