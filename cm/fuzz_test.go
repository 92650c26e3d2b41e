package cm_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gosiw/gosiw/cm"
	"github.com/gosiw/gosiw/internal/testutil"
	"github.com/gosiw/gosiw/mpa"
)

// What the handler (or the test) does with the fuzzed connection's
// ConnectRequest (the first input byte modulo decideCount).
const (
	decideAccept  = iota // Accept in the handler
	decideReject         // Reject in the handler
	decideDestroy        // DestroyFrom in the handler
	decideError          // the handler returns an error (the child is rejected)
	decideHold           // no answer: the test destroys the child later
	decideCount
)

// fuzzSeedFiles returns the MPA frames Linux siw sent in the lab.
func fuzzSeedFiles(f *testing.F, prefix string) [][]byte {
	m, err := filepath.Glob(filepath.Join("testdata", prefix+"*.bin"))
	if err != nil {
		f.Fatal(err)
	}
	var out [][]byte
	for _, name := range m {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// maxFuzzBytes bounds what the peer writes: a listener holding a
// request (or an initiator) does not read, and the writes must fit in the
// sockets' buffers rather than block.
const maxFuzzBytes = 16 << 10

// writeChunks writes b in pieces of chunk bytes (all at once for 0): the
// TCP segmentation the peer chooses. Errors (the other side closed) end
// the writing.
func writeChunks(c net.Conn, b []byte, chunk int) {
	b = b[:min(len(b), maxFuzzBytes)]
	if chunk == 0 {
		chunk = len(b)
	}
	for len(b) > 0 {
		n := min(chunk, len(b))
		if _, err := c.Write(b[:n]); err != nil {
			return
		}
		b = b[n:]
	}
}

// FuzzListener sends the input, after two control bytes, to a listening
// ID as the peer's MPA Request and whatever follows, half-closes and
// reads until the listener's side closes. A Request that reaches the
// handler is answered as the first control byte says. Then a good
// connection must go through the same listener, and the fuzzed child
// must have seen exactly the events its answer allows: nothing after
// ConnectRequest unless it was accepted (then Established, Disconnect,
// Close).
func FuzzListener(f *testing.F) {
	for _, req := range fuzzSeedFiles(f, "siw-mpa-request") {
		for d := range byte(decideCount) {
			f.Add(d, byte(0), req)
		}
		f.Add(byte(decideAccept), byte(1), req)                                 // one byte per segment
		f.Add(byte(decideAccept), byte(0), cat(req, mustHex("000e c140 0000"))) // bytes after the Request
		f.Add(byte(decideAccept), byte(7), req[:21])                            // truncated
	}
	f.Add(byte(decideAccept), byte(0), cat(reqKey, mustHex("1002 0004 00c8 00c8")))        // IRD/ORD over the limit
	f.Add(byte(decideAccept), byte(0), cat(reqKey, mustHex("1002 0004 c001 c001")))        // P2P, Read RTR
	f.Add(byte(decideReject), byte(0), cat(reqKey, mustHex("9002 0004 0001 0001")))        // markers
	f.Add(byte(decideAccept), byte(0), cat(reqKey, mustHex("1002 0002 0001")))             // H without a block
	f.Add(byte(decideAccept), byte(0), cat(reqKey, mustHex("0001 0201"), make([]byte, 8))) // PD_Length 513
	f.Add(byte(decideAccept), byte(0), []byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, decide, chunk byte, data []byte) {
		runListener(t, nil, decide%decideCount, int(chunk), data)
	})
}

// FuzzListenerSMBD is FuzzListener with a listener that takes the
// [MS-SMBD] IRD/ORD header in revision 1 (mpa.Policy.SMBD), seeded with
// Requests that carry one, a short one, a zero one and one over the
// limits.
func FuzzListenerSMBD(f *testing.F) {
	for _, pd := range [][]byte{nil, []byte("1234567"), smbdHdr(1, 1), cat(smbdHdr(4, 8), []byte("ulp")), smbdHdr(0, 1),
		smbdHdr(1, 0), mustHex("20000000 01000000")} {
		for d := range byte(decideCount) {
			f.Add(d, byte(0), mpaFrame(reqKey, "0001", pd))
		}
		f.Add(byte(decideAccept), byte(3), mpaFrame(reqKey, "0001", pd))
		f.Add(byte(decideReject), byte(0), mpaFrame(reqKey, "8001", pd)) // markers
	}
	for _, req := range fuzzSeedFiles(f, "siw-mpa-request") {
		f.Add(byte(decideAccept), byte(0), req) // revision 2: the option does not apply
	}
	f.Fuzz(func(t *testing.T, decide, chunk byte, data []byte) {
		runListener(t, &cm.Config{MPA: mpa.Policy{SMBD: true}}, decide%decideCount, int(chunk), data)
	})
}

func runListener(t *testing.T, cfg *cm.Config, decide byte, chunk int, data []byte) {
	leakOpts := goleak.IgnoreCurrent()
	dev := newDev(t)
	defer dev.Close()
	srv := newRecorder(t)
	var badAddr string
	held := make(chan *cm.ID, 1)
	answered := make(chan error, 1)
	srv.onRequest = func(id *cm.ID, ev *cm.Event) error {
		if ev.RemoteAddr.String() != badAddr {
			return id.Accept(cm.ConnParam{QP: testutil.NewFakeQP(), IRD: 1, ORD: 1})
		}
		var err error
		switch decide {
		case decideAccept:
			err = id.Accept(cm.ConnParam{QP: testutil.NewFakeQP(), IRD: 1, ORD: 1})
		case decideReject:
			err = id.Reject([]byte("no"))
		case decideDestroy:
			id.DestroyFrom(ev)
		case decideError:
			err = errors.New("refused by the test")
		case decideHold:
			held <- id
		}
		answered <- err
		if decide == decideError {
			return err
		}
		return nil
	}
	l := cm.NewID(dev, srv.handle)
	defer l.Destroy()
	if err := l.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if err := l.Listen(testutil.ListenAddr(), 0); err != nil {
		t.Fatal(err)
	}
	raw, err := net.Dial("tcp", l.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	badAddr = raw.LocalAddr().String()
	eof := make(chan error, 1)
	go func() {
		_ = raw.SetReadDeadline(time.Now().Add(waitLimit))
		_, err := io.Copy(io.Discard, raw)
		eof <- err
	}()
	writeChunks(raw, data, chunk)
	_ = raw.(*net.TCPConn).CloseWrite()
	// The listener closes a connection it refuses; a held request stays
	// open until the child is destroyed.
	select {
	case err = <-eof:
	case id := <-held:
		id.Destroy()
		err = <-eof
	}
	if err != nil && !isReset(err) {
		t.Fatalf("the listener's side of the connection did not close: %v", err)
	}

	// Find the fuzzed request's child, if one reached the handler.
	var bad *cm.ID
	srv.mu.Lock()
	for _, x := range srv.all {
		if x.ev.Type == cm.EventConnectRequest && x.ev.RemoteAddr.String() == badAddr {
			if bad != nil {
				t.Fatalf("two ConnectRequests for one connection")
			}
			bad = x.id
		}
	}
	srv.mu.Unlock()
	var acceptErr error
	if bad != nil {
		acceptErr = <-answered
		if decide == decideAccept && acceptErr == nil {
			srv.wait(bad, cm.EventClose)
		}
	}

	// A good connection through the same listener.
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	conn, err := cm.Dial(ctx, l.LocalAddr().String(), dev, cm.ConnParam{QP: testutil.NewFakeQP()})
	if err != nil {
		t.Fatalf("good connection after the fuzzed one: %v", err)
	}
	goodAddr := conn.LocalAddr.String()
	conn.Close()
	var good *cm.ID
	srv.mu.Lock()
	for _, x := range srv.all {
		if x.ev.Type == cm.EventConnectRequest && x.ev.RemoteAddr.String() == goodAddr {
			good = x.id
		}
	}
	srv.mu.Unlock()
	if good == nil {
		t.Fatal("the good connection's request did not reach the handler")
	}
	srv.wait(good, cm.EventClose)
	good.Destroy()
	if bad != nil {
		bad.Destroy()
	}
	l.Destroy()
	// No event may follow Destroy: what was recorded is final.
	if got := srv.types(l); len(got) != 0 {
		t.Errorf("the listening ID got events %v", got)
	}
	if got := srv.types(good); !eqTypes(got, cm.EventConnectRequest, cm.EventEstablished, cm.EventDisconnect, cm.EventClose) {
		t.Errorf("good connection's events %v", got)
	}
	if bad != nil {
		got := srv.types(bad)
		if decide == decideAccept && acceptErr == nil {
			if !eqTypes(got, cm.EventConnectRequest, cm.EventEstablished, cm.EventDisconnect, cm.EventClose) {
				t.Errorf("accepted request's events %v", got)
			}
		} else if !eqTypes(got, cm.EventConnectRequest) {
			t.Errorf("events %v after decision %d (accept error %v)", got, decide, acceptErr)
		}
	}
	dev.Close()
	if err := goleak.Find(leakOpts); err != nil {
		t.Fatalf("goroutines left: %v", err)
	}
}

func isReset(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && !oe.Timeout()
}

// FuzzConnectReply connects an ID to a raw responder that reads the MPA
// Request and answers with the input (after two control bytes), then
// half-closes and reads until the initiator closes. The ID must get one
// ConnectReply (with an error unless StatusOK), then Established,
// Disconnect and Close if and only if it was OK, and nothing after
// Destroy.
func FuzzConnectReply(f *testing.F) {
	for _, rep := range fuzzSeedFiles(f, "siw-mpa-reply") {
		for cfg := range byte(4) {
			f.Add(cfg, byte(0), rep)
		}
		f.Add(byte(0), byte(3), rep)
		f.Add(byte(0), byte(0), cat(rep, mustHex("0016 4143")))
		f.Add(byte(0), byte(0), rep[:20])
	}
	f.Add(byte(0), byte(0), cat(repKey, mustHex("1002 0004 0001 0081")))                   // ORD over the limit
	f.Add(byte(0), byte(0), cat(repKey, mustHex("3002 0007 0000 0000 6e6f21")))            // reject
	f.Add(byte(0), byte(0), cat(repKey, mustHex("1002 0101 0001 0001"), make([]byte, 16))) // PD_Length over
	f.Add(byte(0), byte(0), []byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
	// Revision 1 with the [MS-SMBD] header (bit 3): good, short, zero and
	// over-the-limit headers, a reject with one.
	for _, pd := range [][]byte{nil, []byte("1234567"), smbdHdr(1, 1), cat(smbdHdr(16, 1), []byte("ulp")), smbdHdr(0, 1),
		smbdHdr(1, 0), smbdHdr(1, 129), mustHex("01000000 01000000")} {
		f.Add(byte(8), byte(0), mpaFrame(repKey, "0001", pd))
		f.Add(byte(8|2), byte(0), mpaFrame(repKey, "4001", pd))
		f.Add(byte(8), byte(0), mpaFrame(repKey, "2001", pd))
	}
	f.Fuzz(func(t *testing.T, cfg, chunk byte, data []byte) {
		runConnectReply(t, cfg, int(chunk), data)
	})
}

// Initiator configurations (the first control byte): bit 0 P2P with
// every RTR, bit 1 CRC required, bit 2 destroy the ID in its
// ConnectReply handler, bit 3 revision 1 with the [MS-SMBD] IRD/ORD
// header (mpa.Policy.SMBD).
func runConnectReply(t *testing.T, cfgBits byte, chunk int, data []byte) {
	leakOpts := goleak.IgnoreCurrent()
	dev := newDev(t)
	defer dev.Close()
	ln, err := net.Listen("tcp", testutil.ListenAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peerDone := make(chan error, 1)
	go func() {
		cn, err := ln.Accept()
		if err != nil {
			peerDone <- err
			return
		}
		defer cn.Close()
		_ = cn.SetReadDeadline(time.Now().Add(waitLimit))
		if _, err := readFrameQuiet(cn); err != nil {
			peerDone <- err
			return
		}
		writeChunks(cn, data, chunk)
		_ = cn.(*net.TCPConn).CloseWrite()
		_, err = io.Copy(io.Discard, cn)
		peerDone <- err
	}()
	var pol mpa.Policy
	if cfgBits&1 != 0 {
		pol.P2P, pol.RTRs = true, mpa.RTRSetWrite|mpa.RTRSetRead|mpa.RTRSetSend
	}
	if cfgBits&2 != 0 {
		pol.CRC = mpa.CRCRequired
	}
	if cfgBits&8 != 0 {
		pol.Rev, pol.SMBD = mpa.Rev1, true
	}
	destroyInHandler := cfgBits&4 != 0
	r := newRecorder(t)
	id := cm.NewID(dev, r.handle)
	defer id.Destroy()
	r.onEvent = func(h *cm.ID, ev *cm.Event) error {
		if ev.Type == cm.EventConnectReply && destroyInHandler {
			h.DestroyFrom(ev)
		}
		return nil
	}
	if err := id.SetConfig(&cm.Config{MPA: pol}); err != nil {
		t.Fatal(err)
	}
	q := testutil.NewFakeQP()
	if err := id.Connect(ln.Addr().String(), cm.ConnParam{QP: q, IRD: 1, ORD: 1}); err != nil {
		t.Fatal(err)
	}
	rep := r.wait(id, cm.EventConnectReply).ev
	if (rep.Status == cm.StatusOK) != (rep.Err == nil) {
		t.Fatalf("ConnectReply status %v with error %v", rep.Status, rep.Err)
	}
	if rep.Status == cm.StatusOK && !destroyInHandler {
		r.wait(id, cm.EventClose)
	}
	if err := <-peerDone; err != nil && !isReset(err) {
		t.Fatalf("the initiator did not close the connection: %v", err)
	}
	id.Destroy()
	got := r.types(id)
	switch {
	case destroyInHandler || rep.Status != cm.StatusOK:
		if !eqTypes(got, cm.EventConnectReply) {
			t.Errorf("events %v (status %v, destroyed in the handler %v)", got, rep.Status, destroyInHandler)
		}
	default:
		if !eqTypes(got, cm.EventConnectReply, cm.EventEstablished, cm.EventDisconnect, cm.EventClose) {
			t.Errorf("events %v", got)
		}
	}
	if rep.Status == cm.StatusOK && !destroyInHandler {
		select {
		case <-q.Done():
		default:
			t.Errorf("the connection ended but the QP is not done")
		}
	}
	dev.Close()
	if err := goleak.Find(leakOpts); err != nil {
		t.Fatalf("goroutines left: %v", err)
	}
}
