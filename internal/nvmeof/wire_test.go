package nvmeof

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gosiw/gosiw/layers"
	"github.com/gosiw/gosiw/rdmap"
)

// captured is what the Linux host <-> Linux target capture holds, decoded
// by this package's parsers.
type captured struct {
	reqs     map[string]CMRequest
	reps     map[string]CMReply
	capsules []capsule         // host to target Sends
	cqes     []cqe             // target to host Sends
	writes   map[uint32][]byte // RDMA Write payloads (data to the host) by STag
}

type capsule struct {
	conn string
	cmd  *Command
	rest []byte // in-capsule data
}

type cqe struct {
	conn string
	c    Completion
	inv  uint32 // the invalidated STag, for Send with Invalidate
	with bool
}

func readCapture(t testing.TB) *captured {
	t.Helper()
	f, err := os.Open("testdata/nvme-rdma-loopback.pcap")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := &captured{reqs: map[string]CMRequest{}, reps: map[string]CMReply{}, writes: map[uint32][]byte{}}
	err = layers.DecodeCapture(f, func(r *layers.Record) {
		conn := r.Conn.String()
		switch {
		case r.Startup != nil && !r.Startup.Reply:
			req, err := ParseCMRequest(r.Startup.PrivateData)
			if err != nil {
				t.Errorf("%s: request private data % x: %v", conn, r.Startup.PrivateData, err)
			}
			c.reqs[conn] = req
		case r.Startup != nil:
			rep, err := ParseCMReply(r.Startup.PrivateData)
			if err != nil || len(r.Startup.PrivateData) != CMRepSize {
				t.Errorf("%s: reply private data % x: %v", conn, r.Startup.PrivateData, err)
			}
			c.reps[conn] = rep
		case r.DDP != nil && r.Err == nil:
			switch r.DDP.Opcode {
			case layers.OpSend, layers.OpSendInv:
				if r.Dir == layers.DirI2R {
					cmd, err := ParseCommand(r.Payload)
					if err != nil {
						t.Errorf("%s: capsule of %d bytes: %v", conn, len(r.Payload), err)
						return
					}
					c.capsules = append(c.capsules, capsule{conn: conn, cmd: cmd, rest: bytes.Clone(r.Payload[SQESize:])})
					return
				}
				cc, err := ParseCompletion(r.Payload)
				if err != nil || len(r.Payload) != CQESize {
					t.Errorf("%s: completion of %d bytes: %v", conn, len(r.Payload), err)
					return
				}
				c.cqes = append(c.cqes, cqe{conn: conn, c: cc, inv: r.DDP.InvalidateSTag, with: r.DDP.Opcode == layers.OpSendInv})
			case layers.OpWrite:
				c.writes[r.DDP.STag] = append(c.writes[r.DDP.STag], r.Payload...)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCapture decodes the Linux capture: the CM records, the Connect
// commands and their data, the I/O commands' SGLs, and the completions,
// Send with Invalidate naming the key of the command's SGL.
func TestCapture(t *testing.T) {
	c := readCapture(t)
	if len(c.reqs) != 3 || len(c.reps) != 3 {
		t.Fatalf("%d requests, %d replies, want 3 connections", len(c.reqs), len(c.reps))
	}
	qids := map[uint16]string{}
	for conn, r := range c.reqs {
		qids[r.QID] = conn
		rep := c.reps[conn]
		switch r.QID {
		case 0:
			if r.HRQSize != 32 || r.HSQSize != 31 || rep.CRQSize != 32 {
				t.Errorf("admin queue: %+v reply %+v", r, rep)
			}
		case 1, 2:
			if r.HRQSize != 128 || r.HSQSize != 127 || rep.CRQSize != 128 {
				t.Errorf("I/O queue: %+v reply %+v", r, rep)
			}
		default:
			t.Errorf("queue id %d", r.QID)
		}
		if r.Recfmt != 0 || rep.Recfmt != 0 || r.CntlID != 0 {
			t.Errorf("record: %+v %+v", r, rep)
		}
	}
	var connects, reads, writes, inCapsule int
	var lbs uint32 // the namespace's block size, from Identify Namespace
	var ci ControllerInfo
	var subNQN, hostNQN string
	keys := map[string]map[uint16]SGL{} // per connection, per command id
	for _, k := range c.capsules {
		cmd := k.cmd
		if cmd.Flags() != FlagSGL {
			t.Errorf("flags %#x", cmd.Flags())
		}
		if keys[k.conn] == nil {
			keys[k.conn] = map[uint16]SGL{}
		}
		keys[k.conn][cmd.CID()] = cmd.SGL()
		switch {
		case cmd.Opcode() == OpFabrics && cmd.FCType() == FabricsConnect:
			connects++
			f := cmd.Connect()
			if f.QID != c.reqs[k.conn].QID || f.SQSize != c.reqs[k.conn].HSQSize || f.Recfmt != 0 {
				t.Errorf("connect %+v on %+v", f, c.reqs[k.conn])
			}
			d := cmd.SGL()
			if f.QID == 0 {
				// Admin: the data by keyed SGL (the target's 1 KiB Read).
				if !d.Keyed() || d.Length != ConnectDataSize || f.KATO == 0 {
					t.Errorf("admin connect SGL %+v kato %d", d, f.KATO)
				}
				continue
			}
			if !d.InCapsule() || d.Addr != 0 || d.Length != ConnectDataSize || len(k.rest) != ConnectDataSize {
				t.Errorf("I/O connect SGL %+v, %d bytes in the capsule", d, len(k.rest))
				continue
			}
			cd, err := ParseConnectData(k.rest)
			if err != nil || cd.CntlID == 0xffff {
				t.Errorf("connect data %+v %v", cd, err)
			}
			subNQN, hostNQN = cd.SubNQN, cd.HostNQN
		case c.reqs[k.conn].QID == 0 && cmd.Opcode() == AdminIdentify:
			data := c.writes[cmd.SGL().Key]
			switch cmd.CDW(10) & 0xff {
			case CNSController:
				var err error
				if ci, err = ParseControllerInfo(data); err != nil {
					t.Errorf("identify controller: %v", err)
				}
			case CNSNamespace:
				ni, err := ParseNamespaceInfo(data)
				if err != nil || ni.Size == 0 {
					t.Errorf("identify namespace %+v: %v", ni, err)
				}
				lbs = 1 << ni.LBAShift
			}
		case c.reqs[k.conn].QID != 0 && cmd.Opcode() == IORead:
			reads++
			if d := cmd.SGL(); d.Type != SGLKeyedInvalid || d.Length != (cmd.CDW(12)&0xffff+1)*lbs {
				t.Errorf("read SGL %+v nlb %d", d, cmd.CDW(12)&0xffff+1)
			}
		case c.reqs[k.conn].QID != 0 && cmd.Opcode() == IOWrite:
			writes++
			d := cmd.SGL()
			if d.InCapsule() {
				inCapsule++
			}
			if d.Length != (cmd.CDW(12)&0xffff+1)*lbs {
				t.Errorf("write SGL %+v nlb %d", d, cmd.CDW(12)&0xffff+1)
			}
		}
	}
	if connects != 3 || reads == 0 || writes == 0 || len(c.writes) == 0 || lbs == 0 {
		t.Errorf("%d connects, %d reads, %d writes, %d RDMA Write STags, block size %d", connects, reads, writes, len(c.writes), lbs)
	}
	// What Linux nvmet advertises, as this package decodes it.
	if ci.SubNQN != subNQN || ci.CtrlType != CtrlTypeIO || ci.SGLS&(1<<2) == 0 || ci.IOCCSZ != 260 || ci.IORCSZ != 1 || ci.MaxCmd == 0 || ci.Version != Version || ci.MDTS != MDTS {
		t.Errorf("identify controller %+v", ci)
	}
	if subNQN != "testnqn" || !strings.HasPrefix(hostNQN, "nqn.2014-08.org.nvmexpress:uuid:") {
		t.Errorf("NQNs %q %q", subNQN, hostNQN)
	}
	var invs int
	for _, e := range c.cqes {
		d, ok := keys[e.conn][e.c.CID]
		if !ok {
			t.Errorf("completion for command %d never sent", e.c.CID)
			continue
		}
		if e.c.Status != StatusSuccess {
			t.Errorf("completion status %v", e.c.Status)
		}
		if e.with {
			invs++
			if !d.Invalidate() || e.inv != d.Key {
				t.Errorf("Send with Invalidate of %#x for SGL %+v", e.inv, d)
			}
		}
		if e.c.SQID != c.reqs[e.conn].QID {
			t.Errorf("completion SQID %d on queue %d", e.c.SQID, c.reqs[e.conn].QID)
		}
	}
	if invs == 0 {
		t.Error("no Send with Invalidate")
	}
	t.Logf("%d capsules (%d reads, %d writes, %d in-capsule), %d completions (%d with invalidate); subsystem %s, block %d, %+v",
		len(c.capsules), reads, writes, inCapsule, len(c.cqes), invs, subNQN, lbs, ci)
}

// TestWireRoundTrip encodes and decodes each structure.
func TestWireRoundTrip(t *testing.T) {
	r := CMRequest{QID: 3, HRQSize: 128, HSQSize: 127}
	if got, err := ParseCMRequest(r.Append(nil)); err != nil || got != r {
		t.Fatalf("%+v %v", got, err)
	}
	if _, err := ParseCMRequest(make([]byte, 31)); err != ErrShort {
		t.Fatal(err)
	}
	rj := CMReject{Status: CMInvalidQID}
	if got, err := ParseCMReject(rj.Append(nil)); err != nil || got != rj {
		t.Fatalf("%+v %v", got, err)
	}
	for _, d := range []SGL{{Addr: 0xff1b5f87f3319000, Length: 0xabcdef, Key: 0x6cae8301, Type: SGLKeyedInvalid},
		{Length: 4096, Type: SGLInCapsule}} {
		var b [16]byte
		d.Put(b[:])
		if ParseSGL(b[:]) != d {
			t.Fatalf("SGL %+v -> % x -> %+v", d, b, ParseSGL(b[:]))
		}
	}
	cq := Completion{Result: 0x1122334455667788, SQHead: 5, SQID: 2, CID: 77, Status: StatusLBARange | StatusDNR}
	var b [16]byte
	cq.Put(b[:])
	if got, _ := ParseCompletion(b[:]); got != cq {
		t.Fatalf("%+v", got)
	}
	cd := ConnectData{CntlID: 7, SubNQN: testNQN, HostNQN: "nqn.h"}
	cdb := make([]byte, ConnectDataSize)
	cd.Put(cdb)
	if got, err := ParseConnectData(cdb); err != nil || got != cd {
		t.Fatalf("%+v %v", got, err)
	}
	clear(cdb[256:512])
	for i := 256; i < 512; i++ {
		cdb[i] = 'a'
	}
	if _, err := ParseConnectData(cdb); err == nil {
		t.Fatal("an NQN without NUL was taken")
	}
}

// FuzzCapsule feeds command capsules (seeded with the capture's) to the
// parsers: nothing panics, reads stay within the capsule.
func FuzzCapsule(f *testing.F) {
	c := readCapture(f)
	for i, k := range c.capsules {
		if i%8 == 0 || len(k.rest) > 0 {
			f.Add(append(k.cmd[:], k.rest...))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		cmd, err := ParseCommand(b)
		if err != nil {
			return
		}
		d := cmd.SGL()
		var w [16]byte
		d.Put(w[:])
		if ParseSGL(w[:]) != d {
			t.Fatalf("SGL round trip %+v", d)
		}
		_ = cmd.Connect()
		cmd.Property()
		_ = OpName(cmd, len(b)%2 == 0)
		if len(b) >= SQESize+ConnectDataSize {
			if cd, err := ParseConnectData(b[SQESize:]); err == nil && (len(cd.SubNQN) > MaxNQNLen || len(cd.HostNQN) > MaxNQNLen) {
				t.Fatalf("NQN too long taken: %d %d", len(cd.SubNQN), len(cd.HostNQN))
			}
		}
	})
}

// FuzzPrivateData feeds CM private data and completions (seeded with the
// capture's) to their parsers.
func FuzzPrivateData(f *testing.F) {
	c := readCapture(f)
	for _, r := range c.reqs {
		f.Add(r.Append(nil))
	}
	for _, e := range c.cqes[:4] {
		var b [16]byte
		e.c.Put(b[:])
		f.Add(b[:])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := ParseCMRequest(b); err == nil {
			if got, _ := ParseCMRequest(r.Append(nil)); got != r {
				t.Fatal("request round trip")
			}
		}
		ParseCMReply(b)
		ParseCMReject(b)
		if cq, err := ParseCompletion(b); err == nil {
			_ = cq.Status.String()
		}
		ParseDiscoveryLog(b)
		if len(b) >= IdentifySize {
			ParseControllerInfo(b)
			ParseNamespaceInfo(b)
		}
	})
}

// FuzzTargetCommand sends 64-byte commands (seeded with the capture's) to
// a running target, on the admin or an I/O queue of a connected host:
// each gets a completion, or its queue ends (a Terminate when the command
// names memory the host never registered); never a hang, and the target
// keeps serving the next host.
func FuzzTargetCommand(f *testing.F) {
	c := readCapture(f)
	for i, k := range c.capsules {
		if i%4 == 0 {
			f.Add(append([]byte{byte(i)}, k.cmd[:]...))
		}
	}
	fx := startTarget(f, nil)
	var h *Host
	f.Cleanup(func() {
		if h != nil {
			h.abort()
		}
	})
	ended := func(q *hostQueue) bool {
		select {
		case <-q.done:
			return true
		default:
			return false
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < 1+SQESize || b[0]&1 == 0 && b[1] == AdminAsyncEvent {
			return // an Asynchronous Event Request is held by design
		}
		if h == nil || ended(h.admin) || ended(h.io[0]) {
			if h != nil {
				h.abort()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
			var err error
			h, err = Dial(ctx, fx.addr, fx.dev, &HostConfig{SubNQN: testNQN, IOQueues: 1})
			cancel()
			if err != nil {
				t.Fatalf("the target no longer serves a new host: %v", err)
			}
		}
		q := h.admin
		if b[0]&1 != 0 {
			q = h.io[0]
		}
		cmd, _ := ParseCommand(b[1:])
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := sendRaw(ctx, q, cmd)
		// A Terminate ends the queue: the QP leaves RTS at once, its
		// connection may take a few seconds to wind down.
		if errors.Is(err, context.DeadlineExceeded) && q.qp.State() != rdmap.StateRTS {
			h.abort()
			h = nil
			return
		}
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("command % x on queue %d: no completion and the queue did not end (host QP %v %v)", b[1:], q.qid, q.qp.State(), q.qp.Err())
		}
	})
}
