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
	qp, _, mr := engineQP(b, 16, QPConfig{}, make([]byte, size))
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

// smallMsgs is how many messages one op of BenchmarkRxSmall receives,
// and how many receives it keeps posted: test/bench's recvPosted when
// the benchmark was written, 512, which keeps every entry of the RQ in
// cache. test/bench posts 8192 now; with 8192 here (2026-12-07, six runs
// of each on one machine) a Send took 22.4-23.8 ns of CPU (cpu-ns/fpdu)
// against 20.9-22.2.
const (
	smallMsgs  = 512
	smallBatch = 64 // test/bench's pollBatch: completions per Poll, receives per PostRecvs
)

// smallStream returns smallMsgs single-segment messages of size bytes:
// RDMA Writes to consecutive offsets of stag, or Sends with MSN 1 on.
func smallStream(op wire.Opcode, stag STag, size int, crc bool) []byte {
	var out []byte
	payload := make([]byte, size)
	for i := range smallMsgs {
		var h []byte
		if op == wire.OpWrite {
			h = ddp.AppendTagged(nil, &ddp.TaggedFields{
				Last: true, RsvdULP: wire.ControlByte(wire.Version1, op), STag: stag, TO: uint64(i * size),
			})
		} else {
			h = ddp.AppendUntagged(nil, &ddp.UntaggedFields{
				Last: true, RsvdULP: wire.ControlByte(wire.Version1, op), QN: wire.QNSend, MSN: uint32(i + 1),
			})
		}
		out = mpa.AppendFPDU(out, h, payload, crc)
	}
	return out
}

// BenchmarkRxSmall is the receive engine alone on the message-rate
// workload's stream (test/bench: 64-byte Writes and Sends): one op
// receives smallMsgs single-FPDU messages read from memory in chunks of
// at most 64 KiB. For Sends it does what the bench's server does: keeps
// smallMsgs receives posted, polls the CQ smallBatch completions at a
// time and reposts what it reaped as one list; between ops the stream
// starts again at MSN 1 (the untagged sink is reset). ns/fpdu is the
// time per FPDU, reposts and polls included.
func BenchmarkRxSmall(b *testing.B) {
	for _, op := range []wire.Opcode{wire.OpWrite, wire.OpSend} {
		for _, crc := range []bool{false, true} {
			name := "write"
			if op == wire.OpSend {
				name = "send"
			}
			b.Run(fmt.Sprintf("op=%s/crc=%v", name, crc), func(b *testing.B) {
				benchRxSmall(b, op, 64, crc)
			})
		}
	}
}

func benchRxSmall(b *testing.B, op wire.Opcode, size int, crc bool) {
	qp, cq, mr := engineQP(b, 2*smallMsgs, QPConfig{MaxRecvWR: smallMsgs}, make([]byte, smallMsgs*size))
	recvs := make([]RecvWR, smallBatch)
	for i := range recvs {
		recvs[i] = RecvWR{ID: uint64(i), SGL: []SGE{mr.SGE(0, size)}}
	}
	send := op != wire.OpWrite
	if send {
		for n := 0; n < smallMsgs; n += smallBatch {
			if _, err := qp.PostRecvs(recvs); err != nil {
				b.Fatal(err)
			}
		}
	}
	qp.p = mpa.Params{CRC: crc}
	rx := &qp.rx
	rx.init(qp, &cycleConn{data: smallStream(op, mr.STag(), size, crc), max: 64 << 10})
	defer rx.release()
	wcs := make([]WC, smallBatch)
	b.SetBytes(int64(smallMsgs * size))
	b.ReportAllocs()
	cpu := testutil.CPUTime()
	for b.Loop() {
		for i := 0; i < smallMsgs; {
			// As the receive loop does (rx.loop), but for at most the
			// messages up to the next poll.
			n, ti, err := rx.fpdus(smallBatch - i%smallBatch)
			rx.dropRefs()
			if err != nil || ti != nil {
				b.Fatalf("fpdu %d: %v, Terminate %+v", i, err, ti)
			}
			i += n
			if send && i%smallBatch == 0 {
				k := cq.Poll(wcs)
				for j := range k {
					if wcs[j].Status != WCSuccess || wcs[j].ByteLen != uint32(size) {
						b.Fatalf("completion %+v", wcs[j])
					}
				}
				if _, err := qp.PostRecvs(recvs[:k]); err != nil {
					b.Fatal(err)
				}
			}
		}
		rx.untagged.Reset()
	}
	b.ReportMetric(float64(testutil.CPUTime()-cpu)/float64(b.N*smallMsgs), "cpu-ns/fpdu")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*smallMsgs), "ns/fpdu")
}
