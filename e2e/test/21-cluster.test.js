'use strict';
// Three built binaries as one server on each real Redis topology docs/scaling.md documents
// (standalone, Sentinel, a three-master Redis Cluster; started by scripts/redis-topologies.sh),
// driven with pusher-js and the `pusher` SDK: every HTTP API answer is cluster-wide whichever
// node is asked, cache channels replay across nodes, a SIGKILLed node is cleaned within
// scaling.node_timeout + 5 s, a publish during a Redis stall is delivered once, and a
// Sentinel failover is survived.
const { describe, test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const { sdk, apiGet, pusherClient, whenConnected, subscribe, inbox } = require('../lib/clients');
const { startTopology, startNodes, haveRedis } = require('../lib/cluster');
const { cleanup, uid, eventually, sleep, quiet } = require('../lib/util');

const APPS = [{ app_id: 'cl', key: 'cl-key', secret: 'cl-secret', accept_client_events_from: 'members' }];

/** A connected pusher-js client on node, as user id (presence channel_data). */
async function client(t, node, id) {
  const p = pusherClient(node, { user: id ? { id, info: { name: id } } : undefined });
  cleanup(t).add(() => p.disconnect());
  await whenConnected(p);
  return p;
}

const redisCli = (port, ...args) => execFileSync('redis-cli', ['-p', String(port), ...args], { encoding: 'utf8' }).trim();

const ids = (members) => Object.keys(members.members).sort();

async function usersOf(node, channel) {
  const body = await apiGet(sdk(node), `/channels/${channel}/users`);
  return body.users.map((u) => u.id).sort();
}

for (const kind of ['standalone', 'sentinel', 'cluster']) {
  // The default node_timeout (10 s) on standalone; 4 s elsewhere keeps the run short.
  const nodeTimeout = kind === 'standalone' ? 10 : 4;
  describe(`three nodes on ${kind} Redis`, { skip: !haveRedis(kind) && `${kind} Redis binaries not installed` }, () => {
    let topo;
    let nodes;
    before(async () => {
      topo = await startTopology(kind);
      nodes = await startNodes(topo, 3, { apps: APPS, scaling: kind === 'standalone' ? {} : { node_timeout: nodeTimeout } });
    });
    after(async () => {
      if (nodes) await nodes.stopAll();
      if (topo) await topo.stop();
    });

    test('every HTTP API answer is cluster-wide, whichever node is asked', async (t) => {
      const room = uid('presence-room.');
      const news = uid('news.');
      const a = await client(t, nodes[0], 'u1');
      const b = await client(t, nodes[1], 'u2');
      const c = await client(t, nodes[2]);
      await subscribe(a, room);
      await subscribe(b, room);
      const { channel: newsC } = await subscribe(c, news);
      const got = inbox(newsC, 'ev');
      for (const [i, node] of nodes.entries()) {
        const api = sdk(node);
        await eventually(async () => (await apiGet(api, '/connections')).connections === 3, { what: `node ${i + 1}: 3 connections` });
        await eventually(
          async () => {
            const { channels } = await apiGet(api, '/channels', { info: 'subscription_count' });
            return channels[room]?.subscription_count === 2 && channels[news]?.subscription_count === 1;
          },
          { what: `node ${i + 1}: channel list with counts` },
        );
        const one = await apiGet(api, `/channels/${room}`, { info: 'user_count,subscription_count' });
        assert.deepEqual(one, { occupied: true, user_count: 2, subscription_count: 2 }, `node ${i + 1}`);
        const presence = await apiGet(api, '/channels', { filter_by_prefix: 'presence-', info: 'user_count' });
        assert.deepEqual(presence.channels[room], { user_count: 2 }, `node ${i + 1}`);
        assert.deepEqual(await usersOf(node, room), ['u1', 'u2'], `node ${i + 1}`);
        assert.deepEqual(await apiGet(api, `/channels/${news}`, { info: 'subscription_count' }), { occupied: true, subscription_count: 1 });
        // A trigger through any node reaches the subscriber on node 3, with cluster-wide info.
        const res = await api.trigger(room, 'ev', { i }, { info: 'subscription_count,user_count' });
        assert.deepEqual((await res.json()).channels[room], { subscription_count: 2, user_count: 2 });
        await api.trigger(news, 'ev', { i });
        await got.wait(i + 1);
      }
      assert.deepEqual(got.got, [{ i: 0 }, { i: 1 }, { i: 2 }]);
      if (kind === 'cluster') {
        // Sharded pub/sub under interest routing: news's routed channel is SSUBSCRIBEd by the
        // one node with a subscriber of it (node 3), nothing is SUBSCRIBEd.
        const ports = topo.vars.CLUSTER_ADDRS.split(',').map((a) => a.split(':')[1]);
        const topic = ports.flatMap((p) => redisCli(p, 'pubsub', 'shardchannels', `*:m:${news}:*`).split('\n').filter(Boolean));
        assert.equal(topic.length, 1, `one routed shard channel for ${news}`);
        const count = (cmd, name) => ports.reduce((sum, p) => sum + Number(redisCli(p, 'pubsub', cmd, name).split('\n')[1]), 0);
        assert.equal(count('shardnumsub', topic[0]), 1);
        assert.equal(count('numsub', topic[0]), 0);
        assert.equal(count('shardnumsub', nodes.channel), 0, 'no node listens to the broadcast channel');
      }
    });

    test('cache channels replay the last event on every node; cache_miss is cluster-wide', async (t) => {
      const ch = uid('cache-news.');
      await sdk(nodes[0]).trigger(ch, 'ev', { n: 1 });
      const late = await client(t, nodes[2]);
      const lateCh = late.subscribe(ch);
      const lateGot = inbox(lateCh, 'ev');
      assert.deepEqual((await lateGot.wait(1))[0], { n: 1 }, 'node 3 replays the event triggered through node 1');

      await sdk(nodes[1]).trigger(ch, 'ev', { n: 2 });
      await lateGot.wait(2); // a live subscriber gets it too
      const later = await client(t, nodes[0]);
      const laterGot = inbox(later.subscribe(ch), 'ev');
      assert.deepEqual((await laterGot.wait(1))[0], { n: 2 }, 'node 1 replays the event that went through node 2');
      assert.deepEqual(await laterGot.none(), [{ n: 2 }], 'only the last event is replayed');

      // A node started after the event never delivered it: its replay comes from Redis.
      const [extra] = await startNodes(topo, 1, { apps: APPS, channel: nodes.channel, scaling: kind === 'standalone' ? {} : { node_timeout: nodeTimeout } });
      t.after(() => extra.stop());
      const newcomer = await client(t, extra);
      const fromRedis = inbox(newcomer.subscribe(ch), 'ev');
      assert.deepEqual((await fromRedis.wait(1))[0], { n: 2 }, 'a node started later replays from Redis');

      const fresh = uid('cache-fresh.');
      const missC = await client(t, nodes[1]);
      const miss = inbox(missC.subscribe(fresh), 'pusher:cache_miss');
      await miss.wait(1);
      // After an event through node 3 the same channel is a hit on node 2.
      await sdk(nodes[2]).trigger(fresh, 'ev', { n: 3 });
      const hitC = await client(t, nodes[1]);
      const hit = inbox(hitC.subscribe(fresh), 'ev');
      assert.deepEqual((await hit.wait(1))[0], { n: 3 });
    });

    if (kind === 'standalone') {
      test('a publish while Redis stalls waits for it: 200 once Redis has it, 503 past scaling.publish_timeout; delivered everywhere at most once', async (t) => {
        const ch = uid('stall.');
        const s1 = await client(t, nodes[0]);
        const s2 = await client(t, nodes[1]);
        const got1 = inbox((await subscribe(s1, ch)).channel, 'ev');
        const got2 = inbox((await subscribe(s2, ch)).channel, 'ev');
        const pid = Number(fs.readFileSync(path.join(topo.dir, 'standalone.pid'), 'utf8'));
        // A stall shorter than publish_timeout (2 s): the answer waits, then 200, and the event
        // is delivered on both nodes once (the publishing node too, from Redis).
        process.kill(pid, 'SIGSTOP');
        let short;
        try {
          short = sdk(nodes[0]).trigger(ch, 'ev', { n: 'short' });
          await sleep(500);
        } finally {
          process.kill(pid, 'SIGCONT');
        }
        assert.equal((await short).status, 200);
        await got1.wait(1);
        await got2.wait(1, 15000);
        // A stall longer than publish_timeout: 503 (the SDK's RequestError), never a 200 for
        // an event that is then lost. Its PUBLISH sat in the stopped Redis's socket buffer,
        // which Redis executes on SIGCONT: delivered at most once, never twice.
        process.kill(pid, 'SIGSTOP');
        let status;
        try {
          status = await sdk(nodes[0]).trigger(ch, 'ev', { n: 'long' }).then((r) => r.status, (err) => err.status);
          await sleep(1000);
        } finally {
          process.kill(pid, 'SIGCONT');
        }
        assert.equal(status, 503);
        await eventually(async () => (await sdk(nodes[0]).trigger(ch, 'ev', { n: 'after' }).then((r) => r.status, () => 0)) === 200, { what: 'a publish once Redis is back' });
        await got1.wait(2, 15000);
        await got2.wait(2, 15000);
        await quiet(1500);
        for (const [name, got] of [['node 1', got1.got], ['node 2', got2.got]]) {
          const ns = got.map((e) => e.n);
          assert.deepEqual(ns.filter((n) => n !== 'long'), ['short', 'after'], `${name}: ${ns}`);
          assert.ok(ns.filter((n) => n === 'long').length <= 1, `${name} delivered the 503'd event twice: ${ns}`);
        }
      });
    }

    if (kind === 'sentinel') {
      test('a Sentinel failover (master SIGKILLed, replica promoted) is survived', async (t) => {
        const room = uid('presence-fo.');
        const ch = uid('after.');
        const a = await client(t, nodes[0], 'u1');
        const b = await client(t, nodes[1], 'u2');
        const c = await client(t, nodes[2]);
        const { channel: aRoom } = await subscribe(a, room);
        await subscribe(b, room);
        const got = inbox((await subscribe(c, ch)).channel, 'ev');
        await eventually(async () => (await usersOf(nodes[2], room)).length === 2, { what: 'both members' });
        const pid = Number(fs.readFileSync(topo.vars.MASTER_PID_FILE, 'utf8'));
        process.kill(pid, 'SIGKILL');
        // Nodes reconnect to the promoted replica; triggers through node 1 reach node 3.
        let n = 0;
        await eventually(
          async () => {
            await sdk(nodes[0]).trigger(ch, 'ev', { n: n++ }).catch(() => {});
            return got.got.length > 0;
          },
          { ms: 40000, every: 500, what: 'a publish after the failover' },
        );
        const sentinelPort = topo.vars.SENTINEL_ADDRS.split(',')[0].split(':')[1];
        const master = redisCli(sentinelPort, 'sentinel', 'get-master-addr-by-name', 'mymaster').split('\n');
        assert.equal(master[1], topo.vars.REPLICA_PORT, 'the replica was promoted');
        for (const node of nodes) {
          await eventually(async () => (await fetch(`${node.url}/up`)).ok, { ms: 20000, what: `${node.url}/up OK` });
        }
        await eventually(async () => JSON.stringify(await usersOf(nodes[2], room)) === '["u1","u2"]', {
          ms: 15000,
          what: 'presence members after the failover',
        });
        // New presence work after the failover: a join on node 3 reaches node 1.
        const added = inbox(aRoom, 'pusher:member_added');
        const d = await client(t, nodes[2], 'u4');
        await subscribe(d, room);
        assert.equal((await added.wait(1))[0].id, 'u4');
        assert.deepEqual(await usersOf(nodes[0], room), ['u1', 'u2', 'u4']);
      });
    }

    test(`a SIGKILLed node is cleaned within node_timeout (${nodeTimeout} s) + 5 s`, async (t) => {
      const room = uid('presence-kill.');
      const a = await client(t, nodes[0], 'u1');
      const b = await client(t, nodes[1], 'u2');
      const c = await client(t, nodes[2], 'u3');
      const d = await client(t, nodes[2], 'u1'); // u1 is also connected through node 1
      const { channel: aRoom } = await subscribe(a, room);
      const { channel: bRoom } = await subscribe(b, room);
      await subscribe(c, room);
      await subscribe(d, room);
      await eventually(() => ids(bRoom.members).length === 3, { what: 'b sees three members' });
      // Remote counts arrive in batches: wait until every node reports the same total (every
      // batch, node 3's two new sockets included, has landed) before taking it as the baseline;
      // reading node 1's count alone could miss node 3's batch, and then "before - 2" never comes.
      let before = 0;
      await eventually(
        async () => {
          const counts = await Promise.all(nodes.map(async (n) => (await apiGet(sdk(n), '/connections')).connections));
          before = counts[0];
          return before >= 4 && counts.every((c) => c === before);
        },
        { what: 'every node counts the same connections' },
      );
      const removedA = inbox(aRoom, 'pusher:member_removed');
      const removedB = inbox(bRoom, 'pusher:member_removed');
      const t0 = Date.now();
      nodes[2].proc.kill('SIGKILL');
      const limit = (nodeTimeout + 5) * 1000;
      await removedB.wait(1, limit);
      await removedA.wait(1, Math.max(1, limit - (Date.now() - t0)));
      const api = sdk(nodes[0]);
      await eventually(async () => (await apiGet(api, '/connections')).connections === before - 2, {
        ms: Math.max(1, limit - (Date.now() - t0)),
        what: "node 3's sockets dropped from /connections",
      });
      const elapsed = Date.now() - t0;
      assert.ok(elapsed <= limit, `cleaned after ${elapsed} ms`);
      assert.deepEqual(await usersOf(nodes[1], room), ['u1', 'u2'], 'u1 stays: still connected through node 1');
      assert.deepEqual(await apiGet(sdk(nodes[1]), `/channels/${room}`, { info: 'subscription_count,user_count' }), {
        occupied: true,
        subscription_count: 2,
        user_count: 2,
      });
      await quiet(1000);
      assert.deepEqual(removedB.got.map((m) => m.id), ['u3'], 'member_removed once, for u3 only');
      assert.deepEqual(removedA.got.map((m) => m.id), ['u3']);
      t.diagnostic(`${kind}: node death cleaned in ${elapsed} ms`);
    });
  });
}
