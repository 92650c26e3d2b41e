package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// RunWithCommands builds the module's commands (e.g. "siw", "siwd") into a
// temporary directory, runs the tests of m with that directory, and exits
// with their status. Use it from TestMain of packages that drive the real
// binaries (m is a *testing.M, or one that wraps its Run).
func RunWithCommands(m interface{ Run() int }, binDir *string, cmds ...string) {
	dir, err := os.MkdirTemp("", "gosiw-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, c := range cmds {
		out, err := exec.Command("go", "build", "-o", filepath.Join(dir, c), "github.com/gosiw/gosiw/cmd/"+c).CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n%s", c, err, out)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	*binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// SyncBuffer is a strings.Builder safe for one writer (a command's output)
// and concurrent readers.
type SyncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
