package nvmeof

import (
	"crypto/sha256"
	"net/netip"
	"strconv"
)

// Identify CNS values.
const (
	CNSNamespace     = 0x00
	CNSController    = 0x01
	CNSActiveNSList  = 0x02
	CNSNSDescriptors = 0x03
	CNSCSController  = 0x06 // I/O command set specific controller (all zero: no limits)
)

// Controller types (Identify Controller CNTRLTYPE).
const (
	CtrlTypeIO        = 1
	CtrlTypeDiscovery = 2
)

// Controller registers (property offsets).
const (
	PropCAP  = 0x00
	PropVS   = 0x08
	PropCC   = 0x14
	PropCSTS = 0x1c
)

// CC and CSTS bits.
const (
	CCEnable      = 1 << 0
	CCShnMask     = 3 << 14
	CSTSReady     = 1 << 0
	CSTSFatal     = 1 << 1
	CSTSShstMask  = 3 << 2
	CSTSShstDone  = 2 << 2
	ccIOSQESShift = 16
	ccIOCQESShift = 20
)

// Version is the NVMe version the target reports (1.3.0).
const Version = 0x00010300

// Feature identifiers.
const (
	FeatVolatileWC  = 0x06
	FeatNumQueues   = 0x07
	FeatAsyncEvent  = 0x0b
	FeatKeepAlive   = 0x0f
	FeatHostID      = 0x81
	featSaveBit     = 1 << 31
	featSelectShift = 8
)

// Log page identifiers.
const (
	LogError     = 0x01
	LogSMART     = 0x02
	LogFWSlot    = 0x03
	LogDiscovery = 0x70
)

// ControllerInfo is what Identify Controller carries that the host side
// of this package reads back.
type ControllerInfo struct {
	VID      uint16
	Serial   string
	Model    string
	Firmware string
	MDTS     uint8
	CntlID   uint16
	Version  uint32
	CtrlType uint8
	MaxCmd   uint16
	NN       uint32
	SGLS     uint32
	SubNQN   string
	IOCCSZ   uint32 // in 16-byte units
	IORCSZ   uint32
	KAS      uint16
}

// Put encodes the controller data structure into b[:4096].
func (ci *ControllerInfo) Put(b []byte) {
	clear(b[:IdentifySize])
	le.PutUint16(b[0:], ci.VID)
	le.PutUint16(b[2:], ci.VID)
	putText(b[4:24], ci.Serial)
	putText(b[24:64], ci.Model)
	putText(b[64:72], ci.Firmware)
	b[72] = 6 // RAB
	b[77] = ci.MDTS
	le.PutUint16(b[78:], ci.CntlID)
	le.PutUint32(b[80:], ci.Version)
	b[111] = ci.CtrlType
	b[259] = 3      // AERL: 4 outstanding Asynchronous Event Requests
	b[261] = 1 << 2 // LPA: extended data for Get Log Page
	b[262] = 0      // ELPE: one error log entry
	le.PutUint16(b[320:], ci.KAS)
	b[512] = 6<<4 | 6 // SQES
	b[513] = 4<<4 | 4 // CQES
	le.PutUint16(b[514:], ci.MaxCmd)
	le.PutUint32(b[516:], ci.NN)
	if ci.CtrlType == CtrlTypeIO {
		le.PutUint16(b[520:], 1<<2|1<<3) // ONCS: Dataset Management, Write Zeroes
		b[525] = 1                       // VWC present (Flush is meaningful)
	}
	le.PutUint32(b[536:], ci.SGLS)
	copy(b[768:768+MaxNQNLen], ci.SubNQN)
	le.PutUint32(b[1792:], ci.IOCCSZ)
	le.PutUint32(b[1796:], ci.IORCSZ)
	b[1803] = 1 // MSDBD: one SGL descriptor per command
	// Power state 0: 25 W.
	le.PutUint16(b[2048:], 2500)
}

// ParseControllerInfo decodes what Put encodes.
func ParseControllerInfo(b []byte) (ControllerInfo, error) {
	if len(b) < IdentifySize {
		return ControllerInfo{}, ErrShort
	}
	sub, _ := nqnField(b[768:1024])
	return ControllerInfo{
		VID: le.Uint16(b[0:]), Serial: text(b[4:24]), Model: text(b[24:64]), Firmware: text(b[64:72]),
		MDTS: b[77], CntlID: le.Uint16(b[78:]), Version: le.Uint32(b[80:]), CtrlType: b[111],
		KAS: le.Uint16(b[320:]), MaxCmd: le.Uint16(b[514:]), NN: le.Uint32(b[516:]), SGLS: le.Uint32(b[536:]),
		SubNQN: sub, IOCCSZ: le.Uint32(b[1792:]), IORCSZ: le.Uint32(b[1796:]),
	}, nil
}

// putText writes s space-padded, as NVMe's ASCII fields are.
func putText(b []byte, s string) {
	n := copy(b, s)
	for i := n; i < len(b); i++ {
		b[i] = ' '
	}
}

func text(b []byte) string {
	i := len(b)
	for i > 0 && (b[i-1] == ' ' || b[i-1] == 0) {
		i--
	}
	return string(b[:i])
}

// NamespaceInfo is what Identify Namespace carries that this package
// uses.
type NamespaceInfo struct {
	Size     uint64 // in blocks (NSZE = NCAP = NUSE)
	LBAShift uint8  // log2 of the block size
	ReadOnly bool   // NSATTR bit 0: write protected
	NGUID    [16]byte
}

// Put encodes the namespace data structure into b[:4096].
func (ni *NamespaceInfo) Put(b []byte) {
	clear(b[:IdentifySize])
	le.PutUint64(b[0:], ni.Size)
	le.PutUint64(b[8:], ni.Size)
	le.PutUint64(b[16:], ni.Size)
	b[25] = 0      // NLBAF: one format
	b[26] = 0      // FLBAS: format 0
	b[33] = 1      // DLFEAT: deallocated blocks read as zeroes
	b[30] = 1 << 0 // NMIC: may be shared by several controllers
	if ni.ReadOnly {
		b[99] = 1
	}
	copy(b[104:120], ni.NGUID[:])
	b[128+2] = ni.LBAShift // LBAF0: no metadata, LBADS
}

// ParseNamespaceInfo decodes what Put encodes.
func ParseNamespaceInfo(b []byte) (NamespaceInfo, error) {
	if len(b) < IdentifySize {
		return NamespaceInfo{}, ErrShort
	}
	ni := NamespaceInfo{Size: le.Uint64(b[0:]), ReadOnly: b[99]&1 != 0}
	copy(ni.NGUID[:], b[104:120])
	f := b[26] & 0xf
	ni.LBAShift = b[128+4*int(f)+2]
	return ni, nil
}

// nsUUID derives a stable namespace identifier from the subsystem NQN and
// the namespace id.
func nsUUID(nqn string, nsid uint32) [16]byte {
	h := sha256.Sum256([]byte(nqn + "/" + strconv.FormatUint(uint64(nsid), 10)))
	var u [16]byte
	copy(u[:], h[:16])
	u[6] = u[6]&0x0f | 0x40 // version 4 layout
	u[8] = u[8]&0x3f | 0x80
	return u
}

// putNSDescriptors writes the Namespace Identification Descriptor list:
// NGUID, UUID and the command set (NVM).
func putNSDescriptors(b []byte, id [16]byte) {
	clear(b[:IdentifySize])
	b[0], b[1] = 2, 16 // NGUID
	copy(b[4:20], id[:])
	b[20], b[21] = 3, 16 // UUID
	copy(b[24:40], id[:])
	b[40], b[41] = 4, 1 // CSI: NVM
}

// DiscoveryEntry is one record of the discovery log page.
type DiscoveryEntry struct {
	SubType uint8 // 2: NVMe subsystem, 3: current discovery subsystem
	PortID  uint16
	Addr    netip.AddrPort
	SubNQN  string
}

// Discovery log constants.
const (
	discHeaderSize = 1024
	discEntrySize  = 1024
	SubTypeNVMe    = 2
	SubTypeDisc    = 3
)

// appendDiscoveryLog appends the whole discovery log page.
func appendDiscoveryLog(b []byte, genctr uint64, es []DiscoveryEntry) []byte {
	start := len(b)
	b = append(b, make([]byte, discHeaderSize+discEntrySize*len(es))...)
	h := b[start:]
	le.PutUint64(h[0:], genctr)
	le.PutUint64(h[8:], uint64(len(es)))
	for i, e := range es {
		r := h[discHeaderSize+i*discEntrySize:][:discEntrySize]
		r[0] = 1 // TRTYPE: RDMA
		r[1] = 1 // ADRFAM: IPv4
		if e.Addr.Addr().Is6() && !e.Addr.Addr().Is4In6() {
			r[1] = 2
		}
		r[2] = e.SubType
		r[3] = 0x4 // TREQ: SQ flow control disable not required, no secure channel
		le.PutUint16(r[4:], e.PortID)
		le.PutUint16(r[6:], 0xffff) // dynamic controllers
		le.PutUint16(r[8:], 32)     // ASQSZ
		putText(r[32:64], strconv.Itoa(int(e.Addr.Port())))
		copy(r[256:256+MaxNQNLen], e.SubNQN)
		putText(r[512:768], e.Addr.Addr().Unmap().String())
		r[768] = 1 // RDMA QP type: reliable connected
		r[769] = 1 // RDMA provider type: not specified
		r[770] = 1 // RDMA CM
	}
	return b
}

// ParseDiscoveryLog decodes a discovery log page (as much as b holds).
func ParseDiscoveryLog(b []byte) (genctr uint64, es []DiscoveryEntry, err error) {
	if len(b) < 16 {
		return 0, nil, ErrShort
	}
	genctr = le.Uint64(b[0:])
	n := le.Uint64(b[8:])
	for i := uint64(0); i < n; i++ {
		off := discHeaderSize + int(i)*discEntrySize
		if off+discEntrySize > len(b) {
			return genctr, es, ErrShort
		}
		r := b[off : off+discEntrySize]
		port, _ := strconv.Atoi(text(r[32:64]))
		a, _ := netip.ParseAddr(text(r[512:768]))
		sub, _ := nqnField(r[256:512])
		es = append(es, DiscoveryEntry{SubType: r[2], PortID: le.Uint16(r[4:]), SubNQN: sub,
			Addr: netip.AddrPortFrom(a, uint16(port))})
	}
	return genctr, es, nil
}
