package rdmap

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestGuardFaults: the engines' guard turns a fault in registered memory
// (SIGBUS on a truncated file mapping) and EFAULT into the QP's
// ErrMemoryFault, and lets every other panic through (a nil dereference
// is a bug, not a fault to hide).
func TestGuardFaults(t *testing.T) {
	dev, _ := NewDevice(nil)
	defer dev.Close()
	pd := dev.AllocPD()
	cq, _ := dev.CreateCQ(4)
	defer cq.Close()
	newQP := func() *QP {
		qp, err := pd.CreateQP(&QPConfig{SendCQ: cq, RecvCQ: cq})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { qp.Close() })
		return qp
	}

	page := unix.Getpagesize()
	mem, f := truncatableMapping(t, 4)
	mr, err := pd.RegisterMemory(mem, AccessLocalWrite|AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Deregister()
	if err := f.Truncate(int64(page)); err != nil {
		t.Fatal(err)
	}
	var sink byte
	touch := func() error { sink += mem[2*page]; return nil } // past the new end

	for _, c := range []struct {
		name string
		run  func(qp *QP) error
	}{
		{"rx", func(qp *QP) error { return qp.guardRx(touch) }},
		{"tx", func(qp *QP) error {
			p, err := qp.guardTx(func() (bool, error) { return false, touch() })
			if !p || err != nil {
				t.Errorf("tx fault: progressed %v, err %v; want the engine to go on to the Terminate", p, err)
			}
			return qp.Err()
		}},
		{"rx-placing", func(qp *QP) error {
			// A fault in the middle of a placement leaves the placement,
			// so that a fence (Deregister) does not wait for it forever.
			err := qp.guardRx(func() error {
				if !qp.rx.enterPlace(mr, mr.st.Load()) {
					t.Fatal("enterPlace refused a valid region")
				}
				return touch()
			})
			if n := mr.placers.Load(); n != 0 || qp.rx.placing.Load() != nil {
				t.Errorf("rx-placing: %d placers left after the fault", n)
			}
			return err
		}},
		{"rx-efault", func(qp *QP) error {
			return qp.guardRx(func() error { return os.NewSyscallError("readv", syscall.EFAULT) })
		}},
		{"tx-efault", func(qp *QP) error {
			_, err := qp.guardTx(func() (bool, error) { return false, os.NewSyscallError("writev", syscall.EFAULT) })
			return err
		}},
	} {
		qp := newQP()
		err := c.run(qp)
		var mf *MemoryFaultError
		if !errors.Is(err, ErrMemoryFault) || !errors.As(err, &mf) {
			t.Errorf("%s: %v, want ErrMemoryFault", c.name, err)
			continue
		}
		if !errors.Is(qp.Err(), ErrMemoryFault) {
			t.Errorf("%s: QP error %v", c.name, qp.Err())
		}
		if c.name == "rx" || c.name == "rx-placing" || c.name == "tx" {
			if lo, hi := sliceRange(mem); mf.Addr < lo || mf.Addr >= hi {
				t.Errorf("%s: fault address %#x outside the mapping", c.name, mf.Addr)
			}
		}
	}

	// A nil dereference is not a memory fault: it panics on.
	defer func() {
		if v := recover(); v == nil {
			t.Error("a nil dereference was swallowed")
		}
	}()
	var p *int
	_ = newQP().guardRx(func() error { sink += byte(*p); return nil })
}

// truncatableMapping maps a file of pages pages, shared, for a test that
// truncates the file (f.Truncate) to make accesses past the new end
// fault (SIGBUS). It skips the test where the mapping is refused; the
// mapping and the file go at the test's end.
func truncatableMapping(t testing.TB, pages int) ([]byte, *os.File) {
	t.Helper()
	page := unix.Getpagesize()
	f, err := os.Create(filepath.Join(t.TempDir(), "m.img"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := f.Truncate(int64(pages * page)); err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, pages*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	return mem, f
}
