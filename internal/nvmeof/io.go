package nvmeof

import (
	"github.com/gosiw/gosiw/rdmap"
)

// DSM range size and attribute.
const (
	dsmRangeSize  = 16
	dsmDeallocate = 1 << 2
	maxDSMRanges  = 256
)

// ioCommand runs an NVM command on an I/O queue.
func (q *queue) ioCommand(s *slot, inCapsule []byte) {
	cmd := &s.cmd
	ns := q.ctrl.sub.ns(cmd.NSID())
	if ns == nil {
		q.complete(s, StatusInvalidNS|StatusDNR, 0)
		return
	}
	switch cmd.Opcode() {
	case IORead, IOWrite, IOWriteZeroes:
		slba := uint64(cmd.CDW(10)) | uint64(cmd.CDW(11))<<32
		nlb := uint64(cmd.CDW(12)&0xffff) + 1
		if cmd.Opcode() != IOWriteZeroes && nlb<<ns.LBAShift > MaxTransfer {
			q.complete(s, StatusInvalidField|StatusDNR, 0)
			return
		}
		if slba >= ns.blocks() || nlb > ns.blocks()-slba {
			q.complete(s, StatusLBARange|StatusDNR, 0)
			return
		}
		off, n := slba<<ns.LBAShift, nlb<<ns.LBAShift
		if cmd.Opcode() != IORead && ns.ReadOnly {
			q.complete(s, StatusNSWriteProtected|StatusDNR, 0)
			return
		}
		switch cmd.Opcode() {
		case IORead:
			if st := q.checkToHost(s, int(n)); st != StatusSuccess {
				q.complete(s, st, 0)
				return
			}
			err := q.qp.PostSend(rdmap.SendWR{Op: rdmap.WRWrite, SGL: []rdmap.SGE{ns.mr.SGE(int(off), int(n))},
				Remote: rdmap.Remote{STag: rdmap.STag(s.sgl.Key), Offset: s.sgl.Addr}})
			if err != nil {
				q.fatal("cannot post an RDMA Write")
				return
			}
			s.bytes, s.dir = int(n), 1
			q.complete(s, StatusSuccess, 0)
		case IOWrite:
			q.fromHost(s, inCapsule, ns.mr.SGE(int(off), int(n)), func(*slot) (Status, uint64) { return StatusSuccess, 0 })
		case IOWriteZeroes:
			clear(ns.Data[off : off+n])
			q.complete(s, StatusSuccess, 0)
		}
	case IOFlush:
		if ns.Sync != nil {
			if err := ns.Sync(); err != nil {
				q.complete(s, StatusInternal, 0)
				return
			}
		}
		q.complete(s, StatusSuccess, 0)
	case IODSM:
		nr := int(cmd.CDW(10)&0xff) + 1
		attr := cmd.CDW(11)
		if _, ok := q.scratch(s); !ok {
			q.complete(s, StatusInternal, 0)
			return
		}
		q.fromHost(s, inCapsule, s.mr.SGE(0, nr*dsmRangeSize), func(s *slot) (Status, uint64) {
			if attr&dsmDeallocate == 0 || ns.ReadOnly {
				if ns.ReadOnly && attr&dsmDeallocate != 0 {
					return StatusNSWriteProtected | StatusDNR, 0
				}
				return StatusSuccess, 0
			}
			for i := range nr {
				r := s.buf[i*dsmRangeSize:]
				nlb, slba := uint64(le.Uint32(r[4:])), le.Uint64(r[8:])
				if slba >= ns.blocks() || nlb > ns.blocks()-slba {
					return StatusLBARange | StatusDNR, 0
				}
			}
			for i := range nr {
				r := s.buf[i*dsmRangeSize:]
				nlb, slba := uint64(le.Uint32(r[4:])), le.Uint64(r[8:])
				clear(ns.Data[slba<<ns.LBAShift : (slba+nlb)<<ns.LBAShift])
			}
			return StatusSuccess, 0
		})
	default:
		q.complete(s, StatusInvalidOpcode|StatusDNR, 0)
	}
}
