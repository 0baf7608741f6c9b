// Test helpers: the built reverbgo binary (started with e2e/lib/server.js, the repository's
// one way of starting it), a TCP proxy for network faults (e2e/lib/tcpproxy.js), and this
// package's own pusher-js 8.6.0, laravel-echo 2.5.0 and pusher SDK 5.3.4.
//
// REC_WITHOUT_MODULE=1 runs the same tests with enableRecovery left out: they must fail
// (that is how each one was seen to fail).
import { createRequire } from 'node:module';
import Pusher from 'pusher-js';
import PusherServer from 'pusher';
import Echo from 'laravel-echo';
import { enableRecovery } from '../index.js';

const require = createRequire(import.meta.url);
const { startServer, freePort } = require('../../../e2e/lib/server.js');
const { startProxy } = require('../../../e2e/lib/tcpproxy.js');
const { startAuthApp } = require('../../../e2e/lib/authapp.js');
const util = require('../../../e2e/lib/util.js');

export { Pusher, startServer, freePort, startProxy, startAuthApp };
export const { WAIT_MS, sleep, uid, deadline, eventually, cleanup } = util;
export const withoutModule = process.env.REC_WITHOUT_MODULE === '1';

// The WebSocket of pusher-js's Node build (faye-websocket) arms a 30 s timer in close() even
// on a socket already closed, which keeps node alive after a test; closing a closed socket
// is made a no-op (test harness only, as in e2e/lib/clients.js).
{
  const WebSocketAPI = Pusher.Runtime.getWebSocketAPI();
  const close = WebSocketAPI.prototype.close;
  WebSocketAPI.prototype.close = function closeUnlessClosed(...args) {
    if (this.readyState === (WebSocketAPI.CLOSED ?? 3)) return undefined;
    return close.apply(this, args);
  };
}

export const APPS = [
  { app_id: 'rec', key: 'rec-key', secret: 'rec-secret', recovery: { enabled: true, history_size: 1000 } },
  { app_id: 'small', key: 'small-key', secret: 'small-secret', recovery: { enabled: true, history_size: 10, channels: ['private-*'] } },
  { app_id: 'ttl', key: 'ttl-key', secret: 'ttl-secret', recovery: { enabled: true, history_ttl: 1 } },
];

/** One node with recovery on (apps above); server: extra server.* keys (e.g. a fixed port). */
export function startRecoveryServer(server = {}) {
  return startServer({ apps: APPS, server, nodes: 1 });
}

/** The pusher server SDK (HTTP API) for app of a server listening on port. */
export function sdk(port, app = APPS[0]) {
  return new PusherServer({ appId: app.app_id, key: app.key, secret: app.secret, host: '127.0.0.1', port: String(port), useTLS: false, timeout: WAIT_MS });
}

function socketOptions(port) {
  return { cluster: 'mt1', wsHost: '127.0.0.1', wsPort: port, forceTLS: false, enabledTransports: ['ws'], enableStats: false };
}

/** The module, unless REC_WITHOUT_MODULE=1. */
export function recover(pusher, options) {
  return withoutModule ? { position: () => undefined, disable() {} } : enableRecovery(pusher, options);
}

/** pusher-js with recovery on, connecting to port; private channels signed in-process. */
export function pusherClient(port, { app = APPS[0], signPort = port, options = {}, recovery: recoveryOptions } = {}) {
  const signer = sdk(signPort, app);
  const pusher = new Pusher(app.key, {
    ...socketOptions(port),
    channelAuthorization: {
      customHandler: ({ socketId, channelName }, cb) => cb(null, signer.authorizeChannel(socketId, channelName)),
    },
    ...options,
  });
  const recovery = recover(pusher, recoveryOptions);
  return { pusher, recovery };
}

/** Laravel Echo (broadcaster reverb) authorizing through authApp, with the module's one call. */
export function echoClient(port, authApp, { app = APPS[0], options = {}, recovery: recoveryOptions } = {}) {
  const echo = new Echo({
    broadcaster: 'reverb',
    Pusher,
    key: app.key,
    ...socketOptions(port),
    authEndpoint: `${authApp.url}/broadcasting/auth`,
    auth: { headers: {} },
    withoutInterceptors: true,
    ...options,
  });
  const recovery = recover(echo.connector.pusher, recoveryOptions);
  return { echo, pusher: echo.connector.pusher, recovery };
}

/** Resolves once pusher.connection.state === want. */
export function state(pusher, want, ms = WAIT_MS) {
  if (pusher.connection.state === want) return Promise.resolve();
  return deadline(
    new Promise((resolve) => {
      const fn = ({ current }) => {
        if (current === want) {
          pusher.connection.unbind('state_change', fn);
          resolve();
        }
      };
      pusher.connection.bind('state_change', fn);
    }),
    ms,
    `pusher-js state ${want} (now ${pusher.connection.state})`,
  );
}

/** Resolves once the connection left "connected" and came back (a new socket id). */
export async function reconnected(pusher, ms = WAIT_MS) {
  const before = pusher.connection.socket_id;
  await eventually(() => pusher.connection.state === 'connected' && pusher.connection.socket_id !== before, { ms, what: 'a reconnect with a new socket id' });
}

/** Collects what bind(push) delivers; wait(n) resolves once n arrived. */
export function inbox(bind) {
  const got = [];
  bind((data) => got.push(data));
  return {
    got,
    wait: (n, ms = WAIT_MS) => eventually(() => got.length >= n, { ms, what: `${n} events` }).then(() => got.slice()),
  };
}

/** Subscribes with pusher-js and resolves the channel on subscription_succeeded. */
export function subscribed(channel, ms = WAIT_MS) {
  if (channel.subscribed) return Promise.resolve(channel);
  return deadline(new Promise((resolve) => channel.bind('pusher:subscription_succeeded', () => resolve(channel))), ms, `subscription to ${channel.name}`);
}

/**
 * Publishes {n: 1, 2, ...} as event `ev` on channel through the HTTP API, one request at a
 * time, every `every` ms, until stop() (which resolves the number published).
 */
export function publisher(api, channel, { every = 10, event = 'ev' } = {}) {
  let n = 0;
  let running = true;
  const loop = (async () => {
    while (running) {
      n += 1;
      await api.trigger(channel, event, { n });
      await sleep(every);
    }
  })();
  return {
    get count() {
      return n;
    },
    async stop() {
      running = false;
      await loop;
      return n;
    },
  };
}

/** Asserts helper: [1..n] exactly, in order. */
export function sequence(n) {
  return Array.from({ length: n }, (_, i) => i + 1);
}
