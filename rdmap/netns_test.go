//go:build linux

package rdmap_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"testing"

	"github.com/gosiw/gosiw/rdmap"
	"github.com/gosiw/gosiw/rdmap/rdmaptest"
)

// netnsPair creates two network namespaces joined by a veth pair (MTU
// 1500) and returns a TCP connection between them.
func netnsPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	ip, err := exec.LookPath("ip")
	if err != nil {
		t.Skip("needs the ip command")
	}
	a, b := fmt.Sprintf("gosiw-rdmap-%d-a", os.Getpid()), fmt.Sprintf("gosiw-rdmap-%d-b", os.Getpid())
	run := func(args ...string) error {
		out, err := exec.Command(ip, args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip %v: %v: %s", args, err, out)
		}
		return nil
	}
	if err := run("netns", "add", a); err != nil {
		t.Skipf("cannot create a network namespace: %v", err)
	}
	t.Cleanup(func() { _ = run("netns", "del", a) })
	if err := run("netns", "add", b); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = run("netns", "del", b) })
	if err := run("-n", a, "link", "add", "va", "type", "veth", "peer", "name", "vb", "netns", b); err != nil {
		t.Skipf("cannot create a veth pair: %v", err)
	}
	for _, args := range [][]string{
		{"-n", a, "addr", "add", "10.199.0.1/24", "dev", "va"},
		{"-n", b, "addr", "add", "10.199.0.2/24", "dev", "vb"},
		{"-n", a, "link", "set", "va", "up"},
		{"-n", b, "link", "set", "vb", "up"},
	} {
		if err := run(args...); err != nil {
			t.Fatal(err)
		}
	}
	var ln net.Listener
	if err := rdmaptest.InNetns(a, func() (err error) {
		ln, err = net.Listen("tcp", "10.199.0.1:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	var cb net.Conn
	if err := rdmaptest.InNetns(b, func() (err error) {
		cb, err = net.Dial("tcp", ln.Addr().String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	ca := <-acc
	if ca == nil {
		t.Fatal("accept failed")
	}
	return ca, cb
}

// TestNetns runs operations between QPs in two network namespaces over a
// veth with a 1500-byte MTU: FPDUs sized to the real MSS.
func TestNetns(t *testing.T) {
	ca, cb := netnsPair(t)
	o := &rdmaptest.Options{CRC: true}
	a := newSide(t, newDevice(t), rdmap.QPConfig{})
	b := newSide(t, newDevice(t), rdmap.QPConfig{})
	t.Cleanup(func() {
		a.qp.Close()
		b.qp.Close()
	})
	if err := b.qp.Start(ca, o.Params(false)); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.Start(cb, o.Params(true)); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(5, 5))
	for _, n := range []int{1, 1447, 1448, 65536, 1 << 20} {
		data := randBytes(r, n)
		src := a.reg(t, data, 0)
		remote := b.reg(t, make([]byte, n), rdmap.AccessLocalWrite|rdmap.AccessRemoteWrite|rdmap.AccessRemoteRead)
		back := a.reg(t, make([]byte, n), rdmap.AccessLocalWrite)
		before := a.qp.Stats().TxFPDUs
		mustPost(t, a.qp.PostSend(rdmap.SendWR{ID: 1, Op: rdmap.WRWrite, SGL: []rdmap.SGE{src.SGE(0, n)}, Remote: rdmap.Remote{STag: remote.STag()}, Signaled: true}))
		expectWC(t, poll(t, a.cq), 1, rdmap.WCWrite, rdmap.WCSuccess)
		// Every FPDU fits one 1448-byte segment.
		if fp := a.qp.Stats().TxFPDUs - before; fp < uint64((n+1447)/1448) {
			t.Fatalf("%d bytes in %d FPDUs: FPDUs larger than the MSS", n, fp)
		}
		mustPost(t, a.qp.PostSend(rdmap.SendWR{ID: 2, Op: rdmap.WRRead, SGL: []rdmap.SGE{back.SGE(0, n)}, Remote: rdmap.Remote{STag: remote.STag()}, Signaled: true}))
		expectWC(t, poll(t, a.cq), 2, rdmap.WCRead, rdmap.WCSuccess)
		if !bytes.Equal(back.Bytes(), data) {
			t.Fatalf("%d bytes: read back differs", n)
		}
	}
	pingPong(t, a, b)
	pingPong(t, b, a)
}
