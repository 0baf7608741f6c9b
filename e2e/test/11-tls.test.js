'use strict';
// server.tls: with a certificate and key the same port serves wss:// and https:// — pusher-js
// (forceTLS), raw ws and the server SDK all work over TLS; plain ws/http on it do not.
const { describe, test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const WebSocket = require('ws');
const { startServer } = require('../lib/server');
const { Wire } = require('../lib/wire');
const { sdk, outcome, pusherClient, whenConnected, subscribe, inbox } = require('../lib/clients');
const { rawApi } = require('../lib/rawapi');
const { cleanup, uid, deadline, WAIT_MS } = require('../lib/util');

// A throwaway self-signed certificate: this test process accepts it. pusher-js and the SDK
// take no CA option, so certificate checks are turned off for this file's process only.
process.env.NODE_TLS_REJECT_UNAUTHORIZED = '0';

const APP = { app_id: 'tls', key: 'tls-key', secret: 'tls-secret' };
let dir;
let server;
before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'reverbgo-tls-'));
  const cert = path.join(dir, 'cert.pem');
  const key = path.join(dir, 'key.pem');
  execFileSync('openssl', [
    'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
    '-keyout', key, '-out', cert, '-days', '2', '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1',
  ], { stdio: 'ignore' });
  server = await startServer({ apps: [APP], server: { tls: { cert, key } } });
});
after(async () => {
  await server.stop();
  fs.rmSync(dir, { recursive: true, force: true });
});

describe('TLS', () => {
  test('pusher-js over wss receives an event triggered over https by the SDK', async (t) => {
    assert.equal(server.tls, true);
    const p = pusherClient(server);
    cleanup(t).add(() => p.disconnect());
    await whenConnected(p);
    const name = uid('private-tls-');
    const { channel } = await subscribe(p, name);
    const got = inbox(channel, 'secure');
    assert.equal((await outcome(sdk(server).trigger(name, 'secure', { ok: 1 }))).status, 200);
    assert.deepEqual((await got.wait(1))[0], { ok: 1 });
  });

  test('raw wss client, signed https API and /up', async (t) => {
    const w = await Wire.connect(server);
    cleanup(t).add(() => w.close());
    assert.match(w.socketId, /^\d+\.\d+$/);
    const res = await rawApi(server, { path: '/connections' });
    assert.equal(res.status, 200);
    assert.ok(res.body.connections >= 1);
    const up = await fetch(`${server.url}/up`);
    assert.deepEqual(await up.json(), { health: 'OK' });
  });

  test('over TLS too: malformed JSON → 4200 and still open; a frame over max_message_size → 1009', async (t) => {
    const w = await Wire.connect(server);
    cleanup(t).add(() => w.close());
    w.send('not json');
    assert.equal((await w.next('pusher:error')).data.code, 4200);
    await w.roundTrip();
    w.send({ event: 'pusher:ping', data: { pad: 'x'.repeat(12000) } });
    assert.equal((await w.waitClosed()).code, 1009);
  });

  test('plain ws:// and http:// on the TLS port are refused', async () => {
    const ws = new WebSocket(`ws://127.0.0.1:${server.port}/app/${APP.key}?protocol=7`);
    ws.on('error', () => {});
    const outcomeOfPlain = await deadline(
      new Promise((resolve) => {
        ws.once('open', () => resolve('open'));
        ws.once('unexpected-response', (_req, res) => resolve(`http ${res.statusCode}`));
        ws.once('error', () => resolve('error'));
        ws.once('close', () => resolve('closed'));
      }),
      WAIT_MS,
      'plain ws outcome',
    );
    ws.terminate();
    assert.notEqual(outcomeOfPlain, 'open');
    const plain = await fetch(`http://127.0.0.1:${server.port}/up`).then((r) => r.status, () => 'error');
    assert.notEqual(plain, 200);
  });
});
