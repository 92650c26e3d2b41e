package rdmap_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gosiw/gosiw/rdmap"
)

// TestDirectSendFault: a direct send whose source is registered memory
// that faults (a file mapping truncated under it) fails the QP with
// ErrMemoryFault and the local catastrophic Terminate, on the poster's
// goroutine, without a panic and without writing any of the FPDU:
// PostSend returns, and the peer reads the Terminate and then the end of
// the stream.
func TestDirectSendFault(t *testing.T) {
	for _, crc := range []bool{false, true} {
		t.Run(fmt.Sprintf("crc=%v", crc), func(t *testing.T) {
			v, p, _, _ := directVictim(t, crc)
			mr, page := truncatedSource(t, v)
			rdmap.WaitTxParked(v.qp)
			// Past the new end: the copy into the FPDU faults.
			mustPost(t, v.qp.PostSend(rdmap.SendWR{ID: 1, Op: rdmap.WRSend, SGL: []rdmap.SGE{mr.SGE(2*page, 64)}, Signaled: true}))
			if err := v.qp.Err(); !errors.Is(err, rdmap.ErrMemoryFault) {
				t.Fatalf("QP error %v after the faulting send, want ErrMemoryFault", err)
			}
			p.ExpectTerminate(20 * time.Second)
			p.ExpectEOF(20 * time.Second)
		})
	}
}

// truncatedSource registers on v four pages of a file mapping of which
// the file keeps only the first (page bytes): a copy from past it
// faults.
func truncatedSource(t *testing.T, v *side) (*rdmap.MR, int) {
	t.Helper()
	page := unix.Getpagesize()
	mem, f := rdmap.TruncatableMapping(t, 4)
	mr := v.reg(t, mem, rdmap.AccessLocalWrite)
	if err := f.Truncate(int64(page)); err != nil {
		t.Fatal(err)
	}
	return mr, page
}
