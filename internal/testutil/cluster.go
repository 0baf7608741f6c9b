package testutil

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// SlotOwner returns the id and address of the master serving slot, and the id and address
// of another master, as the cluster (through rdb) reports them.
func SlotOwner(ctx context.Context, rdb *redis.ClusterClient, slot int) (owner, ownerAddr, other, otherAddr string, err error) {
	ranges, err := rdb.ClusterSlots(ctx).Result()
	if err != nil {
		return "", "", "", "", err
	}
	for _, r := range ranges {
		if len(r.Nodes) == 0 {
			continue
		}
		if slot >= r.Start && slot <= r.End {
			owner, ownerAddr = r.Nodes[0].ID, r.Nodes[0].Addr
		}
	}
	for _, r := range ranges {
		if len(r.Nodes) > 0 && r.Nodes[0].ID != owner {
			other, otherAddr = r.Nodes[0].ID, r.Nodes[0].Addr
		}
	}
	if owner == "" || other == "" {
		return "", "", "", "", fmt.Errorf("slot %d: owner %q, no other master (%d ranges)", slot, owner, len(ranges))
	}
	return owner, ownerAddr, other, otherAddr, nil
}

// MoveSlot migrates slot (and its keys) from the master at fromAddr to the one at toAddr,
// the way redis-cli --cluster reshard moves one slot: IMPORTING on the target, MIGRATING on
// the source, MIGRATE of every key, then SETSLOT NODE on the target, the source and every
// other master. On the source, that last step is what makes Redis 7 send a sunsubscribe to
// each client subscribed to a shard channel of the slot.
func MoveSlot(ctx context.Context, rdb *redis.ClusterClient, slot int, fromAddr, toAddr string) error {
	from := redis.NewClient(&redis.Options{Addr: fromAddr})
	defer from.Close()
	to := redis.NewClient(&redis.Options{Addr: toAddr})
	defer to.Close()
	fromID, err := from.ClusterMyID(ctx).Result()
	if err != nil {
		return err
	}
	toID, err := to.ClusterMyID(ctx).Result()
	if err != nil {
		return err
	}
	s := strconv.Itoa(slot)
	if err := to.Do(ctx, "cluster", "setslot", s, "importing", fromID).Err(); err != nil {
		return fmt.Errorf("importing: %w", err)
	}
	if err := from.Do(ctx, "cluster", "setslot", s, "migrating", toID).Err(); err != nil {
		return fmt.Errorf("migrating: %w", err)
	}
	host, port, err := net.SplitHostPort(toAddr)
	if err != nil {
		return err
	}
	for {
		keys, err := from.ClusterGetKeysInSlot(ctx, slot, 100).Result()
		if err != nil {
			return err
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"migrate", host, port, "", 0, 5000, "replace", "keys"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := from.Do(ctx, args...).Err(); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}
	if err := to.Do(ctx, "cluster", "setslot", s, "node", toID).Err(); err != nil {
		return err
	}
	if err := from.Do(ctx, "cluster", "setslot", s, "node", toID).Err(); err != nil {
		return err
	}
	// The other masters learn it by gossip too; telling them makes it immediate.
	return rdb.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		return m.Do(ctx, "cluster", "setslot", s, "node", toID).Err()
	})
}
