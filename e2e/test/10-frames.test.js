'use strict';
// RFC 6455 framing as the server reads and writes it over real TCP: frames split at every
// byte, several frames per write, fragmented messages with interleaved control frames, size
// limits across fragments, protocol violations (1002) and the closing handshake.
const { describe, test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { startServer } = require('../lib/server');
const { TcpWs, frame, closePayload, OP } = require('../lib/tcpws');
const { Wire, signer } = require('../lib/wire');
const { sdk } = require('../lib/clients');
const { cleanup, uid, eventually } = require('../lib/util');

const APPS = [
  { app_id: 'fr', key: 'fr-key', secret: 'fr-secret', max_message_size: 1000 },
  { app_id: 'frbig', key: 'frbig-key', secret: 'frbig-secret', max_message_size: 200000 },
];

let server;
before(async () => {
  server = await startServer({ apps: APPS });
});
after(async () => {
  await server.stop();
});

async function tcp(t, app = APPS[0]) {
  const c = await TcpWs.connect(server, { key: app.key });
  cleanup(t).add(() => c.destroy());
  return c;
}

const ping = (extra = {}) => frame(OP.text, { event: 'pusher:ping', data: extra });

describe('reading client frames', () => {
  test('three frames in one TCP write are each handled, in order', async (t) => {
    const c = await tcp(t);
    const name = uid('pipe-');
    c.write(Buffer.concat([ping(), frame(OP.text, { event: 'pusher:subscribe', data: { channel: name } }), ping()]));
    const events = [];
    for (let i = 0; i < 3; i++) events.push((await c.next((f) => f.msg && f.msg.event !== 'pusher:connection_established')).msg.event);
    assert.deepEqual(events, ['pusher:pong', 'pusher_internal:subscription_succeeded', 'pusher:pong']);
  });

  test('a frame delivered one byte at a time (7-bit, 16-bit and 64-bit lengths)', async (t) => {
    const small = await tcp(t);
    await small.writeInPieces(ping(), 1);
    await small.event('pusher:pong');

    const medium = await tcp(t);
    await medium.writeInPieces(ping({ pad: 'm'.repeat(300) }), 1, 0);
    await medium.event('pusher:pong');

    const big = await tcp(t, APPS[1]);
    const bigFrame = ping({ pad: 'b'.repeat(70000) }); // > 65535: 64-bit length
    await big.writeInPieces(bigFrame.subarray(0, 20), 1); // header and mask byte by byte
    await big.writeInPieces(bigFrame.subarray(20), 9973, 1); // the rest in odd-sized pieces
    await big.event('pusher:pong');
  });

  test('two frames split across writes at an awkward boundary', async (t) => {
    const c = await tcp(t);
    const both = Buffer.concat([ping(), ping()]);
    const cut = ping().length + 3; // inside the second frame's header
    c.write(both.subarray(0, cut));
    await c.event('pusher:pong');
    c.write(both.subarray(cut));
    await c.event('pusher:pong');
  });

  test('a fragmented text message with a ping control frame between fragments', async (t) => {
    const c = await tcp(t);
    const text = Buffer.from(JSON.stringify({ event: 'pusher:ping', data: { fragmented: true } }));
    c.write(frame(OP.text, text.subarray(0, 5), { fin: false }));
    c.write(frame(OP.cont, text.subarray(5, 12), { fin: false }));
    c.write(frame(OP.ping, 'between'));
    const pong = await c.next((f) => f.op === OP.pong);
    assert.equal(pong.payload.toString(), 'between', 'control frames are answered mid-message');
    c.write(frame(OP.cont, text.subarray(12), { fin: true }));
    await c.event('pusher:pong');
  });

  test('fragments each under max_message_size but over it in total → close 1009', async (t) => {
    const c = await tcp(t);
    const text = Buffer.from(JSON.stringify({ event: 'pusher:ping', data: { pad: 'z'.repeat(1500) } }));
    c.write(frame(OP.text, text.subarray(0, 800), { fin: false }));
    c.write(frame(OP.cont, text.subarray(800), { fin: true }));
    const closing = await c.closed();
    assert.equal(closing.code, 1009);
  });

  test('a frame exactly max_message_size bytes is accepted, one byte more is 1009', async (t) => {
    const body = (n) => {
      const base = JSON.stringify({ event: 'pusher:ping', data: { p: '' } });
      return JSON.stringify({ event: 'pusher:ping', data: { p: 'x'.repeat(n - base.length) } });
    };
    const ok = await tcp(t);
    assert.equal(Buffer.byteLength(body(1000)), 1000);
    ok.write(frame(OP.text, body(1000)));
    await ok.event('pusher:pong');
    const over = await tcp(t);
    over.write(frame(OP.text, body(1001)));
    assert.equal((await over.closed()).code, 1009);
  });

  test('a binary frame does not break the connection', async (t) => {
    const c = await tcp(t);
    c.write(frame(OP.binary, { event: 'pusher:ping', data: {} }));
    const answer = await c.next((f) => f.msg && (f.msg.event === 'pusher:pong' || f.msg.event === 'pusher:error'));
    if (answer.msg.event === 'pusher:error') assert.equal(answer.data.code, 4200);
    c.write(ping());
    await c.event('pusher:pong');
  });
});

describe('protocol violations → close 1002', () => {
  const cases = {
    'unmasked client frame': () => [frame(OP.text, '{"event":"pusher:ping"}', { mask: false })],
    'RSV1 set without an extension': () => [frame(OP.text, '{"event":"pusher:ping"}', { rsv: 4 })],
    'reserved opcode 0x3': () => [frame(0x3, 'x')],
    'continuation without a message': () => [frame(OP.cont, 'x')],
    'new text frame inside a fragmented message': () => [frame(OP.text, '{"ev', { fin: false }), frame(OP.text, 'x')],
    'fragmented ping': () => [frame(OP.ping, 'x', { fin: false })],
    'control frame over 125 bytes': () => [frame(OP.ping, 'p'.repeat(126))],
    'close code 1005 (never sent on the wire)': () => [frame(OP.close, closePayload(1005))],
    'close reason not UTF-8': () => [frame(OP.close, Buffer.concat([closePayload(1000), Buffer.from([0xff, 0xfe])]))],
  };
  for (const [label, frames] of Object.entries(cases)) {
    test(label, async (t) => {
      const c = await tcp(t);
      c.write(Buffer.concat(frames()));
      const closing = await c.closed();
      assert.equal(closing.code, 1002, c.describe());
    });
  }
});

describe('server frames and the closing handshake', () => {
  test('server frames are unmasked, unfragmented, one JSON event each, even under a burst', async (t) => {
    const c = await tcp(t, APPS[1]);
    const name = uid('burst-');
    c.write(frame(OP.text, { event: 'pusher:subscribe', data: { channel: name } }));
    await c.event('pusher_internal:subscription_succeeded');
    const api = sdk(server, APPS[1]);
    const batch = (k) => Array.from({ length: 10 }, (_, i) => ({ channel: name, name: 'n', data: String(k * 10 + i) }));
    await Promise.all([0, 1, 2, 3, 4].map((k) => api.triggerBatch(batch(k))));
    const seen = [];
    for (let i = 0; i < 50; i++) seen.push(Number((await c.event('n')).msg.data));
    assert.deepEqual(seen.slice().sort((a, b) => a - b), Array.from({ length: 50 }, (_, i) => i));
    for (const f of c.frames) {
      assert.equal(f.masked, false);
      assert.equal(f.fin, true);
      assert.equal(f.rsv, 0);
      if (f.op === OP.text) assert.equal(f.invalid, undefined, `not one JSON event: ${f.text}`);
    }
    // within one batch (one request) the order is kept
    for (let k = 0; k < 5; k++) {
      const mine = seen.filter((n) => Math.floor(n / 10) === k);
      assert.deepEqual(mine, mine.slice().sort((a, b) => a - b), `batch ${k} in order`);
    }
  });

  test('a client close frame is echoed with its code and the TCP connection ends', async (t) => {
    const c = await tcp(t);
    c.write(frame(OP.close, closePayload(1000, 'bye')));
    const closing = await c.closed();
    assert.equal(closing.code, 1000);
  });

  test('a close frame with no status is answered too', async (t) => {
    const c = await tcp(t);
    c.write(frame(OP.close));
    await c.closed();
  });

  test('closing a presence member\'s socket with a close frame removes the member at once', async (t) => {
    const name = uid('presence-fr-');
    const observer = await Wire.connect(server);
    cleanup(t).add(() => observer.close());
    await observer.authSubscribe(name, { user_id: 'obs' });
    const c = await tcp(t);
    const signed = signer(APPS[0]).authorizeChannel(c.socketId, name, { user_id: 'leaver' });
    c.write(frame(OP.text, { event: 'pusher:subscribe', data: { channel: name, ...signed } }));
    await c.event('pusher_internal:subscription_succeeded');
    await observer.next('pusher_internal:member_added');
    c.write(frame(OP.close, closePayload(1001, 'going away')));
    await c.closed(); // RFC 6455 only says the reply "typically" echoes the code; reverbgo answers 1000
    const removed = await observer.next('pusher_internal:member_removed');
    assert.deepEqual(removed.data, { user_id: 'leaver' });
  });

  test('a TCP reset without a close frame also cleans up the subscription', async (t) => {
    const name = uid('reset-');
    const c = await tcp(t);
    c.write(frame(OP.text, { event: 'pusher:subscribe', data: { channel: name } }));
    await c.event('pusher_internal:subscription_succeeded');
    const api = sdk(server);
    assert.equal((await (await api.get({ path: `/channels/${name}` })).json()).occupied, true);
    c.sock.resetAndDestroy();
    await eventually(async () => !(await (await api.get({ path: `/channels/${name}` })).json()).occupied, { what: 'the channel to be vacated' });
  });
});
