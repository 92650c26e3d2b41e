//go:build unix

package testutil

import (
	"syscall"
	"time"
)

// CPUTime returns the CPU time (user and system) the process has used so
// far, for benchmarks that report CPU per operation beside wall time (on
// a busy machine the figure that counts); 0 if it cannot be read.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
