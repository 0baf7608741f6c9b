'use strict';
// Real third-party clients pointed at a started reverbgo: the `pusher` server SDK (HTTP API,
// signing), pusher-js (Node build) and laravel-echo driving pusher-js.
const PusherServer = require('pusher');
const Pusher = require('pusher-js');
const { WAIT_MS, QUIET_MS, sleep, deadline } = require('./util');
const { pick } = require('./server');

// Harness-only workaround for a client-library leak, not a protocol change: the WebSocket
// class bundled in pusher-js's Node build (faye-websocket) arms a 30 s fallback timer in close()
// even when the socket is already CLOSED, and nothing clears it. That happens whenever the
// server ends a connection with a 4xxx pusher:error + close frame (terminate_connections,
// unknown key): pusher-js then calls close() on the closed socket, and node stays alive 30 s
// after the test file has finished. Closing an already closed socket is made a no-op.
{
  const WebSocketAPI = Pusher.Runtime.getWebSocketAPI();
  const CLOSED = WebSocketAPI.CLOSED ?? 3;
  const close = WebSocketAPI.prototype.close;
  WebSocketAPI.prototype.close = function closeUnlessClosed(...args) {
    if (this.readyState === CLOSED) return undefined;
    return close.apply(this, args);
  };
}

/**
 * Server SDK for an app of a started server. The configured path prefix goes in front of
 * /apps/... in the URL but not into the signed path (Pusher signs the path without it).
 */
function sdk(server, app = server.app, extra = {}) {
  const node = pick(server); // with two nodes, each SDK client talks to one in turn
  const client = new PusherServer({
    appId: app.app_id,
    key: app.key,
    secret: app.secret,
    host: node.host,
    port: String(node.port),
    useTLS: Boolean(server.tls),
    timeout: WAIT_MS,
    ...extra,
  });
  const base = `${server.tls ? 'https' : 'http'}://${node.host}:${node.port}${server.prefix || ''}`;
  client.config.getBaseURL = () => base;
  return client;
}

/** Status and JSON of an SDK call that may fail (RequestError carries status and body). */
async function outcome(promise) {
  try {
    const res = await promise;
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : undefined };
  } catch (err) {
    if (err && err.status) {
      let body;
      try {
        body = JSON.parse(err.body);
      } catch {
        body = err.body;
      }
      return { status: err.status, body };
    }
    throw err;
  }
}

/** GET through the SDK, parsed. */
async function apiGet(client, path, params) {
  const res = await client.get({ path, params });
  return res.json();
}

/** Options pusher-js needs to reach the test server (ws, or wss when it serves TLS). */
function socketOptions(server) {
  const node = pick(server); // with two nodes, each client connects to one in turn
  return {
    cluster: 'mt1', // required by pusher-js 8, unused because wsHost is set
    wsHost: node.host,
    wsPort: node.port,
    wssPort: node.port,
    wsPath: server.prefix || '',
    forceTLS: Boolean(server.tls),
    enabledTransports: ['ws'], // pusher-js's WebSocket transport is named "ws" for wss:// too
    enableStats: false,
  };
}

/**
 * pusher-js client. Channel authorization and user authentication are signed in-process by the
 * server SDK (pusher-js customHandler), as a Laravel backend would, unless options override.
 * user: {id, info, watchlist} used for presence channel_data and signin.
 */
function pusherClient(server, { app = server.app, user, options = {}, sdkExtra } = {}) {
  const signer = sdk(server, app, sdkExtra);
  return new Pusher(app.key, {
    ...socketOptions(server),
    channelAuthorization: {
      customHandler: ({ socketId, channelName }, cb) => {
        try {
          const presence = channelName.startsWith('presence-')
            ? { user_id: user ? user.id : socketId, user_info: (user && user.info) || {} }
            : undefined;
          cb(null, signer.authorizeChannel(socketId, channelName, presence));
        } catch (err) {
          cb(err, null);
        }
      },
    },
    userAuthentication: {
      customHandler: ({ socketId }, cb) => {
        try {
          const data = { id: String(user ? user.id : 'anon') };
          if (user && user.info) data.user_info = user.info;
          if (user && user.watchlist) data.watchlist = user.watchlist;
          cb(null, signer.authenticateUser(socketId, data));
        } catch (err) {
          cb(err, null);
        }
      },
    },
    ...options,
  });
}

/** Resolves with the socket id once the connection is "connected"; rejects on failed. */
function whenConnected(pusher, ms = WAIT_MS) {
  return state(pusher, 'connected', ms).then(() => pusher.connection.socket_id);
}

/** Resolves once pusher.connection.state === want. */
function state(pusher, want, ms = WAIT_MS) {
  if (pusher.connection.state === want) return Promise.resolve(want);
  return deadline(
    new Promise((resolve, reject) => {
      const fn = ({ current }) => {
        if (current === want) {
          pusher.connection.unbind('state_change', fn);
          resolve(want);
        } else if (current === 'failed' && want !== 'failed') {
          pusher.connection.unbind('state_change', fn);
          reject(new Error(`pusher-js state became failed while waiting for ${want}`));
        }
      };
      pusher.connection.bind('state_change', fn);
    }),
    ms,
    `pusher-js state "${want}" (now "${pusher.connection.state}")`,
  );
}

/** Subscribes with pusher-js, resolves {channel, data} on subscription_succeeded. */
function subscribe(pusher, name, ms = WAIT_MS) {
  const channel = pusher.subscribe(name);
  return deadline(
    new Promise((resolve, reject) => {
      channel.bind('pusher:subscription_succeeded', (data) => resolve({ channel, data }));
      channel.bind('pusher:subscription_error', (err) => reject(new Error(`subscription_error on ${name}: ${JSON.stringify(err)}`)));
    }),
    ms,
    `pusher:subscription_succeeded on ${name}`,
  );
}

/**
 * Records every call of an event on something with bind() (pusher-js channel, pusher.user,
 * pusher.connection, an Echo channel via .listen etc. when `bindWith` is given).
 * With bindWith, target (e.g. the Echo channel) is only used by none() to find the client.
 * Returns {got: [...data], meta: [...metadata], wait(n), none()}.
 */
function inbox(target, event, bindWith) {
  const got = []; // first callback argument (the event data)
  const meta = []; // second argument, when given (pusher-js metadata such as {user_id})
  const waiters = [];
  const push = (data, m) => {
    got.push(data);
    meta.push(m);
    for (const w of [...waiters]) {
      if (got.length >= w.n) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(got.slice());
      }
    }
  };
  if (bindWith) bindWith(push);
  else target.bind(event, push);
  return {
    got,
    meta,
    wait(n = 1, ms = WAIT_MS) {
      if (got.length >= n) return Promise.resolve(got.slice());
      return deadline(new Promise((resolve) => waiters.push({ n, resolve })), ms, () => `${n} x ${event} (have ${got.length})`);
    },
    /** Resolves with what arrived within a quiet window; rejects if the client's connection
     * is not connected during it (silence from a dropped connection proves nothing). pusher-js
     * reports a dead socket as "connecting" about a second after it, so a drop just before a
     * short window may go unseen; a drop during a longer one does not. */
    async none(ms = QUIET_MS) {
      const client = clientOf(target);
      let dropped = client && client.connection.state !== 'connected' ? client.connection.state : null;
      const onChange = ({ current }) => {
        if (current !== 'connected' && !dropped) dropped = current;
      };
      if (client) client.connection.bind('state_change', onChange);
      await sleep(ms);
      if (client) client.connection.unbind('state_change', onChange);
      if (dropped) throw new Error(`connection ${dropped} while watching for no ${event}`);
      return got.slice();
    },
  };
}

/** The pusher-js client behind a Pusher, a channel, pusher.user or an Echo channel. */
function clientOf(target) {
  if (!target) return null;
  if (target.connection && typeof target.connection.bind === 'function') return target;
  if (target.pusher && target.pusher.connection) return target.pusher;
  if (target.subscription && target.subscription.pusher) return target.subscription.pusher;
  return null;
}

let EchoClass;
/** laravel-echo 2 is ESM-only ("type": "module"), so it is loaded with import(). */
async function loadEcho() {
  if (!EchoClass) EchoClass = (await import('laravel-echo')).default;
  return EchoClass;
}

/**
 * A Laravel Echo instance (broadcaster "reverb", as Laravel's echo.js scaffolding uses) whose
 * private/presence authorization goes through the HTTP auth endpoint of `authApp`; the logged-in
 * user is identified by a bearer token (Authorization header), like Sanctum.
 */
async function echoClient(server, { authApp, token, app = server.app, extra = {} } = {}) {
  const Echo = await loadEcho();
  return new Echo({
    broadcaster: 'reverb',
    Pusher,
    key: app.key,
    ...socketOptions(server),
    authEndpoint: authApp ? `${authApp.url}/broadcasting/auth` : undefined,
    // Fresh header objects per instance: Echo's `bearerToken` option writes into option objects
    // shared by every Echo instance of the process, so two users in one test would both end
    // up with the last token.
    auth: { headers: token ? { Authorization: `Bearer ${token}` } : {} },
    userAuthentication: {
      endpoint: authApp ? `${authApp.url}/broadcasting/user-auth` : '/broadcasting/user-auth',
      headers: token ? { Authorization: `Bearer ${token}` } : {},
    },
    withoutInterceptors: true,
    ...extra,
  });
}

/** Resolves once an Echo channel reports subscribed (rejects on .error). */
function echoSubscribed(channel, ms = WAIT_MS) {
  // Already subscribed (the underlying pusher-js channel says so): the callback would never fire.
  if (channel.subscription && channel.subscription.subscribed) return Promise.resolve(channel);
  return deadline(
    new Promise((resolve, reject) => {
      channel.subscribed(() => resolve(channel));
      channel.error((err) => reject(new Error(`Echo channel error: ${JSON.stringify(err)}`)));
    }),
    ms,
    'Echo channel subscribed',
  );
}

module.exports = {
  Pusher,
  PusherServer,
  sdk,
  outcome,
  apiGet,
  socketOptions,
  pusherClient,
  whenConnected,
  state,
  subscribe,
  inbox,
  loadEcho,
  echoClient,
  echoSubscribed,
};
