package main

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gosiw/gosiw/layers"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap/wire"
)

func newDumpCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "dump FILE",
		Short: "Decode the iWARP (MPA/DDP/RDMAP) connections in a pcap or pcapng capture",
		Long: `dump follows every TCP connection of a capture from its MPA Request and
Reply (learning revision, CRC and markers from them) and prints each
handshake frame and FPDU, in order, with the CRC checked where it is in use.
A connection whose handshake is not in the capture gets one line saying so;
nothing of it is guessed.

The text output starts with a legend of the flag letters. Private data and
reject reasons show as quoted text when printable, as hex otherwise; pd_len
is PD_Length as on the wire, which in RFC 6581 enhanced mode counts the
4-byte IRD/ORD block before the upper layer's private data. Notes are
numbered with the last packet they refer to.

With --json it prints one JSON object per line: conn, dir, frame, kind,
packet and, by kind, the handshake fields (rev, markers, crc, reject,
enhanced, p2p, ird, ord, rtr, pd_len, pd_block_len, ulp_pd_len,
private_data in hex, private_data_text when printable, reject_reason for
a Reply with R set), the FPDU fields (ulpdu_len, crc: CRC32c in use,
crc_value, crc_ok, ddp{...}, rdmap{...}, payload_len), "error" for a
malformed frame, or "note". "crc" is a boolean everywhere.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runDump(cmd.OutOrStdout(), args[0], asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per line")
	return cmd
}

// runDump decodes the capture at path and writes one line per record.
func runDump(out io.Writer, path string, asJSON bool) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("dump: %w", err)
	}
	defer f.Close()
	w := bufio.NewWriter(out)
	var werr error
	if !asJSON {
		_, werr = fmt.Fprintln(w, dumpLegend)
	}
	emit := func(r *layers.Record) {
		if werr != nil {
			return
		}
		if asJSON {
			werr = writeDumpJSON(w, r)
		} else {
			_, werr = fmt.Fprintln(w, dumpTextLine(r))
		}
	}
	derr := layers.DecodeCapture(f, emit)
	if err := w.Flush(); werr == nil {
		werr = err
	}
	if derr != nil {
		return fmt.Errorf("dump: %s: %w", path, derr)
	}
	return werr
}

// dumpLegend heads the text output.
const dumpLegend = "# flags: M markers, C CRC32c, R reject, H enhanced (RFC 6581 IRD/ORD block, counted in pd_len);" +
	" FPDU crc ok|BAD: CRC32c checked; DDP T tagged, L last; i2r/r2i: initiator to responder and back; #N: frame N of that direction"

// JSON shapes. Field order is the order of the struct fields.

type jsonCommon struct {
	Conn   string `json:"conn"`
	Dir    string `json:"dir,omitempty"`
	Frame  *int   `json:"frame,omitempty"`
	Kind   string `json:"kind"`
	Packet int    `json:"packet,omitempty"`
}

type jsonHandshake struct {
	jsonCommon
	Rev         uint8    `json:"rev"`
	Markers     bool     `json:"markers"`
	CRC         bool     `json:"crc"`
	Reject      bool     `json:"reject"`
	Enhanced    bool     `json:"enhanced"`
	P2P         bool     `json:"p2p"`
	IRD         *uint16  `json:"ird"`
	ORD         *uint16  `json:"ord"`
	RTR         []string `json:"rtr"`
	PDLen       uint16   `json:"pd_len"`       // as on the wire: pd_block_len + ulp_pd_len
	PDBlockLen  int      `json:"pd_block_len"` // the RFC 6581 IRD/ORD block: 4 when enhanced, else 0
	ULPPDLen    int      `json:"ulp_pd_len"`   // the upper layer's private data
	PrivateData string   `json:"private_data"` // the upper layer's, hex
	// PrivateDataText is the private data as text, when printable.
	PrivateDataText string `json:"private_data_text,omitempty"`
	// RejectReason is a rejecting Reply's private data, as text when
	// printable, else hex; "" when it carries none.
	RejectReason *string `json:"reject_reason,omitempty"`
	Reserved     uint8   `json:"reserved,omitempty"`
}

// jsonMalformedHandshake is a handshake frame that does not decode.
type jsonMalformedHandshake struct {
	jsonCommon
	Rev   *uint8 `json:"rev,omitempty"`
	Error string `json:"error"`
	Wire  string `json:"wire"`
}

type jsonFPDU struct {
	jsonCommon
	ULPDULen   uint16     `json:"ulpdu_len"`
	CRC        bool       `json:"crc"`       // CRC32c in use on this connection
	CRCValue   uint32     `json:"crc_value"` // the CRC field as on the wire
	CRCOK      *bool      `json:"crc_ok"`    // checked: null when CRC is not in use
	DDP        *jsonDDP   `json:"ddp,omitempty"`
	RDMAP      *jsonRDMAP `json:"rdmap,omitempty"`
	PayloadLen *int       `json:"payload_len,omitempty"`
	Markers    int        `json:"marker_count,omitempty"`
	Error      string     `json:"error,omitempty"`
}

type jsonDDP struct {
	Tagged  bool    `json:"tagged"`
	Last    bool    `json:"last"`
	Version uint8   `json:"version"`
	STag    *uint32 `json:"stag,omitempty"`
	TO      *uint64 `json:"to,omitempty"`
	QN      *uint32 `json:"qn,omitempty"`
	MSN     *uint32 `json:"msn,omitempty"`
	MO      *uint32 `json:"mo,omitempty"`
}

type jsonRDMAP struct {
	Version uint8   `json:"version"`
	Opcode  string  `json:"opcode"`
	InvSTag *uint32 `json:"inv_stag,omitempty"`
	// Read Request.
	SinkSTag *uint32 `json:"sink_stag,omitempty"`
	SinkTO   *uint64 `json:"sink_to,omitempty"`
	ReadLen  *uint32 `json:"read_len,omitempty"`
	SrcSTag  *uint32 `json:"src_stag,omitempty"`
	SrcTO    *uint64 `json:"src_to,omitempty"`
	// Terminate.
	TermLayer  *uint8  `json:"term_layer,omitempty"`
	TermEType  *uint8  `json:"term_etype,omitempty"`
	TermECode  *uint8  `json:"term_ecode,omitempty"`
	TermM      *bool   `json:"term_m,omitempty"`
	TermD      *bool   `json:"term_d,omitempty"`
	TermR      *bool   `json:"term_r,omitempty"`
	TermLayout string  `json:"term_layout,omitempty"`
	TermText   string  `json:"term_text,omitempty"`
	TermSegLen *uint16 `json:"term_seg_len,omitempty"`
	// RFC 7306 atomics.
	AtomicOp    string  `json:"atomic_op,omitempty"`
	ReqID       *uint32 `json:"req_id,omitempty"`
	RemoteSTag  *uint32 `json:"remote_stag,omitempty"`
	RemoteTO    *uint64 `json:"remote_to,omitempty"`
	AddSwap     *uint64 `json:"add_swap,omitempty"`
	AddSwapMask *uint64 `json:"add_swap_mask,omitempty"`
	Compare     *uint64 `json:"compare,omitempty"`
	CompareMask *uint64 `json:"compare_mask,omitempty"`
	OrigReqID   *uint32 `json:"orig_req_id,omitempty"`
	OrigValue   *uint64 `json:"orig_value,omitempty"`
}

type jsonNote struct {
	jsonCommon
	Note string `json:"note"`
}

func jsonPtr[T any](v T) *T { return &v }

func jsonCommonOf(r *layers.Record) jsonCommon {
	c := jsonCommon{Conn: r.Conn.String(), Dir: r.Dir.String(), Kind: r.Kind.String(), Packet: r.Packet}
	if r.Index >= 0 {
		c.Frame = jsonPtr(r.Index)
	}
	return c
}

func writeDumpJSON(w io.Writer, r *layers.Record) error {
	b, err := json.Marshal(dumpJSONValue(r))
	if err != nil {
		return err
	}
	b = append(b, '\n')
	_, err = w.Write(b)
	return err
}

func dumpJSONValue(r *layers.Record) any {
	switch r.Kind {
	case layers.KindMPARequest, layers.KindMPAReply:
		if r.Startup == nil {
			m := jsonMalformedHandshake{jsonCommon: jsonCommonOf(r), Wire: hex.EncodeToString(r.Wire)}
			if r.Err != nil {
				m.Error = r.Err.Error()
			}
			var re *mpa.RevisionError
			if errors.As(r.Err, &re) {
				m.Rev = jsonPtr(re.Rev)
			}
			return m
		}
		return dumpHandshakeJSON(r)
	case layers.KindFPDU:
		return dumpFPDUJSON(r)
	}
	return jsonNote{jsonCommon: jsonCommonOf(r), Note: r.Note}
}

func dumpHandshakeJSON(r *layers.Record) jsonHandshake {
	s := r.Startup
	h := jsonHandshake{
		jsonCommon: jsonCommonOf(r), Rev: s.Rev, Markers: s.Markers, CRC: s.CRC, Reject: s.Reject,
		Enhanced: s.Enhanced, P2P: s.P2P, RTR: dumpRTRList(&s.Frame), PDLen: s.PDLength,
		ULPPDLen: len(s.PrivateData), PrivateData: hex.EncodeToString(s.PrivateData), Reserved: s.Reserved,
	}
	if s.Enhanced {
		h.PDBlockLen = mpa.EnhancedLen
	}
	if isText(s.PrivateData) {
		h.PrivateDataText = string(s.PrivateData)
	}
	if s.Reject {
		reason := ""
		if len(s.PrivateData) > 0 {
			reason = textOrHex(s.PrivateData, "")
			if isText(s.PrivateData) {
				reason = string(s.PrivateData)
			}
		}
		h.RejectReason = &reason
	}
	if s.Enhanced {
		h.IRD, h.ORD = jsonPtr(s.IRD), jsonPtr(s.ORD)
	}
	return h
}

// dumpRTRList lists the RFC 6581 RTR bits set: "write", "read", "send".
func dumpRTRList(f *mpa.Frame) []string {
	l := []string{}
	if f.RTRWrite {
		l = append(l, "write")
	}
	if f.RTRRead {
		l = append(l, "read")
	}
	if f.RTRSend {
		l = append(l, "send")
	}
	return l
}

func dumpFPDUJSON(r *layers.Record) jsonFPDU {
	j := jsonFPDU{jsonCommon: jsonCommonOf(r)}
	if r.Err != nil {
		j.Error = r.Err.Error()
	}
	m := r.MPA
	if m == nil {
		return j
	}
	j.ULPDULen, j.CRC, j.CRCValue, j.Markers = m.ULPDULength, m.Framing.CRC, m.CRC, m.MarkerCount
	if m.Framing.CRC {
		j.CRCOK = jsonPtr(m.CRCValid)
	}
	d := r.DDP
	if d == nil {
		return j
	}
	j.DDP = &jsonDDP{Tagged: d.Tagged, Last: d.Last, Version: d.Version}
	if d.Tagged {
		j.DDP.STag, j.DDP.TO = jsonPtr(d.STag), jsonPtr(d.TO)
	} else {
		j.DDP.QN, j.DDP.MSN, j.DDP.MO = jsonPtr(d.QN), jsonPtr(d.MSN), jsonPtr(d.MO)
	}
	rd := &jsonRDMAP{Version: d.RDMAPVersion, Opcode: d.Opcode.String()}
	j.RDMAP = rd
	if !d.Tagged && wire.Opcode(d.Opcode).HasInvalidateSTag() {
		rd.InvSTag = jsonPtr(d.InvalidateSTag)
	}
	if rr := r.ReadRequest; rr != nil {
		rd.SinkSTag, rd.SinkTO, rd.ReadLen = jsonPtr(rr.SinkSTag), jsonPtr(rr.SinkTO), jsonPtr(rr.Size)
		rd.SrcSTag, rd.SrcTO = jsonPtr(rr.SrcSTag), jsonPtr(rr.SrcTO)
	}
	if t := r.Terminate; t != nil {
		rd.TermLayer, rd.TermEType, rd.TermECode = jsonPtr(uint8(t.Layer)), jsonPtr(t.EType), jsonPtr(t.Code)
		rd.TermM, rd.TermD, rd.TermR = jsonPtr(t.M), jsonPtr(t.D), jsonPtr(t.R)
		rd.TermLayout, rd.TermText = t.Layout.String(), t.Terminate.String()
		if t.M || t.D || t.R {
			rd.TermSegLen = jsonPtr(t.SegLen)
		}
	}
	if a := r.AtomicRequest; a != nil {
		rd.AtomicOp, rd.ReqID = a.Op.String(), jsonPtr(a.ReqID)
		rd.RemoteSTag, rd.RemoteTO = jsonPtr(uint32(a.STag)), jsonPtr(a.TO)
		rd.AddSwap, rd.AddSwapMask = jsonPtr(a.AddSwap), jsonPtr(a.AddSwapMask)
		rd.Compare, rd.CompareMask = jsonPtr(a.Compare), jsonPtr(a.CompareMask)
	}
	if a := r.AtomicResponse; a != nil {
		rd.OrigReqID, rd.OrigValue = jsonPtr(a.ReqID), jsonPtr(a.OriginalValue)
	}
	if r.Err == nil {
		j.PayloadLen = jsonPtr(len(r.Payload))
	}
	return j
}

// dumpTextLine formats a record as one readable line.
func dumpTextLine(r *layers.Record) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%5d %s", r.Packet, r.Conn)
	if r.Dir != layers.DirNone {
		fmt.Fprintf(&b, " %s", r.Dir)
	}
	if r.Index >= 0 {
		fmt.Fprintf(&b, " #%d", r.Index)
	}
	switch r.Kind {
	case layers.KindMPARequest, layers.KindMPAReply:
		name := "MPA Request"
		if r.Kind == layers.KindMPAReply {
			name = "MPA Reply"
		}
		b.WriteString(" " + name)
		if s := r.Startup; s != nil {
			fmt.Fprintf(&b, " rev %d", s.Rev)
			for _, f := range []struct {
				on   bool
				name string
			}{{s.Markers, "M"}, {s.CRC, "C"}, {s.Reject, "R"}, {s.Enhanced, "H"}} {
				if f.on {
					b.WriteString(" " + f.name)
				}
			}
			if s.Reserved != 0 {
				fmt.Fprintf(&b, " res %#02x", s.Reserved)
			}
			if s.Enhanced {
				fmt.Fprintf(&b, " ird %d ord %d", s.IRD, s.ORD)
				if s.P2P {
					b.WriteString(" p2p")
				}
				if rtr := dumpRTRList(&s.Frame); len(rtr) > 0 {
					fmt.Fprintf(&b, " rtr %s", strings.Join(rtr, ","))
				}
			}
			fmt.Fprintf(&b, " pd_len %d", s.PDLength)
			if s.Enhanced {
				fmt.Fprintf(&b, " (block %d + ULP %d)", mpa.EnhancedLen, len(s.PrivateData))
			}
			switch {
			case s.Reject && len(s.PrivateData) == 0:
				b.WriteString(" no reason given")
			case s.Reject:
				b.WriteString(" reason " + textOrHex(s.PrivateData, ""))
			case len(s.PrivateData) > 0:
				b.WriteString(" pd " + textOrHex(s.PrivateData, ""))
			}
		}
	case layers.KindFPDU:
		b.WriteString(" FPDU")
		if m := r.MPA; m != nil {
			fmt.Fprintf(&b, " len %d crc %#08x", m.ULPDULength, m.CRC)
			if m.Framing.CRC {
				if m.CRCValid {
					b.WriteString(" ok")
				} else {
					b.WriteString(" BAD")
				}
			}
			if m.MarkerCount > 0 {
				fmt.Fprintf(&b, " markers %d", m.MarkerCount)
			}
		}
		if d := r.DDP; d != nil {
			b.WriteString(" | DDP")
			if d.Tagged {
				fmt.Fprintf(&b, " T stag %#x to %#x", d.STag, d.TO)
			} else {
				fmt.Fprintf(&b, " qn %d msn %d mo %d", d.QN, d.MSN, d.MO)
			}
			if d.Last {
				b.WriteString(" L")
			}
			fmt.Fprintf(&b, " | RDMAP v%d %s", d.RDMAPVersion, d.Opcode)
			if !d.Tagged && wire.Opcode(d.Opcode).HasInvalidateSTag() {
				fmt.Fprintf(&b, " inv %#x", d.InvalidateSTag)
			}
		}
		if rr := r.ReadRequest; rr != nil {
			fmt.Fprintf(&b, " sink %#x@%#x len %d src %#x@%#x", rr.SinkSTag, rr.SinkTO, rr.Size, rr.SrcSTag, rr.SrcTO)
		}
		if t := r.Terminate; t != nil {
			fmt.Fprintf(&b, " %s (layer %d type %d code %#x", t.Terminate.String(), t.Layer, t.EType, t.Code)
			if t.M {
				b.WriteString(" M")
			}
			if t.D {
				b.WriteString(" D")
			}
			if t.R {
				b.WriteString(" R")
			}
			fmt.Fprintf(&b, ", %s layout)", t.Layout)
		}
		if a := r.AtomicRequest; a != nil {
			fmt.Fprintf(&b, " %s id %d stag %#x to %#x", a.Op, a.ReqID, uint32(a.STag), a.TO)
		}
		if a := r.AtomicResponse; a != nil {
			fmt.Fprintf(&b, " id %d value %#x", a.ReqID, a.OriginalValue)
		}
		if r.Err == nil {
			fmt.Fprintf(&b, " | payload %d", len(r.Payload))
		}
	default:
		fmt.Fprintf(&b, " %s: %s", strings.ToUpper(strings.ReplaceAll(r.Kind.String(), "_", " ")), r.Note)
	}
	if r.Err != nil {
		fmt.Fprintf(&b, " MALFORMED: %v", r.Err)
		if r.Startup == nil && r.MPA == nil && len(r.Wire) > 0 {
			fmt.Fprintf(&b, " [%x]", r.Wire)
		}
	}
	return b.String()
}
