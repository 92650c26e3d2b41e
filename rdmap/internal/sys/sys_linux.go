//go:build linux

package sys

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// control runs f on the file descriptor of c.
func control(c syscall.Conn, op string, f func(fd int) error) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = f(int(fd)) }); err != nil {
		return err
	}
	if ferr != nil {
		return os.NewSyscallError(op, ferr)
	}
	return nil
}

// TCPMaxSegFD returns the TCP_MAXSEG of the socket fd, for a
// syscall.RawConn's Control (0 and the error when getsockopt fails).
func TCPMaxSegFD(fd uintptr) (int, error) {
	v, err := unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_MAXSEG)
	if err != nil {
		return 0, err
	}
	return v, nil
}

// TCPMaxSeg returns the connection's TCP_MAXSEG: the largest segment the
// kernel sends on it (the EMSS of RFC 5044 §4.5).
func TCPMaxSeg(c syscall.Conn) (int, error) {
	var mss int
	err := control(c, "getsockopt", func(fd int) (err error) {
		mss, err = TCPMaxSegFD(uintptr(fd))
		return err
	})
	return mss, err
}

// Mapping is anonymous memory mapped outside the Go heap: Data, with an
// inaccessible guard page right after its end and another one page before
// its start. A touch of either guard page is a fault, so a stray access
// past a region is caught at once instead of corrupting a neighbour.
type Mapping struct {
	whole []byte
	// Data is the usable memory: len(Data) is the size asked for, it
	// starts 8-byte aligned and ends at most 7 bytes before the trailing
	// guard page.
	Data   []byte
	locked bool
}

// MapGuarded maps n bytes of zeroed, private, anonymous memory between
// two guard pages. With lock set it also pins the pages (mlock), which
// fails when RLIMIT_MEMLOCK is too low.
func MapGuarded(n int, lock bool) (*Mapping, error) {
	if n <= 0 {
		return nil, fmt.Errorf("sys: mapping size %d", n)
	}
	page := unix.Getpagesize()
	size := (n + page - 1) &^ (page - 1)
	whole, err := unix.Mmap(-1, 0, size+2*page, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, os.NewSyscallError("mmap", err)
	}
	inner := whole[page : page+size]
	if err := unix.Mprotect(inner, unix.PROT_READ|unix.PROT_WRITE); err != nil {
		_ = unix.Munmap(whole)
		return nil, os.NewSyscallError("mprotect", err)
	}
	m := &Mapping{whole: whole}
	if lock {
		if err := unix.Mlock(inner); err != nil {
			_ = unix.Munmap(whole)
			return nil, os.NewSyscallError("mlock", err)
		}
		m.locked = true
	}
	start := size - (n+7)&^7
	m.Data = inner[start : start+n : start+n]
	return m, nil
}

// Unmap releases the mapping. Data must not be touched afterwards.
func (m *Mapping) Unmap() error {
	if m.whole == nil {
		return nil
	}
	if m.locked {
		_ = unix.Munlock(m.whole)
	}
	err := unix.Munmap(m.whole)
	m.whole, m.Data = nil, nil
	if err != nil {
		return os.NewSyscallError("munmap", err)
	}
	return nil
}
