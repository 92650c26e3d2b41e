//go:build !unix

package testutil

import "time"

// CPUTime returns 0: the process CPU time is read on unix only.
func CPUTime() time.Duration { return 0 }
