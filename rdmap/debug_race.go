//go:build race

package rdmap

// debugChecks turns internal invariant violations into panics in
// race-detector builds (the test configuration).
const debugChecks = true
