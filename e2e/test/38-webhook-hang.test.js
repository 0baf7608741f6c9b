'use strict';
// A webhook receiver that accepts and never answers (issue 20, fault 1), against two built
// nodes on Redis: the outbox lease (2 s, renewed every 0.5 s, during the POST too) is not
// lost to a 1 s POST timeout, the batch keeps its first attempt's time, so retry_for (3 s)
// drops it (reverbgo_webhook_batches_dropped_total, logged with its event types), and the
// URL's outbox goes on: events queued behind it are delivered once the receiver answers.
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const http = require('node:http');
const net = require('node:net');
const { spawn } = require('node:child_process');
const { startServer, freePort } = require('../lib/server');
const { Wire } = require('../lib/wire');
const { parse } = require('../lib/prom');
const { cleanup, uid, eventually } = require('../lib/util');

async function startRedis() {
  const port = await freePort();
  const proc = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
  const exited = new Promise((resolve) => proc.on('exit', resolve));
  await eventually(() => new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1', () => { s.end(); resolve(true); });
    s.on('error', () => resolve(false));
  }), { what: 'redis-server listening' });
  return { url: `redis://127.0.0.1:${port}/0`, stop: async () => { proc.kill('SIGTERM'); await exited; } };
}

/** A receiver that, while hanging, reads each POST and never answers; else answers 200. */
async function startHangingReceiver() {
  const posts = [];
  const hung = [];
  let hanging = true;
  const srv = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      posts.push({ body, answered: !hanging, at: Date.now() });
      if (hanging) hung.push(res);
      else res.end('ok');
    });
  });
  await new Promise((resolve) => srv.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${srv.address().port}/hook`,
    posts,
    answer: () => { hanging = false; },
    /** Channels of the events answered 2xx. */
    delivered: () => posts.filter((p) => p.answered).flatMap((p) => p.body.events.map((e) => `${e.name}:${e.channel}`)),
    close: () => new Promise((resolve) => { srv.closeAllConnections(); srv.close(() => resolve()); }),
  };
}

let redis, receiver;
const nodes = [];

before(async () => {
  redis = await startRedis();
  receiver = await startHangingReceiver();
  const APP = { app_id: 'hang', key: 'hang-key', secret: 'hang-secret', accept_client_events_from: 'all',
    webhooks: [{ url: receiver.url, event_types: ['channel_occupied'], timeout: 1, retry_for: 3 }] };
  const channel = uid('hang-');
  for (let i = 0; i < 2; i++) {
    const port = await freePort();
    const config = { server: { host: '127.0.0.1', port }, apps: [APP], metrics: { enabled: true },
      scaling: { enabled: true, redis_url: redis.url, channel, webhook_lease: 2 } };
    nodes.push(await startServer({ config, apps: config.apps, port }));
  }
});
after(async () => {
  for (const n of nodes) await n.stop();
  await receiver?.close();
  await redis?.stop();
});

async function droppedBatches() {
  let sum = 0;
  for (const n of nodes) {
    const res = await fetch(`${n.url}/metrics`);
    sum += parse(await res.text()).get('reverbgo_webhook_batches_dropped_total') ?? 0;
  }
  return sum;
}

test('a receiver that accepts and never answers does not stall its URL\'s outbox', async (t) => {
  const w = await Wire.connect(nodes[0]);
  cleanup(t).add(() => w.close());
  await w.subscribe('hung-1');
  await eventually(() => receiver.posts.length >= 1, { what: 'the first POST reached the receiver' });
  // Queued behind the hung batch.
  await w.subscribe('queued-2');
  await w.subscribe('queued-3');

  // retry_for (3 s) counts from the first attempt: dropped within a few seconds, not
  // re-claimed with a fresh clock every time the lease lapsed.
  await eventually(async () => (await droppedBatches()) >= 1, { ms: 15000, what: 'the hung batch dropped after retry_for' });
  const logs = nodes.map((n) => n.logs()).join('\n');
  assert.match(logs, /webhook batch dropped: retry period exhausted.*"event_types":\["channel_occupied"\]/);

  receiver.answer();
  await w.subscribe('after-4');
  // Everything after the hung batch goes out: the outbox was not stalled. (queued-2 and -3
  // may have been dropped too after retry_for, counted, if they were claimed while hanging.)
  await eventually(() => receiver.delivered().includes('channel_occupied:after-4'), { ms: 15000, what: 'a later event delivered' });
  const dropped = await droppedBatches();
  for (const ch of ['queued-2', 'queued-3']) {
    assert.ok(receiver.delivered().includes(`channel_occupied:${ch}`) || dropped >= 2, `${ch} neither delivered nor dropped`);
  }
  assert.ok(!receiver.delivered().includes('channel_occupied:hung-1'), 'the dropped batch was answered');
});
