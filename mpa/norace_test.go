//go:build !race

package mpa_test

const raceEnabled = false
