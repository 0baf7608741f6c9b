'use strict';
// Webhooks as Pusher sends them: signed POSTs of event batches to each configured URL, checked
// with the pusher SDK's own webhook validation; event_types filtering; channel_vacated and
// member_removed held 3 s and dropped when the channel or member comes back; cache_miss once
// per occupation; debounced subscription_count; configured headers; a receiver that fails
// twice gets each event exactly once.
const { describe, test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { startServer } = require('../lib/server');
const { Wire } = require('../lib/wire');
const { sdk } = require('../lib/clients');
const { startHookReceiver } = require('../lib/hookreceiver');
const { cleanup, uid, eventually, quiet, sleep } = require('../lib/util');

const HOLD_MS = 3000;
/** How long "no more retries" is watched after a 2xx: longer than the backoff a wrong third retry would wait (1 s, 2 s, then 4 s). */
const NO_RETRY_MS = 4500;

let receiver;
let server;
let api;
let APP;
before(async () => {
  receiver = await startHookReceiver();
  receiver.failFirst('/flaky', 2);
  APP = {
    app_id: 'wh',
    key: 'wh-key',
    secret: 'wh-secret',
    webhooks: [
      { url: `${receiver.url}/all` },
      { url: `${receiver.url}/members`, event_types: ['member_added', 'member_removed'] },
      { url: `${receiver.url}/flaky`, event_types: ['cache_miss'] },
      { url: `${receiver.url}/count`, event_types: ['subscription_count'] },
      { url: `${receiver.url}/headers`, event_types: ['channel_occupied'], headers: { Authorization: 'Bearer e2e-t0ken', 'X-Tenant': 'acme' } },
    ],
  };
  server = await startServer({ apps: [APP] });
  api = sdk(server);
});
after(async () => {
  await server.stop();
  await receiver.close();
});

async function wire(t) {
  const w = await Wire.connect(server);
  cleanup(t).add(() => w.close());
  return w;
}

/** Waits for an accepted event on `path` matching pred; returns it. */
function delivered(path, pred, what, ms = 10000) {
  return eventually(() => receiver.events(path).find(pred), { ms, what: `webhook ${what} on ${path}` });
}

function valid(post, app = APP) {
  return sdk(server, app).webhook({ headers: post.headers, rawBody: post.rawBody }).isValid();
}

describe('webhooks', () => {
  test('channel_occupied at once, channel_vacated after the 3 s hold; signed so the SDK validates them', async (t) => {
    const name = uid('wh-pub-');
    const w = await wire(t);
    await w.subscribe(name);
    const occupied = await delivered('/all', (e) => e.name === 'channel_occupied' && e.channel === name, 'channel_occupied');
    const post = occupied.post;
    assert.equal(post.method, 'POST');
    assert.match(post.headers['content-type'], /application\/json/);
    assert.equal(post.headers['x-pusher-key'], APP.key);
    assert.equal(valid(post), true, 'X-Pusher-Signature verifies with the app secret');
    assert.equal(typeof post.body.time_ms, 'number');
    assert.ok(Math.abs(post.body.time_ms - Date.now()) < 60000);
    assert.equal(valid(post, { ...APP, secret: 'other' }), false);

    const left = Date.now();
    w.send({ event: 'pusher:unsubscribe', data: { channel: name } });
    const vacated = await delivered('/all', (e) => e.name === 'channel_vacated' && e.channel === name, 'channel_vacated');
    const held = vacated.post.at - left;
    assert.ok(held >= HOLD_MS - 100, `channel_vacated after ${held} ms: held about 3 s`);
    assert.ok(held < HOLD_MS + 3000, `channel_vacated after ${held} ms`);
    assert.equal(valid(vacated.post), true);
    const names = receiver.events('/all').filter((e) => e.channel === name).map((e) => e.name);
    assert.deepEqual(names.filter((n) => n.startsWith('channel_')), ['channel_occupied', 'channel_vacated']);
  });

  test('member_added / member_removed (after the hold) carry user_id; event_types filters per URL', async (t) => {
    const name = uid('presence-wh-');
    const a = await wire(t);
    const b = await wire(t);
    await a.authSubscribe(name, { user_id: 'ann' });
    await b.authSubscribe(name, { user_id: 'ben' });
    await b.authSubscribe(`${name}-x`, { user_id: 'ben' }); // a second channel, same user
    const left = Date.now();
    b.ws.close(1000);
    for (const who of ['ann', 'ben']) {
      const added = await delivered('/members', (e) => e.name === 'member_added' && e.channel === name && e.user_id === who, `member_added ${who}`);
      assert.equal(valid(added.post), true);
    }
    const removed = await delivered('/members', (e) => e.name === 'member_removed' && e.channel === name && e.user_id === 'ben', 'member_removed ben');
    assert.ok(removed.post.at - left >= HOLD_MS - 100, `member_removed after ${removed.post.at - left} ms`);
    assert.equal(valid(removed.post), true);
    await delivered('/members', (e) => e.name === 'member_removed' && e.channel === `${name}-x` && e.user_id === 'ben', 'member_removed on the second channel');
    await delivered('/all', (e) => e.name === 'channel_occupied' && e.channel === name, 'occupied on /all too');
    const kinds = new Set(receiver.events('/members').map((e) => e.name));
    assert.deepEqual([...kinds].sort(), ['member_added', 'member_removed'], 'the filtered URL only gets member events');
    assert.equal(receiver.events('/members').filter((e) => e.name === 'member_removed' && e.user_id === 'ann').length, 0);
  });

  test('a reload within the hold sends nothing: no vacated + occupied, no removed + added', async (t) => {
    const pub = uid('wh-reload-');
    const pres = uid('presence-wh-reload-');
    const first = await wire(t);
    await first.subscribe(pub);
    await first.authSubscribe(pres, { user_id: 'rita' });
    await delivered('/all', (e) => e.name === 'channel_occupied' && e.channel === pub, 'channel_occupied');
    await delivered('/members', (e) => e.name === 'member_added' && e.channel === pres, 'member_added');
    // The page reloads: the socket goes, a new one comes back a moment later.
    first.ws.close(1000);
    await first.waitClosed();
    await sleep(500);
    const again = await wire(t);
    await again.subscribe(pub);
    await again.authSubscribe(pres, { user_id: 'rita' });
    await sleep(HOLD_MS + 1500); // past the hold: whatever was going to be sent has been
    const forPub = receiver.events('/all').filter((e) => e.channel === pub).map((e) => e.name);
    assert.deepEqual(forPub.filter((n) => n.startsWith('channel_')), ['channel_occupied']);
    const forPres = receiver.events('/members').filter((e) => e.channel === pres).map((e) => `${e.name}:${e.user_id}`);
    assert.deepEqual(forPres, ['member_added:rita']);
  });

  test('client_event: channel, event, data, socket_id and user_id (presence)', async (t) => {
    const name = uid('presence-whc-');
    const a = await wire(t);
    const b = await wire(t);
    await a.authSubscribe(name, { user_id: 'cat' });
    await b.authSubscribe(name, { user_id: 'dog' });
    a.send({ event: 'client-meow', channel: name, data: { loud: true } });
    await b.next('client-meow');
    const ev = await delivered('/all', (e) => e.name === 'client_event' && e.channel === name, 'client_event');
    assert.equal(valid(ev.post), true);
    assert.equal(ev.event, 'client-meow');
    assert.equal(ev.socket_id, a.socketId);
    assert.equal(ev.user_id, 'cat');
    assert.equal(typeof ev.data, 'string', 'data is the event data as a string, as Pusher sends it');
    assert.deepEqual(JSON.parse(ev.data), { loud: true });
  });

  test('cache_miss once per occupation; a receiver failing twice gets it exactly once, same body each try', async (t) => {
    const name = uid('cache-wh-');
    const w1 = await wire(t);
    const w2 = await wire(t);
    await w1.subscribe(name);
    await w1.next('pusher:cache_miss');
    await w2.subscribe(name); // a second subscriber of the same occupation: no second webhook
    await w2.next('pusher:cache_miss');
    const miss = await delivered('/all', (e) => e.name === 'cache_miss' && e.channel === name, 'cache_miss');
    assert.equal(valid(miss.post), true);
    // /flaky refused the first two deliveries with 500; the retries come within a few seconds
    await eventually(() => receiver.postsTo('/flaky').length >= 3, { ms: 10000, what: 'two retried /flaky POSTs' });
    const [first, second, third] = receiver.postsTo('/flaky');
    assert.deepEqual([first.status, second.status, third.status], [500, 500, 200]);
    assert.equal(second.rawBody, first.rawBody, 'a retry carries the same body');
    assert.equal(third.rawBody, first.rawBody);
    assert.equal(third.headers['x-pusher-signature'], first.headers['x-pusher-signature']);
    assert.equal(valid(third), true);
    await quiet(NO_RETRY_MS);
    assert.deepEqual(receiver.events('/flaky').map((e) => `${e.name}:${e.channel}`), [`cache_miss:${name}`], 'accepted exactly once');
    assert.equal(receiver.postsTo('/flaky').length, 3, 'no more attempts after a 2xx');
    assert.equal(receiver.events('/all').filter((e) => e.name === 'cache_miss' && e.channel === name).length, 1);
  });

  test('subscription_count: one debounced event with the count after a burst of subscribes', async (t) => {
    const name = uid('wh-count-');
    const ws = await Promise.all([wire(t), wire(t), wire(t)]);
    await Promise.all(ws.map((w) => w.subscribe(name)));
    const ev = await delivered('/count', (e) => e.channel === name && e.subscription_count === 3, 'subscription_count 3');
    assert.equal(ev.name, 'subscription_count');
    assert.equal(valid(ev.post), true);
    assert.deepEqual(Object.keys(ev).filter((k) => k !== 'post').sort(), ['channel', 'name', 'subscription_count']);
    await quiet(1500);
    const counts = receiver.events('/count').filter((e) => e.channel === name).map((e) => e.subscription_count);
    assert.ok(counts.length <= 2 && counts.at(-1) === 3, `debounced: ${JSON.stringify(counts)}`);
    ws[0].close();
    await delivered('/count', (e) => e.channel === name && e.subscription_count === 2, 'subscription_count 2 after a leave');
  });

  test('configured headers go with every POST', async (t) => {
    const name = uid('wh-headers-');
    const w = await wire(t);
    await w.subscribe(name);
    const ev = await delivered('/headers', (e) => e.channel === name, 'channel_occupied with headers');
    assert.equal(ev.post.headers.authorization, 'Bearer e2e-t0ken');
    assert.equal(ev.post.headers['x-tenant'], 'acme');
    assert.equal(valid(ev.post), true, 'the signature is intact beside them');
    for (const p of receiver.postsTo('/headers')) assert.equal(p.headers.authorization, 'Bearer e2e-t0ken');
    assert.equal(receiver.postsTo('/all').some((p) => p.headers['x-tenant']), false, 'headers are per webhook');
  });

  test('every webhook type was delivered with a signature the SDK validates', async () => {
    const seen = new Map();
    for (const p of receiver.posts.filter((x) => x.status === 200)) {
      for (const e of p.body.events) {
        if (!seen.has(e.name)) seen.set(e.name, p);
      }
    }
    const types = ['channel_occupied', 'channel_vacated', 'member_added', 'member_removed', 'client_event', 'cache_miss', 'subscription_count'];
    for (const type of types) {
      assert.ok(seen.has(type), `a ${type} webhook was delivered`);
      const hook = sdk(server).webhook({ headers: seen.get(type).headers, rawBody: seen.get(type).rawBody });
      assert.equal(hook.isValid(), true, `${type} validates`);
      assert.ok(hook.getEvents().some((e) => e.name === type));
    }
  });
});
