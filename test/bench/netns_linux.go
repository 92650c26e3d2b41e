//go:build linux

package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/gosiw/gosiw/rdmap/rdmaptest"
)

// vethLink is two network namespaces joined by a veth pair with a
// 1500-byte MTU (MSS 1448), as rdmap's TestNetns builds them. TCP
// connections between them are made by creating the listening socket on
// a thread inside namespace a and the dialing socket on a thread inside
// namespace b: a socket keeps its namespace, so the rest of the program
// (both QPs, the raw baseline) runs on ordinary threads.
type vethLink struct {
	ip     string
	nsA    string
	nsB    string
	addrA  string
	closed bool
}

const (
	nsPrefix = "gosiw-bench-"
	vethMTU  = 1500
)

var nsName = regexp.MustCompile(`^` + nsPrefix + `(\d+)-[ab]$`)

// removeStaleNetns deletes namespaces an earlier bench process (since
// gone, e.g. killed) left behind. Only names of the form this program
// creates, with the pid of a process that no longer exists, are touched.
func removeStaleNetns(ip string) {
	ents, _ := os.ReadDir("/var/run/netns")
	for _, e := range ents {
		m := nsName.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		pid, err := strconv.Atoi(m[1])
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = exec.Command(ip, "netns", "del", e.Name()).Run()
		}
	}
}

// setupVeth creates the namespaces and the veth. On failure it removes
// what it created and says why.
func setupVeth() (_ *vethLink, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("needs root to create network namespaces")
	}
	ip, err := exec.LookPath("ip")
	if err != nil {
		return nil, errors.New("needs the ip command (iproute2)")
	}
	removeStaleNetns(ip)
	v := &vethLink{
		ip:    ip,
		nsA:   fmt.Sprintf("%s%d-a", nsPrefix, os.Getpid()),
		nsB:   fmt.Sprintf("%s%d-b", nsPrefix, os.Getpid()),
		addrA: "10.199.7.1",
	}
	if err := v.run("netns", "add", v.nsA); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			v.close()
		}
	}()
	if err := v.run("netns", "add", v.nsB); err != nil {
		return nil, err
	}
	mtu := strconv.Itoa(vethMTU)
	for _, args := range [][]string{
		{"-n", v.nsA, "link", "add", "va", "mtu", mtu, "type", "veth", "peer", "name", "vb", "mtu", mtu, "netns", v.nsB},
		{"-n", v.nsA, "addr", "add", v.addrA + "/24", "dev", "va"},
		{"-n", v.nsB, "addr", "add", "10.199.7.2/24", "dev", "vb"},
		{"-n", v.nsA, "link", "set", "va", "up"},
		{"-n", v.nsB, "link", "set", "vb", "up"},
	} {
		if err := v.run(args...); err != nil {
			return nil, err
		}
	}
	return v, nil
}

func (v *vethLink) String() string {
	return fmt.Sprintf("namespaces %s and %s, MTU %d", v.nsA, v.nsB, vethMTU)
}

func (v *vethLink) run(args ...string) error {
	out, err := exec.Command(v.ip, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %v: %v: %s", args, err, out)
	}
	return nil
}

// close deletes both namespaces (the veth goes with them).
func (v *vethLink) close() {
	if v == nil || v.closed {
		return
	}
	v.closed = true
	for _, ns := range []string{v.nsA, v.nsB} {
		if _, err := os.Stat(filepath.Join("/var/run/netns", ns)); err == nil {
			if err := v.run("netns", "del", ns); err != nil {
				fmt.Fprintf(os.Stderr, "bench: %v\n", err)
			}
		}
	}
}

// pair returns a TCP connection across the veth: the dialing end (in
// namespace b) and the accepted end (in namespace a).
func (v *vethLink) pair() (net.Conn, net.Conn, error) {
	var ln net.Listener
	if err := rdmaptest.InNetns(v.nsA, func() (err error) {
		ln, err = net.Listen("tcp", net.JoinHostPort(v.addrA, "0"))
		return err
	}); err != nil {
		return nil, nil, err
	}
	defer ln.Close()
	var c net.Conn
	if err := rdmaptest.InNetns(v.nsB, func() (err error) {
		c, err = net.Dial("tcp", ln.Addr().String())
		return err
	}); err != nil {
		return nil, nil, err
	}
	s, err := ln.Accept()
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return c, s, nil
}

// mss reports the connection's TCP_MAXSEG.
func mss(c net.Conn) int {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return 0
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return 0
	}
	var v int
	_ = rc.Control(func(fd uintptr) {
		v, _ = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_MAXSEG)
	})
	return v
}

// iperfPrefixes returns the command prefixes that run iperf3's server in
// namespace a and its client in b, and the server's address.
func (v *vethLink) iperfPrefixes() (server, client []string, host string) {
	return []string{v.ip, "netns", "exec", v.nsA}, []string{v.ip, "netns", "exec", v.nsB}, v.addrA
}
