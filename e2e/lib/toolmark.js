'use strict';
// Helpers for the Toolmark bridge e2e tests: a signed app-side client (the "agent"), a
// simulated page (real laravel-echo + pusher-js listening on private-toolmark.{user}.{conv},
// POSTing protocol messages like @toolmark/core's echoTransport), the Laravel channel rule for
// those channels, and a webhook receiver.
const crypto = require('node:crypto');
const http = require('node:http');
const { echoClient, echoSubscribed, inbox } = require('./clients');
const { WAIT_MS, deadline } = require('./util');

const md5 = (s) => crypto.createHash('md5').update(s).digest('hex');
const hmac = (secret, s) => crypto.createHmac('sha256', secret).update(s).digest('hex');

/**
 * Signs a Pusher-HTTP-API-style request: returns the query string (with auth_signature).
 * String to sign: METHOD \n PATH \n sorted "k=v" (auth_key, auth_timestamp, auth_version,
 * body_md5 when there is a body, plus the request's own params), HMAC-SHA256 hex.
 */
function signQuery({ method, path, params = {}, body = '', key, secret, timestamp }) {
  const q = { ...params, auth_key: key, auth_timestamp: String(timestamp ?? Math.floor(Date.now() / 1000)), auth_version: '1.0' };
  if (body) q.body_md5 = md5(body);
  const sorted = Object.keys(q).sort().map((k) => `${k}=${q[k]}`).join('&');
  const signature = hmac(secret, `${method}\n${path}\n${sorted}`);
  const enc = Object.keys(q).sort().map((k) => `${k}=${encodeURIComponent(q[k])}`).join('&');
  return `${enc}&auth_signature=${signature}`;
}

async function parse(res) {
  const text = await res.text();
  let body;
  try {
    body = text ? JSON.parse(text) : undefined;
  } catch {
    body = text;
  }
  return { status: res.status, body, text, headers: res.headers };
}

/**
 * The app side ("agent"). request() signs unless sign === false; sign may override
 * {secret, key, timestamp}. call()/describe() wait up to `ms` (they are held until result or deadline).
 */
function agent(server, app = server.app) {
  const request = async (method, sub, { body, params = {}, sign = {}, ms = WAIT_MS } = {}) => {
    const path = `/apps/${app.app_id}/toolmark${sub}`;
    const text = body === undefined ? '' : typeof body === 'string' ? body : JSON.stringify(body);
    const query = sign === false
      ? new URLSearchParams(params).toString()
      : signQuery({ method, path, params, body: text, key: sign.key ?? app.key, secret: sign.secret ?? app.secret, timestamp: sign.timestamp });
    const res = await fetch(`${server.url}${path}?${query}`, {
      method,
      headers: text ? { 'Content-Type': 'application/json' } : {},
      body: text || undefined,
      signal: AbortSignal.timeout(ms),
    });
    return parse(res);
  };
  return {
    request,
    call: (body, opts = {}) => request('POST', '/calls', { body, ms: Math.ceil(Number(body.timeout_ms) || WAIT_MS) + WAIT_MS, ...opts }),
    describe: (body, opts) => request('POST', '/describe', { body, ...opts }),
    manifest: (user_id, conversation_id) => request('GET', '/manifest', { params: { user_id, conversation_id } }),
    forward: (user_id, conversation_id, message) => request('POST', '/messages', { body: { user_id, conversation_id, message } }),
  };
}

/**
 * routes/channels.php for the test: Broadcast::channel('toolmark.{userId}.{conversationId}',
 * fn ($user, $userId, $conversationId) => (string) $user->id === (string) $userId
 *     && $user->conversations->contains($conversationId)).
 * Used as authApp's deny(channel, user): true = 403. Users carry a `conversations` Set.
 */
function toolmarkChannelPolicy(channel, user) {
  const m = /^private-toolmark\.([^.]+)\.([^.]+)$/.exec(channel);
  if (!m) return channel.startsWith('private-toolmark.');
  return !(user && String(user.id) === m[1] && user.conversations && user.conversations.has(m[2]));
}

let clientSeq = 0;
const newClientId = () => `page-${process.pid}-${++clientSeq}-${crypto.randomBytes(4).toString('hex')}`;

/** Builds a protocol message from this page. */
const msg = (clientId, type, fields) => ({ protocol: 1, type, clientId, ...fields });

/**
 * POSTs a page message to {path}/toolmark/bridge/{conv} with echoTransport's headers; a header
 * set to undefined is left out.
 */
async function pagePost(server, conv, message, headers = {}) {
  const all = { 'Content-Type': 'application/json', Accept: 'application/json', 'X-Requested-With': 'XMLHttpRequest', ...headers };
  for (const k of Object.keys(all)) if (all[k] === undefined) delete all[k];
  const res = await fetch(`${server.url}/toolmark/bridge/${conv}`, {
    method: 'POST',
    headers: all,
    body: typeof message === 'string' ? message : JSON.stringify(message),
    signal: AbortSignal.timeout(WAIT_MS),
  });
  return parse(res);
}

/**
 * A simulated page: Echo logged in as `token`, subscribed to toolmark.{user}.{conv} and
 * listening for `.toolmark.message`; post() sends like echoTransport (raw JSON body, the
 * Laravel-ish headers, X-Socket-ID = Echo.socketId()) plus the page token the server sent as
 * `.toolmark.session` (the two lines docs/bridge.md shows: listen, then the header).
 */
async function openPage(server, { authApp, token, user, conv, app = server.app, clientId = newClientId() }) {
  const echo = await echoClient(server, { authApp, token, app });
  const channel = echo.private(`toolmark.${user}.${conv}`);
  let pageToken;
  channel.listen('.toolmark.session', (e) => { pageToken = e.token; });
  const box = inbox(null, '.toolmark.message', (fn) => channel.listen('.toolmark.message', fn));
  try {
    await echoSubscribed(channel);
  } catch (err) {
    echo.disconnect();
    throw err;
  }
  const taken = new Set();
  const page = {
    echo,
    user,
    conv,
    clientId,
    box,
    socketId: () => echo.socketId(),
    /** The page token of this subscription (undefined in page_auth socket_id mode). */
    token: () => pageToken,
    /** POST one message (object or raw string); headers override/extend the defaults. */
    post(message, { headers = {}, to = conv } = {}) {
      return pagePost(server, to, message, { 'X-Socket-ID': echo.socketId(), 'X-Toolmark-Token': pageToken, ...headers });
    },
    manifest(rev, tools, opts) {
      return page.post(msg(opts?.clientId ?? clientId, 'manifest', { rev, tools }), opts);
    },
    changed(rev, opts) {
      return page.post(msg(opts?.clientId ?? clientId, 'changed', { rev }), opts);
    },
    result(id, result, opts) {
      return page.post(msg(opts?.clientId ?? clientId, 'result', { id, result }), opts);
    },
    confirmed(confirmId, result, opts) {
      return page.post(msg(opts?.clientId ?? clientId, 'confirmed', { confirmId, result }), opts);
    },
    /** Every protocol message received so far (the `message` of each event). */
    messages: () => box.got.map((d) => d && d.message),
    /**
     * Waits for a received message matching {type, id, ...} (any clientId unless given) that
     * an earlier next() did not already return.
     */
    async next(want, ms = WAIT_MS) {
      const match = (m) => !taken.has(m) && Object.entries(want).every(([k, v]) => m[k] === v);
      const end = Date.now() + ms;
      for (;;) {
        const found = page.messages().find(match);
        if (found) {
          taken.add(found);
          return found;
        }
        const left = end - Date.now();
        if (left <= 0) throw new Error(`timed out after ${ms} ms waiting for page message ${JSON.stringify(want)} (have ${JSON.stringify(page.messages())})`);
        await box.wait(box.got.length + 1, left).catch(() => {});
      }
    },
    close: () => echo.disconnect(),
  };
  return page;
}

/**
 * A local webhook receiver (the app's webhook route). Setting `failNext = n` makes the next n
 * deliveries answer 503, to see the retry. hits: [{headers, text, json, answered}], wait(n).
 */
async function startHookReceiver() {
  const hits = [];
  const waiters = [];
  const srv = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      let json;
      try {
        json = JSON.parse(text);
      } catch {
        json = undefined;
      }
      const failed = receiver.failNext > 0;
      if (failed) receiver.failNext--;
      hits.push({ method: req.method, url: req.url, headers: req.headers, text, json, answered: failed ? 503 : 200 });
      res.writeHead(failed ? 503 : 200, { 'Content-Type': 'application/json' });
      res.end('{}');
      for (const w of [...waiters]) {
        if (hits.length >= w.n) {
          waiters.splice(waiters.indexOf(w), 1);
          w.resolve();
        }
      }
    });
  });
  await new Promise((resolve) => srv.listen(0, '127.0.0.1', resolve));
  const receiver = {
    failNext: 0,
    url: `http://127.0.0.1:${srv.address().port}/reverbgo/webhooks`,
    hits,
    /** Deliveries carrying a toolmark_confirmed event for confirmId. */
    confirmations: (confirmId) => hits.filter((h) => h.json && h.json.events.some((e) => e.confirm_id === confirmId)),
    wait(n, ms = WAIT_MS) {
      if (hits.length >= n) return Promise.resolve();
      return deadline(new Promise((resolve) => waiters.push({ n, resolve })), ms, `${n} webhook deliveries (have ${hits.length})`);
    },
    close: () => new Promise((resolve) => {
      srv.closeAllConnections();
      srv.close(() => resolve());
    }),
  };
  return receiver;
}

module.exports = { md5, hmac, signQuery, agent, toolmarkChannelPolicy, pagePost, openPage, newClientId, msg, startHookReceiver };
