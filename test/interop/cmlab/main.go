// Command cmlab drives gosiw's connection manager against Linux siw in the
// linux-siw-vm lab (see ../lab/README.md):
//
//	cmlab listen  -addr 127.0.0.1:7174 -accept 1 -reject 1
//	cmlab connect -addr 127.0.0.1:17174 [-p2p] [-crc]
//	cmlab p2p-close -addr 127.0.0.1:17174 [-rtr]
//
// listen accepts the first -accept requests (with IRD/ORD 1/1, as rping's
// server), waits for the initiator's first FPDU (rping's Send), then
// disconnects; it rejects the next -reject requests with private data.
// connect connects, reports the outcome, waits for the responder to take
// the first FPDU (the RTR in P2P mode), then disconnects. Both print every
// event with its IRD/ORD and what the handshake settled. p2p-close sends a
// hand-made P2P Request, reads the Reply and closes, with or without
// sending the RTR first (Linux 6.1 hits BUG() in iwcm.c cm_close_handler
// when a P2P initiator closes before its RTR).
package main

import (
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/gosiw/gosiw/cm"
	"github.com/gosiw/gosiw/internal/testutil"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: cmlab listen|connect [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "listen":
		err = listen(os.Args[2:])
	case "connect":
		err = connect(os.Args[2:])
	case "p2p-close":
		err = p2pClose(os.Args[2:])
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cmlab:", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) {
	fmt.Printf("%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
}

func describe(ev *cm.Event) string {
	s := fmt.Sprintf("%v", ev.Type)
	if ev.Type == cm.EventConnectReply {
		s += fmt.Sprintf(" status=%v", ev.Status)
	}
	if ev.Err != nil {
		s += fmt.Sprintf(" err=%q", ev.Err)
	}
	if ev.Type == cm.EventConnectRequest || ev.Type == cm.EventConnectReply || ev.Type == cm.EventEstablished {
		s += fmt.Sprintf(" ird=%d ord=%d", ev.IRD, ev.ORD)
	}
	if ev.Peer != nil {
		f := ev.Peer
		s += fmt.Sprintf(" peer{rev=%d enhanced=%t C=%t M=%t R=%t p2p=%t rtrs=%v ird=%d ord=%d}",
			f.Rev, f.Enhanced, f.CRC, f.Markers, f.Reject, f.P2P, f.RTRs(), f.IRD, f.ORD)
	}
	if len(ev.PrivateData) > 0 {
		s += " private_data=" + hex.EncodeToString(ev.PrivateData)
	}
	if p := ev.Params; p != nil {
		s += fmt.Sprintf(" settled{rev=%d enhanced=%t crc=%t markers_tx=%t markers_rx=%t p2p=%t rtr=%v ird=%d ord=%d}",
			p.Rev, p.Enhanced, p.CRC, p.MarkersTx, p.MarkersRx, p.P2P, p.RTR, p.IRD, p.ORD)
	}
	if ev.RemoteAddr != nil {
		s += " remote=" + ev.RemoteAddr.String()
	}
	return s
}

func newDevice(verbose bool) (*rdmap.Device, *zap.Logger) {
	lg := zap.NewNop()
	if verbose {
		lg, _ = zap.NewDevelopment()
	}
	dev, _ := rdmap.NewDevice(&rdmap.Config{Logger: lg})
	return dev, lg
}

func listen(args []string) error {
	fs := flag.NewFlagSet("listen", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:7174", "listen address (127.0.0.1 or ::1)")
	nAccept := fs.Int("accept", 1, "requests to accept")
	nReject := fs.Int("reject", 1, "requests to reject after those")
	pd := fs.String("reject-pd", "gosiw says no", "private data of the rejects")
	wait := fs.Duration("wait", 120*time.Second, "give up after this long")
	verbose := fs.Bool("v", false, "log the cm at debug level")
	_ = fs.Parse(args)

	dev, lg := newDevice(*verbose)
	type done struct{}
	finished := make(chan done, *nAccept+*nReject)
	seen := 0
	handler := func(id *cm.ID, ev *cm.Event) error {
		logf("cm_id %p: %s", id, describe(ev))
		switch ev.Type {
		case cm.EventConnectRequest:
			seen++
			if seen <= *nAccept {
				q := testutil.NewFakeQP()
				if err := id.Accept(cm.ConnParam{QP: q, IRD: 1, ORD: 1}); err != nil {
					logf("accept: %v", err)
					finished <- done{}
					return nil
				}
				go func() {
					select {
					case <-q.First():
						got, _ := q.Received()
						logf("cm_id %p: first FPDU from the initiator, ULPDU %d bytes: %s", id, len(got[0]), hex.EncodeToString(got[0]))
					case <-q.Done():
						logf("cm_id %p: QP ended before any FPDU: %v", id, q.Err())
					case <-time.After(30 * time.Second):
						logf("cm_id %p: no FPDU within 30 s", id)
					}
					_ = id.Disconnect(false)
				}()
				return nil
			}
			err := id.Reject([]byte(*pd))
			logf("cm_id %p: Reject(%q) = %v", id, *pd, err)
			finished <- done{}
		case cm.EventClose:
			finished <- done{}
		}
		return nil
	}
	l := cm.NewID(dev, handler)
	if err := l.SetConfig(&cm.Config{Logger: lg}); err != nil {
		return err
	}
	if err := l.Listen(*addr, 0); err != nil {
		return err
	}
	defer l.Destroy()
	logf("listening on %v; accepting %d, then rejecting %d", l.LocalAddr(), *nAccept, *nReject)
	timeout := time.After(*wait)
	for i := 0; i < *nAccept+*nReject; i++ {
		select {
		case <-finished:
		case <-timeout:
			return fmt.Errorf("gave up after %v", *wait)
		}
	}
	logf("done")
	return nil
}

func connect(args []string) error {
	fs := flag.NewFlagSet("connect", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:17174", "responder address")
	p2p := fs.Bool("p2p", false, "ask for peer-to-peer mode (RTR)")
	crc := fs.Bool("crc", false, "require CRC")
	rtrs := fs.String("rtrs", "write|read", "RTR types to offer in P2P mode: write|read|send combinations")
	ird := fs.Int("ird", 1, "IRD to ask for")
	ord := fs.Int("ord", 1, "ORD to ask for")
	verbose := fs.Bool("v", false, "log the cm at debug level")
	_ = fs.Parse(args)

	dev, lg := newDevice(*verbose)
	cfg := &cm.Config{Logger: lg, MPA: mpa.Policy{P2P: *p2p, MaxPrivateData: mpa.SiwMaxPrivateData}}
	if *crc {
		cfg.MPA.CRC = mpa.CRCRequired
	}
	for _, r := range strings.Split(*rtrs, "|") {
		switch r {
		case "write":
			cfg.MPA.RTRs |= mpa.RTRSetWrite
		case "read":
			cfg.MPA.RTRs |= mpa.RTRSetRead
		case "send":
			cfg.MPA.RTRs |= mpa.RTRSetSend
		default:
			return fmt.Errorf("unknown RTR type %q", r)
		}
	}
	events := make(chan *cm.Event, 8)
	id := cm.NewID(dev, func(id *cm.ID, ev *cm.Event) error {
		logf("cm_id %p: %s", id, describe(ev))
		events <- ev
		return nil
	})
	defer id.Destroy()
	if err := id.SetConfig(cfg); err != nil {
		return err
	}
	q := testutil.NewFakeQP()
	if err := id.Connect(*addr, cm.ConnParam{QP: q, IRD: *ird, ORD: *ord}); err != nil {
		return err
	}
	ev := <-events
	if ev.Status != cm.StatusOK {
		return fmt.Errorf("connect: %v (%s)", ev.Status, cm.RejectMsg(-int(ev.Status.Errno())))
	}
	<-events // Established
	// Give the responder time to take our first FPDU (the RTR in P2P
	// mode) and tell its ULP, then close.
	select {
	case <-q.Done():
		logf("QP ended: %v", q.Err())
	case <-time.After(2 * time.Second):
	}
	if got, n := q.Received(); n > 0 {
		logf("received %d FPDUs from the responder; first ULPDU %s", n, hex.EncodeToString(got[0]))
	}
	_ = id.Disconnect(false)
	for ev := range events {
		if ev.Type == cm.EventClose {
			break
		}
	}
	logf("closed")
	return nil
}

func p2pClose(args []string) error {
	fs := flag.NewFlagSet("p2p-close", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:17174", "responder address")
	rtr := fs.Bool("rtr", false, "send the chosen RTR before closing")
	_ = fs.Parse(args)
	c, err := net.DialTimeout("tcp", *addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	req := mpa.Frame{Rev: 2, Enhanced: true, IRD: 1, ORD: 1, P2P: true}
	req.SetRTRs(mpa.RTRSetAll)
	b, _ := mpa.AppendFrame(nil, &req)
	if _, err := c.Write(b); err != nil {
		return err
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	hdr := make([]byte, mpa.HeaderLen+mpa.EnhancedLen)
	if _, err := io.ReadFull(c, hdr); err != nil {
		return fmt.Errorf("reading the reply: %w", err)
	}
	var rep mpa.Frame
	if _, err := mpa.ParseFrame(hdr, &rep); err != nil {
		return err
	}
	logf("reply %s: p2p=%t rtrs=%v", hex.EncodeToString(hdr), rep.P2P, rep.RTRs())
	if *rtr {
		f := &mpa.Framer{CRC: rep.CRC}
		if _, err := c.Write(testutil.AppendRTR(nil, f, rep.RTRs().Choose())); err != nil {
			return err
		}
		logf("sent the %v RTR", rep.RTRs().Choose())
		time.Sleep(500 * time.Millisecond)
	}
	logf("closing")
	return nil
}
