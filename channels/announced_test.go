package channels

import (
	"slices"
	"testing"
)

type nopSub struct{ id string }

func (s nopSub) SocketID() string { return s.id }
func (s nopSub) Send([]byte)      {}

// textFrame frames a payload as a server text frame (header sizes as ws.AppendFrame).
func textFrame(p string) []byte {
	n := len(p)
	switch {
	case n < 126:
		return append([]byte{0x81, byte(n)}, p...)
	case n <= 0xFFFF:
		return append([]byte{0x81, 126, byte(n >> 8), byte(n)}, p...)
	}
	panic("too long")
}

func memberFrame(event, channel, user string) []byte {
	return textFrame(`{"event":"pusher_internal:` + event + `","channel":"` + channel + `","data":"{\"user_id\":\"` + user + `\",\"user_info\":{}}"}`)
}

// TestAnnouncedSets: a set is seeded by subscription_succeeded's members, follows the member
// events delivered locally (any other frame is ignored), is bounded by max, diffs against
// the truth, and goes when the channel's last local subscriber leaves.
func TestAnnouncedSets(t *testing.T) {
	const app, room = "1", "presence-a"
	r := NewRegistry(Options{})
	r.Subscribe(app, room, nopSub{"s1"})
	deliver := func(frame []byte) { r.DeliverLocal(Message{AppID: app, Channel: room, Frame: frame}) }
	deliver(memberFrame("member_added", room, "early")) // no set yet: not recorded
	r.SeedAnnounced(app, room, []Member{{UserID: "u1"}, {UserID: "u2"}}, 3)

	long := make([]byte, 300)
	for i := range long {
		long[i] = 'x'
	}
	for _, f := range [][]byte{
		memberFrame("member_added", room, "u3"),
		memberFrame("member_removed", room, "u1"),
		textFrame(`{"event":"pusher_internal:member_added","channel":"` + room + `","data":"{\"user_id\":\"u4\",\"user_info\":{\"p\":\"` + string(long) + `\"}}"}`),
		textFrame(`{"event":"client-member_added","channel":"` + room + `","data":"{\"user_id\":\"x\"}"}`),
		textFrame(`{"event":"pusher_internal:member_addedX","data":"{}"}`),
		memberFrame("member_added", room, "u5"), // over the bound of 3
		{0x81},
	} {
		deliver(f)
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
	r.DeliverLocal(Message{AppID: app, Channel: "private-a", Frame: memberFrame("member_added", "private-a", "u7")})
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
	r.DeliverLocal(Message{AppID: app, Channel: room, Frame: memberFrame("member_removed", room, "ghost")})
	r.DeliverLocal(Message{AppID: app, Channel: room, Frame: memberFrame("member_added", room, "missed")})
	if _, _, ok := r.AnnouncedDiff(app, room, v, nil); ok {
		t.Fatal("diff against a set changed since its version was read")
	}
	v, _ = r.AnnouncedVersion(app, room)
	gone, missing, _ = r.AnnouncedDiff(app, room, v, []Member{{UserID: "u1"}, {UserID: "missed"}})
	if len(gone)+len(missing) != 0 {
		t.Fatalf("after corrections: gone %v missing %v", gone, missing)
	}
}

// FuzzNoteAnnounced: any frame on a presence channel is either a member event or ignored,
// never a panic.
func FuzzNoteAnnounced(f *testing.F) {
	f.Add(memberFrame("member_added", "presence-a", "u1"))
	f.Add(memberFrame("member_removed", "presence-a", "u1"))
	f.Add([]byte{0x81, 126})
	f.Add(textFrame(`{"event":"pusher_internal:member_added","data":"{\"user_id\":12}"}`))
	f.Fuzz(func(t *testing.T, frame []byte) {
		r := NewRegistry(Options{})
		r.Subscribe("1", "presence-a", nopSub{"s"})
		r.SeedAnnounced("1", "presence-a", nil, 2)
		r.DeliverLocal(Message{AppID: "1", Channel: "presence-a", Frame: frame})
		v, _ := r.AnnouncedVersion("1", "presence-a")
		gone, _, _ := r.AnnouncedDiff("1", "presence-a", v, nil)
		if len(gone) > 2 {
			t.Fatalf("set over its bound: %v", gone)
		}
	})
}
