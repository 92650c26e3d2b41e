package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gosiw/gosiw/ddp"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap"
)

// siw probe: connect to an iWARP peer with hand-made MPA Requests, one TCP
// connection each, and report what it does: the revisions it takes,
// RFC 6581 enhanced mode, CRC, markers, P2P and the RTR it picks, the
// IRD/ORD it grants, the largest private data it takes, how it refuses,
// and how long it waits for a Request.

type probeOptions struct {
	json        bool
	timeout     time.Duration // per exchange
	gap         time.Duration // pause between connections
	waitRequest time.Duration // how long to watch a silent connection; 0 skips
	// firstSendDelay holds the RTR after a P2P Reply.
	firstSendDelay time.Duration
}

func newProbeCmd() *cobra.Command {
	o := probeOptions{}
	cmd := &cobra.Command{
		Use:   "probe HOST:PORT",
		Short: "Report what an iWARP peer does in the MPA handshake",
		Long: `Connect to an iWARP (MPA) responder and report what it does: which MPA
revisions it accepts, whether it answers RFC 6581 enhanced Requests in kind,
whether it turns CRC on when asked, whether it refuses markers and how (a Reply
with R set, or a bare close), P2P mode and the RTR it picks when offered all
three, the IRD/ORD it grants when asked for 128/128, the largest PD_Length it
accepts, and how long it waits for a Request on a silent connection.

Each question is one TCP connection carrying one MPA Request; nothing follows
the Request, so the peer's upper layer never sees a data message.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rep, err := runProbe(cmd.Context(), args[0], o)
			if err != nil {
				return err
			}
			if o.json {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			rep.writeText(cmd.OutOrStdout())
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.json, "json", false, "print one JSON object")
	f.DurationVar(&o.timeout, "timeout", 5*time.Second, "how long to wait for each Reply")
	f.DurationVar(&o.gap, "gap", 0, "pause between connections (for servers that restart after each)")
	f.DurationVar(&o.firstSendDelay, "first-send-delay", 20*time.Millisecond,
		"pause between a P2P Reply and the RTR (Linux siw 6.1 loses an FPDU that follows its Reply within ~1 ms)")
	f.DurationVar(&o.waitRequest, "request-timeout-wait", 12*time.Second,
		"how long to watch a silent connection for the peer's Request timeout (0 skips the check)")
	return cmd
}

// probeReport is what the probe found. The first keys are the stable
// interface of --json.
type probeReport struct {
	Peer             string  `json:"peer"`
	AcceptsRev1      bool    `json:"accepts_rev1"`
	AcceptsRev2      bool    `json:"accepts_rev2"`
	AcceptsRev3      bool    `json:"accepts_rev3"`
	Enhanced         bool    `json:"enhanced"`
	CRCWhenRequested bool    `json:"crc_when_requested"`
	Markers          string  `json:"markers"`
	P2P              bool    `json:"p2p"`
	RTRChosen        *string `json:"rtr_chosen"`
	IRD              *int    `json:"ird"`
	ORD              *int    `json:"ord"`
	MaxPrivateData   *int    `json:"max_private_data"`
	Reject           *string `json:"reject"`

	// Details.
	Rev1Answer        *int    `json:"rev1_answered_with_rev,omitempty"`
	Rev3Refusal       string  `json:"rev3_refusal,omitempty"` // "mpa_reject", "close", "silence"
	CRCUnasked        bool    `json:"crc_when_not_requested"`
	RejectPrivateData *string `json:"reject_private_data,omitempty"` // hex, when the markers reject carried any
	RequestTimeoutMS  *int64  `json:"request_timeout_ms"`
	BaseReply         string  `json:"base_reply"` // hex of the Reply to rev 2 + H, IRD/ORD 128/128
	Exchanges         int     `json:"exchanges"`
	UnsolicitedData   string  `json:"unsolicited_data,omitempty"`
}

// outcome is how the peer answered one Request.
type outcome struct {
	reply  *mpa.Frame // the Reply, if a whole one came
	raw    []byte     // its bytes
	extra  []byte     // bytes after it
	closed bool       // the peer closed (or reset) without a whole Reply
	silent bool       // nothing within the timeout
}

func (o outcome) accepted() bool { return o.reply != nil && !o.reply.Reject }

func (o outcome) refusal() string {
	switch {
	case o.reply != nil && o.reply.Reject:
		return "mpa_reject"
	case o.closed:
		return "close"
	case o.silent:
		return "silence"
	}
	return ""
}

type prober struct {
	addr string
	o    probeOptions
	n    int
}

func (p *prober) dial(ctx context.Context) (net.Conn, error) {
	if p.n > 0 && p.o.gap > 0 {
		select {
		case <-time.After(p.o.gap):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	p.n++
	d := net.Dialer{Timeout: p.o.timeout}
	return d.DialContext(ctx, "tcp", p.addr)
}

// ask sends one Request on a new connection and reads the answer. After
// a Reply that accepts peer-to-peer mode it sends the chosen RTR before
// closing, as an initiator must: Linux 6.1's iw_cm hits BUG() in
// cm_close_handler when a P2P connection closes before its RTR.
func (p *prober) ask(ctx context.Context, req []byte) (outcome, error) {
	c, err := p.dial(ctx)
	if err != nil {
		return outcome{}, err
	}
	defer c.Close()
	out, err := p.exchange(c, req)
	if r := out.reply; r != nil && !r.Reject && r.Enhanced && r.P2P {
		var sent mpa.Frame
		_, _ = mpa.ParseFrame(req, &sent)
		if rtr := (r.RTRs() & sent.RTRs()).Choose(); rtr != mpa.RTRNone {
			// Linux siw 6.1 loses an FPDU that arrives within about a
			// millisecond of its Reply; a lost RTR leaves the connection
			// half set up, and closing it then trips the BUG() above.
			time.Sleep(p.o.firstSendDelay)
			fr := mpa.Framer{CRC: r.CRC || sent.CRC, Markers: r.Markers}
			if _, werr := c.Write(appendRTR(nil, &fr, rtr)); werr == nil {
				// Close gracefully: FIN, then wait for the peer's.
				if tc, ok := c.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
				}
				_ = c.SetReadDeadline(time.Now().Add(p.o.timeout))
				_, _ = io.Copy(io.Discard, c)
			}
		}
	}
	return out, err
}

// appendRTR appends the FPDU of RTR r as Linux siw sends it
// (siw_qp_mpa_rts): a zero-length RDMA Write to STag 1, a zero-length
// Read Request with source STag 1, or a zero-length Send.
func appendRTR(b []byte, f *mpa.Framer, r mpa.RTR) []byte {
	var hdr []byte
	switch r {
	case mpa.RTRWrite:
		hdr = ddp.AppendTagged(nil, &ddp.TaggedFields{Last: true, RsvdULP: rdmap.ControlByte(rdmap.Version1, rdmap.OpWrite), STag: 1})
	case mpa.RTRRead:
		hdr = ddp.AppendUntagged(nil, &ddp.UntaggedFields{Last: true,
			RsvdULP: rdmap.ControlByte(rdmap.Version1, rdmap.OpReadRequest), QN: rdmap.QNReadRequest, MSN: 1})
		hdr = rdmap.AppendReadRequest(hdr, &rdmap.ReadRequestFields{SrcSTag: 1})
	case mpa.RTRSend:
		hdr = ddp.AppendUntagged(nil, &ddp.UntaggedFields{Last: true,
			RsvdULP: rdmap.ControlByte(rdmap.Version1, rdmap.OpSend), QN: rdmap.QNSend, MSN: 1})
	}
	return f.AppendFPDU(b, hdr, nil)
}

func (p *prober) exchange(c net.Conn, req []byte) (outcome, error) {
	_ = c.SetDeadline(time.Now().Add(p.o.timeout))
	if _, err := c.Write(req); err != nil {
		return outcome{closed: true}, nil
	}
	buf := make([]byte, 0, 1024)
	tmp := make([]byte, 1024)
	for {
		if len(buf) >= mpa.HeaderLen {
			if total, _ := mpa.FrameLen(buf); len(buf) >= total {
				var f mpa.Frame
				if _, err := mpa.ParseFrame(buf, &f); err != nil && !errors.Is(err, mpa.ErrReservedBits) {
					return outcome{raw: buf, closed: true}, nil
				}
				f.PrivateData = append([]byte(nil), f.PrivateData...)
				return outcome{reply: &f, raw: buf[:total], extra: buf[total:]}, nil
			}
		}
		n, err := c.Read(tmp)
		buf = append(buf, tmp[:n]...)
		if len(buf) > 64*1024 {
			return outcome{raw: buf, closed: true}, nil
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return outcome{raw: buf, silent: true}, nil
			}
			return outcome{raw: buf, closed: true}, nil
		}
	}
}

func request(f mpa.Frame) []byte {
	b, err := mpa.AppendFrame(nil, &f)
	if err != nil {
		panic(err)
	}
	return b
}

// enhancedRequest is a revision 2 Request with the RFC 6581 block.
func enhancedRequest(ird, ord uint16) mpa.Frame {
	return mpa.Frame{Rev: mpa.Rev2, Enhanced: true, IRD: ird, ORD: ord}
}

func runProbe(ctx context.Context, addr string, o probeOptions) (*probeReport, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	if o.timeout <= 0 {
		o.timeout = 5 * time.Second
	}
	p := &prober{addr: addr, o: o}
	r := &probeReport{Peer: addr}

	// Revision 2 with the RFC 6581 block, asking 128/128: the baseline.
	base, err := p.ask(ctx, request(enhancedRequest(128, 128)))
	if err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	if base.reply == nil {
		return nil, fmt.Errorf("probe: %s did not answer a revision 2 MPA Request (%s; %d bytes: %x)",
			addr, base.refusal(), len(base.raw), base.raw)
	}
	r.BaseReply = hex.EncodeToString(base.raw)
	r.AcceptsRev2 = base.accepted()
	if base.accepted() {
		r.Enhanced = base.reply.Rev == mpa.Rev2 && base.reply.Enhanced
		r.CRCUnasked = base.reply.CRC
		if r.Enhanced {
			ird, ord := int(base.reply.IRD), int(base.reply.ORD)
			r.IRD, r.ORD = &ird, &ord
		}
	}
	if len(base.extra) > 0 {
		r.UnsolicitedData = fmt.Sprintf("%d bytes right after the Reply", len(base.extra))
	}

	// Revision 1, and an unknown revision 3.
	v1, err := p.ask(ctx, request(mpa.Frame{Rev: mpa.Rev1}))
	if err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	r.AcceptsRev1 = v1.accepted()
	if v1.reply != nil {
		rev := int(v1.reply.Rev)
		r.Rev1Answer = &rev
	}
	v3, err := p.ask(ctx, request(mpa.Frame{Rev: 3}))
	if err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	r.AcceptsRev3 = v3.accepted()
	r.Rev3Refusal = v3.refusal()

	// CRC asked for.
	crcReq := enhancedRequest(1, 1)
	crcReq.CRC = true
	crc, err := p.ask(ctx, request(crcReq))
	if err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	r.CRCWhenRequested = crc.accepted() && crc.reply.CRC

	// Markers asked for: accepted, or refused (and how).
	mReq := enhancedRequest(1, 1)
	mReq.Markers = true
	m, err := p.ask(ctx, request(mReq))
	if err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	if m.accepted() {
		r.Markers = "accepted"
	} else {
		r.Markers = "refused"
		if s := m.refusal(); s != "" {
			r.Reject = &s
		}
		if m.reply != nil && len(m.reply.PrivateData) > 0 {
			s := hex.EncodeToString(m.reply.PrivateData)
			r.RejectPrivateData = &s
		}
	}

	// P2P with every RTR type offered.
	pReq := enhancedRequest(16, 16)
	pReq.P2P = true
	pReq.SetRTRs(mpa.RTRSetAll)
	pp, err := p.ask(ctx, request(pReq))
	if err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	if pp.accepted() && pp.reply.Enhanced {
		r.P2P = pp.reply.P2P
		if rtr := pp.reply.RTRs().Choose(); rtr != mpa.RTRNone {
			s := rtr.String()
			r.RTRChosen = &s
		}
	}

	// The largest PD_Length taken, by bisection over RFC 5044's 4..512 in
	// revision 2 enhanced Requests (the block counts).
	if r.AcceptsRev2 && r.Enhanced {
		takes := func(pdLen int) (bool, error) {
			f := enhancedRequest(1, 1)
			f.PrivateData = make([]byte, pdLen-mpa.EnhancedLen)
			out, err := p.ask(ctx, request(f))
			return out.accepted(), err
		}
		lo, hi := mpa.EnhancedLen, mpa.MaxPrivateData // lo is taken (the baseline)
		ok, err := takes(hi)
		if err != nil {
			return nil, fmt.Errorf("probe: %w", err)
		}
		if ok {
			lo = hi
		} else {
			for hi-lo > 1 {
				mid := (lo + hi) / 2
				ok, err := takes(mid)
				if err != nil {
					return nil, fmt.Errorf("probe: %w", err)
				}
				if ok {
					lo = mid
				} else {
					hi = mid
				}
			}
		}
		r.MaxPrivateData = &lo
	}

	// How long the peer waits for a Request on a silent connection.
	if o.waitRequest > 0 {
		c, err := p.dial(ctx)
		if err != nil {
			return nil, fmt.Errorf("probe: %w", err)
		}
		start := time.Now()
		_ = c.SetReadDeadline(start.Add(o.waitRequest))
		_, err = io.Copy(io.Discard, c)
		var ne net.Error
		if !(errors.As(err, &ne) && ne.Timeout()) {
			ms := time.Since(start).Milliseconds()
			r.RequestTimeoutMS = &ms
		}
		c.Close()
	}
	r.Exchanges = p.n
	return r, nil
}

func (r *probeReport) writeText(w io.Writer) {
	yes := func(b bool, y, n string) string {
		if b {
			return y
		}
		return n
	}
	line := func(k, v string) { fmt.Fprintf(w, "  %-20s %s\n", k, v) }
	fmt.Fprintf(w, "MPA peer %s (%d connections)\n", r.Peer, r.Exchanges)
	v1 := yes(r.AcceptsRev1, "accepted", "refused")
	if r.Rev1Answer != nil {
		v1 += fmt.Sprintf(" (answered with revision %d)", *r.Rev1Answer)
	}
	line("revision 1", v1)
	line("revision 2", yes(r.AcceptsRev2, "accepted", "refused")+yes(r.Enhanced, ", enhanced (RFC 6581 IRD/ORD block)", ", not enhanced"))
	line("revision 3", yes(r.AcceptsRev3, "accepted", "refused: "+r.Rev3Refusal))
	if r.IRD != nil {
		line("IRD/ORD granted", fmt.Sprintf("%d/%d (asked 128/128)", *r.IRD, *r.ORD))
	}
	line("CRC", yes(r.CRCWhenRequested, "on when asked", "not turned on when asked")+yes(r.CRCUnasked, "; on even when not asked", ""))
	mk := r.Markers
	if r.Reject != nil {
		how := map[string]string{"mpa_reject": "MPA Reply with R set", "close": "bare close", "silence": "no answer"}[*r.Reject]
		mk += ": " + how
		if r.RejectPrivateData != nil {
			mk += " with private data " + *r.RejectPrivateData
		} else if *r.Reject == "mpa_reject" {
			mk += ", no private data"
		}
	}
	line("markers", mk)
	p2p := yes(r.P2P, "echoed", "not echoed")
	if r.RTRChosen != nil {
		p2p += "; RTR chosen: " + *r.RTRChosen + " (offered write|read|send)"
	}
	line("peer-to-peer", p2p)
	if r.MaxPrivateData != nil {
		line("private data", fmt.Sprintf("PD_Length up to %d accepted", *r.MaxPrivateData))
	}
	switch {
	case r.RequestTimeoutMS != nil:
		line("request timeout", fmt.Sprintf("closed a silent connection after %.1f s", float64(*r.RequestTimeoutMS)/1000))
	default:
		line("request timeout", "not seen (kept a silent connection open, or not measured)")
	}
	if r.UnsolicitedData != "" {
		line("warning", "the peer sent "+r.UnsolicitedData+" (RFC 5044: nothing before the initiator's first FPDU)")
	}
	line("reply to rev 2", strings.ToUpper(r.BaseReply))
}
