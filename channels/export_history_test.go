package channels

import "time"

// SetHistoryClock replaces h's clock (tests).
func SetHistoryClock(h *MemoryHistory, now func() time.Time) { h.now = now }

// HistoryChannels is how many channels h keeps (tests).
func HistoryChannels(h *MemoryHistory) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.chans)
}
