package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// iperf3ReaderPaths are the iperf3 -J fields that tools reading iperf3's
// JSON use (arrays as []): each must be in a real iperf3 -J document and
// in ours, with the same JSON type.
var iperf3ReaderPaths = []string{
	"start.connected[].socket", "start.connected[].local_host", "start.connected[].local_port",
	"start.connected[].remote_host", "start.connected[].remote_port",
	"start.version", "start.timestamp.time", "start.timestamp.timesecs",
	"start.connecting_to.host", "start.connecting_to.port",
	"start.test_start.protocol", "start.test_start.num_streams", "start.test_start.blksize",
	"start.test_start.omit", "start.test_start.duration", "start.test_start.bytes",
	"start.test_start.blocks", "start.test_start.reverse",
	"intervals[].streams[].socket", "intervals[].streams[].start", "intervals[].streams[].end",
	"intervals[].streams[].seconds", "intervals[].streams[].bytes", "intervals[].streams[].bits_per_second",
	"intervals[].streams[].omitted", "intervals[].streams[].sender",
	"intervals[].sum.start", "intervals[].sum.end", "intervals[].sum.seconds", "intervals[].sum.bytes",
	"intervals[].sum.bits_per_second", "intervals[].sum.omitted", "intervals[].sum.sender",
}

func init() {
	for _, side := range []string{"end.streams[].sender", "end.streams[].receiver", "end.sum_sent", "end.sum_received"} {
		for _, f := range []string{"start", "end", "seconds", "bytes", "bits_per_second", "sender"} {
			iperf3ReaderPaths = append(iperf3ReaderPaths, side+"."+f)
		}
		if strings.HasPrefix(side, "end.streams") {
			iperf3ReaderPaths = append(iperf3ReaderPaths, side+".socket")
		}
	}
}

// jsonPaths lists every leaf path of a JSON document with its type
// (number, string, bool, null; arrays as [], each element merged).
func jsonPaths(v any, prefix string, out map[string]string) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			jsonPaths(e, p, out)
		}
	case []any:
		for _, e := range x {
			jsonPaths(e, prefix+"[]", out)
		}
	case float64:
		out[prefix] = "number"
	case string:
		out[prefix] = "string"
	case bool:
		out[prefix] = "bool"
	case nil:
		out[prefix] = "null"
	}
}

func docPaths(t *testing.T, what string, b []byte) map[string]string {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v\n%s", what, err, b)
	}
	m := map[string]string{}
	jsonPaths(v, "", m)
	return m
}

// runIperf3 runs a real iperf3 server and client on loopback and returns
// the client's -J document.
func runIperf3(t *testing.T, args ...string) []byte {
	t.Helper()
	bin, err := exec.LookPath("iperf3")
	if err != nil {
		t.Skip("iperf3 is not installed (apt-get install iperf3; .ci/run installs it): cannot compare with a real iperf3 -J")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := exec.CommandContext(ctx, bin, "-s", "-1", "-B", "127.0.0.1", "-p", port)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Wait()
	defer srv.Process.Kill()
	// The server is up once it accepts a connection; iperf3 takes a
	// plain connect-and-close as no test (the -1 server keeps waiting).
	// iperf3 -J reports errors in the document's "error" (and 3.12 exits
	// 0 even then).
	for {
		cl := exec.CommandContext(ctx, bin, append([]string{"-c", "127.0.0.1", "-p", port, "-J"}, args...)...)
		out, err := cl.Output()
		var doc struct {
			Error string `json:"error"`
		}
		if jerr := json.Unmarshal(out, &doc); err == nil && jerr == nil && doc.Error == "" {
			return out
		}
		if ctx.Err() != nil || !strings.Contains(string(out), "unable to connect") {
			t.Fatalf("iperf3 -c: %v\n%s", err, out)
		}
		time.Sleep(20 * time.Millisecond) // the server is still starting: poll again
	}
}

func TestPerfJSONReadsLikeIperf3(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, perfLeakOpts...) })
	theirs := docPaths(t, "iperf3 -J", runIperf3(t, "-t", "1", "-i", "0.5", "-P", "2"))
	addr, _ := perfResponder(t)
	for _, op := range [][]string{{"write", "-P", "2"}, {"read"}, {"send", "--pingpong"}} {
		out, err := runPerfCmd(t, append(op, "--json", "-t", "300ms", "-i", "0.1", "-l", "4K", addr)...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", op, err, out)
		}
		ours := docPaths(t, "siw perf --json", []byte(out))
		var bad []string
		for _, p := range iperf3ReaderPaths {
			want, ok := theirs[p]
			if !ok {
				t.Fatalf("iperf3 -J has no %s: the list of reader paths is wrong (iperf3 gave %v)", p, theirs)
			}
			if got := ours[p]; got != want {
				bad = append(bad, fmt.Sprintf("%s: ours %q, iperf3 %q", p, got, want))
			}
		}
		sort.Strings(bad)
		if len(bad) > 0 {
			t.Errorf("%v: siw perf --json differs from iperf3 -J:\n  %s", op, strings.Join(bad, "\n  "))
		}
	}
}
