package main

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gosiw/gosiw/rdmap"
)

// TestWorkloads runs every workload a few times over loopback: the
// fixtures survive consecutive runs of any kind (no bytes, receives or
// completions left over).
func TestWorkloads(t *testing.T) {
	r := newRunner(&options{})
	t.Cleanup(r.closeFixtures)
	raw, err := r.rawFixture("lo")
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range sizes {
		for _, run := range []struct {
			name string
			fn   func(n int) error
		}{
			{"stream", func(n int) error { return rawStream(nopBench{}, n, raw, size, depth) }},
			{"reqresp", func(n int) error { return rawReqResp(nopBench{}, n, raw, size, readDepth) }},
			{"pingpong", func(n int) error { return rawPingPong(nopBench{}, n, raw, size) }},
			{"echo", func(n int) error { return rawEcho(nopBench{}, n, raw, size) }},
		} {
			for _, n := range []int{1, 3 * depth} {
				if err := run.fn(n); err != nil {
					t.Fatalf("raw %s %d n=%d: %v", run.name, size, n, err)
				}
			}
		}
	}
	for _, crc := range []bool{false, true} {
		f, err := r.gosiwFixture("lo", crc)
		if err != nil {
			t.Fatal(err)
		}
		for _, size := range sizes {
			for _, run := range []struct {
				name string
				fn   func(n int) error
			}{
				{"write", func(n int) error { return gosiwStream(nopBench{}, n, f, rdmap.WRWrite, size, depth) }},
				{"read", func(n int) error { return gosiwStream(nopBench{}, n, f, rdmap.WRRead, size, readDepth) }},
				{"send", func(n int) error { return gosiwSend(nopBench{}, n, f, size) }},
				{"pingpong", func(n int) error { return gosiwPingPong(nopBench{}, n, f, size) }},
			} {
				for _, n := range []int{1, 3 * recvPosted} {
					if err := run.fn(n); err != nil {
						t.Fatalf("gosiw %s %d crc=%v n=%d: %v", run.name, size, crc, n, err)
					}
				}
			}
		}
		// Every receive is posted again.
		if n := f.b.cq.Len() + f.a.cq.Len(); n != 0 {
			t.Errorf("%d completions left over", n)
		}
	}
}

var ratioLine = regexp.MustCompile(`^ratio op=(write|read|send|pingpong) size=[0-9]+ crc=(on|off) link=(lo|veth) value=[0-9]+\.[0-9]{2}$`)

// TestOutput: the table, then one ratio line per measured case and
// nothing after them; cases that did not run get no ratio line.
func TestOutput(t *testing.T) {
	r := newRunner(&options{time: time.Second, count: 1, links: []string{"lo", "veth"}, run: regexp.MustCompile("")})
	lo := &rawCase{Kind: "stream", Size: 1 << 20, Link: "lo", best: &sample{NsPerOp: 500_000}}
	pp := &rawCase{Kind: "pingpong", Size: 64, Link: "lo", best: &sample{NsPerOp: 20_000}}
	r.raws = []*rawCase{lo, pp}
	r.cases = []*gosiwCase{
		{Op: "write", Size: 1 << 20, Link: "lo", raw: lo, target: target("write", 1<<20, false, "lo"), best: &sample{NsPerOp: 550_000}},
		{Op: "write", Size: 1 << 20, CRC: true, Link: "lo", raw: lo, target: target("write", 1<<20, true, "lo"), best: &sample{NsPerOp: 800_000}, maxAllocs: 1},
		{Op: "pingpong", Size: 64, Link: "lo", raw: pp, target: target("pingpong", 64, false, "lo"), best: &sample{NsPerOp: 25_000}},
		{Op: "write", Size: 1 << 20, Link: "veth", raw: &rawCase{Kind: "stream", Size: 1 << 20, Link: "veth"}, err: errVethSkipped},
	}
	r.vethErr = fmt.Errorf("needs root")
	var out bytes.Buffer
	if code := r.print(&out); code != 0 {
		t.Errorf("exit code %d", code)
	}
	s := out.String()
	if row := regexp.MustCompile(`(?m)^write +1048576 +off +lo +1906\.5 MB/s +2097\.2 MB/s +0\.91 +>=0\.90 +pass +0 +- *$`); !row.MatchString(s) {
		t.Errorf("no row matching %v:\n%s", row, s)
	}
	for _, want := range []string{
		"ratio targets: 2 pass, 1 FAIL (write/1048576/crc=on/lo 0.62 < 0.75)",
		"0 allocs/op: FAIL (write/1048576/crc=on/lo 1 allocs/op)",
		"veth cases NOT RUN: needs root",
		"not run (veth)",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	tail := lines[len(lines)-3:]
	want := []string{
		"ratio op=write size=1048576 crc=off link=lo value=0.91",
		"ratio op=write size=1048576 crc=on link=lo value=0.62",
		"ratio op=pingpong size=64 crc=off link=lo value=0.80",
	}
	for i, l := range tail {
		if l != want[i] || !ratioLine.MatchString(l) {
			t.Errorf("line %q, want %q", l, want[i])
		}
	}
	if n := len(regexp.MustCompile(`(?m)^ratio op=`).FindAllString(s, -1)); n != 3 {
		t.Errorf("want 3 ratio lines:\n%s", s)
	}
}
