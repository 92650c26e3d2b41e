//go:build !linux

package main

import (
	"errors"
	"net"
)

type vethLink struct{}

func setupVeth() (*vethLink, error) {
	return nil, errors.New("network namespaces need Linux")
}

func (v *vethLink) close() {}

func (v *vethLink) String() string { return "none" }

func (v *vethLink) pair() (net.Conn, net.Conn, error) {
	return nil, nil, errors.New("network namespaces need Linux")
}

func mss(net.Conn) int { return 0 }

func (v *vethLink) iperfPrefixes() (server, client []string, host string) {
	return nil, nil, "127.0.0.1"
}
