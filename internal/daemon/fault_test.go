package daemon

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gosiw/gosiw/cm"
	"github.com/gosiw/gosiw/internal/proto"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap"
	"github.com/gosiw/gosiw/rdmap/wire"
)

// TestTruncatedFileRegion: a file-backed region whose file another
// process truncates while it is mapped does not kill siwd. A client
// RDMA-Reads the region with CRC on (so siwd's send engine touches the
// pages in user space: SIGBUS) and without CRC (the kernel's writev meets
// them: EFAULT), or RDMA-Writes it (siwd's receive engine: readv's EFAULT,
// or the CRC over placed bytes); each time that connection alone fails,
// with a Terminate or a close, while a second client keeps reading and
// writing another region, and siwd goes on serving new connections.
func TestTruncatedFileRegion(t *testing.T) {
	for _, c := range []struct {
		name     string
		crc      bool
		op       rdmap.WROpcode
		buffered bool
	}{
		{"read-crc", true, rdmap.WRRead, false},
		{"read-nocrc", false, rdmap.WRRead, false},
		{"write-crc", true, rdmap.WRWrite, false},
		{"write-nocrc", false, rdmap.WRWrite, false},
	} {
		t.Run(c.name, func(t *testing.T) { testTruncatedRegion(t, c.crc, c.op) })
	}
}

func testTruncatedRegion(t *testing.T, crc bool, faultOp rdmap.WROpcode) {
	const size = 1 << 20
	file := filepath.Join(t.TempDir(), "data.img")
	data := bytes.Repeat([]byte{0x5a}, size)
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	s, m, stop := startServer(t, &Config{Listen: "127.0.0.1:0", ShutdownTimeout: 5 * time.Second,
		Regions: []Region{{Name: "file", Size: size, File: file, Access: proto.AccessRead | proto.AccessWrite},
			{Name: "mem", Size: 64 << 10, Access: proto.AccessRead | proto.AccessWrite}}})
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dev, _ := rdmap.NewDevice(nil)
	defer dev.Close()
	pd := dev.AllocPD()
	policy := mpa.Policy{}
	if crc {
		policy.CRC = mpa.CRCRequired
	}
	type client struct {
		conn *cm.Conn
		qp   *rdmap.QP
		cq   *rdmap.CQ
		stag rdmap.STag
		buf  []byte
		mr   *rdmap.MR
	}
	dial := func(region string) *client {
		t.Helper()
		cq, _ := dev.CreateCQ(16)
		t.Cleanup(func() { cq.Close() })
		qp, _ := pd.CreateQP(&rdmap.QPConfig{SendCQ: cq, RecvCQ: cq})
		t.Cleanup(func() { qp.Close() })
		conn, err := (&cm.Dialer{Config: &cm.Config{MPA: policy}}).Dial(ctx, s.Addr().String(), dev,
			cm.ConnParam{QP: qp, IRD: 4, ORD: 4, PrivateData: []byte(proto.RegionPrefix + region)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		stag, _, _, err := proto.ParseRegionReply(conn.PrivateData)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 256<<10)
		mr, _ := pd.RegisterMemory(buf, rdmap.AccessLocalWrite)
		return &client{conn: conn, qp: qp, cq: cq, stag: stag, buf: buf, mr: mr}
	}
	var a *client // the client of the file region
	// op posts one RDMA operation and waits for its completion.
	op := func(c *client, o rdmap.WROpcode, off uint64) rdmap.WCStatus {
		t.Helper()
		n := len(c.buf)
		if c != a {
			n = 64 << 10 // the "mem" region
		}
		if err := c.qp.PostSend(rdmap.SendWR{ID: 1, Op: o, SGL: []rdmap.SGE{c.mr.SGE(0, n)},
			Remote: rdmap.Remote{STag: c.stag, Offset: off}, Signaled: true}); err != nil {
			return rdmap.WCGeneralErr
		}
		var wc [1]rdmap.WC
		for c.cq.Poll(wc[:]) == 0 {
			if err := c.cq.Wait(ctx); err != nil {
				t.Fatal(err)
			}
		}
		return wc[0].Status
	}

	a = dial("file")
	b := dial("mem")
	if st := op(a, rdmap.WRRead, 0); st != rdmap.WCSuccess || a.buf[0] != 0x5a {
		t.Fatalf("read before the truncation: %v", st)
	}
	// Another process truncates the file: the pages past 4 KiB are gone.
	if err := os.Truncate(file, 4096); err != nil {
		t.Fatal(err)
	}
	if st := op(a, faultOp, 512<<10); st == rdmap.WCSuccess && faultOp == rdmap.WRRead {
		t.Fatal("a read of truncated pages succeeded")
	}
	<-a.conn.Done()
	var te *rdmap.TerminateError
	if err := a.qp.Err(); crc && faultOp == rdmap.WRRead && (!errors.As(err, &te) || !te.Remote || te.EType != wire.ETypeLocalCatastrophic) {
		t.Errorf("client of the truncated region: %v, want siwd's local catastrophic Terminate", err)
	} else {
		t.Logf("client of the truncated region: %v", err)
	}
	// The other client carries on, and siwd takes new connections.
	for i := range 4 {
		if st := op(b, rdmap.WRWrite, 0); st != rdmap.WCSuccess {
			t.Fatalf("write %d on the other region: %v", i, st)
		}
		if st := op(b, rdmap.WRRead, 0); st != rdmap.WCSuccess {
			t.Fatalf("read %d on the other region: %v", i, st)
		}
	}
	c := dial("mem")
	if st := op(c, rdmap.WRRead, 0); st != rdmap.WCSuccess {
		t.Fatalf("a new connection: %v", st)
	}
	waitCounter(ctx, t, m, `siwd_connections`, "2")
}
