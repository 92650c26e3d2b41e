//go:build !linux

package sys

import (
	"errors"
	"syscall"
)

// TCPMaxSeg is not supported on this system.
func TCPMaxSeg(c syscall.Conn) (int, error) { return 0, errors.ErrUnsupported }

// TCPMaxSegFD is not supported on this system.
func TCPMaxSegFD(fd uintptr) (int, error) { return 0, errors.ErrUnsupported }

// Mapping is anonymous memory mapped outside the Go heap (Linux only).
type Mapping struct {
	Data []byte
}

// MapGuarded is not supported on this system.
func MapGuarded(n int, lock bool) (*Mapping, error) { return nil, errors.ErrUnsupported }

// Unmap is a no-op here.
func (m *Mapping) Unmap() error { return nil }
