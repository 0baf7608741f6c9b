'use strict';
// Webhooks once per cluster: two built binaries with scaling on one real redis-server send
// channel_occupied / channel_vacated and member_added / member_removed once for the cluster
// (a user leaving through node A and rejoining through node B within the hold sends
// nothing), each event is delivered by one node, and the outbox lives in Redis: a node
// stopped with SIGTERM or killed with SIGKILL while its receiver is down loses none of its
// queued events (client_event, and a toolmark_confirmed from the Toolmark bridge), and none
// is delivered twice.
const { describe, test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const { startServer, freePort } = require('../lib/server');
const { Wire } = require('../lib/wire');
const { sdk } = require('../lib/clients');
const { startHookReceiver } = require('../lib/hookreceiver');
const { cleanup, uid, eventually, sleep } = require('../lib/util');
const { startAuthApp } = require('../lib/authapp');
const { agent, toolmarkChannelPolicy, openPage } = require('../lib/toolmark');

const HOLD_MS = 3000;
// A killed node's outbox lease (15 s) must expire before another node takes it over.
const TAKEOVER_MS = 45000; // 15 s lease, then a poll and the retry backoff, on a loaded machine

async function startRedis() {
  const port = await freePort();
  const proc = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
  const exited = new Promise((resolve) => proc.on('exit', resolve));
  const url = `redis://127.0.0.1:${port}/0`;
  await eventually(
    () =>
      new Promise((resolve) => {
        const s = require('node:net').connect(port, '127.0.0.1', () => {
          s.end();
          resolve(true);
        });
        s.on('error', () => resolve(false));
      }),
    { what: 'redis-server listening' },
  );
  return { url, stop: async () => { proc.kill('SIGTERM'); await exited; } };
}

let redis;
let receiver;
let APP;
let channel;
const nodes = [];

function nodeConfig() {
  return {
    server: { host: '127.0.0.1' },
    apps: [APP],
    scaling: { enabled: true, redis_url: redis.url, channel },
  };
}

async function startNode() {
  const cfg = nodeConfig();
  const port = await freePort();
  cfg.server.port = port;
  const n = await startServer({ config: cfg, apps: cfg.apps, port });
  nodes.push(n);
  return n;
}

before(async () => {
  redis = await startRedis();
  receiver = await startHookReceiver();
  channel = uid('whc-');
  APP = {
    app_id: 'whc',
    key: 'whc-key',
    secret: 'whc-secret',
    accept_client_events_from: 'all',
    toolmark: { enabled: true, call_timeout_ms: 8000, max_timeout_ms: 600000 },
    webhooks: [
      { url: `${receiver.url}/tm`, event_types: ['toolmark_confirmed'] },
      { url: `${receiver.url}/all`, event_types: ['channel_occupied', 'channel_vacated', 'member_added', 'member_removed'] },
      { url: `${receiver.url}/client`, event_types: ['client_event'] },
    ],
  };
});
after(async () => {
  for (const n of nodes) await n.stop('SIGKILL');
  await receiver.close();
  await redis.stop();
});

async function wire(t, node) {
  const w = await Wire.connect(node);
  cleanup(t).add(() => w.close());
  return w;
}

function valid(post, node) {
  return sdk(node).webhook({ headers: post.headers, rawBody: post.rawBody }).isValid();
}

const named = (path, pred) => receiver.events(path).filter(pred);

describe('webhooks across a cluster', () => {
  let a;
  let b;
  before(async () => {
    a = await startNode();
    b = await startNode();
  });

  test('channel_occupied and channel_vacated once per cluster, from cluster-wide occupancy', async (t) => {
    const name = uid('pub-');
    const onA = await wire(t, a);
    const onB = await wire(t, b);
    await onA.subscribe(name);
    await onB.subscribe(name);
    const occ = await eventually(() => named('/all', (e) => e.channel === name)[0], { what: 'channel_occupied' });
    assert.equal(occ.name, 'channel_occupied');
    assert.equal(valid(occ.post, a), true);
    onA.close(); // node B still has a subscriber: not vacated
    await sleep(HOLD_MS + 1000);
    assert.deepEqual(named('/all', (e) => e.channel === name).map((e) => e.name), ['channel_occupied']);
    const left = Date.now();
    onB.close();
    const vac = await eventually(() => named('/all', (e) => e.channel === name && e.name === 'channel_vacated')[0], { ms: 10000, what: 'channel_vacated' });
    assert.ok(vac.post.at - left >= HOLD_MS - 100, `vacated after ${vac.post.at - left} ms`);
    await sleep(1500);
    assert.deepEqual(named('/all', (e) => e.channel === name).map((e) => e.name), ['channel_occupied', 'channel_vacated']);
  });

  test('a user leaving through node A and rejoining through node B within the hold sends nothing', async (t) => {
    const name = uid('presence-');
    const onA = await wire(t, a);
    await onA.authSubscribe(name, { user_id: 'uma' });
    await eventually(() => named('/all', (e) => e.channel === name && e.name === 'member_added')[0], { what: 'member_added' });
    onA.close();
    await sleep(500);
    const onB = await wire(t, b);
    await onB.authSubscribe(name, { user_id: 'uma' });
    await sleep(HOLD_MS + 1500);
    assert.deepEqual(named('/all', (e) => e.channel === name).map((e) => e.name), ['channel_occupied', 'member_added']);
    // Gone for good through node B: removed and vacated once, after the hold.
    onB.close();
    await eventually(() => named('/all', (e) => e.channel === name).length === 4, { ms: 10000, what: 'member_removed and channel_vacated' });
    await sleep(1000);
    assert.deepEqual(named('/all', (e) => e.channel === name).map((e) => e.name).sort(),
      ['channel_occupied', 'channel_vacated', 'member_added', 'member_removed']);
  });

  test('each client_event is delivered once by one node while both run', async (t) => {
    const name = uid('pub-ce-');
    const onA = await wire(t, a);
    const onB = await wire(t, b);
    await onA.subscribe(name);
    await onB.subscribe(name);
    for (let i = 0; i < 10; i++) {
      (i % 2 ? onA : onB).send({ event: 'client-n', channel: name, data: { i } });
    }
    await eventually(() => named('/client', (e) => e.channel === name).length >= 10, { ms: 10000, what: 'ten client_event webhooks' });
    await sleep(1500);
    const got = named('/client', (e) => e.channel === name).map((e) => JSON.parse(e.data).i).sort((x, y) => x - y);
    assert.deepEqual(got, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
  });

  for (const signal of ['SIGTERM', 'SIGKILL']) {
    test(`a toolmark_confirmed queued by a node stopped with ${signal} is delivered once by a survivor`, async (t) => {
      const victim = await startNode();
      const users = { t1: { id: 'u1', conversations: new Set() } };
      const conv = uid('c');
      users.t1.conversations.add(conv);
      const authApp = await startAuthApp({ sdk: sdk(victim, APP), users, deny: toolmarkChannelPolicy });
      t.after(() => authApp.close());
      const page = await openPage(victim, { authApp, token: 't1', user: 'u1', conv, app: APP });
      t.after(() => page.close());
      const tool = { name: 'notes.create', llmName: 'notes__create', description: 'Create a note', hints: { consequential: true } };
      assert.equal((await page.manifest(1, [tool])).status, 204);
      const pending = agent(victim, APP).call({ user_id: 'u1', conversation_id: conv, tool: 'notes.create', input: { title: 'Hi' } });
      const call = await page.next({ type: 'call' });
      const confirmId = uid('cf-');
      assert.equal((await page.result(call.id, { status: 'needs_confirmation', confirmId, summary: 'Create "Hi"' })).status, 204);
      assert.equal((await pending).status, 200);

      receiver.setDown('/tm', true);
      const refusedBefore = receiver.postsTo('/tm').length;
      assert.equal((await page.confirmed(confirmId, { status: 'ok', data: { id: 9 } })).status, 204);
      await eventually(() => receiver.postsTo('/tm').length > refusedBefore, { ms: 10000, what: 'a refused toolmark_confirmed' });
      page.close();
      await victim.stop(signal);
      receiver.setDown('/tm', false);
      const mine = () => receiver.events('/tm').filter((e) => e.confirm_id === confirmId);
      await eventually(() => mine().length >= 1, { ms: TAKEOVER_MS, what: 'the queued toolmark_confirmed, from a survivor' });
      await sleep(1500);
      assert.equal(mine().length, 1, 'delivered exactly once');
      assert.equal(mine()[0].call_id, call.id);
      assert.equal(valid(mine()[0].post, a), true);
    });

    test(`a node stopped with ${signal} while the receiver is down loses none of its queued events`, async (t) => {
      const name = uid(`pub-${signal}-`);
      const victim = await startNode();
      const w = await wire(t, victim);
      await w.subscribe(name);
      const pres = uid(`presence-${signal}-`);
      await w.authSubscribe(pres, { user_id: 'vic' });
      receiver.setDown('/client', true);
      const before = receiver.postsTo('/client').length;
      for (let i = 0; i < 5; i++) w.send({ event: 'client-q', channel: name, data: { i } });
      await w.roundTrip();
      // The victim (or node A/B, whoever holds the lease) tried and was refused.
      await eventually(() => receiver.postsTo('/client').length > before, { ms: 10000, what: 'a refused attempt' });
      const res = await victim.stop(signal);
      assert.equal(signal === 'SIGKILL' ? res.signal : res.code, signal === 'SIGKILL' ? 'SIGKILL' : 0);
      receiver.setDown('/client', false);
      await eventually(() => named('/client', (e) => e.channel === name).length >= 5,
        { ms: TAKEOVER_MS, what: 'the five queued client_event webhooks, delivered by a surviving node' });
      await sleep(1500);
      const got = named('/client', (e) => e.channel === name).map((e) => JSON.parse(e.data).i).sort((x, y) => x - y);
      assert.deepEqual(got, [0, 1, 2, 3, 4], 'each exactly once');
      for (const e of named('/client', (x) => x.channel === name)) assert.equal(valid(e.post, a), true);
      // The victim's channel had no other subscriber: vacated once, by a survivor (after the
      // hold on SIGTERM; once the dead node's heartbeat is 10 s old on SIGKILL).
      await eventually(() => named('/all', (e) => e.channel === name && e.name === 'channel_vacated').length === 1,
        { ms: TAKEOVER_MS, what: 'channel_vacated of the stopped node\'s channel' });
      await sleep(1500);
      assert.deepEqual(named('/all', (e) => e.channel === name).map((e) => e.name), ['channel_occupied', 'channel_vacated']);
      // Its presence member is removed once too (on SIGKILL by the survivor that reaps it).
      await eventually(() => named('/all', (e) => e.channel === pres && e.name === 'member_removed').length === 1,
        { ms: TAKEOVER_MS, what: 'member_removed of the stopped node\'s member' });
      await sleep(1000);
      assert.deepEqual(named('/all', (e) => e.channel === pres).map((e) => `${e.name}:${e.user_id || ''}`).sort(),
        ['channel_occupied:', 'channel_vacated:', 'member_added:vic', 'member_removed:vic']);
    });
  }
});
