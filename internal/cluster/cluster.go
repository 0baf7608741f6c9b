// Package cluster is the Redis side of the channels seams: the broker and its interest
// router, presence, occupancy, history and the last-event cache kept in Redis, the key space
// every node shares, and the node registry that heartbeats each node and reaps dead ones.
package cluster

// key is one channel of one app.
type key struct{ app, name string }
