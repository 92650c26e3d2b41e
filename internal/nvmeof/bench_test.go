package nvmeof

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/gosiw/gosiw/rdmap"
)

// The figures of the NVMe-oF target over loopback, beside the same I/O
// done to a plain file (the page cache: the ceiling):
//
//	go test -run '^$' -bench . -benchtime 3s ./internal/nvmeof
const (
	benchNSSize  = 256 << 20
	benchQueues  = 2
	benchDepth   = 32
	benchWorkers = 16 // commands in flight
)

func benchHost(b *testing.B) *Host {
	dev, err := rdmap.NewDevice(nil)
	if err != nil {
		b.Fatal(err)
	}
	mem, err := dev.AllocMemory(benchNSSize)
	if err != nil {
		b.Fatal(err)
	}
	tgt, err := NewTarget(dev, &Config{Subsystems: []*Subsystem{{NQN: testNQN, Namespaces: []*Namespace{{NSID: 1, Data: mem.Bytes()}}}}})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := tgt.Listen(ctx, "127.0.0.1:0"); err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { tgt.Serve(ctx); close(done) }()
	h, err := Dial(ctx, tgt.Addr().String(), dev, &HostConfig{SubNQN: testNQN, IOQueues: benchQueues, QueueDepth: benchDepth})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		h.Close()
		cancel()
		<-done
		mem.Close()
		dev.Close()
	})
	return h
}

// parallel runs op b.N times over benchWorkers goroutines; worker w uses
// queue w % benchQueues.
func parallel(b *testing.B, op func(w int, i int64) error) {
	var next atomic.Int64
	errs := make(chan error, benchWorkers)
	b.ResetTimer()
	for w := range benchWorkers {
		go func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					errs <- nil
					return
				}
				if err := op(w, i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for range benchWorkers {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "IOPS")
}

func BenchmarkNVMeRandRead4K(b *testing.B) {
	h := benchHost(b)
	ctx := context.Background()
	bufs := make([][]byte, benchWorkers)
	for i := range bufs {
		bufs[i] = make([]byte, 4096)
	}
	b.SetBytes(4096)
	b.ReportAllocs()
	parallel(b, func(w int, i int64) error {
		lba := rand.Uint64N(benchNSSize/4096) * 8
		return h.Read(ctx, w%benchQueues, 1, 9, lba, bufs[w])
	})
}

func BenchmarkNVMeSeqRead1M(b *testing.B)  { benchSeq(b, false) }
func BenchmarkNVMeSeqWrite1M(b *testing.B) { benchSeq(b, true) }

func benchSeq(b *testing.B, write bool) {
	h := benchHost(b)
	ctx := context.Background()
	const n = 1 << 20
	bufs := make([][]byte, benchWorkers)
	for i := range bufs {
		bufs[i] = make([]byte, n)
	}
	b.SetBytes(n)
	b.ReportAllocs()
	parallel(b, func(w int, i int64) error {
		lba := uint64(i%(benchNSSize/n)) * (n / 512)
		if write {
			return h.Write(ctx, w%benchQueues, 1, 9, lba, bufs[w])
		}
		return h.Read(ctx, w%benchQueues, 1, 9, lba, bufs[w])
	})
}

func benchFile(b *testing.B) *os.File {
	f, err := os.Create(filepath.Join(b.TempDir(), "ns.img"))
	if err != nil {
		b.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	for off := int64(0); off < benchNSSize; off += int64(len(chunk)) {
		if _, err := f.WriteAt(chunk, off); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() { f.Close() })
	return f
}

func BenchmarkFileRandRead4K(b *testing.B) {
	f := benchFile(b)
	bufs := make([][]byte, benchWorkers)
	for i := range bufs {
		bufs[i] = make([]byte, 4096)
	}
	b.SetBytes(4096)
	b.ReportAllocs()
	parallel(b, func(w int, i int64) error {
		_, err := f.ReadAt(bufs[w], int64(rand.Uint64N(benchNSSize/4096))*4096)
		return err
	})
}

func BenchmarkFileSeqRead1M(b *testing.B)  { benchFileSeq(b, false) }
func BenchmarkFileSeqWrite1M(b *testing.B) { benchFileSeq(b, true) }

func benchFileSeq(b *testing.B, write bool) {
	f := benchFile(b)
	const n = 1 << 20
	bufs := make([][]byte, benchWorkers)
	for i := range bufs {
		bufs[i] = make([]byte, n)
	}
	b.SetBytes(n)
	b.ReportAllocs()
	parallel(b, func(w int, i int64) error {
		off := (i % (benchNSSize / n)) * n
		var err error
		if write {
			_, err = f.WriteAt(bufs[w], off)
		} else {
			_, err = f.ReadAt(bufs[w], off)
		}
		return err
	})
}
