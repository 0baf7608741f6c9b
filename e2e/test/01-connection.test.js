'use strict';
// Connecting: connection_established, refusals (unknown key, disabled app, quota, origin,
// protocol), ping/pong both ways, malformed input, oversized frames and the activity sweep.
const { describe, test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { startServer } = require('../lib/server');
const { Wire } = require('../lib/wire');
const { Pusher, socketOptions, pusherClient, whenConnected, inbox, sdk, apiGet } = require('../lib/clients');
const { cleanup, eventually, quiet } = require('../lib/util');

const APPS = [
  { app_id: 'main', key: 'main-key', secret: 'main-secret' },
  { app_id: 'off', key: 'off-key', secret: 'off-secret', enabled: false },
  { app_id: 'quota', key: 'quota-key', secret: 'quota-secret', max_connections: 1 },
  { app_id: 'quota5', key: 'quota5-key', secret: 'quota5-secret', max_connections: 5 },
  { app_id: 'origin', key: 'origin-key', secret: 'origin-secret', allowed_origins: ['example.com'] },
  { app_id: 'idle', key: 'idle-key', secret: 'idle-secret', ping_interval: 1, activity_timeout: 1 },
  { app_id: 'small', key: 'small-key', secret: 'small-secret', max_message_size: 1000 },
];
const app = (id) => APPS.find((a) => a.app_id === id);

let server;
before(async () => {
  server = await startServer({ apps: APPS });
});
after(async () => {
  await server.stop();
});

/** Opens a raw socket expected to be refused; returns {error frame, close}. */
async function refused(opts) {
  const wire = await Wire.open(server, opts);
  try {
    const err = await wire.next('pusher:error');
    const close = await wire.waitClosed();
    return { err, close, wire };
  } finally {
    wire.close();
  }
}

describe('connection_established', () => {
  test('raw client gets exactly one connection_established with a string data payload', async (t) => {
    const wire = await Wire.connect(server);
    cleanup(t).add(() => wire.close());
    const est = wire.established;
    assert.equal(est.msg.event, 'pusher:connection_established');
    assert.equal(est.dataIsString, true, 'data must be a JSON-encoded string');
    assert.equal('channel' in est.msg, false, 'no channel field (not even null)');
    assert.match(est.data.socket_id, /^\d+\.\d+$/);
    assert.equal(est.data.activity_timeout, 30);
    assert.deepEqual(Object.keys(est.data).sort(), ['activity_timeout', 'socket_id']);
    assert.equal(wire.frames.length, 1);
  });

  test('socket ids are unique per connection', async (t) => {
    const bag = cleanup(t);
    const ids = new Set();
    for (let i = 0; i < 5; i++) {
      const w = await Wire.connect(server);
      bag.add(() => w.close());
      ids.add(w.socketId);
    }
    assert.equal(ids.size, 5);
  });

  test('pusher-js connects and reports the socket id', async (t) => {
    const p = pusherClient(server);
    cleanup(t).add(() => p.disconnect());
    const id = await whenConnected(p);
    assert.match(id, /^\d+\.\d+$/);
  });

  test('a missing protocol query is accepted, protocol=4 is refused with 4007', async (t) => {
    const ok = await Wire.connect(server, { query: '' });
    cleanup(t).add(() => ok.close());
    assert.match(ok.socketId, /^\d+\.\d+$/);
    const { err, close } = await refused({ query: 'protocol=4&client=js&version=1.0' });
    assert.equal(err.data.code, 4007);
    assert.equal(close.code, 4007);
  });
});

describe('refusals', () => {
  test('unknown app key → pusher:error 4001 then close 4001', async () => {
    const { err, close, wire } = await refused({ key: 'no-such-key' });
    assert.equal(err.dataIsString, true);
    assert.deepEqual(err.data, { code: 4001, message: 'Application does not exist' });
    assert.equal(close.code, 4001);
    assert.equal(wire.frames.filter((f) => f.event === 'pusher:connection_established').length, 0);
  });

  test('pusher-js with an unknown key gets error 4001 and does not reconnect', async (t) => {
    const p = new Pusher('no-such-key', socketOptions(server));
    cleanup(t).add(() => p.disconnect());
    const errors = inbox(p.connection, 'error');
    const connecting = inbox(p.connection, 'connecting');
    const [e] = await errors.wait(1);
    assert.equal(e.error.data.code, 4001);
    await eventually(() => p.connection.state === 'disconnected' || p.connection.state === 'failed', { what: 'pusher-js to give up' });
    await quiet(800);
    assert.equal(connecting.got.length, 0, 'no reconnect attempt after a 40xx refusal');
  });

  test('disabled app → 4003', async () => {
    const { err, close } = await refused({ app: app('off') });
    assert.equal(err.data.code, 4003);
    assert.equal(close.code, 4003);
  });

  test('max_connections 1 → the second socket gets 4004; the slot frees on close', async (t) => {
    const bag = cleanup(t);
    const first = await Wire.connect(server, { app: app('quota') });
    bag.add(() => first.close());
    const { err, close } = await refused({ app: app('quota') });
    assert.deepEqual(err.data, { code: 4004, message: 'Application is over connection quota' });
    assert.equal(close.code, 4004);
    // other apps are not affected by this app's quota
    const other = await Wire.connect(server);
    bag.add(() => other.close());
    first.ws.close(1000);
    await first.waitClosed();
    const again = await eventually(async () => {
      const w = await Wire.open(server, { app: app('quota') });
      const f = await w.next((x) => x.event === 'pusher:connection_established' || x.event === 'pusher:error');
      if (f.event === 'pusher:connection_established') return w;
      w.close();
      return null;
    }, { what: 'a connection slot after the first socket closed' });
    bag.add(() => again.close());
  });

  test('max_connections 5 under 20 simultaneous connects: exactly 5 admitted, no slot leaks', async (t) => {
    const bag = cleanup(t);
    const api = sdk(server, app('quota5'));
    // plain HTTP GETs on the WebSocket endpoint are refused by the upgrade and take no slot
    for (let i = 0; i < 3; i++) assert.equal((await fetch(`${server.url}/app/quota5-key`)).status, 400);
    for (let round = 0; round < 2; round++) {
      const attempts = await Promise.all(
        Array.from({ length: 20 }, async () => {
          const w = await Wire.open(server, { app: app('quota5') });
          bag.add(() => w.close());
          const first = await w.next((f) => f.event === 'pusher:connection_established' || f.event === 'pusher:error');
          return { w, admitted: first.event === 'pusher:connection_established', first };
        }),
      );
      assert.equal(attempts.filter((a) => a.admitted).length, 5, `round ${round}`);
      for (const a of attempts.filter((x) => !x.admitted)) assert.equal(a.first.data.code, 4004);
      assert.deepEqual(await apiGet(api, '/connections'), { connections: 5 });
      for (const a of attempts) a.w.ws.close(1000);
      await eventually(async () => (await apiGet(api, '/connections')).connections === 0, { what: 'all slots released' });
    }
  });

  test('allowed_origins ["example.com"]: evil origin → 4009, example.com and no Origin accepted', async (t) => {
    const bag = cleanup(t);
    const { err, close } = await refused({ app: app('origin'), origin: 'http://evil.test' });
    assert.deepEqual(err.data, { code: 4009, message: 'Origin not allowed' });
    assert.equal(close.code, 4009);
    const good = await Wire.connect(server, { app: app('origin'), origin: 'http://example.com' });
    bag.add(() => good.close());
    assert.match(good.socketId, /^\d+\.\d+$/);
    const https = await Wire.connect(server, { app: app('origin'), origin: 'https://example.com:8443' });
    bag.add(() => https.close());
    const server2server = await Wire.connect(server, { app: app('origin') });
    bag.add(() => server2server.close());
  });
});

describe('ping, pong and bad input', () => {
  test('pusher:ping → {"event":"pusher:pong"}', async (t) => {
    const wire = await Wire.connect(server);
    cleanup(t).add(() => wire.close());
    wire.send({ event: 'pusher:ping', data: {} });
    const pong = await wire.next('pusher:pong');
    assert.deepEqual(pong.msg, { event: 'pusher:pong' });
  });

  test('a WebSocket ping control frame gets a pong with the same payload', async (t) => {
    const wire = await Wire.connect(server);
    cleanup(t).add(() => wire.close());
    wire.ws.ping('hello-reverbgo');
    await eventually(() => wire.pongs.includes('hello-reverbgo'), { what: 'pong control frame' });
  });

  test('malformed JSON → pusher:error 4200, connection stays usable', async (t) => {
    const wire = await Wire.connect(server);
    cleanup(t).add(() => wire.close());
    wire.send('{this is not json');
    const err = await wire.next('pusher:error');
    assert.equal(err.data.code, 4200);
    assert.equal(typeof err.data.message, 'string');
    await wire.roundTrip();
    assert.equal(wire.open, true);
  });

  test('unknown pusher:* event and event without client- prefix → 4200, still open', async (t) => {
    const wire = await Wire.connect(server);
    cleanup(t).add(() => wire.close());
    wire.send({ event: 'pusher:bogus', data: {} });
    assert.equal((await wire.next('pusher:error')).data.code, 4200);
    wire.send({ event: 'whatever', channel: 'x', data: {} });
    assert.equal((await wire.next('pusher:error')).data.code, 4200);
    wire.send({ event: 'pusher:subscribe', data: 42 });
    assert.equal((await wire.next('pusher:error')).data.code, 4200);
    await wire.roundTrip();
  });

  test('frame over max_message_size → close 1009; a frame just under it is fine', async (t) => {
    const bag = cleanup(t);
    const ok = await Wire.connect(server, { app: app('small') });
    bag.add(() => ok.close());
    ok.send({ event: 'pusher:ping', data: { pad: 'x'.repeat(900) } });
    await ok.next('pusher:pong');

    const big = await Wire.connect(server, { app: app('small') });
    bag.add(() => big.close());
    big.send({ event: 'pusher:ping', data: { pad: 'x'.repeat(2000) } });
    const { code } = await big.waitClosed();
    assert.equal(code, 1009);
    assert.equal(big.frames.some((f) => f.event === 'pusher:pong'), false);
  });
});

// The three slow checks (seconds of idling each) run side by side.
describe('activity sweep (ping_interval 1, activity_timeout 1)', { concurrency: true }, () => {
  test('connection_established advertises activity_timeout 1', async (t) => {
    const wire = await Wire.connect(server, { app: app('idle') });
    cleanup(t).add(() => wire.close());
    assert.equal(wire.established.data.activity_timeout, 1);
  });

  test('a silent raw client gets pusher:ping, then pusher:error 4201 and close 4201', async (t) => {
    const wire = await Wire.connect(server, { app: app('idle') });
    cleanup(t).add(() => wire.close());
    const ping = await wire.next('pusher:ping', 4000);
    assert.equal(ping.msg.event, 'pusher:ping');
    const err = await wire.next('pusher:error', 4000);
    assert.deepEqual(err.data, { code: 4201, message: 'Pong reply not received in time' });
    const { code } = await wire.waitClosed(4000);
    assert.equal(code, 4201);
  });

  test('a raw client that answers pusher:pong stays connected', async (t) => {
    const wire = await Wire.connect(server, { app: app('idle') });
    cleanup(t).add(() => wire.close());
    for (let i = 0; i < 2; i++) {
      await wire.next('pusher:ping', 4000);
      wire.send({ event: 'pusher:pong', data: {} });
    }
    assert.equal(wire.open, true);
    await wire.roundTrip();
    assert.equal(wire.frames.some((f) => f.event === 'pusher:error'), false);
  });

  test('a client that used control-frame pings is pinged with control frames: pong keeps it, silence → 4201', async (t) => {
    const answers = await Wire.connect(server, { app: app('idle') }); // ws answers pings itself
    const silent = await Wire.connect(server, { app: app('idle'), autoPong: false });
    cleanup(t).add(() => answers.close());
    cleanup(t).add(() => silent.close());
    answers.ws.ping('hi');
    silent.ws.ping('hi');
    const { code } = await silent.waitClosed(5000);
    assert.equal(code, 4201);
    assert.ok(silent.pings >= 1, 'the server pinged with a control frame');
    assert.equal(silent.frames.some((f) => f.event === 'pusher:ping'), false, 'no pusher:ping JSON for control-frame clients');
    assert.ok(answers.pings >= 1);
    assert.equal(answers.open, true, 'a pong frame counts as activity');
    await answers.roundTrip();
  });

  test('pusher-js keeps its connection alive (answers pings, pings on its own)', async (t) => {
    const p = pusherClient(server, { app: app('idle') });
    cleanup(t).add(() => p.disconnect());
    const id = await whenConnected(p);
    const changes = inbox(p.connection, 'state_change');
    await quiet(3500);
    assert.deepEqual(changes.got, [], 'no state change while idle');
    assert.equal(p.connection.state, 'connected');
    assert.equal(p.connection.socket_id, id);
  });
});
