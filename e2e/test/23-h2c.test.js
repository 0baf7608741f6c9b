'use strict';
// HTTP/2 cleartext (prior knowledge) on the plain port: an agent reaches the Toolmark calls API
// over h2c (curl --http2-prior-knowledge, and Node's http2 client with several calls as streams
// of one connection) while the page (laravel-echo + pusher-js over a WebSocket on the same port)
// receives the calls and answers with fetch over HTTP/1.1 as before.
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const http2 = require('node:http2');
const { execFile, execFileSync } = require('node:child_process');
const { startServer } = require('../lib/server');
const { sdk } = require('../lib/clients');
const { startAuthApp } = require('../lib/authapp');
const { cleanup, uid } = require('../lib/util');
const { signQuery, toolmarkChannelPolicy, openPage } = require('../lib/toolmark');

const APP = { app_id: 'h2', key: 'h2-key', secret: 'h2-secret', toolmark: { enabled: true, call_timeout_ms: 8000 } };
const TOOLS = [{ name: 'notes.create', llmName: 'notes__create', description: 'Create a note', hints: {} }];
const users = { t1: { id: 'u1', conversations: new Set() } };
let server, authApp;

let haveCurl = true;
try {
  execFileSync('curl', ['--version'], { stdio: 'ignore' });
} catch {
  haveCurl = false;
}

before(async () => {
  server = await startServer({ apps: [APP] });
  authApp = await startAuthApp({ sdk: sdk(server, APP), users, deny: toolmarkChannelPolicy });
});
after(async () => {
  await authApp?.close();
  await server?.stop();
});

async function setup(t) {
  const conv = uid('c');
  users.t1.conversations.add(conv);
  const page = await openPage(server, { authApp, token: 't1', user: 'u1', conv, app: APP });
  cleanup(t).add(() => page.close());
  assert.equal((await page.manifest(1, TOOLS)).status, 204);
  return { page, conv };
}

/** The signed path and query of a call. */
function signedCall(body) {
  const path = `/apps/${APP.app_id}/toolmark/calls`;
  return `${path}?${signQuery({ method: 'POST', path, body, key: APP.key, secret: APP.secret })}`;
}

/** The page answers the next call with its input, over HTTP/1.1 fetch. */
async function answer(page) {
  const call = await page.next({ type: 'call' });
  const res = await page.result(call.id, { status: 'ok', data: call.input });
  assert.equal(res.status, 204, res.text);
}

test('curl --http2-prior-knowledge gets 200 from the calls API', { skip: !haveCurl && 'curl is not installed' }, async (t) => {
  const { page, conv } = await setup(t);
  const body = JSON.stringify({ user_id: 'u1', conversation_id: conv, tool: 'notes.create', input: { title: 'h2c' } });
  const out = new Promise((resolve, reject) => {
    execFile('curl', ['-sS', '--http2-prior-knowledge', '-o', '-', '-w', '\n%{http_version} %{http_code}',
      '-H', 'Content-Type: application/json', '--data-binary', body, `${server.url}${signedCall(body)}`],
    { timeout: 15000 }, (err, stdout, stderr) => (err ? reject(new Error(`${err.message} ${stderr}`)) : resolve(stdout)));
  });
  await answer(page);
  const lines = (await out).trim().split('\n');
  assert.equal(lines.at(-1), '2 200', `curl: ${lines.join('\n')}`);
  const res = JSON.parse(lines.slice(0, -1).join('\n'));
  assert.deepEqual(res.result, { status: 'ok', data: { title: 'h2c' } });
});

test('Node http2: concurrent calls as streams of one h2c connection', async (t) => {
  const { page, conv } = await setup(t);
  const session = http2.connect(server.url);
  cleanup(t).add(() => session.close());
  session.on('error', () => {});
  const call = (n) => new Promise((resolve, reject) => {
    const body = JSON.stringify({ user_id: 'u1', conversation_id: conv, tool: 'notes.create', input: { n } });
    const req = session.request({ ':method': 'POST', ':path': signedCall(body), 'content-type': 'application/json' });
    let status;
    const chunks = [];
    req.on('response', (h) => { status = h[':status']; });
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => resolve({ status, json: JSON.parse(Buffer.concat(chunks).toString('utf8')) }));
    req.on('error', reject);
    req.end(body);
  });
  const pending = [0, 1, 2, 3].map(call);
  for (let i = 0; i < 4; i++) await answer(page);
  const got = await Promise.all(pending);
  got.forEach((r, n) => {
    assert.equal(r.status, 200);
    assert.deepEqual(r.json.result, { status: 'ok', data: { n } });
  });
});
