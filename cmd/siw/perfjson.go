package main

import (
	"net"
	"strconv"
	"time"

	"github.com/gosiw/gosiw/internal/perf"
)

// perfJSON is what --json prints, shaped as iperf3 -J is, so that tools
// that read iperf3's JSON read ours: start.connected[], start.timestamp,
// start.connecting_to, start.test_start, intervals[].streams[] and .sum,
// end.streams[].sender and .receiver, end.sum_sent and end.sum_received,
// with iperf3's field names and JSON types. As in iperf3, "sender" is
// whether this host (the client) sent: false for read, where the responder
// sends. gosiw's extras sit beside them (ops, ops_per_second, latency,
// counted_by, crc, depth; the baseline under "tcp"; the ratio).
type perfJSON struct {
	Start     perfJSONStart      `json:"start"`
	Intervals []perfJSONInterval `json:"intervals"`
	End       *perfJSONEnd       `json:"end,omitempty"`
	TCP       *perfJSONRun       `json:"tcp,omitempty"`
	// Ratio is gosiw's figure over TCP's, RatioOf says which:
	// "bits_per_second", or for pingpong "mean_us" (the round trip).
	Ratio   *float64 `json:"ratio,omitempty"`
	RatioOf string   `json:"ratio_of,omitempty"`
	// RatioP50 is, for pingpong, gosiw's median round trip over TCP's
	// (steadier than the means on a busy machine).
	RatioP50 *float64 `json:"ratio_p50,omitempty"`
	Error    string   `json:"error,omitempty"`
}

type perfJSONStart struct {
	Connected    []perfJSONConnected `json:"connected"`
	Version      string              `json:"version"`
	Timestamp    perfJSONTimestamp   `json:"timestamp"`
	ConnectingTo perfJSONHostPort    `json:"connecting_to"`
	TestStart    perfJSONTestStart   `json:"test_start"`
	// gosiw's own.
	Op       string  `json:"op"`
	Target   string  `json:"target"`
	Size     int     `json:"size"`
	Depth    int     `json:"depth"`
	Parallel int     `json:"parallel"`
	Duration float64 `json:"duration"`
	Interval float64 `json:"interval"`
	CRC      bool    `json:"crc"`
	TCPAddr  string  `json:"tcp_addr,omitempty"`
	// SendGoroutine: --send-goroutine (a Write's or Send's QP without
	// rdmap.QPConfig.PollTx).
	SendGoroutine bool `json:"send_goroutine,omitempty"`
}

type perfJSONConnected struct {
	Socket     int    `json:"socket"` // the stream's ID
	LocalHost  string `json:"local_host"`
	LocalPort  int    `json:"local_port"`
	RemoteHost string `json:"remote_host"`
	RemotePort int    `json:"remote_port"`
	CRC        *bool  `json:"crc,omitempty"`   // gosiw streams: MPA CRC32c in use
	Depth      int    `json:"depth,omitempty"` // gosiw streams: the depth in use
}

type perfJSONTimestamp struct {
	Time     string `json:"time"` // RFC 1123, GMT, as iperf3
	TimeSecs int64  `json:"timesecs"`
}

type perfJSONHostPort struct {
	Host string `json:"host"`
	Port int    `json:"port"`
}

type perfJSONTestStart struct {
	Protocol   string `json:"protocol"` // "gosiw" (the baseline's: "TCP")
	NumStreams int    `json:"num_streams"`
	BlkSize    int    `json:"blksize"` // the message size
	Omit       int    `json:"omit"`
	Duration   int    `json:"duration"` // whole seconds, as iperf3 (start.duration is exact)
	Bytes      int    `json:"bytes"`
	Blocks     int    `json:"blocks"`
	Reverse    int    `json:"reverse"` // 1 for read: the responder sends
}

// perfJSONSpan is iperf3's figures for a span of time: one stream's or a
// sum, in an interval or at the end.
type perfJSONSpan struct {
	Socket        int     `json:"socket,omitempty"` // streams only
	Start         float64 `json:"start"`
	End           float64 `json:"end"`
	Seconds       float64 `json:"seconds"`
	Bytes         uint64  `json:"bytes"`
	BitsPerSecond float64 `json:"bits_per_second"`
	Omitted       *bool   `json:"omitted,omitempty"` // intervals only
	Sender        bool    `json:"sender"`
	// Ops and OpsPerSecond are messages; absent where they were not
	// counted (RDMA Writes and Reads at the responder, the TCP sink).
	Ops          *uint64       `json:"ops,omitempty"`
	OpsPerSecond *float64      `json:"ops_per_second,omitempty"`
	Latency      *perf.Latency `json:"latency,omitempty"`
	// CountedBy says where the end figures come from: "client" (its
	// completions) or "responder" (its report, checked by the client).
	CountedBy string `json:"counted_by,omitempty"`
}

type perfJSONInterval struct {
	Streams []perfJSONSpan `json:"streams"`
	Sum     perfJSONSpan   `json:"sum"`
}

type perfJSONStream struct {
	Sender   perfJSONSpan `json:"sender"`
	Receiver perfJSONSpan `json:"receiver"`
	Error    string       `json:"error,omitempty"`
}

type perfJSONEnd struct {
	Streams     []perfJSONStream `json:"streams"`
	SumSent     perfJSONSpan     `json:"sum_sent"`
	SumReceived perfJSONSpan     `json:"sum_received"`
}

type perfJSONRun struct {
	Connected []perfJSONConnected `json:"connected"`
	Intervals []perfJSONInterval  `json:"intervals"`
	End       *perfJSONEnd        `json:"end,omitempty"`
	Error     string              `json:"error,omitempty"`
}

func perfStart(o *perf.Options, addr, tcpAddr string, t time.Time) perfJSONStart {
	host, port := perfSplit(addr)
	reverse := 0
	if o.Op == perf.OpRead {
		reverse = 1
	}
	return perfJSONStart{
		Connected:    []perfJSONConnected{},
		Version:      perf.Prefix,
		Timestamp:    perfJSONTimestamp{Time: t.UTC().Format(time.RFC1123), TimeSecs: t.Unix()},
		ConnectingTo: perfJSONHostPort{Host: host, Port: port},
		TestStart: perfJSONTestStart{Protocol: "gosiw", NumStreams: o.Parallel, BlkSize: o.Size,
			Duration: int(o.Duration.Round(time.Second) / time.Second), Reverse: reverse},
		Op: o.Op.String(), Target: addr, Size: o.Size, Depth: o.Depth, Parallel: o.Parallel,
		Duration: o.Duration.Seconds(), Interval: max(o.Interval, 0).Seconds(), CRC: o.CRC, TCPAddr: tcpAddr,
		SendGoroutine: o.SendGoroutine,
	}
}

// perfSplit splits an address validated before into host and port.
func perfSplit(addr string) (string, int) {
	h, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	return h, n
}

func perfConnected(si perf.StreamInfo, gosiw bool) perfJSONConnected {
	c := perfJSONConnected{Socket: si.ID}
	c.LocalHost, c.LocalPort = perfSplit(si.Local)
	c.RemoteHost, c.RemotePort = perfSplit(si.Remote)
	if gosiw {
		crc := si.CRC
		c.CRC, c.Depth = &crc, si.Depth
	}
	return c
}

// perfSpan turns a summary into iperf3's figures; ops is nil where
// messages were not counted.
func perfSpan(id int, s *perf.Summary, sender bool, ops *uint64) perfJSONSpan {
	j := perfJSONSpan{Socket: id, Start: s.Start, End: s.End, Seconds: s.Seconds, Bytes: s.Bytes,
		BitsPerSecond: s.BitsPerSecond, Sender: sender, Ops: ops, Latency: s.Latency}
	if ops != nil && s.Seconds > 0 {
		r := float64(*ops) / s.Seconds
		j.OpsPerSecond = &r
	}
	return j
}

func perfIntervals(ivs []perf.Interval, sender bool) []perfJSONInterval {
	out := make([]perfJSONInterval, 0, len(ivs))
	no := false
	for _, iv := range ivs {
		j := perfJSONInterval{Streams: make([]perfJSONSpan, 0, len(iv.Streams))}
		for _, s := range iv.Streams {
			ops := s.Ops
			sp := perfSpan(s.ID, &s.Summary, sender, &ops)
			sp.Omitted = &no
			j.Streams = append(j.Streams, sp)
		}
		ops := iv.Sum.Ops
		j.Sum = perfSpan(0, &iv.Sum, sender, &ops)
		j.Sum.Omitted = &no
		out = append(out, j)
	}
	return out
}

// perfSides is one stream's (or the sum's) sender and receiver figures.
// The client counts its own side from its completions: the sender for
// write, send and pingpong, the receiver for read. The other side is the
// responder's report when it made one (checked against the client's by
// perf.Run); a read's responder counts nothing (the QP serves Reads
// alone), and the Read Responses the client completed are exactly what
// it sent, so both sides of a read are the client's.
func perfSides(id int, s *perf.Summary, peer *perf.PeerCounts, op perf.Op) (snd, rcv perfJSONSpan) {
	sender := op != perf.OpRead
	ops := s.Ops
	own := perfSpan(id, s, sender, &ops)
	own.CountedBy = "client"
	other := own
	if op != perf.OpRead {
		other.Latency = nil
		if peer != nil && peer.Bytes != nil {
			ps := *s
			ps.Bytes, ps.BitsPerSecond, ps.Latency = *peer.Bytes, 0, nil
			if ps.Seconds > 0 {
				ps.BitsPerSecond = float64(ps.Bytes) * 8 / ps.Seconds
			}
			other = perfSpan(id, &ps, sender, peer.Ops)
			other.CountedBy = "responder"
		}
	}
	if op == perf.OpRead {
		return other, own
	}
	return own, other
}

func perfJSONEndOf(r *perf.Result, op perf.Op) *perfJSONEnd {
	if r == nil {
		return nil
	}
	e := &perfJSONEnd{Streams: make([]perfJSONStream, 0, len(r.Streams))}
	var peerBytes, peerOps uint64
	allBytes, allOps := len(r.Streams) > 0, len(r.Streams) > 0
	for _, s := range r.Streams {
		snd, rcv := perfSides(s.ID, &s.Summary, s.Peer, op)
		e.Streams = append(e.Streams, perfJSONStream{Sender: snd, Receiver: rcv, Error: s.Error})
		if s.Peer != nil && s.Peer.Bytes != nil {
			peerBytes += *s.Peer.Bytes
		} else {
			allBytes = false
		}
		if s.Peer != nil && s.Peer.Ops != nil {
			peerOps += *s.Peer.Ops
		} else {
			allOps = false
		}
	}
	var peer *perf.PeerCounts
	if allBytes {
		peer = &perf.PeerCounts{Bytes: &peerBytes}
		if allOps {
			peer.Ops = &peerOps
		}
	}
	e.SumSent, e.SumReceived = perfSides(0, &r.Sum, peer, op)
	return e
}
