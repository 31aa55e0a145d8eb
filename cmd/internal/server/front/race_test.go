//go:build race

package front

// raceEnabled: sync.Pool drops items at random under the race detector,
// so allocation counts of pooled paths are not meaningful there.
const raceEnabled = true
