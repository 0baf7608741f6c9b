package bridge

import (
	"context"
	"time"
)

// Observer sees calls as they start and end, for the debug console. It is attached only while
// a console is open, so the call path costs one atomic pointer load otherwise. It is never
// given input or result values; implementations must not block.
type Observer interface {
	CallStarted(appID, callID, user, conversation, tool, kind string, at time.Time)
	CallEnded(appID, callID, user, conversation, tool, kind, status, reason string, latency time.Duration)
}

type observerBox struct{ o Observer }

// SetObserver attaches o, or detaches the observer with nil.
func (b *Bridge) SetObserver(o Observer) {
	if o == nil {
		b.obs.Store(nil)
		return
	}
	b.obs.Store(&observerBox{o: o})
}

// Manifest returns the stored manifest of a conversation (nil if none), for the console.
func (b *Bridge) Manifest(ctx context.Context, appID, user, conversation string) (*Manifest, error) {
	return b.store.GetManifest(ctx, ConvKey{App: appID, User: user, Conversation: conversation})
}

func (b *Bridge) observeStart(au *callAudit) {
	if ob := b.obs.Load(); ob != nil {
		ob.o.CallStarted(au.key.App, au.id, au.key.User, au.key.Conversation, au.tool, au.kind, au.start)
	}
}

func (b *Bridge) observeEnd(au *callAudit, latency time.Duration) {
	if ob := b.obs.Load(); ob != nil {
		ob.o.CallEnded(au.key.App, au.id, au.key.User, au.key.Conversation, au.tool, au.kind, au.status, au.reason, latency)
	}
}
