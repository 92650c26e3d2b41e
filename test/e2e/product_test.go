package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gosiw/gosiw/internal/testutil"
)

// run runs one of the binaries and returns stdout, stderr and the exit code.
func run(t *testing.T, bin string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, bin), args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s %v: %v", bin, args, err)
	}
	return stdout.String(), stderr.String(), code
}

// --version prints the build: module version, VCS revision, toolchain.
func TestVersion(t *testing.T) {
	re := regexp.MustCompile(`^(siw|siwd) \S+ \(revision ([0-9a-f]+(, modified)?|unknown)\) go1\.\d+`)
	for _, bin := range []string{"siw", "siwd"} {
		out, errOut, code := run(t, bin, "--version")
		if code != 0 || !strings.HasPrefix(out, bin+" ") || !re.MatchString(out) || errOut != "" {
			t.Errorf("%s --version: exit %d, %q, stderr %q", bin, code, out, errOut)
		}
	}
}

// Bad flags and arguments are usage errors, refused before anything is
// printed on stdout or anything connects.
func TestUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"perf", "-s", "write", "127.0.0.1:7174"}, "-s runs the responder"},
		{[]string{"perf", "write", "-l", "2G", "127.0.0.1:7174"}, `size "2G": want at most 64M`},
		{[]string{"perf", "write", "-d", "0", "127.0.0.1:7174"}, "-d/--depth 0"},
		{[]string{"perf", "write", "-P", "0", "127.0.0.1:7174"}, "-P/--parallel 0"},
		{[]string{"perf", "write", "127.0.0.1:99999"}, `port "99999": want a number from 1 to 65535`},
		{[]string{"region", "read", "127.0.0.1:7174", "scratch", "--length", "-5"}, "must not be negative"},
		{[]string{"region", "read", "127.0.0.1:0", "scratch"}, `port "0": want a number from 1 to 65535`},
		{[]string{"ping", "-c", "-a", "127.0.0.1", "-p", "70000"}, "-p/--port 70000"},
		{[]string{"ping", "-c", "-a", "127.0.0.1", "-S", "1T"}, `size "1T": want at most`},
	} {
		out, errOut, code := run(t, "siw", c.args...)
		if code == 0 || !strings.Contains(errOut, c.want) || out != "" {
			t.Errorf("siw %q: exit %d, stdout %q, stderr %q; want a failure saying %q", c.args, code, out, errOut, c.want)
		}
	}
}

// probeFacts runs siw probe --json against addr and returns each fact's
// value (nil: unknown).
func probeFacts(t *testing.T, addr string, args ...string) map[string]any {
	t.Helper()
	out, errOut, code := run(t, "siw", append(append([]string{"probe", "--json", "--request-timeout-wait", "0"}, args...), addr)...)
	if code != 0 {
		t.Fatalf("siw probe %s: exit %d\n%s%s", addr, code, out, errOut)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("siw probe --json: %v\n%s", err, out)
	}
	got := map[string]any{}
	for k, raw := range doc {
		var f struct {
			Value any    `json:"value"`
			From  string `json:"from"`
		}
		if json.Unmarshal(raw, &f) == nil && f.From != "" {
			got[k] = f.Value
		}
	}
	return got
}

func checkProbe(t *testing.T, who string, got, want map[string]any) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s = %v, want %v", who, k, got[k], v)
		}
	}
}

// The probe against siwd: its rping service accepts a Request without
// private data, so every fact is learned from accepting Replies; the
// PD_Length limit is siwd's (Linux siw's, 255 with the block).
func TestProbeSiwd(t *testing.T) {
	d := startSiwd(t)
	checkProbe(t, "siwd", probeFacts(t, d.addr), map[string]any{
		"ulp": "accepts", "rev1": "accepted", "rev2": "accepted", "rev3": "refused", "enhanced": true,
		"crc_when_requested": "on", "markers": "refused", "markers_refusal": "reply_r_set", "p2p": true,
		"rtr_chosen": "write", "ird": 128.0, "ord": 128.0, "max_private_data": 255.0,
	})
}

// The probe against siw perf -s: the perf responder rejects a Request
// without its private data, so the MPA layer's facts come from those
// rejects, and what only an accept carries is unknown, not "refused".
func TestProbePerfServer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "siw"), "perf", "-s", "--listen", "127.0.0.1:0", "--tcp-listen", "off")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); cmd.Wait() }()
	sc := bufio.NewScanner(stdout)
	var addr string
	if sc.Scan() {
		if m := regexp.MustCompile(`^Server listening on (\S+) \(gosiw\)$`).FindStringSubmatch(sc.Text()); m != nil {
			addr = m[1]
		}
	}
	if addr == "" {
		t.Fatalf("siw perf -s said %q", sc.Text())
	}
	go func() {
		for sc.Scan() {
		}
	}()
	got := probeFacts(t, addr)
	checkProbe(t, "siw perf -s", got, map[string]any{
		"rev1": "accepted", "rev2": "accepted", "rev3": "refused", "enhanced": true, "markers": "refused",
		"max_private_data": 255.0, "ird": nil, "ord": nil, "crc_when_requested": nil, "p2p": nil,
	})
	if s, _ := got["ulp"].(string); !strings.HasPrefix(s, `rejects: "gosiw-perf/1 error: `) {
		t.Errorf("siw perf -s: ulp = %v", got["ulp"])
	}
}

// A peer that is not iWARP is named as such, with what it said.
func TestNotIWARPPeer(t *testing.T) {
	addr := testutil.ForeignServer(t, []byte("SSH-2.0-OpenSSH_9.2\r\n"), false)
	for _, args := range [][]string{
		{"probe", addr},
		{"perf", "write", "-t", "1", addr},
		{"region", "read", addr, "x"},
	} {
		_, errOut, code := run(t, "siw", args...)
		if code == 0 || !strings.Contains(errOut, `not an iWARP peer: `) || !strings.Contains(errOut, `answered "SSH-2.0-OpenSSH_9.2"`) {
			t.Errorf("siw %v: exit %d, stderr %q", args, code, errOut)
		}
	}
}

// siwd names the valid values of a bad flag value.
func TestSiwdFlagValues(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--log-level", "trace"}, `log level "trace": want debug, info, warn or error`},
		{[]string{"--log-format", "xml"}, `log format "xml": want console or json`},
		{[]string{"--region", "name=a,size=1K,access=x"}, `access "x": want r, w or rw`},
		{[]string{"--region", "name=a,size=-1"}, `size "-1": want a whole number of bytes`},
	} {
		_, errOut, code := run(t, "siwd", append([]string{"--listen", "127.0.0.1:0", "--metrics", ""}, c.args...)...)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("siwd %q: exit %d, stderr %q, want %q", c.args, code, errOut, c.want)
		}
	}
}

// A reload (SIGHUP) that changes listen logs that it needs a restart, and
// siwd keeps serving on the old address.
func TestSiwdReloadListenNeedsRestart(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "siwd.toml")
	if err := os.WriteFile(conf, []byte("listen = \"127.0.0.1:0\"\nmetrics = \"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(binDir, "siwd"), "--config", conf)
	stderrPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stderr := &testutil.SyncBuffer{}
	logLines := make(chan string, 100)
	logDone := make(chan struct{})
	go func() {
		defer close(logDone)
		es := bufio.NewScanner(stderrPipe)
		for es.Scan() {
			stderr.Write([]byte(es.Text() + "\n"))
			select {
			case logLines <- es.Text():
			default:
			}
		}
	}()
	defer func() { cmd.Process.Signal(syscall.SIGTERM); <-logDone; cmd.Wait() }()
	sc := bufio.NewScanner(stdout)
	var addr string
	for addr == "" && sc.Scan() {
		if m := listenRe.FindStringSubmatch(sc.Text()); m != nil {
			addr = m[1]
		}
	}
	if addr == "" {
		t.Fatalf("siwd did not listen: %s", stderr)
	}
	go func() {
		for sc.Scan() {
		}
	}()
	if err := os.WriteFile(conf, []byte("listen = \"127.0.0.1:1\"\nmetrics = \"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Signal(syscall.SIGHUP)
	want := "listen changed: it needs a restart of siwd"
	timeout := time.After(20 * time.Second)
	for found := false; !found; {
		select {
		case l := <-logLines:
			if strings.Contains(l, want) {
				found = true
				if !strings.Contains(l, "127.0.0.1:1") || !strings.Contains(l, addr) {
					t.Errorf("the warning does not name both addresses: %s", l)
				}
			}
		case <-timeout:
			t.Fatalf("no %q in siwd's log:\n%s", want, stderr)
		}
	}
	// Still serving on the old address.
	if out, code := siw(t, "ping", "-c", "-a", strings.Split(addr, ":")[0], "-p", strings.Split(addr, ":")[1], "-C", "1"); code != 0 {
		t.Errorf("ping after the reload: exit %d\n%s", code, out)
	}
}

// siwd exports its build: gosiw_build_info, 1, labelled like --version.
func TestSiwdBuildInfo(t *testing.T) {
	d := startSiwd(t)
	out, _, _ := run(t, "siwd", "--version")
	// "siwd VERSION (revision REV[, modified]) GOVERSION"
	m := regexp.MustCompile(`^siwd (\S+) \(revision ([^,)]+)(, modified)?\) (\S+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("siwd --version: %q", out)
	}
	rev := m[2]
	if m[3] != "" {
		rev += "-modified"
	}
	want := `gosiw_build_info{goversion="` + m[4] + `",revision="` + rev + `",version="` + m[1] + `"} 1`
	if body := testutil.Scrape(t, d.metrics); !strings.Contains(body, want) {
		t.Errorf("no %s in the metrics:\n%s", want, firstLines(body, "gosiw_"))
	}
}

func firstLines(body, prefix string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
