package testutil

import "sync"

// Emitted is one webhook event an Emitter recorded, with the app it was emitted for.
type Emitted struct {
	App   string
	Event map[string]any
}

// Emitter is a fake webhook emitter (bridge.Emitter, pusher.Emitter): it records every event
// so that a test asserts on the record. The zero value is ready to use.
type Emitter struct {
	mu     sync.Mutex
	events []Emitted
}

// Emit records the event.
func (e *Emitter) Emit(app string, event map[string]any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.events = append(e.events, Emitted{app, event})
}

// All returns the events recorded so far, oldest first.
func (e *Emitter) All() []Emitted {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Emitted(nil), e.events...)
}
