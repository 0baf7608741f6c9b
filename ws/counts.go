package ws

import "time"

// WriteCounts are the write path's counters summed over every flusher: Writev the flushers'
// writev syscalls, Blocking the batches of the blocking writers (TLS, full sockets), Frames
// the frames handed to either, Rounds the flusher rounds that started at once and Coalesced
// those that waited for the coalescing window first (a round is one or the other).
type WriteCounts struct{ Writev, Blocking, Frames, Rounds, Coalesced uint64 }

// WriteCounts sums the flushers' counters; scrape-time cost only.
func (s *Server) WriteCounts() WriteCounts {
	var w WriteCounts
	for _, f := range s.flushers {
		st := &f.stats
		w.Writev += st.writev.Load()
		w.Blocking += st.blocking.Load()
		w.Frames += st.frames.Load() + st.blockingFrames.Load()
		w.Coalesced += st.coalesced.Load()
		w.Rounds += st.rounds.Load()
	}
	return w
}

// FramesPerWrite is Frames / (Writev + Blocking), 0 before the first write.
func (w WriteCounts) FramesPerWrite() float64 {
	if n := w.Writev + w.Blocking; n > 0 {
		return float64(w.Frames) / float64(n)
	}
	return 0
}

// CoalesceWindow is the flushers' coalescing window (Options.CoalesceWindow; 0 = off).
func (s *Server) CoalesceWindow() time.Duration {
	if len(s.flushers) == 0 {
		return 0
	}
	return s.flushers[0].window
}
