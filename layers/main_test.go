package layers

import (
	"testing"

	"go.uber.org/goleak"
)

// The package starts no goroutines; the tests run tshark as a child
// process. goleak checks that nothing is left behind either way.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
