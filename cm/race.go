//go:build race

package cm

// raceEnabled makes illegal state transitions panic in race-detector
// builds (tests), as STYLE section 4 asks.
const raceEnabled = true
