package e2e

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// run runs one of the binaries and returns stdout, stderr and the exit code.
func run(t *testing.T, bin string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, bin), args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s %v: %v", bin, args, err)
	}
	return stdout.String(), stderr.String(), code
}

// --version prints the build: module version, VCS revision, toolchain.
func TestVersion(t *testing.T) {
	re := regexp.MustCompile(`^(siw|siwd) \S+ \(revision ([0-9a-f]+(, modified)?|unknown)\) go1\.\d+`)
	for _, bin := range []string{"siw", "siwd"} {
		out, errOut, code := run(t, bin, "--version")
		if code != 0 || !strings.HasPrefix(out, bin+" ") || !re.MatchString(out) || errOut != "" {
			t.Errorf("%s --version: exit %d, %q, stderr %q", bin, code, out, errOut)
		}
	}
}

// Bad flags and arguments are usage errors, refused before anything is
// printed on stdout or anything connects.
func TestUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"perf", "-s", "write", "127.0.0.1:7174"}, "-s runs the responder"},
		{[]string{"perf", "write", "-l", "2G", "127.0.0.1:7174"}, `size "2G": want at most 64M`},
		{[]string{"perf", "write", "-d", "0", "127.0.0.1:7174"}, "-d/--depth 0"},
		{[]string{"perf", "write", "-P", "0", "127.0.0.1:7174"}, "-P/--parallel 0"},
		{[]string{"perf", "write", "127.0.0.1:99999"}, `port "99999": want a number from 1 to 65535`},
		{[]string{"region", "read", "127.0.0.1:7174", "scratch", "--length", "-5"}, "must not be negative"},
		{[]string{"region", "read", "127.0.0.1:0", "scratch"}, `port "0": want a number from 1 to 65535`},
		{[]string{"ping", "-c", "-a", "127.0.0.1", "-p", "70000"}, "-p/--port 70000"},
		{[]string{"ping", "-c", "-a", "127.0.0.1", "-S", "1T"}, `size "1T": want at most`},
	} {
		out, errOut, code := run(t, "siw", c.args...)
		if code == 0 || !strings.Contains(errOut, c.want) || out != "" {
			t.Errorf("siw %q: exit %d, stdout %q, stderr %q; want a failure saying %q", c.args, code, out, errOut, c.want)
		}
	}
}
