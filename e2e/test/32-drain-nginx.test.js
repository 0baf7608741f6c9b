'use strict';
// The drain on SIGTERM (server.drain_delay, server.drain_period) behind deploy/nginx.conf run
// by Debian's nginx, two nodes with scaling on a standalone redis-server. 20 pusher-js clients
// (with clients/recovery) on private channels, all on node A (node B starts once they are in),
// and events published through nginx with the `pusher` SDK. SIGTERM to node A:
//   - its /up answers 503 {"health":"draining"} from the signal on, for the whole delay;
//   - during the delay node A still takes new WebSockets and SDK calls, and its clients
//     stay connected;
//   - then its clients are told 4200 one by one, spread over the period, and end on node B;
//   - a connection attempt through nginx every 100 ms is never refused;
//   - every event the SDK had accepted reaches every subscriber once, in order.
const { describe, test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { sdk, apiGet, pusherClient, whenConnected, subscribe } = require('../lib/clients');
const { startTopology, haveRedis } = require('../lib/cluster');
const { NGINX, startNginx } = require('../lib/nginx');
const { startServer, freePort } = require('../lib/server');
const { Wire } = require('../lib/wire');
const { uid, eventually, sleep } = require('../lib/util');

const APP = { app_id: 'drn', key: 'drn-key', secret: 'drn-secret', recovery: { enabled: true, history_size: 2000, channels: ['private-*'] } };
const CLIENTS = 20;
const CHANNELS = 4;
const DELAY = 3; // s
const PERIOD = 4; // s

function node(topo, port, channel, drain) {
  const config = {
    server: { host: '127.0.0.1', port, shutdown_timeout: 5, drain_delay: drain[0], drain_period: drain[1] },
    metrics: { enabled: true },
    apps: [APP],
    scaling: { enabled: true, ...topo.scaling, channel },
  };
  return startServer({ apps: [APP], server: { port }, config });
}

async function up(srv) {
  try {
    const res = await fetch(`${srv.url}/up`, { signal: AbortSignal.timeout(1000) });
    return { status: res.status, body: await res.json() };
  } catch (err) {
    return { status: 0, error: String(err.cause?.code || err) };
  }
}

async function gauge(srv, name) {
  const text = await (await fetch(`${srv.url}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return line ? Number(line.split(' ')[1]) : undefined;
}

describe('drain on SIGTERM behind nginx', { skip: (!NGINX && 'nginx not installed') || (!haveRedis() && 'redis not installed') }, () => {
  let topo, a, b, nginx, proxy, enableRecovery;
  const clients = [];
  before(async () => {
    ({ enableRecovery } = await import('../../clients/recovery/index.js'));
    topo = await startTopology('standalone');
    const channel = uid('e2edrain');
    const portB = await freePort();
    a = await node(topo, await freePort(), channel, [DELAY, PERIOD]);
    nginx = await startNginx([a.port, portB]);
    proxy = { host: '127.0.0.1', port: nginx.port, prefix: '', tls: false, app: APP, url: `http://127.0.0.1:${nginx.port}`, wsUrl: `ws://127.0.0.1:${nginx.port}` };
    proxy.startB = () => node(topo, portB, channel, [0, 0]).then((n) => (b = n));
  });
  after(async () => {
    for (const c of clients) c.pusher.disconnect();
    await nginx?.stop();
    await Promise.all([a?.stop('SIGKILL'), b?.stop()]);
    await topo?.stop();
  });

  test('503 draining from the signal on, sockets and the SDK served for the delay, 4200s spread over the period, clients end on node B, nothing refused or lost', async () => {
    const names = Array.from({ length: CHANNELS }, () => uid('private-drain.'));
    for (let i = 0; i < CLIENTS; i++) {
      const pusher = pusherClient(proxy);
      enableRecovery(pusher);
      const c = { pusher, name: names[i % CHANNELS], got: [], failed: [], leftAt: 0 };
      pusher.connection.bind('state_change', ({ previous, current }) => {
        if (previous === 'connected' && current !== 'connected' && !c.leftAt) c.leftAt = Date.now();
      });
      await whenConnected(pusher);
      const { channel } = await subscribe(pusher, c.name);
      channel.bind('ev', (d) => c.got.push(d.id));
      channel.bind('pusher:resume_failed', (d) => c.failed.push(d));
      clients.push(c);
    }
    const oldIds = clients.map((c) => c.pusher.connection.socket_id);
    await proxy.startB();
    await eventually(async () => (await apiGet(sdk(a), '/connections')).connections === CLIENTS, { what: 'every client on node A' });
    assert.equal(await gauge(a, 'reverbgo_draining'), 0);

    // Publishing through nginx, one sequential publisher per channel.
    const api = sdk(proxy);
    const accepted = new Map(names.map((n) => [n, []]));
    let next = 0;
    let running = true;
    const publishers = names.map(async (name) => {
      while (running) {
        const id = ++next;
        try {
          await api.trigger(name, 'ev', { id });
          accepted.get(name).push(id);
        } catch {
          // a request node A was answering as its listener closed: maybe published
        }
        await sleep(40);
      }
    });
    // A connection attempt through nginx every 100 ms: each must be established.
    const refused = [];
    let attempts = 0;
    let probing = true;
    const prober = (async () => {
      while (probing) {
        attempts++;
        const n = attempts;
        Wire.connect(proxy)
          .then((w) => w.close())
          .catch((err) => refused.push(`attempt ${n}: ${err.message}`));
        await sleep(100);
      }
    })();

    try {
      await eventually(() => clients.every((c) => c.got.length >= 5), { ms: 10000, what: 'events flowing to every client' });
      const t0 = Date.now();
      a.proc.kill('SIGTERM');
      // /up: 503 draining from the signal on (the first probe that the process has seen).
      await eventually(async () => (await up(a)).status === 503, { ms: 500, what: 'node A /up 503 after SIGTERM' });
      assert.deepEqual((await up(a)).body, { health: 'draining' });
      assert.equal(await gauge(a, 'reverbgo_draining'), 1);
      // During the delay node A serves: a new socket directly, the SDK directly, /up stays 503.
      const direct = await Wire.connect(a);
      direct.close();
      const res = await sdk(a).trigger(names[0], 'ev-direct', { during: 'delay' });
      assert.equal(res.status, 200);
      assert.equal((await apiGet(sdk(a), '/connections')).connections >= CLIENTS, true);
      assert.ok(clients.every((c) => c.leftAt === 0), 'no client of node A told to leave during the delay');
      while (Date.now() - t0 < DELAY * 1000 - 300) {
        const u = await up(a);
        assert.equal(u.status, 503, `node A /up ${JSON.stringify(u)} at ${Date.now() - t0} ms, within the delay`);
        await sleep(100);
      }
      // The 4200s, spread over the period; every client ends on node B.
      await eventually(() => clients.every((c) => c.leftAt > 0), { ms: (DELAY + PERIOD) * 1000 + 5000, what: 'every client of node A told 4200' });
      await eventually(() => clients.every((c, i) => c.pusher.connection.state === 'connected' && c.pusher.connection.socket_id !== oldIds[i]),
        { ms: 10000, what: 'every client reconnected through nginx' });
      await eventually(async () => (await apiGet(sdk(b), '/connections')).connections >= CLIENTS, { what: 'every client on node B' });
      const left = clients.map((c) => c.leftAt - t0).sort((x, y) => x - y);
      const spread = left[left.length - 1] - left[0];
      const want = (PERIOD * 1000 * (CLIENTS - 1)) / CLIENTS;
      assert.ok(left[0] >= DELAY * 1000 - 200, `first 4200 at ${left[0]} ms, within the delay`);
      assert.ok(spread >= want * 0.6 && spread <= PERIOD * 1000 + 500, `4200s spread over ${spread} ms, want about ${want} ms: ${left}`);
      // Evenly: no more than a quarter of the clients in any tenth of the period.
      for (let i = 0; i < left.length; i++) {
        const within = left.filter((x) => x >= left[i] && x < left[i] + PERIOD * 100).length;
        assert.ok(within <= CLIENTS / 4, `${within} clients told 4200 within ${PERIOD * 100} ms of ${left[i]} ms: ${left}`);
      }
      await a.exited;
      const mark = next;
      await eventually(() => next > mark + 20, { ms: 10000, what: 'publishing after the move' });
    } finally {
      running = false;
      probing = false;
      await Promise.all(publishers);
      await prober;
    }
    await sleep(500); // the last probes settle
    assert.deepEqual(refused, [], `${refused.length} of ${attempts} connection attempts through nginx refused`);
    const missing = (c) => accepted.get(c.name).filter((id) => !c.got.includes(id));
    await eventually(() => clients.every((c) => missing(c).length === 0), { ms: 10000, what: 'every accepted event at every subscriber' }).catch(() => {});
    for (const c of clients) {
      assert.deepEqual(missing(c), [], `accepted events never reached a client of ${c.name}`);
      assert.deepEqual(c.failed, [], `no resume_failed on ${c.name}`);
      assert.equal(new Set(c.got).size, c.got.length, `no event twice on ${c.name}`);
      assert.deepEqual(c.got, [...c.got].sort((x, y) => x - y), `publish order on ${c.name}`);
    }
  });
});
