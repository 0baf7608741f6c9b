'use strict';
// The one tool-call pipeline (resolve, authorize, validate, rate limit, dry run, execute,
// audit) end to end on both surfaces: the signed calls API and MCP (the official TypeScript
// client, plus raw requests for the HTTP status and headers), against the built binary with a
// simulated page (real laravel-echo + pusher-js) answering describes and calls.
const { describe, test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { startServer } = require('../lib/server');
const { sdk } = require('../lib/clients');
const { startAuthApp } = require('../lib/authapp');
const { cleanup, uid, quiet } = require('../lib/util');
const { agent, toolmarkChannelPolicy, openPage } = require('../lib/toolmark');
const { tokenFor, mcpConnect, mcpRaw, respond, until, PUBLIC_URL } = require('../lib/mcp');

const TOOLS = [
  { name: 'notes.create', llmName: 'notes__create', description: 'Create a note', hints: { consequential: true } },
  { name: 'notes.list', llmName: 'notes__list', description: 'List notes', hints: { readOnly: true } },
  { name: 'secrets.save', llmName: 'secrets__save', description: 'Save a secret', hints: { destructive: true } },
];
const SCHEMA = { type: 'object', properties: { title: { type: 'string' } }, required: ['title'] };

let server, authApp, APP, APP_DF, APP_OFF;
const users = { t1: { id: 'u1', conversations: new Set() } };

before(async () => {
  const app = (id, validate) => ({ app_id: id, key: `${id}-key`, secret: `${id}-secret`,
    toolmark: { enabled: true, call_timeout_ms: 3000, ...(validate ? { validate } : {}), mcp: { enabled: true } } });
  APP = app('pl1'); // validate: the default (known)
  APP_DF = app('pl2', 'describe_first');
  APP_OFF = app('pl3', 'off');
  // Tokens name {public_url}/toolmark/mcp in aud (lib/mcp.js tokenFor).
  server = await startServer({ apps: [APP, APP_DF, APP_OFF], server: { public_url: PUBLIC_URL } });
  authApp = await startAuthApp({ sdk: sdk(server, APP), users, deny: toolmarkChannelPolicy });
});
after(async () => {
  await authApp?.close();
  await server?.stop();
});

/** A page of a fresh conversation that posted TOOLS; describes get SCHEMA, calls get ok. */
async function setup(t, app = APP) {
  const conv = uid('c');
  users.t1.conversations.add(conv);
  const auth = app === APP ? authApp : await startAuthApp({ sdk: sdk(server, app), users, deny: toolmarkChannelPolicy });
  const bag = cleanup(t);
  if (auth !== authApp) bag.add(() => auth.close());
  const page = await openPage(server, { authApp: auth, token: 't1', user: 'u1', conv, app });
  bag.add(() => page.close());
  assert.equal((await page.manifest(1, TOOLS)).status, 204);
  const stop = respond(page, (m) => (m.type === 'describe'
    ? { status: 'ok', data: { inputSchema: SCHEMA } }
    : { status: 'ok', data: { done: m.tool } }));
  bag.add(() => stop());
  return { page, conv, tm: agent(server, app) };
}

const sent = (page, type) => page.messages().filter((m) => m.type === type);
const body = (conv, extra) => ({ user_id: 'u1', conversation_id: conv, tool: 'notes.create', input: { title: 'x' }, ...extra });

/** The audit lines ("toolmark call") the server wrote, parsed. */
function auditLines() {
  return server.logs().split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l)).filter((r) => r.msg === 'toolmark call');
}

describe('validate', () => {
  test('known (the default): after a describe, a mismatching input is answered invalid at once and the page gets no call', async (t) => {
    const { page, conv, tm } = await setup(t);
    assert.equal((await tm.describe({ user_id: 'u1', conversation_id: conv, tool: 'notes.create' })).body.result.status, 'ok');
    const bad = await tm.call(body(conv, { input: { title: 5 } }));
    assert.equal(bad.status, 200, bad.text);
    assert.equal(bad.body.result.status, 'invalid');
    assert.equal(bad.body.result.issues.length, 1);
    assert.equal(bad.body.result.issues[0].path, '/title');
    assert.equal(typeof bad.body.result.issues[0].message, 'string');
    assert.deepEqual(Object.keys(bad.body.result.issues[0]).sort(), ['message', 'path']);
    const missing = await tm.call(body(conv, { input: {} }));
    assert.deepEqual(missing.body.result.issues.map((i) => i.path), ['/title']);
    await quiet();
    assert.equal(sent(page, 'call').length, 0, 'the page saw no call');
    const good = await tm.call(body(conv));
    assert.deepEqual(good.body.result, { status: 'ok', data: { done: 'notes.create' } });
    assert.equal(sent(page, 'call').length, 1);
  });

  test('describe_first: the first call of a tool describes it, then validates; the page gets the describe only', async (t) => {
    const { page, conv, tm } = await setup(t, APP_DF);
    const bad = await tm.call(body(conv, { input: { title: [1] } }));
    assert.equal(bad.body.result.status, 'invalid', bad.text);
    assert.equal(bad.body.result.issues[0].path, '/title');
    assert.equal(sent(page, 'describe').length, 1);
    assert.equal(sent(page, 'call').length, 0);
    // Described once per manifest.
    assert.equal((await tm.call(body(conv))).body.result.status, 'ok');
    assert.equal(sent(page, 'describe').length, 1);
  });

  test('off: the input reaches the page unchecked, as before', async (t) => {
    const { page, conv, tm } = await setup(t, APP_OFF);
    await tm.describe({ user_id: 'u1', conversation_id: conv, tool: 'notes.create' });
    assert.equal((await tm.call(body(conv, { input: { title: 5 } }))).body.result.status, 'ok');
    assert.deepEqual(sent(page, 'call')[0].input, { title: 5 });
  });

  test('MCP: the listed schema is enforced; the page gets no call', async (t) => {
    const { page, conv } = await setup(t);
    const c = await mcpConnect(server, tokenFor(APP, { conv }));
    cleanup(t).add(() => c.close());
    await c.client.listTools();
    const res = await c.client.callTool({ name: 'notes__create', arguments: { title: 5 } });
    assert.equal(res.isError, true);
    assert.equal(res.structuredContent.status, 'invalid');
    assert.equal(res.structuredContent.issues[0].path, '/title');
    await quiet();
    assert.equal(sent(page, 'call').length, 0);
  });
});

describe('authorize', () => {
  test('calls API: scopes toolmark:read calls only readOnly tools, tools globs narrow by name; refusals never reach the page', async (t) => {
    const { page, conv, tm } = await setup(t);
    const read = { scopes: ['toolmark:read'] };
    for (const tool of ['notes.create', 'secrets.save']) {
      const r = await tm.call(body(conv, { tool, ...read }));
      assert.equal(r.body.result.status, 'refused', r.text);
      assert.equal(r.body.result.code, 'forbidden');
      assert.equal(typeof r.body.result.message, 'string');
    }
    const globbed = await tm.call(body(conv, { tool: 'secrets.save', tools: ['notes.*'] }));
    assert.equal(globbed.body.result.code, 'forbidden');
    await quiet();
    assert.equal(sent(page, 'call').length, 0);
    assert.equal((await tm.call(body(conv, { tool: 'notes.list', ...read, tools: ['notes.*'] }))).body.result.status, 'ok');
    assert.equal((await tm.call(body(conv, { scopes: ['toolmark:write'] }))).body.result.status, 'ok');
    assert.equal((await tm.call(body(conv, { scopes: ['root'] }))).status, 422);
  });

  test('MCP: a toolmark:read token lists and calls only readOnly tools; the others get 403 with the step-up challenge', async (t) => {
    const { page, conv } = await setup(t);
    const token = tokenFor(APP, { conv, scope: 'toolmark:read' });
    const c = await mcpConnect(server, token);
    cleanup(t).add(() => c.close());
    const { tools } = await c.client.listTools();
    assert.deepEqual(tools.map((x) => x.name), ['notes__list']);
    assert.deepEqual(sent(page, 'describe').map((m) => m.tool), ['notes.list'], 'no describe of a tool the token may not call');
    const ok = await c.client.callTool({ name: 'notes__list', arguments: { title: 'x' } });
    assert.equal(ok.isError, undefined);
    // The TypeScript client surfaces the 403 as an error.
    await assert.rejects(c.client.callTool({ name: 'notes__create', arguments: { title: 'x' } }));
    // The same request raw, on the client's session: 403 and the challenge.
    const raw = await mcpRaw(server, { authorization: `Bearer ${token}`, session: c.transport.sessionId,
      body: { jsonrpc: '2.0', id: 9, method: 'tools/call', params: { name: 'notes__create', arguments: { title: 'x' } } } });
    assert.equal(raw.status, 403, raw.text);
    assert.equal(raw.headers.get('www-authenticate'), 'Bearer error="insufficient_scope", scope="toolmark:write"');
    assert.match(JSON.parse(raw.text).error, /needs the toolmark:write scope/);
    await quiet();
    assert.deepEqual(sent(page, 'call').map((m) => m.tool), ['notes.list']);
  });
});

describe('dry run', () => {
  test('calls API dry_run and MCP _meta toolmark/dryRun answer the plan and never reach the page', async (t) => {
    const { page, conv, tm } = await setup(t);
    const r = await tm.call(body(conv, { dry_run: true }));
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.body.result, { status: 'ok', data: { dryRun: true, tool: 'notes.create', hints: { consequential: true }, wouldConfirm: true } });
    assert.deepEqual(r.body.hints, { consequential: true });
    const ro = await tm.call(body(conv, { tool: 'notes.list', dry_run: true }));
    assert.equal(ro.body.result.data.wouldConfirm, false);
    // The steps before the stop still refuse.
    assert.equal((await tm.call(body(conv, { dry_run: true, scopes: ['toolmark:read'] }))).body.result.code, 'forbidden');
    assert.equal((await tm.call(body(conv, { tool: 'nope', dry_run: true }))).body.result.code, 'unknown_tool');

    const c = await mcpConnect(server, tokenFor(APP, { conv }));
    cleanup(t).add(() => c.close());
    const res = await c.client.callTool({ name: 'secrets__save', arguments: { title: 'x' }, _meta: { 'toolmark/dryRun': true } });
    assert.equal(res.isError, undefined);
    assert.deepEqual(res.structuredContent, { status: 'ok', data: { dryRun: true, tool: 'secrets.save', hints: { destructive: true }, wouldConfirm: true } });
    await quiet();
    assert.equal(sent(page, 'call').length, 0);
    await until(() => auditLines().some((l) => l.conversation === conv && l.status === 'dry_run' && l.dry_run === true && l.surface === 'mcp'), 'the dry run audit line');
  });
});

describe('audit', () => {
  test('one line per call on both surfaces: surface, app, user, conversation, subject, tool, status, latency and the input keys, never a value', async (t) => {
    const { conv, tm } = await setup(t);
    const input = { title: 'VALUE-A1', password: 'VALUE-A2', api_key: 'VALUE-A3', nested: { token: 'VALUE-A4' } };
    const r = await tm.call(body(conv, { input }));
    const c = await mcpConnect(server, tokenFor(APP, { conv }));
    cleanup(t).add(() => c.close());
    await c.client.callTool({ name: 'notes__create', arguments: { ...input, title: 'VALUE-M1', Authorization: 'VALUE-M2' } });
    await c.client.callTool({ name: 'notes__list', arguments: { title: 'VALUE-M3', session_cookie: 'VALUE-M4' }, _meta: { 'toolmark/dryRun': true } });
    const forbidden = await tm.call(body(conv, { input: { title: 'VALUE-F1', secret: 'VALUE-F2' }, scopes: [] }));
    const mine = () => auditLines().filter((l) => l.conversation === conv && l.kind === 'call');
    await until(() => mine().length >= 4, 'four audit lines'); // the audit log leaves in batches
    const lines = mine();
    assert.doesNotMatch(server.logs(), /VALUE-/, 'an input value reached the log');
    const api = lines.find((l) => l.call_id === r.body.id);
    assert.deepEqual(
      { surface: api.surface, app: api.app, user: api.user, subject: api.subject, tool: api.tool, status: api.status, keys: api.input_keys },
      { surface: 'api', app: 'pl1', user: 'u1', subject: '', tool: 'notes.create', status: 'ok', keys: 'title,[redacted],[redacted],nested' });
    assert.equal(typeof api.latency_ms, 'number');
    const mcp = lines.filter((l) => l.surface === 'mcp');
    assert.deepEqual(mcp.map((l) => [l.subject, l.tool, l.status, l.input_keys]), [
      ['u1', 'notes.create', 'ok', 'title,[redacted],[redacted],nested,[redacted]'],
      ['u1', 'notes.list', 'dry_run', 'title,[redacted]'],
    ]);
    const refused = lines.find((l) => l.call_id === forbidden.body.id);
    assert.deepEqual([refused.status, refused.reason, refused.input_keys], ['refused', 'forbidden', 'title,[redacted]']);
  });
});
