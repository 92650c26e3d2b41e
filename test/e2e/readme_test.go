package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The README holds no Go code of its own: it points at runnable examples,
// which go test compiles and checks. Every example it names exists.
func TestReadmeExamples(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	if strings.Contains(readme, "```go") {
		t.Error("README.md has a Go snippet: make it a runnable Example and point at it")
	}
	names := regexp.MustCompile("`(rdmap|cm|mpa|layers)\\.(Example\\w*)`").FindAllStringSubmatch(readme, -1)
	if len(names) < 6 {
		t.Fatalf("README names %d examples", len(names))
	}
	for _, m := range names {
		src, err := os.ReadFile(filepath.Join("../..", m[1], "example_test.go"))
		if err != nil {
			t.Errorf("%s.%s: %v", m[1], m[2], err)
			continue
		}
		if !strings.Contains(string(src), "\nfunc "+m[2]+"() {") {
			t.Errorf("README names %s.%s, which %s/example_test.go does not define", m[1], m[2], m[1])
		}
	}
}
