package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/gosiw/gosiw/cm"
	"github.com/gosiw/gosiw/internal/rping"
	"github.com/gosiw/gosiw/internal/size"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap"
)

type pingFlags struct {
	client, server, verbose, validate, persistent, crc bool
	addr                                               string
	port, count                                        int
	size                                               size.Value
	timeout                                            time.Duration
}

// newPingCmd is an rping-compatible client and server.
func newPingCmd() *cobra.Command {
	f := pingFlags{size: size.Value{N: rping.DefaultSize, Min: rping.MinSize, Max: rping.MaxSize}}
	cmd := &cobra.Command{
		Use:   "ping (-c|-s) -a ADDR [-p PORT] [-S SIZE] [-C COUNT] [-v] [-V]",
		Short: "rping-compatible client and server (interoperates with Linux rping)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.client == f.server {
				return errors.New("ping: give exactly one of -c (client) or -s (server)")
			}
			if f.port < 1 || f.port > 65535 {
				return fmt.Errorf("ping: -p/--port %d: want a number from 1 to 65535", f.port)
			}
			if f.count < 0 {
				return fmt.Errorf("ping: -C/--count %d: want 0 (until interrupted) or more", f.count)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			if f.client {
				return pingClient(ctx, cmd, &f)
			}
			return pingServer(ctx, cmd, &f)
		},
	}
	fl := cmd.Flags()
	fl.BoolVarP(&f.client, "client", "c", false, "client mode")
	fl.BoolVarP(&f.server, "server", "s", false, "server mode")
	fl.StringVarP(&f.addr, "addr", "a", "", "address to connect to (client) or bind (server)")
	fl.IntVarP(&f.port, "port", "p", 7174, "port")
	fl.VarP(&f.size, "size", "S", fmt.Sprintf("ping buffer size, %d to %d bytes", rping.MinSize, rping.MaxSize))
	fl.IntVarP(&f.count, "count", "C", 0, "number of pings (0: until interrupted)")
	fl.BoolVarP(&f.verbose, "verbose", "v", false, "print the ping data")
	fl.BoolVarP(&f.validate, "validate", "V", false, "validate the ping data")
	fl.BoolVarP(&f.persistent, "persistent", "P", false, "server: serve clients one after another until interrupted")
	fl.BoolVar(&f.crc, "crc", false, "ask for MPA CRC32c")
	fl.DurationVar(&f.timeout, "connect-timeout", 10*time.Second, "client: how long the connection setup may take")
	return cmd
}

func pingConfig(f *pingFlags) *cm.Config {
	c := &cm.Config{MPA: mpa.Policy{MaxPrivateData: mpa.SiwMaxPrivateData}}
	if f.crc {
		c.MPA.CRC = mpa.CRCOn
	}
	return c
}

func pingClient(ctx context.Context, cmd *cobra.Command, f *pingFlags) error {
	if f.addr == "" {
		return errors.New("ping: -a ADDR is required")
	}
	addr := net.JoinHostPort(f.addr, strconv.Itoa(f.port))
	dev, err := rdmap.NewDevice(nil)
	if err != nil {
		return err
	}
	defer dev.Close()
	e, err := rping.NewEndpoint(dev.AllocPD(), int(f.size.N), true)
	if err != nil {
		return err
	}
	defer e.Close()
	if err := e.Arm(); err != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, f.timeout)
	conn, err := (&cm.Dialer{Config: pingConfig(f)}).Dial(dctx, addr, dev, cm.ConnParam{QP: e.QP, IRD: 1, ORD: 1})
	cancel()
	if err != nil {
		return explain(addr, "siwd or rping -s", err)
	}
	out := cmd.OutOrStdout()
	res, err := e.Client(ctx, f.count, f.validate, func(_ int, data []byte) {
		if f.verbose {
			fmt.Fprintf(out, "ping data: %s\n", data)
		}
	})
	cerr := conn.Close()
	if err != nil {
		if errors.Is(err, context.Canceled) {
			fmt.Fprintf(out, "client: %d pings, interrupted\n", res.Pings)
			return nil
		}
		if qerr := e.QP.Err(); qerr != nil {
			return explain(addr, "siwd or rping -s", qerr)
		}
		return fmt.Errorf("ping: after %d pings: %w", res.Pings, err)
	}
	if cerr != nil {
		return explain(addr, "siwd or rping -s", cerr)
	}
	fmt.Fprintf(out, "client DISCONNECT EVENT...\nclient: %d pings of %d bytes to %s, validation %s\n", res.Pings, int(f.size.N), addr,
		map[bool]string{true: "ok", false: "off"}[f.validate])
	return nil
}

func pingServer(ctx context.Context, cmd *cobra.Command, f *pingFlags) error {
	host := f.addr
	if host == "" {
		host = "127.0.0.1"
	}
	addr := net.JoinHostPort(host, strconv.Itoa(f.port))
	dev, err := rdmap.NewDevice(nil)
	if err != nil {
		return err
	}
	defer dev.Close()
	ln, err := cm.Listen(ctx, addr, dev, pingConfig(f))
	if err != nil {
		return err
	}
	defer ln.Close()
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "server listening on %s\n", ln.Addr())
	for {
		req, err := ln.Accept(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		n, err := serveOne(ctx, dev, req, f, out)
		if err != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "server: client %s: %v\n", req.RemoteAddr, err)
		} else {
			fmt.Fprintf(out, "server DISCONNECT EVENT...\nserver: %d pings from %s\n", n, req.RemoteAddr)
		}
		if !f.persistent {
			return err
		}
	}
}

func serveOne(ctx context.Context, dev *rdmap.Device, req *cm.Request, f *pingFlags, out interface{ Write([]byte) (int, error) }) (int, error) {
	e, err := rping.NewEndpoint(dev.AllocPD(), rping.MaxSize, false)
	if err != nil {
		req.Reject([]byte("siw ping: out of resources"))
		return 0, err
	}
	defer e.Close()
	if err := e.Arm(); err != nil {
		req.Reject(nil)
		return 0, err
	}
	conn, err := req.Accept(cm.ConnParam{QP: e.QP, IRD: max(req.ORD, 1), ORD: max(req.IRD, 1)})
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	n, err := e.Server(ctx, func(_ int, data []byte) {
		if f.verbose {
			fmt.Fprintf(out, "server ping data: %s\n", data)
		}
	})
	if err != nil && errors.Is(err, context.Canceled) {
		return n, nil
	}
	if err != nil {
		if qerr := e.QP.Err(); qerr != nil {
			return n, explain(req.RemoteAddr.String(), "the client", qerr)
		}
	}
	return n, err
}
