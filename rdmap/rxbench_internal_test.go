package rdmap

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/gosiw/gosiw/ddp"
	"github.com/gosiw/gosiw/internal/testutil"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap/wire"
)

// cycleConn is a net.Conn whose reads serve the same stream forever (at
// most max bytes per read, as a socket returns what has arrived), and
// which has no file descriptor: the receive engine reads it through its
// buffer only.
type cycleConn struct {
	net.Conn // nil: only Read and SetReadDeadline are called
	data     []byte
	off, max int
}

func (c *cycleConn) Read(p []byte) (int, error) {
	n := copy(p[:min(len(p), c.max)], c.data[c.off:])
	c.off = (c.off + n) % len(c.data)
	return n, nil
}

func (c *cycleConn) SetReadDeadline(time.Time) error { return nil }

// writeStream returns the FPDUs of one RDMA Write of size bytes to stag,
// cut into segments of at most ulpdu-14 payload bytes.
func writeStream(stag STag, size, ulpdu int, crc bool) []byte {
	var out []byte
	payload := make([]byte, ulpdu)
	for off := 0; off < size; {
		n, last := ddp.NextSegment(off, size, ulpdu-ddp.TaggedHeaderLen)
		h := ddp.AppendTagged(nil, &ddp.TaggedFields{
			Last: last, RsvdULP: wire.ControlByte(wire.Version1, wire.OpWrite), STag: stag, TO: uint64(off),
		})
		out = mpa.AppendFPDU(out, h, payload[:n], crc)
		off += n
	}
	return out
}

// BenchmarkRxWrite is the receive engine alone (rx.fpdu, from header
// check to placement and commit) on a stream of 1 MiB RDMA Writes in
// FPDUs of one TCP MSS (1448 bytes: a 1500-byte MTU) and of 64 KiB,
// read from memory in chunks of 64 KiB (what one read of a busy socket
// returns). Bytes per op are the payload placed; cpu-ns/op the process
// CPU time.
func BenchmarkRxWrite(b *testing.B) {
	for _, crc := range []bool{false, true} {
		for _, ulpdu := range []int{mpa.MULPDU(1448, false), mpa.MaxULPDU} {
			b.Run(fmt.Sprintf("crc=%v/ulpdu=%d", crc, ulpdu), func(b *testing.B) {
				benchRxWrite(b, ulpdu, crc)
			})
		}
	}
}

func benchRxWrite(b *testing.B, ulpdu int, crc bool) {
	const size = 1 << 20
	dev, err := NewDevice(&Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer dev.Close()
	pd := dev.AllocPD()
	cq, err := dev.CreateCQ(16)
	if err != nil {
		b.Fatal(err)
	}
	defer cq.Close()
	qp, err := pd.CreateQP(&QPConfig{SendCQ: cq, RecvCQ: cq})
	if err != nil {
		b.Fatal(err)
	}
	defer qp.Close()
	mr, err := pd.RegisterMemory(make([]byte, size), AccessLocalWrite|AccessRemoteWrite)
	if err != nil {
		b.Fatal(err)
	}
	defer mr.Deregister()
	stream := writeStream(mr.STag(), size, ulpdu, crc)
	fpdus := 0
	for off := 0; off < size; off += ulpdu - ddp.TaggedHeaderLen {
		fpdus++
	}
	qp.p = mpa.Params{CRC: crc}
	rx := &qp.rx
	rx.init(qp, &cycleConn{data: stream, max: 64 << 10})
	defer rx.release()
	b.SetBytes(size)
	b.ReportAllocs()
	cpu := testutil.CPUTime()
	for b.Loop() {
		for range fpdus {
			ti, err := rx.fpdu()
			rx.dropRefs()
			if err != nil || ti != nil {
				b.Fatalf("fpdu: %v, Terminate %+v", err, ti)
			}
		}
	}
	b.ReportMetric(float64(testutil.CPUTime()-cpu)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*fpdus), "ns/fpdu")
}
