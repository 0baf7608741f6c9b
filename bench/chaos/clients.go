package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/reverbgo/reverbgo/internal/pusherclient"
)

const (
	appID, appKey, appSecret = "chaos", "chaos-key", "chaos-secret"
)

type frame = pusherclient.Frame

// conn is one Pusher connection of the load, on node node.
type conn struct {
	*pusherclient.Conn
	node int
}

var chaosApp = pusherclient.App{ID: appID, Key: appKey, Secret: appSecret}

func dialNode(ctx context.Context, n *node) (*conn, error) {
	c, err := pusherclient.Dial(ctx, n.addr, chaosApp, "chaos", 5*time.Second)
	if err != nil {
		return nil, err
	}
	return &conn{Conn: c, node: n.i}, nil
}

// subscribe signs and sends pusher:subscribe (presence as user when user != "") and waits
// for subscription_succeeded.
func (c *conn) subscribe(channel, user string) error {
	_, err := c.Subscribe(chaosApp, channel, user)
	return err
}

var apiClient = &http.Client{Timeout: 5 * time.Second}

// api sends a signed HTTP API request to node n.
func api(ctx context.Context, n *node, method, path string, query url.Values, body []byte) (int, []byte, error) {
	return pusherclient.API(ctx, apiClient, n.addr, chaosApp, method, path, query, body)
}

// trigger publishes one event through node n's HTTP API.
func trigger(ctx context.Context, n *node, channel, event, data string) error {
	body, _ := json.Marshal(map[string]any{"name": event, "channel": channel, "data": data})
	code, b, err := api(ctx, n, http.MethodPost, "/apps/"+appID+"/events", nil, body)
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("trigger: %d %s", code, b)
	}
	return nil
}

// users is GET /apps/{id}/channels/{channel}/users as a set.
func users(ctx context.Context, n *node, channel string) (map[string]bool, error) {
	code, b, err := api(ctx, n, http.MethodGet, "/apps/"+appID+"/channels/"+channel+"/users", nil, nil)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("users: %d %s", code, b)
	}
	var r struct {
		Users []struct {
			ID string `json:"id"`
		} `json:"users"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	set := map[string]bool{}
	for _, u := range r.Users {
		set[u.ID] = true
	}
	return set, nil
}

// subscriptionCount is GET /apps/{id}/channels/{channel}?info=subscription_count.
func subscriptionCount(ctx context.Context, n *node, channel string) (int, error) {
	code, b, err := api(ctx, n, http.MethodGet, "/apps/"+appID+"/channels/"+channel, url.Values{"info": {"subscription_count"}}, nil)
	if err != nil {
		return 0, err
	}
	if code != http.StatusOK {
		return 0, fmt.Errorf("channel: %d %s", code, b)
	}
	var r struct {
		Count int `json:"subscription_count"`
	}
	err = json.Unmarshal(b, &r)
	return r.Count, err
}
