package cm

import (
	"bytes"
	"runtime"
	"strconv"
)

// goid returns the current goroutine's id, read from runtime.Stack's
// header ("goroutine 123 [running]:") as golang.org/x/net/http2's
// gotrack.go does. The package uses it only to tell whether Destroy runs
// inside the handler it would otherwise wait for.
func goid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); i >= 0 {
		b = b[:i]
	}
	n, err := strconv.ParseUint(string(b), 10, 64)
	if err != nil {
		panic("cm: cannot parse goroutine id from " + strconv.Quote(string(buf[:])))
	}
	return n
}
