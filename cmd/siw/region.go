package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/gosiw/gosiw/cm"
	"github.com/gosiw/gosiw/internal/proto"
	"github.com/gosiw/gosiw/internal/size"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap"
)

type regionFlags struct {
	offset, length size.Value
	file           string
	crc            bool
	timeout        time.Duration
}

// newRegionCmd reads and writes siwd's exported memory regions with RDMA
// Read and Write.
func newRegionCmd() *cobra.Command {
	f := regionFlags{length: size.Value{Min: 1}}
	cmd := &cobra.Command{
		Use:   "region (read|write) HOST:PORT NAME",
		Short: "RDMA-Read or RDMA-Write a memory region that siwd exports by name",
		Long: `region read copies --length bytes at --offset of siwd's region NAME to --file
(default standard output); region write copies --file (default standard input)
into the region at --offset. The region is found by name in the MPA private
data ("gosiw-region/1 NAME"); siwd answers with its STag, size and rights.`,
		Args: cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch args[0] {
			case "read", "write":
			default:
				return fmt.Errorf("region: %q is neither read nor write", args[0])
			}
			return regionRun(cmd, args[0] == "write", args[1], args[2], &f)
		},
	}
	fl := cmd.Flags()
	fl.Var(&f.offset, "offset", "offset in the region, in bytes (K, M, G suffixes allowed)")
	fl.Var(&f.length, "length", "read: bytes to read, K, M, G suffixes allowed (default: to the end of the region)")
	fl.StringVarP(&f.file, "file", "f", "", "file to write the data to (read) or take it from (write); default standard output/input")
	fl.BoolVar(&f.crc, "crc", false, "ask for MPA CRC32c")
	fl.DurationVar(&f.timeout, "timeout", 60*time.Second, "how long the whole transfer may take")
	return cmd
}

const regionChunk = 1 << 20

func regionRun(cmd *cobra.Command, write bool, addr, name string, f *regionFlags) error {
	ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
	defer cancel()
	if _, _, err := splitHostPort(addr); err != nil {
		return fmt.Errorf("region: %w", err)
	}
	if write && cmd.Flags().Changed("length") {
		return errors.New("region: --length is for read; write copies the whole --file")
	}
	var data []byte
	if write {
		var err error
		if data, err = readInput(cmd, f.file); err != nil {
			return err
		}
	}
	dev, err := rdmap.NewDevice(nil)
	if err != nil {
		return err
	}
	defer dev.Close()
	pd := dev.AllocPD()
	cq, err := dev.CreateCQ(16)
	if err != nil {
		return err
	}
	defer cq.Close()
	qp, err := pd.CreateQP(&rdmap.QPConfig{SendCQ: cq, RecvCQ: cq, MaxSendWR: 4, MaxRecvWR: 1})
	if err != nil {
		return err
	}
	defer qp.Close()
	cfg := &cm.Config{MPA: mpa.Policy{MaxPrivateData: mpa.SiwMaxPrivateData}}
	if f.crc {
		cfg.MPA.CRC = mpa.CRCOn
	}
	conn, err := (&cm.Dialer{Config: cfg}).Dial(ctx, addr, dev, cm.ConnParam{QP: qp, IRD: 1, ORD: 1,
		PrivateData: []byte(proto.RegionPrefix + name)})
	if err != nil {
		return fmt.Errorf("region: %w", explain(addr, "siwd", err))
	}
	defer conn.Close()
	stag, size, acc, err := proto.ParseRegionReply(conn.PrivateData)
	if err != nil {
		return err
	}
	if write && acc&proto.AccessWrite == 0 || !write && acc&proto.AccessRead == 0 {
		return fmt.Errorf("region: %s grants %s access only", name, acc)
	}
	if f.offset.N < 0 || f.offset.N > size {
		return fmt.Errorf("region: offset %d outside region %s of %d bytes", f.offset.N, name, size)
	}
	n := int64(len(data))
	if !write {
		n = f.length.N
		if n == 0 {
			n = size - f.offset.N
		}
	}
	if f.offset.N+n > size {
		return fmt.Errorf("region: %d bytes at offset %d run past the end of region %s (%d bytes)", n, f.offset.N, name, size)
	}
	buf := make([]byte, regionChunk)
	mr, err := pd.RegisterMemory(buf, rdmap.AccessLocalWrite)
	if err != nil {
		return err
	}
	defer mr.Deregister()
	out := &output{Writer: io.Discard}
	if !write {
		if out, err = openOutput(cmd, f.file); err != nil {
			return err
		}
	}
	defer out.Close()
	start := time.Now()
	for done := int64(0); done < n; {
		k := min(int64(regionChunk), n-done)
		op := rdmap.WRRead
		if write {
			op = rdmap.WRWrite
			copy(buf, data[done:done+k])
		}
		if err := qp.PostSend(rdmap.SendWR{ID: uint64(done), Op: op, SGL: []rdmap.SGE{mr.SGE(0, int(k))},
			Remote: rdmap.Remote{STag: stag, Offset: uint64(f.offset.N + done)}, Signaled: true}); err != nil {
			return regionErr(addr, qp, err)
		}
		if err := waitWC(ctx, cq); err != nil {
			return regionErr(addr, qp, err)
		}
		if !write {
			if _, err := out.Write(buf[:k]); err != nil {
				return err
			}
		}
		done += k
	}
	verb := "read"
	if write {
		verb = "wrote"
	}
	if err := out.Close(); err != nil {
		return err
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "region %s: %s %d bytes at offset %d in %v\n", name, verb, n, f.offset.N, time.Since(start).Round(time.Microsecond))
	return nil
}

func waitWC(ctx context.Context, cq *rdmap.CQ) error {
	var wc [1]rdmap.WC
	for cq.Poll(wc[:]) == 0 {
		if err := cq.Wait(ctx); err != nil {
			return err
		}
	}
	if wc[0].Status != rdmap.WCSuccess {
		return fmt.Errorf("%v completed with status %v", wc[0].Op, wc[0].Status)
	}
	return nil
}

// regionErr prefers the QP's reason (a Terminate from siwd) to the
// completion status it caused.
func regionErr(addr string, qp *rdmap.QP, err error) error {
	select {
	case <-qp.Done():
	case <-time.After(2 * time.Second):
	}
	if qerr := qp.Err(); qerr != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("region: %w", explain(addr, "siwd", qerr))
	}
	return fmt.Errorf("region: %w", err)
}
