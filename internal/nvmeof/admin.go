package nvmeof

import (
	"fmt"
	"net/netip"
	"time"

	"go.uber.org/zap"
)

// Invalid Parameter results of Connect: IATTR (bit 16: in the data) and
// the parameter's offset.
const (
	ipoData       = 1 << 16
	ipoCntlID     = ipoData | 16
	ipoSubNQN     = ipoData | 256
	ipoHostNQN    = ipoData | 512
	ipoSQEQID     = 42
	ipoSQESQSize  = 44
	connectMaxLen = ConnectDataSize
)

// connect runs a Fabrics Connect on a queue not yet connected.
func (q *queue) connect(s *slot, inCapsule []byte) {
	f := s.cmd.Connect()
	switch {
	case f.Recfmt != 0:
		q.complete(s, StatusConnectFormat|StatusDNR, 0)
		return
	case f.QID != q.qid:
		q.complete(s, StatusConnectInvalid|StatusDNR, ipoSQEQID)
		return
	case f.SQSize == 0 || int(f.SQSize) >= q.depth:
		q.complete(s, StatusConnectInvalid|StatusDNR, ipoSQESQSize)
		return
	}
	if _, ok := q.scratch(s); !ok {
		q.complete(s, StatusInternal, 0)
		return
	}
	q.fromHost(s, inCapsule, s.mr.SGE(0, connectMaxLen), func(s *slot) (Status, uint64) {
		d, err := ParseConnectData(s.buf)
		if err != nil {
			return StatusConnectInvalid | StatusDNR, ipoSubNQN
		}
		return q.connected(s, f, d)
	})
}

func (q *queue) connected(s *slot, f ConnectCmd, d ConnectData) (Status, uint64) {
	t := q.t
	sub := t.subs[d.SubNQN]
	if d.SubNQN == DiscoveryNQN {
		sub = t.disc
	}
	if sub == nil {
		t.lg.Info("nvme connect to an unknown subsystem", zap.String("subnqn", d.SubNQN), zap.String("hostnqn", d.HostNQN))
		return StatusConnectInvalid | StatusDNR, ipoSubNQN
	}
	if sub != t.disc && !sub.allows(d.HostNQN) {
		t.lg.Info("nvme host refused: not in the subsystem's allowed hosts", zap.String("subnqn", d.SubNQN),
			zap.String("hostnqn", d.HostNQN), zap.Stringer("remote", q.conn.RemoteAddr))
		t.m.refused("host_not_allowed")
		return StatusConnectInvHost | StatusDNR, ipoHostNQN
	}
	if q.qid == 0 {
		if d.CntlID != 0xffff {
			return StatusConnectInvalid | StatusDNR, ipoCntlID
		}
		c, err := t.newController(sub, d, q, time.Duration(f.KATO)*time.Millisecond)
		if err != nil {
			return StatusConnectCtrlBusy, 0
		}
		q.ctrl = c
		t.lg.Info("nvme controller created", zap.Uint16("cntlid", c.id), zap.String("subnqn", sub.NQN),
			zap.String("hostnqn", d.HostNQN), zap.Stringer("remote", q.conn.RemoteAddr), zap.Uint32("kato_ms", f.KATO))
		return StatusSuccess, uint64(c.id)
	}
	c := t.lookupController(d.CntlID)
	if c == nil || c.sub != sub || c.hostNQN != d.HostNQN || c.hostID != d.HostID {
		return StatusConnectInvalid | StatusDNR, ipoCntlID
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.dead:
		return StatusConnectInvalid | StatusDNR, ipoCntlID
	case int(q.qid) > c.nrIOQ:
		return StatusConnectInvalid | StatusDNR, ipoSQEQID
	case c.io[q.qid] != nil:
		return StatusCmdSeqError | StatusDNR, 0
	}
	c.io[q.qid] = q
	q.ctrl = c
	return StatusSuccess, uint64(c.id)
}

// fabrics runs a Fabrics command on a connected queue.
func (q *queue) fabrics(s *slot) {
	if q.qid != 0 {
		q.complete(s, StatusInvalidOpcode|StatusDNR, 0)
		return
	}
	c := q.ctrl
	size8, off, val := s.cmd.Property()
	switch s.cmd.FCType() {
	case FabricsPropertyGet:
		var v uint64
		c.mu.Lock()
		switch {
		case size8 && off == PropCAP:
			v = c.cap()
		case !size8 && off == PropVS:
			v = Version
		case !size8 && off == PropCC:
			v = uint64(c.cc)
		case !size8 && off == PropCSTS:
			v = uint64(c.csts)
		default:
			c.mu.Unlock()
			q.complete(s, StatusInvalidField|StatusDNR, 0)
			return
		}
		c.mu.Unlock()
		q.complete(s, StatusSuccess, v)
	case FabricsPropertySet:
		if size8 || off != PropCC {
			q.complete(s, StatusInvalidField|StatusDNR, 0)
			return
		}
		q.setCC(uint32(val))
		q.complete(s, StatusSuccess, 0)
	default:
		q.complete(s, StatusInvalidOpcode|StatusDNR, 0)
	}
}

// setCC applies a write of the Controller Configuration register: enable
// (checked entry sizes and page size; bad ones set CSTS.CFS), disable
// (reset: held AERs fail), shutdown (CSTS.SHST complete).
func (q *queue) setCC(v uint32) {
	c := q.ctrl
	c.mu.Lock()
	old := c.cc
	c.cc = v
	var failAERs bool
	switch {
	case v&CCEnable != 0 && old&CCEnable == 0:
		mps := v >> 7 & 0xf
		if v>>ccIOSQESShift&0xf != 6 && !c.disc || v>>ccIOCQESShift&0xf != 4 && !c.disc || mps != 0 {
			c.csts = CSTSFatal
		} else {
			c.csts = CSTSReady
		}
	case v&CCEnable == 0 && old&CCEnable != 0:
		c.csts = 0
		failAERs = true
	}
	if v&CCShnMask != 0 && old&CCShnMask == 0 {
		c.csts = c.csts&^CSTSReady | CSTSShstDone
		c.cc &^= CCEnable
		failAERs = true
	}
	if v&CCShnMask == 0 && old&CCShnMask != 0 {
		c.csts &^= CSTSShstMask
	}
	aers := c.aers
	if failAERs {
		c.aers = nil
	}
	c.mu.Unlock()
	if failAERs {
		for _, a := range aers {
			q.complete(a, StatusInternal|StatusDNR, 0)
		}
	}
}

// admin runs an admin command on an enabled controller.
func (q *queue) admin(s *slot, inCapsule []byte) {
	c := q.ctrl
	cmd := &s.cmd
	switch cmd.Opcode() {
	case AdminIdentify:
		q.identify(s)
	case AdminGetLogPage:
		q.getLogPage(s)
	case AdminSetFeatures:
		q.setFeatures(s)
	case AdminGetFeatures:
		q.getFeatures(s)
	case AdminKeepAlive:
		c.armKeepAlive()
		q.complete(s, StatusSuccess, 0)
	case AdminAsyncEvent:
		c.mu.Lock()
		if len(c.aers) >= maxAERs {
			c.mu.Unlock()
			q.complete(s, StatusAsyncLimit|StatusDNR, 0)
			return
		}
		c.aers = append(c.aers, s) // held: completed only by a reset
		c.mu.Unlock()
		q.t.observe(s, StatusSuccess)
	case AdminAbort:
		q.complete(s, StatusSuccess, 1) // the command was not aborted (it is not waiting)
	default:
		q.complete(s, StatusInvalidOpcode|StatusDNR, 0)
	}
}

func (q *queue) identify(s *slot) {
	c := q.ctrl
	buf, ok := q.scratch(s)
	if !ok {
		q.complete(s, StatusInternal, 0)
		return
	}
	b := buf[:IdentifySize]
	cns := s.cmd.CDW(10) & 0xff
	if c.disc && cns != CNSController {
		q.complete(s, StatusInvalidField|StatusDNR, 0)
		return
	}
	switch cns {
	case CNSController:
		ci := ControllerInfo{VID: 0, Serial: c.serial(), Model: "gosiw siwd", Firmware: "1.0", MDTS: MDTS, CntlID: c.id,
			Version: Version, CtrlType: CtrlTypeIO, MaxCmd: uint16(q.t.cfg.MaxQueueSize), SGLS: 1 | 1<<2 | 1<<20,
			SubNQN: c.sub.NQN, IOCCSZ: uint32(SQESize+q.t.cfg.InlineDataSize) / 16, IORCSZ: CQESize / 16, KAS: 10}
		if c.disc {
			ci.CtrlType, ci.IOCCSZ, ci.IORCSZ = CtrlTypeDiscovery, 0, 0
		}
		if n := len(c.sub.Namespaces); n > 0 {
			ci.NN = c.sub.Namespaces[n-1].NSID
		}
		ci.Put(b)
	case CNSNamespace:
		ns := c.sub.ns(s.cmd.NSID())
		if ns == nil {
			q.complete(s, StatusInvalidNS|StatusDNR, 0)
			return
		}
		ni := NamespaceInfo{Size: ns.blocks(), LBAShift: ns.LBAShift, ReadOnly: ns.ReadOnly, NGUID: nsUUID(c.sub.NQN, ns.NSID)}
		ni.Put(b)
	case CNSActiveNSList:
		clear(b)
		start, k := s.cmd.NSID(), 0
		if start >= 0xfffffffe {
			q.complete(s, StatusInvalidNS|StatusDNR, 0)
			return
		}
		for _, ns := range c.sub.Namespaces {
			if ns.NSID > start && k < IdentifySize/4 {
				le.PutUint32(b[4*k:], ns.NSID)
				k++
			}
		}
	case CNSNSDescriptors:
		ns := c.sub.ns(s.cmd.NSID())
		if ns == nil {
			q.complete(s, StatusInvalidNS|StatusDNR, 0)
			return
		}
		putNSDescriptors(b, nsUUID(c.sub.NQN, ns.NSID))
	case CNSCSController:
		if s.cmd.CDW(11)>>24 != 0 { // CSI other than NVM
			q.complete(s, StatusInvalidField|StatusDNR, 0)
			return
		}
		clear(b)
	default:
		q.complete(s, StatusInvalidField|StatusDNR, 0)
		return
	}
	q.toHost(s, b, 0)
}

func (c *controller) serial() string {
	if c.sub.Serial != "" {
		return c.sub.Serial
	}
	u := nsUUID(c.sub.NQN, 0)
	return fmt.Sprintf("%x", u[:8])
}

func (q *queue) getLogPage(s *slot) {
	c := q.ctrl
	cdw10, cdw11 := s.cmd.CDW(10), s.cmd.CDW(11)
	lid := cdw10 & 0xff
	numd := (uint64(cdw11&0xffff)<<16 | uint64(cdw10>>16)) + 1
	off := uint64(s.cmd.CDW(12)) | uint64(s.cmd.CDW(13))<<32
	n := numd * 4
	if off&3 != 0 || n > scratchSize {
		q.complete(s, StatusInvalidField|StatusDNR, 0)
		return
	}
	var page []byte
	switch {
	case lid == LogDiscovery && c.disc:
		page = appendDiscoveryLog(nil, 1, q.t.discoveryEntries(c.hostNQN, q.local))
	case lid == LogError && !c.disc:
		page = make([]byte, 64)
	case lid == LogSMART && !c.disc:
		page = q.t.smart()
	case lid == LogFWSlot && !c.disc:
		page = make([]byte, 512)
		page[0] = 1
		putText(page[8:16], "1.0")
	default:
		q.complete(s, StatusInvalidLogPage|StatusDNR, 0)
		return
	}
	if off > uint64(len(page)) {
		q.complete(s, StatusInvalidField|StatusDNR, 0)
		return
	}
	buf, ok := q.scratch(s)
	if !ok {
		q.complete(s, StatusInternal, 0)
		return
	}
	b := buf[:n]
	clear(b)
	copy(b, page[off:])
	q.toHost(s, b, 0)
}

// discoveryEntries lists the subsystems hostNQN may connect to, at the
// address the host reached (local), then the discovery subsystem itself.
func (t *Target) discoveryEntries(hostNQN string, local netip.AddrPort) []DiscoveryEntry {
	var es []DiscoveryEntry
	for i, s := range t.cfg.Subsystems {
		if s.allows(hostNQN) {
			es = append(es, DiscoveryEntry{SubType: SubTypeNVMe, PortID: uint16(i + 1), Addr: local, SubNQN: s.NQN})
		}
	}
	return append(es, DiscoveryEntry{SubType: SubTypeDisc, PortID: 0, Addr: local, SubNQN: DiscoveryNQN})
}

func (q *queue) setFeatures(s *slot) {
	st, res := q.ctrl.setFeature(s.cmd.CDW(10), s.cmd.CDW(11))
	q.complete(s, st, res)
}

func (c *controller) setFeature(cdw10, cdw11 uint32) (Status, uint64) {
	if cdw10&featSaveBit != 0 {
		return StatusFeatNotSaveable | StatusDNR, 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch cdw10 & 0xff {
	case FeatNumQueues:
		nsq, ncq := cdw11&0xffff, cdw11>>16
		if nsq == 0xffff || ncq == 0xffff || c.disc {
			return StatusInvalidField | StatusDNR, 0
		}
		n := min(int(max(nsq, ncq))+1, c.t.cfg.MaxIOQueues)
		c.nrIOQ = n
		return StatusSuccess, uint64(n-1)<<16 | uint64(n-1)
	case FeatKeepAlive:
		c.kato = time.Duration(cdw11) * time.Millisecond
		if c.kato == 0 && c.kaTimer != nil {
			c.kaTimer.Stop()
		}
		c.armKeepAliveLocked()
	case FeatAsyncEvent:
		c.aec = cdw11
	case FeatVolatileWC:
		if c.disc {
			return StatusInvalidField | StatusDNR, 0
		}
		c.vwc = cdw11 & 1
	default:
		return StatusInvalidField | StatusDNR, 0
	}
	return StatusSuccess, 0
}

func (q *queue) getFeatures(s *slot) {
	c := q.ctrl
	cdw10, cdw11 := s.cmd.CDW(10), s.cmd.CDW(11)
	c.mu.Lock()
	var res uint64
	switch cdw10 & 0xff {
	case FeatNumQueues:
		res = uint64(max(c.nrIOQ, 1)-1)<<16 | uint64(max(c.nrIOQ, 1)-1)
	case FeatKeepAlive:
		res = uint64(c.kato / time.Millisecond)
	case FeatAsyncEvent:
		res = uint64(c.aec)
	case FeatVolatileWC:
		res = uint64(c.vwc)
	case FeatHostID:
		id := c.hostID
		c.mu.Unlock()
		if cdw11&1 == 0 { // only the 128-bit extended host identifier exists over fabrics
			q.complete(s, StatusInvalidField|StatusDNR, 0)
			return
		}
		buf, ok := q.scratch(s)
		if !ok {
			q.complete(s, StatusInternal, 0)
			return
		}
		copy(buf, id[:])
		q.toHost(s, buf[:16], 0)
		return
	default:
		c.mu.Unlock()
		q.complete(s, StatusInvalidField|StatusDNR, 0)
		return
	}
	c.mu.Unlock()
	q.complete(s, StatusSuccess, res)
}
