'use strict';
// Fault 6 of issue 20: SIGTERM with presence joins in flight. Two built binaries on one
// standalone Redis; 40 raw clients on node B send presence joins and B gets SIGTERM at
// once. B's Shutdown waits for the joins and the leaves queued behind them before it reaps
// its own presence and closes Redis, so node A's HTTP API lists no member of B within
// node_timeout + 5 s, and keeps A's own member. (Before, a join landing after B's reap
// stayed for good: presence hashes have no TTL and no survivor reaps a node that left.)
const { describe, test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { Wire } = require('../lib/wire');
const { sdk, apiGet } = require('../lib/clients');
const { startTopology, startNodes, haveRedis } = require('../lib/cluster');
const { cleanup, uid, eventually, deadline, quiet, sleep } = require('../lib/util');

const APPS = [{ app_id: 'sj', key: 'sj-key', secret: 'sj-secret' }];
const NODE_TIMEOUT = 4;

describe('SIGTERM with joins in flight', { skip: !haveRedis('standalone') && 'Redis binaries not installed' }, () => {
  let topo;
  let nodes;
  before(async () => {
    topo = await startTopology('standalone');
    nodes = await startNodes(topo, 2, { apps: APPS, scaling: { node_timeout: NODE_TIMEOUT } });
  });
  after(async () => {
    for (const f of topo ? fs.readdirSync(topo.dir).filter((f) => f.endsWith('.pid')) : []) {
      try {
        process.kill(Number(fs.readFileSync(path.join(topo.dir, f), 'utf8').trim()), 'SIGCONT');
      } catch {}
    }
    if (nodes) await Promise.all(nodes.map((n) => n.stop('SIGKILL')));
    if (topo) await topo.stop();
  });

  test('no member of the stopped node is left on the survivor', async (t) => {
    const bag = cleanup(t);
    const [a, b] = nodes;
    const room = uid('presence-x.');
    const stay = await Wire.connect(a);
    bag.add(() => stay.close());
    await stay.authSubscribe(room, { user_id: 'a0' });
    const wires = [];
    for (let i = 0; i < 40; i++) {
      const w = await Wire.connect(b);
      bag.add(() => w.close());
      wires.push(w);
    }
    // Half joined already; the other half in flight when SIGTERM lands, held there by a
    // Redis that stops answering for a moment (SIGSTOP, well inside the 2 s task deadline).
    const pidFile = fs.readdirSync(topo.dir).find((f) => f.endsWith('.pid'));
    const redisPid = Number(fs.readFileSync(path.join(topo.dir, pidFile), 'utf8').trim());
    // Each socket of the second half sends a second join too: it waits in the socket's task
    // queue behind the first, so it starts only once Redis answers again.
    const rooms = [room, uid('presence-y.')];
    await stay.authSubscribe(rooms[1], { user_id: 'a0' });
    for (const [i, w] of wires.entries()) {
      if (i === 20) process.kill(redisPid, 'SIGSTOP');
      const p = w.authSubscribe(room, { user_id: `b${i}` }).catch(() => {});
      if (i < 20) await p;
      else w.authSubscribe(rooms[1], { user_id: `b${i}` }).catch(() => {});
    }
    b.proc.kill('SIGTERM');
    await sleep(700);
    process.kill(redisPid, 'SIGCONT');
    const t0 = Date.now();
    const exit = await deadline(b.exited, 20000, 'node B exit');
    assert.equal(exit.code, 0, b.logs());
    const limit = (NODE_TIMEOUT + 5) * 1000;
    const users = async (r) => (await apiGet(sdk(a), `/channels/${r}/users`)).users.map((u) => u.id).sort();
    for (const r of rooms) {
      await eventually(async () => (await users(r)).join() === 'a0', { ms: limit, what: `node B's members gone from node A's users of ${r}` });
    }
    const elapsed = Date.now() - t0;
    assert.ok(elapsed <= limit + 20000, `clean after ${elapsed} ms`);
    await quiet(1000);
    for (const r of rooms) assert.deepEqual(await users(r), ['a0'], `and none comes back in ${r}`);
  });
});
