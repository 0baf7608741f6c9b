'use strict';
// RFC 6455 rules on both transports of the built binary: plain TCP (the poller's own frame
// parser) and TLS (the gorilla path). Text must be UTF-8, checked as it arrives (1007);
// framing violations are 1002; a header announcing more than max_message_size is 1009
// before any payload is sent; the handshake names the version it speaks (426).
const { describe, test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { startServer } = require('../lib/server');
const { TcpWs, frame, closePayload, OP } = require('../lib/tcpws');
const { Wire, signer } = require('../lib/wire');
const { cleanup, uid } = require('../lib/util');

process.env.NODE_TLS_REJECT_UNAUTHORIZED = '0'; // the TLS server's throwaway certificate

const APP = { app_id: 'rfc', key: 'rfc-key', secret: 'rfc-secret', max_message_size: 1000 };
const servers = {};
let dir;
before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'reverbgo-rfc-'));
  const cert = path.join(dir, 'cert.pem');
  const key = path.join(dir, 'key.pem');
  execFileSync('openssl', [
    'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
    '-keyout', key, '-out', cert, '-days', '2', '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1',
  ], { stdio: 'ignore' });
  servers.plain = await startServer({ apps: [APP] });
  servers.tls = await startServer({ apps: [APP], server: { tls: { cert, key } } });
});
after(async () => {
  await Promise.all(Object.values(servers).map((s) => s.stop()));
  fs.rmSync(dir, { recursive: true, force: true });
});

const ping = (extra = {}) => Buffer.from(JSON.stringify({ event: 'pusher:ping', data: extra }));

for (const transport of ['plain', 'tls']) {
  describe(`${transport}: text must be UTF-8`, () => {
    const tcp = async (t) => {
      const c = await TcpWs.connect(servers[transport]);
      cleanup(t).add(() => c.destroy());
      return c;
    };

    test('a client event with invalid UTF-8 closes its sender with 1007 and reaches nobody', async (t) => {
      const server = servers[transport];
      const name = uid('private-utf8-');
      const observer = await Wire.connect(server);
      cleanup(t).add(() => observer.close());
      assert.equal((await observer.authSubscribe(name)).event, 'pusher_internal:subscription_succeeded');
      const c = await tcp(t);
      const signed = signer(APP).authorizeChannel(c.socketId, name);
      c.write(frame(OP.text, { event: 'pusher:subscribe', data: { channel: name, ...signed } }));
      await c.event('pusher_internal:subscription_succeeded');
      const bad = Buffer.concat([Buffer.from(`{"event":"client-x","channel":"${name}","data":"`), Buffer.from([0xc3, 0x28]), Buffer.from('"}')]);
      c.write(frame(OP.text, bad));
      assert.equal((await c.closed()).code, 1007, c.describe());
      assert.deepEqual(await observer.none('client-x'), []);
    });

    test('a code point split between fragments, sent a byte at a time, is fine', async (t) => {
      const c = await tcp(t);
      const text = ping({ s: 'h€😀' });
      const cut = text.indexOf(Buffer.from('€')) + 1; // inside the euro sign
      await c.writeInPieces(frame(OP.text, text.subarray(0, cut), { fin: false }), 1, 0);
      await c.writeInPieces(frame(OP.cont, text.subarray(cut, cut + 5), { fin: false }), 1, 0); // cuts 😀 too
      await c.writeInPieces(frame(OP.cont, text.subarray(cut + 5), { fin: true }), 1, 0);
      await c.event('pusher:pong');
    });

    test('an invalid byte in the first fragment closes at once, before the message ends', async (t) => {
      const c = await tcp(t);
      c.write(frame(OP.text, Buffer.from([0x7b, 0xed, 0xa0, 0x80]), { fin: false })); // a UTF-16 surrogate
      assert.equal((await c.closed()).code, 1007, c.describe());
    });

    test('a code point still open when the message ends is 1007', async (t) => {
      const c = await tcp(t);
      c.write(frame(OP.text, Buffer.from([0x22, 0xe2]), { fin: false }));
      c.write(frame(OP.cont, Buffer.from([0x82]), { fin: true }));
      assert.equal((await c.closed()).code, 1007, c.describe());
    });

    test('binary frames are not checked', async (t) => {
      const c = await tcp(t);
      c.write(frame(OP.binary, Buffer.from([0xff, 0xfe])));
      c.write(frame(OP.text, ping()));
      await c.event('pusher:pong');
    });
  });

  describe(`${transport}: framing`, () => {
    const cases = {
      'unmasked client frame': () => frame(OP.text, ping(), { mask: false }),
      'RSV1 set without an extension': () => frame(OP.text, ping(), { rsv: 4 }),
      'RSV3 set': () => frame(OP.text, ping(), { rsv: 1 }),
      'reserved opcode 0x3': () => frame(0x3, 'x'),
      'reserved control opcode 0xB': () => frame(0xb, ''),
      'continuation without a message': () => frame(OP.cont, 'x'),
      'new text frame inside a fragmented message': () => Buffer.concat([frame(OP.text, '{"ev', { fin: false }), frame(OP.text, 'x')]),
      'fragmented ping': () => frame(OP.ping, 'x', { fin: false }),
      'control frame over 125 bytes': () => frame(OP.ping, 'p'.repeat(126)),
      'close code 1005': () => frame(OP.close, closePayload(1005)),
      'close code 2999': () => frame(OP.close, closePayload(2999)),
      'close reason not UTF-8': () => frame(OP.close, Buffer.concat([closePayload(1000), Buffer.from([0xff])])),
    };
    for (const [label, bytes] of Object.entries(cases)) {
      test(`${label} → 1002`, async (t) => {
        const c = await TcpWs.connect(servers[transport]);
        cleanup(t).add(() => c.destroy());
        c.write(bytes());
        assert.equal((await c.closed()).code, 1002, c.describe());
      });
    }

    test('a header announcing more than max_message_size → 1009 before any payload is sent', async (t) => {
      const c = await TcpWs.connect(servers[transport]);
      cleanup(t).add(() => c.destroy());
      const header = Buffer.alloc(14);
      header[0] = 0x81;
      header[1] = 0x80 | 127;
      header.writeBigUInt64BE(1n << 40n, 2); // a terabyte, never sent
      c.write(header);
      assert.equal((await c.closed()).code, 1009, c.describe());
    });

    test('the closing handshake: a close frame is answered and the connection ends', async (t) => {
      const c = await TcpWs.connect(servers[transport]);
      cleanup(t).add(() => c.destroy());
      c.write(frame(OP.close, closePayload(1000, 'bye')));
      assert.equal((await c.closed()).code, 1000);
    });
  });

  describe(`${transport}: opening handshake`, () => {
    const key = 'dGhlIHNhbXBsZSBub25jZQ==';
    const cases = [
      ['no Sec-WebSocket-Version', `Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: ${key}\r\n`, 426],
      ['version 8', `Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: ${key}\r\nSec-WebSocket-Version: 8\r\n`, 426],
      ['a key of 8 bytes', 'Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXA=\r\nSec-WebSocket-Version: 13\r\n', 400],
      ['no key', 'Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n', 400],
    ];
    for (const [label, headers, status] of cases) {
      test(`${label} → ${status} naming version 13`, async () => {
        const head = await TcpWs.handshake(servers[transport], headers);
        assert.match(head, new RegExp(`^HTTP/1\\.1 ${status} `), head);
        assert.match(head, /\r\nsec-websocket-version: 13\r\n/i, head);
      });
    }
  });
}
