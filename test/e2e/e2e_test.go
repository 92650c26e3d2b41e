// Package e2e drives the real siwd and siw binaries: it builds them once,
// starts siwd on ephemeral loopback ports, and runs client commands
// against it, checking their output and exit codes.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gosiw/gosiw/internal/testutil"
)

var binDir string

func TestMain(m *testing.M) { testutil.RunWithCommands(leakChecked{m}, &binDir, "siw", "siwd") }

// leakChecked runs the tests and then, when they passed, fails the run if
// a goroutine of theirs is left (the readers of the processes' output
// among them), as goleak.VerifyTestMain does for the other packages.
type leakChecked struct{ m *testing.M }

func (l leakChecked) Run() int {
	code := l.m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines left after the tests: %v\n", err)
			return 1
		}
	}
	return code
}

// daemon is a running siwd.
type daemon struct {
	cmd     *exec.Cmd
	addr    string // host:port of the iWARP listener
	metrics string // URL of /metrics, when on
	stderr  *testutil.SyncBuffer
	done    chan error
}

var (
	listenRe  = regexp.MustCompile(`^siwd listening on (\S+)`)
	metricsRe = regexp.MustCompile(`^siwd metrics on (\S+)`)
)

// startSiwd runs siwd with args (plus ephemeral --listen and --metrics)
// and waits for it to announce its addresses.
func startSiwd(t *testing.T, args ...string) *daemon {
	t.Helper()
	args = append([]string{"--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0"}, args...)
	cmd := exec.Command(filepath.Join(binDir, "siwd"), args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	d := &daemon{cmd: cmd, stderr: &testutil.SyncBuffer{}, done: make(chan error, 1)}
	cmd.Stderr = d.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		d.done <- cmd.Wait()
	}()
	timeout := time.After(20 * time.Second)
	for d.addr == "" || d.metrics == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("siwd exited before listening: %s", d.stderr)
			}
			if m := listenRe.FindStringSubmatch(l); m != nil {
				d.addr = m[1]
			}
			if m := metricsRe.FindStringSubmatch(l); m != nil {
				d.metrics = m[1]
			}
		case <-timeout:
			cmd.Process.Kill()
			t.Fatalf("siwd did not announce its addresses: %s", d.stderr)
		}
	}
	go func() {
		for range lines {
		}
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-d.done:
			case <-time.After(15 * time.Second):
				cmd.Process.Kill()
				t.Errorf("siwd did not stop on SIGTERM")
			}
		}
	})
	return d
}

// stop sends SIGTERM and waits (bounded) for a clean exit.
func (d *daemon) stop(t *testing.T) {
	t.Helper()
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-d.done:
		if err != nil {
			t.Fatalf("siwd exit: %v\n%s", err, d.stderr)
		}
	case <-time.After(15 * time.Second):
		d.cmd.Process.Kill()
		t.Fatalf("siwd did not exit within 15 s of SIGTERM\n%s", d.stderr)
	}
}

func (d *daemon) hostPort() (string, string) {
	i := strings.LastIndex(d.addr, ":")
	return d.addr[:i], d.addr[i+1:]
}

// siw runs the client tool and returns its combined output and exit code.
func siw(t *testing.T, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(binDir, "siw"), args...).CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("siw %v: %v", args, err)
	}
	return string(out), code
}

func metricValue(body, series string) string {
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return ""
}

func TestPingAgainstSiwd(t *testing.T) {
	d := startSiwd(t)
	host, port := d.hostPort()
	for _, size := range []string{"64", "4096", "65535"} {
		out, code := siw(t, "ping", "-c", "-a", host, "-p", port, "-S", size, "-C", "4", "-v", "-V")
		if code != 0 {
			t.Fatalf("siw ping -S %s: exit %d\n%s", size, code, out)
		}
		if n := strings.Count(out, "ping data: rdma-ping-"); n != 4 {
			t.Fatalf("siw ping -S %s printed %d pings:\n%s", size, n, out)
		}
		if !strings.Contains(out, "4 pings of "+size+" bytes") || !strings.Contains(out, "validation ok") {
			t.Fatalf("summary missing:\n%s", out)
		}
	}
	body := testutil.Scrape(t, strings.TrimSuffix(d.metrics, "/metrics")+"/metrics")
	if v := metricValue(body, `siwd_handshakes_total{reason="",result="accepted"}`); v != "3" {
		t.Errorf("accepted handshakes = %q, want 3", v)
	}
	if v := metricValue(body, `siwd_operations_total{dir="tx",opcode="rdma_write"}`); v != "12" {
		t.Errorf("RDMA Writes = %q, want 12", v)
	}
	// 4 pings each of 64, 4096 and 65535 bytes written back.
	if v := metricValue(body, `siwd_bytes_total{dir="tx",opcode="rdma_write"}`); v != fmt.Sprint(4*(64+4096+65535)) {
		t.Errorf("RDMA Write bytes = %q", v)
	}
	if h := testutil.Scrape(t, strings.TrimSuffix(d.metrics, "/metrics")+"/healthz"); h != "ok\n" {
		t.Errorf("healthz = %q", h)
	}
	d.stop(t)
}

func TestACLRefusalSeenByClient(t *testing.T) {
	d := startSiwd(t, "--allow", "10.99.0.0/16", "--log-format", "json")
	host, port := d.hostPort()
	out, code := siw(t, "ping", "-c", "-a", host, "-p", port, "-C", "1")
	if code == 0 {
		t.Fatalf("refused client exited 0:\n%s", out)
	}
	for _, want := range []string{"rejected by", "127.0.0.1 is not allowed by the access rules", "refused by remote application"} {
		if !strings.Contains(out, want) {
			t.Errorf("client output lacks %q:\n%s", want, out)
		}
	}
	body := testutil.Scrape(t, d.metrics)
	if v := metricValue(body, `siwd_handshakes_total{reason="acl",result="rejected"}`); v != "1" {
		t.Errorf("rejected handshakes = %q, want 1", v)
	}
	d.stop(t)
	if !strings.Contains(d.stderr.String(), `"msg":"refused"`) {
		t.Errorf("siwd did not log the refusal as JSON:\n%s", d.stderr)
	}
}

func TestMaxConnsPerClient(t *testing.T) {
	d := startSiwd(t, "--max-conns", "5", "--max-conns-per-client", "0")
	host, port := d.hostPort()
	out, code := siw(t, "ping", "-c", "-a", host, "-p", port, "-C", "2")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	d.stop(t)
}

func TestUnreachable(t *testing.T) {
	out, code := siw(t, "ping", "-c", "-a", "127.0.0.1", "-p", "1", "-C", "1")
	if code == 0 || !strings.Contains(out, "unreachable") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

func TestBadFlags(t *testing.T) {
	out, code := siw(t, "ping", "-a", "127.0.0.1")
	if code == 0 || !strings.Contains(out, "exactly one of -c") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	cmd := exec.Command(filepath.Join(binDir, "siwd"), "--region", "name=x,size=0")
	b, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(b), "size") {
		t.Fatalf("siwd with a bad region: %v\n%s", err, b)
	}
}

// TestSigtermDuringTransfer stops siwd while siw perf writes to it: siwd
// exits 0 quickly, and the client reports that the connection ended
// instead of hanging.
func TestSigtermDuringTransfer(t *testing.T) {
	d := startSiwd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := exec.CommandContext(ctx, filepath.Join(binDir, "siw"), "perf", "write", "-t", "30s", "-i", "0.2", d.addr)
	stdout, _ := cl.StdoutPipe()
	var stderr strings.Builder
	cl.Stderr = &stderr
	if err := cl.Start(); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), "sec") && strings.Contains(sc.Text(), "Bytes") {
			break // the transfer is under way
		}
	}
	start := time.Now()
	d.stop(t)
	stopped := time.Since(start)
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
	}
	err := cl.Wait()
	if time.Since(start) > 20*time.Second {
		t.Fatalf("client took %v to notice", time.Since(start))
	}
	all := out.String() + stderr.String()
	if err == nil || !strings.Contains(all, "closed by the responder") {
		t.Fatalf("client after SIGTERM: %v\n%s", err, all)
	}
	t.Logf("siwd stopped %v after SIGTERM; client said: %s", stopped, strings.TrimSpace(stderr.String()))
}

// TestPerfAgainstSiwd runs each perf op against siwd and checks that siwd's
// metrics saw the traffic the client reports.
func TestPerfAgainstSiwd(t *testing.T) {
	d := startSiwd(t)
	for _, op := range [][]string{{"write"}, {"read"}, {"send"}, {"send", "--pingpong"}} {
		args := append([]string{"perf"}, op...)
		args = append(args, "-t", "300ms", "--json", d.addr)
		out, code := siw(t, args...)
		if code != 0 {
			t.Fatalf("siw %v: exit %d\n%s", args, code, out)
		}
		if !strings.Contains(out, `"bits_per_second"`) {
			t.Fatalf("siw %v: no JSON summary:\n%s", args, out)
		}
	}
	body := testutil.Scrape(t, d.metrics)
	if v := metricValue(body, `siwd_handshakes_total{reason="",result="accepted"}`); v != "4" {
		t.Errorf("accepted handshakes = %q, want 4 (one per perf run)", v)
	}
	// The last connection's QP is released once siwd has seen it end.
	for end := time.Now().Add(10 * time.Second); metricValue(testutil.Scrape(t, d.metrics), `siwd_qps`) != "0"; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Errorf("QPs in use after the runs = %q, want 0", metricValue(testutil.Scrape(t, d.metrics), `siwd_qps`))
			break
		}
	}
	if v := metricValue(body, `siwd_operations_total{dir="rx",opcode="rdma_write"}`); v == "" || v == "0" {
		t.Errorf("siwd counted no RDMA Writes:\n%s", grepLines(body, "siwd_"))
	}
	d.stop(t)
}

func grepLines(s, prefix string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// TestSighupReloadsAccessRules refuses a client by the config file's rules,
// then lets it in after the file is edited and siwd gets SIGHUP.
func TestSighupReloadsAccessRules(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "siwd.toml")
	if err := os.WriteFile(cfg, []byte("allow = [\"10.99.0.0/16\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startSiwd(t, "--config", cfg)
	host, port := d.hostPort()
	if out, code := siw(t, "ping", "-c", "-a", host, "-p", port, "-C", "1"); code == 0 || !strings.Contains(out, "not allowed") {
		t.Fatalf("before reload: exit %d\n%s", code, out)
	}
	if err := os.WriteFile(cfg, []byte("allow = [\"127.0.0.0/8\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d.cmd.Process.Signal(syscall.SIGHUP)
	// The reload is logged; wait for it rather than for a time.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(d.stderr.String(), "access rules reloaded") {
		if time.Now().After(deadline) {
			t.Fatalf("siwd did not log the reload:\n%s", d.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if out, code := siw(t, "ping", "-c", "-a", host, "-p", port, "-C", "1"); code != 0 {
		t.Fatalf("after reload: exit %d\n%s", code, out)
	}
	d.stop(t)
}

// TestRegions writes a file into a siwd region with siw region write, reads
// it back with siw region read, and checks the refusals.
func TestRegions(t *testing.T) {
	d := startSiwd(t, "--region", "name=scratch,size=4MiB,access=rw", "--region", "name=ro,size=64K,access=r")
	dir := t.TempDir()
	in, back := filepath.Join(dir, "in"), filepath.Join(dir, "back")
	data := make([]byte, 3<<20+77)
	for i := range data {
		data[i] = byte(i*31 + i>>11)
	}
	if err := os.WriteFile(in, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := siw(t, "region", "write", d.addr, "scratch", "--offset", "12345", "-f", in); code != 0 {
		t.Fatalf("region write: exit %d\n%s", code, out)
	}
	if out, code := siw(t, "region", "read", d.addr, "scratch", "--offset", "12345", "--length", fmt.Sprint(len(data)), "-f", back); code != 0 {
		t.Fatalf("region read: exit %d\n%s", code, out)
	}
	got, err := os.ReadFile(back)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes that differ from the %d written", len(got), len(data))
	}
	if out, code := siw(t, "region", "write", d.addr, "ro", "-f", in); code == 0 || !strings.Contains(out, "grants r access only") {
		t.Fatalf("write to a read-only region: exit %d\n%s", code, out)
	}
	if out, code := siw(t, "region", "read", d.addr, "nope"); code == 0 || !strings.Contains(out, `no region named \"nope\"`) {
		t.Fatalf("unknown region: exit %d\n%s", code, out)
	}
	if out, code := siw(t, "region", "read", d.addr, "scratch", "--offset", "4194300", "--length", "8"); code == 0 || !strings.Contains(out, "past the end") {
		t.Fatalf("read past the end: exit %d\n%s", code, out)
	}
	d.stop(t)
}

// TestMemoryBudgetFlags: siwd --memory-per-conn refuses a perf test whose
// buffers do not fit, and the client shows siwd's reason.
func TestMemoryBudgetFlags(t *testing.T) {
	d := startSiwd(t, "--memory-per-conn", "32K", "--memory-budget", "1M", "--idle-timeout", "1m")
	out, code := siw(t, "perf", "write", "-t", "100ms", d.addr)
	if code == 0 || !strings.Contains(out, "over the limit of 32768 per connection") {
		t.Fatalf("perf write (64 KiB messages) with 32 KiB per connection: exit %d\n%s", code, out)
	}
	if v := metricValue(testutil.Scrape(t, d.metrics), `siwd_handshakes_total{reason="perf",result="rejected"}`); v != "1" {
		t.Errorf("rejected perf handshakes = %q, want 1", v)
	}
	d.stop(t)
}

// TestStrangersDoNotDelayAllowedClients is issue 9's report through the
// binaries: with --allow 127.0.0.1/32, 1100 TCP connections from other
// loopback addresses that never send a Request (more than siwd's 1024
// handshake slots) are open when an allowed client pings; the ping
// succeeds while every stranger is still stalled (the config gives them
// an hour), and the strangers past siwd's pool for them were closed at
// accept. (That a stranger that sends its Request hears the reason is
// internal/daemon's TestAdmissionBeforeWork.)
func TestStrangersDoNotDelayAllowedClients(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "siwd.toml")
	if err := os.WriteFile(cfg, []byte("refused_request_timeout = \"1h\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startSiwd(t, "--config", cfg, "--allow", "127.0.0.1/32")
	host, port := d.hostPort()
	const strangers = 1100
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range strangers {
		// 10 connections from each of 110 addresses 127.0.1.1 ...
		dl := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, byte(1+i/2000), byte(1+(i%2000)/10))}}
		c, err := dl.Dial("tcp", d.addr)
		if err != nil {
			t.Fatalf("stranger %d: %v", i, err)
		}
		conns = append(conns, c)
	}
	// Wait until siwd has accepted and classed them all.
	for end := time.Now().Add(60 * time.Second); metricValue(testutil.Scrape(t, d.metrics), `siwd_admissions_total{class="refused"}`) != fmt.Sprint(strangers); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("siwd classed %s of %d strangers", metricValue(testutil.Scrape(t, d.metrics), `siwd_admissions_total{class="refused"}`), strangers)
		}
	}
	if out, code := siw(t, "ping", "-c", "-a", host, "-p", port, "-C", "3"); code != 0 {
		t.Fatalf("allowed client behind %d stalled strangers: exit %d\n%s", strangers, code, out)
	}
	body := testutil.Scrape(t, d.metrics)
	if v := metricValue(body, `siwd_handshakes_total{reason="timeout",result="failed"}`); v != "" {
		t.Errorf("%s stranger handshakes timed out before the ping was done", v)
	}
	if v := metricValue(body, `siwd_handshakes_total{reason="busy",result="failed"}`); v == "" {
		t.Errorf("no stranger was closed at accept:\n%s", grepLines(body, "siwd_handshakes"))
	}
	d.stop(t)
}
