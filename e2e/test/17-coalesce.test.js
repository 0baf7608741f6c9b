'use strict';
// server.write_coalesce_ms with real pusher-js clients. The server runs with GOMAXPROCS=1, so
// one flusher writes every socket and a fan-out to 40 subscribers is one busy round
// (>= 32 sockets). After it, with a window of 1000 ms, the next round is held: two events
// triggered one after the other (each HTTP request awaited, so without the window the first
// would be written before the second arrives) reach each socket in one write. Each client
// still gets every event once, in order; /metrics shows the held round and fewer writes than
// frames. With write_coalesce_ms: 0 no round is ever held.
const { describe, test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { startServer, freePort } = require('../lib/server');
const { sdk, outcome, pusherClient, whenConnected, subscribe, inbox } = require('../lib/clients');
const { scrape, parse } = require('../lib/prom');
const { cleanup, uid } = require('../lib/util');

const APP = { app_id: 'coal', key: 'coal-key', secret: 'coal-secret' };
const SUBSCRIBERS = 40;

async function startWith(ms) {
  const server = { host: '127.0.0.1', port: await freePort(), write_coalesce_ms: ms };
  return startServer({ server, apps: [APP], config: { server, apps: [APP], metrics: { enabled: true } }, env: { GOMAXPROCS: '1' } });
}

/** The write-path counters of one scrape. */
async function counters(server) {
  const r = await scrape(`${server.url}/metrics`);
  assert.equal(r.status, 200, r.text);
  const m = parse(r.text);
  return {
    writev: m.get('reverbgo_socket_writes_total', { path: 'writev' }),
    frames: m.get('reverbgo_frames_written_total'),
    held: m.get('reverbgo_flusher_rounds_total', { coalesced: 'true' }),
  };
}

/** 40 pusher-js clients on one channel; returns their inboxes of event "e". */
async function subscribers(t, server) {
  const bag = cleanup(t);
  const channel = uid('fan-');
  const clients = Array.from({ length: SUBSCRIBERS }, () => pusherClient(server));
  for (const c of clients) bag.add(() => c.disconnect());
  await Promise.all(clients.map((c) => whenConnected(c)));
  const subs = await Promise.all(clients.map((c) => subscribe(c, channel)));
  return { channel, boxes: subs.map(({ channel: ch }) => inbox(ch, 'e')) };
}

/** Triggers events A, B, C one request after the other and waits for every client to get all three in order. */
async function fanOutThree(server, channel, boxes) {
  const api = sdk(server);
  for (const n of ['A', 'B', 'C']) {
    assert.equal((await outcome(api.trigger(channel, 'e', { n }))).status, 200);
  }
  for (const box of boxes) {
    const got = await box.wait(3);
    assert.deepEqual(got.map((d) => d.n), ['A', 'B', 'C']);
  }
}

describe('write_coalesce_ms: 1000 (adaptive, held after a busy round)', () => {
  let server;
  before(async () => { server = await startWith(1000); });
  after(() => server.stop());

  test('events ready within the window after a busy round leave in one write per socket, in order', async (t) => {
    const { channel, boxes } = await subscribers(t, server);
    const before = await counters(server);
    await fanOutThree(server, channel, boxes);
    const now = await counters(server);
    const frames = now.frames - before.frames;
    const writes = now.writev - before.writev;
    assert.ok(frames >= 3 * SUBSCRIBERS, `frames written ${frames}`);
    assert.ok(now.held - before.held >= 1, `held rounds ${now.held - before.held}`);
    // A: one write per socket; B and C together: one more. Less than one write per frame.
    assert.ok(writes <= 2 * SUBSCRIBERS + 4, `${writes} writev calls for ${frames} frames`);
  });
});

describe('write_coalesce_ms: 0 (off)', () => {
  let server;
  before(async () => { server = await startWith(0); });
  after(() => server.stop());

  test('no round is ever held and every client gets every event in order', async (t) => {
    const { channel, boxes } = await subscribers(t, server);
    const before = await counters(server);
    await fanOutThree(server, channel, boxes);
    const now = await counters(server);
    assert.equal(now.held - before.held, 0);
    assert.ok(now.frames - before.frames >= 3 * SUBSCRIBERS);
  });
});
