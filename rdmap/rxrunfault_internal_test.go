package rdmap

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap/wire"
)

// TestRxRunFault: a memory fault in the middle of a run of small Writes
// or Sends (the tight loops after writeRun and sendRun: writes, sends)
// into a region whose file was truncated under it fails the QP with
// ErrMemoryFault and leaves what a run of one FPDU at a time leaves: the
// FPDUs before the faulting one placed and counted (and, for Sends,
// completed), the faulting one neither counted nor completed (its
// receive flushed with the ones after it), and no placement left
// entered.
func TestRxRunFault(t *testing.T) {
	for _, op := range []wire.Opcode{wire.OpWrite, wire.OpSend} {
		t.Run(op.String(), func(t *testing.T) {
			const size, recvs = 64, 128
			page := unix.Getpagesize()
			mem, f := truncatableMapping(t, 2)
			for i := range mem {
				mem[i] = 0xff
			}
			qp, cq, mr := engineQP(t, 2*recvs, QPConfig{MaxRecvWR: recvs}, mem)
			good := page / size // the messages before the first that lands past the new end
			if op == wire.OpSend {
				for i := range recvs {
					if err := qp.PostRecv(RecvWR{ID: uint64(i), SGL: []SGE{mr.SGE(i*size, size)}}); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := f.Truncate(int64(page)); err != nil {
				t.Fatal(err)
			}
			qp.p = mpa.Params{}
			rx := &qp.rx
			rx.init(qp, &cycleConn{data: smallStream(op, mr.STag(), size, false), max: 64 << 10})
			defer rx.release()
			err := qp.guardRx(func() error {
				for done := 0; done < recvs; {
					n, ti, err := rx.fpdus(recvs - done)
					rx.dropRefs()
					if err != nil || ti != nil {
						t.Errorf("FPDU %d: Terminate %+v, %v, before the fault", done+n, ti, err)
						return err
					}
					done += n
				}
				t.Error("no fault")
				return nil
			})
			if !errors.Is(err, ErrMemoryFault) || !errors.Is(qp.Err(), ErrMemoryFault) {
				t.Fatalf("run: %v, QP error %v; want ErrMemoryFault", err, qp.Err())
			}
			if n := mr.placers.Load(); n != 0 || rx.placing.Load() != nil {
				t.Errorf("%d placers left after the fault", n)
			}
			for i, b := range mem[:page] {
				if b != 0 {
					t.Fatalf("byte %d of the messages before the fault is %#x, not placed", i, b)
				}
			}
			// Counted: published, or kept to be (a Write's are published
			// with the next read, none here).
			st := qp.Stats()
			if fpdus, copied := st.RxFPDUs+rx.counts.fpdus, st.RxPlacedCopied+rx.counts.copied; fpdus != uint64(good) || copied != uint64(good*size) {
				t.Errorf("counted %d FPDUs, %d bytes copied; want %d, %d", fpdus, copied, good, good*size)
			}
			if op != wire.OpSend {
				return
			}
			wcs := make([]WC, 2*recvs)
			n := cq.Poll(wcs)
			if n != recvs {
				t.Fatalf("%d completions, want %d", n, recvs)
			}
			for i, wc := range wcs[:n] {
				want := WC{ID: uint64(i), Op: WCRecv, ByteLen: size, QPN: qp.qpn}
				if i >= good {
					want = WC{ID: uint64(i), Status: WCWRFlushErr, Op: WCRecv, QPN: qp.qpn}
				}
				if wc != want {
					t.Fatalf("completion %d: %+v, want %+v", i, wc, want)
				}
			}
		})
	}
}
