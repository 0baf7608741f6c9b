'use strict';
// Presence channels: Echo.join() here/joining/leaving, the exact presence payloads on the wire,
// one member per user across sockets, user id/info validation and max_presence_members.
const { describe, test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { startServer } = require('../lib/server');
const { Wire, signer } = require('../lib/wire');
const { sdk, apiGet, pusherClient, whenConnected, subscribe, inbox, echoClient } = require('../lib/clients');
const { startAuthApp } = require('../lib/authapp');
const { cleanup, uid, eventually } = require('../lib/util');

const APPS = [
  { app_id: 'pr', key: 'pr-key', secret: 'pr-secret' },
  { app_id: 'prsmall', key: 'prsmall-key', secret: 'prsmall-secret', max_presence_members: 2 },
];
const USERS = {
  'tok-ada': { id: '1', info: { name: 'Ada' } },
  'tok-bob': { id: '2', info: { name: 'Bob' } },
  'tok-cy': { id: '3', info: { name: 'Cy' } },
};

let server;
let api;
let authApp;
before(async () => {
  server = await startServer({ apps: APPS });
  api = sdk(server);
  authApp = await startAuthApp({ sdk: api, users: USERS });
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

/** Joins a presence channel on a raw socket as user {user_id, user_info}. */
async function join(w, channel, member) {
  const res = await w.authSubscribe(channel, member);
  assert.equal(res.event, 'pusher_internal:subscription_succeeded', `join failed: ${res.text}`);
  return res;
}

describe('Laravel Echo presence', () => {
  test('Echo.join(): here, joining and leaving across three users', async (t) => {
    const bag = cleanup(t);
    const room = uid('room.');
    const ada = await echoClient(server, { authApp, token: 'tok-ada' });
    bag.add(() => ada.disconnect());
    const adaRoom = ada.join(room);
    const adaHere = inbox(null, 'here', (fn) => adaRoom.here(fn));
    const adaJoining = inbox(null, 'joining', (fn) => adaRoom.joining(fn));
    const adaLeaving = inbox(null, 'leaving', (fn) => adaRoom.leaving(fn));
    assert.deepEqual((await adaHere.wait(1))[0], [{ name: 'Ada' }]);

    const bob = await echoClient(server, { authApp, token: 'tok-bob' });
    bag.add(() => bob.disconnect());
    const bobHere = inbox(null, 'here', (fn) => bob.join(room).here(fn));
    const [members] = await bobHere.wait(1);
    assert.deepEqual(members.map((m) => m.name).sort(), ['Ada', 'Bob']);
    assert.deepEqual((await adaJoining.wait(1))[0], { name: 'Bob' });

    const cy = await echoClient(server, { authApp, token: 'tok-cy' });
    bag.add(() => cy.disconnect());
    await inbox(null, 'here', (fn) => cy.join(room).here(fn)).wait(1);
    assert.deepEqual((await adaJoining.wait(2))[1], { name: 'Cy' });

    bob.leave(room);
    assert.deepEqual((await adaLeaving.wait(1))[0], { name: 'Bob' });
    cy.disconnect(); // closing the socket counts as leaving
    assert.deepEqual((await adaLeaving.wait(2))[1], { name: 'Cy' });
    assert.equal(adaJoining.got.length, 2);
  });

  test('pusher-js presence: members.me, members.count and member events', async (t) => {
    const bag = cleanup(t);
    const name = uid('presence-pjs-');
    const a = pusherClient(server, { user: { id: 'alice', info: { role: 'admin' } } });
    bag.add(() => a.disconnect());
    await whenConnected(a);
    const { channel } = await subscribe(a, name);
    assert.equal(channel.members.count, 1);
    assert.deepEqual(channel.members.me, { id: 'alice', info: { role: 'admin' } });
    const added = inbox(channel, 'pusher:member_added');
    const removed = inbox(channel, 'pusher:member_removed');
    const b = pusherClient(server, { user: { id: 'bert', info: { role: 'guest' } } });
    bag.add(() => b.disconnect());
    await whenConnected(b);
    const sub = await subscribe(b, name);
    assert.equal(sub.channel.members.count, 2);
    assert.deepEqual(sub.channel.members.get('alice'), { id: 'alice', info: { role: 'admin' } });
    assert.deepEqual((await added.wait(1))[0], { id: 'bert', info: { role: 'guest' } });
    assert.equal(channel.members.count, 2);
    b.disconnect();
    assert.deepEqual((await removed.wait(1))[0], { id: 'bert', info: { role: 'guest' } });
    assert.equal(channel.members.count, 1);
  });
});

describe('presence on the wire', () => {
  test('subscription_succeeded carries {presence:{count,ids,hash}} including the subscriber', async (t) => {
    const name = uid('presence-wire-');
    const a = await wire(t);
    const first = await join(a, name, { user_id: 'a', user_info: { name: 'A' } });
    assert.equal(first.dataIsString, true);
    assert.deepEqual(first.data, { presence: { count: 1, ids: ['a'], hash: { a: { name: 'A' } } } });
    const b = await wire(t);
    const second = await join(b, name, { user_id: 'b', user_info: { name: 'B', tags: [1, 2] } });
    assert.equal(second.data.presence.count, 2);
    assert.deepEqual(second.data.presence.ids.slice().sort(), ['a', 'b']);
    assert.deepEqual(second.data.presence.hash, { a: { name: 'A' }, b: { name: 'B', tags: [1, 2] } });
  });

  test('member_added / member_removed go to the others only, with exact data', async (t) => {
    const name = uid('presence-ev-');
    const a = await wire(t);
    const b = await wire(t);
    await join(a, name, { user_id: 'a', user_info: {} });
    await join(b, name, { user_id: 'b', user_info: { name: 'B' } });
    const added = await a.next({ event: 'pusher_internal:member_added', channel: name });
    assert.equal(added.dataIsString, true);
    assert.deepEqual(added.data, { user_id: 'b', user_info: { name: 'B' } });
    assert.deepEqual(await b.none('pusher_internal:member_added'), [], 'the joiner is not told about itself');

    b.send({ event: 'pusher:unsubscribe', data: { channel: name } });
    const removed = await a.next({ event: 'pusher_internal:member_removed', channel: name });
    assert.deepEqual(removed.msg, { event: 'pusher_internal:member_removed', channel: name, data: '{"user_id":"b"}' });
  });

  test('one member per user_id across two sockets of the same user', async (t) => {
    const name = uid('presence-multi-');
    const observer = await wire(t);
    await join(observer, name, { user_id: 'obs', user_info: {} });
    const tab1 = await wire(t);
    const tab2 = await wire(t);
    await join(tab1, name, { user_id: 'u1', user_info: { tab: 1 } });
    await observer.next('pusher_internal:member_added');
    const second = await join(tab2, name, { user_id: 'u1', user_info: { tab: 2 } });
    assert.equal(second.data.presence.count, 2, 'obs + u1, not three');
    assert.deepEqual(second.data.presence.ids.slice().sort(), ['obs', 'u1']);
    assert.deepEqual(await observer.none('pusher_internal:member_added'), [], 'no second member_added for u1');

    const users = await apiGet(api, `/channels/${name}/users`);
    assert.deepEqual(users.users.map((u) => u.id).sort(), ['obs', 'u1']);
    const info = await apiGet(api, `/channels/${name}`, { info: 'user_count,subscription_count' });
    assert.deepEqual(info, { occupied: true, user_count: 2, subscription_count: 3 });

    tab1.close();
    await tab1.waitClosed();
    assert.deepEqual(await observer.none('pusher_internal:member_removed'), [], 'u1 still has a socket');
    tab2.ws.close(1000);
    const removed = await observer.next('pusher_internal:member_removed');
    assert.deepEqual(removed.data, { user_id: 'u1' });
    await eventually(async () => (await apiGet(api, `/channels/${name}/users`)).users.length === 1, { what: 'u1 gone from /users' });
  });

  test('numeric user ids become strings; missing user_info becomes {}', async (t) => {
    const name = uid('presence-num-');
    const a = await wire(t);
    const res = await join(a, name, { user_id: 42 });
    assert.deepEqual(res.data.presence, { count: 1, ids: ['42'], hash: { 42: {} } });
    assert.match(res.text, /"hash\\":\{\\"42\\":\{\}\}/, 'hash is an object keyed by the string id');
    const b = await wire(t);
    await join(b, name, { user_id: 7, user_info: { n: 1 } });
    const added = await a.next('pusher_internal:member_added');
    assert.deepEqual(added.data, { user_id: '7', user_info: { n: 1 } });
  });

  test('bad presence data is refused with 4009: signed garbage, no user_id, id > 128 chars, info > 1 KB', async (t) => {
    const w = await wire(t);
    const name = uid('presence-bad-');
    const key = APPS[0].key;
    const sign = (channelData) => ({
      auth: `${key}:${require('node:crypto').createHmac('sha256', APPS[0].secret).update(`${w.socketId}:${name}:${channelData}`).digest('hex')}`,
      channel_data: channelData,
    });
    const bad = {
      'not json': sign('nope'),
      'no user_id': sign(JSON.stringify({ user_info: {} })),
      'long id': sign(JSON.stringify({ user_id: 'x'.repeat(129) })),
      'big info': sign(JSON.stringify({ user_id: 'x', user_info: { pad: 'y'.repeat(1100) } })),
      'channel_data not signed': { ...signer(APPS[0]).authorizeChannel(w.socketId, name, { user_id: 'x' }), channel_data: JSON.stringify({ user_id: 'admin' }) },
    };
    for (const [label, extra] of Object.entries(bad)) {
      const res = await w.subscribe(name, extra);
      assert.equal(res.event, 'pusher:error', label);
      assert.equal(res.data.code, 4009, label);
    }
    await join(w, name, { user_id: 'x'.repeat(128), user_info: { ok: true } });
  });

  test('max_presence_members 2: a third user gets 4100, another socket of a member is fine', async (t) => {
    const app = APPS[1];
    const name = uid('presence-cap-');
    const a = await wire(t, app);
    const b = await wire(t, app);
    const c = await wire(t, app);
    const a2 = await wire(t, app);
    await join(a, name, { user_id: 'a' });
    await join(b, name, { user_id: 'b' });
    await a.next('pusher_internal:member_added'); // b
    const res = await c.authSubscribe(name, { user_id: 'c' });
    assert.equal(res.event, 'pusher:error');
    assert.equal(res.data.code, 4100);
    await join(a2, name, { user_id: 'a' });
    assert.deepEqual(await a.none('pusher_internal:member_added', 100), []);
    await c.roundTrip();
  });
});
