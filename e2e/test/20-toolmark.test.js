'use strict';
// The embedded Toolmark bridge end to end: a simulated page (real laravel-echo + pusher-js on
// private-toolmark.{user}.{conversation}, POSTing protocol messages with X-Socket-ID like
// @toolmark/core's echoTransport) and an agent using the signed app API (/apps/{id}/toolmark/*),
// plus the toolmark_confirmed webhook and the /toolmark/messages forwarding alternative.
const { describe, test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { startServer } = require('../lib/server');
const { sdk, echoClient, state } = require('../lib/clients');
const { startAuthApp } = require('../lib/authapp');
const { Wire } = require('../lib/wire');
const { cleanup, uid, eventually, quiet, WAIT_MS } = require('../lib/util');
const { agent, hmac, toolmarkChannelPolicy, pagePost, openPage, newClientId, msg, startHookReceiver } = require('../lib/toolmark');

const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
const ORIGIN = 'https://app.example.test';
const TOOLS = [
  { name: 'notes.create', llmName: 'notes__create', title: 'Create note', description: 'Create a note',
    hints: { consequential: true, futureHint: 'x' }, futureField: { a: 1 } },
  { name: 'notes.list', llmName: 'notes__list', description: 'List notes', hints: { readOnly: true }, mode: 'stepwise' },
];
// What the server keeps of TOOLS: known fields and known hints only.
const STORED_TOOLS = [
  { name: 'notes.create', llmName: 'notes__create', title: 'Create note', description: 'Create a note', hints: { consequential: true } },
  { name: 'notes.list', llmName: 'notes__list', description: 'List notes', hints: { readOnly: true }, mode: 'stepwise' },
];
const OK = { status: 'ok', data: { id: 7, title: 'Hi' } };

let server, hook, authApp, authApp2, tm, APP, APP2;
const users = {
  t1: { id: 'u1', conversations: new Set() },
  t2: { id: 'u2', conversations: new Set() },
};

before(async () => {
  hook = await startHookReceiver();
  APP = { app_id: 'tm1', key: 'tm1-key', secret: 'tm1-secret', allowed_origins: ['app.example.test', 'https://*.tenant.example.test:8443'],
    toolmark: { enabled: true, call_timeout_ms: 8000, max_timeout_ms: 600000 },
    webhooks: [{ url: hook.url, event_types: ['toolmark_confirmed'] }] };
  APP2 = { app_id: 'tm2', key: 'tm2-key', secret: 'tm2-secret', toolmark: { enabled: false } };
  server = await startServer({ apps: [APP, APP2] });
  authApp = await startAuthApp({ sdk: sdk(server, APP), users, deny: toolmarkChannelPolicy });
  authApp2 = await startAuthApp({ sdk: sdk(server, APP2), users, deny: toolmarkChannelPolicy });
  tm = agent(server, APP);
});
after(async () => {
  await authApp?.close();
  await authApp2?.close();
  await server?.stop();
  await hook?.close();
});

/** A fresh conversation owned by the token's user, with a page that posted its manifest. */
async function setup(t, { token = 't1', conv = uid('c'), rev = 1, tools = TOOLS, app = APP, auth = authApp } = {}) {
  users[token].conversations.add(conv);
  const page = await openPage(server, { authApp: auth, token, user: users[token].id, conv, app });
  cleanup(t).add(() => page.close());
  if (tools) {
    const res = await page.manifest(rev, tools);
    assert.equal(res.status, 204, `manifest: ${res.text}`);
  }
  return { page, conv };
}

const callBody = (conv, extra = {}) => ({ user_id: 'u1', conversation_id: conv, tool: 'notes.create', input: { title: 'Hi' }, ...extra });

describe('call round trip', () => {
  test('ok result with the tool hints; the call message the page gets is exact', async (t) => {
    const { page, conv } = await setup(t);
    const wire = await Wire.connect(server, { app: APP }); // a raw listener: the exact frame
    cleanup(t).add(() => wire.close());
    assert.equal((await wire.authSubscribe(`private-toolmark.u1.${conv}`)).event, 'pusher_internal:subscription_succeeded');
    const pending = tm.call(callBody(conv, { rev: 1, tool_use_id: 'toolu_1' }));
    const call = await page.next({ type: 'call' });
    assert.match(call.id, UUID_V4);
    assert.deepEqual(call, { protocol: 1, type: 'call', clientId: page.clientId, id: call.id, rev: 1, tool: 'notes.create', input: { title: 'Hi' } });
    const frame = await wire.next({ event: 'toolmark.message' });
    assert.equal(frame.channel, `private-toolmark.u1.${conv}`);
    assert.ok(frame.dataIsString, 'data is a JSON string');
    assert.deepEqual(frame.data, { message: call });
    assert.equal((await page.result(call.id, OK)).status, 204);
    const res = await pending;
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(res.body, { id: call.id, result: OK, hints: { consequential: true } });
    const dup = await page.result(call.id, OK);
    assert.equal(dup.status, 409, dup.text);
    assert.equal((await page.result('no-such-call', OK)).status, 404);
  });

  test('a call without input or rev reaches the page with input null; results pass canonicalized', async (t) => {
    const { page, conv } = await setup(t);
    const pending = tm.call({ user_id: 'u1', conversation_id: conv, tool: 'notes.list' });
    const call = await page.next({ type: 'call' });
    assert.deepEqual(call, { protocol: 1, type: 'call', clientId: page.clientId, id: call.id, tool: 'notes.list', input: null });
    const invalid = { status: 'invalid', issues: [{ path: 'title', message: 'Required' }] };
    assert.equal((await page.post(`{"result":${JSON.stringify(invalid)}, "id":"${call.id}","type":"result","clientId":"${page.clientId}","protocol":1}`)).status, 204);
    assert.deepEqual((await pending).body, { id: call.id, result: invalid, hints: { readOnly: true } });
  });

  test('a tool missing from the manifest is refused unknown_tool at once (with the current rev), never broadcast; an oversized call fails at once', async (t) => {
    const { page, conv } = await setup(t);
    const unknown = await tm.call(callBody(conv, { tool: 'not.in.manifest' }));
    assert.equal(unknown.status, 200, unknown.text);
    assert.deepEqual(unknown.body.result, { status: 'refused', code: 'unknown_tool', message: 'Unknown tool: not.in.manifest', rev: 1 });
    assert.deepEqual(unknown.body.hints, {});
    // The app's max_message_size (default 10000) bounds the broadcast: an error result, not a timeout.
    const started = Date.now();
    const big = await tm.call(callBody(conv, { input: 'x'.repeat(11000) }));
    assert.ok(Date.now() - started < 1000, `took ${Date.now() - started} ms`);
    assert.equal(big.body.result.status, 'error');
    assert.match(big.body.result.message, /max_message_size/);
    assert.deepEqual(big.body.hints, { consequential: true });
    await quiet();
    assert.equal(page.messages().filter((m) => m.type === 'call').length, 0, 'neither the unknown nor the oversized call is broadcast');
  });

  test('GET manifest returns only the known fields; unknown conversation → 404', async (t) => {
    const { page, conv } = await setup(t, { rev: 3 });
    const res = await tm.manifest('u1', conv);
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(res.body, { clientId: page.clientId, rev: 3, tools: STORED_TOOLS });
    assert.equal((await tm.manifest('u1', uid('none'))).status, 404);
    assert.equal((await tm.manifest('u1', 'bad.conv')).status, 422);
  });

  test('describe round trip; needs_confirmation cannot answer a describe (422)', async (t) => {
    const { page, conv } = await setup(t);
    const pending = tm.describe({ user_id: 'u1', conversation_id: conv, tool: 'notes.create' });
    const d = await page.next({ type: 'describe' });
    assert.match(d.id, UUID_V4);
    assert.deepEqual(d, { protocol: 1, type: 'describe', clientId: page.clientId, id: d.id, tool: 'notes.create' });
    const nc = await page.result(d.id, { status: 'needs_confirmation', confirmId: uid('cf'), summary: 'x' });
    assert.equal(nc.status, 422, nc.text);
    const schema = { status: 'ok', data: { inputSchema: { type: 'object', properties: { title: { type: 'string' } } } } };
    assert.equal((await page.result(d.id, schema)).status, 204);
    const res = await pending;
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(res.body, { id: d.id, result: schema, hints: { consequential: true } });
  });

  test('no page connected → error result at once', async () => {
    const conv = uid('c');
    const started = Date.now();
    const res = await tm.call(callBody(conv, { timeout_ms: 5000 }));
    assert.ok(Date.now() - started < 1000, `took ${Date.now() - started} ms`);
    assert.equal(res.status, 200, res.text);
    assert.match(res.body.id, UUID_V4);
    assert.deepEqual(res.body, { id: res.body.id, result: { status: 'error', message: 'No page is connected' }, hints: {} });
    const d = await tm.describe({ user_id: 'u1', conversation_id: conv, tool: 'notes.list' });
    assert.deepEqual(d.body.result, { status: 'error', message: 'No page is connected' });
  });

  test('a page that left its channel or closed its tab: 403 / 401; calls then get "No page is connected" at once', async (t) => {
    const { page, conv } = await setup(t);
    const socketId = page.socketId();
    const m = msg(page.clientId, 'changed', { rev: 2 });
    page.echo.leave(`toolmark.u1.${conv}`);
    await eventually(async () => (await page.post(m)).status === 403, { what: '403 after leaving the channel' });
    page.close();
    await eventually(async () => (await pagePost(server, conv, m, { 'X-Socket-ID': socketId })).status === 401, { what: '401 after disconnect' });
    // Contract: "No page connected → result {status:error, message:'No page is connected'} at once".
    const started = Date.now();
    const res = await tm.call(callBody(conv, { timeout_ms: 2000 }));
    assert.deepEqual(res.body.result, { status: 'error', message: 'No page is connected' },
      `after ${Date.now() - started} ms: ${res.text} (the stored manifest outlives the page, so the call waits for its deadline)`);
    assert.ok(Date.now() - started < 1000, `took ${Date.now() - started} ms`);
  });
});

describe('timeout', () => {
  test('the agent gets {"status":"timeout"} after timeout_ms, the page gets cancel, a late result 409', async (t) => {
    const { page, conv } = await setup(t);
    const started = Date.now();
    const pending = tm.call(callBody(conv, { tool: 'notes.list', timeout_ms: 400 }));
    const call = await page.next({ type: 'call' }); // the page ignores it
    const res = await pending;
    const took = Date.now() - started;
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(res.body, { id: call.id, result: { status: 'timeout' }, hints: { readOnly: true } });
    assert.ok(took >= 395 && took < 400 + WAIT_MS, `took ${took} ms`);
    const cancel = await page.next({ type: 'cancel', id: call.id });
    assert.deepEqual(cancel, { protocol: 1, type: 'cancel', clientId: page.clientId, id: call.id });
    const late = await page.result(call.id, OK);
    assert.ok([409, 410].includes(late.status), `late result: ${late.status} ${late.text}`);
  });

  test('an agent that hangs up settles the call as timed out: the page gets cancel, its result 409', async (t) => {
    const { page, conv } = await setup(t);
    const gone = tm.call(callBody(conv), { ms: 1000 }).then(() => 'answered', (err) => err.name);
    const call = await page.next({ type: 'call' });
    assert.equal(await gone, 'TimeoutError');
    await page.next({ type: 'cancel', id: call.id });
    assert.equal((await page.result(call.id, OK)).status, 409);
  });

  test('concurrent calls answered out of order each get their own result', async (t) => {
    const { page, conv } = await setup(t);
    const pending = [0, 1, 2, 3, 4].map((n) => tm.call(callBody(conv, { input: { n } })));
    const calls = [];
    for (let i = 0; i < 5; i++) calls.push(await page.next({ type: 'call' }));
    for (const c of calls.reverse()) assert.equal((await page.result(c.id, { status: 'ok', data: c.input })).status, 204);
    const results = await Promise.all(pending);
    results.forEach((r, n) => assert.deepEqual(r.body.result, { status: 'ok', data: { n } }));
    assert.equal(new Set(results.map((r) => r.body.id)).size, 5);
  });

  test('timeout_ms outside 1..max_timeout_ms and malformed agent requests → 422', async () => {
    const conv = uid('c');
    for (const body of [
      callBody(conv, { timeout_ms: 600001 }), callBody(conv, { timeout_ms: 0 }), callBody(conv, { timeout_ms: 1.5 }),
      callBody(conv, { tool: 'bad tool' }), callBody(conv, { user_id: 'a.b' }), { conversation_id: conv, tool: 'x' },
    ]) {
      const res = await tm.call(body);
      assert.equal(res.status, 422, `${JSON.stringify(body)} → ${res.status} ${res.text}`);
    }
    assert.equal((await tm.request('POST', '/calls', { body: 'not json' })).status, 422);
  });
});

describe('deferred confirmation', () => {
  test('needs_confirmation, then confirmed → signed toolmark_confirmed webhook (retried); duplicate 409', async (t) => {
    const { page, conv } = await setup(t);
    const confirmId = uid('cf-');
    const pending = tm.call(callBody(conv, { tool_use_id: 'toolu_c1' }));
    const call = await page.next({ type: 'call' });
    const needs = { status: 'needs_confirmation', confirmId, summary: 'Create note "Hi"', changes: [{ path: 'title', before: '', after: 'Hi' }, { path: 'pin' }] };
    assert.equal((await page.result(call.id, needs)).status, 204);
    const res = await pending;
    assert.deepEqual(res.body, { id: call.id, result: needs, hints: { consequential: true } });

    const done = { status: 'ok', data: { id: 9 } };
    assert.equal((await page.confirmed(uid('cf-'), done)).status, 404, 'unknown confirmId');
    assert.equal((await page.confirmed(confirmId, done, { clientId: newClientId() })).status, 403, 'other clientId');
    assert.equal(hook.confirmations(confirmId).length, 0);

    hook.failNext = 1; // the first delivery fails: the batch must be retried with the same body
    assert.equal((await page.confirmed(confirmId, done)).status, 204);
    const [first, second] = await eventually(() => {
      const hits = hook.confirmations(confirmId);
      return hits.length >= 2 && hits;
    }, { ms: WAIT_MS, what: 'webhook delivery and its retry' });
    assert.equal(first.answered, 503);
    assert.equal(second.answered, 200);
    assert.equal(second.text, first.text, 'a retry resends the same body');
    assert.equal(second.method, 'POST');
    assert.match(second.headers['content-type'], /^application\/json/);
    assert.equal(second.headers['x-pusher-key'], APP.key);
    assert.equal(second.headers['x-pusher-signature'], hmac(APP.secret, second.text));
    assert.deepEqual(Object.keys(second.json).sort(), ['events', 'time_ms']);
    assert.ok(Number.isInteger(second.json.time_ms) && Math.abs(Date.now() - second.json.time_ms) < 60000);
    assert.deepEqual(second.json.events.filter((e) => e.confirm_id === confirmId), [{
      name: 'toolmark_confirmed', user_id: 'u1', conversation_id: conv, call_id: call.id,
      tool_use_id: 'toolu_c1', confirm_id: confirmId, result: done,
    }]);

    const dup = await page.confirmed(confirmId, done);
    assert.equal(dup.status, 409, dup.text);
    await quiet();
    assert.equal(hook.confirmations(confirmId).length, 2, 'no delivery for the duplicate and none after the 2xx');
    for (const h of hook.hits) assert.ok(h.json.events.every((e) => e.name === 'toolmark_confirmed'), 'event_types filter');
  });

  test('a confirmId already bound → 409; tool_use_id absent → null in the webhook', async (t) => {
    const { page, conv } = await setup(t);
    const confirmId = uid('cf-');
    const p1 = tm.call(callBody(conv));
    const c1 = await page.next({ type: 'call' });
    assert.equal((await page.result(c1.id, { status: 'needs_confirmation', confirmId, summary: 'a' })).status, 204);
    await p1;
    const p2 = tm.call(callBody(conv));
    const c2 = await page.next({ type: 'call' });
    const again = await page.result(c2.id, { status: 'needs_confirmation', confirmId, summary: 'b' });
    assert.equal(again.status, 409, again.text);
    assert.equal((await page.result(c2.id, { status: 'cancelled', by: 'operator' })).status, 204, 'the call is still open');
    assert.deepEqual((await p2).body.result, { status: 'cancelled', by: 'operator' });
    assert.equal((await page.confirmed(confirmId, { status: 'error', message: 'Server said no' })).status, 204);
    const hit = await eventually(() => hook.confirmations(confirmId).find((h) => h.answered === 200), { what: 'webhook' });
    const ev = hit.json.events.find((e) => e.confirm_id === confirmId);
    assert.equal(ev.tool_use_id, null);
    assert.equal(ev.call_id, c1.id);
  });
});

describe('reload / second tab', () => {
  test('the newest manifest takes new calls; old calls stay with their clientId; changed from the old one → 403', async (t) => {
    const { page: a, conv } = await setup(t, { rev: 5 });
    const p1 = tm.call(callBody(conv, { tool: 'notes.list' }));
    const c1 = await a.next({ type: 'call' });
    assert.equal(c1.clientId, a.clientId);

    const { page: b } = await setup(t, { conv, rev: 0 }); // new connection, new clientId, lower rev
    assert.notEqual(b.socketId(), a.socketId());
    assert.deepEqual((await tm.manifest('u1', conv)).body, { clientId: b.clientId, rev: 0, tools: STORED_TOOLS });

    const p2 = tm.call(callBody(conv));
    const c2 = await b.next({ type: 'call' });
    assert.equal(c2.clientId, b.clientId);
    assert.deepEqual(await a.next({ type: 'call', id: c2.id }), c2, 'both tabs share the channel');

    assert.equal((await a.result(c2.id, OK)).status, 403, 'old clientId answering a new call');
    assert.equal((await b.result(c1.id, OK)).status, 403, 'new clientId answering an old call');
    assert.equal((await a.changed(6)).status, 403, 'changed from a clientId that is not current');
    assert.equal((await b.changed(4)).status, 204);

    assert.equal((await a.result(c1.id, OK)).status, 204, 'calls already sent stay bound');
    assert.deepEqual((await p1).body.result, OK);
    assert.equal((await b.result(c2.id, { status: 'refused', code: 'stale', message: 'Reload', rev: 4 })).status, 204);
    assert.deepEqual((await p2).body.result, { status: 'refused', code: 'stale', message: 'Reload', rev: 4 });

    // POSTs may arrive out of order: a lower rev from the current clientId is accepted and ignored.
    assert.equal((await b.manifest(2, [TOOLS[1]])).status, 204);
    assert.deepEqual((await tm.manifest('u1', conv)).body, { clientId: b.clientId, rev: 4, tools: STORED_TOOLS });
    assert.equal((await b.manifest(9, [TOOLS[1]])).status, 204);
    assert.deepEqual((await tm.manifest('u1', conv)).body, { clientId: b.clientId, rev: 9, tools: [STORED_TOOLS[1]] });
  });
});

describe('page endpoint security', () => {
  test('page token: toolmark.session arrives on the channel just before subscription_succeeded; a leaked socket id alone → 401', async (t) => {
    const { page, conv } = await setup(t); // pusher-js + Echo: the manifest posted on subscribed carried the token
    assert.match(page.token(), /^[A-Za-z0-9_-]{43}$/, '256 random bits, base64url');
    const m = msg(page.clientId, 'changed', { rev: 2 });
    const leaked = await pagePost(server, conv, m, { 'X-Socket-ID': page.socketId() });
    assert.equal(leaked.status, 401, leaked.text);
    assert.equal((await page.post(m, { headers: { 'X-Toolmark-Token': page.token().slice(0, -1) + (page.token().endsWith('A') ? 'B' : 'A') } })).status, 401, 'a wrong token');

    // Raw sockets: the frame order, one token per socket, tokens do not cross sockets.
    const ch = `private-toolmark.u1.${conv}`;
    const a = await Wire.connect(server, { app: APP });
    const b = await Wire.connect(server, { app: APP });
    cleanup(t).add(() => { a.close(); b.close(); });
    assert.equal((await a.authSubscribe(ch)).event, 'pusher_internal:subscription_succeeded');
    assert.equal((await b.authSubscribe(ch)).event, 'pusher_internal:subscription_succeeded');
    const tokenOf = (w) => {
      const i = w.frames.findIndex((f) => f.event === 'pusher_internal:subscription_succeeded' && f.channel === ch);
      const f = w.frames[i - 1];
      assert.equal(f.event, 'toolmark.session', `frame before subscription_succeeded: ${f.text}`);
      assert.equal(f.channel, ch);
      const data = typeof f.data === 'string' ? JSON.parse(f.data) : f.data;
      return data.token;
    };
    const ta = tokenOf(a);
    const tb = tokenOf(b);
    assert.notEqual(ta, tb);
    assert.equal(a.frames.filter((f) => f.event === 'toolmark.session').length, 1, 'b\'s token never reaches a');
    assert.equal(page.echo.connector.pusher.connection.state, 'connected');
    assert.equal((await pagePost(server, conv, m, { 'X-Socket-ID': a.socketId, 'X-Toolmark-Token': tb })).status, 401, 'another socket\'s token');
    assert.equal((await pagePost(server, conv, m, { 'X-Socket-ID': a.socketId, 'X-Toolmark-Token': page.token() })).status, 401, 'the page\'s token on another socket');
    const ok = await pagePost(server, conv, msg(newClientId(), 'manifest', { rev: 1, tools: [] }), { 'X-Socket-ID': a.socketId, 'X-Toolmark-Token': ta });
    assert.equal(ok.status, 204, ok.text);
    // The token dies with the subscription: unsubscribe, then the same token → 403 (not
    // subscribed; 401 from another node, which only knows sockets with a toolmark channel).
    a.send({ event: 'pusher:unsubscribe', data: { channel: ch } });
    await eventually(async () => [401, 403].includes((await pagePost(server, conv, m, { 'X-Socket-ID': a.socketId, 'X-Toolmark-Token': ta })).status), { what: '403/401 after unsubscribe' });
  });

  test('missing or unknown X-Socket-ID → 401', async (t) => {
    const { page, conv } = await setup(t);
    const m = msg(page.clientId, 'changed', { rev: 2 });
    const none = await pagePost(server, conv, m, {});
    assert.equal(none.status, 401, none.text);
    assert.equal((await pagePost(server, conv, m, { 'X-Socket-ID': '123.456' })).status, 401);
    assert.equal((await page.post(m)).status, 204, 'the same message with the socket id');
  });

  test('a socket not subscribed to the conversation → 403', async (t) => {
    const { page, conv } = await setup(t);
    const { page: other } = await setup(t, { tools: null }); // same user, another conversation
    const res = await other.post(msg(page.clientId, 'changed', { rev: 2 }), { to: conv });
    assert.equal(res.status, 403, res.text);
    const bare = await echoClient(server, { authApp, token: 't1', app: APP });
    cleanup(t).add(() => bare.disconnect());
    await state(bare.connector.pusher, 'connected');
    assert.equal((await pagePost(server, conv, msg(page.clientId, 'changed', { rev: 2 }), { 'X-Socket-ID': bare.socketId() })).status, 403);
  });

  test('another user cannot subscribe to or answer for this user\'s conversation', async (t) => {
    const { page, conv } = await setup(t);
    await assert.rejects(openPage(server, { authApp, token: 't2', user: 'u1', conv }), /subscri|error/i, 'channel auth refuses u2');
    // u2 legitimately owns a conversation with the same id: its socket speaks for (u2, conv) only.
    const { page: intruder } = await setup(t, { token: 't2', conv });
    const pending = tm.call(callBody(conv));
    const call = await page.next({ type: 'call' });
    const res = await intruder.post(msg(page.clientId, 'result', { id: call.id, result: OK }));
    assert.equal(res.status, 403, `u2 answering u1's call: ${res.text}`);
    assert.equal((await intruder.post(msg(page.clientId, 'changed', { rev: 8 }))).status, 403);
    assert.equal((await tm.manifest('u1', conv)).body.clientId, page.clientId, "u1's manifest untouched");
    assert.equal((await tm.manifest('u2', conv)).body.clientId, intruder.clientId);
    assert.equal((await page.result(call.id, OK)).status, 204);
    assert.deepEqual((await pending).body.result, OK);
  });

  test('invalid messages → 422 (protocol fixtures, id pattern, JSON, depth); over 1 MiB → 413', async (t) => {
    const { page } = await setup(t);
    const dir = path.resolve(__dirname, '../../bridge/testdata/fixtures');
    // Page-to-server ("toAgent") invalid vectors, and server-to-page types posted by a page.
    const read = (f) => JSON.parse(fs.readFileSync(path.join(dir, f), 'utf8'));
    const fixtures = fs.readdirSync(dir).filter((f) => f.endsWith('.json') &&
      ((f.startsWith('invalid-') && read(f).direction === 'toAgent') || (f.startsWith('valid-') && read(f).direction === 'toPage')));
    assert.ok(fixtures.length >= 10, fixtures.join());
    for (const f of fixtures) {
      const res = await page.post(read(f).message);
      assert.equal(res.status, 422, `${f}: ${res.status} ${res.text}`);
    }
    for (const body of [
      msg(page.clientId, 'result', { id: '../etc/passwd', result: OK }),
      msg('client id with spaces', 'changed', { rev: 1 }),
      msg(page.clientId, 'confirmed', { confirmId: 'x'.repeat(129), result: OK }),
      msg(page.clientId, 'result', { id: 'c1', result: { status: 'timeout' } }),
      msg(page.clientId, 'manifest', { rev: 1, tools: [{ ...TOOLS[0], llmName: 'has.dot' }] }),
      msg(page.clientId, 'manifest', { rev: 1, tools: [{ ...TOOLS[0], description: 'd'.repeat(1025) }] }),
      msg(page.clientId, 'manifest', { rev: 1, tools: Array.from({ length: 201 }, (_, i) => ({ ...TOOLS[1], name: `t${i}` })) }),
      '{"protocol":1,', '[]', '', `${'['.repeat(65)}${']'.repeat(65)}`,
    ]) {
      const res = await page.post(body);
      assert.equal(res.status, 422, `${JSON.stringify(body).slice(0, 80)}: ${res.status} ${res.text}`);
    }
    const big = msg(page.clientId, 'manifest', { rev: 2, tools: [{ ...TOOLS[0], description: 'x', pad: 'y'.repeat(1 << 20) }] });
    const res = await page.post(big);
    assert.equal(res.status, 413, res.text);
  });

  test('a disallowed Origin → 403; page messages are rate-limited per socket (429)', async (t) => {
    const { page } = await setup(t);
    const m = msg(page.clientId, 'changed', { rev: 1 });
    assert.equal((await page.post(m, { headers: { Origin: 'https://evil.test' } })).status, 403);
    const ok = await page.post(m, { headers: { Origin: ORIGIN } });
    assert.equal(ok.status, 204);
    assert.equal(ok.headers.get('access-control-allow-origin'), ORIGIN);
    const statuses = await Promise.all(Array.from({ length: 90 }, () => page.post(m).then((r) => r.status)));
    const accepted = statuses.filter((s) => s === 204).length; // burst 60, minus this socket's 2 earlier messages
    assert.ok(accepted >= 55 && accepted <= 70, statuses.join(','));
    assert.ok(statuses.includes(429), statuses.join(','));
    assert.deepEqual([...new Set(statuses)].sort(), [204, 429]);
  });

  test('CORS preflight: allowed Origin gets Access-Control-Allow-Origin, others 403', async () => {
    const preflight = (origin) => fetch(`${server.url}/toolmark/bridge/${uid('c')}`, {
      method: 'OPTIONS',
      headers: { Origin: origin, 'Access-Control-Request-Method': 'POST', 'Access-Control-Request-Headers': 'content-type,x-requested-with,x-socket-id' },
    });
    const res = await preflight(ORIGIN);
    assert.ok([200, 204].includes(res.status), `preflight ${res.status}`);
    assert.equal(res.headers.get('access-control-allow-origin'), ORIGIN);
    assert.equal(res.headers.get('access-control-allow-credentials'), 'true');
    assert.match(res.headers.get('access-control-allow-methods'), /POST/);
    for (const h of ['content-type', 'x-requested-with', 'x-socket-id']) {
      assert.ok(res.headers.get('access-control-allow-headers').toLowerCase().includes(h), h);
    }
    assert.match(res.headers.get('vary') || '', /Origin/);
    const bad = await preflight('https://evil.test');
    assert.equal(bad.status, 403);
    assert.equal(bad.headers.get('access-control-allow-origin'), null);
  });

  test('one origin matcher: the WebSocket upgrade and the page preflight agree on every form', async (t) => {
    // APP allows 'app.example.test' (host, any scheme/port) and 'https://*.tenant.example.test:8443'.
    const cases = {
      'https://app.example.test': true,
      'http://app.example.test:3000': true,
      'https://x.tenant.example.test:8443': true,
      'https://a.b.tenant.example.test:8443': true,
      'https://x.tenant.example.test': false, // the pattern names port 8443
      'http://x.tenant.example.test:8443': false, // and https
      'https://tenant.example.test:8443': false, // *. needs a subdomain
      'https://app.example.test.evil.test': false,
      'https://evil.test': false,
      [`https://${'a.'.repeat(5000)}tenant.example.test.evil`]: false, // hostile, answered at once
    };
    for (const [origin, want] of Object.entries(cases)) {
      const wire = await Wire.open(server, { app: APP, origin });
      cleanup(t).add(() => wire.close());
      const first = await wire.next((f) => f.event === 'pusher:connection_established' || f.event === 'pusher:error');
      const wsAllowed = first.event === 'pusher:connection_established';
      if (!wsAllowed) assert.equal(first.data.code, 4009, `${origin}: ${first.text}`);
      const pre = await fetch(`${server.url}/toolmark/bridge/${uid('c')}`, {
        method: 'OPTIONS', headers: { Origin: origin, 'Access-Control-Request-Method': 'POST' },
      });
      const preAllowed = pre.status === 204 && pre.headers.get('access-control-allow-origin') === origin;
      assert.equal(wsAllowed, want, `WebSocket from ${origin.slice(0, 80)}`);
      assert.equal(preAllowed, want, `preflight from ${origin.slice(0, 80)}: ${pre.status}`);
    }
  });
});

describe('app endpoint security', () => {
  test('unsigned, badly signed, wrong key → 401; unknown app → 404', async () => {
    const body = callBody(uid('c'));
    assert.equal((await tm.request('POST', '/calls', { body, sign: false })).status, 401);
    assert.equal((await tm.request('POST', '/calls', { body, sign: { secret: 'wrong' } })).status, 401);
    assert.equal((await tm.request('POST', '/calls', { body, sign: { key: APP2.key } })).status, 401);
    assert.equal((await tm.request('POST', '/calls', { body, sign: { timestamp: Math.floor(Date.now() / 1000) - 3600 } })).status, 401, 'stale');
    assert.equal((await tm.request('GET', '/manifest', { params: { user_id: 'u1', conversation_id: 'c' }, sign: { secret: 'wrong' } })).status, 401);
    assert.equal((await tm.request('POST', '/messages', { body: { user_id: 'u1', conversation_id: 'c', message: {} }, sign: false })).status, 401);
    const ghost = agent(server, { app_id: 'ghost', key: APP.key, secret: APP.secret });
    assert.equal((await ghost.call(body)).status, 404);
  });

  test('toolmark disabled for the app → 403 on the app API and on the page endpoint', async (t) => {
    const tm2 = agent(server, APP2);
    const conv = uid('c');
    for (const res of [
      await tm2.call(callBody(conv)), await tm2.describe({ user_id: 'u1', conversation_id: conv, tool: 'x' }),
      await tm2.manifest('u1', conv), await tm2.forward('u1', conv, msg('x', 'changed', { rev: 1 })),
    ]) assert.equal(res.status, 403, res.text);
    const { page } = await setup(t, { app: APP2, auth: authApp2, tools: null });
    const res = await page.manifest(1, TOOLS);
    assert.equal(res.status, 403, res.text);
  });
});

describe('forwarding alternative: POST /apps/{id}/toolmark/messages', () => {
  test('the app forwards the page messages and gets the page endpoint statuses', async (t) => {
    const { page, conv } = await setup(t, { tools: null }); // the page only listens; the app forwards
    const clientId = page.clientId;
    assert.equal((await tm.forward('u1', conv, msg(clientId, 'manifest', { rev: 1, tools: TOOLS }))).status, 204);
    assert.deepEqual((await tm.manifest('u1', conv)).body, { clientId, rev: 1, tools: STORED_TOOLS });

    const pending = tm.call(callBody(conv));
    const call = await page.next({ type: 'call' });
    assert.equal((await tm.forward('u2', conv, msg(clientId, 'result', { id: call.id, result: OK }))).status, 403, 'other user');
    assert.equal((await tm.forward('u1', conv, msg(newClientId(), 'result', { id: call.id, result: OK }))).status, 403, 'other clientId');
    assert.equal((await tm.forward('u1', conv, msg(clientId, 'result', { id: call.id, result: { status: 'ok', x: 1 } }))).status, 422);
    assert.equal((await tm.forward('u1', conv, msg(clientId, 'result', { id: call.id, result: OK }))).status, 204);
    assert.deepEqual((await pending).body, { id: call.id, result: OK, hints: { consequential: true } });
    assert.equal((await tm.forward('u1', conv, msg(clientId, 'result', { id: call.id, result: OK }))).status, 409, 'duplicate');
    assert.equal((await tm.forward('u1', conv, msg(clientId, 'result', { id: uid('x'), result: OK }))).status, 404, 'unknown id');
    assert.equal((await tm.forward('u1', conv, msg(newClientId(), 'changed', { rev: 2 }))).status, 403, 'changed not current');

    const slow = tm.call(callBody(conv, { timeout_ms: 300 }));
    const c2 = await page.next({ type: 'call' });
    assert.deepEqual((await slow).body.result, { status: 'timeout' });
    await page.next({ type: 'cancel', id: c2.id });
    const late = await tm.forward('u1', conv, msg(clientId, 'result', { id: c2.id, result: OK }));
    assert.ok([409, 410].includes(late.status), `late: ${late.status} ${late.text}`);

    const confirmId = uid('cf-');
    const p3 = tm.call(callBody(conv, { tool_use_id: 'toolu_f' }));
    const c3 = await page.next({ type: 'call' });
    assert.equal((await tm.forward('u1', conv, msg(clientId, 'result', { id: c3.id, result: { status: 'needs_confirmation', confirmId, summary: 's' } }))).status, 204);
    await p3;
    assert.equal((await tm.forward('u1', conv, msg(clientId, 'confirmed', { confirmId, result: OK }))).status, 204);
    assert.equal((await tm.forward('u1', conv, msg(clientId, 'confirmed', { confirmId, result: OK }))).status, 409);
    const hit = await eventually(() => hook.confirmations(confirmId).find((h) => h.answered === 200), { what: 'webhook' });
    assert.equal(hit.json.events.find((e) => e.confirm_id === confirmId).tool_use_id, 'toolu_f');

    for (const bad of [{ conversation_id: conv, message: {} }, { user_id: 'u1', conversation_id: conv }, { user_id: 'u1', conversation_id: 'a.b', message: {} }]) {
      const res = await tm.request('POST', '/messages', { body: bad });
      assert.equal(res.status, 422, `${JSON.stringify(bad)} → ${res.status}`);
    }
  });
});

describe('server.path prefix', () => {
  test('page endpoint at {path}/toolmark/bridge and signatures over the unprefixed path', async (t) => {
    const bag = cleanup(t); // runs in reverse: the page disconnects before the server stops
    const prefixed = await startServer({ apps: [{ ...APP, webhooks: [] }], server: { path: '/reverb' } });
    bag.add(() => prefixed.stop());
    const auth = await startAuthApp({ sdk: sdk(prefixed, APP), users, deny: toolmarkChannelPolicy });
    bag.add(() => auth.close());
    const conv = uid('c');
    users.t1.conversations.add(conv);
    const page = await openPage(prefixed, { authApp: auth, token: 't1', user: 'u1', conv, app: APP });
    bag.add(() => page.close());
    assert.equal((await page.manifest(1, TOOLS)).status, 204);
    const api = agent(prefixed, APP);
    const pending = api.call(callBody(conv));
    const call = await page.next({ type: 'call' });
    assert.equal((await page.result(call.id, OK)).status, 204);
    assert.deepEqual((await pending).body, { id: call.id, result: OK, hints: { consequential: true } });
    assert.equal((await api.manifest('u1', conv)).body.clientId, page.clientId);
  });
});
