package cluster_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/channels/channelstest"
	"github.com/reverbgo/reverbgo/internal/cluster"
	"github.com/reverbgo/reverbgo/internal/testutil"
	"github.com/reverbgo/reverbgo/ws"
)

func TestRedisHistory(t *testing.T) {
	for _, be := range testutil.RedisBackends(t, true) {
		t.Run(be.Name, func(t *testing.T) {
			var keys *cluster.KeySpace
			channelstest.RunHistory(t, func(t *testing.T) channels.History {
				keys = cluster.NewKeySpace("test-"+uuid.NewString(), true)
				return cluster.NewRedisHistory(be.Client(t), keys)
			}, func(t *testing.T, _ channels.History, app, ch string) {
				// What TTL expiry (or a Redis restart without persistence) leaves: no keys.
				rdb := be.Client(t)
				s, e, l, _ := keys.HistoryKeys(app, ch)
				for _, k := range []string{s, e, l} {
					if err := rdb.Del(context.Background(), k).Err(); err != nil {
						t.Fatal(err)
					}
				}
			})
		})
	}
}

// TestRedisHistoryAppendPublishes: the append script publishes the envelope prefix plus the
// serialled frame to the topic in the same call, and every key gets the TTL.
func TestRedisHistoryAppendPublishes(t *testing.T) {
	for _, be := range testutil.RedisBackends(t, true) {
		t.Run(be.Name, func(t *testing.T) {
			ctx := context.Background()
			rdb := be.Client(t)
			keys := cluster.NewKeySpace("test-"+uuid.NewString(), true)
			h := cluster.NewRedisHistory(rdb, keys)
			if err := cluster.LoadScripts(ctx, rdb); err != nil { // AppendCmd sends only the hash
				t.Fatal(err)
			}
			topic := keys.Topic("app", "c")
			sub := rdb.Subscribe(ctx, topic)
			if cluster.IsCluster(rdb) { // the script SPUBLISHes: a shard subscription hears it
				sub.Close()
				sub = rdb.SSubscribe(ctx, topic)
			}
			defer sub.Close()
			if _, err := sub.Receive(ctx); err != nil {
				t.Fatal(err)
			}
			in := ws.TextFrame([]byte(`{"event":"e","channel":"c","data":"1"}`))
			lim := channels.HistoryLimits{Size: 10, TTL: time.Minute}
			n, f, err := cluster.HistoryAppended(h.AppendCmd(ctx, rdb, "app", "c", lim, "", in, topic, []byte("ENV"), "", 0, channels.Position{}))
			if err != nil || n != 1 || !bytes.Equal(f, channels.AppendSerial(in, 1)) {
				t.Fatalf("append: %d %q %v", n, f, err)
			}
			pos, err := h.Position(ctx, "app", "c", lim)
			if err != nil {
				t.Fatal(err)
			}
			// The envelope's tail: the epoch's length byte, the epoch, the frame.
			msg, err := sub.ReceiveMessage(ctx)
			if err != nil || msg.Payload != "ENV"+string(rune(len(pos.Epoch)))+pos.Epoch+string(f) {
				t.Fatalf("published %q, %v", msg.Payload, err)
			}
			// Lua frames the 4- and 10-byte headers like ws.TextFrame.
			for i, size := range []int{200, 70000} {
				big := ws.TextFrame([]byte(`{"event":"e","data":"` + string(bytes.Repeat([]byte("x"), size)) + `"}`))
				n, f, err := cluster.HistoryAppended(h.AppendCmd(ctx, rdb, "app", "c", lim, "", big, "", nil, "", 0, channels.Position{}))
				if err != nil || n != uint64(2+i) || !bytes.Equal(f, channels.AppendSerial(big, n)) {
					t.Fatalf("append %d bytes: serial %d, frame equal %v, %v", size, n, bytes.Equal(f, channels.AppendSerial(big, n)), err)
				}
			}
			s, e, l, _ := keys.HistoryKeys("app", "c")
			for _, k := range []string{s, e, l} {
				if ttl := rdb.TTL(ctx, k).Val(); ttl <= 0 || ttl > time.Minute {
					t.Errorf("%s: TTL %v", k, ttl)
				}
			}
		})
	}
}
