package main

import (
	"context"
	"fmt"
	"net"
	"runtime"

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
	// any data moved.
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
}

func inUse() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse + m.StackInuse)
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
	pair := func() (net.Conn, net.Conn, error) {
		c, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
		if err != nil {
			return nil, nil, err
		}
		s, err := ln.Accept()
		if err != nil {
			c.Close()
			return nil, nil, err
		}
		return c, s, nil
	}

	// Bare TCP pairs first, for comparison.
	base := inUse()
	conns := make([]net.Conn, 0, 2*n)
	for range n {
		c, s, err := pair()
		if err != nil {
			for _, c := range conns {
				c.Close()
			}
			return res, err
		}
		conns = append(conns, c, s)
	}
	res.TCP = float64(inUse()-base) / float64(n)
	for _, c := range conns {
		c.Close()
	}
	conns = nil

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
	qps := make([][2]idleQP, 0, n)
	defer func() {
		for _, p := range qps {
			for _, q := range p {
				if q.qp != nil {
					q.qp.Close()
				}
				if q.cq != nil {
					q.cq.Close()
				}
			}
		}
	}()
	base = inUse()
	g0 := runtime.NumGoroutine()
	o := &rdmaptest.Options{}
	recv := rdmap.RecvWR{SGL: []rdmap.SGE{mrs[1].SGE(0, 64)}}
	for range n {
		var p [2]idleQP
		for i := range 2 {
			if p[i].cq, err = devs[i].CreateCQ(idleCQSize); err != nil {
				return res, err
			}
			if p[i].qp, err = pds[i].CreateQP(&rdmap.QPConfig{SendCQ: p[i].cq, RecvCQ: p[i].cq}); err != nil {
				p[i].cq.Close()
				p[i].cq = nil
				return res, err
			}
		}
		qps = append(qps, p)
		if err := p[1].qp.PostRecv(recv); err != nil {
			return res, err
		}
		c, s, err := pair()
		if err != nil {
			return res, err
		}
		if err := p[1].qp.Start(s, o.Params(false)); err != nil {
			c.Close()
			s.Close()
			return res, err
		}
		if err := p[0].qp.Start(c, o.Params(true)); err != nil {
			c.Close()
			return res, err
		}
	}
	res.Connected = float64(inUse()-base) / float64(n)
	res.Goroutines = float64(runtime.NumGoroutine()-g0) / float64(n)

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
	res.AfterSend = float64(inUse()-base) / float64(n)
	return res, nil
}

func (r *runner) idleLine() string {
	if r.idleErr != nil {
		return fmt.Sprintf("idle QPs: error: %v", r.idleErr)
	}
	x := r.idle
	return fmt.Sprintf("idle QPs: %d connected pairs over loopback, heap+stacks per pair (both ends, own CQ of %d each): %.1f KiB connected, %.1f KiB after one 64-byte Send (target <= 32 KiB); %.1f goroutines per pair; a bare TCP pair is %.1f KiB",
		x.Pairs, idleCQSize, x.Connected/1024, x.AfterSend/1024, x.Goroutines, x.TCP/1024)
}
