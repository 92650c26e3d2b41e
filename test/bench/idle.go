package main

import (
	"context"
	"fmt"
	"math"
	"net"
	"runtime"
	"strings"

	"github.com/gosiw/gosiw/rdmap"
	"github.com/gosiw/gosiw/rdmap/rdmaptest"
)

// idleCQSize is the ring of each idle QP's own CQ (both queues).
const idleCQSize = 16

// idleResult is what n idle connected QP pairs cost: runtime.MemStats
// HeapInuse+StackInuse after a GC, less the figure before the first was
// created, per pair (both ends together), and the same for as many bare
// TCP connection pairs for comparison.
type idleResult struct {
	Pairs int `json:"pairs"`
	// Connected: after both QPs of every pair are started (RTS), before
	// any data moved; the pair's TCP connection included.
	Connected float64 `json:"connected_bytes_per_pair"`
	// AfterSend: after one 64-byte Send from each initiator to its
	// responder has completed (the engines have run once; buffers used
	// while data moved should be back in a pool).
	AfterSend float64 `json:"after_send_bytes_per_pair"`
	// Goroutines per pair once connected.
	Goroutines float64 `json:"goroutines_per_pair"`
	// TCP is the cost of a bare connected TCP pair (two *net.TCPConn),
	// which each QP pair also holds.
	TCP float64 `json:"tcp_bytes_per_pair"`
	// Stages break Connected and AfterSend down by the step of the setup
	// that added them, in order.
	Stages []idleStage `json:"stages"`
}

// idleStage is what one step of setting up the n pairs added, per pair
// (both ends), heap and goroutine stacks apart.
type idleStage struct {
	// Name: "tcp" (the connected sockets), "cq" (a CQ of idleCQSize at
	// each end), "qp" (CreateQP with the default queue depths: the SQ
	// and RQ rings, the inline buffer, the QP), "start" (QP.Start: the
	// engines' buffers and goroutines, the RTR exchange), "send" (one
	// 64-byte Send from each initiator to its responder, completed).
	Name  string  `json:"name"`
	Heap  float64 `json:"heap_bytes_per_pair"`
	Stack float64 `json:"stack_bytes_per_pair"`
}

// memInUse is HeapInuse and StackInuse after two GCs (the second sweeps
// what the first freed).
func memInUse() (heap, stack int64) {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse), int64(m.StackInuse)
}

// idleMeter takes the stages of an idle measurement of n pairs.
type idleMeter struct {
	n           int
	base        int64
	heap, stack int64
	stages      []idleStage
}

func newIdleMeter(n int) *idleMeter {
	m := &idleMeter{n: n}
	m.heap, m.stack = memInUse()
	m.base = m.heap + m.stack
	return m
}

// stage records what was added since the last stage and returns the
// total over the base, per pair.
func (m *idleMeter) stage(name string) float64 {
	h, s := memInUse()
	m.stages = append(m.stages, idleStage{Name: name,
		Heap: float64(h-m.heap) / float64(m.n), Stack: float64(s-m.stack) / float64(m.n)})
	m.heap, m.stack = h, s
	return float64(h+s-m.base) / float64(m.n)
}

// idleQP is one end of an idle pair: a QP with its own CQ.
type idleQP struct {
	cq *rdmap.CQ
	qp *rdmap.QP
}

// idleQPMemory connects n QP pairs over loopback (one device and one
// 4 KiB registered region per side, shared by all; a QP with default
// queue depths and its own CQ of idleCQSize), measures them idle, and
// closes everything before it returns.
func idleQPMemory(n int) (res idleResult, err error) {
	res.Pairs = n
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return res, err
	}
	defer ln.Close()

	var devs [2]*rdmap.Device
	var pds [2]*rdmap.PD
	var mems [2]*rdmap.Memory
	var mrs [2]*rdmap.MR
	defer func() {
		for i := range 2 {
			if mrs[i] != nil {
				mrs[i].Deregister()
			}
			if mems[i] != nil {
				mems[i].Close()
			}
			if devs[i] != nil {
				devs[i].Close()
			}
		}
	}()
	for i := range 2 {
		if devs[i], err = rdmap.NewDevice(&rdmap.Config{}); err != nil {
			return res, err
		}
		pds[i] = devs[i].AllocPD()
		if mems[i], err = devs[i].AllocMemory(4096); err != nil {
			return res, err
		}
		if mrs[i], err = pds[i].RegisterMemory(mems[i].Bytes(), rdmap.AccessLocalWrite); err != nil {
			return res, err
		}
	}
	qps := make([][2]idleQP, n)
	socks := make([][2]net.Conn, n)
	defer func() {
		for i, p := range qps {
			for j, q := range p {
				if socks[i][j] != nil { // not started
					socks[i][j].Close()
				}
				if q.qp != nil {
					q.qp.Close()
				}
				if q.cq != nil {
					q.cq.Close()
				}
			}
		}
	}()
	m := newIdleMeter(n)
	g0 := runtime.NumGoroutine()
	for i := range n {
		if socks[i][0], socks[i][1], err = dialAccept(ln); err != nil {
			return res, err
		}
	}
	res.TCP = m.stage("tcp")
	for i := range n {
		for j := range 2 {
			if qps[i][j].cq, err = devs[j].CreateCQ(idleCQSize); err != nil {
				return res, err
			}
		}
	}
	m.stage("cq")
	recv := rdmap.RecvWR{SGL: []rdmap.SGE{mrs[1].SGE(0, 64)}}
	for i := range n {
		for j := range 2 {
			if qps[i][j].qp, err = pds[j].CreateQP(&rdmap.QPConfig{SendCQ: qps[i][j].cq, RecvCQ: qps[i][j].cq}); err != nil {
				return res, err
			}
		}
		if err := qps[i][1].qp.PostRecv(recv); err != nil {
			return res, err
		}
	}
	m.stage("qp")
	o := &rdmaptest.Options{}
	for i := range n {
		// A started QP owns its connection (QP.Close closes it).
		for _, j := range []int{1, 0} {
			if err := qps[i][j].qp.Start(socks[i][j], o.Params(j == 0)); err != nil {
				return res, err
			}
			socks[i][j] = nil
		}
	}
	res.Connected = m.stage("start")
	res.Goroutines = float64(runtime.NumGoroutine()-g0) / float64(n)
	if idleProfile != nil {
		if err := idleProfile(); err != nil {
			return res, err
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), runLimit)
	defer cancel()
	send := rdmap.SendWR{Op: rdmap.WRSend, SGL: []rdmap.SGE{mrs[0].SGE(0, 64)}, Signaled: true}
	wcs := make([]rdmap.WC, 1)
	for _, p := range qps {
		if err := p[0].qp.PostSend(send); err != nil {
			return res, err
		}
	}
	for i, p := range qps {
		for j, want := range []rdmap.WCOpcode{rdmap.WCSend, rdmap.WCRecv} {
			if err := waitWC(ctx, p[j].cq, wcs, want); err != nil {
				return res, fmt.Errorf("idle pair %d: %w", i, err)
			}
		}
	}
	res.AfterSend = m.stage("send")
	res.Stages = m.stages
	return res, nil
}

// idleProfile, when set, is called once the idle pairs are connected
// (-idleprofile: it writes a heap profile).
var idleProfile func() error

func (r *runner) idleLine() string {
	if r.idleErr != nil {
		return fmt.Sprintf("idle QPs: error: %v", r.idleErr)
	}
	x := r.idle
	var b strings.Builder
	fmt.Fprintf(&b, "idle QPs: %d connected pairs over loopback, heap+stacks per pair (both ends, own CQ of %d each): %.1f KiB connected, %.1f KiB after one 64-byte Send (target <= 32 KiB); %.1f goroutines per pair; a bare TCP pair is %.1f KiB\n",
		x.Pairs, idleCQSize, x.Connected/1024, x.AfterSend/1024, x.Goroutines, x.TCP/1024)
	b.WriteString("idle QPs, by step of the setup (per pair, heap + stacks):")
	for _, st := range x.Stages {
		fmt.Fprintf(&b, " %s %s%s KiB;", st.Name, kib(st.Heap, false), kib(st.Stack, true))
	}
	return strings.TrimSuffix(b.String(), ";")
}

// kib formats n bytes in KiB with one decimal, with its sign (a step can
// free stacks: "0.8-0.6") when signed; what rounds to zero is 0.0,
// without a minus.
func kib(n float64, signed bool) string {
	k := math.Round(n/1024*10) / 10
	if k == 0 {
		k = 0 // not -0
	}
	if signed {
		return fmt.Sprintf("%+.1f", k)
	}
	return fmt.Sprintf("%.1f", k)
}
