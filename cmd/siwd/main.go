// Command siwd is the gosiw daemon: a software iWARP RNIC service that
// answers Linux rping clients, gosiw perf clients and clients of exported
// memory regions, behind access rules, with Prometheus metrics.
//
//	siwd [--config FILE] [--listen ADDR] [--allow CIDR]... [--max-conns N]
//	     [--max-conns-per-client N] [--metrics ADDR]
//	     [--region name=NAME,size=SIZE[,file=PATH],access=r|w|rw]...
//	     [--log-format console|json] [--log-level LEVEL]
//	     [--memory-budget SIZE] [--memory-per-conn SIZE] [--idle-timeout DURATION]
//
// SIGTERM and SIGINT stop it gracefully; SIGHUP reloads the access rules
// from the config file and the --allow flags.
//
// gosiw is licensed under the Apache License, Version 2.0: see the LICENSE
// file at the root of the module.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/gosiw/gosiw/internal/daemon"
	"github.com/gosiw/gosiw/internal/perf"
	"github.com/gosiw/gosiw/internal/version"
	"github.com/gosiw/gosiw/rdmap"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "siwd:", err)
		os.Exit(1)
	}
}

type flags struct {
	config, listen, metrics, logFormat, logLevel, shutdown string
	allow, regions                                         []string
	nvmeListen                                             string
	nvmeNamespaces                                         []string
	maxConns, maxPerClient                                 int
	memBudget, memPerConn, idle                            string
	lockMemory                                             bool
}

func newRootCmd() *cobra.Command {
	var f flags
	cmd := &cobra.Command{
		Use:           "siwd",
		Short:         "gosiw daemon: a software iWARP RNIC service",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version.Get().String(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return run(cmd, &f)
		},
	}
	cmd.SetVersionTemplate("siwd {{.Version}}\n")
	fl := cmd.Flags()
	fl.StringVar(&f.config, "config", "", "TOML config file (flags given override it)")
	fl.StringVar(&f.listen, "listen", daemon.DefaultListen, "address to listen on")
	fl.StringArrayVar(&f.allow, "allow", nil, "allowed client network (CIDR or address; repeatable; default: allow all)")
	fl.IntVar(&f.maxConns, "max-conns", 0, "connection limit in total (0: none)")
	fl.IntVar(&f.maxPerClient, "max-conns-per-client", 0, "connection limit per client address (0: none)")
	fl.StringVar(&f.metrics, "metrics", daemon.DefaultMetrics, "metrics and /healthz HTTP address (empty: off)")
	fl.StringArrayVar(&f.regions, "region", nil, "exported region name=NAME,size=SIZE[,file=PATH],access=r|w|rw (repeatable)")
	fl.StringVar(&f.nvmeListen, "nvme-listen", "", "NVMe-oF (RDMA transport) listen address, e.g. 127.0.0.1:4420 (empty: off)")
	fl.StringArrayVar(&f.nvmeNamespaces, "nvme-namespace", nil, "region served as the next namespace of the default NVMe subsystem (repeatable)")
	fl.StringVar(&f.logFormat, "log-format", "console", "log format: console or json")
	fl.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fl.BoolVar(&f.lockMemory, "lock-memory", false, "mlock every exported region (needs RLIMIT_MEMLOCK or CAP_IPC_LOCK)")
	fl.StringVar(&f.shutdown, "shutdown-timeout", "", "how long a graceful stop may take (default 10s)")
	fl.StringVar(&f.memBudget, "memory-budget", "", "memory all connections may map for their buffers (default 256MiB)")
	fl.StringVar(&f.memPerConn, "memory-per-conn", "", "memory one connection may map for its buffers (default 128MiB)")
	fl.StringVar(&f.idle, "idle-timeout", "", "disconnect a connection idle this long (default: never)")
	return cmd
}

// spec merges the config file and the flags the user set.
func spec(cmd *cobra.Command, f *flags) (*daemon.ConfigSpec, error) {
	s := &daemon.ConfigSpec{}
	if f.config != "" {
		var err error
		if s, err = daemon.LoadSpec(f.config); err != nil {
			return nil, err
		}
	}
	fl := cmd.Flags()
	set := func(name string) bool {
		return fl.Changed(name) || (f.config == "" && name != "allow" && name != "region")
	}
	if set("listen") {
		s.Listen = f.listen
	}
	if fl.Changed("allow") {
		s.Allow = f.allow
	}
	if set("max-conns") {
		s.MaxConns = f.maxConns
	}
	if set("max-conns-per-client") {
		s.MaxConnsPerClient = f.maxPerClient
	}
	if set("metrics") {
		s.Metrics = &f.metrics
	}
	if set("log-format") {
		s.LogFormat = f.logFormat
	}
	if set("log-level") {
		s.LogLevel = f.logLevel
	}
	if fl.Changed("lock-memory") {
		s.LockMemory = f.lockMemory
	}
	if fl.Changed("shutdown-timeout") {
		s.ShutdownTimeout = f.shutdown
	}
	if fl.Changed("memory-budget") {
		s.MemoryBudget = f.memBudget
	}
	if fl.Changed("memory-per-conn") {
		s.MemoryPerConn = f.memPerConn
	}
	if fl.Changed("idle-timeout") {
		s.IdleTimeout = f.idle
	}
	if fl.Changed("nvme-listen") {
		s.NVMe.Listen = f.nvmeListen
	}
	if fl.Changed("nvme-namespace") {
		s.NVMe.Namespaces = f.nvmeNamespaces
	}
	for _, r := range f.regions {
		rs, err := daemon.ParseRegionFlag(r)
		if err != nil {
			return nil, err
		}
		s.Regions = append(s.Regions, rs)
	}
	return s, nil
}

func newLogger(format, level string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, err
	}
	var zc zap.Config
	if format == "json" {
		zc = zap.NewProductionConfig()
	} else {
		zc = zap.NewDevelopmentConfig()
		zc.Development = false
		zc.DisableStacktrace = true
	}
	zc.Level = zap.NewAtomicLevelAt(lvl)
	zc.OutputPaths = []string{"stderr"}
	return zc.Build()
}

// warnRestart logs each setting a reload changed that only a restart
// applies (SIGHUP reloads the access rules alone).
// listening is the address siwd listens on (old.Listen with its port
// chosen, for a port 0).
func warnRestart(lg *zap.Logger, listening string, old, cur *daemon.Config) {
	for _, c := range []struct{ key, was, now, running string }{
		{"listen", old.Listen, cur.Listen, listening},
		{"metrics", old.Metrics, cur.Metrics, old.Metrics},
	} {
		if c.was != c.now {
			lg.Warn(c.key+" changed: it needs a restart of siwd; keeping the old one",
				zap.String("running", c.running), zap.String("configured", c.now))
		}
	}
}

func run(cmd *cobra.Command, f *flags) error {
	s, err := spec(cmd, f)
	if err != nil {
		return err
	}
	cfg, err := s.Build()
	if err != nil {
		return err
	}
	lg, err := newLogger(cfg.LogFormat, cfg.LogLevel)
	if err != nil {
		return err
	}
	defer lg.Sync()

	m := daemon.NewMetrics()
	srv, err := daemon.New(cfg, lg, m)
	if err != nil {
		return err
	}
	// daemon hands its own types; perf takes them as its interfaces, so
	// that perf does not import daemon. m is never nil (daemon.New).
	srv.Perf = func(ctx context.Context, ss *daemon.Session, pd *rdmap.PD, m *daemon.Metrics) error {
		return perf.Service(ctx, ss, pd, m)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := srv.Listen(ctx); err != nil {
		return err
	}
	if cfg.Metrics != "" {
		mln, err := net.Listen("tcp", cfg.Metrics)
		if err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
		hs := &http.Server{Handler: m.Handler(srv.Healthy)}
		go hs.Serve(mln)
		defer hs.Close()
		lg.Info("metrics listening", zap.Stringer("addr", mln.Addr()))
		fmt.Fprintf(os.Stdout, "siwd metrics on http://%s/metrics\n", mln.Addr())
	}
	// SIGHUP: reload the access rules.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for range hup {
			s2, err := spec(cmd, f)
			if err == nil {
				var c2 *daemon.Config
				if c2, err = s2.Build(); err == nil {
					srv.SetAllow(c2.Allow)
					lg.Info("access rules reloaded", zap.Int("networks", len(c2.Allow)))
					warnRestart(lg, srv.Addr().String(), cfg, c2)
					continue
				}
			}
			lg.Error("reload failed; keeping the old rules", zap.Error(err))
		}
	}()
	fmt.Fprintf(os.Stdout, "siwd listening on %s\n", srv.Addr())
	err = srv.Serve(ctx)
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}
