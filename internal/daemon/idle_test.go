package daemon

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gosiw/gosiw/cm"
	"github.com/gosiw/gosiw/internal/proto"
	"github.com/gosiw/gosiw/rdmap"
)

// TestIdleTimeout: with a tiny idle limit, an established connection that
// carries nothing is disconnected by siwd (gracefully: the client sees the
// connection end), counted, and its closing line says why; the memory it
// held is given back. Traffic before the idle time does not prevent it.
func TestIdleTimeout(t *testing.T) {
	s, m, stop := startServer(t, &Config{Listen: "127.0.0.1:0", ShutdownTimeout: time.Second, IdleTimeout: 20 * time.Millisecond,
		Regions: []Region{{Name: "r", Size: 4096, Access: proto.AccessRead}}})
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dev, _ := rdmap.NewDevice(nil)
	defer dev.Close()
	pd := dev.AllocPD()
	cq, _ := dev.CreateCQ(16)
	defer cq.Close()
	qp, _ := pd.CreateQP(&rdmap.QPConfig{SendCQ: cq, RecvCQ: cq})
	defer qp.Close()
	conn, err := cm.Dial(ctx, s.Addr().String(), dev, cm.ConnParam{QP: qp, IRD: 1, ORD: 1, PrivateData: []byte(proto.RegionPrefix + "r")})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stag, _, _, _ := proto.ParseRegionReply(conn.PrivateData)
	buf := make([]byte, 4096)
	mr, _ := pd.RegisterMemory(buf, rdmap.AccessLocalWrite)
	qp.PostSend(rdmap.SendWR{ID: 1, Op: rdmap.WRRead, SGL: []rdmap.SGE{mr.SGE(0, 4096)}, Remote: rdmap.Remote{STag: stag}, Signaled: true})
	var wc [1]rdmap.WC
	for cq.Poll(wc[:]) == 0 {
		if err := cq.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The Read shows the connection works; on a loaded machine the 20 ms
	// limit may already have cut it, and then the Read is flushed by that
	// disconnect, which the checks below still require.
	if st := wc[0].Status; st != rdmap.WCSuccess && st != rdmap.WCWRFlushErr {
		t.Fatalf("read: %v", st)
	}
	select {
	case <-conn.Done():
	case <-ctx.Done():
		t.Fatal("an idle connection was never disconnected")
	}
	waitCounter(ctx, t, m, "siwd_idle_disconnects_total", "1")
	waitCounter(ctx, t, m, "siwd_connections", "0")
}

// serverSocketTimer returns the timer field ("tr", 0-4) of the server's
// side of a loopback connection, from /proc/net/tcp: 2 is the keepalive
// timer on an idle established socket, 0 none.
func serverSocketTimer(t *testing.T, server, client *net.TCPAddr) string {
	t.Helper()
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	local := fmt.Sprintf("0100007F:%04X", server.Port)
	remote := fmt.Sprintf("0100007F:%04X", client.Port)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) > 5 && fs[1] == local && fs[2] == remote {
			tr, _, _ := strings.Cut(fs[5], ":")
			return tr
		}
	}
	t.Fatalf("no socket %s -> %s", local, remote)
	return ""
}

// TestTCPKeepAlive: siwd's accepted connections have TCP keepalive on by
// default (the kernel runs the keepalive timer on the idle socket), and
// off with tcp_keepalive = "off".
func TestTCPKeepAlive(t *testing.T) {
	for _, c := range []struct {
		ka   time.Duration
		want string
	}{{0, "02"}, {time.Hour, "02"}, {-1, "00"}} {
		s, _, stop := startServer(t, &Config{Listen: "127.0.0.1:0", ShutdownTimeout: time.Second, TCPKeepAlive: c.ka})
		nc, err := net.Dial("tcp", s.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		// The handshake has not come: the server's socket is idle.
		// Accept has run once the server's side exists in the table
		// with its options set; wait for its admission to be sure.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		waitCounter(ctx, t, s.m, `siwd_admissions_total{class="allowed"}`, "1")
		cancel()
		if got := serverSocketTimer(t, s.Addr().(*net.TCPAddr), nc.LocalAddr().(*net.TCPAddr)); got != c.want {
			t.Errorf("TCPKeepAlive %v: timer %s, want %s", c.ka, got, c.want)
		}
		nc.Close()
		stop()
	}
}

// TestWatchIdle checks the idle watcher on a fake clock: a connection
// whose counts move every period is never idle, one that stops is
// declared idle once, between one and two periods after its last change.
func TestWatchIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Uint64
		idleAt := make(chan time.Duration, 2)
		start := time.Now()
		tm := watchIdle(time.Second, n.Load, func() { idleAt <- time.Since(start) })
		defer tm.Stop()
		// Traffic every 900 ms for 10 s: never idle.
		for range 11 {
			time.Sleep(900 * time.Millisecond)
			n.Add(1)
		}
		synctest.Wait()
		select {
		case at := <-idleAt:
			t.Fatalf("idle at %v while the connection carried traffic", at)
		default:
		}
		last := time.Since(start)
		time.Sleep(3 * time.Second)
		synctest.Wait()
		select {
		case at := <-idleAt:
			if at < last+time.Second || at > last+2*time.Second {
				t.Errorf("idle at %v, last traffic at %v: want between 1 and 2 periods after", at, last)
			}
		default:
			t.Fatal("never idle after the traffic stopped")
		}
		select {
		case at := <-idleAt:
			t.Errorf("idle twice (again at %v)", at)
		default:
		}
	})
}
