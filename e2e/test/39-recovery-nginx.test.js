'use strict';
// Recovery across a node's shutdown in a cluster (issue 23): two nodes with scaling on a
// standalone Redis behind deploy/nginx.conf (Debian's nginx), 50 laravel-echo clients with
// clients/recovery's enableRecovery on 10 private channels, all connected to node A (node B
// starts once they are in, so nginx had nowhere else to send them), and 200 events/s through
// the HTTP API via nginx. SIGTERM to node A: its clients get 4200, reconnect through nginx to
// node B and resume there from the history in Redis. Every event the API accepted reaches
// every subscriber of its channel exactly once, in publish order, with no resume_failed.
//
// The ids are per publish attempt: an API request that failed while node A went away may
// or may not have been published, so such an id may arrive (once, in order) or not; every
// accepted one must. REC_WITHOUT_MODULE=1 runs the clients without enableRecovery: it fails.
const { describe, test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { sdk, apiGet, echoClient } = require('../lib/clients');
const { startTopology, haveRedis } = require('../lib/cluster');
const { NGINX, startNginx } = require('../lib/nginx');
const { startServer, freePort } = require('../lib/server');
const { startAuthApp } = require('../lib/authapp');
const { uid, eventually, sleep } = require('../lib/util');

const APP = { app_id: 'recn', key: 'recn-key', secret: 'recn-secret', recovery: { enabled: true, history_size: 2000, channels: ['private-*'] } };
const CLIENTS = 50;
const CHANNELS = 10;
const RATE = 200; // events per second, over all channels

function node(topo, port, channel) {
  const config = { server: { host: '127.0.0.1', port, shutdown_timeout: 5 }, apps: [APP], scaling: { enabled: true, ...topo.scaling, channel } };
  return startServer({ apps: [APP], server: { port }, config });
}

describe('recovery behind nginx: a node shut down under its clients', { skip: (!NGINX && 'nginx not installed') || (!haveRedis() && 'redis not installed') }, () => {
  let topo, a, b, nginx, authApp, proxy, enableRecovery;
  const clients = [];
  before(async () => {
    ({ enableRecovery } = await import('../../clients/recovery/index.js'));
    topo = await startTopology('standalone');
    const channel = uid('e2erec');
    const portB = await freePort();
    a = await node(topo, await freePort(), channel);
    nginx = await startNginx([a.port, portB]);
    proxy = { host: '127.0.0.1', port: nginx.port, prefix: '', tls: false, app: APP, url: `http://127.0.0.1:${nginx.port}` };
    authApp = await startAuthApp({ sdk: sdk(proxy) });
    // Node B is started later, on portB, once every client is on node A.
    proxy.startB = () => node(topo, portB, channel).then((n) => (b = n));
  });
  after(async () => {
    for (const c of clients) c.echo.disconnect();
    await authApp?.close();
    await nginx?.stop();
    await Promise.all([a?.stop(), b?.stop()]);
    await topo?.stop();
  });

  test('SIGTERM to the node holding 50 laravel-echo clients while publishing 200 events/s: every event once and in order per channel', async () => {
    const names = Array.from({ length: CHANNELS }, () => uid('orders.'));
    for (let i = 0; i < CLIENTS; i++) {
      const name = names[i % CHANNELS];
      const echo = await echoClient(proxy, { authApp });
      if (process.env.REC_WITHOUT_MODULE !== '1') enableRecovery(echo.connector.pusher);
      const c = { echo, name, got: [], failed: [], subscribed: false };
      echo.private(name)
        .subscribed(() => (c.subscribed = true))
        .listen('.ev', (d) => c.got.push(d.id))
        .listen('.pusher:resume_failed', (d) => c.failed.push(d));
      clients.push(c);
    }
    await eventually(() => clients.every((c) => c.subscribed), { ms: 20000, what: `${CLIENTS} subscriptions` });
    const oldIds = clients.map((c) => c.echo.socketId());
    await proxy.startB();
    await eventually(async () => (await apiGet(sdk(a), '/connections')).connections === CLIENTS, { what: 'every client on node A' });

    // One sequential publisher per channel through nginx, RATE/CHANNELS events/s each.
    const api = sdk(proxy);
    const accepted = new Map(names.map((n) => [n, []]));
    const attempted = new Map(names.map((n) => [n, new Set()]));
    let next = 0;
    let running = true;
    const loops = names.map(async (name) => {
      while (running) {
        const id = ++next;
        attempted.get(name).add(id);
        const t0 = Date.now();
        try {
          await api.trigger(`private-${name}`, 'ev', { id });
          accepted.get(name).push(id);
        } catch {
          // node A going away under the request: maybe published, maybe not
        }
        await sleep(Math.max(0, (1000 * CHANNELS) / RATE - (Date.now() - t0)));
      }
    });
    try {
      await eventually(() => clients.every((c) => c.got.length >= 20), { ms: 10000, what: 'events flowing to every client' });
      a.proc.kill('SIGTERM');
      await eventually(() => clients.every((c, i) => c.echo.connector.pusher.connection.state === 'connected' && c.echo.socketId() !== oldIds[i]),
        { ms: 20000, what: 'every client reconnected through nginx' });
      await eventually(async () => (await apiGet(sdk(b), '/connections')).connections === CLIENTS, { what: 'every client on node B' });
      const mark = next;
      await eventually(() => next > mark + RATE, { ms: 10000, what: 'a second of publishing after the move' });
    } finally {
      running = false;
      await Promise.all(loops);
    }
    const total = [...accepted.values()].reduce((s, l) => s + l.length, 0);
    assert.ok(total > 2 * RATE, `${total} events accepted`);
    const missing = (c) => accepted.get(c.name).filter((id) => !c.got.includes(id));
    // Waited for, then asserted with what is missing (a timeout alone would not say).
    await eventually(() => clients.every((c) => missing(c).length === 0), { ms: 10000, what: 'every accepted event at every subscriber' }).catch(() => {});
    await sleep(200); // a late duplicate would show here
    for (const c of clients) {
      const lost = missing(c);
      assert.equal(lost.length, 0, `${lost.length} of ${accepted.get(c.name).length} accepted events never reached a client of ${c.name} (resume_failed: ${JSON.stringify(c.failed)})`);
      assert.deepEqual(c.failed, [], `no resume_failed on ${c.name}`);
      const seen = new Set(c.got);
      assert.equal(seen.size, c.got.length, `no event twice on ${c.name}`);
      assert.deepEqual(c.got, [...c.got].sort((x, y) => x - y), `publish order on ${c.name}`);
      for (const id of c.got) assert.ok(attempted.get(c.name).has(id), `event ${id} was published to ${c.name}`);
    }
  });
});
