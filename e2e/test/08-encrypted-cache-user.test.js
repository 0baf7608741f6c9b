'use strict';
// End-to-end encrypted channels, cache channels (cache_miss and replay of the last event),
// user authentication (signin, #server-to-user-*, sendToUser) and terminate_connections.
const { describe, test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const { startServer } = require('../lib/server');
const { Wire, signer } = require('../lib/wire');
const { sdk, outcome, apiGet, pusherClient, whenConnected, subscribe, inbox, state, echoClient, echoSubscribed } = require('../lib/clients');
const { startAuthApp } = require('../lib/authapp');
const { cleanup, uid, eventually, quiet } = require('../lib/util');

const MASTER_KEY = crypto.randomBytes(32).toString('base64');
const APPS = [
  { app_id: 'x1', key: 'x1-key', secret: 'x1-secret' },
  { app_id: 'x2', key: 'x2-key', secret: 'x2-secret', enable_user_authentication: false },
  { app_id: 'x3', key: 'x3-key', secret: 'x3-secret', accept_client_events_from: 'all' },
];
const ENC = { encryptionMasterKeyBase64: MASTER_KEY };

let server;
let api; // SDK holding the encryption master key, as the Laravel app would
before(async () => {
  server = await startServer({ apps: APPS });
  api = sdk(server, APPS[0], ENC);
});
after(async () => {
  await server.stop();
});

async function wire(t, app = APPS[0]) {
  const w = await Wire.connect(server, { app });
  cleanup(t).add(() => w.close());
  return w;
}

async function connected(t, opts) {
  const p = pusherClient(server, opts);
  cleanup(t).add(() => p.disconnect());
  await whenConnected(p);
  return p;
}

describe('private-encrypted channels', () => {
  test('the SDK encrypts, the server relays ciphertext, pusher-js decrypts', async (t) => {
    const name = uid('private-encrypted-vault-');
    const p = await connected(t, { sdkExtra: ENC });
    const { channel } = await subscribe(p, name);
    const got = inbox(channel, 'secret');
    const raw = await wire(t);
    assert.equal((await raw.subscribe(name, signer(APPS[0], ENC).authorizeChannel(raw.socketId, name))).event, 'pusher_internal:subscription_succeeded');

    assert.equal((await outcome(api.trigger(name, 'secret', { pin: '0000', note: 'top secret' }))).status, 200);
    assert.deepEqual((await got.wait(1))[0], { pin: '0000', note: 'top secret' });
    const onWire = await raw.next('secret');
    assert.deepEqual(Object.keys(onWire.data).sort(), ['ciphertext', 'nonce']);
    assert.equal(onWire.text.includes('top secret'), false, 'no plaintext on the wire');
  });

  test('Echo.encryptedPrivate() through the app\'s auth endpoint (shared_secret) decrypts too', async (t) => {
    const bag = cleanup(t);
    const laravel = await startAuthApp({ sdk: api, users: { tok: { id: '9' } } });
    bag.add(() => laravel.close());
    const echo = await echoClient(server, { authApp: laravel, token: 'tok' });
    bag.add(() => echo.disconnect());
    const name = uid('ledger-');
    const ch = echo.encryptedPrivate(name);
    const got = inbox(null, '.Balance', (fn) => ch.listen('.Balance', fn));
    await echoSubscribed(ch);
    await api.trigger(`private-encrypted-${name}`, 'Balance', { cents: 4200 });
    assert.deepEqual((await got.wait(1))[0], { cents: 4200 });
  });

  test('client events are refused on encrypted channels, even with accept_client_events_from: all', async (t) => {
    for (const app of [APPS[0], APPS[2]]) {
      const name = uid('private-encrypted-ce-');
      const a = await wire(t, app);
      const b = await wire(t, app);
      for (const w of [a, b]) {
        const signed = signer(app, ENC).authorizeChannel(w.socketId, name);
        assert.equal((await w.subscribe(name, signed)).event, 'pusher_internal:subscription_succeeded');
      }
      a.send({ event: 'client-leak', channel: name, data: { plain: 'text' } });
      const err = await a.next('pusher:error');
      assert.equal(err.data.code, 4301, `${app.app_id}: ${err.text}`);
      assert.deepEqual(await b.none('client-leak'), [], app.app_id);
    }
  });

  test('subscribing without a valid auth → 4009', async (t) => {
    const w = await wire(t);
    const res = await w.subscribe(uid('private-encrypted-noauth-'));
    assert.equal(res.event, 'pusher:error');
    assert.equal(res.data.code, 4009);
  });
});

describe('cache channels', () => {
  test('cache-: the first subscriber gets pusher:cache_miss right after subscription_succeeded', async (t) => {
    const name = uid('cache-miss-');
    const w = await wire(t);
    const ok = await w.subscribe(name);
    assert.equal(ok.event, 'pusher_internal:subscription_succeeded');
    const miss = await w.next('pusher:cache_miss');
    assert.deepEqual(miss.msg, { event: 'pusher:cache_miss', channel: name });
    const order = w.frames.map((f) => f.event);
    assert.deepEqual(order.slice(-2), ['pusher_internal:subscription_succeeded', 'pusher:cache_miss']);

    const p = await connected(t);
    const missed = inbox(p, 'pusher:cache_miss');
    await subscribe(p, uid('cache-miss-pjs-'));
    await missed.wait(1);
  });

  test('cache-: a late subscriber gets exactly the last event, byte for byte, and no cache_miss', async (t) => {
    const name = uid('cache-last-');
    const live = await wire(t);
    await live.subscribe(name);
    await live.next('pusher:cache_miss');
    await api.trigger(name, 'price', { v: 1 });
    await api.trigger(name, 'price', { v: 2 });
    await live.next('price');
    const last = await live.next('price');
    assert.deepEqual(last.data, { v: 2 });

    const late = await wire(t);
    await late.subscribe(name);
    const replay = await late.next('price');
    assert.equal(replay.text, last.text, 'the replay is the broadcast frame verbatim');
    assert.deepEqual(await late.none((f) => f.event === 'price' || f.event === 'pusher:cache_miss'), []);

    const p = await connected(t);
    const got = inbox(p.subscribe(name), 'price'); // bound before the replay can arrive
    assert.deepEqual((await got.wait(1))[0], { v: 2 });
  });

  test('cache replay also works when nobody was subscribed at trigger time', async (t) => {
    const name = uid('cache-empty-');
    await api.trigger(name, 'state', { on: true });
    const w = await wire(t);
    await w.subscribe(name);
    assert.deepEqual((await w.next('state')).data, { on: true });
  });

  test('private-cache- with pusher-js and presence-cache- on the wire replay after auth', async (t) => {
    const priv = uid('private-cache-doc-');
    await api.trigger(priv, 'rev', { r: 3 });
    const p = await connected(t);
    const chan = p.subscribe(priv);
    const got = inbox(chan, 'rev');
    assert.deepEqual((await got.wait(1))[0], { r: 3 });

    const pres = uid('presence-cache-room-');
    const first = await wire(t);
    assert.equal((await first.authSubscribe(pres, { user_id: 'a' })).event, 'pusher_internal:subscription_succeeded');
    await first.next('pusher:cache_miss');
    await api.trigger(pres, 'topic', { t: 'hello' });
    const second = await wire(t);
    const ok = await second.authSubscribe(pres, { user_id: 'b' });
    assert.equal(ok.data.presence.count, 2);
    assert.deepEqual((await second.next('topic')).data, { t: 'hello' });
  });
});

// Pusher's cache channel contract (pusher.com/docs/channels/using_channels/cache-channels):
// "A cache channel remembers the last triggered event, and sends this as the first event to
// new subscribers"; "we do not cache client events"; the cache prefixes are cache-,
// private-cache-, private-encrypted-cache- and presence-cache-.
describe('cache channels: what is (not) the "last triggered event"', () => {
  test('presence-cache-: the replay is the last app event, not a pusher_internal member event', async (t) => {
    const room = uid('presence-cache-lobby-');
    const a = await wire(t);
    await a.authSubscribe(room, { user_id: 'a' });
    await api.trigger(room, 'topic', { t: 'hello' });
    await a.next('topic');
    const b = await wire(t);
    await b.authSubscribe(room, { user_id: 'b' }); // its member_added goes to a
    assert.deepEqual((await b.next('topic')).data, { t: 'hello' });
    await a.next('pusher_internal:member_added');

    const c = await wire(t);
    const ok = await c.authSubscribe(room, { user_id: 'c' });
    assert.equal(ok.event, 'pusher_internal:subscription_succeeded');
    const first = await c.next((f) => f.event !== 'pusher:connection_established');
    assert.equal(first.event, 'topic', `replayed instead of the last triggered event: ${first.text}`);
  });

  test('presence-cache-: a user who rejoins is not told that it left (pusher-js keeps itself in members)', async (t) => {
    const room = uid('presence-cache-desk-');
    const alice = await connected(t, { user: { id: 'alice' } });
    await subscribe(alice, room);
    const bob = await connected(t, { user: { id: 'bob' } });
    await subscribe(bob, room);
    bob.disconnect(); // member_removed(bob) is broadcast to alice
    await eventually(async () => (await apiGet(api, `/channels/${room}/users`)).users.length === 1, { what: 'bob gone' });

    const bobAgain = await connected(t, { user: { id: 'bob' } });
    const channel = bobAgain.subscribe(room);
    const removed = inbox(channel, 'pusher:member_removed');
    await eventually(() => channel.subscribed, { what: 'bob resubscribed' });
    await quiet();
    assert.deepEqual(removed.got, [], 'bob must not receive a member_removed about a past session');
    assert.equal(channel.members.count, 2);
    assert.notEqual(channel.members.get('bob'), null, 'bob is in his own member list');
  });

  test('private-cache-: client events are not cached; the late subscriber gets the last server event', async (t) => {
    const name = uid('private-cache-doc-');
    const p1 = await wire(t);
    const p2 = await wire(t);
    await p1.authSubscribe(name);
    await p2.authSubscribe(name);
    await p1.next('pusher:cache_miss');
    await p2.next('pusher:cache_miss');
    await api.trigger(name, 'saved', { rev: 1 });
    await p1.next('saved');
    p1.send({ event: 'client-typing', channel: name, data: { who: 'p1' } });
    await p2.next('client-typing');

    const late = await wire(t);
    await late.authSubscribe(name);
    const first = await late.next((f) => f.event !== 'pusher:connection_established');
    assert.equal(first.event, 'saved', `replayed: ${first.text}`);
  });

  test('private-encrypted-cache-: cache_miss, then the encrypted last event is replayed and pusher-js decrypts it', async (t) => {
    const name = uid('private-encrypted-cache-vault-');
    const first = await wire(t);
    assert.equal((await first.subscribe(name, signer(APPS[0], ENC).authorizeChannel(first.socketId, name))).event, 'pusher_internal:subscription_succeeded');
    const miss = await first.next((f) => f.event !== 'pusher:connection_established', 1000).catch(() => null);
    assert.equal(miss && miss.event, 'pusher:cache_miss', 'an empty encrypted cache channel answers pusher:cache_miss');
    await api.trigger(name, 'balance', { cents: 99 });
    await first.next('balance');

    const p = await connected(t, { sdkExtra: ENC });
    const got = inbox(p.subscribe(name), 'balance');
    assert.deepEqual((await got.wait(1, 2000))[0], { cents: 99 }, 'the late subscriber gets the cached (encrypted) event');
  });
});

describe('user authentication and server-to-user messages', () => {
  test('pusher-js signin() then sendToUser reaches every socket of that user only', async (t) => {
    const alice1 = await connected(t, { user: { id: 'alice', info: { name: 'Alice' } } });
    const alice2 = await connected(t, { user: { id: 'alice' } });
    const bob = await connected(t, { user: { id: 'bob' } });
    for (const p of [alice1, alice2, bob]) p.signin();
    await Promise.all([alice1, alice2, bob].map((p) => p.user.signinDonePromise));
    assert.equal(alice1.user.user_data.id, 'alice');
    const inboxes = [alice1, alice2, bob].map((p) => inbox(p.user, 'notice'));
    // wait until the server knows both #server-to-user subscriptions
    await eventually(async () => (await apiGet(api, `/channels/${encodeURIComponent('#server-to-user-alice')}`, { info: 'subscription_count' })).subscription_count === 2, { what: 'two alice sockets on #server-to-user-alice' });
    assert.equal((await outcome(api.sendToUser('alice', 'notice', { text: 'hi Alice' }))).status, 200);
    assert.deepEqual((await inboxes[0].wait(1))[0], { text: 'hi Alice' });
    assert.deepEqual((await inboxes[1].wait(1))[0], { text: 'hi Alice' });
    assert.deepEqual(await inboxes[2].none(), []);
  });

  test('Echo/pusher-js signin through the app\'s user-auth endpoint', async (t) => {
    const bag = cleanup(t);
    const laravel = await startAuthApp({ sdk: api, users: { 'tok-7': { id: '7', info: { name: 'Seven' } } } });
    bag.add(() => laravel.close());
    const echo = await echoClient(server, { authApp: laravel, token: 'tok-7' });
    bag.add(() => echo.disconnect());
    const pusher = echo.connector.pusher;
    await state(pusher, 'connected');
    echo.connector.signin();
    await pusher.user.signinDonePromise;
    assert.equal(pusher.user.user_data.id, '7');
    const got = inbox(pusher.user, 'App\\Notifications\\Ping');
    await eventually(async () => (await apiGet(api, `/channels/${encodeURIComponent('#server-to-user-7')}`)).occupied, { what: '#server-to-user-7 occupied' });
    await api.sendToUser('7', 'App\\Notifications\\Ping', { n: 1 });
    assert.deepEqual((await got.wait(1))[0], { n: 1 });
  });

  test('wire: signin_success, own #server-to-user channel only, bad signature → 4009', async (t) => {
    const w = await wire(t);
    const before = await w.subscribe('#server-to-user-u1');
    assert.equal(before.event, 'pusher:error', 'not signed in yet');
    assert.equal(before.data.code, 4009);

    w.send({ event: 'pusher:signin', data: { auth: `${APPS[0].key}:${'a'.repeat(64)}`, user_data: '{"id":"u1"}' } });
    const bad = await w.next('pusher:error');
    assert.equal(bad.data.code, 4009);

    const signed = signer(APPS[0]).authenticateUser(w.socketId, { id: 'u1', user_info: { n: 1 } });
    w.send({ event: 'pusher:signin', data: signed });
    const ok = await w.next('pusher:signin_success');
    assert.equal(ok.dataIsString, true);
    assert.deepEqual(ok.data, { user_data: signed.user_data });

    assert.equal((await w.subscribe('#server-to-user-u1')).event, 'pusher_internal:subscription_succeeded');
    const other = await w.subscribe('#server-to-user-u2');
    assert.equal(other.event, 'pusher:error');
    assert.equal(other.data.code, 4009);
    await api.sendToUser('u1', 'direct', { only: 'u1' });
    const msg = await w.next('direct');
    assert.equal(msg.channel, '#server-to-user-u1');
    assert.deepEqual(msg.data, { only: 'u1' });
  });

  test('enable_user_authentication: false refuses pusher:signin', async (t) => {
    const app = APPS[1];
    const w = await wire(t, app);
    w.send({ event: 'pusher:signin', data: signer(app).authenticateUser(w.socketId, { id: 'u' }) });
    const err = await w.next((f) => f.event === 'pusher:error' || f.event === 'pusher:signin_success');
    assert.equal(err.event, 'pusher:error');
    assert.equal(err.data.code, 4009);
    assert.equal((await w.subscribe('#server-to-user-u')).event, 'pusher:error');
  });
});

describe('terminate_connections', () => {
  test('closes every socket of the user (signed-in and presence) with 4009; others stay', async (t) => {
    const room = uid('presence-term-');
    const carol = await wire(t);
    assert.equal((await carol.authSubscribe(room, { user_id: 'carol' })).event, 'pusher_internal:subscription_succeeded');
    const bobPresence = await wire(t);
    assert.equal((await bobPresence.authSubscribe(room, { user_id: 'bob' })).event, 'pusher_internal:subscription_succeeded');
    await carol.next('pusher_internal:member_added');
    const bobJs = await connected(t, { user: { id: 'bob' } });
    bobJs.signin();
    await bobJs.user.signinDonePromise;
    await eventually(async () => (await apiGet(api, `/channels/${encodeURIComponent('#server-to-user-bob')}`)).occupied, { what: 'bob signed in' });
    const bobErrors = inbox(bobJs.connection, 'error');
    const bobConnecting = inbox(bobJs.connection, 'connecting');

    assert.deepEqual(await outcome(api.terminateUserConnections('bob')), { status: 200, body: {} });
    const err = await bobPresence.next('pusher:error');
    assert.equal(err.data.code, 4009);
    assert.equal((await bobPresence.waitClosed()).code, 4009);
    await bobErrors.wait(1);
    await eventually(() => bobJs.connection.state === 'disconnected' || bobJs.connection.state === 'failed', { what: 'pusher-js to stop' });
    const removed = await carol.next('pusher_internal:member_removed');
    assert.deepEqual(removed.data, { user_id: 'bob' });
    await quiet();
    assert.equal(bobConnecting.got.length, 0, 'pusher-js does not reconnect after 4009');
    assert.equal(carol.open, true);
    await carol.roundTrip();
    assert.deepEqual((await apiGet(api, `/channels/${room}/users`)).users, [{ id: 'carol' }]);
  });

  test('terminating a user without connections answers {}', async () => {
    assert.deepEqual(await outcome(api.terminateUserConnections('nobody-here')), { status: 200, body: {} });
  });
});
