'use strict';
// server.tls.cert/key are re-read on SIGHUP: new handshakes get the new certificate, sockets
// already open stay open, and a broken new pair keeps the old certificate (logged as an
// error). Without TLS a SIGHUP re-reads only the apps (it used to kill the process).
const { describe, test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const tls = require('node:tls');
const { startServer } = require('../lib/server');
const { Wire } = require('../lib/wire');
const { pusherClient, whenConnected } = require('../lib/clients');
const { cleanup, eventually, deadline, WAIT_MS } = require('../lib/util');

// Throwaway self-signed certificates; this file's process accepts them.
process.env.NODE_TLS_REJECT_UNAUTHORIZED = '0';

const APP = { app_id: 'hup', key: 'hup-key', secret: 'hup-secret' };

/** Writes a fresh self-signed pair for cn to certFile/keyFile (openssl, as an operator would). */
function issue(cn, certFile, keyFile) {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'reverbgo-cert-'));
  const c = path.join(tmp, 'c.pem');
  const k = path.join(tmp, 'k.pem');
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
    '-keyout', k, '-out', c, '-days', '2', '-subj', `/CN=${cn}`, '-addext', 'subjectAltName=IP:127.0.0.1'], { stdio: 'ignore' });
  // Replace by rename, as certbot and friends do, so the server never reads half a file.
  fs.renameSync(k, keyFile);
  fs.renameSync(c, certFile);
  fs.rmSync(tmp, { recursive: true, force: true });
}

/** The CN of the certificate a fresh TLS handshake with the server gets. */
function presentedCN(server) {
  return deadline(new Promise((resolve, reject) => {
    const s = tls.connect({ host: '127.0.0.1', port: server.port, rejectUnauthorized: false, ALPNProtocols: ['http/1.1'] }, () => {
      const cn = s.getPeerCertificate().subject.CN;
      s.end();
      resolve(cn);
    });
    s.on('error', reject);
  }), WAIT_MS, 'TLS handshake');
}

describe('TLS certificate reload on SIGHUP', () => {
  let dir;
  let cert;
  let key;
  let server;
  before(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'reverbgo-hup-'));
    cert = path.join(dir, 'cert.pem');
    key = path.join(dir, 'key.pem');
    issue('cert-a.test', cert, key);
    server = await startServer({ apps: [APP], server: { tls: { cert, key } } });
  });
  after(async () => {
    await server.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  test('new connections see cert B after SIGHUP while the socket opened under cert A stays open', async (t) => {
    const bag = cleanup(t);
    assert.equal(await presentedCN(server), 'cert-a.test');
    const old = await Wire.connect(server);
    bag.add(() => old.close());
    assert.equal(old.ws._socket.getPeerCertificate().subject.CN, 'cert-a.test');

    issue('cert-b.test', cert, key);
    server.proc.kill('SIGHUP');
    await eventually(() => /TLS certificate reloaded/.test(server.logs()), { what: 'reload logged' });
    assert.equal(await presentedCN(server), 'cert-b.test');

    // The old socket is still open and served.
    old.send({ event: 'pusher:ping', data: {} });
    await old.next('pusher:pong');
    assert.equal(old.closeCode, null);
    // And a real client connects over the new certificate.
    const p = pusherClient(server);
    bag.add(() => p.disconnect());
    await whenConnected(p);
    assert.equal(server.proc.exitCode, null);
  });

  test('a broken new pair keeps the current certificate and logs an error', async (t) => {
    const bag = cleanup(t);
    const before = await presentedCN(server);
    const w = await Wire.connect(server);
    bag.add(() => w.close());
    fs.writeFileSync(cert, '-----BEGIN CERTIFICATE-----\nnot a certificate\n');
    server.proc.kill('SIGHUP');
    await eventually(() => /TLS certificate reload failed/.test(server.logs()), { what: 'reload error logged' });
    assert.match(server.logs(), /"level":"ERROR"[^\n]*TLS certificate reload failed/);
    assert.equal(await presentedCN(server), before);
    w.send({ event: 'pusher:ping', data: {} });
    await w.next('pusher:pong');
    // Fixing the files and signalling again picks the new pair up.
    issue('cert-c.test', cert, key);
    server.proc.kill('SIGHUP');
    await eventually(async () => (await presentedCN(server)) === 'cert-c.test', { what: 'cert C served' });
  });
});

test('without TLS, SIGHUP leaves the server running', async (t) => {
  const server = await startServer({ apps: [APP] });
  cleanup(t).add(() => server.stop());
  const w = await Wire.connect(server);
  cleanup(t).add(() => w.close());
  server.proc.kill('SIGHUP');
  // SIGHUP re-reads the apps (the same file: nothing changes) and the socket stays open.
  await eventually(() => /config reloaded/.test(server.logs()), { what: 'SIGHUP logged' });
  w.send({ event: 'pusher:ping', data: {} });
  await w.next('pusher:pong');
  assert.equal((await fetch(`${server.url}/up`)).status, 200);
});
