package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/gosiw/gosiw/layers"
	"github.com/gosiw/gosiw/mpa"
)

// The dump goldens: testdata/dump/NAME.jsonl (siw dump --json) and
// testdata/dump/NAME.txt (siw dump) for every capture in
// testdata/captures at the repository root. Regenerate them with
//
//	go test ./cmd/siw -run TestDumpGolden -update
//
// and read the diff.
var updateDump = flag.Bool("update", false, "rewrite cmd/siw/testdata/dump/* from the current output")

func dumpCaptures(t *testing.T) []string {
	t.Helper()
	m, err := filepath.Glob("../../testdata/captures/*.pcap")
	if err != nil || len(m) == 0 {
		t.Fatalf("no captures: %v", err)
	}
	return m
}

func dumpOutput(t *testing.T, path string, asJSON bool) []byte {
	t.Helper()
	var out bytes.Buffer
	if err := runDump(&out, path, asJSON); err != nil {
		t.Fatalf("dump %s: %v", path, err)
	}
	return out.Bytes()
}

func TestDumpGolden(t *testing.T) {
	defer goleak.VerifyNone(t)
	for _, path := range dumpCaptures(t) {
		name := strings.TrimSuffix(filepath.Base(path), ".pcap")
		for _, tc := range []struct {
			ext    string
			asJSON bool
		}{{".jsonl", true}, {".txt", false}} {
			t.Run(name+tc.ext, func(t *testing.T) {
				got := dumpOutput(t, path, tc.asJSON)
				golden := filepath.Join("testdata", "dump", name+tc.ext)
				if *updateDump {
					if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(golden, got, 0o644); err != nil {
						t.Fatal(err)
					}
					return
				}
				want, err := os.ReadFile(golden)
				if err != nil {
					t.Fatalf("%v (regenerate with -update)", err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("output differs from %s (regenerate with -update if intended):\n%s", golden, dumpLineDiff(want, got))
				}
			})
		}
	}
}

// dumpLineDiff shows the first differing lines.
func dumpLineDiff(want, got []byte) string {
	w, g := strings.Split(string(want), "\n"), strings.Split(string(got), "\n")
	for i := 0; i < max(len(w), len(g)); i++ {
		var a, b string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			b = g[i]
		}
		if a != b {
			return "line " + strconv.Itoa(i+1) + ":\n- " + a + "\n+ " + b
		}
	}
	return ""
}

// TestDumpJSONFields checks every --json line of every capture against
// the field list of the issue: which fields each kind carries, and their
// types.
func TestDumpJSONFields(t *testing.T) {
	common := []string{"conn", "kind"}
	frame := []string{"dir", "frame", "packet"}
	handshake := []string{"rev", "markers", "crc", "reject", "enhanced", "p2p", "ird", "ord", "rtr", "pd_len", "pd_block_len", "ulp_pd_len", "private_data"}
	fpdu := []string{"ulpdu_len", "crc", "crc_value", "crc_ok", "ddp", "rdmap", "payload_len"}
	for _, path := range dumpCaptures(t) {
		crcCapture := strings.Contains(path, "crc-")
		lines := bytes.Split(bytes.TrimSpace(dumpOutput(t, path, true)), []byte("\n"))
		for i, line := range lines {
			var m map[string]any
			if err := json.Unmarshal(line, &m); err != nil {
				t.Fatalf("%s line %d: %v", path, i+1, err)
			}
			need := common
			switch m["kind"] {
			case "mpa_request", "mpa_reply":
				need = append(append(need, frame...), handshake...)
				if _, bad := m["error"]; bad {
					need = append(common, frame...) // malformed: raw octets instead
					need = append(need, "error", "wire")
				}
			case "fpdu":
				need = append(append(need, frame...), fpdu...)
			default:
				need = append(need, "note")
			}
			for _, k := range need {
				if _, ok := m[k]; !ok {
					t.Errorf("%s line %d (%s): no %q", path, i+1, m["kind"], k)
				}
			}
			// "crc" is a boolean wherever it appears.
			if c, ok := m["crc"]; ok {
				if _, isBool := c.(bool); !isBool {
					t.Errorf("%s line %d (%s): crc %v is not a boolean", path, i+1, m["kind"], c)
				}
			}
			if m["kind"] == "mpa_request" || m["kind"] == "mpa_reply" {
				if _, bad := m["error"]; !bad {
					// An empty private_data beside a non-zero pd_len is
					// explained by the block.
					if m["pd_len"] != m["pd_block_len"].(float64)+m["ulp_pd_len"].(float64) ||
						(m["enhanced"] == true) != (m["pd_block_len"] == 4.0) {
						t.Errorf("%s line %d: pd_len %v, block %v, ULP %v", path, i+1, m["pd_len"], m["pd_block_len"], m["ulp_pd_len"])
					}
					if _, ok := m["reject_reason"]; ok != (m["reject"] == true) {
						t.Errorf("%s line %d: reject_reason beside reject %v", path, i+1, m["reject"])
					}
					if _, ok := m["rtr"].([]any); !ok {
						t.Errorf("%s line %d: rtr %v is not a list", path, i+1, m["rtr"])
					}
					if m["enhanced"] == false && (m["ird"] != nil || m["ord"] != nil) {
						t.Errorf("%s line %d: IRD/ORD without RFC 6581", path, i+1)
					}
				}
			}
			if m["kind"] != "fpdu" {
				continue
			}
			if _, ok := m["crc_value"].(float64); !ok || m["crc"] != crcCapture {
				t.Errorf("%s line %d: crc %v crc_value %v", path, i+1, m["crc"], m["crc_value"])
			}
			if crcCapture && m["crc_ok"] != true || !crcCapture && m["crc_ok"] != nil {
				t.Errorf("%s line %d: crc_ok %v", path, i+1, m["crc_ok"])
			}
			d := m["ddp"].(map[string]any)
			want := []string{"tagged", "last", "version", "qn", "msn", "mo"}
			if d["tagged"] == true {
				want = []string{"tagged", "last", "version", "stag", "to"}
			}
			for _, k := range want {
				if _, ok := d[k]; !ok {
					t.Errorf("%s line %d: ddp has no %q", path, i+1, k)
				}
			}
			r := m["rdmap"].(map[string]any)
			if _, ok := r["version"]; !ok {
				t.Errorf("%s line %d: rdmap has no version", path, i+1)
			}
			if r["opcode"] == "read_request" {
				for _, k := range []string{"sink_stag", "sink_to", "read_len", "src_stag", "src_to"} {
					if _, ok := r[k]; !ok {
						t.Errorf("%s line %d: read request has no %q", path, i+1, k)
					}
				}
			}
		}
	}
}

func TestDumpErrors(t *testing.T) {
	defer goleak.VerifyNone(t)
	var out bytes.Buffer
	if err := runDump(&out, filepath.Join(t.TempDir(), "missing.pcap"), false); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	if err := runDump(&out, "dump.go", true); err == nil || !strings.Contains(err.Error(), "not a pcap or pcapng file") {
		t.Errorf("not a capture: %v", err)
	}
}

// TestDumpExitCode runs siw itself (this test binary, re-executed as the
// command) on an unreadable file and on a capture.
func TestDumpExitCode(t *testing.T) {
	if file, ok := os.LookupEnv("SIW_TEST_DUMP_FILE"); ok {
		os.Args = []string{"siw", "dump", "--json", file}
		main()
		os.Exit(0)
	}
	run := func(file string) (int, string) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestDumpExitCode$")
		cmd.Env = append(os.Environ(), "SIW_TEST_DUMP_FILE="+file)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), stderr.String()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0, stderr.String()
	}
	for _, file := range []string{filepath.Join(t.TempDir(), "missing.pcap"), "dump_test.go"} {
		if code, stderr := run(file); code == 0 || !strings.HasPrefix(stderr, "siw: dump: ") {
			t.Errorf("%s: exit code %d, stderr %q", file, code, stderr)
		}
	}
	if code, stderr := run("../../testdata/captures/crc-rping-default.pcap"); code != 0 || stderr != "" {
		t.Errorf("capture: exit code %d, stderr %q", code, stderr)
	}
}

// Private data and reject reasons read as text when printable, hex
// otherwise, and a bare reject says it gave no reason.
func TestDumpPrivateDataText(t *testing.T) {
	rec := func(reject bool, pd []byte) *layers.Record {
		return &layers.Record{Kind: layers.KindMPAReply, Dir: layers.DirR2I, Index: 0, Packet: 7,
			Startup: &layers.MPAStartup{Frame: mpa.Frame{Reply: true, Reject: reject, Rev: 2, Enhanced: true,
				PDLength: uint16(mpa.EnhancedLen + len(pd)), PrivateData: pd}}}
	}
	for _, c := range []struct {
		r        *layers.Record
		text     string
		jsonPart string
	}{
		{rec(true, []byte("gosiw siwd: 10.0.0.1 is not allowed")), ` pd_len 39 (block 4 + ULP 35) reason "gosiw siwd: 10.0.0.1 is not allowed"`,
			`"reject_reason":"gosiw siwd: 10.0.0.1 is not allowed"`},
		{rec(true, []byte{0, 1, 0xfe}), ` pd_len 7 (block 4 + ULP 3) reason 3 bytes: 0001fe`, `"private_data":"0001fe","reject_reason":"3 bytes: 0001fe"`},
		{rec(true, nil), ` pd_len 4 (block 4 + ULP 0) no reason given`, `"ulp_pd_len":0,"private_data":"","reject_reason":""`},
		{rec(false, []byte("Hello")), ` pd_len 9 (block 4 + ULP 5) pd "Hello"`, `"private_data":"48656c6c6f","private_data_text":"Hello"`},
	} {
		if got := dumpTextLine(c.r); !strings.HasSuffix(got, c.text) {
			t.Errorf("text %q, want it to end %q", got, c.text)
		}
		b, err := json.Marshal(dumpJSONValue(c.r))
		if err != nil || !strings.Contains(string(b), c.jsonPart) {
			t.Errorf("json %s (%v), want %s in it", b, err, c.jsonPart)
		}
	}
}
