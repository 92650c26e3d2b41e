//go:build linux

package rdmaptest

import (
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"
)

// InNetns runs f on an OS thread that has joined the network namespace
// name (one `ip netns add` created, under /var/run/netns) and returns f's
// error, or the error of joining. Sockets f creates belong to that
// namespace and stay there once f returns. The thread is locked to its
// goroutine and thrown away when f returns, never handed back to the
// scheduler in the other namespace. InNetns waits for f; it needs the
// privileges setns(2) needs (root).
func InNetns(name string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // no unlock: the thread dies with the goroutine
		fd, err := unix.Open(filepath.Join("/var/run/netns", name), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- os.NewSyscallError("setns", err)
			return
		}
		errc <- f()
	}()
	return <-errc
}
