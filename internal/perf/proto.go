package perf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/gosiw/gosiw/internal/proto"
	"github.com/gosiw/gosiw/rdmap"
)

// Prefix starts the private data of every perf Request and Reply (and
// siwd routes Requests to Service by it).
const Prefix = proto.PerfPrefix

// MaxPrivateData is the longest private data perf sends either way: what
// Linux siw takes in an MPA revision 2 frame (mpa.SiwMaxPrivateData less
// the 4-byte RFC 6581 block).
const MaxPrivateData = 251

// Limits of a test, enforced by the responder (a Request outside them is
// rejected with the reason) and by the client before it dials.
const (
	MinSize = 1
	MaxSize = 64 << 20 // one message
	// MaxDepth bounds the work requests a Write or Send stream keeps
	// outstanding: 8192 messages of 64 bytes are 512 KiB in flight, less
	// than the TCP baseline's socket buffers let it have in flight on
	// loopback (as make bench's Send window). A Read stream's depth is
	// its ORD, at most MaxReadDepth.
	MaxDepth = 8192
	// MaxWriteDefault bounds a Write stream's default depth: a Write's
	// window is a loop through its own send engine only, and a few of
	// the engine's batches of small FPDUs (mpa.WriterSmallMaxBytes) in
	// it let the application post while one is being written: 64-byte
	// Writes on loopback, `siw perf write -l 64 -t 3 --tcp`, 17.3-17.9
	// Mops/s at 1024, 19.8-22.2 at 4096, 17.2-21.7 at 8192 (twice each,
	// interleaved, 2026-12-06). (Before the engine's batches were
	// bounded so, 1024 had measured best: 19.9 Mops/s against 16.5 at
	// 8192, whose batches had grown to writes BBR sends at half speed.)
	MaxWriteDefault = 4096
	MaxReadDepth    = rdmap.MaxIRDORD
	// MaxBuffer bounds the memory a responder maps for one connection.
	MaxBuffer = 256 << 20
)

// Defaults of a client.
const (
	DefaultSize         = 64 << 10
	DefaultPingPongSize = 64
	DefaultDepth        = 16
)

// Op is what a test measures.
type Op uint8

// Operations. OpPingPong is a Send that the responder echoes back; one is
// outstanding at a time and the client measures the round trip.
const (
	OpWrite Op = iota + 1
	OpRead
	OpSend
	OpPingPong
)

var opNames = [...]string{OpWrite: "write", OpRead: "read", OpSend: "send", OpPingPong: "pingpong"}

// String returns the op's name as the protocol spells it.
func (o Op) String() string {
	if int(o) < len(opNames) && opNames[o] != "" {
		return opNames[o]
	}
	return "unknown(" + strconv.Itoa(int(o)) + ")"
}

// ParseOp parses an op name.
func ParseOp(s string) (Op, error) {
	for o, n := range opNames {
		if n != "" && n == s {
			return Op(o), nil
		}
	}
	return 0, fmt.Errorf("unknown op %q (want write, read, send or pingpong)", s)
}

// Params are the parameters of one test connection, carried in the MPA
// Request's private data as text:
//
//	gosiw-perf/1 op=write size=65536 depth=16
//
// Fields are space separated key=value pairs; a responder ignores keys it
// does not know, so later versions can add some.
type Params struct {
	Op    Op
	Size  int // bytes per message
	Depth int // work requests outstanding (1 for pingpong)
}

// Validate checks p against the protocol's limits.
func (p *Params) Validate() error {
	if p.Op < OpWrite || p.Op > OpPingPong {
		return fmt.Errorf("unknown op %v", p.Op)
	}
	if p.Size < MinSize || p.Size > MaxSize {
		return fmt.Errorf("size %d out of range [%d, %d]", p.Size, MinSize, MaxSize)
	}
	if p.Depth < 1 || p.Depth > MaxDepth {
		return fmt.Errorf("depth %d out of range [1, %d]", p.Depth, MaxDepth)
	}
	if p.Op == OpRead && p.Depth > MaxReadDepth {
		return fmt.Errorf("read depth %d over the ORD limit of %d", p.Depth, MaxReadDepth)
	}
	if p.Op == OpPingPong && p.Depth != 1 {
		return fmt.Errorf("pingpong takes depth 1, not %d", p.Depth)
	}
	return nil
}

// AppendRequest appends the Request private data for p.
func AppendRequest(b []byte, p *Params) []byte {
	b = append(b, Prefix...)
	b = append(b, " op="...)
	b = append(b, p.Op.String()...)
	b = append(b, " size="...)
	b = strconv.AppendInt(b, int64(p.Size), 10)
	b = append(b, " depth="...)
	b = strconv.AppendInt(b, int64(p.Depth), 10)
	return b
}

// ParseRequest decodes and validates a Request's private data. Its error
// text is meant for the peer (it goes into the reject's private data).
func ParseRequest(pd []byte) (Params, error) {
	var p Params
	fields, err := splitFields(pd)
	if err != nil {
		return p, err
	}
	op, ok := fields["op"]
	if !ok {
		return p, errors.New("no op= in request")
	}
	if p.Op, err = ParseOp(op); err != nil {
		return p, err
	}
	if p.Size, err = intField(fields, "size", -1); err != nil {
		return p, err
	}
	if p.Depth, err = intField(fields, "depth", 1); err != nil {
		return p, err
	}
	return p, p.Validate()
}

// splitFields checks the prefix and splits the key=value fields after it.
func splitFields(pd []byte) (map[string]string, error) {
	s := string(pd)
	rest, ok := strings.CutPrefix(s, Prefix)
	if !ok || (rest != "" && rest[0] != ' ') {
		return nil, fmt.Errorf("not a %s message: %.40q", Prefix, s)
	}
	m := map[string]string{}
	for _, f := range strings.Fields(rest) {
		k, v, ok := strings.Cut(f, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("bad field %.32q", f)
		}
		m[k] = v
	}
	return m, nil
}

// intField returns field k as an int; def < 0 makes it required.
func intField(m map[string]string, k string, def int) (int, error) {
	v, ok := m[k]
	if !ok {
		if def < 0 {
			return 0, fmt.Errorf("no %s= in request", k)
		}
		return def, nil
	}
	n, err := strconv.ParseInt(v, 0, 64)
	if err != nil || n < 0 || n > 1<<40 {
		return 0, fmt.Errorf("bad %s=%.20q", k, v)
	}
	return int(n), nil
}

// Reply is what the responder's MPA Reply tells the client, as text:
//
//	gosiw-perf/1 stag=0x00000100 len=65536 recvs=32
//
// STag and Len name the responder's buffer (the target of Writes, the
// source of Reads, zero-based offsets). Recvs is how many receives the
// responder keeps posted: the client may have Recvs-1 Sends unanswered
// by credits (one buffer stays free for the final "fin").
type Reply struct {
	STag  rdmap.STag
	Len   int
	Recvs int
}

// AppendReply appends the Reply private data for r.
func AppendReply(b []byte, r *Reply) []byte {
	return fmt.Appendf(b, "%s stag=%#08x len=%d recvs=%d", Prefix, uint32(r.STag), r.Len, r.Recvs)
}

// ParseReply decodes a Reply's private data.
func ParseReply(pd []byte) (Reply, error) {
	var r Reply
	fields, err := splitFields(pd)
	if err != nil {
		return r, err
	}
	st, ok := fields["stag"]
	if !ok {
		return r, errors.New("no stag= in reply")
	}
	v, err := strconv.ParseUint(st, 0, 32)
	if err != nil {
		return r, fmt.Errorf("bad stag=%.20q", st)
	}
	r.STag = rdmap.STag(v)
	if r.Len, err = intField(fields, "len", -1); err != nil {
		return r, err
	}
	if r.Recvs, err = intField(fields, "recvs", -1); err != nil {
		return r, err
	}
	if r.Recvs < 2 {
		return r, fmt.Errorf("recvs=%d: need at least 2", r.Recvs)
	}
	return r, nil
}

// RejectText formats a reject reason for err, cut to MaxPrivateData bytes.
func RejectText(err error) []byte {
	s := Prefix + " error: " + err.Error()
	if len(s) > MaxPrivateData {
		s = s[:MaxPrivateData]
	}
	return []byte(s)
}

// Control messages travel as Sends with the Solicited Event bit set, which
// sets them apart from data Sends (and pingpong echoes), never solicited.
// They are text, at most ctrlLen bytes, sent inline:
//
//	client -> responder  "fin ops=N bytes=B"  the test is over; the
//	                     client's counts
//	responder -> client  "credit N"           N more Sends may go
//	responder -> client  "ok ops=N bytes=B"   the responder's own counts
//	                     (fields it cannot measure are left out)
//	responder -> client  "error TEXT"         the responder found the data
//	                     wrong
const ctrlLen = 256

// counts is the body of "fin" and "ok".
type counts struct {
	Ops, Bytes       uint64
	HasOps, HasBytes bool
}

func appendCounts(b []byte, verb string, c counts) []byte {
	b = append(b, verb...)
	if c.HasOps {
		b = append(b, " ops="...)
		b = strconv.AppendUint(b, c.Ops, 10)
	}
	if c.HasBytes {
		b = append(b, " bytes="...)
		b = strconv.AppendUint(b, c.Bytes, 10)
	}
	return b
}

// parseCtrl splits a control message into its verb and the rest.
func parseCtrl(b []byte) (verb, rest string) {
	verb, rest, _ = strings.Cut(string(b), " ")
	return verb, rest
}

// parseCredit decodes the responder's "credit N" (N at least 1).
func parseCredit(msg []byte) (int, error) {
	verb, rest := parseCtrl(msg)
	n, err := strconv.Atoi(rest)
	if verb != "credit" || err != nil || n < 1 {
		return 0, fmt.Errorf("perf: unexpected message from the responder: %.60q", msg)
	}
	return n, nil
}

func parseCounts(rest string) (counts, error) {
	var c counts
	for _, f := range strings.Fields(rest) {
		k, v, _ := strings.Cut(f, "=")
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return c, fmt.Errorf("bad field %.32q", f)
		}
		switch k {
		case "ops":
			c.Ops, c.HasOps = n, true
		case "bytes":
			c.Bytes, c.HasBytes = n, true
		}
	}
	return c, nil
}

// fillPattern fills b with the test pattern: what Writes carry, what the
// responder's buffer holds for Reads, and what Sends carry after their
// 8-byte sequence number. Both sides compute it; byte i depends on i only.
func fillPattern(b []byte) {
	for i := range b {
		x := uint32(i)
		b[i] = byte(x*7+x>>8+x>>16) ^ 0xa5
	}
}

// seqLen is the sequence number at the start of every Send of 8 bytes or
// more (big-endian; smaller Sends carry none).
const seqLen = 8

// tailLen is how many pattern bytes at the end of a Send the responder
// checks (and the client, of a pingpong echo).
const tailLen = 64

// checkMsg checks a received data message of n bytes in b against seq
// and the pattern; pat is the pattern of at least n bytes.
func checkMsg(b []byte, seq uint64, pat []byte) error {
	n := len(b)
	if n >= seqLen {
		if got := binary.BigEndian.Uint64(b); got != seq {
			return fmt.Errorf("message %d carries sequence number %d", seq, got)
		}
	}
	from := max(seqLen, n-tailLen)
	if from >= n || bytes.Equal(b[from:n], pat[from:n]) {
		return nil
	}
	i := from
	for b[i] == pat[i] {
		i++
	}
	return fmt.Errorf("message %d differs from the pattern at byte %d", seq, i)
}
