//go:build !linux

package sys

import (
	"errors"
	"os"
	"syscall"
)

// TCPMaxSeg is not supported on this system.
func TCPMaxSeg(c syscall.Conn) (int, error) { return 0, errors.ErrUnsupported }

// Mapping is anonymous memory mapped outside the Go heap (Linux only).
type Mapping struct {
	Data []byte
}

// MapGuarded is not supported on this system.
func MapGuarded(n int, lock bool) (*Mapping, error) { return nil, errors.ErrUnsupported }

// Unmap is a no-op here.
func (m *Mapping) Unmap() error { return nil }

// FileMapping is a file mapped into memory (Linux only).
type FileMapping struct {
	Data []byte
}

// MapFile is not supported on this system.
func MapFile(f *os.File, n int64, writable bool) (*FileMapping, error) {
	return nil, errors.ErrUnsupported
}

// Lock is not supported on this system.
func (m *FileMapping) Lock() error { return errors.ErrUnsupported }

// Unmap is a no-op here.
func (m *FileMapping) Unmap() error { return nil }
