package rdmap_test

import (
	"testing"

	"github.com/gosiw/gosiw/rdmap"
)

// TestRecvSGLBound: a receive may not address more than the 32-bit MO
// reaches. The reproduction posted 16 SGEs over one 260 MiB
// region (4160 MiB): recvMO wrapped under a 4.36 GB Send and the scatter
// loop indexed past the SGL. Such a receive is now refused at post time,
// on a QP and on an SRQ, so recvMO+len never exceeds the SGL total and
// never wraps. The memory is mapped lazily: nothing is touched.
func TestRecvSGLBound(t *testing.T) {
	dev := newDevice(t)
	mem, err := dev.AllocMemory(260 << 20)
	if err != nil {
		t.Fatal(err)
	}
	pd := dev.AllocPD()
	mr, err := pd.RegisterMemory(mem.Bytes(), rdmap.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		mr.Deregister()
		if err := mem.Close(); err != nil {
			t.Error(err)
		}
	}()
	cq, err := dev.CreateCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(&rdmap.QPConfig{SendCQ: cq, RecvCQ: cq, MaxRecvSGE: rdmap.MaxSGE})
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Close()
	srq, err := pd.CreateSRQ(&rdmap.SRQConfig{MaxSGE: rdmap.MaxSGE})
	if err != nil {
		t.Fatal(err)
	}
	defer srq.Close()
	sgl := func(n int, each, last uint32) []rdmap.SGE {
		s := make([]rdmap.SGE, n)
		for i := range s {
			s[i] = rdmap.SGE{MR: mr, Length: each}
		}
		s[n-1].Length = last
		return s
	}
	const quarter = 1 << 28 // 256 MiB
	for _, c := range []struct {
		name string
		sgl  []rdmap.SGE
		ok   bool
	}{
		{"issue-16x260MiB", sgl(16, 260<<20, 260<<20), false},
		{"exactly-4GiB", sgl(16, quarter, quarter), false},
		{"max", sgl(16, quarter, quarter-1), true},
		{"overlapping", sgl(3, 4096, 4096), true},
	} {
		post := map[string]func(rdmap.RecvWR) error{"qp": qp.PostRecv, "srq": srq.PostRecv}
		for _, where := range []string{"qp", "srq"} {
			var total uint64
			for _, s := range c.sgl {
				total += uint64(s.Length)
			}
			err := post[where](rdmap.RecvWR{ID: 1, SGL: c.sgl})
			if c.ok && err != nil {
				t.Errorf("%s %s (%d bytes): %v", where, c.name, total, err)
			}
			if !c.ok && err != rdmap.ErrInvalidWR {
				t.Errorf("%s %s (%d bytes): %v, want ErrInvalidWR", where, c.name, total, err)
			}
		}
	}
}

// TestRecvOverlappingSGEs: overlapping SGEs are allowed; the payload is
// scattered in SGL order, so the later SGE's bytes stay.
func TestRecvOverlappingSGEs(t *testing.T) {
	a, b := pair(t, rdmap.QPConfig{}, nil)
	buf := make([]byte, 8)
	rmr := b.reg(t, buf, rdmap.AccessLocalWrite)
	smr := a.reg(t, []byte("AAAABBBBCCCC"), 0)
	mustPost(t, b.qp.PostRecv(rdmap.RecvWR{ID: 1, SGL: []rdmap.SGE{rmr.SGE(0, 4), rmr.SGE(2, 4), rmr.SGE(4, 4)}}))
	mustPost(t, a.qp.PostSend(rdmap.SendWR{ID: 2, Op: rdmap.WRSend, SGL: []rdmap.SGE{smr.SGE(0, 12)}}))
	wc := poll(t, b.cq)
	expectWC(t, wc, 1, rdmap.WCRecv, rdmap.WCSuccess)
	if wc.ByteLen != 12 || string(buf) != "AABBCCCC" {
		t.Fatalf("received %d bytes, buffer %q, want 12 and \"AABBCCCC\"", wc.ByteLen, buf)
	}
}
