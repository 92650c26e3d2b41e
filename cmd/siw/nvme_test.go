package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/gosiw/gosiw/internal/nvmeof"
	"github.com/gosiw/gosiw/rdmap"
)

// TestNVMeCommands runs siw nvme discover, identify, write, read and bench
// against an in-process target.
func TestNVMeCommands(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	dev, _ := rdmap.NewDevice(nil)
	t.Cleanup(func() { dev.Close() })
	tgt, err := nvmeof.NewTarget(dev, &nvmeof.Config{Subsystems: []*nvmeof.Subsystem{{NQN: "nqn.2026-01.dev.gosiw:cmd",
		Namespaces: []*nvmeof.Namespace{{NSID: 1, Data: make([]byte, 8<<20)}}}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := tgt.Listen(ctx, "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { tgt.Serve(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	addr := tgt.Addr().String()
	run := func(in []byte, args ...string) string {
		t.Helper()
		var out bytes.Buffer
		cmd := newNVMeCmd()
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetIn(bytes.NewReader(in))
		cmd.SetArgs(args)
		if err := cmd.ExecuteContext(context.Background()); err != nil {
			t.Fatalf("siw nvme %v: %v\n%s", args, err, out.String())
		}
		return out.String()
	}
	if out := run(nil, "discover", addr); !strings.Contains(out, "subnqn nqn.2026-01.dev.gosiw:cmd") {
		t.Fatalf("discover: %s", out)
	}
	if out := run(nil, "identify", addr); !strings.Contains(out, "namespace 1: 16384 blocks of 512 bytes") {
		t.Fatalf("identify: %s", out)
	}
	data := bytes.Repeat([]byte("0123456789abcdef"), 4096*3) // 192 KiB
	run(data, "write", addr, "--offset", "1048576")
	f := filepath.Join(t.TempDir(), "back")
	run(nil, "read", addr, "--offset", "1048576", "--length", "196608", "-f", f)
	if b, err := os.ReadFile(f); err != nil || !bytes.Equal(b, data) {
		t.Fatalf("read back: %v", err)
	}
	if out := run(nil, "bench", addr, "--pattern", "seqread1m", "--duration", "200ms", "--jobs", "2"); !strings.Contains(out, "IOPS") {
		t.Fatalf("bench: %s", out)
	}
}
