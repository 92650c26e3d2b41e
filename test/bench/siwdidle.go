package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/gosiw/gosiw/cm"
	"github.com/gosiw/gosiw/internal/daemon"
	"github.com/gosiw/gosiw/internal/proto"
	"github.com/gosiw/gosiw/rdmap"
)

// siwdIdleClientArg, as the first argument, makes the program the client
// process of siwdIdleMemory: siwdIdleClientArg ADDR N.
const siwdIdleClientArg = "-siwd-idle-client"

// siwdIdleRegion is the region the idle clients connect to.
const siwdIdleRegion = "idle"

// siwdIdleResult is what n idle clients of a siwd cost, per connection:
// the siwd's heap and stacks (runtime.MemStats HeapInuse+StackInuse after
// a GC, less the figure before the first client connected), and the
// client process's, measured the same way there.
type siwdIdleResult struct {
	Conns int `json:"conns"`
	// Server is siwd's cost per connection: the cm ID, the MPA
	// handshake's leftovers, the session, the region service's
	// goroutine, its CQ of 16 and QP (4 send and 4 receive work
	// requests), and the QP's engines.
	Server      float64 `json:"server_bytes_per_conn"`
	ServerStack float64 `json:"server_stack_bytes_per_conn"`
	// Client is the client process's cost per connection: a QP with the
	// same queues and CQ, connected through cm.Dial.
	Client      float64 `json:"client_bytes_per_conn"`
	ClientStack float64 `json:"client_stack_bytes_per_conn"`
	// Goroutines is siwd's goroutines per connection.
	Goroutines float64 `json:"server_goroutines_per_conn"`
}

// siwdIdleMemory runs a siwd (package daemon, as cmd/siwd runs it) on
// loopback with one 4 KiB region, connects n idle region clients to it
// from a child process (this program again, with siwdIdleClientArg), and
// measures the heap and stacks per connection on both sides once all
// are connected, as siwd's metrics count them. profile, when not empty,
// is where a heap profile of the siwd goes at that point.
func siwdIdleMemory(n int, profile string) (res siwdIdleResult, err error) {
	res.Conns = n
	m := daemon.NewMetrics()
	s, err := daemon.New(&daemon.Config{Listen: "127.0.0.1:0", ShutdownTimeout: 5 * time.Second,
		Regions: []daemon.Region{{Name: siwdIdleRegion, Size: 4096, Access: proto.AccessRead}}}, zap.NewNop(), m)
	if err != nil {
		return res, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := s.Listen(ctx); err != nil {
		return res, err
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx) }()
	defer func() {
		cancel()
		if serr := <-served; err == nil {
			err = serr
		}
	}()

	exe, err := os.Executable()
	if err != nil {
		return res, err
	}
	meter := newIdleMeter(n)
	g0 := runtime.NumGoroutine()
	cmd := exec.Command(exe, siwdIdleClientArg, s.Addr().String(), strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return res, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return res, err
	}
	if err := cmd.Start(); err != nil {
		return res, err
	}
	defer func() {
		stdin.Close() // the client disconnects and exits
		if werr := cmd.Wait(); err == nil && werr != nil {
			err = fmt.Errorf("idle client process: %w", werr)
		}
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		return res, fmt.Errorf("idle client process: %w", err)
	}
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "ready" {
		return res, fmt.Errorf("idle client process: %q", line)
	}
	if res.Client, err = strconv.ParseFloat(f[1], 64); err != nil {
		return res, err
	}
	if res.ClientStack, err = strconv.ParseFloat(f[2], 64); err != nil {
		return res, err
	}
	// The client has its connections once Dial returned; siwd counts
	// them established a moment later, on its own goroutines.
	deadline := time.Now().Add(runLimit)
	for gaugeValue(m, "siwd_connections") < float64(n) {
		if time.Now().After(deadline) {
			return res, fmt.Errorf("siwd counts %v connections of %d", gaugeValue(m, "siwd_connections"), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	meter.stage("conns")
	st := meter.stages[0]
	res.Server, res.ServerStack = st.Heap+st.Stack, st.Stack
	res.Goroutines = float64(runtime.NumGoroutine()-g0) / float64(n)
	if profile != "" {
		if err := writeHeapProfile(profile); err != nil {
			return res, err
		}
	}
	return res, nil
}

// gaugeValue reads a gauge of siwd's metrics (0 when absent).
func gaugeValue(m *daemon.Metrics, name string) float64 {
	mfs, err := m.Registry.Gather()
	if err != nil {
		return 0
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.Metric) > 0 && mf.Metric[0].Gauge != nil {
			return mf.Metric[0].Gauge.GetValue()
		}
	}
	return 0
}

// siwdIdleClientMain runs the client process and exits when the
// program's arguments are siwdIdleClientArg ADDR N; otherwise it returns.
func siwdIdleClientMain() {
	if len(os.Args) != 4 || os.Args[1] != siwdIdleClientArg {
		return
	}
	n, err := strconv.Atoi(os.Args[3])
	if err == nil {
		err = siwdIdleClient(os.Args[2], n)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: idle siwd client: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// siwdIdleClient is the client process: it connects n region clients to
// the siwd at addr, prints "ready HEAP_PER_CONN STACK_PER_CONN" (both
// bytes, heap including the stacks, as siwdIdleResult has them) on
// standard output, and disconnects once standard input ends.
func siwdIdleClient(addr string, n int) error {
	dev, err := rdmap.NewDevice(&rdmap.Config{})
	if err != nil {
		return err
	}
	defer dev.Close()
	pd := dev.AllocPD()
	type client struct {
		cq   *rdmap.CQ
		qp   *rdmap.QP
		conn *cm.Conn
	}
	cs := make([]client, n)
	defer func() {
		for _, c := range cs {
			if c.conn != nil {
				c.conn.Close()
			}
			if c.qp != nil {
				c.qp.Close()
			}
			if c.cq != nil {
				c.cq.Close()
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), runLimit)
	defer cancel()
	meter := newIdleMeter(n)
	for i := range cs {
		c := &cs[i]
		if c.cq, err = dev.CreateCQ(16); err != nil {
			return err
		}
		if c.qp, err = pd.CreateQP(&rdmap.QPConfig{SendCQ: c.cq, RecvCQ: c.cq, MaxSendWR: 4, MaxRecvWR: 4}); err != nil {
			return err
		}
		if c.conn, err = cm.Dial(ctx, addr, dev, cm.ConnParam{QP: c.qp, IRD: 1, ORD: 1,
			PrivateData: []byte(proto.RegionPrefix + siwdIdleRegion)}); err != nil {
			return fmt.Errorf("client %d: %w", i, err)
		}
	}
	meter.stage("conns")
	st := meter.stages[0]
	fmt.Printf("ready %.0f %.0f\n", st.Heap+st.Stack, st.Stack)
	if _, err := io.Copy(io.Discard, os.Stdin); err != nil {
		return err
	}
	return nil
}

func (r *runner) siwdIdleLine() string {
	if r.siwdIdleErr != nil {
		return fmt.Sprintf("idle siwd clients: error: %v", r.siwdIdleErr)
	}
	x := r.siwdIdle
	return fmt.Sprintf("idle siwd clients: %d region connections to a siwd over loopback (QP of 4+4 work requests, CQ of 16, each end): siwd %.1f KiB per connection (stacks %.1f KiB, %.1f goroutines), client process %.1f KiB (stacks %.1f KiB), both ends %.1f KiB (target <= 32 KiB)",
		x.Conns, x.Server/1024, x.ServerStack/1024, x.Goroutines, x.Client/1024, x.ClientStack/1024, (x.Server+x.Client)/1024)
}
