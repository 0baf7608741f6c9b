//go:build race

package bridge

// raceEnabled: the race detector changes allocation counts, so alloc assertions skip.
const raceEnabled = true
