package pusher

import (
	"testing"

	"github.com/reverbgo/reverbgo/channels"
)

// TestMemberEventFrames: the member event encoder's frames are byte for byte the Pusher wire
// form the server has always sent (the literals are the frames the string-built events
// gave), with and without user_info and with a user id that needs escaping, and each
// message says what it is in Member, so no receiver reads the frame to learn it.
func TestMemberEventFrames(t *testing.T) {
	const odd = "a\"b\\</é\x01"
	for _, c := range []struct {
		m    channels.Message
		want string
		kind channels.MemberKind
		id   string
	}{
		{memberAdded("app", "presence-x", "1", []byte(`{"name":"Ann"}`), "1.2"),
			"\x81}{\"event\":\"pusher_internal:member_added\",\"channel\":\"presence-x\",\"data\":\"{\\\"user_id\\\":\\\"1\\\",\\\"user_info\\\":{\\\"name\\\":\\\"Ann\\\"}}\"}",
			channels.MemberAdded, "1"},
		{memberAdded("app", "presence-x", "1", []byte(`{}`), ""),
			"\x81m{\"event\":\"pusher_internal:member_added\",\"channel\":\"presence-x\",\"data\":\"{\\\"user_id\\\":\\\"1\\\",\\\"user_info\\\":{}}\"}",
			channels.MemberAdded, "1"},
		{memberAdded("app", "presence-x", "1", nil, ""), // no user_info: {}, as a join records it
			"\x81m{\"event\":\"pusher_internal:member_added\",\"channel\":\"presence-x\",\"data\":\"{\\\"user_id\\\":\\\"1\\\",\\\"user_info\\\":{}}\"}",
			channels.MemberAdded, "1"},
		{memberRemoved("app", "presence-x", "1", "1.2"),
			"\x81^{\"event\":\"pusher_internal:member_removed\",\"channel\":\"presence-x\",\"data\":\"{\\\"user_id\\\":\\\"1\\\"}\"}",
			channels.MemberRemoved, "1"},
		{memberAdded("app", "presence-x", odd, []byte(`{"name":"Ann"}`), ""),
			"\x81~\x00\x91{\"event\":\"pusher_internal:member_added\",\"channel\":\"presence-x\",\"data\":\"{\\\"user_id\\\":\\\"a\\\\\\\"b\\\\\\\\</é\\\\u0001\\\",\\\"user_info\\\":{\\\"name\\\":\\\"Ann\\\"}}\"}",
			channels.MemberAdded, odd},
		{memberAdded("app", "presence-x", odd, []byte(`{}`), ""),
			"\x81~\x00\x81{\"event\":\"pusher_internal:member_added\",\"channel\":\"presence-x\",\"data\":\"{\\\"user_id\\\":\\\"a\\\\\\\"b\\\\\\\\</é\\\\u0001\\\",\\\"user_info\\\":{}}\"}",
			channels.MemberAdded, odd},
		{memberRemoved("app", "presence-x", odd, ""),
			"\x81r{\"event\":\"pusher_internal:member_removed\",\"channel\":\"presence-x\",\"data\":\"{\\\"user_id\\\":\\\"a\\\\\\\"b\\\\\\\\</é\\\\u0001\\\"}\"}",
			channels.MemberRemoved, odd},
	} {
		if string(c.m.Frame) != c.want {
			t.Errorf("frame\n got %q\nwant %q", c.m.Frame, c.want)
		}
		if c.m.Member != (channels.MemberEvent{Kind: c.kind, UserID: c.id}) {
			t.Errorf("member %+v, want %v %q", c.m.Member, c.kind, c.id)
		}
		if c.m.AppID != "app" || c.m.Channel != "presence-x" || c.m.Cacheable || c.m.Recovery != nil {
			t.Errorf("message %+v", c.m)
		}
	}
	if m := memberRemoved("app", "presence-x", "1", "9.9"); m.Except != "9.9" {
		t.Errorf("except %q", m.Except)
	}
}
