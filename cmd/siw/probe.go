package main

import (
	"bytes"
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

	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap/wire"
)

// siw probe: connect to an iWARP peer with hand-made MPA Requests, one TCP
// connection each, and report what it does: the revisions it takes,
// RFC 6581 enhanced mode, CRC, markers, P2P and the RTR it picks, the
// IRD/ORD it grants, whether it answers the [MS-SMBD] IRD/ORD header in
// revision 1, the largest private data it takes, how it refuses, and how
// long it waits for a Request.

type probeOptions struct {
	json        bool
	timeout     time.Duration // per exchange
	gap         time.Duration // pause between connections
	waitRequest time.Duration // how long to watch a silent connection; 0 skips
	// firstSendDelay holds the RTR after a P2P Reply.
	firstSendDelay time.Duration
	// privateData goes in every Request (the ULP's part; zeros follow it
	// in the PD_Length bisection).
	privateData []byte
}

func newProbeCmd() *cobra.Command {
	o := probeOptions{}
	var pdFlag string
	cmd := &cobra.Command{
		Use:   "probe HOST:PORT",
		Short: "Report what an iWARP peer does in the MPA handshake",
		Long: `Connect to an iWARP (MPA) responder and report what it does: which MPA
revisions it accepts, whether it answers RFC 6581 enhanced Requests in kind,
whether it turns CRC on when asked, whether it refuses markers and how (a Reply
with R set, or a bare close), P2P mode and the RTR it picks when offered all
three, the IRD/ORD it grants when asked for 128/128, whether it answers a
revision 1 Request carrying the [MS-SMBD] IRD/ORD header (SMB Direct's
negotiation for MPA revision 1) with one of its own and the IRD/ORD that
header grants, the largest PD_Length it accepts, and how long it waits for a
Request on a silent connection.

It tells the MPA layer's answer from the upper layer's: a Reply with R set
carrying private data is the upper layer refusing a Request the MPA layer
took. Each fact says what it was learned from; what the probe cannot tell
(an IRD/ORD grant behind a reject, say) is reported unknown, with why.

Each question is one TCP connection carrying one MPA Request; nothing follows
the Request, so the peer's upper layer never sees a data message.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if strings.HasPrefix(pdFlag, "0x") {
				b, err := hex.DecodeString(pdFlag[2:])
				if err != nil {
					return fmt.Errorf("probe: --private-data %q: not hex after 0x", pdFlag)
				}
				o.privateData = b
			} else {
				o.privateData = []byte(pdFlag)
			}
			if o.timeout <= 0 {
				return fmt.Errorf("probe: --timeout %v: want a positive duration", o.timeout)
			}
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
	f.StringVar(&pdFlag, "private-data", "", `the upper layer's private data for every Request (text, or hex after 0x), e.g. "gosiw-region/1 scratch" for siwd; without it a ULP that wants some rejects every Request, and what only an accept tells stays unknown`)
	f.DurationVar(&o.timeout, "timeout", 5*time.Second, "how long to wait for each Reply")
	f.DurationVar(&o.gap, "gap", 0, "pause between connections (for servers that restart after each)")
	f.DurationVar(&o.firstSendDelay, "first-send-delay", 20*time.Millisecond,
		"pause between a P2P Reply and the RTR (Linux siw 6.1 loses an FPDU that follows its Reply within ~1 ms)")
	f.DurationVar(&o.waitRequest, "request-timeout-wait", 12*time.Second,
		"how long to watch a silent connection for the peer's Request timeout (0 skips the check)")
	return cmd
}

// probeFact is one thing the probe found out, with what it was learned
// from. Value is nil when the probe could not tell; From then says why.
type probeFact struct {
	Value any    `json:"value"`
	From  string `json:"from"`
}

func known(v any, from string, args ...any) probeFact {
	return probeFact{Value: v, From: fmt.Sprintf(from, args...)}
}

func unknown(why string, args ...any) probeFact {
	return probeFact{From: fmt.Sprintf(why, args...)}
}

// Known reports whether the probe found the value out.
func (f probeFact) Known() bool { return f.Value != nil }

// probeReport is what the probe found. Each fact says what it was learned
// from: a Reply that accepted, a Reply with R set from the peer's upper
// layer (ULP: the MPA layer took the Request and handed it up), a refusal
// by the MPA layer, or nothing (unknown, and why).
type probeReport struct {
	Peer string `json:"peer"`
	// The upper layer's answer to the probe's private data: "accepts",
	// "rejects" (with the private data it sent), or unknown.
	ULP            probeFact `json:"ulp"`
	Rev1           probeFact `json:"rev1"` // "accepted", "refused"
	Rev2           probeFact `json:"rev2"`
	Rev3           probeFact `json:"rev3"`
	Enhanced       probeFact `json:"enhanced"`           // bool
	CRC            probeFact `json:"crc_when_requested"` // "on", "off", "refused"
	CRCUnasked     probeFact `json:"crc_when_not_requested"`
	Markers        probeFact `json:"markers"`         // "accepted", "refused"
	MarkersRefusal probeFact `json:"markers_refusal"` // how: "reply_r_set", "close", "silence"
	P2P            probeFact `json:"p2p"`             // bool
	RTR            probeFact `json:"rtr_chosen"`      // "write", "read", "send"
	IRD            probeFact `json:"ird"`             // int, asked 128
	ORD            probeFact `json:"ord"`             // int, asked 128
	// SMBD: the [MS-SMBD] header of the peer's answer to a revision 1
	// Request carrying one (asking 128/128): "IRD n ORD m", or
	// "no header".
	SMBD           probeFact `json:"smbd_header"`
	MaxPrivateData probeFact `json:"max_private_data"`
	RequestTimeout probeFact `json:"request_timeout_ms"`

	BaseReply       string `json:"base_reply"` // hex of the Reply to rev 2 + H, IRD/ORD 128/128
	Exchanges       int    `json:"exchanges"`
	UnsolicitedData string `json:"unsolicited_data,omitempty"`
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

// ulpReject: a Reply with R set carrying private data. The MPA layer has
// no reason of its own to send private data with a reject (Linux siw and
// gosiw send none), so the Request went up and the ULP refused it.
func (o outcome) ulpReject() bool {
	return o.reply != nil && o.reply.Reject && len(o.reply.PrivateData) > 0
}

// bareReject: a Reply with R set and no private data: an MPA-level
// refusal, or a ULP that rejects without a word.
func (o outcome) bareReject() bool {
	return o.reply != nil && o.reply.Reject && len(o.reply.PrivateData) == 0
}

// notMPA: the peer sent bytes that are not an MPA Reply.
func (o outcome) notMPA() bool {
	if o.reply != nil || len(o.raw) == 0 {
		return false
	}
	k := o.raw[:min(len(o.raw), mpa.KeyLen)]
	return !bytes.HasPrefix(mpa.KeyReply[:], k)
}

func (o outcome) refusal() string {
	switch {
	case o.reply != nil && o.reply.Reject:
		return "reply_r_set"
	case o.closed:
		return "close"
	case o.silent:
		return "silence"
	}
	return ""
}

// describe says what the peer did, for a fact's "from".
func (o outcome) describe() string {
	switch {
	case o.accepted():
		return "a Reply with R clear"
	case o.ulpReject():
		return fmt.Sprintf("a Reply with R set carrying the upper layer's private data %s", printable(o.reply.PrivateData))
	case o.bareReject():
		return "a Reply with R set and no private data"
	case o.notMPA():
		return "bytes that are not an MPA Reply: " + textOrHex(o.raw[:min(len(o.raw), 64)], "")
	case o.closed:
		return "a close without a Reply"
	}
	return "no answer in time"
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
			if _, werr := c.Write(fr.AppendFPDU(nil, wire.AppendRTR(nil, rtr), nil)); werr == nil {
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

// notIWARP explains a peer that did not answer the first Request with a
// Reply.
func notIWARP(addr string, o outcome, timeout time.Duration) error {
	switch {
	case o.notMPA():
		return fmt.Errorf("probe: not an iWARP peer: %s answered %s to an MPA Request", addr, textOrHex(bytes.TrimRight(o.raw[:min(len(o.raw), mpa.RawLen)], "\r\n"), "that are not an MPA Reply"))
	case o.closed && len(o.raw) > 0:
		return fmt.Errorf("probe: %s answered an MPA Request with %d bytes that are not a valid Reply (%x): is it an iWARP (MPA) responder?", addr, len(o.raw), o.raw[:min(len(o.raw), 64)])
	case o.closed:
		return fmt.Errorf("probe: %s closed the connection without answering an MPA Request: is it an iWARP (MPA) responder?", addr)
	}
	return fmt.Errorf("probe: %s did not answer an MPA Request within %v: is it an iWARP (MPA) responder? (--timeout waits longer)", addr, timeout)
}

// judge tells, for one question, whether the peer's MPA layer took the
// Request: yes (a Reply with R clear, or the ULP's reject with its
// private data: the MPA layer handed the Request up), no (refused at the
// MPA level: a close, silence, or a bare reject where the ULP is known to
// accept or to give a reason), or unknown (a bare reject from a peer
// whose ULP rejects without a reason too).
type judge struct {
	ulp string // "accepts", "rejects" (with private data), "bare" (rejects without), "" (unknown)
}

// took returns whether the MPA layer took the Request o answers (nil:
// cannot tell) and what that was learned from.
func (j judge) took(o outcome, asked string) (*bool, string) {
	yes, no := true, false
	from := fmt.Sprintf("%s answered %s", o.describe(), asked)
	switch {
	case o.accepted():
		return &yes, from
	case o.ulpReject():
		return &yes, from + ": the MPA layer took it, its upper layer refused"
	case o.bareReject() && (j.ulp == "accepts" || j.ulp == "rejects"):
		return &no, from + ", where the upper layer answers the same private data " +
			map[string]string{"accepts": "by accepting", "rejects": "with a reason"}[j.ulp] + ": an MPA-level refusal"
	case o.bareReject():
		return nil, from + ": an MPA-level refusal and an upper layer's reject without a reason look the same"
	}
	return &no, from
}

func runProbe(ctx context.Context, addr string, o probeOptions) (*probeReport, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	if o.timeout <= 0 {
		o.timeout = 5 * time.Second
	}
	if _, _, err := splitHostPort(addr); err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	if len(o.privateData) > mpa.MaxPrivateData-mpa.EnhancedLen {
		return nil, fmt.Errorf("probe: --private-data: %d bytes, at most %d", len(o.privateData), mpa.MaxPrivateData-mpa.EnhancedLen)
	}
	p := &prober{addr: addr, o: o}
	r := &probeReport{Peer: addr}
	pd := o.privateData
	withPD := func(f mpa.Frame) mpa.Frame { f.PrivateData = pd; return f }
	pdDesc := "no private data"
	if len(pd) > 0 {
		pdDesc = "private data " + printable(pd)
	}

	// Revision 2 with the RFC 6581 block, asking 128/128: the baseline.
	base, err := p.ask(ctx, request(withPD(enhancedRequest(128, 128))))
	if err != nil {
		return nil, fmt.Errorf("probe: %w", explain(addr, "an iWARP responder", err))
	}
	if base.reply == nil {
		return nil, notIWARP(addr, base, o.timeout)
	}
	baseAsked := "a revision 2 enhanced Request asking IRD/ORD 128/128 with " + pdDesc
	r.BaseReply = hex.EncodeToString(base.raw)
	var j judge
	switch {
	case base.accepted():
		j.ulp = "accepts"
		r.ULP = known("accepts", "%s answered %s", base.describe(), baseAsked)
	case base.ulpReject():
		j.ulp = "rejects"
		r.ULP = known("rejects: "+printable(base.reply.PrivateData), "%s answered %s; give the private data it expects with --private-data to learn what only an accept tells", base.describe(), baseAsked)
	default:
		j.ulp = "bare"
		r.ULP = unknown("%s answered %s: the MPA layer or the upper layer refused it", base.describe(), baseAsked)
	}
	took, from := j.took(base, baseAsked)
	r.Rev2 = tookFact(took, from, "accepted", "refused")
	if took != nil && *took && base.reply.Rev != mpa.Rev2 {
		r.Rev2 = known(fmt.Sprintf("answered with revision %d", base.reply.Rev), "%s", from)
	}
	if base.reply.Rev == mpa.Rev2 {
		r.Enhanced = known(base.reply.Enhanced, "the enhanced bit of %s to %s", base.describe(), baseAsked)
	} else {
		r.Enhanced = known(false, "%s answered with revision %d", base.describe(), base.reply.Rev)
	}
	acceptOnly := func(what string) probeFact {
		return unknown("%s answered %s: only an accepting Reply carries %s", base.describe(), baseAsked, what)
	}
	if base.accepted() {
		r.CRCUnasked = known(onOff(base.reply.CRC), "the C bit of the accepting Reply to %s (C clear)", baseAsked)
		if base.reply.Enhanced {
			r.IRD = known(int(base.reply.IRD), "the accepting Reply to %s", baseAsked)
			r.ORD = known(int(base.reply.ORD), "the accepting Reply to %s", baseAsked)
		} else {
			r.IRD = unknown("the accepting Reply to %s has no RFC 6581 block", baseAsked)
			r.ORD = r.IRD
		}
	} else {
		r.CRCUnasked = acceptOnly("the CRC that would be used")
		r.IRD, r.ORD = acceptOnly("the IRD/ORD granted"), acceptOnly("the IRD/ORD granted")
	}
	if len(base.extra) > 0 {
		r.UnsolicitedData = fmt.Sprintf("%d bytes right after the Reply", len(base.extra))
	}

	// Revision 1, and an unknown revision 3.
	v1, err := p.ask(ctx, request(withPD(mpa.Frame{Rev: mpa.Rev1})))
	if err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	took, from = j.took(v1, "a revision 1 Request")
	r.Rev1 = tookFact(took, from, "accepted", "refused")
	if took != nil && *took && v1.reply.Rev != mpa.Rev1 {
		r.Rev1 = known(fmt.Sprintf("answered with revision %d", v1.reply.Rev), "%s", from)
	}
	v3, err := p.ask(ctx, request(withPD(mpa.Frame{Rev: 3})))
	if err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	took, from = j.took(v3, "a revision 3 Request (no such revision)")
	if v3.reply != nil {
		from += fmt.Sprintf(" with revision %d", v3.reply.Rev)
	}
	r.Rev3 = tookFact(took, from, "accepted", "refused")

	// Revision 1 with the [MS-SMBD] section 6.1 IRD/ORD header.
	if err := p.askSMBD(ctx, r, pd); err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}

	// CRC asked for.
	crcReq := withPD(enhancedRequest(1, 1))
	crcReq.CRC = true
	crc, err := p.ask(ctx, request(crcReq))
	if err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	crcAsked := "a revision 2 enhanced Request with C set"
	switch took, from := j.took(crc, crcAsked); {
	case crc.accepted():
		r.CRC = known(onOff(crc.reply.CRC), "the C bit of %s", from)
	case took != nil && !*took:
		r.CRC = known("refused", "%s", from)
	default:
		r.CRC = unknown("%s: only an accepting Reply says whether CRC is used", from)
	}

	// Markers asked for: accepted, or refused (and how).
	mReq := withPD(enhancedRequest(1, 1))
	mReq.Markers = true
	m, err := p.ask(ctx, request(mReq))
	if err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	took, from = j.took(m, "a revision 2 enhanced Request with M set")
	r.Markers = tookFact(took, from, "accepted", "refused")
	switch {
	case took == nil:
		r.MarkersRefusal = unknown("%s", from)
	case *took:
		r.MarkersRefusal = unknown("markers were not refused")
	default:
		r.MarkersRefusal = known(m.refusal(), "%s", from)
	}

	// P2P with every RTR type offered.
	pReq := withPD(enhancedRequest(16, 16))
	pReq.P2P = true
	pReq.SetRTRs(mpa.RTRSetAll)
	pp, err := p.ask(ctx, request(pReq))
	if err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	pAsked := "a revision 2 enhanced Request with P2P (the A bit) offering write|read|send RTRs"
	switch took, from := j.took(pp, pAsked); {
	case pp.accepted() && pp.reply.Enhanced:
		r.P2P = known(pp.reply.P2P, "the A bit of %s", from)
		if rtr := pp.reply.RTRs().Choose(); rtr != mpa.RTRNone {
			r.RTR = known(rtr.String(), "the RTR bits of %s", from)
		} else {
			r.RTR = unknown("%s chose no RTR", from)
		}
	case took != nil && !*took:
		r.P2P = known(false, "%s", from)
		r.RTR = unknown("P2P was refused")
	default:
		r.P2P = unknown("%s: only an accepting Reply settles P2P", from)
		r.RTR = r.P2P
	}

	// The largest PD_Length the MPA layer takes, by bisection over RFC
	// 5044's 4..512 in revision 2 enhanced Requests (the block counts;
	// zeros follow --private-data).
	r.MaxPrivateData = p.bisectPD(ctx, j, r, pd)
	if err := ctx.Err(); err != nil {
		return nil, err
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
			r.RequestTimeout = known(ms, "the peer closed a connection that sent nothing after %d ms", ms)
		} else {
			r.RequestTimeout = unknown("the peer kept a silent connection open for the %v the probe watched", o.waitRequest)
		}
		c.Close()
	} else {
		r.RequestTimeout = unknown("not measured (--request-timeout-wait 0)")
	}
	r.Exchanges = p.n
	return r, nil
}

func tookFact(took *bool, from, yes, no string) probeFact {
	switch {
	case took == nil:
		return unknown("%s", from)
	case *took:
		return known(yes, "%s", from)
	}
	return known(no, "%s", from)
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func (p *prober) bisectPD(ctx context.Context, j judge, r *probeReport, pd []byte) probeFact {
	if r.Rev2.Value != "accepted" || r.Enhanced.Value != true {
		return unknown("needs revision 2 enhanced Requests taken by the MPA layer (revision 2: %v, enhanced: %v)", r.Rev2.Value, r.Enhanced.Value)
	}
	var last string
	takes := func(pdLen int) (*bool, error) {
		f := enhancedRequest(1, 1)
		f.PrivateData = make([]byte, pdLen-mpa.EnhancedLen)
		copy(f.PrivateData, pd)
		out, err := p.ask(ctx, request(f))
		if err != nil {
			return nil, err
		}
		took, from := j.took(out, fmt.Sprintf("PD_Length %d", pdLen))
		last = from
		return took, nil
	}
	lo, hi := mpa.EnhancedLen+len(pd), mpa.MaxPrivateData // lo is taken (the baseline)
	ok, err := takes(hi)
	if err != nil || ok == nil {
		return unknown("%s", last)
	}
	if *ok {
		return known(hi, "the MPA layer took PD_Length %d, RFC 5044's limit (%s)", hi, last)
	}
	refused := last
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		ok, err := takes(mid)
		if err != nil || ok == nil {
			return unknown("%s", last)
		}
		if *ok {
			lo = mid
		} else {
			hi, refused = mid, last
		}
	}
	return known(lo, "bisection: PD_Length %d taken, %d refused (%s)", lo, hi, refused)
}

func (r *probeReport) writeText(w io.Writer) {
	fmt.Fprintf(w, "MPA peer %s (%d connections)\n", r.Peer, r.Exchanges)
	for _, f := range []struct {
		name string
		f    probeFact
	}{
		{"upper layer", r.ULP},
		{"revision 1", r.Rev1}, {"revision 2", r.Rev2}, {"revision 3", r.Rev3},
		{"enhanced (RFC 6581)", r.Enhanced},
		{"IRD granted", r.IRD}, {"ORD granted", r.ORD},
		{"MS-SMBD header", r.SMBD},
		{"CRC when asked", r.CRC}, {"CRC when not asked", r.CRCUnasked},
		{"markers", r.Markers}, {"markers refused by", r.MarkersRefusal},
		{"peer-to-peer", r.P2P}, {"RTR chosen", r.RTR},
		{"max PD_Length", r.MaxPrivateData},
		{"request timeout", r.RequestTimeout},
	} {
		v := "unknown"
		if f.f.Known() {
			v = fmt.Sprint(f.f.Value)
			switch f.name {
			case "IRD granted", "ORD granted":
				v += " (asked 128)"
			case "MS-SMBD header":
				if v != smbdNone {
					v += " (asked IRD 128 ORD 128)"
				}
			case "markers refused by":
				v = map[string]string{"reply_r_set": "a Reply with R set", "close": "a close", "silence": "no answer"}[v]
			case "request timeout":
				v = fmt.Sprintf("%.1f s", float64(f.f.Value.(int64))/1000)
			}
		}
		fmt.Fprintf(w, "  %-20s %s\n  %-20s   from: %s\n", f.name, v, "", f.f.From)
	}
	if r.UnsolicitedData != "" {
		fmt.Fprintf(w, "  %-20s the peer sent %s (RFC 5044: nothing before the initiator's first FPDU)\n", "warning", r.UnsolicitedData)
	}
	fmt.Fprintf(w, "  %-20s %s\n", "reply to rev 2", strings.ToUpper(r.BaseReply))
}

// smbdNone is the SMBD fact of a peer that answers without the header.
const smbdNone = "no header"

// smbdAsk is what the probe's [MS-SMBD] header asks for.
const smbdAsk = 128

// askSMBD sends a revision 1 Request whose private data starts with the
// [MS-SMBD] section 6.1 IRD/ORD header (128/128, before --private-data)
// and records whether the peer's answer carries one. A header is taken for
// one when both values are 1..0x3fff (the range of RFC 6581's fields;
// other bytes are the upper layer's private data, or a header in the
// wrong byte order, which the fact says). A peer whose MPA layer takes
// only revision 1 Requests with the header refuses the plain revision 1
// Request; the revision 1 fact then says so.
func (p *prober) askSMBD(ctx context.Context, r *probeReport, pd []byte) error {
	req := mpa.Frame{Rev: mpa.Rev1, SMBD: true, SMBDIRD: smbdAsk, SMBDORD: smbdAsk, PrivateData: pd}
	o, err := p.ask(ctx, request(req))
	if err != nil {
		return err
	}
	asked := "a revision 1 Request with the [MS-SMBD] IRD/ORD header asking 128/128"
	if o.reply == nil {
		r.SMBD = unknown("%s answered %s: no Reply to read a header from", o.describe(), asked)
		return nil
	}
	// Describe the Reply with its header, if it has one, taken off: what
	// follows is the upper layer's.
	split := *o.reply
	ird, ord, herr := mpa.ParseSMBDHeader(split.PrivateData)
	header := herr == nil && ird <= mpa.MaxIRDORD && ord <= mpa.MaxIRDORD
	if header {
		_ = split.SplitSMBD()
	}
	so := o
	so.reply = &split
	from := fmt.Sprintf("%s answered %s", so.describe(), asked)
	switch {
	case header:
		r.SMBD = known(fmt.Sprintf("IRD %d ORD %d", ird, ord), "the [MS-SMBD] header in %s", from)
		if o.accepted() && r.Rev1.Value == "refused" {
			r.Rev1 = known("accepted only with the [MS-SMBD] header", "a plain revision 1 Request was refused; %s", from)
		}
	case herr == nil:
		r.SMBD = known(smbdNone, "the first 8 bytes of the private data of %s read as IRD %d ORD %d, beyond 14 bits: "+
			"the upper layer's private data, or a header in the wrong byte order", from, ird, ord)
	case o.accepted():
		r.SMBD = known(smbdNone, "%s: %v", from, herr)
	case o.ulpReject():
		r.SMBD = known(smbdNone, "%s: no header before the upper layer's reason (a peer whose MPA layer adds the header to rejects would show one)", from)
	default:
		r.SMBD = unknown("%s: no private data to read a header from", from)
	}
	return nil
}
