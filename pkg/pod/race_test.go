//go:build race

package pod

// raceEnabled: built with -race, where sync.Pool drops a share of what is put back (encoding/json's
// encoder states are allocated again) and allocation counts run higher.
const raceEnabled = true
