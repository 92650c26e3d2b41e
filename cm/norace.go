//go:build !race

package cm

// raceEnabled makes illegal state transitions panic in race-detector
// builds; production builds log and return an error instead.
const raceEnabled = false
