package rdmap

import "golang.org/x/sys/unix"

// RxInQueue returns the bytes waiting in qp's socket receive queue
// (SIOCINQ): 0 once the engine has read everything the peer sent.
func RxInQueue(qp *QP) int {
	n := -1
	_ = qp.rx.rawConn.Control(func(fd uintptr) {
		if v, err := unix.IoctlGetInt(int(fd), unix.SIOCINQ); err == nil {
			n = v
		}
	})
	return n
}
