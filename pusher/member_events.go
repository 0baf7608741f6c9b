package pusher

import (
	"github.com/reverbgo/reverbgo/channels"
)

// The presence member events, pusher_internal:member_added and member_removed, are encoded
// here and nowhere else. Each is a channels.Message carrying both the frame every
// subscriber gets,
//
//	{"event":"pusher_internal:member_added","channel":"presence-x","data":"{\"user_id\":\"1\",\"user_info\":{}}"}
//	{"event":"pusher_internal:member_removed","channel":"presence-x","data":"{\"user_id\":\"1\"}"}
//
// and what it means (Message.Member: kind and user id), which the registry keeps its
// announced sets with on every node without reading the frame. The user id is always a
// JSON string; a member_added without user_info sends {} (what a join without one, or with
// null, records).

const (
	eventMemberAdded   = "pusher_internal:member_added"
	eventMemberRemoved = "pusher_internal:member_removed"
)

// memberAdded is the member_added message of user id (info: the raw JSON user_info) on a
// presence channel, for every subscriber but except ("" = none).
func memberAdded(appID, channel, id string, info []byte, except string) channels.Message {
	if len(info) == 0 {
		info = emptyUserInfo
	}
	data := make([]byte, 0, len(`{"user_id":,"user_info":}`)+len(id)+2+len(info))
	data = append(data, `{"user_id":`...)
	data = appendJSONString(data, id)
	data = append(data, `,"user_info":`...)
	data = append(data, info...)
	data = append(data, '}')
	return memberMessage(appID, channel, eventMemberAdded, string(data), except, channels.MemberEvent{Kind: channels.MemberAdded, UserID: id})
}

var emptyUserInfo = []byte("{}")

// memberRemoved is the member_removed message of user id on a presence channel, for every
// subscriber but except ("" = none).
func memberRemoved(appID, channel, id, except string) channels.Message {
	data := make([]byte, 0, len(`{"user_id":}`)+len(id)+2)
	data = append(data, `{"user_id":`...)
	data = appendJSONString(data, id)
	data = append(data, '}')
	return memberMessage(appID, channel, eventMemberRemoved, string(data), except, channels.MemberEvent{Kind: channels.MemberRemoved, UserID: id})
}

func memberMessage(appID, channel, event, data, except string, ev channels.MemberEvent) channels.Message {
	return channels.Message{AppID: appID, Channel: channel, Frame: EventFrame(event, channel, data), Except: except, Member: ev}
}
