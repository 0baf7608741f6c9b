'use strict';
// Webhooks: signed POSTs of event batches to each configured URL, checked with the pusher
// SDK's own webhook validation; event_types filtering and retry after a failed delivery.
const { describe, test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const http = require('node:http');
const { startServer } = require('../lib/server');
const { Wire } = require('../lib/wire');
const { sdk } = require('../lib/clients');
const { cleanup, uid, eventually, quiet } = require('../lib/util');

/** How long "no more retries" is watched: longer than the default backoffs (1 s, then 2 s). */
const NO_RETRY_MS = 2500;

/** A webhook receiver: records every POST per path; /flaky answers 500 to its first POST. */
async function startReceiver() {
  const posts = [];
  let flakyFailures = 1;
  const srv = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const rawBody = Buffer.concat(chunks).toString('utf8');
      posts.push({ path: req.url, method: req.method, headers: req.headers, rawBody, body: JSON.parse(rawBody) });
      if (req.url === '/flaky' && flakyFailures > 0) {
        flakyFailures--;
        res.writeHead(500);
        return res.end('try again');
      }
      res.writeHead(200);
      res.end('ok');
    });
  });
  await new Promise((resolve) => srv.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${srv.address().port}`,
    posts,
    /** Every event delivered to `path`, flattened, with its batch. */
    events: (path) => posts.filter((p) => p.path === path).flatMap((p) => p.body.events.map((e) => ({ ...e, post: p }))),
    close: () =>
      new Promise((resolve) => {
        srv.closeAllConnections();
        srv.close(() => resolve());
      }),
  };
}

let receiver;
let server;
let api;
let APP;
before(async () => {
  receiver = await startReceiver();
  APP = {
    app_id: 'wh',
    key: 'wh-key',
    secret: 'wh-secret',
    webhooks: [
      { url: `${receiver.url}/all` },
      { url: `${receiver.url}/members`, event_types: ['member_added', 'member_removed'] },
      { url: `${receiver.url}/flaky`, event_types: ['cache_miss'] },
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

/** Waits for an event on `path` matching pred; returns it. */
function delivered(path, pred, what) {
  return eventually(() => receiver.events(path).find(pred), { what: `webhook ${what} on ${path}` });
}

describe('webhooks', () => {
  test('channel_occupied and channel_vacated, signed so the SDK validates them', async (t) => {
    const name = uid('wh-pub-');
    const w = await wire(t);
    await w.subscribe(name);
    const occupied = await delivered('/all', (e) => e.name === 'channel_occupied' && e.channel === name, 'channel_occupied');
    const post = occupied.post;
    assert.equal(post.method, 'POST');
    assert.match(post.headers['content-type'], /application\/json/);
    assert.equal(post.headers['x-pusher-key'], APP.key);
    const hook = api.webhook({ headers: post.headers, rawBody: post.rawBody });
    assert.equal(hook.isValid(), true, 'X-Pusher-Signature verifies with the app secret');
    assert.equal(typeof post.body.time_ms, 'number');
    assert.ok(Math.abs(post.body.time_ms - Date.now()) < 60000);
    assert.equal(sdk(server, { ...APP, secret: 'other' }).webhook({ headers: post.headers, rawBody: post.rawBody }).isValid(), false);

    w.send({ event: 'pusher:unsubscribe', data: { channel: name } });
    await delivered('/all', (e) => e.name === 'channel_vacated' && e.channel === name, 'channel_vacated');
    const names = receiver.events('/all').filter((e) => e.channel === name).map((e) => e.name);
    assert.deepEqual(names, ['channel_occupied', 'channel_vacated']);
  });

  test('member_added / member_removed carry user_id; event_types filters per URL', async (t) => {
    const name = uid('presence-wh-');
    const a = await wire(t);
    const b = await wire(t);
    await a.authSubscribe(name, { user_id: 'ann' });
    await b.authSubscribe(name, { user_id: 'ben' });
    await b.authSubscribe(`${name}-x`, { user_id: 'ben' }); // a second channel, same user
    b.ws.close(1000);
    for (const who of ['ann', 'ben']) {
      const added = await delivered('/members', (e) => e.name === 'member_added' && e.channel === name && e.user_id === who, `member_added ${who}`);
      assert.equal(api.webhook({ headers: added.post.headers, rawBody: added.post.rawBody }).isValid(), true);
    }
    await delivered('/members', (e) => e.name === 'member_removed' && e.channel === name && e.user_id === 'ben', 'member_removed ben');
    await delivered('/members', (e) => e.name === 'member_removed' && e.channel === `${name}-x` && e.user_id === 'ben', 'member_removed on the second channel');
    await delivered('/all', (e) => e.name === 'channel_occupied' && e.channel === name, 'occupied on /all too');
    const kinds = new Set(receiver.events('/members').map((e) => e.name));
    assert.deepEqual([...kinds].sort(), ['member_added', 'member_removed'], 'the filtered URL only gets member events');
    assert.equal(receiver.events('/members').filter((e) => e.name === 'member_removed' && e.user_id === 'ann').length, 0);
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
    assert.equal(ev.event, 'client-meow');
    assert.equal(ev.socket_id, a.socketId);
    assert.equal(ev.user_id, 'cat');
    assert.equal(typeof ev.data, 'string', 'data is the event data as a string, as Pusher sends it');
    assert.deepEqual(JSON.parse(ev.data), { loud: true });
  });

  test('cache_miss is delivered, and a receiver answering 500 gets the same batch again', async (t) => {
    const name = uid('cache-wh-');
    const w = await wire(t);
    await w.subscribe(name);
    await w.next('pusher:cache_miss');
    await delivered('/all', (e) => e.name === 'cache_miss' && e.channel === name, 'cache_miss');
    // /flaky refused the first delivery with 500; the retry comes within a few seconds
    await eventually(() => receiver.posts.filter((p) => p.path === '/flaky').length >= 2, { ms: 8000, what: 'a retried /flaky POST' });
    const [first, second] = receiver.posts.filter((p) => p.path === '/flaky');
    assert.equal(second.rawBody, first.rawBody, 'the retry carries the same body');
    assert.equal(second.headers['x-pusher-signature'], first.headers['x-pusher-signature']);
    assert.deepEqual(first.body.events, [{ name: 'cache_miss', channel: name }]);
    // A wrong retry after the 2xx would first wait a backoff: the first is 1 s by default,
    // the one after it up to 2 s (doubling, jitter in [d/2, d]). Watch for longer than both.
    await quiet(NO_RETRY_MS);
    assert.equal(receiver.posts.filter((p) => p.path === '/flaky').length, 2, 'no more retries after a 2xx');
  });
});
