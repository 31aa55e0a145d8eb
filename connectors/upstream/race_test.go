//go:build race

package upstream

// raceEnabled: the race detector adds its own allocations; byte counts
// are not meaningful there.
const raceEnabled = true
