package daemon

import (
	"bytes"
	"context"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gosiw/gosiw/internal/nvmeof"
	"github.com/gosiw/gosiw/internal/testutil"
	"github.com/gosiw/gosiw/rdmap"
)

// TestNVMeFromFlags: the shortest form (a region, a listen address, a
// namespace) serves the region as namespace 1 of the default subsystem,
// which the discovery subsystem lists.
func TestNVMeFromFlags(t *testing.T) {
	sp := &ConfigSpec{Listen: "127.0.0.1:0", Regions: []RegionSpec{{Name: "disk", Size: "4M"}},
		NVMe: NVMeSpec{Listen: "127.0.0.1:0", Namespaces: []string{"disk"}}}
	cfg, err := sp.Build()
	if err != nil {
		t.Fatal(err)
	}
	s, m, stop := startServer(t, cfg)
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dev, _ := rdmap.NewDevice(nil)
	defer dev.Close()
	addr := s.NVMeAddr().String()

	d, err := nvmeof.Dial(ctx, addr, dev, &nvmeof.HostConfig{SubNQN: nvmeof.DiscoveryNQN})
	if err != nil {
		t.Fatal(err)
	}
	es, err := d.DiscoveryLog(ctx)
	d.Close()
	if err != nil || len(es) != 2 || es[0].SubNQN != DefaultNQN || es[0].Addr.String() != addr {
		t.Fatalf("discovery %+v %v", es, err)
	}
	h, err := nvmeof.Dial(ctx, addr, dev, &nvmeof.HostConfig{SubNQN: es[0].SubNQN, IOQueues: 2})
	if err != nil {
		t.Fatal(err)
	}
	ni, err := h.IdentifyNamespace(ctx, 1)
	if err != nil || ni.Size<<ni.LBAShift != 4<<20 || ni.ReadOnly {
		t.Fatalf("namespace %+v %v", ni, err)
	}
	p := bytes.Repeat([]byte("siwd nvme "), 6554)[:65536]
	if err := h.Write(ctx, 1, 1, ni.LBAShift, 64, p); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(p))
	if err := h.Read(ctx, 0, 1, ni.LBAShift, 64, got); err != nil || !bytes.Equal(got, p) {
		t.Fatalf("read back: %v", err)
	}
	h.Close()

	srv := httptest.NewServer(m.Handler(s.Healthy))
	defer srv.Close()
	body := testutil.Scrape(t, srv.URL+"/metrics")
	for _, want := range []string{
		`siwd_nvme_commands_total{opcode="write",queue="io",status="success"} 1`,
		`siwd_nvme_commands_total{opcode="connect",queue="admin",status="success"} 2`,
		`siwd_nvme_bytes_total{dir="write"} 65536`,
		`siwd_nvme_bytes_total{dir="read"} 65536`,
		`siwd_nvme_command_latency_seconds_count{opcode="read"} 1`,
		`siwd_nvme_queues{kind="io"}`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q in\n%s", want, body)
		}
	}
}

// TestNVMeSubsystemsFromTOML: [[nvme.subsystem]] with allowed hosts and a
// read-only region, from a config file.
func TestNVMeSubsystemsFromTOML(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "siwd.toml")
	toml := `listen = "127.0.0.1:0"
metrics = ""
[[region]]
name = "vol"
size = "1M"
file = "` + filepath.Join(dir, "vol.img") + `"
[[region]]
name = "golden"
size = "64K"
access = "r"
[nvme]
listen = "127.0.0.1:0"
[[nvme.subsystem]]
nqn = "nqn.2026-01.dev.gosiw:vol"
namespaces = ["vol", "golden"]
allowed_hosts = ["nqn.2026-01.dev.gosiw:host-a"]
`
	if err := os.WriteFile(path, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	sp, err := LoadSpec(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := sp.Build()
	if err != nil {
		t.Fatal(err)
	}
	s, _, stop := startServer(t, cfg)
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dev, _ := rdmap.NewDevice(nil)
	defer dev.Close()
	addr := s.NVMeAddr().String()
	_, err = nvmeof.Dial(ctx, addr, dev, &nvmeof.HostConfig{SubNQN: "nqn.2026-01.dev.gosiw:vol", HostNQN: "nqn.2026-01.dev.gosiw:host-b"})
	var se *nvmeof.StatusError
	if !errors.As(err, &se) || se.Status != nvmeof.StatusConnectInvHost|nvmeof.StatusDNR {
		t.Fatalf("a host outside the list: %v", err)
	}
	h, err := nvmeof.Dial(ctx, addr, dev, &nvmeof.HostConfig{SubNQN: "nqn.2026-01.dev.gosiw:vol", HostNQN: "nqn.2026-01.dev.gosiw:host-a", IOQueues: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ni, err := h.IdentifyNamespace(ctx, 2)
	if err != nil || !ni.ReadOnly {
		t.Fatalf("golden %+v %v", ni, err)
	}
	err = h.Write(ctx, 0, 2, 9, 0, make([]byte, 512))
	if !errors.As(err, &se) || se.Status != nvmeof.StatusNSWriteProtected|nvmeof.StatusDNR {
		t.Fatalf("write to a read-only region: %v", err)
	}
	if err := h.Write(ctx, 0, 1, 9, 0, []byte(strings.Repeat("x", 512))); err != nil {
		t.Fatal(err)
	}
	var c nvmeof.Command
	c.SetHeader(nvmeof.IOFlush, 0, 1)
	if _, err := h.IOCmd(ctx, 0, &c, nil, false); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "vol.img"))
	if err != nil || !bytes.HasPrefix(b, []byte(strings.Repeat("x", 512))) {
		t.Fatalf("the file does not hold the write after Flush: %v", err)
	}
}

func TestNVMeConfigErrors(t *testing.T) {
	regions := []Region{{Name: "disk", Size: 1 << 20}}
	for _, sp := range []NVMeSpec{
		{Namespaces: []string{"disk"}},
		{Listen: "127.0.0.1:4420"},
		{Listen: "127.0.0.1:4420", Namespaces: []string{"nope"}},
		{Listen: "nonsense", Namespaces: []string{"disk"}},
		{Listen: "127.0.0.1:4420", Subsystems: []SubsystemSpec{{NQN: nvmeof.DiscoveryNQN, Namespaces: []string{"disk"}}}},
		{Listen: "127.0.0.1:4420", Namespaces: []string{"disk"}, Subsystems: []SubsystemSpec{{NQN: DefaultNQN, Namespaces: []string{"disk"}}}},
		{Listen: "127.0.0.1:4420", InlineDataSize: 100, Namespaces: []string{"disk"}},
	} {
		if _, err := sp.build(regions); err == nil {
			t.Errorf("%+v accepted", sp)
		}
	}
	if c, err := (&NVMeSpec{}).build(regions); c != nil || err != nil {
		t.Fatalf("no listen: %+v %v", c, err)
	}
}
