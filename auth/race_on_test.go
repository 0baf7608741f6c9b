//go:build race

package auth

// raceEnabled: the race detector changes allocation counts (and sync.Pool drops items).
const raceEnabled = true
