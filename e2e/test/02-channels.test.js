'use strict';
// Public and private channels: subscribing with pusher-js, Echo and raw frames, delivery of
// events triggered through the server SDK, authorization failures and unsubscribe.
const { describe, test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { startServer } = require('../lib/server');
const { Wire, signer } = require('../lib/wire');
const { sdk, pusherClient, whenConnected, subscribe, inbox, echoClient, echoSubscribed, state } = require('../lib/clients');
const { startAuthApp } = require('../lib/authapp');
const { cleanup, uid, quiet, deadline, WAIT_MS } = require('../lib/util');

const APPS = [
  { app_id: 'ch1', key: 'ch1-key', secret: 'ch1-secret' },
  { app_id: 'ch2', key: 'ch2-key', secret: 'ch2-secret' },
];

let server;
let api;
let authApp;
before(async () => {
  server = await startServer({ apps: APPS });
  api = sdk(server);
  authApp = await startAuthApp({
    sdk: api,
    users: { 'token-1': { id: '1', info: { name: 'Ada' } } },
    deny: (channel) => channel.includes('forbidden'),
  });
});
after(async () => {
  await authApp.close();
  await server.stop();
});

async function connectedPusher(t, opts) {
  const p = pusherClient(server, opts);
  cleanup(t).add(() => p.disconnect());
  await whenConnected(p);
  return p;
}

async function wire(t, opts) {
  const w = await Wire.connect(server, opts);
  cleanup(t).add(() => w.close());
  return w;
}

describe('public channels', () => {
  test('pusher-js receives an event triggered through the SDK (object and string data)', async (t) => {
    const p = await connectedPusher(t);
    const name = uid('news-');
    const { channel } = await subscribe(p, name);
    const got = inbox(channel, 'headline');
    await api.trigger(name, 'headline', { title: 'Hello', n: 1, nested: { ok: true } });
    await api.trigger(name, 'headline', 'just a string');
    const [a, b] = await got.wait(2);
    assert.deepEqual(a, { title: 'Hello', n: 1, nested: { ok: true } });
    assert.equal(b, 'just a string');
  });

  test('wire format: subscription_succeeded and events carry string data and no null fields', async (t) => {
    const w = await wire(t);
    const name = uid('wire-');
    const ok = await w.subscribe(name);
    assert.deepEqual(ok.msg, { event: 'pusher_internal:subscription_succeeded', channel: name, data: '{}' });
    await api.trigger(name, 'tick', { a: 1, s: 'é ✓ "quoted"' });
    const ev = await w.next({ event: 'tick', channel: name });
    assert.deepEqual(Object.keys(ev.msg).sort(), ['channel', 'data', 'event']);
    assert.equal(ev.dataIsString, true);
    assert.deepEqual(ev.data, { a: 1, s: 'é ✓ "quoted"' });
  });

  test('subscribe data given as a JSON string (Java/Flutter clients) is accepted', async (t) => {
    const w = await wire(t);
    const name = uid('str-');
    w.send({ event: 'pusher:subscribe', data: JSON.stringify({ channel: name }) });
    await w.next({ event: 'pusher_internal:subscription_succeeded', channel: name });
  });

  test('every subscriber gets the event, other channels and other apps do not', async (t) => {
    const name = uid('fan-');
    const subs = [];
    for (let i = 0; i < 4; i++) {
      const w = await wire(t);
      await w.subscribe(name);
      subs.push(w);
    }
    const elsewhere = await wire(t);
    await elsewhere.subscribe(uid('other-'));
    const otherApp = await wire(t, { app: APPS[1] });
    await otherApp.subscribe(name); // same name, different app
    await api.trigger(name, 'fan', { i: 1 });
    for (const w of subs) await w.next({ event: 'fan', channel: name });
    assert.deepEqual(await elsewhere.none('fan'), []);
    assert.deepEqual(await otherApp.none('fan', 50), []);
  });

  test('unsubscribe stops delivery (pusher-js and raw)', async (t) => {
    const p = await connectedPusher(t);
    const w = await wire(t);
    const name = uid('unsub-');
    const { channel } = await subscribe(p, name);
    await w.subscribe(name);
    const got = inbox(channel, 'e');
    await api.trigger(name, 'e', { n: 1 });
    await got.wait(1);
    await w.next('e');
    p.unsubscribe(name);
    w.send({ event: 'pusher:unsubscribe', data: { channel: name } });
    await w.roundTrip(); // the unsubscribe has been processed
    await deadline(
      (async () => {
        for (;;) {
          const res = await (await api.get({ path: `/channels/${name}` })).json();
          if (!res.occupied) return;
          await quiet(25);
        }
      })(),
      WAIT_MS,
      'channel to become unoccupied',
    );
    await api.trigger(name, 'e', { n: 2 });
    assert.deepEqual(await w.none('e'), []);
    assert.equal(got.got.length, 1);
  });

  test('invalid channel names are refused and the socket stays open', async (t) => {
    const w = await wire(t);
    for (const bad of ['has space', 'x'.repeat(165), 'emoji-☃', 'a/b']) {
      const res = await w.subscribe(bad);
      assert.equal(res.event, 'pusher:error', `expected an error for ${JSON.stringify(bad)}`);
      assert.ok([4009, 4200].includes(res.data.code), `code for ${bad}: ${res.data.code}`);
    }
    const longest = 'x'.repeat(164);
    assert.equal((await w.subscribe(longest)).event, 'pusher_internal:subscription_succeeded');
    const odd = '-_=@,.;AZaz09';
    assert.equal((await w.subscribe(odd)).event, 'pusher_internal:subscription_succeeded');
  });
});

describe('private channels', () => {
  test('pusher-js subscribes with an SDK-signed auth and receives events', async (t) => {
    const p = await connectedPusher(t);
    const name = uid('private-orders-');
    const { channel } = await subscribe(p, name);
    const got = inbox(channel, 'paid');
    await api.trigger(name, 'paid', { id: 7 });
    assert.deepEqual((await got.wait(1))[0], { id: 7 });
  });

  test('bad, missing, foreign-socket and foreign-app signatures → 4009, connection stays open', async (t) => {
    const w = await wire(t);
    const other = await wire(t);
    const name = uid('private-x-');
    const app = APPS[0];
    const cases = {
      missing: {},
      garbage: { auth: `${app.key}:deadbeef` },
      'other socket': signer(app).authorizeChannel(other.socketId, name),
      'other app': signer(APPS[1]).authorizeChannel(w.socketId, name),
      'other channel': signer(app).authorizeChannel(w.socketId, `${name}-2`),
    };
    for (const [label, extra] of Object.entries(cases)) {
      const res = await w.subscribe(name, extra);
      assert.equal(res.event, 'pusher:error', label);
      assert.deepEqual(res.data, { code: 4009, message: 'Connection is unauthorized' }, label);
    }
    assert.equal((await w.authSubscribe(name)).event, 'pusher_internal:subscription_succeeded');
    await api.trigger(name, 'after', {});
    await w.next('after');
  });

  test('pusher-js reports the 4009 refusal and the channel stays unsubscribed', async (t) => {
    const p = await connectedPusher(t, {
      options: {
        channelAuthorization: { customHandler: (_params, cb) => cb(null, { auth: 'ch1-key:0000' }) },
      },
    });
    const errors = inbox(p.connection, 'error');
    const channel = p.subscribe(uid('private-nope-'));
    const [e] = await errors.wait(1);
    assert.equal(e.data.code, 4009);
    assert.equal(channel.subscribed, false);
    assert.equal(p.connection.state, 'connected');
  });
});

describe('Laravel Echo', () => {
  test('Echo.channel().listen() gets Laravel-namespaced and dot-prefixed events', async (t) => {
    const echo = await echoClient(server);
    cleanup(t).add(() => echo.disconnect());
    const name = uid('orders-');
    const ch = echo.channel(name);
    const namespaced = inbox(null, 'OrderShipped', (fn) => ch.listen('OrderShipped', fn));
    const raw = inbox(null, '.custom.name', (fn) => ch.listen('.custom.name', fn));
    await echoSubscribed(ch);
    await api.trigger(name, 'App\\Events\\OrderShipped', { order: { id: 5 } });
    await api.trigger(name, 'custom.name', { ok: 1 });
    assert.deepEqual((await namespaced.wait(1))[0], { order: { id: 5 } });
    assert.deepEqual((await raw.wait(1))[0], { ok: 1 });
  });

  test('Echo.private() authorizes through the app\'s /broadcasting/auth endpoint', async (t) => {
    const echo = await echoClient(server, { authApp, token: 'token-1' });
    cleanup(t).add(() => echo.disconnect());
    const name = uid('user.');
    const ch = echo.private(name);
    const got = inbox(null, '.Ping', (fn) => ch.listen('.Ping', fn));
    await echoSubscribed(ch);
    const authCall = authApp.requests.find((r) => r.url === '/broadcasting/auth' && r.body.includes(encodeURIComponent(`private-${name}`)));
    assert.ok(authCall, 'pusher-js called the auth endpoint');
    assert.equal(authCall.headers.authorization, 'Bearer token-1');
    await api.trigger(`private-${name}`, 'Ping', { n: 1 });
    assert.deepEqual((await got.wait(1))[0], { n: 1 });
  });

  test('a 403 from the auth endpoint reaches Echo\'s .error() and nothing is subscribed', async (t) => {
    const echo = await echoClient(server, { authApp, token: 'token-1' });
    cleanup(t).add(() => echo.disconnect());
    await state(echo.connector.pusher, 'connected');
    const name = uid('forbidden.');
    const ch = echo.private(name);
    const errs = inbox(null, 'error', (fn) => ch.error(fn));
    const [err] = await errs.wait(1);
    assert.equal(err.status, 403);
    const res = await (await api.get({ path: `/channels/private-${name}` })).json();
    assert.equal(res.occupied, false);
  });
});
