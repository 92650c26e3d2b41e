//go:build linux

package daemon

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// fileMapping is the first bytes of a file mapped shared into memory:
// stores through Data (when writable) reach the file, and changes to the
// file by others show in Data. A mapping of a file that another process
// truncates faults (SIGBUS) where Data lies past the new end.
type fileMapping struct {
	// Data is the mapped memory, len(Data) the size asked for.
	Data []byte
}

// mapFile maps the first n bytes of f, shared; readable only (PROT_READ)
// unless writable is set. f must be open for reading, and for writing too
// when writable is set; it may be closed once mapFile returns (the mapping
// keeps the file). mapFile neither grows nor truncates the file: one
// shorter than n is refused, as a mapping past its end would fault.
func mapFile(f *os.File, n int64, writable bool) (*fileMapping, error) {
	if n <= 0 || int64(int(n)) != n {
		return nil, fmt.Errorf("daemon: mapping size %d", n)
	}
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() < n {
		return nil, fmt.Errorf("daemon: %s holds %d bytes, fewer than the %d to map", f.Name(), st.Size(), n)
	}
	prot := unix.PROT_READ
	if writable {
		prot |= unix.PROT_WRITE
	}
	b, err := unix.Mmap(int(f.Fd()), 0, int(n), prot, unix.MAP_SHARED)
	if err != nil {
		return nil, os.NewSyscallError("mmap", err)
	}
	return &fileMapping{Data: b}, nil
}

// Lock locks the mapped pages into memory (mlock), so that they are never
// paged out; it needs RLIMIT_MEMLOCK of at least len(Data), or
// CAP_IPC_LOCK. Unmap releases the lock with the mapping.
func (m *fileMapping) Lock() error {
	return os.NewSyscallError("mlock", unix.Mlock(m.Data))
}

// Unmap releases the mapping. Data must not be touched afterwards.
func (m *fileMapping) Unmap() error {
	if m.Data == nil {
		return nil
	}
	err := unix.Munmap(m.Data)
	m.Data = nil
	if err != nil {
		return os.NewSyscallError("munmap", err)
	}
	return nil
}
