'use strict';
// The official MCP inspector CLI (@modelcontextprotocol/inspector-cli, pinned) against
// {path}/toolmark/mcp: an independent client that initializes over Streamable HTTP with a
// bearer header and validates every answer against the SDK's protocol schemas. What it checks
// and what it cannot (tools that need a page) is in e2e/README.md.
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { execFile } = require('node:child_process');
const { startServer } = require('../lib/server');
const { sdk } = require('../lib/clients');
const { startAuthApp } = require('../lib/authapp');
const { cleanup, uid } = require('../lib/util');
const { toolmarkChannelPolicy, openPage } = require('../lib/toolmark');
const { tokenFor, respond, PUBLIC_URL, resourceOf } = require('../lib/mcp');

const BIN = path.resolve(__dirname, '../node_modules/.bin/mcp-inspector-cli');
const APP = { app_id: 'insp1', key: 'insp1-key', secret: 'insp1-secret', toolmark: { enabled: true, mcp: { enabled: true } } };
let server, authApp;
const users = { t1: { id: 'u1', conversations: new Set() } };

before(async () => {
  server = await startServer({ apps: [APP], server: { path: '/ws', public_url: PUBLIC_URL } });
  authApp = await startAuthApp({ sdk: sdk(server, APP), users, deny: toolmarkChannelPolicy });
});
after(async () => {
  await authApp?.close();
  await server?.stop();
});

/**
 * Runs the inspector CLI in --cli mode; resolves {code, stdout, stderr}. It runs in e2e/test:
 * inspector-cli 1.0.3 checks fs.existsSync('../package.json') against the working directory
 * but imports it relative to its own module, so it needs a package.json one level up.
 */
function inspector(args, token) {
  const all = ['--cli', `${server.url}/toolmark/mcp`, '--transport', 'http', ...args];
  if (token) all.push('--header', `Authorization: Bearer ${token}`);
  return new Promise((resolve) => {
    execFile(BIN, all, { timeout: 60000, cwd: __dirname }, (err, stdout, stderr) => resolve({ code: err ? err.code ?? 1 : 0, stdout, stderr }));
  });
}

test('inspector CLI: initialize and tools/list with no page connected (an empty list)', async () => {
  const res = await inspector(['--method', 'tools/list'], tokenFor(APP, { conv: uid('c'), aud: resourceOf(PUBLIC_URL, '/ws') }));
  assert.equal(res.code, 0, res.stderr);
  assert.deepEqual(JSON.parse(res.stdout), { tools: [], ttlMs: 0, cacheScope: 'private' });
});

test('inspector CLI: without a token the connection is refused', async () => {
  const res = await inspector(['--method', 'tools/list']);
  assert.notEqual(res.code, 0);
  assert.match(res.stderr, /Missing bearer token/);
});

test('inspector CLI: tools/list and tools/call against a simulated page (server.path prefix)', async (t) => {
  const conv = uid('c');
  users.t1.conversations.add(conv);
  const page = await openPage(server, { authApp, token: 't1', user: 'u1', conv, app: APP });
  cleanup(t).add(() => page.close());
  const tools = [{ name: 'greet.say', llmName: 'greet__say', description: 'Say hello', hints: { readOnly: true } }];
  assert.equal((await page.manifest(1, tools)).status, 204);
  const stop = respond(page, (m) => (m.type === 'describe'
    ? { status: 'ok', data: { inputSchema: { type: 'object', properties: { name: { type: 'string' } } } } }
    : { status: 'ok', data: `hello ${m.input.name}` }));
  cleanup(t).add(() => stop());
  const token = tokenFor(APP, { conv, aud: resourceOf(PUBLIC_URL, '/ws') });
  const list = await inspector(['--method', 'tools/list'], token);
  assert.equal(list.code, 0, list.stderr);
  const listed = JSON.parse(list.stdout).tools;
  assert.deepEqual(listed.map((x) => x.name), ['greet__say']);
  assert.deepEqual(listed[0].inputSchema, { type: 'object', properties: { name: { type: 'string' } } });
  const call = await inspector(['--method', 'tools/call', '--tool-name', 'greet__say', '--tool-arg', 'name=Ada'], token);
  assert.equal(call.code, 0, call.stderr);
  const out = JSON.parse(call.stdout);
  assert.deepEqual(out.structuredContent, { status: 'ok', data: 'hello Ada' });
  const [c] = page.messages().filter((m) => m.type === 'call');
  assert.equal(c.tool, 'greet.say');
  assert.deepEqual(c.input, { name: 'Ada' });
});
