package webhooks_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/reverbgo/reverbgo/internal/testutil"
	"github.com/reverbgo/reverbgo/webhooks"
)

// TestRedisStoreReapNode: with the cluster's node registry deciding liveness, reaping a
// node vacates (holds channel_vacated for) the channels only it occupied, once; a channel
// another node still has stays occupied, and Maintain reaps nothing on its own.
func TestRedisStoreReapNode(t *testing.T) {
	ctx := context.Background()
	for _, be := range testutil.RedisBackends(t, false) {
		t.Run(be.Name, func(t *testing.T) {
			prefix := "test:" + uuid.NewString() + ":"
			a := webhooks.NewRedisStore(be.Client(t), prefix, "a")
			b := webhooks.NewRedisStore(be.Client(t), prefix, "b")
			a.UseNodeRegistry()
			b.UseNodeRegistry()
			for _, occ := range []struct {
				s  *webhooks.RedisStore
				ch string
			}{{a, "solo"}, {a, "shared"}, {b, "shared"}} {
				if _, err := occ.s.Occupy(ctx, "app", occ.ch, webhooks.Out{}); err != nil {
					t.Fatal(err)
				}
			}
			// Long after a's last sign of life, Maintain alone reaps nothing: the registry does.
			if err := b.Maintain(ctx, time.Now().Add(time.Hour), time.Second); err != nil {
				t.Fatal(err)
			}
			if due, err := b.Due(ctx, time.Now().Add(time.Hour), 10); err != nil || len(due) != 0 {
				t.Fatalf("holds before the reap: %+v %v", due, err)
			}
			for i := 0; i < 2; i++ { // a second reap (another survivor) finds nothing left
				if err := b.ReapNode(ctx, "a", time.Now()); err != nil {
					t.Fatal(err)
				}
			}
			due, err := b.Due(ctx, time.Now().Add(time.Second), 10)
			if err != nil || len(due) != 1 || due[0] != (webhooks.Hold{Kind: webhooks.HoldVacated, App: "app", Channel: "solo"}) {
				t.Fatalf("holds after the reap: %+v %v", due, err)
			}
		})
	}
}
