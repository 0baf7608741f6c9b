'use strict';
// Pusher's watchlist with pusher-js (pusher.user.watchlist.bind('online' | 'offline')): a
// signed-in user's user_data.watchlist is followed; pusher_internal:watchlist_events carries
// {"events":[{"name":"online"|"offline","user_ids":[...]}]} (pusher-js src/core/watchlist.ts)
// for the users online at signin, then once per transition (first signed-in connection,
// last one closed), on one node and across two nodes on Redis, a SIGKILLed node included.
const { describe, test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { pusherClient, whenConnected } = require('../lib/clients');
const { startServer } = require('../lib/server');
const { startTopology, startNodes, haveRedis } = require('../lib/cluster');
const { cleanup, eventually, quiet, uid } = require('../lib/util');

const APP = { app_id: 'wl', key: 'wl-key', secret: 'wl-secret' };

/** A pusher-js client signed in as id, recording its watchlist events in order. */
async function user(t, node, id, watchlist) {
  const p = pusherClient(node, { app: APP, user: { id, watchlist } });
  cleanup(t).add(() => p.disconnect());
  p.events = [];
  for (const name of ['online', 'offline']) p.user.watchlist.bind(name, (ev) => p.events.push(`${ev.name}:${[...ev.user_ids].sort().join(',')}`));
  await whenConnected(p);
  p.signin();
  await p.user.signinDonePromise;
  assert.ok(p.user.user_data, `${id} signed in`);
  return p;
}

async function seen(p, want, what) {
  await eventually(() => p.events.length >= want.length, { what }).catch((err) => {
    throw new Error(`${err.message}; events so far ${JSON.stringify(p.events)}, want ${JSON.stringify(want)}`);
  });
  assert.deepEqual(p.events, want, what);
}

describe('watchlist on one node', () => {
  let srv;
  before(async () => {
    srv = await startServer({ apps: [APP], nodes: 1 });
  });
  after(() => srv.stop());

  test('online now at signin, then online/offline once per transition', async (t) => {
    const a = uid('alice');
    const b = uid('bob');
    const bob = await user(t, srv, b);
    const w = await user(t, srv, uid('w'), [a, b, uid('nobody')]);
    await seen(w, [`online:${b}`], 'the initial list');

    const alice1 = await user(t, srv, a);
    await seen(w, [`online:${b}`, `online:${a}`], 'alice online');
    const alice2 = await user(t, srv, a); // a second connection: no transition
    alice1.disconnect(); // still online through alice2
    await quiet();
    assert.equal(w.events.length, 2, `no event for a non-last connection: ${JSON.stringify(w.events)}`);
    alice2.disconnect();
    bob.disconnect();
    await eventually(() => w.events.length >= 4, { what: 'two offline events' });
    assert.deepEqual(w.events.slice(2).sort(), [`offline:${a}`, `offline:${b}`]);
    await quiet();
    assert.equal(w.events.length, 4, `nothing more: ${JSON.stringify(w.events)}`);
  });

  test('a watchlist of 101 ids fails the signin with a Pusher error', async (t) => {
    const ids = Array.from({ length: 101 }, (_, i) => `u${i}`);
    const p = pusherClient(srv, { app: APP, user: { id: 'big', watchlist: ids } });
    cleanup(t).add(() => p.disconnect());
    const errors = [];
    p.connection.bind('error', (e) => errors.push(e));
    await whenConnected(p);
    p.signin();
    await eventually(() => errors.length > 0, { what: 'pusher:error' });
    assert.equal(errors[0].data.code, 4009);
    assert.match(errors[0].data.message, /watchlist/);
    assert.equal(p.user.user_data, null);
  });
});

describe('watchlist across two nodes on Redis', { skip: !haveRedis() && 'redis-server not installed' }, () => {
  let topo;
  let nodes;
  before(async () => {
    topo = await startTopology('standalone');
    nodes = await startNodes(topo, 2, { apps: [APP], scaling: { node_timeout: 3 } });
  });
  after(async () => {
    if (nodes) await nodes.stopAll();
    if (topo) await topo.stop();
  });

  test('a user signing in and out on the other node is online/offline once, whatever node each connection uses', async (t) => {
    const [A, B] = nodes;
    const a = uid('alice');
    const w = await user(t, A, uid('w'), [a]);
    const onB = await user(t, B, a);
    await seen(w, [`online:${a}`], 'online through node B');
    const onA = await user(t, A, a);
    onB.disconnect();
    await quiet();
    assert.equal(w.events.length, 1, `no event while alice is on node A: ${JSON.stringify(w.events)}`);
    onA.disconnect();
    await seen(w, [`online:${a}`, `offline:${a}`], 'offline once her last connection closed');

    // A watcher on B signing in later sees who is online on A.
    const c = uid('carol');
    await user(t, A, c);
    const w2 = await user(t, B, uid('w2'), [c, a]);
    await seen(w2, [`online:${c}`], 'initial list across nodes');
  });

  test('a user whose node is killed goes offline once the survivors reap it', async (t) => {
    const [A] = nodes;
    const extra = await startNodes(topo, 1, { apps: [APP], scaling: { node_timeout: 3 }, channel: nodes.channel });
    const [C] = extra;
    const d = uid('dave');
    const w = await user(t, A, uid('w'), [d]);
    await user(t, C, d);
    await seen(w, [`online:${d}`], 'dave online on node C');
    await C.stop('SIGKILL');
    await eventually(() => w.events.length >= 2, { ms: 15000, what: 'offline after the reap' });
    assert.deepEqual(w.events, [`online:${d}`, `offline:${d}`]);
  });
});
