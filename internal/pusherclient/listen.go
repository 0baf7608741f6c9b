package pusherclient

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
)

// Listener reads a Conn on a goroutine of its own: it answers pusher:ping, keeps the
// subscription_succeeded frames for Subscribe and Subscription, and hands every other
// frame to the callback given to Listen.
type Listener struct {
	*Conn
	mu      sync.Mutex
	waiting map[string]chan struct{} // subscription_succeeded waiters, by channel
	answers map[string]Frame         // the last subscription_succeeded, by channel
	onEvent func(Frame)
	done    chan struct{}
	err     error // why the reader stopped
	closing bool
}

// Listen starts reading c on a goroutine. onEvent (may be nil) receives every frame except
// pings and subscription_succeeded, on that goroutine: it must not block. Read, Until and
// Subscribe of the Conn are the listener's from now on.
func (c *Conn) Listen(onEvent func(Frame)) *Listener {
	l := &Listener{Conn: c, waiting: map[string]chan struct{}{}, answers: map[string]Frame{}, onEvent: onEvent, done: make(chan struct{})}
	go l.read()
	return l
}

// DialListener is DialWith followed by Listen.
func DialListener(ctx context.Context, base, key string, o Options, onEvent func(Frame)) (*Listener, error) {
	c, err := DialWith(ctx, base, key, o)
	if err != nil {
		return nil, err
	}
	return c.Listen(onEvent), nil
}

func (l *Listener) read() {
	defer close(l.done)
	for {
		_, p, err := l.WS.ReadMessage()
		if err != nil {
			l.mu.Lock()
			l.err = err
			l.mu.Unlock()
			return
		}
		var f Frame
		if json.Unmarshal(p, &f) != nil {
			continue
		}
		switch f.Event {
		case "pusher:ping":
			_ = l.Pong()
		case "pusher_internal:subscription_succeeded":
			l.mu.Lock()
			l.answers[f.Channel] = f
			if ch, ok := l.waiting[f.Channel]; ok {
				close(ch)
				delete(l.waiting, f.Channel)
			}
			l.mu.Unlock()
		default:
			if l.onEvent != nil {
				l.onEvent(f)
			}
		}
	}
}

// Subscribe subscribes to channel (signed as SubscribeMessage signs, presence as MemberData
// of user) and waits for subscription_succeeded.
func (l *Listener) Subscribe(ctx context.Context, app App, channel, user string) error {
	ok := make(chan struct{})
	l.mu.Lock()
	l.waiting[channel] = ok
	l.mu.Unlock()
	cd := ""
	if user != "" {
		cd = MemberData(user)
	}
	if err := l.Send(SubscribeMessage(app, l.ID, channel, cd, nil)); err != nil {
		return err
	}
	select {
	case <-ok:
		return nil
	case <-l.done:
		return fmt.Errorf("socket closed subscribing to %s: %v", channel, l.Err())
	case <-ctx.Done():
		return fmt.Errorf("no subscription_succeeded for %s: %w", channel, ctx.Err())
	}
}

// Subscription is the subscription_succeeded frame channel was answered with last (its
// Serial and Epoch are the position under recovery); false before one arrived.
func (l *Listener) Subscription(channel string) (Frame, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f, ok := l.answers[channel]
	return f, ok
}

// Done is closed when the reader stops.
func (l *Listener) Done() <-chan struct{} { return l.done }

// Dropped reports whether the connection ended other than by Close.
func (l *Listener) Dropped() bool {
	select {
	case <-l.done:
		l.mu.Lock()
		defer l.mu.Unlock()
		return !l.closing
	default:
		return false
	}
}

// Err is why the reader stopped (nil while it runs).
func (l *Listener) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Close closes the connection and waits for the reader.
func (l *Listener) Close() error {
	l.mu.Lock()
	l.closing = true
	l.mu.Unlock()
	err := l.WS.Close()
	<-l.done
	return err
}
