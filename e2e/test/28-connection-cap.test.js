'use strict';
// server.max_connections: the node's WebSocket cap over every app. Over it a client gets
// pusher:error 4100 "Over capacity" and close 4100, which pusher-js treats as "back off and
// retry" (never "failed"); once a slot frees, pusher-js's own retry gets in. Refusals are
// counted under reverbgo_connections_refused_total{reason="over_capacity"}. Without the key the
// cap is the open-file limit less a reserve, logged at start ("connection cap"); -1 = no cap.
// (An invalid value refusing start-up is in 06-config-cli.)
const { describe, test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const { startServer, freePort } = require('../lib/server');
const { Wire } = require('../lib/wire');
const { sdk, outcome, pusherClient, whenConnected, state, subscribe, inbox } = require('../lib/clients');
const { scrape, parse } = require('../lib/prom');
const { cleanup, uid, eventually } = require('../lib/util');

const A = { app_id: 'cap-a', key: 'cap-a-key', secret: 'cap-a-secret' };
const B = { app_id: 'cap-b', key: 'cap-b-key', secret: 'cap-b-secret' };
const OVER = { code: 4100, message: 'Over capacity' };

/** Starts one node (never two: the cap is per node) with the given server.* keys, metrics on. */
async function startCapped(serverKeys, apps = [A, B]) {
  const server = { host: '127.0.0.1', port: await freePort(), log: { format: 'json' }, ...serverKeys };
  return startServer({ server, apps, config: { server, apps, metrics: { enabled: true } }, nodes: 1 });
}

describe('server.max_connections: 2 with two apps', () => {
  let server;
  before(async () => {
    server = await startCapped({ max_connections: 2 });
  });
  after(() => server.stop());

  const metrics = async () => {
    const r = await scrape(`${server.url}/metrics`);
    assert.equal(r.status, 200, r.text);
    return parse(r.text);
  };
  const overCapacity = (m, app) => m.get('reverbgo_connections_refused_total', { app: app.app_id, reason: 'over_capacity' });
  const open = (m) => (m.get('reverbgo_connections', { app: A.app_id }) || 0) + (m.get('reverbgo_connections', { app: B.app_id }) || 0);
  /** Waits until the node holds no socket (a closed one is released asynchronously). */
  const drained = () => eventually(async () => open(await metrics()) === 0, { what: 'the node to hold no connection' });

  test('one socket per app fills the node: a third gets pusher:error 4100 then close 4100, counted as over_capacity', async (t) => {
    const bag = cleanup(t);
    await drained();
    const before = await metrics();
    assert.equal(overCapacity(before, A), 0, 'the over_capacity series is exported before any refusal');
    assert.equal(overCapacity(before, B), 0);

    const a = await Wire.connect(server, { app: A });
    bag.add(() => a.close());
    const b = await Wire.connect(server, { app: B });
    bag.add(() => b.close());

    // Either app is refused: the cap counts the node's sockets over every app, and neither app
    // has a quota of its own.
    for (const app of [A, B]) {
      const w = await Wire.open(server, { app });
      bag.add(() => w.close());
      const err = await w.next('pusher:error');
      assert.deepEqual(err.data, OVER);
      assert.equal(w.frames.length, 1, 'no connection_established before or after the error');
      assert.deepEqual(await w.waitClosed(), { code: 4100, reason: 'Over capacity' });
    }
    const after1 = await metrics();
    assert.equal(overCapacity(after1, A), 1, 'one refusal of app A counted');
    assert.equal(overCapacity(after1, B), 1, 'one refusal of app B counted');
    assert.equal(after1.get('reverbgo_connections_refused_total', { app: A.app_id, reason: 'over_quota' }), 0, 'not the per-app quota');
    assert.equal(open(after1), 2, 'refused sockets take no slot');

    // The HTTP API keeps answering at the cap (the reserve is kept for it), and the admitted
    // sockets still get what it publishes.
    const channel = uid('capped-');
    assert.equal((await a.subscribe(channel)).event, 'pusher_internal:subscription_succeeded');
    assert.equal((await outcome(sdk(server, A).trigger(channel, 'at-cap', { n: 1 }))).status, 200);
    assert.deepEqual((await a.next('at-cap')).data, { n: 1 });

    // A freed slot is taken by the next socket, of either app.
    b.close();
    await eventually(async () => open(await metrics()) === 1, { what: 'the closed socket released' });
    const again = await Wire.connect(server, { app: A });
    bag.add(() => again.close());
    assert.match(again.socketId, /^\d+\.\d+$/);
  });

  test('pusher-js over the cap keeps retrying (never "failed"), connects by itself once a slot frees, and receives an HTTP API event', async (t) => {
    const bag = cleanup(t);
    await drained();
    const before = await metrics();

    // Disconnect every pusher-js before the server stops (07-shutdown: a pusher-js retrying a
    // dead port can leave timers behind).
    const first = pusherClient(server, { app: A });
    bag.add(() => first.disconnect());
    const second = pusherClient(server, { app: B });
    bag.add(() => second.disconnect());
    await whenConnected(first);
    await whenConnected(second);

    const third = pusherClient(server, { app: B }); // connects at once; the refusal comes later
    bag.add(() => third.disconnect());
    const states = [];
    third.connection.bind('state_change', ({ current }) => states.push(current));
    const errors = inbox(third.connection, 'error');
    const retries = inbox(third.connection, 'connecting_in');

    // The refusal reaches pusher-js as its error event, twice at least: pusher-js retried.
    const errs = await errors.wait(2);
    for (const e of errs) {
      // a pusher:error in the handshake: {type: 'WebSocketError', error: {type: 'PusherError', data}}
      assert.equal(e.type, 'WebSocketError', JSON.stringify(e));
      assert.deepEqual(e.error, { type: 'PusherError', data: OVER }, JSON.stringify(e));
    }
    assert.ok(retries.got.length >= 1, 'pusher-js scheduled a retry (connecting_in)');
    assert.ok(['connecting', 'unavailable'].includes(third.connection.state), `state ${third.connection.state}`);
    assert.deepEqual(states.filter((s) => s === 'failed' || s === 'disconnected' || s === 'connected'), [],
      `pusher-js states while refused: ${states.join(' → ')}`);
    assert.equal(third.connection.socket_id, undefined);

    // Every attempt was counted, on the app it was made for.
    const refusedNow = await metrics();
    const counted = overCapacity(refusedNow, B) - overCapacity(before, B);
    assert.ok(counted >= errors.got.length - 1 && counted >= 2, `over_capacity for app B went up by ${counted} (pusher-js saw ${errors.got.length})`);
    assert.equal(overCapacity(refusedNow, A), overCapacity(before, A), 'nothing refused for app A');

    // A slot frees: the third client gets in by its own retry, no call from the test.
    first.disconnect();
    const id = await whenConnected(third);
    assert.match(id, /^\d+\.\d+$/);
    assert.deepEqual(states.filter((s) => s === 'failed' || s === 'disconnected'), [], states.join(' → '));

    const channel = uid('after-cap-');
    const { channel: ch } = await subscribe(third, channel);
    const got = inbox(ch, 'hello');
    assert.equal((await outcome(sdk(server, B).trigger(channel, 'hello', { ok: true }))).status, 200);
    assert.deepEqual((await got.wait(1))[0], { ok: true });

    // The node is full again: the client that left would now be refused.
    const w = await Wire.open(server, { app: A });
    bag.add(() => w.close());
    assert.deepEqual((await w.next('pusher:error')).data, OVER);
    assert.equal((await w.waitClosed()).code, 4100);
  });
});

describe('server.max_connections unset or -1', () => {
  /** The soft open-file limit of a process, from /proc (Linux); undefined when unreadable or unlimited. */
  const softNofile = (pid) => {
    let text;
    try {
      text = fs.readFileSync(`/proc/${pid}/limits`, 'utf8');
    } catch {
      return undefined;
    }
    const m = /^Max open files\s+(\S+)\s+(\S+)/m.exec(text);
    return m && m[1] !== 'unlimited' ? Number(m[1]) : undefined;
  };
  const capLine = (logs) => logs.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l)).find((l) => l.msg === 'connection cap');

  test('unset: the cap is the open-file limit less the reserve (5 %, 512..4096), logged at start', async (t) => {
    const own = softNofile('self');
    if (own === undefined) return t.skip('no /proc/self/limits or an unlimited open-file limit');
    const srv = await startCapped({}, [A]);
    cleanup(t).add(() => srv.stop());
    const line = await eventually(() => capLine(srv.logs()), { what: `a "connection cap" line in:\n${srv.logs()}` });
    // The binary inherits the test process's limit; Go raises its soft limit towards the hard
    // one at start, so the line reports the server's own limit, never less than ours.
    const child = softNofile(srv.proc.pid);
    assert.equal(line.open_file_limit, child, `the logged limit is the server's (/proc/${srv.proc.pid}/limits)`);
    assert.ok(line.open_file_limit >= own, `server limit ${line.open_file_limit} < the test's ${own}`);
    const reserve = Math.min(Math.max(Math.floor(line.open_file_limit / 20), 512), 4096);
    const want = line.open_file_limit > reserve ? line.open_file_limit - reserve : 1;
    assert.equal(line.max_connections, want, JSON.stringify(line));
    assert.ok(line.max_connections > 0);
    // and the node admits connections under it
    const w = await Wire.connect(srv, { app: A });
    cleanup(t).add(() => w.close());
  });

  test('-1: no cap and no "connection cap" line', async (t) => {
    const srv = await startCapped({ max_connections: -1 }, [A]);
    cleanup(t).add(() => srv.stop());
    const bag = cleanup(t);
    for (let i = 0; i < 3; i++) {
      const w = await Wire.connect(srv, { app: A });
      bag.add(() => w.close());
    }
    assert.match(srv.logs(), /"msg":"reverbgo listening"/);
    assert.equal(capLine(srv.logs()), undefined, srv.logs());
  });
});
