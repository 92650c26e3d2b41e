//go:build race

package cm

// raceEnabled makes illegal state transitions panic in race-detector
// builds (the tests), so that a transition the state machine forbids is
// caught where it happens; other builds log it and return an error.
const raceEnabled = true
