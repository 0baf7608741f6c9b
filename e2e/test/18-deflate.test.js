'use strict';
// permessage-deflate (RFC 7692, server.compression): pusher-js in headless Chromium (Debian's
// /usr/bin/chromium driven by playwright-core) negotiates it — the 101 it receives says so —
// and receives events of 1 KiB and 200 KiB correctly, directly, through deploy/nginx.conf and
// over TLS; a raw client sees those events compressed on the wire (RSV1) and small ones
// plain; a deflate bomb closes 1009 without the server's RSS growing; RSV1 misuse closes 1002.
const { describe, test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const zlib = require('node:zlib');
const { chromium } = require('playwright-core');
const { startServer } = require('../lib/server');
const { sdk, outcome } = require('../lib/clients');
const { NGINX, startNginx } = require('../lib/nginx');
const { TcpWs, frame, OP } = require('../lib/tcpws');
const { uid, eventually, WAIT_MS } = require('../lib/util');

// A throwaway self-signed certificate: certificate checks are off for this file's process only.
process.env.NODE_TLS_REJECT_UNAUTHORIZED = '0';

const APP = { app_id: 'dfl', key: 'dfl-key', secret: 'dfl-secret', max_message_size: 1 << 20 };
// The bomb's app: a 64 KiB frame passes its read limit, the 64 MiB it inflates to does not.
const BOMB_APP = { app_id: 'bomb', key: 'bomb-key', secret: 'bomb-secret', max_message_size: 100000 };
const SERVER = { compression: { enabled: true, min_bytes: 256, level: 1 }, max_request_size: 4 << 20 };
const OFFER = 'Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n';
const ANSWER = 'permessage-deflate; server_no_context_takeover; client_no_context_takeover';
const PUSHER_JS = require.resolve('pusher-js/dist/web/pusher.min.js');
const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync', '--ignore-certificate-errors'];

/** A Laravel-like event payload of about `bytes` bytes (JSON that compresses as real models do). */
function payload(bytes) {
  const items = [];
  for (let i = 0; JSON.stringify(items).length < bytes; i++) {
    items.push({ id: 1000 + i, sku: `SKU-${String((i * 7919) % 100000).padStart(5, '0')}`, name: `Widget ${i}`, quantity: (i % 3) + 1, price: '19.99', created_at: `2026-12-01T20:${String(i % 60).padStart(2, '0')}:00.000000Z` });
  }
  return { order: { id: 48213, status: 'shipped', items } };
}

let dir;
let plain;
let secure;
let nginx;
let viaNginx;
let browser;
let userDataDir;

before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'reverbgo-deflate-'));
  const cert = path.join(dir, 'cert.pem');
  const key = path.join(dir, 'key.pem');
  execFileSync('openssl', [
    'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
    '-keyout', key, '-out', cert, '-days', '2', '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1',
  ], { stdio: 'ignore' });
  plain = await startServer({ apps: [APP, BOMB_APP], server: SERVER, nodes: 1 });
  secure = await startServer({ apps: [APP, BOMB_APP], server: { ...SERVER, tls: { cert, key } } });
  if (NGINX) {
    nginx = await startNginx([plain.port, plain.port]);
    viaNginx = { host: '127.0.0.1', port: nginx.port, prefix: '', tls: false, app: APP, url: `http://127.0.0.1:${nginx.port}` };
  }
  if (!fs.existsSync('/usr/bin/chromium')) throw new Error('these tests need Debian\'s chromium at /usr/bin/chromium (apt-get install chromium)');
  userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'reverbgo-chromium-'));
  browser = await chromium.launchPersistentContext(userDataDir, {
    executablePath: '/usr/bin/chromium', headless: true, args: CHROMIUM_ARGS, ignoreHTTPSErrors: true,
  });
});

after(async () => {
  await browser?.close();
  if (userDataDir) fs.rmSync(userDataDir, { recursive: true, force: true });
  await nginx?.stop();
  await plain?.stop();
  await secure?.stop();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

/**
 * Opens a page on target's origin running pusher-js subscribed to channel; resolves with the
 * page and the Sec-WebSocket-Extensions of the 101 Chromium received (read through CDP).
 */
async function browserClient(target, channel) {
  const page = await browser.newPage();
  const cdp = await browser.newCDPSession(page);
  await cdp.send('Network.enable');
  const answers = [];
  cdp.on('Network.webSocketHandshakeResponseReceived', ({ response }) => {
    const h = Object.entries(response.headers).find(([k]) => k.toLowerCase() === 'sec-websocket-extensions');
    answers.push(h ? h[1] : '');
  });
  await page.goto(`${target.url}/up`);
  await page.addScriptTag({ path: PUSHER_JS });
  await page.evaluate(({ key, host, port, tls, channel }) => new Promise((resolve, reject) => {
    window.got = [];
    const p = new window.Pusher(key, { cluster: 'mt1', wsHost: host, wsPort: port, wssPort: port, forceTLS: tls, enabledTransports: ['ws'], enableStats: false });
    p.connection.bind('failed', () => reject(new Error('pusher-js failed to connect')));
    const ch = p.subscribe(channel);
    ch.bind('pusher:subscription_succeeded', resolve);
    ch.bind('big', (data) => window.got.push(JSON.stringify(data)));
  }), { key: APP.key, host: target.host, port: target.port, tls: Boolean(target.tls), channel });
  await eventually(() => answers.length > 0, { what: 'the WebSocket handshake response' });
  return { page, extensions: answers[0] };
}

/** Triggers on `server` and waits until the page received every event, in order. */
async function deliver(server, page, channel, events) {
  for (const data of events) {
    const res = await outcome(sdk(server, APP).trigger(channel, 'big', data));
    assert.equal(res.status, 200, JSON.stringify(res.body));
  }
  const got = await eventually(async () => {
    const g = await page.evaluate(() => window.got);
    return g.length >= events.length && g;
  }, { what: `${events.length} events in the page`, ms: 3 * WAIT_MS });
  return got.map((s) => JSON.parse(s));
}

/** A raw client offering permessage-deflate, subscribed to channel. */
async function rawClient(target, channel, { app = APP, headers = OFFER } = {}) {
  const c = await TcpWs.connect({ ...target, app }, { key: app.key, headers });
  if (channel) {
    c.write(frame(OP.text, { event: 'pusher:subscribe', data: { channel } }));
    await c.event('pusher_internal:subscription_succeeded');
  }
  return c;
}

function extensionsOf(head) {
  const line = head.split('\r\n').find((l) => l.toLowerCase().startsWith('sec-websocket-extensions:'));
  return line ? line.slice(line.indexOf(':') + 1).trim() : '';
}

const targets = () => [
  ['direct', plain, plain],
  ['through deploy/nginx.conf', viaNginx, plain],
  ['over TLS', secure, secure],
];

describe('permessage-deflate', () => {
  for (const [name, pick] of [['direct', 0], ['through deploy/nginx.conf', 1], ['over TLS', 2]]) {
    test(`pusher-js in Chromium ${name}: negotiated, 1 KiB and 200 KiB events arrive intact`, async (t) => {
      const [, target, origin] = targets()[pick];
      if (!target) return t.skip('nginx not installed');
      const channel = uid('deflate-');
      const { page, extensions } = await browserClient(target, channel);
      try {
        assert.equal(extensions, ANSWER);
        const events = [payload(1024), payload(200 * 1024)];
        assert.deepEqual(await deliver(origin, page, channel, events), events);
      } finally {
        await page.close();
      }
    });

    test(`a raw client ${name} reads events of 1 KiB and 200 KiB compressed (RSV1), a small one plain`, async (t) => {
      const [, target, origin] = targets()[pick];
      if (!target) return t.skip('nginx not installed');
      const channel = uid('deflate-');
      const c = await rawClient(target, channel);
      try {
        assert.equal(extensionsOf(c.head), ANSWER);
        for (const [data, rsv] of [[payload(1024), 4], [payload(200 * 1024), 4], [{ tiny: 1 }, 0]]) {
          assert.equal((await outcome(sdk(origin, APP).trigger(channel, 'big', data))).status, 200);
          const f = await c.event('big', 3 * WAIT_MS);
          assert.equal(f.rsv, rsv, `RSV bits of a ${JSON.stringify(data).length}-byte event`);
          assert.deepEqual(f.data, data);
          if (rsv) assert.ok(f.wireBytes < JSON.stringify(data).length / 2, `compressed to ${f.wireBytes} bytes`);
        }
      } finally {
        c.destroy();
      }
    });
  }

  test('a client that does not offer it gets no extension and plain frames', async () => {
    const channel = uid('deflate-');
    const c = await rawClient(plain, channel, { headers: '' });
    try {
      assert.equal(extensionsOf(c.head), '');
      const data = payload(1024);
      await sdk(plain, APP).trigger(channel, 'big', data);
      const f = await c.event('big');
      assert.equal(f.rsv, 0);
      assert.deepEqual(f.data, data);
    } finally {
      c.destroy();
    }
  });

  test('a deflate bomb (64 KiB inflating to 64 MiB) closes 1009; the server RSS does not grow', async () => {
    const bomb = zlib.deflateRawSync(Buffer.alloc(64 << 20), { level: 9 });
    assert.ok(bomb.length < 80 << 10, `bomb of ${bomb.length} bytes`);
    for (const server of [plain, secure]) {
      const rss = () => Number(/VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${server.proc.pid}/status`, 'utf8'))[1]);
      const c = await rawClient(server, null, { app: BOMB_APP });
      const before = rss();
      c.write(frame(OP.text, bomb, { rsv: 4 }));
      const closed = await c.closed();
      const grown = rss() - before;
      assert.equal(closed.code, 1009, `${server.tls ? 'TLS' : 'plain'}: close code`);
      // Inflating it whole would add 64 MiB (65536 kB); bounded, at most the 100 kB limit and
      // the inflater's pooled state are touched.
      assert.ok(grown < 8 * 1024, `${server.tls ? 'TLS' : 'plain'}: RSS grew by ${grown} kB`);
    }
  });

  for (const [name, headers, frames] of [
    ['RSV1 without the extension', '', () => [frame(OP.text, zlib.deflateRawSync(Buffer.from('{"event":"pusher:ping","data":{}}')), { rsv: 4 })]],
    ['RSV1 on a ping', OFFER, () => [frame(OP.ping, Buffer.alloc(0), { rsv: 4 })]],
    ['RSV1 on a continuation', OFFER, () => [frame(OP.text, Buffer.from([0x4a]), { rsv: 4, fin: false }), frame(OP.cont, Buffer.from([0x00]), { rsv: 4 })]],
  ]) {
    test(`${name} closes 1002, plain and TLS`, async () => {
      for (const server of [plain, secure]) {
        const c = await rawClient(server, null, { headers });
        for (const f of frames()) c.write(f);
        assert.equal((await c.closed()).code, 1002, server.tls ? 'TLS' : 'plain');
      }
    });
  }
});
