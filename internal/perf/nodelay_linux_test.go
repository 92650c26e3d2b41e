package perf

import (
	"net"
	"testing"

	"golang.org/x/sys/unix"
)

// noDelay reports whether c's socket has TCP_NODELAY set; ok is false
// where the test cannot tell.
func noDelay(t *testing.T, c *net.TCPConn) (on, ok bool) {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var gerr error
	if err := rc.Control(func(fd uintptr) { v, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NODELAY) }); err != nil {
		t.Fatal(err)
	}
	if gerr != nil {
		t.Fatal(gerr)
	}
	return v != 0, true
}
