//go:build !linux

package daemon

import (
	"errors"
	"os"
)

// fileMapping is a file mapped into memory (Linux only).
type fileMapping struct {
	Data []byte
}

// mapFile is not supported on this system.
func mapFile(f *os.File, n int64, writable bool) (*fileMapping, error) {
	return nil, errors.ErrUnsupported
}

// Lock is not supported on this system.
func (m *fileMapping) Lock() error { return errors.ErrUnsupported }

// Unmap is a no-op here.
func (m *fileMapping) Unmap() error { return nil }
