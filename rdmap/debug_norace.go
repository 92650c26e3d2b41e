//go:build !race

package rdmap

const debugChecks = false
