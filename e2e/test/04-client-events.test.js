'use strict';
// Client events ("whispers"): relayed to the other members only, with user_id on presence,
// refused on public channels and from non-members, and the per-app policy and rate limit
// (accept_client_events_from members | all | none, client_event_rate_limit).
const { describe, test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { startServer } = require('../lib/server');
const { Wire } = require('../lib/wire');
const { sdk, pusherClient, whenConnected, subscribe, inbox, echoClient, echoSubscribed } = require('../lib/clients');
const { startAuthApp } = require('../lib/authapp');
const { cleanup, uid, sleep, eventually } = require('../lib/util');

const APPS = [
  { app_id: 'ce', key: 'ce-key', secret: 'ce-secret', accept_client_events_from: 'members' },
  { app_id: 'ceall', key: 'ceall-key', secret: 'ceall-secret', accept_client_events_from: 'all' },
  { app_id: 'cenone', key: 'cenone-key', secret: 'cenone-secret', accept_client_events_from: 'none' },
  { app_id: 'cerate', key: 'cerate-key', secret: 'cerate-secret', client_event_rate_limit: 2 },
  { app_id: 'ceunl', key: 'ceunl-key', secret: 'ceunl-secret', client_event_rate_limit: 0 },
];
const byId = (id) => APPS.find((a) => a.app_id === id);

let server;
let authApp;
before(async () => {
  server = await startServer({ apps: APPS });
  authApp = await startAuthApp({
    sdk: sdk(server),
    users: { 'tok-1': { id: '1', info: { name: 'Ada' } }, 'tok-2': { id: '2', info: { name: 'Bob' } } },
  });
});
after(async () => {
  await authApp.close();
  await server.stop();
});

async function wire(t, app = APPS[0]) {
  const w = await Wire.connect(server, { app });
  cleanup(t).add(() => w.close());
  return w;
}

async function subscribed(w, channel, presence) {
  const res = channel.startsWith('private-') || channel.startsWith('presence-') ? await w.authSubscribe(channel, presence) : await w.subscribe(channel);
  assert.equal(res.event, 'pusher_internal:subscription_succeeded', res.text);
}

/**
 * Sends a burst of n client events from a and counts, once every one is accounted for, how
 * many b received and how many a got 4301 for. The limit's windows are wall-clock seconds of
 * the server, which a black-box test cannot set: so the assertions hold wherever the burst
 * falls, as long as it lasts under a second (then it spans at most two windows).
 */
async function burst(a, b, name, n) {
  const fromA = a.frames.length;
  const fromB = b.frames.length;
  for (let i = 1; i <= n; i++) a.send({ event: 'client-n', channel: name, data: { n: i } });
  const count = () => {
    const got = b.frames.slice(fromB).filter((f) => f.event === 'client-n' && f.channel === name).map((f) => f.data.n);
    const errors = a.frames.slice(fromA).filter((f) => f.event === 'pusher:error');
    return { got, errors };
  };
  await eventually(() => {
    const { got, errors } = count();
    return got.length + errors.length >= n;
  }, { what: `all ${n} events relayed or refused` });
  const { got, errors } = count();
  for (const e of errors) assert.equal(e.data.code, 4301, e.text);
  // Take what was counted out of the inboxes so later next()/none() start after the burst.
  b.inbox = b.inbox.filter((f) => !(f.event === 'client-n' && f.channel === name));
  a.inbox = a.inbox.filter((f) => f.event !== 'pusher:error');
  return { got, refused: errors.length };
}

describe('Echo whispers', () => {
  test('whisper on a private channel reaches listenForWhisper of the other client only', async (t) => {
    const bag = cleanup(t);
    const name = uid('chat.');
    const ada = await echoClient(server, { authApp, token: 'tok-1' });
    bag.add(() => ada.disconnect());
    const bob = await echoClient(server, { authApp, token: 'tok-2' });
    bag.add(() => bob.disconnect());
    const adaCh = ada.private(name);
    const bobCh = bob.private(name);
    const adaGot = inbox(adaCh, 'typing', (fn) => adaCh.listenForWhisper('typing', fn));
    const bobGot = inbox(null, 'typing', (fn) => bobCh.listenForWhisper('typing', fn));
    await echoSubscribed(adaCh);
    await echoSubscribed(bobCh);
    adaCh.whisper('typing', { name: 'Ada', typing: true });
    assert.deepEqual((await bobGot.wait(1))[0], { name: 'Ada', typing: true });
    assert.deepEqual(await adaGot.none(), [], 'not echoed to the sender');
  });

  test('whisper on a presence channel carries the sender user_id (pusher-js metadata)', async (t) => {
    const bag = cleanup(t);
    const room = uid('room.');
    const ada = await echoClient(server, { authApp, token: 'tok-1' });
    bag.add(() => ada.disconnect());
    const bob = await echoClient(server, { authApp, token: 'tok-2' });
    bag.add(() => bob.disconnect());
    const adaRoom = ada.join(room);
    await inbox(null, 'here', (fn) => adaRoom.here(fn)).wait(1);
    const bobRoom = bob.join(room);
    await inbox(null, 'here', (fn) => bobRoom.here(fn)).wait(1);
    // Echo hides the metadata; bind on the underlying pusher-js channel to see it.
    const raw = inbox(bob.connector.pusher.channel(`presence-${room}`), 'client-wave');
    adaRoom.whisper('wave', { hi: 1 });
    assert.deepEqual((await raw.wait(1))[0], { hi: 1 });
    assert.equal(raw.meta[0].user_id, '1');
  });
});

describe('client events on the wire (members policy)', () => {
  test('relayed frame: {event, channel, data as string} on private, plus user_id on presence', async (t) => {
    const priv = uid('private-ce-');
    const pres = uid('presence-ce-');
    const a = await wire(t);
    const b = await wire(t);
    await subscribed(a, priv);
    await subscribed(b, priv);
    await subscribed(a, pres, { user_id: 'ua' });
    await subscribed(b, pres, { user_id: 'ub' });
    a.send({ event: 'client-move', channel: priv, data: { x: 1, y: [2] } });
    const got = await b.next({ event: 'client-move' });
    assert.deepEqual(got.msg, { event: 'client-move', channel: priv, data: '{"x":1,"y":[2]}' });

    a.send({ event: 'client-move', channel: pres, data: { x: 2 } });
    const onPresence = await b.next({ event: 'client-move', channel: pres });
    assert.deepEqual(onPresence.msg, { event: 'client-move', channel: pres, data: '{"x":2}', user_id: 'ua' });
    assert.deepEqual(await a.none('client-move'), [], 'never echoed to the sender');
  });

  test('a JSON-string data is decoded before relaying (Reverb behaviour)', async (t) => {
    const name = uid('private-str-');
    const a = await wire(t);
    const b = await wire(t);
    await subscribed(a, name);
    await subscribed(b, name);
    a.send({ event: 'client-s', channel: name, data: JSON.stringify({ k: 'v' }) });
    const got = await b.next('client-s');
    assert.deepEqual(got.data, { k: 'v' });
  });

  test('pusher-js channel.trigger() reaches other pusher-js clients', async (t) => {
    const bag = cleanup(t);
    const name = uid('private-pjs-');
    const p1 = pusherClient(server);
    const p2 = pusherClient(server);
    bag.add(() => p1.disconnect());
    bag.add(() => p2.disconnect());
    await whenConnected(p1);
    await whenConnected(p2);
    const { channel: c1 } = await subscribe(p1, name);
    const { channel: c2 } = await subscribe(p2, name);
    const got = inbox(c2, 'client-ping');
    assert.equal(c1.trigger('client-ping', { n: 1 }), true);
    assert.deepEqual((await got.wait(1))[0], { n: 1 });
  });

  test('refused on a public channel: 4301, nothing relayed', async (t) => {
    const name = uid('public-');
    const a = await wire(t);
    const b = await wire(t);
    await subscribed(a, name);
    await subscribed(b, name);
    a.send({ event: 'client-x', channel: name, data: {} });
    const err = await a.next('pusher:error');
    assert.equal(err.data.code, 4301);
    assert.deepEqual(await b.none('client-x'), []);
  });

  test('refused from a socket not subscribed to the channel: 4301, nothing relayed', async (t) => {
    const name = uid('private-nm-');
    const member = await wire(t);
    const outsider = await wire(t);
    await subscribed(member, name);
    outsider.send({ event: 'client-x', channel: name, data: {} });
    const err = await outsider.next('pusher:error');
    assert.equal(err.data.code, 4301);
    assert.deepEqual(await member.none('client-x'), []);
    await outsider.roundTrip(); // still connected
  });
});

describe('accept_client_events_from and client_event_rate_limit', () => {
  test('none → 4301 "The app does not have client messaging enabled."', async (t) => {
    const app = byId('cenone');
    const name = uid('private-none-');
    const a = await wire(t, app);
    const b = await wire(t, app);
    await subscribed(a, name);
    await subscribed(b, name);
    a.send({ event: 'client-x', channel: name, data: {} });
    const err = await a.next('pusher:error');
    assert.deepEqual(err.data, { code: 4301, message: 'The app does not have client messaging enabled.' });
    assert.deepEqual(await b.none('client-x'), []);
  });

  test('none → pusher-js trigger() is refused the same way', async (t) => {
    const p1 = pusherClient(server, { app: byId('cenone') });
    cleanup(t).add(() => p1.disconnect());
    await whenConnected(p1);
    const { channel } = await subscribe(p1, uid('private-none-pjs-'));
    const errors = inbox(p1.connection, 'error');
    channel.trigger('client-x', {});
    const [e] = await errors.wait(1);
    assert.equal(e.data.code, 4301);
  });

  test('all → relayed on public channels and from non-subscribers', async (t) => {
    const app = byId('ceall');
    const name = uid('open-');
    const a = await wire(t, app);
    const b = await wire(t, app);
    const outsider = await wire(t, app);
    await subscribed(a, name);
    await subscribed(b, name);
    a.send({ event: 'client-hello', channel: name, data: { from: 'a' } });
    assert.deepEqual((await b.next('client-hello')).data, { from: 'a' });
    outsider.send({ event: 'client-hello', channel: name, data: { from: 'outsider' } });
    assert.deepEqual((await b.next('client-hello')).data, { from: 'outsider' });
    assert.deepEqual((await a.next('client-hello')).data, { from: 'outsider' });
    assert.deepEqual(await outsider.none((f) => f.event === 'pusher:error' || f.event === 'client-hello', 100), []);
  });

  test('client_event_rate_limit 2 → events over 2 within a second get 4301 and are dropped', async (t) => {
    const app = byId('cerate');
    const name = uid('private-rate-');
    const a = await wire(t, app);
    const b = await wire(t, app);
    await subscribed(a, name);
    await subscribed(b, name);
    // 5 events in well under a second span at most two windows: at most 2 + 2 relayed.
    const { got, refused } = await burst(a, b, name, 5);
    assert.ok(got.length >= 2 && got.length <= 4 && refused >= 1, `relayed ${got}, refused ${refused}`);
    assert.deepEqual(got.slice(0, 2), [1, 2], 'the first two always pass, in order');
    assert.deepEqual(await b.none('client-n'), [], 'a refused event is not relayed later');
    assert.equal(a.open, true, 'rate limiting does not disconnect');
    // More than a second after the burst, a new window has a fresh allowance.
    await sleep(1100);
    const again = await burst(a, b, name, 2);
    assert.deepEqual(again, { got: [1, 2], refused: 0 });
  });

  test('default limit (10/s) and 0 = unlimited', async (t) => {
    const name = uid('private-burst-');
    const a = await wire(t);
    const b = await wire(t);
    await subscribed(a, name);
    await subscribed(b, name);
    const { got, refused } = await burst(a, b, name, 21);
    assert.ok(got.length >= 10 && got.length <= 20 && refused >= 1, `default limit: relayed ${got.length}, refused ${refused}`);

    const app = byId('ceunl');
    const u1 = await wire(t, app);
    const u2 = await wire(t, app);
    await subscribed(u1, name);
    await subscribed(u2, name);
    for (let n = 1; n <= 40; n++) u1.send({ event: 'client-n', channel: name, data: { n } });
    for (let n = 1; n <= 40; n++) assert.deepEqual((await u2.next('client-n')).data, { n });
    assert.deepEqual(await u1.none('pusher:error', 100), []);
  });
});
