'use strict';
// A stand-in for the Laravel application behind Echo: it answers the endpoints pusher-js
// calls over HTTP and broadcasts the way Laravel does, with the server SDK.
//
//   POST /broadcasting/auth       (form socket_id, channel_name) → authorizeChannel
//   POST /broadcasting/user-auth  (form socket_id)               → authenticateUser
//   POST /broadcast               (JSON {channels, event, data})  → trigger, excluding the
//                                  X-Socket-ID sender as broadcast(...)->toOthers() does
//
// Users log in with "Authorization: Bearer <token>" (Echo's bearerToken option); `users` maps
// tokens to {id, info}. `deny(channel)` lets a test refuse a channel with 403, like a failing
// Laravel channel callback. Every request is kept in `requests`.
const http = require('node:http');

function body(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

async function startAuthApp({ sdk, users = {}, deny = () => false }) {
  const requests = [];
  const srv = http.createServer(async (req, res) => {
    const reply = (status, obj) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(obj));
    };
    try {
      const text = await body(req);
      requests.push({ method: req.method, url: req.url, headers: req.headers, body: text });
      const token = (req.headers.authorization || '').replace(/^Bearer\s+/i, '');
      const user = users[token];
      if (req.method !== 'POST') return reply(405, { message: 'method not allowed' });
      switch (req.url) {
        case '/broadcasting/auth': {
          const form = new URLSearchParams(text);
          const channel = form.get('channel_name');
          const socketId = form.get('socket_id');
          if (deny(channel, user)) return reply(403, { message: 'This action is unauthorized.' });
          if (channel.startsWith('presence-')) {
            if (!user) return reply(403, { message: 'Unauthenticated.' });
            return reply(200, sdk.authorizeChannel(socketId, channel, { user_id: user.id, user_info: user.info || {} }));
          }
          return reply(200, sdk.authorizeChannel(socketId, channel));
        }
        case '/broadcasting/user-auth': {
          if (!user) return reply(403, { message: 'Unauthenticated.' });
          const form = new URLSearchParams(text);
          const data = { id: String(user.id) };
          if (user.info) data.user_info = user.info;
          return reply(200, sdk.authenticateUser(form.get('socket_id'), data));
        }
        case '/broadcast': {
          const { channels, event, data } = JSON.parse(text);
          const except = req.headers['x-socket-id'];
          await sdk.trigger(channels, event, data, except ? { socket_id: except } : undefined);
          return reply(200, { broadcast: true });
        }
        default:
          return reply(404, { message: 'not found' });
      }
    } catch (err) {
      return reply(500, { message: String((err && err.message) || err) });
    }
  });
  await new Promise((resolve) => srv.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${srv.address().port}`,
    requests,
    close: () =>
      new Promise((resolve) => {
        srv.closeAllConnections();
        srv.close(() => resolve());
      }),
  };
}

module.exports = { startAuthApp };
