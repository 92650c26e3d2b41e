package nvmeof

import (
	"bytes"

	"context"
	"errors"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gosiw/gosiw/cm"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testNQN = "nqn.2026-12.dev.gosiw:test"

type fixture struct {
	t    testing.TB
	dev  *rdmap.Device
	tgt  *Target
	addr string
	ns   []*Namespace
	m    *Metrics
}

// startTarget serves a subsystem with a 1 MiB namespace 1 and a 64 KiB
// write-protected namespace 2 on a loopback port.
func startTarget(t testing.TB, mut func(*Config)) *fixture {
	t.Helper()
	dev, err := rdmap.NewDevice(nil)
	if err != nil {
		t.Fatal(err)
	}
	ro := make([]byte, 64<<10)
	for i := range ro {
		ro[i] = byte(i * 7)
	}
	f := &fixture{t: t, dev: dev, ns: []*Namespace{{NSID: 1, Data: make([]byte, 1<<20)}, {NSID: 2, Data: ro, ReadOnly: true}},
		m: NewMetrics(nil)}
	cfg := &Config{Subsystems: []*Subsystem{{NQN: testNQN, Namespaces: f.ns}}, Metrics: f.m}
	if mut != nil {
		mut(cfg)
	}
	if f.tgt, err = NewTarget(dev, cfg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := f.tgt.Listen(ctx, "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	f.addr = f.tgt.Addr().String()
	done := make(chan struct{})
	go func() { f.tgt.Serve(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
		dev.Close()
	})
	return f
}

func (f *fixture) dial(cfg HostConfig) *Host {
	f.t.Helper()
	if cfg.SubNQN == "" {
		cfg.SubNQN = testNQN
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h, err := Dial(ctx, f.addr, f.dev, &cfg)
	if err != nil {
		f.t.Fatalf("dial: %v", err)
	}
	f.t.Cleanup(func() { h.Close() })
	return h
}

func tctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func wantStatus(t *testing.T, err error, want Status) {
	t.Helper()
	var se *StatusError
	if !errors.As(err, &se) || se.Status != want {
		t.Fatalf("got %v, want status %v", err, want)
	}
}

// TestReadWrite writes random data at several sizes over two I/O
// queues, with keyed SGLs and in-capsule data, Send and Send with
// Invalidate, and reads it back equal; the namespace memory holds it.
func TestReadWrite(t *testing.T) {
	f := startTarget(t, nil)
	var last [2][]byte // the last data written by each queue
	crc := &cm.Config{MPA: mpa.Policy{CRC: mpa.CRCOn, MaxPrivateData: mpa.SiwMaxPrivateData}}
	for _, hc := range []HostConfig{{IOQueues: 2}, {IOQueues: 1, NoInvalidate: true}, {IOQueues: 2, InCapsule: true, CM: crc}, {IOQueues: 2, CM: crc}} {
		h := f.dial(hc)
		if h.IOQueues() != hc.IOQueues || h.CRC() != (hc.CM != nil) {
			t.Fatalf("%d I/O queues, want %d", h.IOQueues(), hc.IOQueues)
		}
		ctx := tctx(t)
		var wg sync.WaitGroup
		for q := range h.IOQueues() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(q), 1))
				for _, n := range []int{512, 4096, 8192, 65536, 1 << 20 / 2} {
					slba := uint64(q) * (1 << 20 / 2 / 512)
					p := make([]byte, n)
					for i := range p {
						p[i] = byte(rng.Uint32())
					}
					if err := h.Write(ctx, q, 1, 9, slba, p); err != nil {
						t.Errorf("write %d: %v", n, err)
						return
					}
					got := make([]byte, n)
					if err := h.Read(ctx, q, 1, 9, slba, got); err != nil {
						t.Errorf("read %d: %v", n, err)
						return
					}
					if !bytes.Equal(got, p) {
						t.Errorf("queue %d size %d: read back differs", q, n)
					}
					last[q] = p
				}
			}()
		}
		wg.Wait()
		h.Close()
	}
	// Once the target is closed its engines are gone: the namespace
	// memory holds what the hosts wrote.
	f.tgt.Close()
	for q, p := range last {
		off := q * (1 << 20 / 2)
		if !bytes.Equal(f.ns[0].Data[off:off+len(p)], p) {
			t.Errorf("queue %d: namespace memory differs from what was written", q)
		}
	}
}

// TestAdminCommands checks every admin command against the target.
func TestAdminCommands(t *testing.T) {
	f := startTarget(t, nil)
	h := f.dial(HostConfig{IOQueues: 3, KATO: 5 * time.Second})
	ctx := tctx(t)
	ci := h.Ctrl
	if ci.CntlID != h.CntlID || ci.SubNQN != testNQN || ci.CtrlType != CtrlTypeIO || ci.NN != 2 || ci.MDTS != MDTS ||
		ci.SGLS&(1<<2) == 0 || ci.SGLS&(1<<20) == 0 || ci.IOCCSZ != (64+DefaultInlineDataSize)/16 || ci.IORCSZ != 1 ||
		ci.MaxCmd != DefaultMaxQueueSize || ci.Version != Version {
		t.Fatalf("identify controller: %+v", ci)
	}
	if v, err := h.PropertyGet(ctx, PropCAP); err != nil || v&0xffff != DefaultMaxQueueSize-1 || v>>37&1 != 1 {
		t.Fatalf("CAP %#x %v", v, err)
	}
	if v, err := h.PropertyGet(ctx, PropVS); err != nil || v != Version {
		t.Fatalf("VS %#x %v", v, err)
	}
	if v, err := h.PropertyGet(ctx, PropCC); err != nil || v&CCEnable == 0 {
		t.Fatalf("CC %#x %v", v, err)
	}
	var bad Command
	bad.SetProperty(FabricsPropertyGet, 0, false, 0x40, 0)
	_, err := h.AdminCmd(ctx, &bad, nil, false)
	wantStatus(t, err, StatusInvalidField|StatusDNR)

	ns, err := h.ActiveNamespaces(ctx)
	if err != nil || len(ns) != 2 || ns[0] != 1 || ns[1] != 2 {
		t.Fatalf("active namespaces %v %v", ns, err)
	}
	n1, err := h.IdentifyNamespace(ctx, 1)
	if err != nil || n1.Size != 1<<20/512 || n1.LBAShift != 9 || n1.ReadOnly {
		t.Fatalf("namespace 1: %+v %v", n1, err)
	}
	n2, err := h.IdentifyNamespace(ctx, 2)
	if err != nil || n2.Size != 128 || !n2.ReadOnly || n2.NGUID == n1.NGUID {
		t.Fatalf("namespace 2: %+v %v", n2, err)
	}
	_, err = h.IdentifyNamespace(ctx, 9)
	wantStatus(t, err, StatusInvalidNS|StatusDNR)
	desc := make([]byte, IdentifySize)
	if _, err := h.AdminCmd(ctx, identifyCmd(CNSNSDescriptors, 1), desc, false); err != nil ||
		desc[0] != 2 || desc[1] != 16 || !bytes.Equal(desc[4:20], n1.NGUID[:]) || desc[20] != 3 || desc[40] != 4 {
		t.Fatalf("descriptors % x %v", desc[:48], err)
	}
	_, err = h.AdminCmd(ctx, identifyCmd(0x55, 0), make([]byte, IdentifySize), false)
	wantStatus(t, err, StatusInvalidField|StatusDNR)
	// An SGL shorter than the data is refused, not overrun.
	_, err = h.AdminCmd(ctx, identifyCmd(CNSController, 0), make([]byte, 1024), false)
	wantStatus(t, err, StatusSGLInvalidData|StatusDNR)

	// Log pages: SMART counts the I/O done.
	p := make([]byte, 4096)
	if err := h.Write(ctx, 0, 1, 9, 0, p); err != nil {
		t.Fatal(err)
	}
	smart := make([]byte, 512)
	if err := h.GetLogPage(ctx, LogSMART, 0, smart); err != nil || le.Uint64(smart[80:]) < 1 || smart[3] != 100 {
		t.Fatalf("SMART % x %v", smart[:96], err)
	}
	if err := h.GetLogPage(ctx, LogError, 0, make([]byte, 64)); err != nil {
		t.Fatal(err)
	}
	fw := make([]byte, 512)
	if err := h.GetLogPage(ctx, LogFWSlot, 0, fw); err != nil || fw[0] != 1 {
		t.Fatal(err)
	}
	wantStatus(t, h.GetLogPage(ctx, 0x42, 0, make([]byte, 512)), StatusInvalidLogPage|StatusDNR)
	wantStatus(t, h.GetLogPage(ctx, LogDiscovery, 0, make([]byte, 1024)), StatusInvalidLogPage|StatusDNR)

	// Features.
	feat := func(op uint8, fid, cdw11 uint32, data []byte) (Completion, error) {
		var c Command
		c.SetHeader(op, 0, 0)
		c.SetCDW(10, fid)
		c.SetCDW(11, cdw11)
		return h.AdminCmd(ctx, &c, data, false)
	}
	if cqe, err := feat(AdminGetFeatures, FeatNumQueues, 0, nil); err != nil || cqe.Result != 2<<16|2 {
		t.Fatalf("number of queues %#x %v", cqe.Result, err)
	}
	if cqe, err := feat(AdminGetFeatures, FeatKeepAlive, 0, nil); err != nil || cqe.Result != 5000 {
		t.Fatalf("kato %d %v", cqe.Result, err)
	}
	if _, err := feat(AdminSetFeatures, FeatAsyncEvent, 0x100, nil); err != nil {
		t.Fatal(err)
	}
	if cqe, err := feat(AdminGetFeatures, FeatAsyncEvent, 0, nil); err != nil || cqe.Result != 0x100 {
		t.Fatalf("aec %#x %v", cqe.Result, err)
	}
	if cqe, err := feat(AdminGetFeatures, FeatVolatileWC, 0, nil); err != nil || cqe.Result != 1 {
		t.Fatalf("vwc %#x %v", cqe.Result, err)
	}
	hid := make([]byte, 16)
	if _, err := feat(AdminGetFeatures, FeatHostID, 1, hid); err != nil || !bytes.Equal(hid, h.cfg.HostID[:]) {
		t.Fatalf("host id %x %v", hid, err)
	}
	_, err = feat(AdminSetFeatures, FeatKeepAlive|featSaveBit, 1000, nil)
	wantStatus(t, err, StatusFeatNotSaveable|StatusDNR)
	_, err = feat(AdminSetFeatures, 0x7e, 0, nil)
	wantStatus(t, err, StatusInvalidField|StatusDNR)

	var c Command
	c.SetHeader(AdminKeepAlive, 0, 0)
	if _, err := h.AdminCmd(ctx, &c, nil, false); err != nil {
		t.Fatal(err)
	}
	c.SetHeader(AdminAbort, 0, 0)
	if cqe, err := h.AdminCmd(ctx, &c, nil, false); err != nil || cqe.Result&1 != 1 {
		t.Fatalf("abort %v %v", cqe, err)
	}
	c.SetHeader(0xc1, 0, 0) // vendor specific: unknown
	_, err = h.AdminCmd(ctx, &c, nil, false)
	wantStatus(t, err, StatusInvalidOpcode|StatusDNR)

	// An Asynchronous Event Request is held; the fifth is refused; a
	// controller reset completes the held ones.
	aer := make(chan error, maxAERs)
	for range maxAERs {
		go func() {
			var c Command
			c.SetHeader(AdminAsyncEvent, 0, 0)
			_, err := h.AdminCmd(ctx, &c, nil, false)
			aer <- err
		}()
	}
	ctrl := f.tgt.lookupController(h.CntlID)
	for held := 0; held < maxAERs; {
		ctrl.mu.Lock()
		held = len(ctrl.aers)
		ctrl.mu.Unlock()
		time.Sleep(time.Millisecond) // polling the target's state, not timing
	}
	c.SetHeader(AdminAsyncEvent, 0, 0)
	_, err = h.AdminCmd(ctx, &c, nil, false)
	wantStatus(t, err, StatusAsyncLimit|StatusDNR)
	select {
	case err := <-aer:
		t.Fatalf("an AER completed while held: %v", err)
	default:
	}
	if _, err := h.propSet(ctx, PropCC, 0); err != nil {
		t.Fatal(err)
	}
	for range maxAERs {
		wantStatus(t, <-aer, StatusInternal|StatusDNR)
	}
	// Disabled: I/O is refused until enabled again.
	err = h.Read(ctx, 0, 1, 9, 0, make([]byte, 512))
	wantStatus(t, err, StatusCmdSeqError|StatusDNR)
	if v, err := h.PropertyGet(ctx, PropCSTS); err != nil || v&CSTSReady != 0 {
		t.Fatalf("CSTS %#x after disable: %v", v, err)
	}
	// Enabled with a bad queue entry size: Controller Fatal Status.
	if _, err := h.propSet(ctx, PropCC, CCEnable|7<<ccIOSQESShift|4<<ccIOCQESShift); err != nil {
		t.Fatal(err)
	}
	if v, err := h.PropertyGet(ctx, PropCSTS); err != nil || v&CSTSFatal == 0 {
		t.Fatalf("CSTS %#x after a bad enable: %v", v, err)
	}
	h.propSet(ctx, PropCC, 0)
	if _, err := h.propSet(ctx, PropCC, CCEnable|6<<ccIOSQESShift|4<<ccIOCQESShift); err != nil {
		t.Fatal(err)
	}
	if err := h.Read(ctx, 0, 1, 9, 0, make([]byte, 512)); err != nil {
		t.Fatalf("read after enabling again: %v", err)
	}
	// Shutdown: CSTS.SHST says complete, I/O is refused.
	if _, err := h.propSet(ctx, PropCC, CCEnable|6<<ccIOSQESShift|4<<ccIOCQESShift|1<<14); err != nil {
		t.Fatal(err)
	}
	if v, err := h.PropertyGet(ctx, PropCSTS); err != nil || v&CSTSShstMask != CSTSShstDone || v&CSTSReady != 0 {
		t.Fatalf("CSTS %#x after shutdown: %v", v, err)
	}
	err = h.Read(ctx, 0, 1, 9, 0, make([]byte, 512))
	wantStatus(t, err, StatusCmdSeqError|StatusDNR)
}

// TestIOCommands checks the NVM commands and their errors.
func TestIOCommands(t *testing.T) {
	f := startTarget(t, nil)
	h := f.dial(HostConfig{IOQueues: 1, InCapsule: true})
	ctx := tctx(t)
	data := f.ns[0].Data
	for i := range data[:8192] {
		data[i] = 0xaa
	}
	var c Command
	c.SetHeader(IOFlush, 0, 1)
	if _, err := h.IOCmd(ctx, 0, &c, nil, false); err != nil {
		t.Fatal(err)
	}
	if _, err := h.IOCmd(ctx, 0, rwCmd(IOWriteZeroes, 1, 2, 2), nil, false); err != nil {
		t.Fatal(err)
	}
	if data[1023] != 0xaa || data[1024] != 0 || data[2047] != 0 || data[2048] != 0xaa {
		t.Fatal("write zeroes cleared the wrong blocks")
	}
	// Dataset Management, deallocate blocks 8..9 and 12: they read zero.
	ranges := make([]byte, 32)
	le.PutUint32(ranges[4:], 2)
	le.PutUint64(ranges[8:], 8)
	le.PutUint32(ranges[16+4:], 1)
	le.PutUint64(ranges[16+8:], 12)
	c.SetHeader(IODSM, 0, 1)
	c.SetCDW(10, 1)
	c.SetCDW(11, dsmDeallocate)
	if _, err := h.IOCmd(ctx, 0, &c, ranges, true); err != nil {
		t.Fatal(err)
	}
	if data[8*512-1] != 0xaa || data[8*512] != 0 || data[10*512-1] != 0 || data[10*512] != 0xaa || data[12*512] != 0 || data[13*512] != 0xaa {
		t.Fatal("deallocate cleared the wrong blocks")
	}
	le.PutUint64(ranges[8:], 1<<40)
	_, err := h.IOCmd(ctx, 0, &c, ranges, true)
	wantStatus(t, err, StatusLBARange|StatusDNR)

	// Errors.
	err = h.Read(ctx, 0, 1, 9, 2047, make([]byte, 1024))
	wantStatus(t, err, StatusLBARange|StatusDNR)
	err = h.Read(ctx, 0, 7, 9, 0, make([]byte, 512))
	wantStatus(t, err, StatusInvalidNS|StatusDNR)
	err = h.Write(ctx, 0, 2, 9, 0, make([]byte, 512))
	wantStatus(t, err, StatusNSWriteProtected|StatusDNR)
	ro := make([]byte, 4096)
	if err := h.Read(ctx, 0, 2, 9, 0, ro); err != nil || !bytes.Equal(ro, f.ns[1].Data[:4096]) {
		t.Fatalf("read of the write-protected namespace: %v", err)
	}
	// The SGL names fewer bytes than the command moves.
	_, err = h.IOCmd(ctx, 0, rwCmd(IORead, 1, 0, 8), make([]byte, 512), false)
	wantStatus(t, err, StatusSGLInvalidData|StatusDNR)
	_, err = h.IOCmd(ctx, 0, rwCmd(IOWrite, 1, 0, 8), make([]byte, 512), true)
	wantStatus(t, err, StatusSGLInvalidData|StatusDNR)
	// Too large for one command.
	_, err = h.IOCmd(ctx, 0, rwCmd(IORead, 1, 0, MaxTransfer/512+8), nil, false)
	wantStatus(t, err, StatusInvalidField|StatusDNR)
	c.SetHeader(0x99, 0, 1)
	_, err = h.IOCmd(ctx, 0, &c, nil, false)
	wantStatus(t, err, StatusInvalidOpcode|StatusDNR)
	// A Property Get on an I/O queue is not a command there.
	c.SetProperty(FabricsPropertyGet, 0, false, PropVS, 0)
	_, err = h.IOCmd(ctx, 0, &c, nil, false)
	wantStatus(t, err, StatusInvalidOpcode|StatusDNR)
	// Fused and PRP commands are refused.
	c = *rwCmd(IORead, 1, 0, 1)
	c[1] = FlagSGL | 1
	_, err = h.IOCmd(ctx, 0, &c, make([]byte, 512), false)
	wantStatus(t, err, StatusInvalidField|StatusDNR)

	// Metrics saw them.
	if n := testCount(f.m.Commands.WithLabelValues("io", "read", "lba_out_of_range+dnr")); n != 1 {
		t.Fatalf("metrics: %v reads out of range", n)
	}
}

// TestDiscovery reads the discovery log through the discovery subsystem
// and connects to what it lists.
func TestDiscovery(t *testing.T) {
	f := startTarget(t, func(c *Config) {
		c.Subsystems = append(c.Subsystems, &Subsystem{NQN: testNQN + "-private", AllowedHosts: []string{"nqn.x:someone-else"},
			Namespaces: []*Namespace{{NSID: 1, Data: make([]byte, 4096)}}})
	})
	d := f.dial(HostConfig{SubNQN: DiscoveryNQN})
	if d.Ctrl.CtrlType != CtrlTypeDiscovery {
		t.Fatalf("discovery controller type %d", d.Ctrl.CtrlType)
	}
	ctx := tctx(t)
	es, err := d.DiscoveryLog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 2 || es[0].SubNQN != testNQN || es[0].SubType != SubTypeNVMe || es[0].Addr.String() != f.addr ||
		es[1].SubNQN != DiscoveryNQN {
		t.Fatalf("discovery log %+v (address %s)", es, f.addr)
	}
	_, err = d.IdentifyNamespace(ctx, 1)
	wantStatus(t, err, StatusInvalidField|StatusDNR)
	d.Close()
	h := f.dial(HostConfig{SubNQN: es[0].SubNQN, IOQueues: 1})
	if err := h.Read(ctx, 0, 1, 9, 0, make([]byte, 512)); err != nil {
		t.Fatal(err)
	}
}

// TestConnectRefused: host NQNs outside the allowed list, unknown
// subsystems, bad CM records, bad controller ids.
func TestConnectRefused(t *testing.T) {
	f := startTarget(t, func(c *Config) { c.Subsystems[0].AllowedHosts = []string{"nqn.2026-12.dev.gosiw:friend"} })
	ctx := tctx(t)
	dial := func(cfg HostConfig) error {
		h, err := Dial(ctx, f.addr, f.dev, &cfg)
		if err == nil {
			h.Close()
		}
		return err
	}
	wantStatus(t, dial(HostConfig{SubNQN: testNQN, HostNQN: "nqn.2026-12.dev.gosiw:stranger"}), StatusConnectInvHost|StatusDNR)
	wantStatus(t, dial(HostConfig{SubNQN: "nqn.2026-12.dev.gosiw:nothing"}), StatusConnectInvalid|StatusDNR)
	if err := dial(HostConfig{SubNQN: testNQN, HostNQN: "nqn.2026-12.dev.gosiw:friend", IOQueues: 1}); err != nil {
		t.Fatal(err)
	}
	if n := testCount(f.m.Refused.WithLabelValues("host_not_allowed")); n != 1 {
		t.Fatalf("refused hosts counted %v", n)
	}

	hh := &Host{dev: f.dev, pd: f.dev.AllocPD(), cfg: HostConfig{SubNQN: testNQN}, addr: f.addr}
	for _, c := range []struct {
		pd   []byte
		want uint16
	}{
		{[]byte{0, 0, 0, 0}, CMInvalidLen},
		{CMRequest{Recfmt: 1, HRQSize: 32, HSQSize: 31}.Append(nil), CMInvalidRecfmt},
		{CMRequest{QID: 500, HRQSize: 32, HSQSize: 31}.Append(nil), CMInvalidQID},
		{CMRequest{QID: 0, HRQSize: 32, HSQSize: 0}.Append(nil), CMInvalidHSQSize},
		{CMRequest{QID: 0, HRQSize: 32, HSQSize: 200}.Append(nil), CMInvalidHSQSize},
		{CMRequest{QID: 1, HRQSize: 0, HSQSize: 31}.Append(nil), CMInvalidHRQSize},
	} {
		_, err := hh.openQueue(ctx, 0, 4, c.pd)
		var rej *RejectError
		if !errors.As(err, &rej) || rej.Status != c.want {
			t.Fatalf("private data % x: %v, want reject status %#x", c.pd, err, c.want)
		}
	}
	// An I/O queue naming a controller that does not exist.
	hh.cfg.HostNQN = "nqn.2026-12.dev.gosiw:friend"
	_, err := hh.connectQueue(ctx, 1, 4, 0x1234)
	wantStatus(t, err, StatusConnectInvalid|StatusDNR)
}

// rawQueue opens a queue without its Connect.
func rawQueue(t *testing.T, f *fixture, qid uint16) *hostQueue {
	hh := &Host{dev: f.dev, pd: f.dev.AllocPD(), cfg: HostConfig{SubNQN: testNQN}, addr: f.addr}
	q, err := hh.openQueue(tctx(t), qid, 8, CMRequest{QID: qid, HRQSize: 8, HSQSize: 7}.Append(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.close(true) })
	return q
}

// TestBadCapsules: commands on a queue never connected, a capsule under
// 64 bytes, an SGL beyond what the host registered, a host that vanishes
// mid-command. Each gets its status or closes its queue only; a host
// beside them carries on.
func TestBadCapsules(t *testing.T) {
	f := startTarget(t, nil)
	good := f.dial(HostConfig{IOQueues: 1})
	ctx := tctx(t)
	check := func() {
		t.Helper()
		p := make([]byte, 4096)
		if err := good.Write(ctx, 0, 1, 9, 100, p); err != nil {
			t.Fatalf("the good host: %v", err)
		}
	}

	// Never connected: anything but Connect is Invalid Opcode.
	q := rawQueue(t, f, 0)
	_, err := q.do(ctx, identifyCmd(CNSController, 0), make([]byte, IdentifySize), false, false)
	wantStatus(t, err, StatusInvalidOpcode|StatusDNR)
	check()

	// A 32-byte capsule ends the queue.
	q = rawQueue(t, f, 0)
	if err := q.qp.PostSend(rdmap.SendWR{Op: rdmap.WRSend, SGL: []rdmap.SGE{q.sqeMR.SGE(0, 32)}}); err != nil {
		t.Fatal(err)
	}
	<-q.done
	check()

	// An SGL longer than the host's registration: the target's RDMA Write
	// is refused by the host's RNIC (Terminate), the queue ends.
	h2 := f.dial(HostConfig{IOQueues: 1})
	small := make([]byte, 512)
	mr, err := h2.pd.RegisterMemory(small, rdmap.AccessLocalWrite|rdmap.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Deregister()
	cmd := rwCmd(IORead, 1, 0, 8)
	cmd.SetSGL(SGL{Type: SGLKeyed, Length: 4096, Key: uint32(mr.STag())})
	err = sendRaw(ctx, h2.io[0], cmd)
	if err == nil {
		t.Fatal("a read past the host's registration succeeded")
	}
	<-h2.io[0].done
	check()

	// A host that vanishes with a write in flight: the target's RDMA Read
	// is flushed, the queue ends. The write goes to the namespace's
	// second half, away from the good host's blocks: the target reads
	// both hosts' data straight into the namespace, and Read Responses
	// that arrived before the abort may still be placed while the good
	// host writes (two queues writing the same blocks at once is a
	// data race the race detector reports, as it did once in CI).
	h3 := f.dial(HostConfig{IOQueues: 1})
	big := make([]byte, MaxTransfer/2)
	go h3.Write(ctx, 0, 1, 9, uint64(len(f.ns[0].Data)-len(big))>>9, big)
	h3.io[0].conn.Abort()
	check()
}

// sendRaw posts cmd as is (its SGL untouched) on q and waits for its
// completion.
func sendRaw(ctx context.Context, q *hostQueue, cmd *Command) error {
	slot := <-q.slots
	le.PutUint16(cmd[2:], uint16(slot))
	copy(q.sqeMR.Bytes()[slot*SQESize:], cmd[:])
	q.mu.Lock()
	r := &q.reqs[slot]
	*r = hostReq{active: true, ch: r.ch}
	q.mu.Unlock()
	if err := q.qp.PostSend(rdmap.SendWR{ID: hostWRSend | uint64(slot), Op: rdmap.WRSend,
		SGL: []rdmap.SGE{q.sqeMR.SGE(slot*SQESize, SQESize)}, Signaled: true}); err != nil {
		return err
	}
	select {
	case <-r.ch:
	case <-ctx.Done():
		return ctx.Err()
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	r.active = false
	defer func() { q.slots <- slot }()
	if r.failed != nil {
		return r.failed
	}
	if r.cqe.Status != StatusSuccess {
		return &StatusError{Status: r.cqe.Status}
	}
	return nil
}

// TestKeepAliveTimeout: a host that sends no Keep Alive loses its
// controller, all its queues; another host carries on.
func TestKeepAliveTimeout(t *testing.T) {
	f := startTarget(t, nil)
	good := f.dial(HostConfig{IOQueues: 1, KATO: 2 * time.Second})
	lazy := f.dial(HostConfig{IOQueues: 2, KATO: 300 * time.Millisecond, NoKeepAlive: true})
	<-lazy.admin.done
	<-lazy.io[0].done
	<-lazy.io[1].done
	ctx := tctx(t)
	if err := lazy.Read(ctx, 0, 1, 9, 0, make([]byte, 512)); !errors.Is(err, ErrQueueClosed) {
		t.Fatalf("read on a lost controller: %v", err)
	}
	if err := good.Read(ctx, 0, 1, 9, 0, make([]byte, 512)); err != nil {
		t.Fatal(err)
	}
	if n := testCount(f.m.Refused.WithLabelValues("keep_alive_timeout")); n != 1 {
		t.Fatalf("keep alive timeouts counted: %v", n)
	}
}

func testCount(c prometheus.Metric) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}
