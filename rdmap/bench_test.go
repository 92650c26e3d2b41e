package rdmap_test

import (
	"fmt"
	"testing"

	"github.com/gosiw/gosiw/internal/testutil"
	"github.com/gosiw/gosiw/rdmap"
	"github.com/gosiw/gosiw/rdmap/rdmaptest"
)

// BenchmarkWrite streams RDMA Writes over loopback TCP with up to depth
// outstanding, reaping completions as they come.
func BenchmarkWrite(b *testing.B) {
	for _, crc := range []bool{false, true} {
		for _, size := range []int{64, 4 << 10, 64 << 10, 1 << 20} {
			b.Run(fmt.Sprintf("crc=%v/%d", crc, size), func(b *testing.B) {
				benchStream(b, rdmap.WRWrite, size, &rdmaptest.Options{CRC: crc})
			})
		}
	}
}

// BenchmarkWriteLargeFPDU is BenchmarkWrite with the gosiw-to-gosiw
// opt-in for 64 KiB FPDUs instead of MSS-sized ones.
func BenchmarkWriteLargeFPDU(b *testing.B) {
	benchStreamCfg(b, rdmap.WRWrite, 1<<20, rdmap.QPConfig{MaxULPDU: 65535}, &rdmaptest.Options{CRC: true})
}

// BenchmarkRead streams RDMA Reads.
func BenchmarkRead(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			benchStream(b, rdmap.WRRead, size, &rdmaptest.Options{})
		})
	}
}

// BenchmarkSend streams Sends into pre-posted receives.
func BenchmarkSend(b *testing.B) {
	for _, size := range []int{64, 64 << 10} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			benchStream(b, rdmap.WRSend, size, &rdmaptest.Options{})
		})
	}
}

func benchStream(b *testing.B, op rdmap.WROpcode, size int, o *rdmaptest.Options) {
	benchStreamCfg(b, op, size, rdmap.QPConfig{}, o)
}

func benchStreamCfg(b *testing.B, op rdmap.WROpcode, size int, cfg rdmap.QPConfig, o *rdmaptest.Options) {
	const depth = 32
	cfg.MaxSendWR, cfg.MaxRecvWR = depth, 2*depth
	a, p := pair(b, cfg, o)
	src := a.reg(b, make([]byte, size), rdmap.AccessLocalWrite)
	dst := p.reg(b, make([]byte, size), rdmap.AccessLocalWrite|rdmap.AccessRemoteWrite|rdmap.AccessRemoteRead)
	wr := rdmap.SendWR{Op: op, SGL: []rdmap.SGE{src.SGE(0, size)}, Remote: rdmap.Remote{STag: dst.STag()}, Signaled: true}
	recv := rdmap.RecvWR{SGL: []rdmap.SGE{dst.SGE(0, size)}}
	wcs := make([]rdmap.WC, depth)
	if op == rdmap.WRSend {
		for range 2 * depth {
			mustPost(b, p.qp.PostRecv(recv))
		}
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	cpu := testutil.CPUTime()
	defer func() { b.ReportMetric(float64(testutil.CPUTime()-cpu)/float64(b.N), "cpu-ns/op") }()
	// Sends need receive credits: iWARP has no receiver-not-ready retry,
	// a Send without a posted receive ends the connection. The sender
	// keeps at most 2*depth Sends beyond what the receiver has reaped.
	posted, done, received := 0, 0, 0
	for done < b.N {
		for posted < b.N && posted-done < depth && (op != rdmap.WRSend || posted-received < 2*depth) {
			mustPost(b, a.qp.PostSend(wr))
			posted++
		}
		if op == rdmap.WRSend {
			for k := p.cq.Poll(wcs); k > 0; k-- {
				mustPost(b, p.qp.PostRecv(recv))
				received++
			}
		}
		n := a.cq.Poll(wcs)
		switch {
		case n > 0:
			done += n
		case posted > done:
			waitOne(b, a.cq, wcs)
			done++
		case op == rdmap.WRSend && posted-received >= 2*depth:
			waitOne(b, p.cq, wcs)
			mustPost(b, p.qp.PostRecv(recv))
			received++
		}
	}
}
