package pusher

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strings"

	"github.com/reverbgo/reverbgo/config"
)

// Toolmark page sessions.
//
// A Toolmark page's POSTs used to be authorized by the socket id alone, which leaks (Echo's
// axios interceptor sends X-Socket-ID with every request of the page, webhooks and logs carry
// it). With toolmark.page_auth = token, the subscription to the page's channel, which the app
// authorized, also hands that socket alone a random token on that channel, as the event
// toolmark.session, in the same write batch as and just before subscription_succeeded. The
// socket keeps the token with the subscription, so it dies with the socket or the
// subscription; the cluster socket index stores only its SHA-256, next to the channel, so a
// page POST that lands on another node is verified from the one index read the socket lookup
// already does, with no extra round trip.

// ToolmarkChannelPrefix starts every Toolmark page channel (bridge.ChannelPrefix).
const ToolmarkChannelPrefix = "private-toolmark."

// ToolmarkSessionEvent is the event that carries the page token.
const ToolmarkSessionEvent = "toolmark.session"

// CredentialIndex is implemented by a ClusterView whose socket index can keep a credential
// hash with an indexed channel (bridge.RedisSocketIndex). SetCredential is called before the
// subscription that it belongs to is registered.
type CredentialIndex interface {
	SetCredential(app, channel, socketID, credential string)
}

// pageSession returns the session of a new or repeated subscription to name: the token
// frame to send before subscription_succeeded (nil when the channel has none) and the
// subscription to store. A repeated subscribe keeps the token already issued, so the
// index and the page agree.
func (c *Conn) pageSession(name string) (subscription, []byte) {
	cfg := c.app.cfg()
	if !cfg.Toolmark.Enabled || cfg.Toolmark.PageAuth == config.PageAuthSocketID || !strings.HasPrefix(name, ToolmarkChannelPrefix) {
		return subscription{}, nil
	}
	sub, ok := c.subscribed(name)
	if !ok || sub.token == "" {
		var b [32]byte // 256 bits
		if _, err := rand.Read(b[:]); err != nil {
			panic("pusher: crypto/rand failed: " + err.Error())
		}
		sub = subscription{token: base64.RawURLEncoding.EncodeToString(b[:])}
	}
	hash := TokenHash(sub.token)
	if ci, ok := c.srv.cluster.(CredentialIndex); ok {
		ci.SetCredential(cfg.ID, name, c.socketID, hash)
	}
	return sub, EventFrame(ToolmarkSessionEvent, name, `{"token":"`+sub.token+`"}`)
}

// TokenHash is the hex SHA-256 of a page token, the form stored in the socket index and
// returned by Subscriptions.
func TokenHash(token string) string {
	var buf [64]byte // a token is 43 bytes: hashed from the stack
	h := sha256.Sum256(append(buf[:0], token...))
	var out [2 * sha256.Size]byte
	hex.Encode(out[:], h[:])
	return string(out[:])
}

// SocketConversation is Subscriptions narrowed to the bridge's page gate: the socket's app,
// how many of its channels parse reads as a channel of conversation, and the user and page
// token hash of the (last) one. A socket of this node is read in place (no copy of its
// channels) and only that one token is hashed; another node's socket is read from the
// cluster index as Subscriptions does.
func (s *Server) SocketConversation(socketID, conversation string, parse func(channel string) (user, conv string, ok bool)) (appID, user, tokenHash string, n int, ok bool) {
	if c := s.sockets.get(socketID); c != nil {
		token := ""
		c.subsMu.RLock()
		for name, sub := range c.subs.all() {
			if u, cv, ok := parse(name); ok && cv == conversation {
				user, token, n = u, sub.token, n+1
			}
		}
		c.subsMu.RUnlock()
		if token != "" {
			tokenHash = TokenHash(token)
		}
		return c.app.cfg().ID, user, tokenHash, n, true
	}
	appID, subs, ok := s.Subscriptions(socketID)
	for name, hash := range subs {
		if u, cv, ok := parse(name); ok && cv == conversation {
			user, tokenHash, n = u, hash, n+1
		}
	}
	return appID, user, tokenHash, n, ok
}

// Subscriptions implements the bridge's socket lookup: the app of a live socket anywhere in
// the cluster and its channels, each mapped to the hash of its page token ("" when it has
// none). A socket on another node is found through the cluster index, which holds only its
// toolmark channels (the only ones the bridge looks at).
func (s *Server) Subscriptions(socketID string) (appID string, subs map[string]string, ok bool) {
	if c := s.sockets.get(socketID); c != nil {
		c.subsMu.RLock()
		subs = make(map[string]string, c.subs.len())
		for name, sub := range c.subs.all() {
			if sub.token != "" {
				subs[name] = TokenHash(sub.token)
			} else {
				subs[name] = ""
			}
		}
		c.subsMu.RUnlock()
		return c.app.cfg().ID, subs, true
	}
	if s.cluster == nil {
		return "", nil, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	app, subs, ok, err := s.cluster.Socket(ctx, socketID)
	if err != nil {
		s.log.Warn("cluster socket lookup failed", "error", err)
	}
	return app, subs, ok
}
