'use strict';
// Pusher's subscription counts (apps[].subscription_count, issue 23): pusher-js's
// channel.bind('pusher:subscription_count', ...) sees the channel's cluster-wide count change on
// subscribe and unsubscribe, on one node and on two nodes sharing a Redis (subscribers on both),
// never on presence channels, and not at all for an app without the setting.
const { describe, test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { startServer } = require('../lib/server');
const { startTopology, startNodes, haveRedis } = require('../lib/cluster');
const { pusherClient, whenConnected, subscribe, inbox } = require('../lib/clients');
const { cleanup, uid, WAIT_MS } = require('../lib/util');

const APPS = [
  { app_id: 'sc1', key: 'sc1-key', secret: 'sc1-secret', subscription_count: true },
  { app_id: 'sc2', key: 'sc2-key', secret: 'sc2-secret' },
];

async function connected(t, server, opts) {
  const p = pusherClient(server, opts);
  cleanup(t).add(() => p.disconnect());
  await whenConnected(p);
  return p;
}

// counts(channel) records the subscription_count values pusher-js hands to the binding.
function counts(channel) {
  return inbox(channel, 'pusher:subscription_count');
}

// counting subscribes with the count binding in place before the subscribe is sent (the
// first count may arrive in the same read as subscription_succeeded).
async function counting(p, name) {
  const box = counts(p.channel(name) || p.subscribe(name));
  const { channel } = await subscribe(p, name);
  return { channel, box };
}

// until waits (polling) until the last count seen is want.
async function lastIs(box, want, what) {
  const end = Date.now() + WAIT_MS;
  while (Date.now() < end) {
    const last = box.got[box.got.length - 1];
    if (last && last.subscription_count === want) return;
    await new Promise((r) => setTimeout(r, 25));
  }
  assert.fail(`${what}: last subscription_count ${JSON.stringify(box.got[box.got.length - 1])}, want ${want} (seen ${JSON.stringify(box.got)})`);
}

// scenario runs on servers[i % servers.length] for the i-th client: one node or several.
function scenarios(getServers) {
  test('a subscriber is told the count after it subscribes, and every change after it', async (t) => {
    const servers = getServers();
    const name = uid('count-');
    const a = await connected(t, servers[0]);
    const { box: boxA } = await counting(a, name);
    await lastIs(boxA, 1, 'first subscriber');
    const b = await connected(t, servers[1 % servers.length]);
    const { box: boxB } = await counting(b, name);
    await lastIs(boxB, 2, 'second subscriber after its own subscribe');
    await lastIs(boxA, 2, 'first subscriber after the second subscribed');
    const c = await connected(t, servers[2 % servers.length]);
    await subscribe(c, name);
    await lastIs(boxA, 3, 'first subscriber after a third');
    c.unsubscribe(name);
    await lastIs(boxA, 2, 'first subscriber after the third unsubscribed');
    await lastIs(boxB, 2, 'second subscriber after the third unsubscribed');
    b.disconnect();
    await lastIs(boxA, 1, 'first subscriber after the second disconnected');
  });

  test('changes within a second are coalesced: the last value wins', async (t) => {
    const servers = getServers();
    const name = uid('burst-');
    const a = await connected(t, servers[0]);
    const { box } = await counting(a, name);
    await lastIs(box, 1, 'alone');
    const before = box.got.length;
    const others = [];
    for (let i = 0; i < 8; i++) others.push(await connected(t, servers[(i + 1) % servers.length]));
    await Promise.all(others.map((p) => subscribe(p, name)));
    await lastIs(box, 9, 'after eight more subscribed');
    const sent = box.got.length - before;
    assert.ok(sent <= 5 * servers.length, `eight changes in about a second sent ${sent} counts`);
  });

  test('presence channels get no subscription count', async (t) => {
    const servers = getServers();
    const name = uid('presence-room-');
    const a = await connected(t, servers[0], { user: { id: 'u1' } });
    const { box } = await counting(a, name);
    const b = await connected(t, servers[1 % servers.length], { user: { id: 'u2' } });
    await subscribe(b, name);
    assert.deepEqual(await box.none(1500), []);
  });
}

describe('subscription counts on one node', () => {
  let server;
  before(async () => {
    server = await startServer({ apps: APPS });
  });
  after(async () => {
    await server.stop();
  });
  scenarios(() => [server]);

  test('an app without subscription_count sends none', async (t) => {
    const app = server.apps ? server.apps[1] : APPS[1];
    const a = await connected(t, server, { app });
    const name = uid('quiet-');
    const { box } = await counting(a, name);
    const b = await connected(t, server, { app });
    await subscribe(b, name);
    assert.deepEqual(await box.none(1500), []);
  });
});

describe('subscription counts on two nodes sharing a Redis', { skip: !haveRedis('standalone') && 'redis-server not installed' }, () => {
  let topo;
  let nodes;
  before(async () => {
    topo = await startTopology('standalone');
    nodes = await startNodes(topo, 2, { apps: APPS });
  });
  after(async () => {
    if (nodes) await nodes.stopAll();
    if (topo) await topo.stop();
  });
  scenarios(() => nodes);
});
