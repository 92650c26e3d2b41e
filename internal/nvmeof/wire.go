package nvmeof

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Sizes of the fixed wire structures.
const (
	SQESize         = 64   // a command (submission queue entry)
	CQESize         = 16   // a completion (completion queue entry)
	SGLDescSize     = 16   // an SGL descriptor
	ConnectDataSize = 1024 // the data of a Fabrics Connect command
	IdentifySize    = 4096 // the data of every Identify
	CMReqSize       = 32   // nvme_rdma_cm_req
	CMRepSize       = 32   // nvme_rdma_cm_rep
	CMRejSize       = 4    // nvme_rdma_cm_rej
	NQNFieldLen     = 256  // an NQN field in Connect data and logs
	MaxNQNLen       = 223  // the longest NQN (NVMF_NQN_SIZE)
)

// DiscoveryNQN is the well-known NQN of the discovery subsystem.
const DiscoveryNQN = "nqn.2014-08.org.nvmexpress.discovery"

var le = binary.LittleEndian

// ---------------------------------------------------------------- RDMA CM private data

// CM reject status codes of the NVMe-oF RDMA transport binding
// (enum nvme_rdma_cm_status).
const (
	CMInvalidLen     uint16 = 0x01
	CMInvalidRecfmt  uint16 = 0x02
	CMInvalidQID     uint16 = 0x03
	CMInvalidHSQSize uint16 = 0x04
	CMInvalidHRQSize uint16 = 0x05
	CMNoResources    uint16 = 0x06
	CMInvalidIRD     uint16 = 0x07
	CMInvalidORD     uint16 = 0x08
	CMInvalidCntlID  uint16 = 0x09
)

// CMRequest is the private data of the host's connection request
// (nvme_rdma_cm_req): record format 0, the queue id (0 = admin), the
// host's receive queue size (how many completions it can take) and the
// 0-based host submission queue size.
type CMRequest struct {
	Recfmt  uint16
	QID     uint16
	HRQSize uint16
	HSQSize uint16
	CntlID  uint16
}

// ErrShort is a wire structure shorter than its fixed size.
var ErrShort = errors.New("nvmeof: record too short")

// ParseCMRequest decodes the request record. Longer private data is
// accepted (the record is a prefix); shorter is ErrShort.
func ParseCMRequest(b []byte) (CMRequest, error) {
	if len(b) < CMReqSize {
		return CMRequest{}, ErrShort
	}
	return CMRequest{Recfmt: le.Uint16(b[0:]), QID: le.Uint16(b[2:]), HRQSize: le.Uint16(b[4:]),
		HSQSize: le.Uint16(b[6:]), CntlID: le.Uint16(b[8:])}, nil
}

// Append appends the 32-byte record to b.
func (r CMRequest) Append(b []byte) []byte {
	var w [CMReqSize]byte
	le.PutUint16(w[0:], r.Recfmt)
	le.PutUint16(w[2:], r.QID)
	le.PutUint16(w[4:], r.HRQSize)
	le.PutUint16(w[6:], r.HSQSize)
	le.PutUint16(w[8:], r.CntlID)
	return append(b, w[:]...)
}

// CMReply is the private data of the target's accept (nvme_rdma_cm_rep):
// record format 0 and the controller's receive queue size for the queue.
type CMReply struct {
	Recfmt  uint16
	CRQSize uint16
}

// ParseCMReply decodes the accept record.
func ParseCMReply(b []byte) (CMReply, error) {
	if len(b) < 4 {
		return CMReply{}, ErrShort
	}
	return CMReply{Recfmt: le.Uint16(b[0:]), CRQSize: le.Uint16(b[2:])}, nil
}

// Append appends the 32-byte record to b.
func (r CMReply) Append(b []byte) []byte {
	var w [CMRepSize]byte
	le.PutUint16(w[0:], r.Recfmt)
	le.PutUint16(w[2:], r.CRQSize)
	return append(b, w[:]...)
}

// CMReject is the private data of the target's reject (nvme_rdma_cm_rej).
type CMReject struct {
	Recfmt uint16
	Status uint16
}

// ParseCMReject decodes the reject record.
func ParseCMReject(b []byte) (CMReject, error) {
	if len(b) < CMRejSize {
		return CMReject{}, ErrShort
	}
	return CMReject{Recfmt: le.Uint16(b[0:]), Status: le.Uint16(b[2:])}, nil
}

// Append appends the 4-byte record to b.
func (r CMReject) Append(b []byte) []byte {
	return le.AppendUint16(le.AppendUint16(b, r.Recfmt), r.Status)
}

// ---------------------------------------------------------------- SGL descriptors

// SGL descriptor type bytes (type in the high nibble, subtype in the low).
const (
	SGLDataBlock     = 0x00 // data block, address subtype (not used over RDMA)
	SGLInCapsule     = 0x01 // data block, offset subtype: in-capsule data
	SGLKeyed         = 0x40 // keyed data block, address subtype
	SGLKeyedInvalid  = 0x4f // keyed data block, invalidate-key subtype
	sglTypeKeyed     = 0x4
	sglTypeDataBlock = 0x0
	sglSubAddress    = 0x0
	sglSubOffset     = 0x1
	sglSubInvalidate = 0xf
)

// SGL is one SGL descriptor. For a keyed data block, Addr, Length (24
// bits) and Key name host memory; for an in-capsule data block, Addr is
// the offset of the data after the command and Length its size.
type SGL struct {
	Addr   uint64
	Length uint32
	Key    uint32
	Type   uint8
}

// Keyed reports whether d is a keyed data block (either subtype).
func (d SGL) Keyed() bool { return d.Type>>4 == sglTypeKeyed }

// Invalidate reports whether d asks the target to invalidate Key with
// its completion (Send with Invalidate).
func (d SGL) Invalidate() bool { return d.Type == SGLKeyedInvalid }

// InCapsule reports whether d names in-capsule data.
func (d SGL) InCapsule() bool { return d.Type == SGLInCapsule }

// ParseSGL decodes a 16-byte descriptor.
func ParseSGL(b []byte) SGL {
	d := SGL{Addr: le.Uint64(b[0:]), Type: b[15]}
	if d.Type>>4 == sglTypeKeyed {
		d.Length = uint32(b[8]) | uint32(b[9])<<8 | uint32(b[10])<<16
		d.Key = le.Uint32(b[11:])
	} else {
		d.Length = le.Uint32(b[8:])
	}
	return d
}

// Put encodes d into b[:16].
func (d SGL) Put(b []byte) {
	le.PutUint64(b[0:], d.Addr)
	clear(b[8:16])
	if d.Type>>4 == sglTypeKeyed {
		b[8], b[9], b[10] = byte(d.Length), byte(d.Length>>8), byte(d.Length>>16)
		le.PutUint32(b[11:], d.Key)
	} else {
		le.PutUint32(b[8:], d.Length)
	}
	b[15] = d.Type
}

// ---------------------------------------------------------------- commands

// Opcodes. Admin and I/O opcodes share values; the queue says which.
const (
	OpFabrics = 0x7f

	AdminGetLogPage  = 0x02
	AdminIdentify    = 0x06
	AdminAbort       = 0x08
	AdminSetFeatures = 0x09
	AdminGetFeatures = 0x0a
	AdminAsyncEvent  = 0x0c
	AdminKeepAlive   = 0x18

	IOFlush       = 0x00
	IOWrite       = 0x01
	IORead        = 0x02
	IOWriteZeroes = 0x08
	IODSM         = 0x09
)

// Fabrics command types.
const (
	FabricsPropertySet = 0x00
	FabricsConnect     = 0x01
	FabricsPropertyGet = 0x04
	FabricsDisconnect  = 0x08
)

// Command flags: PSDT "SGL for data" (Linux's NVME_CMD_SGL_METABUF),
// what every NVMe-oF command must carry, and the fused-operation bits.
const (
	FlagSGL   = 0x40
	flagPSDT  = 0xc0
	flagFused = 0x03
)

// Command is a 64-byte submission queue entry, a view of its bytes (the
// admin, I/O and Fabrics commands share the header). Fields are read
// little-endian as NVMe has them.
type Command [SQESize]byte

// ParseCommand copies the first 64 bytes of b; shorter input is ErrShort.
func ParseCommand(b []byte) (*Command, error) {
	if len(b) < SQESize {
		return nil, ErrShort
	}
	var c Command
	copy(c[:], b)
	return &c, nil
}

// Opcode returns byte 0.
func (c *Command) Opcode() uint8 { return c[0] }

// Flags returns byte 1 (fuse bits and PSDT).
func (c *Command) Flags() uint8 { return c[1] }

// CID returns the command identifier.
func (c *Command) CID() uint16 { return le.Uint16(c[2:]) }

// NSID returns the namespace id (not meaningful for Fabrics commands).
func (c *Command) NSID() uint32 { return le.Uint32(c[4:]) }

// FCType returns the Fabrics command type (byte 4 of a Fabrics command).
func (c *Command) FCType() uint8 { return c[4] }

// SGL returns the data pointer, SGL descriptor 1.
func (c *Command) SGL() SGL { return ParseSGL(c[24:40]) }

// CDW returns command dword n (10..15; 2, 3 also work).
func (c *Command) CDW(n int) uint32 { return le.Uint32(c[4*n:]) }

// SetCDW sets command dword n.
func (c *Command) SetCDW(n int, v uint32) { le.PutUint32(c[4*n:], v) }

// SetHeader sets opcode, flags (SGL), command id and nsid.
func (c *Command) SetHeader(op uint8, cid uint16, nsid uint32) {
	c[0], c[1] = op, FlagSGL
	le.PutUint16(c[2:], cid)
	le.PutUint32(c[4:], nsid)
}

// SetSGL sets the data pointer.
func (c *Command) SetSGL(d SGL) { d.Put(c[24:40]) }

// ConnectCmd holds the fields of a Fabrics Connect command.
type ConnectCmd struct {
	Recfmt uint16
	QID    uint16
	SQSize uint16 // 0-based
	CAttr  uint8
	KATO   uint32 // milliseconds, admin queue only
}

// Connect decodes the Connect fields of c.
func (c *Command) Connect() ConnectCmd {
	return ConnectCmd{Recfmt: le.Uint16(c[40:]), QID: le.Uint16(c[42:]), SQSize: le.Uint16(c[44:]),
		CAttr: c[46], KATO: le.Uint32(c[48:])}
}

// SetConnect makes c a Connect with command id cid.
func (c *Command) SetConnect(cid uint16, f ConnectCmd) {
	*c = Command{}
	c[0], c[1] = OpFabrics, FlagSGL
	le.PutUint16(c[2:], cid)
	c[4] = FabricsConnect
	le.PutUint16(c[40:], f.Recfmt)
	le.PutUint16(c[42:], f.QID)
	le.PutUint16(c[44:], f.SQSize)
	c[46] = f.CAttr
	le.PutUint32(c[48:], f.KATO)
}

// Property returns the attribute byte (bit 0: 8-byte property), the
// offset and, for Property Set, the value.
func (c *Command) Property() (size8 bool, off uint32, val uint64) {
	return c[40]&1 != 0, le.Uint32(c[44:]), le.Uint64(c[48:])
}

// SetProperty makes c a Property Get or Set (fctype) with command id cid.
func (c *Command) SetProperty(fctype uint8, cid uint16, size8 bool, off uint32, val uint64) {
	*c = Command{}
	c[0], c[1] = OpFabrics, FlagSGL
	le.PutUint16(c[2:], cid)
	c[4] = fctype
	if size8 {
		c[40] = 1
	}
	le.PutUint32(c[44:], off)
	le.PutUint64(c[48:], val)
}

// ConnectData is the 1024-byte data of a Connect command.
type ConnectData struct {
	HostID  [16]byte
	CntlID  uint16
	SubNQN  string
	HostNQN string
}

// ParseConnectData decodes b (at least 1024 bytes). NQNs end at their
// first NUL; an NQN without one, or longer than MaxNQNLen, is an error.
func ParseConnectData(b []byte) (ConnectData, error) {
	if len(b) < ConnectDataSize {
		return ConnectData{}, ErrShort
	}
	var d ConnectData
	copy(d.HostID[:], b[0:16])
	d.CntlID = le.Uint16(b[16:])
	var err error
	if d.SubNQN, err = nqnField(b[256:512]); err != nil {
		return d, fmt.Errorf("subsystem NQN: %w", err)
	}
	if d.HostNQN, err = nqnField(b[512:768]); err != nil {
		return d, fmt.Errorf("host NQN: %w", err)
	}
	return d, nil
}

var errNQN = errors.New("nvmeof: NQN not NUL-terminated within 223 bytes")

func nqnField(b []byte) (string, error) {
	for i, c := range b {
		if c == 0 {
			if i > MaxNQNLen {
				return "", errNQN
			}
			return string(b[:i]), nil
		}
	}
	return "", errNQN
}

// Put encodes d into b[:1024].
func (d ConnectData) Put(b []byte) {
	clear(b[:ConnectDataSize])
	copy(b[0:16], d.HostID[:])
	le.PutUint16(b[16:], d.CntlID)
	copy(b[256:256+MaxNQNLen], d.SubNQN)
	copy(b[512:512+MaxNQNLen], d.HostNQN)
}

// ---------------------------------------------------------------- completions

// Completion is a 16-byte completion queue entry.
type Completion struct {
	Result uint64 // dwords 0 and 1
	SQHead uint16
	SQID   uint16
	CID    uint16
	Status Status // without the phase bit
}

// ParseCompletion decodes b[:16].
func ParseCompletion(b []byte) (Completion, error) {
	if len(b) < CQESize {
		return Completion{}, ErrShort
	}
	return Completion{Result: le.Uint64(b[0:]), SQHead: le.Uint16(b[8:]), SQID: le.Uint16(b[10:]),
		CID: le.Uint16(b[12:]), Status: Status(le.Uint16(b[14:]) >> 1)}, nil
}

// Put encodes c into b[:16] (phase bit 0, as over fabrics).
func (c Completion) Put(b []byte) {
	le.PutUint64(b[0:], c.Result)
	le.PutUint16(b[8:], c.SQHead)
	le.PutUint16(b[10:], c.SQID)
	le.PutUint16(b[12:], c.CID)
	le.PutUint16(b[14:], uint16(c.Status)<<1)
}

// Status is an NVMe status as Linux writes it: status code in bits 7:0,
// status code type in bits 10:8, More in bit 13, Do Not Retry in bit 14
// (shifted left by one in the completion, past the phase bit).
type Status uint16

// Statuses the target returns.
const (
	StatusSuccess          Status = 0x000
	StatusInvalidOpcode    Status = 0x001
	StatusInvalidField     Status = 0x002
	StatusDataXferError    Status = 0x004
	StatusInternal         Status = 0x006
	StatusAbortReq         Status = 0x007
	StatusInvalidNS        Status = 0x00b
	StatusCmdSeqError      Status = 0x00c
	StatusSGLInvalidData   Status = 0x00f
	StatusSGLInvalidType   Status = 0x011
	StatusSGLInvalidOffset Status = 0x016
	StatusNSWriteProtected Status = 0x020
	StatusLBARange         Status = 0x080
	StatusAsyncLimit       Status = 0x105
	StatusInvalidLogPage   Status = 0x109
	StatusFeatNotSaveable  Status = 0x10d
	StatusConnectFormat    Status = 0x180
	StatusConnectCtrlBusy  Status = 0x181
	StatusConnectInvalid   Status = 0x182
	StatusConnectInvHost   Status = 0x184
	StatusDNR              Status = 0x4000
)

// Code returns s without the DNR and More bits.
func (s Status) Code() Status { return s & 0x7ff }

// DNR reports the Do Not Retry bit.
func (s Status) DNR() bool { return s&StatusDNR != 0 }

var statusNames = map[Status]string{
	StatusSuccess: "success", StatusInvalidOpcode: "invalid_opcode", StatusInvalidField: "invalid_field",
	StatusDataXferError: "data_transfer_error", StatusInternal: "internal_error", StatusAbortReq: "abort_requested",
	StatusInvalidNS: "invalid_namespace", StatusCmdSeqError: "command_sequence_error",
	StatusSGLInvalidData: "sgl_invalid_data", StatusSGLInvalidType: "sgl_invalid_type",
	StatusSGLInvalidOffset: "sgl_invalid_offset", StatusNSWriteProtected: "namespace_write_protected",
	StatusLBARange: "lba_out_of_range", StatusAsyncLimit: "async_event_limit", StatusInvalidLogPage: "invalid_log_page",
	StatusFeatNotSaveable: "feature_not_saveable", StatusConnectFormat: "connect_incompatible_format",
	StatusConnectCtrlBusy: "connect_controller_busy", StatusConnectInvalid: "connect_invalid_parameters",
	StatusConnectInvHost: "connect_invalid_host",
}

// String names the status code ("lba_out_of_range"; "sc_0x1ab" when
// unknown), with "+dnr" when the bit is set.
func (s Status) String() string {
	n, ok := statusNames[s.Code()]
	if !ok {
		n = fmt.Sprintf("sc_%#x", uint16(s.Code()))
	}
	if s.DNR() {
		n += "+dnr"
	}
	return n
}

// StatusError is a command that completed with a status other than
// success.
type StatusError struct {
	Op     uint8
	Status Status
	Result uint64
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("nvmeof: command %#02x: status %v", e.Op, e.Status)
}
