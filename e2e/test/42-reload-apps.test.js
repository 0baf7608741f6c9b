'use strict';
// SIGHUP re-reads the config file's apps (issue 32), on two nodes with scaling on a
// standalone redis-server, with pusher-js and the `pusher` SDK on each node: an added app
// accepts sockets and API calls, a removed app's sockets get 4001 and its API calls 404,
// `enabled: false` closes with 4003, a new secret signs and verifies (SDK, private and presence
// channel auth, user auth) from then on, a raised max_connections admits new sockets, a file
// that fails `config check` changes nothing; the sockets of the app no reload touches stay
// connected throughout and keep receiving.
const { describe, test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const { sdk, apiGet, outcome, pusherClient, whenConnected, subscribe, inbox } = require('../lib/clients');
const { startTopology, startNodes, haveRedis } = require('../lib/cluster');
const { eventually, uid } = require('../lib/util');

const app = (id, extra = {}) => ({ app_id: id, key: `${id}-key`, secret: `${id}-secret`, ...extra });
const BASE = [app('keep'), app('gone'), app('off'), app('rekey', { enable_user_authentication: true }), app('lim', { max_connections: 1 })];
const byId = (apps, id) => apps.find((a) => a.app_id === id);

async function reloads(node, result) {
  const text = await (await fetch(`${node.url}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`reverbgo_config_reloads_total{result="${result}"}`));
  return line ? Number(line.split(' ')[1]) : 0;
}

/** Rewrites each node's file with apps (and the rest as started), SIGHUPs it, waits for the count. */
async function reload(nodes, apps, result = 'ok') {
  for (const n of nodes) {
    const before = await reloads(n, result);
    const cfg = JSON.parse(fs.readFileSync(n.file, 'utf8'));
    cfg.apps = apps;
    fs.writeFileSync(n.file, JSON.stringify(cfg, null, 2));
    n.proc.kill('SIGHUP');
    await eventually(async () => (await reloads(n, result)) === before + 1, { what: `reload ${result} on :${n.port}` });
  }
}

/** pusher-js on node with app; resolves {pusher, errors} once connected. */
async function connect(node, a, opts = {}) {
  const pusher = pusherClient(node, { app: a, ...opts });
  const errors = [];
  pusher.connection.bind('error', (e) => errors.push(e?.data?.code ?? e?.error?.data?.code));
  clients.push(pusher);
  await whenConnected(pusher);
  return { pusher, errors };
}

/** pusher-js on node with app, expected refused with code. */
async function refused(node, a, code) {
  const pusher = pusherClient(node, { app: a });
  const errors = [];
  pusher.connection.bind('error', (e) => errors.push(e?.data?.code ?? e?.error?.data?.code));
  clients.push(pusher);
  await eventually(() => errors.includes(code), { what: `pusher-js refused ${code} by :${node.port} (errors ${JSON.stringify(errors)})` });
  assert.notEqual(pusher.connection.state, 'connected');
  pusher.disconnect();
}

const clients = [];

describe('SIGHUP reloads apps on two nodes', { skip: !haveRedis() && 'redis not installed' }, () => {
  let topo, nodes, kept;
  before(async () => {
    topo = await startTopology('standalone');
    nodes = await startNodes(topo, 2, { apps: BASE, extra: { metrics: { enabled: true } } });
    // The untouched app: a pusher-js socket on each node, subscribed.
    kept = [];
    for (const n of nodes) {
      const { pusher } = await connect(n, byId(BASE, 'keep'));
      const { channel } = await subscribe(pusher, 'keep-ch');
      kept.push({ pusher, id: pusher.connection.socket_id, box: inbox(channel, 'ev') });
    }
  });
  after(async () => {
    for (const c of clients) c.disconnect();
    await nodes?.stopAll();
    await topo?.stop();
  });

  async function keptUntouched(n) {
    for (const k of kept) {
      assert.equal(k.pusher.connection.state, 'connected');
      assert.equal(k.pusher.connection.socket_id, k.id, 'the unchanged app\'s socket was not reconnected');
    }
    for (const node of nodes) assert.equal((await sdk(node, byId(BASE, 'keep')).trigger('keep-ch', 'ev', { n })).status, 200);
    for (const k of kept) await eventually(() => k.box.got.some((d) => d.n === n), { what: `kept socket got event ${n}` });
  }

  test('an added app accepts pusher-js and SDK calls on both nodes', async () => {
    const added = app('added');
    await refused(nodes[0], added, 4001);
    await reload(nodes, [...BASE, added]);
    const ch = uid('added-ch.');
    const boxes = [];
    for (const n of nodes) {
      const { pusher } = await connect(n, added);
      boxes.push(inbox((await subscribe(pusher, ch)).channel, 'ev'));
    }
    for (const n of nodes) assert.equal((await sdk(n, added).trigger(ch, 'ev', { via: n.port })).status, 200);
    for (const b of boxes) await b.wait(2);
    // Cluster-wide answers count the added app's sockets on the other node too.
    for (const n of nodes) {
      await eventually(async () => (await apiGet(sdk(n, added), '/connections')).connections === 2, { what: `connections of the added app via :${n.port}` });
    }
    await keptUntouched(1);
  });

  test('a removed app: its pusher-js sockets get 4001, its SDK calls 404', async () => {
    const gone = byId(BASE, 'gone');
    const socks = [];
    for (const n of nodes) socks.push(await connect(n, gone));
    await reload(nodes, BASE.filter((a) => a !== gone));
    for (const s of socks) await eventually(() => s.errors.includes(4001), { what: `4001 (errors ${JSON.stringify(s.errors)})` });
    for (const n of nodes) assert.equal((await outcome(sdk(n, gone).trigger('x', 'ev', {}))).status, 404);
    await refused(nodes[1], gone, 4001);
    await keptUntouched(2);
  });

  test('enabled: false closes the app\'s pusher-js sockets with 4003', async () => {
    const off = byId(BASE, 'off');
    const socks = [];
    for (const n of nodes) socks.push(await connect(n, off));
    await reload(nodes, BASE.map((a) => (a === off ? { ...a, enabled: false } : a)));
    for (const s of socks) await eventually(() => s.errors.includes(4003), { what: `4003 (errors ${JSON.stringify(s.errors)})` });
    await refused(nodes[0], off, 4003);
    await keptUntouched(3);
  });

  test('a new secret signs and verifies: SDK, private and presence channel auth, user auth', async () => {
    const oldApp = byId(BASE, 'rekey');
    const newApp = { ...oldApp, secret: 'rotated-secret' };
    // Sockets connected before the reload, on each node: one whose backend still signs with
    // the old secret, one whose backend signs with the new one.
    const olds = [];
    const news = [];
    for (const n of nodes) {
      olds.push(await connect(n, oldApp));
      news.push((await connect(n, newApp, { user: { id: `u${n.port}`, info: {} } })).pusher);
    }
    await reload(nodes, BASE.map((a) => (a === oldApp ? newApp : a)));
    for (const n of nodes) {
      assert.equal((await outcome(sdk(n, oldApp).trigger('x', 'ev', {}))).status, 401, 'old secret refused');
      assert.equal((await sdk(n, newApp).trigger('x', 'ev', {})).status, 200, 'new secret accepted');
    }
    for (const p of news) {
      await subscribe(p, uid('private-rk.'));
      await subscribe(p, uid('presence-rk.'));
      const signedIn = new Promise((resolve) => p.bind('pusher:signin_success', resolve));
      p.signin();
      await signedIn;
    }
    for (const { pusher, errors } of olds) {
      let ok = false;
      pusher.subscribe(uid('private-rk.')).bind('pusher:subscription_succeeded', () => (ok = true));
      await eventually(() => errors.includes(4009), { what: `4009 for the old secret (errors ${JSON.stringify(errors)})` });
      assert.equal(ok, false, 'subscribed with a signature of the old secret');
    }
    await keptUntouched(4);
  });

  test('a raised max_connections admits new pusher-js sockets', async () => {
    const lim = byId(BASE, 'lim');
    await connect(nodes[0], lim);
    await refused(nodes[0], lim, 4004);
    await reload(nodes, BASE.map((a) => (a === lim ? { ...a, max_connections: 2 } : a)));
    await connect(nodes[0], lim);
    await refused(nodes[0], lim, 4004);
    await keptUntouched(5);
  });

  test('a file that does not pass config check changes nothing', async () => {
    await reload(nodes, [...BASE, app('bad', { max_connections: -1 })], 'error');
    // The count is read over HTTP, the log through a pipe this process drains when it gets to
    // it: the line may still be on its way.
    for (const n of nodes) {
      await eventually(() => /config reload failed.*apps\[5\]\.max_connections/.test(n.logs()), { what: `the failed reload logged by :${n.port}` });
    }
    await refused(nodes[0], app('bad'), 4001);
    await keptUntouched(6);
  });
});
