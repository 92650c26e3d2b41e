//go:build !linux

package perf

import (
	"net"
	"testing"
)

func noDelay(*testing.T, *net.TCPConn) (on, ok bool) { return false, false }
