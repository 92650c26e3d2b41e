//go:build race

package rdmap_test

const raceEnabled = true
