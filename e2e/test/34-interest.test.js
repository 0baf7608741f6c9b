'use strict';
// Interest routing (scaling.routing: interest, the default), black-box: three built binaries
// on standalone Redis, on Sentinel and on a three-master Redis Cluster, driven with pusher-js and the
// `pusher` SDK. A node with no subscriber of a channel receives none of its publishes
// (reverbgo_cluster_messages_received_total and Redis PUBSUB say so); a client that got
// subscription_succeeded gets the events published afterwards through another node, under
// 200 subscribes racing publishes; on a Cluster, 300 channels put keys (cache channels' last
// events) and shard channels on all three masters.
const { describe, test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const { sdk, pusherClient, whenConnected, subscribe, inbox } = require('../lib/clients');
const { startTopology, startNodes, haveRedis } = require('../lib/cluster');
const { scrape, parse } = require('../lib/prom');
const { cleanup, uid, eventually, sleep } = require('../lib/util');

const APPS = [{ app_id: 'ir', key: 'ir-key', secret: 'ir-secret' }];

const redisCli = (port, ...args) => execFileSync('redis-cli', ['-p', String(port), ...args], { encoding: 'utf8' }).trim();
const lines = (s) => s.split('\n').filter((l) => l !== '');

async function client(t, node, id) {
  const p = pusherClient(node, { user: id ? { id, info: {} } : undefined });
  cleanup(t).add(() => p.disconnect());
  await whenConnected(p);
  return p;
}

/** The node's reverbgo_cluster_messages_received_total. */
async function received(node) {
  const { status, text } = await scrape(`${node.url}/metrics`);
  assert.equal(status, 200);
  const v = parse(text).get('reverbgo_cluster_messages_received_total', {});
  assert.notEqual(v, undefined, 'reverbgo_cluster_messages_received_total is exported');
  return v;
}

for (const kind of ['standalone', 'sentinel', 'cluster']) {
  describe(`interest routing on ${kind} Redis`, { skip: !haveRedis(kind) && `${kind} Redis binaries not installed` }, () => {
    let topo;
    let nodes;
    let ports; // every Redis server of the topology (the masters, on a Cluster)
    before(async () => {
      topo = await startTopology(kind);
      if (kind === 'cluster') ports = topo.vars.CLUSTER_ADDRS.split(',').map((a) => a.split(':')[1]);
      else if (kind === 'sentinel') ports = [topo.vars.MASTER_PORT];
      else ports = [new URL(topo.vars.REDIS_URL).port];
      nodes = await startNodes(topo, 3, { apps: APPS, extra: { metrics: { enabled: true } } });
    });
    after(async () => {
      if (nodes) await nodes.stopAll();
      if (topo) await topo.stop();
    });

    // Routed pub/sub channels whose name holds the Pusher channel, over every server.
    const topics = (ch) => {
      const cmd = kind === 'cluster' ? 'shardchannels' : 'channels';
      return ports.flatMap((p) => lines(redisCli(p, 'pubsub', cmd, `*:m:${ch}:*`)));
    };
    const subscribers = (topic) => {
      const cmd = kind === 'cluster' ? 'shardnumsub' : 'numsub';
      return ports.reduce((n, p) => n + Number(lines(redisCli(p, 'pubsub', cmd, topic))[1] || 0), 0);
    };

    test('a node with no subscriber of a channel receives none of its publishes', async (t) => {
      const ch = uid('private-App.Models.User.');
      const a = await client(t, nodes[0]);
      const { channel } = await subscribe(a, ch);
      const got = inbox(channel, 'ev');
      const [t0, t1, t2] = await Promise.all(nodes.map(received));
      const api = sdk(nodes[1]); // the publishes enter at node 2, the subscriber is on node 1
      for (let i = 0; i < 50; i++) await api.trigger(ch, 'ev', { i });
      assert.deepEqual((await got.wait(50)).map((d) => d.i), [...Array(50).keys()], 'every event, in order');
      await sleep(300); // anything in flight to node 3 would have arrived
      const [r0, r1, r2] = await Promise.all(nodes.map(received));
      assert.equal(r2 - t2, 0, 'node 3 (no subscriber) received none of the 50 publishes');
      assert.ok(r0 - t0 >= 50, `node 1 (the subscriber's) received them (${r0 - t0})`);
      assert.equal(r1 - t1, 0, "node 2 publishes but has no subscriber: its own publishes do not come back");
      // Redis agrees: one routed channel for ch, one subscriber (node 1's connection).
      const names = topics(ch);
      assert.equal(names.length, 1, `one routed channel for ${ch}: ${names}`);
      assert.equal(subscribers(names[0]), 1, 'only the node with a subscriber subscribes');
      // The last local subscriber leaving unsubscribes the node.
      a.unsubscribe(ch);
      await eventually(() => topics(ch).length === 0, { what: `no routed channel for ${ch} once its subscriber left` });
    });

    test('no lost first event: 200 subscribes on two nodes racing publishes through the third', async (t) => {
      const api = sdk(nodes[1]);
      const subs = [await client(t, nodes[0]), await client(t, nodes[0]), await client(t, nodes[2]), await client(t, nodes[2])];
      const names = Array.from({ length: 200 }, () => uid('race.'));
      let racing = true;
      const racer = (async () => {
        // Publishes all the time to channels being subscribed, so routing changes race them.
        for (let i = 0; racing; i++) await api.trigger(names[i % names.length], 'noise', { i }).catch(() => {});
      })();
      const firsts = await Promise.all(
        names.map(async (name, i) => {
          const p = subs[i % subs.length];
          const { channel } = await subscribe(p, name);
          const got = inbox(channel, 'first');
          // Published through another node right after subscription_succeeded arrived (a
          // request that failed on the wire is sent again: 200 at once plus the racer).
          for (let attempt = 1; ; attempt++) {
            try {
              await api.trigger(name, 'first', { name });
              break;
            } catch (err) {
              if (attempt === 5) throw new Error(`trigger on ${name}: ${err.message} ${err.error || err.status || ''}`);
              await sleep(100 * attempt);
            }
          }
          return got.wait(1).then((g) => g[0].name);
        }),
      );
      racing = false;
      await racer;
      assert.deepEqual(firsts, names, 'every client got the event published after its subscription_succeeded');
    });

    if (kind === 'cluster') {
      test('300 channels put keys and shard channels on all three masters', async (t) => {
        // Cache channels: each keeps its last event under its bucket's hash tag.
        const names = Array.from({ length: 300 }, () => uid('cache-spread.'));
        for (const [i, node] of nodes.entries()) {
          for (let k = 0; k < 5; k++) {
            const p = await client(t, node);
            await Promise.all(names.slice(i * 100 + k * 20, i * 100 + (k + 1) * 20).map((n) => subscribe(p, n, 30000)));
          }
        }
        const api = sdk(nodes[0]);
        for (let i = 0; i < names.length; i += 10) {
          await api.triggerBatch(names.slice(i, i + 10).map((channel) => ({ channel, name: 'ev', data: '{}' })));
        }
        const keysOn = (port) => lines(redisCli(port, '--scan', '--pattern', `*reverbgo:${nodes.channel}:*:cache:cache-spread.*`));
        const shardOn = (port) => lines(redisCli(port, 'pubsub', 'shardchannels', '*:m:cache-spread.*'));
        await eventually(() => ports.reduce((n, p) => n + keysOn(p).length, 0) === 300, { what: 'the 300 cache keys' });
        const counts = ports.map((p) => ({ keys: keysOn(p).length, shard: shardOn(p).length }));
        t.diagnostic(`cache keys and routed shard channels per master: ${JSON.stringify(counts)}`);
        for (const [i, c] of counts.entries()) {
          // 64 evenly placed buckets over three equal slot ranges: about a third each.
          assert.ok(c.keys > 300 / 3 / 2, `master ${i + 1} holds a fair share of the keys (${c.keys} of 300)`);
          assert.ok(c.shard > 300 / 3 / 2, `master ${i + 1} carries a fair share of the shard channels (${c.shard} of 300)`);
        }
        assert.equal(counts.reduce((n, c) => n + c.shard, 0), 300, 'one routed shard channel per channel');
      });

      test('300 presence channels put presence, counts and node keys on all three masters', async (t) => {
        // Presence hashes (pu/ps/pc), each node's membership sets and count hashes live in the
        // channel's bucket: none of the masters carries most of the presence work.
        const names = Array.from({ length: 300 }, () => uid('presence-spread.'));
        for (const [i, node] of nodes.entries()) {
          for (let k = 0; k < 5; k++) {
            const p = await client(t, node, `u${i}-${k}`);
            await Promise.all(names.slice(i * 100 + k * 20, i * 100 + (k + 1) * 20).map((n) => subscribe(p, n, 30000)));
          }
        }
        const keysOn = (port) => lines(redisCli(port, '--scan', '--pattern', `*reverbgo:${nodes.channel}*`));
        const presenceOn = (port) => keysOn(port).filter((k) => /}:p[usc]:presence-spread\./.test(k));
        await eventually(() => ports.reduce((n, p) => n + presenceOn(p).length, 0) === 900, { what: 'the 300 channels\' presence hashes' });
        const counts = ports.map((p) => ({ keys: keysOn(p).length, presence: presenceOn(p).length }));
        const total = counts.reduce((n, c) => n + c.keys, 0);
        t.diagnostic(`keys (all) and presence hashes per master: ${JSON.stringify(counts)} of ${total}`);
        for (const [i, c] of counts.entries()) {
          assert.ok(c.keys > 0, `master ${i + 1} holds some of the keys`);
          assert.ok(c.keys <= total * 0.6, `master ${i + 1} holds at most 60 % of the keys (${c.keys} of ${total})`);
          assert.ok(c.presence > 0 && c.presence <= 900 * 0.6, `master ${i + 1} holds a share of the presence hashes (${c.presence} of 900)`);
        }
        // Cluster-wide answers still hold, asked of any node.
        const last = names[names.length - 1];
        for (const node of nodes) {
          const body = await sdk(node).get({ path: `/channels/${last}/users` }).then((r) => r.json());
          assert.deepEqual(body.users.map((u) => u.id), ['u2-4'], `users of a presence channel asked of ${node.url}`);
          const info = await sdk(node).get({ path: `/channels/${last}`, params: { info: 'user_count' } }).then((r) => r.json());
          assert.equal(info.user_count, 1, `user_count asked of ${node.url}`);
        }
      });
    }
  });
}
