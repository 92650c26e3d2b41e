package testutil

import (
	"net"
	"strconv"
	"syscall"
	"testing"
)

// RefusedAddr returns a loopback TCP address ("127.0.0.1:port") that
// refuses connections for the rest of the test: the port is bound by a
// socket that never listens, closed by tb.Cleanup. Unlike the port of a
// listener closed at once, no other listener (of this test or of another
// process) can take it meanwhile, so a connection to it never reaches
// anything.
func RefusedAddr(tb testing.TB) string {
	tb.Helper()
	// Not every Unix has SOCK_CLOEXEC: set close-on-exec under ForkLock,
	// as the net package does there, so no child inherits the socket.
	syscall.ForkLock.RLock()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		tb.Fatalf("testutil: socket: %v", err)
	}
	tb.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		tb.Fatalf("testutil: bind: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		tb.Fatalf("testutil: getsockname: %v", err)
	}
	port := sa.(*syscall.SockaddrInet4).Port
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}
