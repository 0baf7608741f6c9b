'use strict';
// The Pusher HTTP API through the official server SDK (and hand-signed requests for the error
// cases): trigger, batch, socket_id exclusion, info attributes, channel queries, connections,
// /up, authentication failures, size limits, and a server.path prefix.
const { describe, test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { startServer } = require('../lib/server');
const { Wire } = require('../lib/wire');
const { sdk, outcome, apiGet, pusherClient, whenConnected, subscribe, inbox, echoClient, echoSubscribed } = require('../lib/clients');
const { rawApi } = require('../lib/rawapi');
const { startAuthApp } = require('../lib/authapp');
const { cleanup, uid, eventually } = require('../lib/util');

const APPS = [
  { app_id: 'api1', key: 'api1-key', secret: 'api1-secret', max_batch_size: 3, max_message_size: 3000, toolmark: { enabled: true } },
  { app_id: 'api2', key: 'api2-key', secret: 'api2-secret' },
];

let server;
let api;
before(async () => {
  server = await startServer({ apps: APPS, server: { max_request_size: 5000 } });
  api = sdk(server);
});
after(async () => {
  await server.stop();
});

async function wire(t, app = APPS[0]) {
  const w = await Wire.connect(server, { app });
  cleanup(t).add(() => w.close());
  return w;
}

async function joined(t, channel, userId) {
  const w = await wire(t);
  let res;
  if (channel.startsWith('presence-')) res = await w.authSubscribe(channel, { user_id: userId });
  else if (channel.startsWith('private-')) res = await w.authSubscribe(channel);
  else res = await w.subscribe(channel);
  assert.equal(res.event, 'pusher_internal:subscription_succeeded', res.text);
  return w;
}

describe('publishing', () => {
  test('trigger to several channels of different kinds delivers once to each', async (t) => {
    const names = [uid('pub-'), uid('private-p-'), uid('presence-p-')];
    const subs = [];
    for (const n of names) subs.push(await joined(t, n, 'u'));
    const res = await outcome(api.trigger(names, 'multi', { hello: 'all' }));
    assert.deepEqual(res, { status: 200, body: {} });
    for (let i = 0; i < names.length; i++) {
      const ev = await subs[i].next({ event: 'multi' });
      assert.equal(ev.channel, names[i]);
      assert.deepEqual(ev.data, { hello: 'all' });
    }
    for (const w of subs) assert.deepEqual(await w.none('multi', 100), [], 'exactly once');
  });

  test('triggerBatch up to max_batch_size (3) delivers in order; 4 events → 400', async (t) => {
    const a = uid('batch-a-');
    const b = uid('batch-b-');
    const wa = await joined(t, a);
    const wb = await joined(t, b);
    const res = await outcome(
      api.triggerBatch([
        { channel: a, name: 'one', data: { n: 1 } },
        { channel: b, name: 'two', data: 'text' },
        { channel: a, name: 'three', data: { n: 3 } },
      ]),
    );
    assert.deepEqual(res, { status: 200, body: { batch: {} } });
    assert.deepEqual((await wa.next('one')).data, { n: 1 });
    assert.deepEqual((await wa.next('three')).data, { n: 3 });
    assert.equal((await wb.next('two')).data, 'text');
    const order = wa.frames.filter((f) => f.channel === a && f.event !== 'pusher_internal:subscription_succeeded').map((f) => f.event);
    assert.deepEqual(order, ['one', 'three']);

    const over = await outcome(api.triggerBatch([1, 2, 3, 4].map((n) => ({ channel: a, name: 'over', data: { n } }))));
    assert.equal(over.status, 400);
    assert.deepEqual(await wa.none('over'), [], 'nothing from a refused batch is published');
  });

  test('older payload shape: a single "channel" field', async (t) => {
    const name = uid('shape-');
    const w = await joined(t, name);
    const single = await rawApi(server, { method: 'POST', path: '/events', body: { name: 'single', channel: name, data: '{"a":1}' } });
    assert.equal(single.status, 200, single.text);
    assert.deepEqual((await w.next('single')).data, { a: 1 });
  });

  test('socket_id excludes the sender (SDK param)', async (t) => {
    const name = uid('excl-');
    const sender = await joined(t, name);
    const other = await joined(t, name);
    await api.trigger(name, 'x', { n: 1 }, { socket_id: sender.socketId });
    await other.next('x');
    assert.deepEqual(await sender.none('x'), []);
  });

  test('Echo toOthers: the X-Socket-ID header set by Echo\'s axios interceptor excludes the sender', async (t) => {
    const bag = cleanup(t);
    const laravel = await startAuthApp({ sdk: api, users: { tok: { id: '1' } } });
    bag.add(() => laravel.close());
    // A minimal axios stand-in: Echo registers its X-Socket-Id interceptor on a global axios.
    const makeAxios = () => {
      const interceptors = [];
      const axios = () => {};
      axios.interceptors = { request: { use: (fn) => interceptors.push(fn) } };
      axios.post = async (url, data) => {
        let config = { url, method: 'post', headers: { 'Content-Type': 'application/json' }, data };
        for (const fn of interceptors) config = fn(config) || config;
        const res = await fetch(url, { method: 'POST', headers: config.headers, body: JSON.stringify(data) });
        return { status: res.status, data: await res.json() };
      };
      return axios;
    };
    const clients = [];
    for (let i = 0; i < 2; i++) {
      globalThis.axios = makeAxios();
      const echo = await echoClient(server, { authApp: laravel, token: 'tok', extra: { withoutInterceptors: false } });
      clients.push({ echo, axios: globalThis.axios });
      bag.add(() => echo.disconnect());
    }
    delete globalThis.axios;
    const name = uid('private-others-').slice('private-'.length);
    const [me, you] = clients;
    const mine = me.echo.private(name);
    const yours = you.echo.private(name);
    const myInbox = inbox(mine, '.Moved', (fn) => mine.listen('.Moved', fn));
    const yourInbox = inbox(null, '.Moved', (fn) => yours.listen('.Moved', fn));
    await echoSubscribed(mine);
    await echoSubscribed(yours);
    const res = await me.axios.post(`${laravel.url}/broadcast`, { channels: [`private-${name}`], event: 'Moved', data: { to: 'B2' } });
    assert.equal(res.status, 200);
    const call = laravel.requests.find((r) => r.url === '/broadcast');
    assert.equal(call.headers['x-socket-id'], me.echo.socketId());
    assert.deepEqual((await yourInbox.wait(1))[0], { to: 'B2' });
    assert.deepEqual(await myInbox.none(), [], 'the sender is excluded');
  });

  test('trigger info=subscription_count,user_count answers per channel', async (t) => {
    const pub = uid('info-');
    const pres = uid('presence-info-');
    await joined(t, pub);
    await joined(t, pub);
    await joined(t, pres, 'u1');
    await joined(t, pres, 'u1');
    await joined(t, pres, 'u2');
    const res = await outcome(api.trigger([pub, pres], 'e', {}, { info: 'subscription_count,user_count' }));
    assert.equal(res.status, 200);
    assert.deepEqual(res.body, {
      channels: {
        [pub]: { subscription_count: 2 },
        [pres]: { subscription_count: 3, user_count: 2 },
      },
    });
    const batch = await outcome(api.triggerBatch([{ channel: pres, name: 'e', data: {}, info: 'user_count' }, { channel: pub, name: 'e', data: {} }]));
    assert.equal(batch.status, 200);
    assert.deepEqual(batch.body.batch[0], { user_count: 2 });
  });
});

describe('channel queries', () => {
  test('GET /channels lists occupied channels, filter_by_prefix and info=user_count', async (t) => {
    const tag = uid('q');
    const pres1 = `presence-${tag}-1`;
    const pres2 = `presence-${tag}-2`;
    const pub = `${tag}-pub`;
    await joined(t, pres1, 'a');
    await joined(t, pres1, 'b');
    await joined(t, pres2, 'a');
    const pubSub = await joined(t, pub);
    const presenceOnly = await apiGet(api, '/channels', { filter_by_prefix: `presence-${tag}`, info: 'user_count' });
    assert.deepEqual(presenceOnly, { channels: { [pres1]: { user_count: 2 }, [pres2]: { user_count: 1 } } });
    const all = await apiGet(api, '/channels');
    for (const n of [pres1, pres2, pub]) assert.ok(n in all.channels, `${n} listed`);
    assert.deepEqual(all.channels[pub], {});
    const byPrefix = await apiGet(api, '/channels', { filter_by_prefix: tag });
    assert.deepEqual(byPrefix, { channels: { [pub]: {} } });
    const counts = await apiGet(api, '/channels', { filter_by_prefix: `presence-${tag}`, info: 'subscription_count' });
    assert.deepEqual(counts, { channels: { [pres1]: { subscription_count: 2 }, [pres2]: { subscription_count: 1 } } });

    const bad = await outcome(api.get({ path: '/channels', params: { info: 'user_count' } }));
    assert.equal(bad.status, 400, 'user_count needs a presence- prefix filter');
    const bad2 = await outcome(api.get({ path: '/channels', params: { info: 'user_count', filter_by_prefix: 'private-' } }));
    assert.equal(bad2.status, 400);

    pubSub.ws.close(1000);
    await eventually(async () => !((await apiGet(api, '/channels', { filter_by_prefix: tag })).channels[pub]), { what: 'vacated channel to disappear' });
  });

  test('GET /channels/{name}: occupied, subscription_count, user_count (presence only)', async (t) => {
    const pub = uid('one-');
    assert.deepEqual(await apiGet(api, `/channels/${pub}`), { occupied: false });
    await joined(t, pub);
    await joined(t, pub);
    assert.deepEqual(await apiGet(api, `/channels/${pub}`, { info: 'subscription_count' }), { occupied: true, subscription_count: 2 });
    const bad = await outcome(api.get({ path: `/channels/${pub}`, params: { info: 'user_count' } }));
    assert.equal(bad.status, 400);
    const pres = uid('presence-one-');
    await joined(t, pres, 'z');
    assert.deepEqual(await apiGet(api, `/channels/${pres}`, { info: 'user_count,subscription_count' }), { occupied: true, user_count: 1, subscription_count: 1 });
  });

  test('GET /channels/{presence}/users lists user ids; 400 for non-presence channels', async (t) => {
    const pres = uid('presence-users-');
    await joined(t, pres, 'u-1');
    await joined(t, pres, 'u-2');
    await joined(t, pres, 'u-2');
    const res = await apiGet(api, `/channels/${pres}/users`);
    assert.deepEqual(res.users.map((u) => u.id).sort(), ['u-1', 'u-2']);
    assert.deepEqual(Object.keys(res.users[0]), ['id']);
    assert.deepEqual(await apiGet(api, `/channels/${uid('presence-empty-')}/users`), { users: [] });
    const bad = await outcome(api.get({ path: `/channels/${uid('private-u-')}/users` }));
    assert.equal(bad.status, 400);
  });

  test('GET /connections counts this app\'s sockets (signed GET)', async (t) => {
    const other = sdk(server, APPS[1]);
    const before2 = (await apiGet(other, '/connections')).connections;
    const before1 = (await apiGet(api, '/connections')).connections;
    const ws = [];
    for (let i = 0; i < 3; i++) ws.push(await wire(t));
    await eventually(async () => (await apiGet(api, '/connections')).connections === before1 + 3, { what: '+3 connections' });
    assert.equal((await apiGet(other, '/connections')).connections, before2, 'per app');
    for (const w of ws) w.ws.close(1000);
    await eventually(async () => (await apiGet(api, '/connections')).connections === before1, { what: 'back to the start count' });
  });

  test('GET /up answers {"health":"OK"} without auth', async () => {
    const res = await fetch(`${server.url}/up`);
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), { health: 'OK' });
  });
});

describe('authentication and limits', () => {
  const event = () => ({ name: 'e', channels: [uid('auth-')], data: '{}' });

  test('a correctly hand-signed request is accepted (signature scheme sanity check)', async () => {
    const res = await rawApi(server, { method: 'POST', path: '/events', body: event() });
    assert.equal(res.status, 200, res.text);
  });

  test('401: bad signature, wrong secret, stale or future timestamp, unknown key, body_md5 mismatch', async () => {
    const now = Math.floor(Date.now() / 1000);
    const cases = {
      'bad signature': { signature: 'f'.repeat(64) },
      'wrong secret': { secret: 'not-the-secret' },
      'stale timestamp': { timestamp: now - 700 },
      'future timestamp': { timestamp: now + 700 },
      'unknown key': { key: 'who-is-this' },
      'other app key': { key: APPS[1].key, secret: APPS[1].secret },
      'body_md5 mismatch': { bodyMd5: 'd41d8cd98f00b204e9800998ecf8427e' },
    };
    for (const [label, sign] of Object.entries(cases)) {
      const res = await rawApi(server, { method: 'POST', path: '/events', body: event(), sign });
      assert.equal(res.status, 401, `${label}: ${res.status} ${res.text}`);
    }
    const get = await rawApi(server, { path: '/channels', sign: { signature: '0'.repeat(64) } });
    assert.equal(get.status, 401);
    const sdkWrong = await outcome(sdk(server, { ...APPS[0], secret: 'nope' }).trigger('c', 'e', {}));
    assert.equal(sdkWrong.status, 401);
  });

  test('unknown app id → 404, never 500', async () => {
    const res = await rawApi(server, { method: 'POST', path: '/events', body: event(), sign: { appId: 'no-such-app' } });
    assert.equal(res.status, 404);
  });

  test('413: event data over max_message_size (3000) and body over max_request_size (5000)', async (t) => {
    const name = uid('big-');
    const w = await joined(t, name);
    const tooBig = await outcome(api.trigger(name, 'big', 'x'.repeat(3001)));
    assert.equal(tooBig.status, 413);
    const fits = await outcome(api.trigger(name, 'fits', 'x'.repeat(2900)));
    assert.equal(fits.status, 200);
    await w.next('fits');
    // three events of 2000 bytes each are each within max_message_size, the body is not
    const body = await outcome(api.triggerBatch([1, 2, 3].map((n) => ({ channel: name, name: 'b', data: 'y'.repeat(2000) }))));
    assert.equal(body.status, 413);
    assert.deepEqual(await w.none('big', 50), []);
    assert.deepEqual(await w.none('b', 50), []);
  });

  test('bad input → 400, not 500: invalid JSON, no name, no channels, 101 channels, bad socket_id', async () => {
    const cases = {
      'invalid JSON': { bodyText: '{"name": ' },
      'no name': { body: { channels: ['a'], data: '{}' } },
      'no channels': { body: { name: 'e', data: '{}' } },
      'no data': { body: { name: 'e', channels: ['a'] } },
      '101 channels': { body: { name: 'e', channels: Array.from({ length: 101 }, (_, i) => `c${i}`), data: '{}' } },
      'bad socket_id': { body: { name: 'e', channels: ['a'], data: '{}', socket_id: 'abc' } },
      'bad channel name': { body: { name: 'e', channels: ['has space'], data: '{}' } },
      'event name over 200 chars': { body: { name: 'e'.repeat(201), channels: ['a'], data: '{}' } },
    };
    for (const [label, req] of Object.entries(cases)) {
      const res = await rawApi(server, { method: 'POST', path: '/events', ...req });
      assert.ok(res.status >= 400 && res.status < 500, `${label}: ${res.status} ${res.text}`);
      assert.ok(res.status === 400 || res.status === 422, `${label}: ${res.status}`);
    }
    const batch = await rawApi(server, { method: 'POST', path: '/batch_events', body: { batch: [] } });
    assert.equal(batch.status, 400);
  });
});

describe('one signing middleware', () => {
  // The Pusher HTTP API and the Toolmark app API refuse the same requests with the same
  // statuses; each has its own body limit (server.max_request_size 5000, the bridge's 1 MiB).
  const surfaces = {
    'HTTP API': { path: '/events', body: () => ({ name: 'e', channels: [uid('sig-')], data: '{}' }), limit: 5000 },
    'Toolmark app API': { path: '/toolmark/calls', body: () => ({ user_id: 'u1', conversation_id: 'c1', tool: 'x.y', input: {} }), limit: 1 << 20 },
  };
  const over = (limit) => JSON.stringify({ pad: 'x'.repeat(limit) });
  const now = () => Math.floor(Date.now() / 1000);
  const cases = {
    valid: [{}, undefined, 200],
    'bad signature': [{ signature: 'f'.repeat(64) }, undefined, 401],
    'wrong secret': [{ secret: 'not-the-secret' }, undefined, 401],
    'expired (610 s)': [() => ({ timestamp: now() - 610 }), undefined, 401],
    'from the future (610 s)': [() => ({ timestamp: now() + 610 }), undefined, 401],
    'unknown key': [{ key: 'who-is-this' }, undefined, 401],
    'body_md5 mismatch': [{ bodyMd5: 'd41d8cd98f00b204e9800998ecf8427e' }, undefined, 401],
    'signed with the prefix-less path of another route': [{ signedPath: '/apps/api1/channels' }, undefined, 401],
    'unknown app': [{ appId: 'no-such-app' }, undefined, 404],
    'too large': [{}, 'over', 413],
    'too large and unsigned: refused before the body is read': [{ signature: '0'.repeat(64) }, 'over', 401],
  };
  for (const [surface, def] of Object.entries(surfaces)) {
    test(`${surface}: every refusal of the shared table`, async () => {
      for (const [label, [sign, bodyKind, want]] of Object.entries(cases)) {
        const req = { method: 'POST', path: def.path, sign: typeof sign === 'function' ? sign() : sign };
        if (bodyKind === 'over') req.bodyText = over(def.limit);
        else req.body = def.body();
        const res = await rawApi(server, req);
        assert.equal(res.status, want, `${surface} / ${label}: ${res.status} ${res.text.slice(0, 200)}`);
        if (want >= 400) assert.ok(res.body && typeof res.body.error === 'string', `${label}: ${res.text.slice(0, 200)}`);
      }
    });
  }
});

describe('input types', () => {
  // Each field of the wrong JSON type → 400 with a message naming the field, and nothing is
  // delivered. Raw signed fetches send what no SDK would; the SDK cases are what a caller of
  // the official `pusher` package can send through its public methods.
  const ev = (extra) => ({ name: 'e', channels: ['typed'], data: '{}', ...extra });
  const raw = {
    'data number': [ev({ data: 5 }), 'data must be a string'],
    'data object': [ev({ data: { a: 1 } }), 'data must be a string'],
    'name number': [ev({ name: 7 }), 'name must be a string'],
    'channels string': [ev({ channels: 'typed' }), 'channels must be an array of strings'],
    'channels of numbers': [ev({ channels: [1] }), 'channels must be an array of strings'],
    'channel array': [{ name: 'e', channel: ['typed'], data: '{}' }, 'channel must be a string'],
    'socket_id number': [ev({ socket_id: 1.5 }), 'socket_id must be a socket id'],
    'socket_id not an id': [ev({ socket_id: '1.x' }), 'socket_id must be a socket id'],
    'info number': [ev({ info: 1 }), 'info must be a string'],
  };
  const batchRaw = {
    'batch object': [{ batch: { name: 'e' } }, 'batch must be an array'],
    'batch item data': [{ batch: [{ name: 'e', channel: 'typed', data: '{}' }, { name: 'e', channel: 'typed', data: 1 }] }, 'batch[1]: data must be a string'],
    'batch item channel': [{ batch: [{ name: 'e', channel: 2, data: '{}' }] }, 'batch[0]: channel must be a string'],
    'batch item socket_id': [{ batch: [{ name: 'e', channel: 'typed', data: '{}', socket_id: 'abc' }] }, 'batch[0]: socket_id must be a socket id'],
    'batch item info': [{ batch: [{ name: 'e', channel: 'typed', data: '{}', info: ['user_count'] }] }, 'batch[0]: info must be a string'],
  };

  test('raw signed fetches: each wrong type → 400 naming the field', async (t) => {
    const w = await joined(t, 'typed');
    for (const [label, [body, msg]] of Object.entries(raw)) {
      const res = await rawApi(server, { method: 'POST', path: '/events', body });
      assert.equal(res.status, 400, `${label}: ${res.status} ${res.text}`);
      assert.ok(res.body && res.body.error.includes(msg), `${label}: ${res.text} should say "${msg}"`);
    }
    for (const [label, [body, msg]] of Object.entries(batchRaw)) {
      const res = await rawApi(server, { method: 'POST', path: '/batch_events', body });
      assert.equal(res.status, 400, `${label}: ${res.status} ${res.text}`);
      assert.ok(res.body && res.body.error.includes(msg), `${label}: ${res.text} should say "${msg}"`);
    }
    assert.deepEqual(await w.none('e', 300), [], 'nothing delivered');
  });

  test('the pusher SDK: wrong types it lets through → 400 naming the field', async (t) => {
    const w = await joined(t, 'typed');
    const cases = {
      'trigger with a numeric event name': [() => api.trigger('typed', 42, {}), 'name must be a string'],
      'trigger with a numeric info': [() => api.trigger('typed', 'e', {}, { info: 5 }), 'info must be a string'],
      'triggerBatch with a numeric name': [() => api.triggerBatch([{ channel: 'typed', name: 9, data: {} }]), 'batch[0]: name must be a string'],
      'triggerBatch with a numeric info': [() => api.triggerBatch([{ channel: 'typed', name: 'e', data: {}, info: 1 }]), 'batch[0]: info must be a string'],
      'triggerBatch with a bad socket_id': [() => api.triggerBatch([{ channel: 'typed', name: 'e', data: {}, socket_id: 'abc' }]), 'batch[0]: socket_id must be a socket id'],
      'post with object data': [() => api.post({ path: '/events', body: ev({ data: { a: 1 } }) }), 'data must be a string'],
      'post with channels as a string': [() => api.post({ path: '/events', body: ev({ channels: 'typed' }) }), 'channels must be an array of strings'],
    };
    for (const [label, [call, msg]] of Object.entries(cases)) {
      const res = await outcome(call());
      assert.equal(res.status, 400, `${label}: ${JSON.stringify(res)}`);
      assert.ok(res.body && String(res.body.error).includes(msg), `${label}: ${JSON.stringify(res.body)} should say "${msg}"`);
    }
    assert.deepEqual(await w.none('e', 300), [], 'nothing delivered');
    // The same SDK with well-typed values is accepted, so the 400s above are the types'.
    assert.equal((await outcome(api.trigger('typed', 'ok', {}, { info: 'subscription_count' }))).status, 200);
    await w.next('ok');
  });
});

describe('server.path prefix "/ws"', () => {
  let prefixed;
  before(async () => {
    prefixed = await startServer({ apps: [APPS[0]], server: { path: '/ws' } });
  });
  after(async () => {
    await prefixed.stop();
  });

  test('pusher-js (wsPath) and the SDK both work under the prefix', async (t) => {
    assert.equal(prefixed.wsUrl.endsWith('/ws'), true);
    const p = pusherClient(prefixed);
    cleanup(t).add(() => p.disconnect());
    await whenConnected(p);
    const name = uid('prefixed-');
    const { channel } = await subscribe(p, name);
    const got = inbox(channel, 'hi');
    const client = sdk(prefixed);
    assert.equal((await outcome(client.trigger(name, 'hi', { via: 'prefix' }))).status, 200);
    assert.deepEqual((await got.wait(1))[0], { via: 'prefix' });
    assert.deepEqual(await apiGet(client, `/channels/${name}`, { info: 'subscription_count' }), { occupied: true, subscription_count: 1 });
    const signedRaw = await rawApi(prefixed, { path: '/connections' });
    assert.equal(signedRaw.status, 200, 'the signature covers the path without the prefix');
    const withPrefixSigned = await rawApi(prefixed, { path: '/connections', sign: { signedPath: `/ws/apps/${APPS[0].app_id}/connections` } });
    assert.equal(withPrefixSigned.status, 401, 'a signature over the prefixed path is not accepted');
  });

  test('/ws/up answers; routes without the prefix do not', async () => {
    const up = await fetch(`${prefixed.url}/up`);
    assert.deepEqual(await up.json(), { health: 'OK' });
    const bare = await fetch(`http://127.0.0.1:${prefixed.port}/up`);
    assert.equal(bare.status, 404);
    await assert.rejects(Wire.open({ ...prefixed, wsUrl: `ws://127.0.0.1:${prefixed.port}` }), /HTTP 404/);
  });
});
