package daemon

import (
	"context"
	"net"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/gosiw/gosiw/cm"
	"github.com/gosiw/gosiw/internal/nvmeof"
	"github.com/gosiw/gosiw/internal/proto"
	"github.com/gosiw/gosiw/mpa"
)

// nvmeServer is siwd's NVMe-oF target, on a listener of its own.
type nvmeServer struct {
	tgt  *nvmeof.Target
	done chan struct{}
}

// listenNVMe starts the NVMe-oF target when the config has one: each
// subsystem's namespaces are regions (read-only regions are write
// protected; file regions are msync'ed by Flush). It serves until the
// server stops (closeNVMe).
func (s *Server) listenNVMe(ctx context.Context) error {
	nc := s.cfg.NVMe
	if nc == nil {
		return nil
	}
	var subs []*nvmeof.Subsystem
	for _, sc := range nc.Subsystems {
		sub := &nvmeof.Subsystem{NQN: sc.NQN, AllowedHosts: sc.AllowedHosts}
		for i, name := range sc.Namespaces {
			r := s.regions[name]
			ns := &nvmeof.Namespace{NSID: uint32(i + 1), Data: r.mem, ReadOnly: r.Access&proto.AccessWrite == 0}
			if r.File != "" {
				mem := r.mem
				ns.Sync = func() error { return unix.Msync(mem, unix.MS_SYNC) }
			}
			sub.Namespaces = append(sub.Namespaces, ns)
		}
		subs = append(subs, sub)
	}
	tgt, err := nvmeof.NewTarget(s.dev, &nvmeof.Config{Subsystems: subs, InlineDataSize: nc.InlineDataSize,
		Metrics: nvmeof.NewMetrics(s.m.Registry), Logger: s.lg,
		CM: &cm.Config{Logger: s.lg, MPA: mpa.Policy{MaxPrivateData: mpa.SiwMaxPrivateData},
			OnRefused: func(_ net.Addr, reason string) { s.m.Handshakes.WithLabelValues("failed", "nvme_"+reason).Inc() }}})
	if err != nil {
		return err
	}
	if err := tgt.Listen(ctx, nc.Listen); err != nil {
		tgt.Close()
		return err
	}
	for _, sc := range nc.Subsystems {
		s.lg.Info("nvme subsystem", zap.String("nqn", sc.NQN), zap.Strings("namespaces", sc.Namespaces),
			zap.Strings("allowed_hosts", sc.AllowedHosts), zap.Stringer("addr", tgt.Addr()))
	}
	s.nvme = &nvmeServer{tgt: tgt, done: make(chan struct{})}
	go func() {
		defer close(s.nvme.done)
		tgt.Serve(s.stopping)
	}()
	return nil
}

// NVMeAddr returns the NVMe-oF listener's address (nil when off).
func (s *Server) NVMeAddr() net.Addr {
	if s.nvme == nil {
		return nil
	}
	return s.nvme.tgt.Addr()
}

// closeNVMe stops the target (its queues are reset) and waits for it.
func (s *Server) closeNVMe() {
	if s.nvme == nil {
		return
	}
	s.nvme.tgt.Close()
	<-s.nvme.done
}
