package cluster_test

import (
	"context"
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/channels/channelstest"
	"github.com/reverbgo/reverbgo/internal/cluster"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

// TestAnnouncedAcrossNodes: a member event published on node A keeps node B's announced set
// (what B's subscribers were told) in step: its kind and user id cross in the envelope, as
// B never reads the frame. The frame still reaches B's subscriber unchanged.
func TestAnnouncedAcrossNodes(t *testing.T) {
	ctx := context.Background()
	const app, room = "app", "presence-room"
	for _, be := range backends(t) {
		for _, routing := range []cluster.Routing{cluster.RoutingInterest, cluster.RoutingBroadcast} {
			t.Run(be.Name+"/"+routing.String(), func(t *testing.T) {
				ch := "test:" + uuid.NewString()
				var regs [2]*channels.Registry
				for i := range regs {
					b, err := cluster.NewRedisBroker(ctx, be.Client(t), cluster.RedisBrokerOptions{Channel: ch, Routing: routing})
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { _ = b.Close() })
					regs[i] = channels.NewRegistry(channels.Options{Broker: b})
					b.Start(regs[i].DeliverLocal)
				}
				a, b := regs[0], regs[1]
				onB := &channelstest.Sink{ID: "2.2"}
				channelstest.Subscribe(t, b, app, room, onB)
				b.SeedAnnounced(app, room, []channels.Member{{UserID: "u1"}}, 0)

				diff := func(truth ...string) (gone, missing []string) {
					v, ok := b.AnnouncedVersion(app, room)
					if !ok {
						t.Fatal("node B has no announced set")
					}
					ms := make([]channels.Member, len(truth))
					for i, id := range truth {
						ms[i] = channels.Member{UserID: id}
					}
					g, m, _ := b.AnnouncedDiff(app, room, v, ms)
					for _, x := range m {
						missing = append(missing, x.UserID)
					}
					slices.Sort(g)
					return g, missing
				}
				publish := func(kind channels.MemberKind, id string) {
					frame := []byte("member event " + id)
					err := a.Publish(ctx, channels.Message{AppID: app, Channel: room, Frame: frame, Except: "1.1",
						Member: channels.MemberEvent{Kind: kind, UserID: id}})
					if err != nil {
						t.Fatal(err)
					}
				}

				publish(channels.MemberAdded, "u2")
				testutil.WaitFor(t, "node B to record A's member_added", func() bool {
					_, missing := diff("u1", "u2")
					return len(missing) == 0
				})
				publish(channels.MemberRemoved, "u1")
				testutil.WaitFor(t, "node B to record A's member_removed", func() bool {
					gone, _ := diff("u2")
					return len(gone) == 0
				})
				if gone, missing := diff("u2"); len(gone)+len(missing) != 0 {
					t.Fatalf("node B: gone %v missing %v", gone, missing)
				}
				onB.WaitFor(t, "both frames on B", func(f []string) bool {
					return slices.Equal(f, []string{"member event u2", "member event u1"})
				})
			})
		}
	}
}
