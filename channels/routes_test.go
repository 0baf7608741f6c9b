package channels_test

import (
	"context"
	"testing"

	"github.com/reverbgo/reverbgo/channels"
)

// routingBroker is a Broker that routes by interest and confirms every channel at once.
type routingBroker struct{}

func (routingBroker) Publish(context.Context, channels.Message) error { return nil }
func (routingBroker) Close() error                                    { return nil }
func (routingBroker) Want(string, string)                             {}
func (routingBroker) Unwant(string, string)                           {}
func (routingBroker) WhenRouted(_, _ string, fn func(bool))           { fn(true) }

// TestRegistryRoutes: only a Router broker makes subscribes wait for a confirmation, so the
// subscribe path builds its WhenRouted callback only then.
func TestRegistryRoutes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		broker channels.Broker
		want   bool
	}{
		{"memory broker", nil, false},
		{"router", routingBroker{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := channels.NewRegistry(channels.Options{Broker: tc.broker})
			if got := r.Routes(); got != tc.want {
				t.Fatalf("Routes() = %v, want %v", got, tc.want)
			}
			ran := false
			r.WhenRouted("app", "room", func(routed bool) { ran = routed })
			if !ran {
				t.Fatal("WhenRouted did not run fn(true) at once")
			}
		})
	}
}
