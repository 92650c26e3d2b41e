package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"time"
)

// ceiling is iperf3's figure on a link: one TCP stream of 1 MiB writes,
// written and read by C, the most one stream carries there.
type ceiling struct {
	Link string
	best float64 // bits per second, the best run
	err  error
}

// iperfTries bounds how often the client tries to reach the server it
// has just started (it refuses connections until it listens).
const iperfTries = 100

func (r *runner) iperfUnit(cl *ceiling) unit {
	name := "iperf3/" + cl.Link
	return unit{name: name, run: func(round int) {
		if cl.err != nil {
			return
		}
		bps, err := r.iperf3(cl.Link)
		if err != nil {
			cl.err = err
			if !r.o.quiet {
				fmt.Fprintf(os.Stderr, "[%d/%d] %-32s %v\n", round, r.o.count, name, err)
			}
			return
		}
		if !r.o.quiet {
			fmt.Fprintf(os.Stderr, "[%d/%d] %-32s %.1f MB/s\n", round, r.o.count, name, bps/8/1e6)
		}
		cl.best = max(cl.best, bps)
	}}
}

// iperf3 runs "iperf3 -s -1" and "iperf3 -c -J" over link (on veth, the
// server in namespace a, the client in b) and returns the bits per
// second the server received.
func (r *runner) iperf3(link string) (float64, error) {
	bin, err := exec.LookPath("iperf3")
	if err != nil {
		return 0, errors.New("iperf3 is not installed")
	}
	var srvPre, cliPre []string
	host, port := "127.0.0.1", ""
	if link == "veth" {
		srvPre, cliPre, host = r.veth.iperfPrefixes()
		port = "5201" // the namespaces are this program's own
	} else {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port = strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
		ln.Close()
	}
	secs := strconv.Itoa(max(1, int(r.o.time.Seconds()+0.5)))
	ctx, cancel := context.WithTimeout(context.Background(), runLimit)
	defer cancel()
	command := func(pre []string, args ...string) *exec.Cmd {
		all := append(append(pre[:len(pre):len(pre)], bin), args...)
		return exec.CommandContext(ctx, all[0], all[1:]...)
	}
	srv := command(srvPre, "-s", "-1", "-B", host, "-p", port)
	if err := srv.Start(); err != nil {
		return 0, fmt.Errorf("iperf3 -s: %w", err)
	}
	defer func() {
		_ = srv.Process.Kill() // gone already after its one test
		_ = srv.Wait()
	}()
	var res struct {
		Error string `json:"error"`
		End   struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	for try := 1; ; try++ {
		out, _ := command(cliPre, "-c", host, "-p", port, "-J", "-t", secs, "-l", "1M").Output()
		res.Error = ""
		if err := json.Unmarshal(out, &res); err != nil {
			return 0, fmt.Errorf("iperf3 -c -J: %w: %.200q", err, out)
		}
		if res.Error == "" {
			break
		}
		if try == iperfTries || ctx.Err() != nil {
			return 0, fmt.Errorf("iperf3 -c: %s", res.Error)
		}
		time.Sleep(20 * time.Millisecond) // the server is not listening yet
	}
	if res.End.SumReceived.BitsPerSecond <= 0 {
		return 0, errors.New("iperf3 -c -J: no bits_per_second in end.sum_received")
	}
	return res.End.SumReceived.BitsPerSecond, nil
}
