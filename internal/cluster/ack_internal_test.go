package cluster

import (
	"errors"
	"testing"

	"github.com/reverbgo/reverbgo/channels"
)

// A request whose first message was dropped (waited past MaxAge) and whose second was then
// accepted is answered with the drop, once: the acknowledgement closes only once. Before,
// the second close panicked the writer.
func TestPubAckFailedThenAccepted(t *testing.T) {
	a := newPubAck(2)
	a.failed(channels.ErrPublishTimeout)
	a.accepted()
	a.accepted()
	a.failed(errors.New("later"))
	<-a.done
	if e := a.err.Load(); e == nil || !errors.Is(*e, channels.ErrPublishTimeout) {
		t.Fatalf("err = %v, want the first failure", e)
	}
	b := newPubAck(1)
	b.accepted()
	<-b.done
	if b.err.Load() != nil {
		t.Fatal("an accepted request carries an error")
	}
}
