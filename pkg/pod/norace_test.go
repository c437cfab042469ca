//go:build !race

package pod

// raceEnabled: built with -race (race_test.go).
const raceEnabled = false
