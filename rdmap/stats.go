package rdmap

import "sync/atomic"

// QPStats are a QP's data path counters. The receive counters (Rx*) are
// kept by the receive goroutine and published before each read of the
// socket, when the last segment of a message other than an RDMA Write
// (or a control message) is committed, before its completion, and when
// the QP stops receiving: a snapshot taken meanwhile may lag the
// segments still arriving, and Writes already placed, by up to one
// socket read.
type QPStats struct {
	TxFPDUs, TxBytes, TxWritevs uint64
	// TxULPDU is the ULPDU the QP frames its messages to now: the MULPDU
	// of the connection's EMSS as it last read it (Start, then every MiB
	// written), or QPConfig.MaxULPDU; 0 before Start.
	TxULPDU int
	// TxDirect counts batches written on a poster's goroutine (a direct
	// send: see PostSend); TxDirectRest those of them whose rest (all of
	// it, when the socket took nothing) the send goroutine wrote.
	TxDirect, TxDirectRest uint64
	// TxPolled counts batches written on a waiter's goroutine (PollTx);
	// TxPolledRest those of them whose rest the send goroutine wrote.
	TxPolled, TxPolledRest uint64
	RxFPDUs, RxBytes       uint64
	// RxDriven counts FPDUs received on a waiter's goroutine (PollRx).
	RxDriven uint64
	// RxPlacedDirect counts payload bytes read from the socket straight
	// into registered memory; RxPlacedCopied those copied from the
	// receive buffer (all of them under CRC, which is checked in the
	// buffer, unless QPConfig.CRCInPlace).
	RxPlacedDirect, RxPlacedCopied  uint64
	TerminatesSent, TerminatesRecvd uint64
	CRCErrors                       uint64
}

type qpCounters struct {
	txFPDUs, txBytes, txWritevs    atomic.Uint64
	ulpdu                          atomic.Int64
	txDirect, txDirectRest         atomic.Uint64
	txPolled, txPolledRest         atomic.Uint64
	rxFPDUs, rxBytes               atomic.Uint64
	rxDirect, rxCopied             atomic.Uint64
	rxDriven                       atomic.Uint64
	termSent, termRecvd, crcErrors atomic.Uint64
}

// Stats returns a snapshot of the QP's counters.
func (qp *QP) Stats() QPStats {
	c := &qp.stats
	return QPStats{
		TxFPDUs: c.txFPDUs.Load(), TxBytes: c.txBytes.Load(), TxWritevs: c.txWritevs.Load(), TxULPDU: int(c.ulpdu.Load()),
		TxDirect: c.txDirect.Load(), TxDirectRest: c.txDirectRest.Load(),
		TxPolled: c.txPolled.Load(), TxPolledRest: c.txPolledRest.Load(),
		RxFPDUs: c.rxFPDUs.Load(), RxBytes: c.rxBytes.Load(), RxDriven: c.rxDriven.Load(),
		RxPlacedDirect: c.rxDirect.Load(), RxPlacedCopied: c.rxCopied.Load(),
		TerminatesSent: c.termSent.Load(), TerminatesRecvd: c.termRecvd.Load(),
		CRCErrors: c.crcErrors.Load(),
	}
}

// DeviceStats are device-wide gauges and counters.
type DeviceStats struct {
	QPs, MRs                        int64
	TerminatesSent, TerminatesRecvd uint64
}

type deviceCounters struct {
	qps, mrs            atomic.Int64
	termSent, termRecvd atomic.Uint64
}

// Stats returns a snapshot of the device's counters.
func (d *Device) Stats() DeviceStats {
	return DeviceStats{
		QPs: d.stats.qps.Load(), MRs: d.stats.mrs.Load(),
		TerminatesSent: d.stats.termSent.Load(), TerminatesRecvd: d.stats.termRecvd.Load(),
	}
}
