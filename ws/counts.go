package ws

import "time"

// WriteCounts are the write path's counters summed over every flusher: Writev the flushers'
// writev syscalls, URing their socket writes through io_uring (one SQE each) and
// URingEnters the io_uring_enter syscalls that carried those (Options.IOUring), Blocking
// the batches of the blocking writers (TLS, full sockets), Frames the frames handed to any
// of them, Rounds the flusher rounds that started at once and Coalesced those that waited
// for the coalescing window first (a round is one or the other). The flushers' syscalls
// are Writev + URingEnters.
type WriteCounts struct{ Writev, URing, URingEnters, Blocking, Frames, Rounds, Coalesced uint64 }

// WriteCounts sums the flushers' counters; scrape-time cost only.
func (s *Server) WriteCounts() WriteCounts {
	var w WriteCounts
	for _, f := range s.flushers {
		st := &f.stats
		w.Writev += st.writev.Load()
		w.URing += st.uring.Load()
		w.URingEnters += st.enters.Load()
		w.Blocking += st.blocking.Load()
		w.Frames += st.frames.Load() + st.blockingFrames.Load()
		w.Coalesced += st.coalesced.Load()
		w.Rounds += st.rounds.Load()
	}
	return w
}

// FramesPerWrite is Frames / (Writev + URing + Blocking), 0 before the first write.
func (w WriteCounts) FramesPerWrite() float64 {
	if n := w.Writev + w.URing + w.Blocking; n > 0 {
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
