package testutil

import (
	"math/rand/v2"
	"net"
	"runtime"
)

// ListenIP returns the loopback address a test that connects over and
// over listens on: on Linux a random one of 127.0.0.0/8 outside
// 127.0.0.0/16, elsewhere 127.0.0.1 (the only one that may answer).
//
// Every connection a test closes leaves a socket in TIME_WAIT for a
// minute, and on one address they soon hold every ephemeral port: after
// two minutes of cm's FuzzListener (about 130 000 such sockets),
// listening on 127.0.0.1:0 failed with "bind: address already in use",
// and FuzzConnectReply, FuzzListenerSMBD and rdmap's FuzzEngine then
// failed with it. A port is taken per address, and on Linux all of
// 127.0.0.0/8 is loopback.
func ListenIP() net.IP {
	if runtime.GOOS != "linux" {
		return net.IPv4(127, 0, 0, 1)
	}
	return net.IPv4(127, byte(1+rand.IntN(254)), byte(rand.IntN(256)), byte(1+rand.IntN(254)))
}

// ListenAddr returns ListenIP with port 0, for net.Listen.
func ListenAddr() string {
	return net.JoinHostPort(ListenIP().String(), "0")
}
