'use strict';
// The HTTP layer's bounds against the built binary (issue 20, faults 4 and 8): every 413 is
// read by a client still writing its large body (HTTP API, bridge page POST, MCP, console),
// long-lived GET streams hold no pending slot (1,100 open MCP GET streams, then a signed
// trigger succeeds), and one client with slow bodies cannot hold another at 503
// (server.trusted_proxies: the client is the X-Forwarded-For hop its proxy added).
const { describe, test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const http = require('node:http');
const net = require('node:net');
const { startServer, freePort } = require('../lib/server');
const { sdk } = require('../lib/clients');
const { startAuthApp } = require('../lib/authapp');
const { toolmarkChannelPolicy, openPage, msg, signQuery } = require('../lib/toolmark');
const { tokenFor, INIT, PUBLIC_URL } = require('../lib/mcp');
const { uid, eventually } = require('../lib/util');

const TOKEN = `console-token-${uid()}`;
const APP = { app_id: 'hg1', key: 'hg1-key', secret: 'hg1-secret',
  toolmark: { enabled: true, mcp: { enabled: true } } };

let server, authApp;
const users = { t1: { id: 'u1', conversations: new Set() } };

before(async () => {
  const port = await freePort();
  server = await startServer({ server: { port },
    config: { server: { host: '127.0.0.1', port, public_url: PUBLIC_URL }, console: { enabled: true, token: TOKEN }, apps: [APP] } });
  authApp = await startAuthApp({ sdk: sdk(server, APP), users, deny: toolmarkChannelPolicy });
});
after(async () => {
  await authApp?.close();
  await server?.stop();
});

/**
 * One request with node's http client on a fresh connection. body: a Buffer, written whole
 * while the answer is read (as every HTTP client does). Resolves {status, text} once the
 * answer is read, rejects when the connection failed before an answer.
 */
function request(path, { method = 'POST', headers = {}, body, to = server } = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port: to.port, path: `${to.prefix || ''}${path}`, method, headers, agent: false });
    req.setTimeout(15000, () => req.destroy(new Error('timed out')));
    req.on('error', reject);
    req.on('response', (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, text: Buffer.concat(chunks).toString() }));
      res.on('error', reject);
    });
    req.end(body);
  });
}

function signedPath(path, body) {
  const q = signQuery({ method: 'POST', path: `/apps/${APP.app_id}${path}`, body, key: APP.key, secret: APP.secret });
  return `/apps/${APP.app_id}${path}?${q}`;
}

async function consoleSession() {
  const login = await request('/console/login', {
    headers: { 'Content-Type': 'application/x-www-form-urlencoded', Origin: server.url },
    body: Buffer.from(`token=${encodeURIComponent(TOKEN)}`),
  });
  assert.equal(login.status, 303, login.text);
  const cookie = String(login.headers['set-cookie']).split(';')[0];
  const sess = await request('/console/api/session', { method: 'GET', headers: { Cookie: cookie } });
  assert.equal(sess.status, 200, sess.text);
  return { Cookie: cookie, 'X-Console-CSRF': JSON.parse(sess.text).csrf, Origin: server.url, 'Content-Type': 'application/json' };
}

describe('every 413 is read by a client writing a large body', () => {
  // 5 MB: far over every route's limit (API 10 kB, bridge, MCP and console 1 MiB).
  const ROUNDS = 100;
  const SIZE = 5_000_000;
  const big = Buffer.alloc(SIZE, 'x');

  test('HTTP API: 100 signed POST /events of 5 MB in a row all read 413', async () => {
    const body = big;
    for (let i = 0; i < ROUNDS; i++) {
      const res = await request(signedPath('/events', body), { headers: { 'Content-Type': 'application/json' }, body });
      assert.equal(res.status, 413, `round ${i}: ${res.text}`);
    }
  });

  test('bridge page POST: 100 bodies of 5 MB in a row all read 413', async (t) => {
    const conv = uid('c');
    users.t1.conversations.add(conv);
    const page = await openPage(server, { authApp, token: 't1', user: 'u1', conv, app: APP });
    t.after(() => page.close());
    const ok = await page.manifest(1, [{ name: 'notes.list', llmName: 'notes__list', description: 'List notes', hints: { readOnly: true } }]);
    assert.equal(ok.status, 204, ok.text);
    const headers = { 'Content-Type': 'application/json', 'X-Socket-ID': page.socketId(), 'X-Toolmark-Token': page.token() };
    const body = Buffer.from(JSON.stringify(msg(page.clientId, 'changed', { rev: 2, pad: 'y'.repeat(SIZE) })));
    for (let i = 0; i < ROUNDS; i++) {
      const res = await request(`/toolmark/bridge/${conv}`, { headers, body });
      assert.equal(res.status, 413, `round ${i}: ${res.text}`);
    }
  });

  test('MCP: 100 POST bodies of 5 MB in a row all read 413', async () => {
    const headers = { Authorization: `Bearer ${tokenFor(APP, { conv: uid('m') })}`, 'Content-Type': 'application/json',
      Accept: 'application/json, text/event-stream' };
    const body = Buffer.from(JSON.stringify({ ...INIT, pad: 'z'.repeat(SIZE) }));
    for (let i = 0; i < ROUNDS; i++) {
      const res = await request('/toolmark/mcp', { headers, body });
      assert.equal(res.status, 413, `round ${i}: ${res.text}`);
    }
  });

  test('console: 100 trigger bodies of 5 MB in a row all read 413', async () => {
    const headers = await consoleSession();
    for (let i = 0; i < ROUNDS; i++) {
      const res = await request('/console/api/trigger', { headers, body: big });
      assert.equal(res.status, 413, `round ${i}: ${res.text}`);
    }
  });
});

/** Opens an MCP session (initialize) and then its GET stream; resolves once the stream's
 * answer head arrived, with {status, req}. */
async function mcpStream(token) {
  const init = await request('/toolmark/mcp', {
    headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream' },
    body: Buffer.from(JSON.stringify(INIT)),
  });
  assert.equal(init.status, 200, init.text);
  const session = init.headers['mcp-session-id'];
  assert.ok(session, 'no Mcp-Session-Id');
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port: server.port, path: '/toolmark/mcp', method: 'GET', agent: false,
      headers: { Authorization: `Bearer ${token}`, Accept: 'text/event-stream', 'Mcp-Session-Id': session, 'MCP-Protocol-Version': '2025-06-18' } });
    req.setTimeout(15000, () => req.destroy(new Error('timed out')));
    req.on('error', reject);
    req.on('response', (res) => {
      if (res.statusCode !== 200) res.resume();
      req.setTimeout(0);
      resolve({ status: res.statusCode, req });
    });
    req.end();
  });
}

describe('pending slots', () => {
  test('1,100 open MCP GET streams hold no slot: a signed POST /events then succeeds', async (t) => {
    const streams = [];
    t.after(() => streams.forEach((s) => s.req.destroy()));
    // 25 conversations × 44 sessions (a conversation may have 64 on a node).
    const tokens = Array.from({ length: 25 }, (_, i) => tokenFor(APP, { conv: `streams-${i}` }));
    for (let i = 0; i < 1100; i += 50) {
      const batch = await Promise.all(Array.from({ length: 50 }, (_, j) => mcpStream(tokens[(i + j) % tokens.length])));
      for (const s of batch) {
        streams.push(s);
        assert.equal(s.status, 200, `stream ${streams.length}: ${s.status}`);
      }
    }
    const body = Buffer.from(JSON.stringify({ name: 'e', channel: 'c', data: '{}' }));
    const res = await request(signedPath('/events', body), { headers: { 'Content-Type': 'application/json' }, body });
    assert.equal(res.status, 200, res.text);
  });

  test('one client with 1,100 slow bodies cannot hold another client at 503 (behind a trusted proxy)', async (t) => {
    const port = await freePort();
    const proxied = await startServer({ server: { port },
      config: { server: { host: '127.0.0.1', port, public_url: PUBLIC_URL, trusted_proxies: ['127.0.0.1'] }, apps: [APP] } });
    t.after(() => proxied.stop());
    // Client A (its proxy says 198.51.100.1) sends signed requests whose bodies never finish.
    const full = Buffer.from(JSON.stringify({ name: 'e', channel: 'c', data: 'x'.repeat(500) }));
    const socks = [];
    t.after(() => socks.forEach((s) => s.destroy()));
    const answered = [];
    for (let i = 0; i < 1100; i++) {
      const s = net.connect(port, '127.0.0.1');
      s.on('error', () => {});
      s.on('data', (d) => answered.push(String(d).split('\r\n')[0]));
      s.write(`POST ${signedPath('/events', full)} HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 198.51.100.1\r\n` +
        `Content-Type: application/json\r\nContent-Length: ${full.length}\r\n\r\n${full.subarray(0, 10)}`);
      socks.push(s);
    }
    // Most of A's requests are refused at once: it has only its share.
    await eventually(() => answered.length >= 1100 - 256, { what: 'the slow client refused beyond its share (256)' });
    assert.ok(answered.every((l) => / 503 /.test(l)), answered.find((l) => !/ 503 /.test(l)));
    // Client B (198.51.100.2) triggers as usual.
    const body = Buffer.from(JSON.stringify({ name: 'e', channel: 'c', data: '{}' }));
    for (let i = 0; i < 20; i++) {
      const res = await request(signedPath('/events', body), { to: proxied, body,
        headers: { 'Content-Type': 'application/json', 'X-Forwarded-For': '198.51.100.2' } });
      assert.equal(res.status, 200, `trigger ${i}: ${res.text}`);
    }
  });
});
