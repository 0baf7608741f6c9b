package channels

import (
	"slices"
	"testing"
)

type nopSub struct{ id string }

func (s nopSub) SocketID() string { return s.id }
func (s nopSub) Send([]byte)      {}

// member is a member event of user on a presence channel: its frame is what the server
// sends, but the registry reads only Member.
func member(app, channel string, kind MemberKind, user string) Message {
	event := "member_added"
	if kind == MemberRemoved {
		event = "member_removed"
	}
	return Message{AppID: app, Channel: channel, Member: MemberEvent{Kind: kind, UserID: user},
		Frame: []byte(`{"event":"pusher_internal:` + event + `","channel":"` + channel + `","data":"{\"user_id\":\"` + user + `\"}"}`)}
}

// TestAnnouncedSets: a set is seeded by subscription_succeeded's members, follows the member
// events delivered locally (any other frame is ignored), is bounded by max, diffs against
// the truth, and goes when the channel's last local subscriber leaves.
func TestAnnouncedSets(t *testing.T) {
	const app, room = "1", "presence-a"
	r := NewRegistry(Options{})
	r.Subscribe(app, room, nopSub{"s1"})
	r.DeliverLocal(member(app, room, MemberAdded, "early")) // no set yet: not recorded
	r.SeedAnnounced(app, room, []Member{{UserID: "u1"}, {UserID: "u2"}}, 3)

	for _, m := range []Message{
		member(app, room, MemberAdded, "u3"),
		member(app, room, MemberRemoved, "u1"),
		member(app, room, MemberAdded, "u4"),
		// A frame that looks like a member event but says nothing in Member is not one.
		{AppID: app, Channel: room, Frame: member(app, room, MemberAdded, "x").Frame},
		member(app, room, MemberAdded, "u5"), // over the bound of 3
		{AppID: app, Channel: room, Frame: []byte{0x81}},
	} {
		r.DeliverLocal(m)
	}
	v, _ := r.AnnouncedVersion(app, room)
	gone, missing, ok := r.AnnouncedDiff(app, room, v, []Member{{UserID: "u2"}, {UserID: "u9"}})
	slices.Sort(gone)
	if !ok || !slices.Equal(gone, []string{"u3", "u4"}) || len(missing) != 1 || missing[0].UserID != "u9" {
		t.Fatalf("diff gone %v missing %v ok %v", gone, missing, ok)
	}
	if got := r.AnnouncedChannels(); len(got) != 1 || got[0] != (AnnouncedMember{app, room}) {
		t.Fatalf("channels %v", got)
	}
	// Another channel's frames and a non-presence channel never touch the set.
	r.DeliverLocal(member(app, "private-a", MemberAdded, "u7"))
	r.Unsubscribe(app, room, "s1")
	if _, ok := r.AnnouncedVersion(app, room); ok {
		t.Fatal("set kept after the last local subscriber left")
	}
}

// TestAnnouncedLaterSubscriber: a subscriber joining later is told of a member an older one
// missed; the member still counts as missing (not every subscriber was told), and a member
// only the older one holds (a ghost) still counts as gone.
func TestAnnouncedLaterSubscriber(t *testing.T) {
	const app, room = "1", "presence-a"
	r := NewRegistry(Options{})
	r.Subscribe(app, room, nopSub{"old"})
	r.SeedAnnounced(app, room, []Member{{UserID: "u1"}, {UserID: "ghost"}}, 0)
	r.Subscribe(app, room, nopSub{"new"})
	r.SeedAnnounced(app, room, []Member{{UserID: "u1"}, {UserID: "missed"}}, 0)
	v, _ := r.AnnouncedVersion(app, room)
	gone, missing, _ := r.AnnouncedDiff(app, room, v, []Member{{UserID: "u1"}, {UserID: "missed"}})
	if !slices.Equal(gone, []string{"ghost"}) || len(missing) != 1 || missing[0].UserID != "missed" {
		t.Fatalf("gone %v missing %v", gone, missing)
	}
	// The corrections, delivered locally, settle the set on the truth.
	r.DeliverLocal(member(app, room, MemberRemoved, "ghost"))
	r.DeliverLocal(member(app, room, MemberAdded, "missed"))
	if _, _, ok := r.AnnouncedDiff(app, room, v, nil); ok {
		t.Fatal("diff against a set changed since its version was read")
	}
	v, _ = r.AnnouncedVersion(app, room)
	gone, missing, _ = r.AnnouncedDiff(app, room, v, []Member{{UserID: "u1"}, {UserID: "missed"}})
	if len(gone)+len(missing) != 0 {
		t.Fatalf("after corrections: gone %v missing %v", gone, missing)
	}
}

// FuzzNoteAnnounced: any member event (any kind byte, any user id, any frame) on a presence
// channel keeps the set within its bound, never a panic.
func FuzzNoteAnnounced(f *testing.F) {
	f.Add(uint8(MemberAdded), "u1", []byte("x"))
	f.Add(uint8(MemberRemoved), "u1", []byte{0x81, 126})
	f.Add(uint8(7), "", []byte(nil))
	f.Fuzz(func(t *testing.T, kind uint8, user string, frame []byte) {
		r := NewRegistry(Options{})
		r.Subscribe("1", "presence-a", nopSub{"s"})
		r.SeedAnnounced("1", "presence-a", nil, 2)
		for _, id := range []string{user, user + "2", user + "3"} {
			r.DeliverLocal(Message{AppID: "1", Channel: "presence-a", Frame: frame, Member: MemberEvent{Kind: MemberKind(kind), UserID: id}})
		}
		v, _ := r.AnnouncedVersion("1", "presence-a")
		gone, _, _ := r.AnnouncedDiff("1", "presence-a", v, nil)
		if len(gone) > 2 {
			t.Fatalf("set over its bound: %v", gone)
		}
	})
}
