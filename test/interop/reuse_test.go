//go:build interop

package interop

import (
	"net"
	"os/exec"
	"testing"

	"github.com/gosiw/gosiw/ddp"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap/wire"
)

// TestInteropReusedPorts: two connections on one port pair, the first
// through its MPA handshake to an FPDU, the second a handshake alone.
// Whatever tshark says of the second (its MPA dissector keeps the first
// one's state: this tshark calls the Request and the Reply malformed
// FPDUs), the capture check must not fail on it, and no frame of the
// first may be excused. Needs tshark (no guest).
func TestInteropReusedPorts(t *testing.T) {
	if _, err := exec.LookPath("tshark"); err != nil {
		t.Skip("tshark is not installed")
	}
	host, guest := net.IPv4(10, 0, 2, 2), net.IPv4(10, 0, 2, 15)
	const hp, gp = 40001, 7174
	// Revision 2 enhanced (RFC 6581, IRD and ORD 1), as gosiw and siw
	// send them; then a Send of 16 bytes, the last of its message.
	req, err := mpa.AppendFrame(nil, &mpa.Frame{Rev: 2, Enhanced: true, IRD: 1, ORD: 1})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := mpa.AppendFrame(nil, &mpa.Frame{Reply: true, Rev: 2, Enhanced: true, IRD: 1, ORD: 1})
	if err != nil {
		t.Fatal(err)
	}
	hdr := make([]byte, ddp.UntaggedHeaderLen)
	ddp.PutUntagged(hdr, &ddp.UntaggedFields{Last: true, RsvdULP: wire.ControlByte(wire.Version1, wire.OpSend), QN: wire.QNSend, MSN: 1})
	send := mpa.AppendFPDU(nil, hdr, make([]byte, 16), false)
	var pkts [][]byte
	conn := func(c, s uint32, fpdu bool) {
		pkts = append(pkts,
			frame(t, host, guest, hp, gp, c, 0, true, false, nil),
			frame(t, guest, host, gp, hp, s, c+1, true, true, nil),
			frame(t, host, guest, hp, gp, c+1, s+1, false, true, nil),
			frame(t, host, guest, hp, gp, c+1, s+1, false, true, req),
			frame(t, guest, host, gp, hp, s+1, c+1+uint32(len(req)), false, true, rep))
		if fpdu {
			pkts = append(pkts, frame(t, host, guest, hp, gp, c+1+uint32(len(req)), s+1+uint32(len(rep)), false, true, send))
		}
	}
	conn(1000, 5000, true)
	conn(90000, 70000, false)
	path := writeCapture(t, "reuse.pcap", pkts)

	rout, err := exec.Command("tshark", "-r", path, "-Y", "tcp.analysis.reused_ports",
		"-T", "fields", "-e", "frame.number", "-e", "tcp.srcport", "-e", "tcp.dstport").Output()
	if err != nil {
		t.Fatal(err)
	}
	reused := parseReusedPorts(string(rout))
	if got := reused[portPair("7174", "40001")]; got != 7 {
		t.Fatalf("reused ports %v, want 7174-40001 from frame 7 (the second SYN)", reused)
	}
	vout, err := exec.Command("tshark", "-r", path, "--disable-protocol", "rpcordma", "-Y", "iwarp_mpa", "-V").Output()
	if err != nil {
		t.Fatal(err)
	}
	hits := tsharkHits(string(vout), "Malformed")
	t.Logf("tshark calls %d frames malformed", len(hits))
	for _, h := range hits {
		if !reused.explains(h) {
			t.Errorf("not excused: %s", h)
		}
		if h.num < 7 {
			t.Errorf("a frame of the first connection flagged: %s", h)
		}
	}
	// The first connection's frames are not excused.
	if reused.explains(tsharkHit{src: "40001", dst: "7174", num: 4}) {
		t.Error("frame 4, before the reuse, excused")
	}
	if reused.explains(tsharkHit{src: "40002", dst: "7174", num: 10}) {
		t.Error("another port pair excused")
	}
}
