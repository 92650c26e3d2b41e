//go:build interop

package interop

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gosiw/gosiw/internal/testutil"
)

// guest is a booted Linux siw VM running vm/agent.sh.
type guest struct {
	cache string // INTEROP_CACHE
	q     string // the step queue, shared with the guest over 9p
	cmd   *exec.Cmd
	done  chan error
	next  int
	log   strings.Builder
}

// Host ports forwarded into the guest, bound on fwdHost.
const (
	fwdRping = 17174 // -> guest 7174 (rping -s)
	fwdCMA   = 17471 // -> guest 7471 (rdma_server, ucmatose)
	fwdNVMe  = 14420 // -> guest 4420 (nvmet-rdma)
)

// fwdHost is the host address the forwards bind: bootGuest picks a
// random one of 127.0.0.0/8 for each boot (testutil.ListenIP), so that
// another process on the machine that holds one of the ports on
// 127.0.0.1 (a siw perf -s on 17174, say) does not keep the VM from
// starting ("Could not set up host forwarding rule").
var fwdHost = "127.0.0.1"

// fwdAddr is the host address of the forward of port.
func fwdAddr(port int) string { return net.JoinHostPort(fwdHost, strconv.Itoa(port)) }

// hostPort returns a port free on 127.0.0.1 at the time of the call, for
// a host listener the guest dials as 10.0.2.2 (slirp's name for the
// host's loopback, which is 127.0.0.1 only): no fixed port a process of
// the machine may hold already.
func hostPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("a free host port: %v", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

// bootGuest boots the VM; kappend words go on the kernel command line
// (siw.NAME=VALUE become siw module options).
func bootGuest(t *testing.T, cache string, kappend ...string) *guest {
	t.Helper()
	for _, f := range []string{"vmlinuz", "initramfs.gz"} {
		if _, err := os.Stat(filepath.Join(cache, f)); err != nil {
			t.Fatalf("the VM is not built (%v): run test/interop/vm/build.sh (make interop does)", err)
		}
	}
	g := &guest{cache: cache, q: filepath.Join(cache, "share", "q"), next: 1, done: make(chan error, 1)}
	os.RemoveAll(filepath.Join(cache, "share"))
	os.RemoveAll(filepath.Join(cache, "pcaps"))
	if err := os.MkdirAll(g.q, 0o755); err != nil {
		t.Fatal(err)
	}
	fwdHost = testutil.ListenIP().String()
	g.cmd = exec.Command("bash", "vm/run.sh", "vm/agent.sh")
	g.cmd.Env = append(os.Environ(), "INTEROP_CACHE="+cache, "QUIET=1", "TIMEOUT=1000", "KAPPEND="+strings.Join(kappend, " "),
		fmt.Sprintf("HOSTFWD=tcp:%s-:7174,tcp:%s-:7471,tcp:%s-:4420", fwdAddr(fwdRping), fwdAddr(fwdCMA), fwdAddr(fwdNVMe)))
	g.cmd.Stdout, g.cmd.Stderr = &g.log, &g.log
	if err := g.cmd.Start(); err != nil {
		t.Fatalf("qemu: %v", err)
	}
	go func() { g.done <- g.cmd.Wait() }()
	deadline := time.Now().Add(180 * time.Second)
	for {
		if b, err := os.ReadFile(filepath.Join(g.q, "READY")); err == nil {
			t.Logf("guest up: %s", strings.TrimSpace(string(b)))
			return g
		}
		select {
		case err := <-g.done:
			t.Fatalf("the VM exited before its agent was ready (%v):\n%s\nconsole: %s", err, g.log.String(), g.console())
		default:
		}
		if time.Now().After(deadline) {
			g.cmd.Process.Kill()
			t.Fatalf("the VM did not boot within 180 s:\n%s\nconsole: %s", g.log.String(), g.console())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (g *guest) console() string {
	b, _ := os.ReadFile(filepath.Join(g.cache, "logs", "agent.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// step is one guest command run by the agent.
type step struct {
	g *guest
	n int
}

// run queues a shell script in the guest; "{{READY}}" in it names the file
// to touch once a server listens.
func (g *guest) run(script string) *step {
	s := &step{g: g, n: g.next}
	g.next++
	script = strings.ReplaceAll(script, "{{READY}}", fmt.Sprintf("/mnt/host/q/%d.ready", s.n))
	tmp := filepath.Join(g.q, fmt.Sprintf("%d.sh.tmp", s.n))
	os.WriteFile(tmp, []byte(script), 0o644)
	os.Rename(tmp, filepath.Join(g.q, fmt.Sprintf("%d.sh", s.n)))
	return s
}

// ready waits for the step to touch its ready file.
func (s *step) ready(d time.Duration) error {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(s.g.q, fmt.Sprintf("%d.ready", s.n))); err == nil {
			return nil
		}
		if _, err := os.Stat(filepath.Join(s.g.q, fmt.Sprintf("%d.rc", s.n))); err == nil {
			out, rc, _ := s.wait(time.Second)
			return fmt.Errorf("guest step ended (rc %d) before it was ready:\n%s", rc, out)
		}
	}
	return fmt.Errorf("guest step %d not ready after %v", s.n, d)
}

// wait waits for the step to end and returns its output and exit status.
func (s *step) wait(d time.Duration) (string, int, error) {
	rcf := filepath.Join(s.g.q, fmt.Sprintf("%d.rc", s.n))
	for end := time.Now().Add(d); ; time.Sleep(100 * time.Millisecond) {
		if b, err := os.ReadFile(rcf); err == nil {
			out, _ := os.ReadFile(filepath.Join(s.g.q, fmt.Sprintf("%d.out", s.n)))
			rc, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			return string(out), rc, nil
		}
		if time.Now().After(end) {
			out, _ := os.ReadFile(filepath.Join(s.g.q, fmt.Sprintf("%d.out", s.n)))
			return string(out), -1, fmt.Errorf("guest step %d still running after %v", s.n, d)
		}
	}
}

// stop ends the session and returns the path of the guest's capture.
func (g *guest) stop(t *testing.T) string {
	os.WriteFile(filepath.Join(g.q, "STOP"), nil, 0o644)
	select {
	case err := <-g.done:
		if err != nil {
			t.Errorf("qemu: %v\n%s", err, g.log.String())
		}
	case <-time.After(60 * time.Second):
		g.cmd.Process.Kill()
		t.Errorf("the VM did not power off within 60 s of STOP")
	}
	return filepath.Join(g.cache, "pcaps", "interop.pcap")
}
