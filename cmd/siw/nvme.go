package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/gosiw/gosiw/cm"
	"github.com/gosiw/gosiw/internal/nvmeof"
	"github.com/gosiw/gosiw/internal/size"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap"
)

type nvmeFlags struct {
	nqn, hostNQN, file, pattern string
	nsid                        uint32
	offset, length              size.Value
	queues, depth, jobs         int
	crc                         bool
	duration, timeout           time.Duration
}

// newNVMeCmd is a small NVMe-oF (RDMA) host: discovery, identify, block
// reads and writes, and a load generator.
func newNVMeCmd() *cobra.Command {
	f := nvmeFlags{length: size.Value{N: 4096, Min: 1}}
	cmd := &cobra.Command{
		Use:   "nvme (discover|identify|read|write|bench) HOST:PORT",
		Short: "NVMe over Fabrics host: discover, identify, read, write, bench",
		Long: `nvme connects to an NVMe-oF target on the RDMA transport (siwd --nvme-listen,
or Linux nvmet-rdma):
  discover   lists the discovery log of the target's discovery subsystem
  identify   prints the controller and namespace Identify data of --nqn
  read       copies --length bytes at byte --offset of namespace --nsid to --file (default stdout)
  write      copies --file (default stdin) to the namespace at --offset (whole blocks)
  bench      runs --pattern (randread4k, seqread1m, seqwrite1m) for --duration with --jobs
             commands in flight over --queues I/O queues and prints IOPS and MB/s`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error { return nvmeRun(cmd, args[0], args[1], &f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.nqn, "nqn", "", "subsystem NQN (default: the first one the discovery log lists)")
	fl.StringVar(&f.hostNQN, "hostnqn", "", "host NQN (default: one made of a random host id)")
	fl.Uint32Var(&f.nsid, "nsid", 1, "namespace id")
	fl.Var(&f.offset, "offset", "byte offset in the namespace, K, M, G suffixes allowed (a multiple of the block size)")
	fl.Var(&f.length, "length", "read: bytes to read, K, M, G suffixes allowed (a multiple of the block size; default 4K)")
	fl.StringVarP(&f.file, "file", "f", "", "file for read's data or write's source (default stdout/stdin)")
	fl.StringVar(&f.pattern, "pattern", "randread4k", "bench: randread4k, seqread1m or seqwrite1m")
	fl.IntVar(&f.queues, "queues", 2, "I/O queues")
	fl.IntVar(&f.depth, "depth", 32, "I/O queue depth")
	fl.IntVar(&f.jobs, "jobs", 16, "bench: commands in flight")
	fl.BoolVar(&f.crc, "crc", false, "ask for MPA CRC32c")
	fl.DurationVar(&f.duration, "duration", 5*time.Second, "bench: how long to run")
	fl.DurationVar(&f.timeout, "timeout", 60*time.Second, "how long connecting and each transfer may take")
	return cmd
}

func nvmeRun(cmd *cobra.Command, op, addr string, f *nvmeFlags) error {
	switch op {
	case "discover", "identify", "read", "write", "bench":
	default:
		return fmt.Errorf("nvme: unknown operation %q", op)
	}
	if _, _, err := splitHostPort(addr); err != nil {
		return fmt.Errorf("nvme: %w", err)
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout+f.duration)
	defer cancel()
	dev, err := rdmap.NewDevice(nil)
	if err != nil {
		return err
	}
	defer dev.Close()
	pol := mpa.Policy{MaxPrivateData: mpa.SiwMaxPrivateData}
	if f.crc {
		pol.CRC = mpa.CRCOn
	}
	base := nvmeof.HostConfig{HostNQN: f.hostNQN, CM: &cm.Config{MPA: pol}}
	out := cmd.OutOrStdout()
	if op == "discover" || f.nqn == "" {
		dc := base
		dc.SubNQN = nvmeof.DiscoveryNQN
		d, err := nvmeof.Dial(ctx, addr, dev, &dc)
		if err != nil {
			return fmt.Errorf("discovery: %w", err)
		}
		es, err := d.DiscoveryLog(ctx)
		d.Close()
		if err != nil {
			return err
		}
		for _, e := range es {
			if op == "discover" {
				fmt.Fprintf(out, "subtype %d portid %d traddr %s trsvcid %d subnqn %s\n", e.SubType, e.PortID, e.Addr.Addr(), e.Addr.Port(), e.SubNQN)
			}
			if f.nqn == "" && e.SubType == nvmeof.SubTypeNVMe {
				f.nqn = e.SubNQN
			}
		}
		if op == "discover" {
			return nil
		}
		if f.nqn == "" {
			return fmt.Errorf("nvme: the discovery log lists no NVMe subsystem")
		}
	}
	hc := base
	hc.SubNQN, hc.IOQueues, hc.QueueDepth = f.nqn, f.queues, f.depth
	if op == "identify" {
		hc.IOQueues = 0
	}
	h, err := nvmeof.Dial(ctx, addr, dev, &hc)
	if err != nil {
		return err
	}
	defer h.Close()
	ni, err := h.IdentifyNamespace(ctx, f.nsid)
	if err != nil {
		return err
	}
	bs := int64(1) << ni.LBAShift
	switch op {
	case "identify":
		c := h.Ctrl
		fmt.Fprintf(out, "controller %d: model %q serial %q firmware %q subnqn %s\n", c.CntlID, c.Model, c.Serial, c.Firmware, c.SubNQN)
		fmt.Fprintf(out, "  version %#x mdts %d maxcmd %d nn %d sgls %#x ioccsz %d iorcsz %d crc %v\n", c.Version, c.MDTS, c.MaxCmd, c.NN, c.SGLS, c.IOCCSZ, c.IORCSZ, h.CRC())
		ids, err := h.ActiveNamespaces(ctx)
		if err != nil {
			return err
		}
		for _, id := range ids {
			n, err := h.IdentifyNamespace(ctx, id)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "namespace %d: %d blocks of %d bytes (%d bytes), write protected %v, nguid %x\n", id, n.Size, 1<<n.LBAShift, n.Size<<n.LBAShift, n.ReadOnly, n.NGUID)
		}
		return nil
	case "read", "write":
		if f.offset.N%bs != 0 {
			return fmt.Errorf("nvme: offset %d is not a multiple of the block size %d", f.offset.N, bs)
		}
		return nvmeCopy(ctx, cmd, h, f, ni, bs, op == "write")
	}
	return nvmeBench(ctx, cmd, h, f, ni)
}

func nvmeCopy(ctx context.Context, cmd *cobra.Command, h *nvmeof.Host, f *nvmeFlags, ni nvmeof.NamespaceInfo, bs int64, write bool) error {
	const chunk = nvmeof.MaxTransfer
	if write {
		data, err := readInput(cmd, f.file)
		if err != nil {
			return err
		}
		if int64(len(data))%bs != 0 {
			data = append(data, make([]byte, bs-int64(len(data))%bs)...)
		}
		for off := 0; off < len(data); off += chunk {
			p := data[off:min(off+chunk, len(data))]
			if err := h.Write(ctx, 0, f.nsid, ni.LBAShift, uint64(f.offset.N+int64(off))/uint64(bs), p); err != nil {
				return err
			}
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "wrote %d bytes at %d\n", len(data), f.offset.N)
		return nil
	}
	if f.length.N%bs != 0 {
		return fmt.Errorf("nvme: length %d is not a multiple of the block size %d", f.length.N, bs)
	}
	w, err := openOutput(cmd, f.file)
	if err != nil {
		return err
	}
	defer w.Close()
	buf := make([]byte, chunk)
	for off := int64(0); off < f.length.N; off += chunk {
		p := buf[:min(chunk, f.length.N-off)]
		if err := h.Read(ctx, 0, f.nsid, ni.LBAShift, uint64(f.offset.N+off)/uint64(bs), p); err != nil {
			return err
		}
		if _, err := w.Write(p); err != nil {
			return err
		}
	}
	return w.Close()
}

func nvmeBench(ctx context.Context, cmd *cobra.Command, h *nvmeof.Host, f *nvmeFlags, ni nvmeof.NamespaceInfo) error {
	var size int64
	switch f.pattern {
	case "randread4k":
		size = 4096
	case "seqread1m", "seqwrite1m":
		size = 1 << 20
	default:
		return fmt.Errorf("nvme bench: unknown pattern %q", f.pattern)
	}
	nsBytes := int64(ni.Size) << ni.LBAShift
	if nsBytes < size || h.IOQueues() == 0 {
		return fmt.Errorf("nvme bench: namespace too small or no I/O queue")
	}
	var ops, next atomic.Int64
	var firstErr error
	var once sync.Once
	end := time.Now().Add(f.duration)
	start := time.Now()
	var wg sync.WaitGroup
	for j := range f.jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, size)
			for time.Now().Before(end) {
				var off int64
				if f.pattern == "randread4k" {
					off = rand.Int64N(nsBytes/size) * size
				} else {
					off = (next.Add(1) - 1) % (nsBytes / size) * size
				}
				lba := uint64(off) >> ni.LBAShift
				var err error
				if f.pattern == "seqwrite1m" {
					err = h.Write(ctx, j%h.IOQueues(), f.nsid, ni.LBAShift, lba, buf)
				} else {
					err = h.Read(ctx, j%h.IOQueues(), f.nsid, ni.LBAShift, lba, buf)
				}
				if err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				ops.Add(1)
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	el := time.Since(start).Seconds()
	n := ops.Load()
	fmt.Fprintf(cmd.OutOrStdout(), "%s: %d ops in %.2f s: %.0f IOPS, %.1f MB/s (%d jobs, %d queues of depth %d)\n",
		f.pattern, n, el, float64(n)/el, float64(n*size)/el/1e6, f.jobs, h.IOQueues(), f.depth)
	return nil
}
