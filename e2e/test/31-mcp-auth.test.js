'use strict';
// MCP authorization as the spec (2025-11-25) asks, against the built binary: Origin checks
// (403), the token audience ({public_url}{path}/toolmark/mcp), the OAuth protected resource
// metadata (RFC 9728) and the resource_metadata of every 401, tokens of the app's own
// authorization server verified from a JWKS served on loopback (RS256, ES256, EdDSA by kid,
// rotation), toolmark.mcp.max_token_lifetime_s, and a token without conversation_id that
// follows the user's latest page. The official TypeScript client (2025-11-25) is the client,
// and the official Go SDK client (e2e/gosdk, built here) at 2026-07-28 and 2025-11-25.
const { describe, test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const http = require('node:http');
const path = require('node:path');
const readline = require('node:readline');
const { spawn, execFileSync } = require('node:child_process');
const { startServer, freePort } = require('../lib/server');
const { sdk } = require('../lib/clients');
const { startAuthApp } = require('../lib/authapp');
const { cleanup, uid } = require('../lib/util');
const { toolmarkChannelPolicy, openPage } = require('../lib/toolmark');
const { tokenFor, asymToken, nowSec, mcpConnect, mcpRaw, respond, until, PUBLIC_URL, RESOURCE } = require('../lib/mcp');

const AGENT_ORIGIN = 'https://agent.example.com';
const ISSUER = 'https://auth.e2e';
const METADATA_URL = `${PUBLIC_URL}/.well-known/oauth-protected-resource/toolmark/mcp`;
const TOOLS_A = [{ name: 'notes.list', llmName: 'notes__list', description: 'List notes', hints: { readOnly: true } }];
const TOOLS_B = [{ name: 'mail.send', llmName: 'mail__send', description: 'Send mail', hints: {} }];

/** One request with the given Host header (fetch does not let a caller choose Host). */
function rawRequest(method, port, path, host, token) {
  return new Promise((resolve, reject) => {
    const headers = { Host: host, Accept: 'application/json, text/event-stream' };
    let body;
    if (method === 'POST') {
      body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize',
        params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } } });
      headers['Content-Type'] = 'application/json';
    }
    if (token) headers.Authorization = `Bearer ${token}`;
    const req = http.request({ host: '127.0.0.1', port, path, method, headers, agent: false }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c) => { text += c; });
      res.on('end', () => resolve({ status: res.statusCode, text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}
const rawPost = (port, path, host, token) => rawRequest('POST', port, path, host, token);
const rawGet = (port, path, host) => rawRequest('GET', port, path, host);

/** A key pair of the test authorization server, with its public JWK. */
function keyPair(kind, kid) {
  const opts = { rsa: { modulusLength: 2048 }, ec: { namedCurve: 'P-256' }, ed25519: {} }[kind];
  const { privateKey, publicKey } = crypto.generateKeyPairSync(kind, opts);
  const alg = { rsa: 'RS256', ec: 'ES256', ed25519: 'EdDSA' }[kind];
  return { kid, alg, key: privateKey, jwk: { ...publicKey.export({ format: 'jwk' }), kid, alg, use: 'sig' } };
}

/** A JWKS on loopback: set(keys) replaces the set; fetches counts GETs. */
async function startJWKS(keys) {
  const state = { keys, fetches: 0 };
  const srv = http.createServer((req, res) => {
    state.fetches++;
    res.writeHead(200, { 'Content-Type': 'application/jwk-set+json' });
    res.end(JSON.stringify({ keys: state.keys.map((k) => k.jwk) }));
  });
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${srv.address().port}/jwks`,
    set: (k) => { state.keys = k; },
    fetches: () => state.fetches,
    close: () => new Promise((r) => srv.close(r)),
  };
}

const rs1 = keyPair('rsa', 'rs1');
const es1 = keyPair('ec', 'es1');
const ed1 = keyPair('ed25519', 'ed1');
const es2 = keyPair('ec', 'es2'); // published by the rotation test
const rs3 = keyPair('rsa', 'rs3'); // published within the minute after es2: not fetched

let server, authApp, jwks, APP, APP_AS;
const users = { t1: { id: 'u1', conversations: new Set() } };

before(async () => {
  jwks = await startJWKS([rs1, es1, ed1]);
  APP = { app_id: 'hs', key: 'hs-key', secret: 'hs-secret', allowed_origins: [AGENT_ORIGIN],
    toolmark: { enabled: true, call_timeout_ms: 3000, mcp: { enabled: true } } };
  APP_AS = { app_id: 'as', key: 'as-key', secret: 'as-secret', allowed_origins: [AGENT_ORIGIN],
    toolmark: { enabled: true, call_timeout_ms: 3000,
      mcp: { enabled: true, issuer: ISSUER, jwks_url: jwks.url, max_token_lifetime_s: 600 } } };
  server = await startServer({ apps: [APP, APP_AS], server: { public_url: PUBLIC_URL } });
  authApp = await startAuthApp({ sdk: sdk(server, APP_AS), users, deny: toolmarkChannelPolicy });
});
after(async () => {
  await authApp?.close();
  await server?.stop();
  await jwks?.close();
});

/** An authorization-server token (5 minutes) signed by k; claims override (undefined drops). */
const asToken = (k, claims = {}) => asymToken({ iss: ISSUER, sub: 'u1', aud: RESOURCE, iat: nowSec(), exp: nowSec() + 300, ...claims }, k);

/** A page of u1 for conv on APP_AS that posted tools and answers every call with {echo}. */
async function page(t, conv, tools) {
  users.t1.conversations.add(conv);
  const p = await openPage(server, { authApp, token: 't1', user: 'u1', conv, app: APP_AS });
  const bag = cleanup(t);
  bag.add(() => p.close());
  assert.equal((await p.manifest(1, tools)).status, 204);
  const stop = respond(p, (m) => (m.type === 'describe'
    ? { status: 'ok', data: { inputSchema: { type: 'object' } } }
    : { status: 'ok', data: { conv, tool: m.tool } }));
  bag.add(() => stop());
  return p;
}

describe('protected resource metadata (RFC 9728)', () => {
  test('GET /.well-known/oauth-protected-resource/toolmark/mcp names the resource, the authorization servers and the scopes', async () => {
    const res = await fetch(`${server.url}/.well-known/oauth-protected-resource/toolmark/mcp`);
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type'), /^application\/json/);
    assert.deepEqual(await res.json(), {
      resource: RESOURCE,
      authorization_servers: [ISSUER],
      bearer_methods_supported: ['header'],
      scopes_supported: ['toolmark:read', 'toolmark:write'],
    });
  });

  test('every 401 names the metadata; error="invalid_token" only when a token was sent', async () => {
    const none = await mcpRaw(server, {});
    assert.equal(none.status, 401);
    assert.equal(none.headers.get('www-authenticate'), `Bearer resource_metadata="${METADATA_URL}"`);
    const bad = await mcpRaw(server, { authorization: 'Bearer x.y.z' });
    assert.equal(bad.status, 401);
    assert.equal(bad.headers.get('www-authenticate'), `Bearer resource_metadata="${METADATA_URL}", error="invalid_token"`);
  });

  test('without server.public_url the resource is built from a Host in server.public_hosts (and X-Forwarded-Proto from a loopback proxy)', async (t) => {
    const port = await freePort();
    const own = await startServer({ apps: [APP], server: { path: '/ws', port, public_hosts: [`127.0.0.1:${port}`] }, nodes: 1 });
    cleanup(t).add(() => own.stop());
    const base = `http://127.0.0.1:${own.port}`;
    const doc = await (await fetch(`${base}/.well-known/oauth-protected-resource/ws/toolmark/mcp`)).json();
    assert.equal(doc.resource, `${base}/ws/toolmark/mcp`);
    assert.deepEqual(doc.authorization_servers, []);
    const proxied = await (await fetch(`${base}/.well-known/oauth-protected-resource/ws/toolmark/mcp`,
      { headers: { 'X-Forwarded-Proto': 'https' } })).json();
    assert.equal(proxied.resource, `https://127.0.0.1:${own.port}/ws/toolmark/mcp`);
    const ok = await mcpConnect(own, tokenFor(APP, { conv: uid('c'), aud: `${base}/ws/toolmark/mcp` }));
    await ok.close();
    const res = await fetch(`${own.url}/toolmark/mcp`, { method: 'POST', headers: { Authorization: `Bearer ${tokenFor(APP, { conv: 'c1' })}`,
      'Content-Type': 'application/json', Accept: 'application/json, text/event-stream' }, body: '{}' });
    assert.equal(res.status, 401, 'a token for the public_url resource is not for this one');
    // A Host not in public_hosts, with a token of the same issuer for that Host's resource
    // (another deployment): refused, never a resource built from it (issue 24).
    const forged = await rawPost(own.port, '/ws/toolmark/mcp', 'staging.example',
      tokenFor(APP, { conv: uid('c'), aud: 'http://staging.example/ws/toolmark/mcp' }));
    assert.equal(forged.status, 421, forged.text);
    const forgedDoc = await rawGet(own.port, '/.well-known/oauth-protected-resource/ws/toolmark/mcp', 'staging.example');
    assert.equal(forgedDoc.status, 421, forgedDoc.text);
  });

  test('MCP enabled without server.public_url or server.public_hosts: config check fails naming both keys', async () => {
    const { runBinary, writeConfig } = require('../lib/server');
    const cfg = writeConfig({ server: { host: '127.0.0.1', port: 1 }, apps: [APP] });
    const r = await runBinary(['config', 'check', '--config', cfg.file]);
    cfg.remove();
    assert.notEqual(r.code, 0);
    assert.match(r.stderr + r.stdout, /server\.public_url: or server\.public_hosts is required when MCP is enabled/);
  });
});

describe('Origin', () => {
  const post = (headers) => mcpRaw(server, { headers });
  test('a valid token with an Origin its app does not allow → 403; with an allowed one → 200', async () => {
    const tok = `Bearer ${tokenFor(APP, { conv: 'c1' })}`;
    assert.equal((await post({ Authorization: tok, Origin: 'http://evil.example' })).status, 403);
    const ok = await post({ Authorization: tok, Origin: AGENT_ORIGIN });
    assert.equal(ok.status, 200, ok.text);
    assert.equal(ok.headers.get('access-control-allow-origin'), AGENT_ORIGIN);
  });
  test('no token: 403 for an Origin no MCP app allows, else the 401', async () => {
    assert.equal((await post({ Origin: 'http://evil.example' })).status, 403);
    assert.equal((await post({ Origin: AGENT_ORIGIN })).status, 401);
  });
});

describe('audience and lifetime', () => {
  const cases = [
    ['HS256 token for another server', () => tokenFor(APP, { conv: 'c1', aud: 'https://other.example/toolmark/mcp' })],
    ['HS256 token without aud', () => tokenFor(APP, { conv: 'c1', aud: undefined })],
    ['JWKS token for another server', () => asToken(rs1, { aud: ['https://other.example/toolmark/mcp'] })],
    ['JWKS token over max_token_lifetime_s (600 s from iat)', () => asToken(rs1, { exp: nowSec() + 700 })],
    ['JWKS token over the lifetime, no iat', () => asToken(es1, { iat: undefined, exp: nowSec() + 700 })],
    ['JWKS token without sub', () => asToken(rs1, { sub: undefined })],
    ['JWKS token of another issuer', () => asToken(rs1, { iss: 'https://evil.example' })],
    ['HS256 token with the issuer as iss', () => tokenFor(APP_AS, { iss: ISSUER })],
  ];
  for (const [name, make] of cases) {
    test(`401 invalid_token: ${name}`, async () => {
      const res = await mcpRaw(server, { authorization: `Bearer ${make()}` });
      assert.equal(res.status, 401, res.text);
      assert.equal(res.headers.get('www-authenticate'), `Bearer resource_metadata="${METADATA_URL}", error="invalid_token"`);
    });
  }
  test('aud as an array naming the resource is accepted', async () => {
    const res = await mcpRaw(server, { authorization: `Bearer ${asToken(rs1, { aud: ['https://x.example', RESOURCE], conversation_id: 'c1' })}` });
    assert.equal(res.status, 200, res.text);
  });
});

describe('tokens of the app\'s authorization server (JWKS)', () => {
  for (const k of [rs1, es1, ed1]) {
    test(`${k.alg}: the official client lists and calls the conversation's tools`, async (t) => {
      const conv = uid('c');
      const p = await page(t, conv, TOOLS_A);
      const c = await mcpConnect(server, asToken(k, { conversation_id: conv }));
      cleanup(t).add(() => c.close());
      const list = await c.client.listTools();
      assert.deepEqual(list.tools.map((x) => x.name), ['notes__list']);
      const res = await c.client.callTool({ name: 'notes__list', arguments: {} });
      assert.equal(res.isError, undefined, JSON.stringify(res));
      assert.deepEqual(res.structuredContent, { status: 'ok', data: { conv, tool: 'notes.list' } });
      assert.ok(p.messages().some((m) => m && m.type === 'call'));
    });
  }

  test('rotation by kid: a new kid is fetched once; another within the minute is not', async () => {
    await mcpRaw(server, { authorization: `Bearer ${asToken(rs1, { conversation_id: 'c1' })}` }); // the set is loaded
    const before = jwks.fetches();
    jwks.set([rs1, es1, ed1, es2]);
    const res = await mcpRaw(server, { authorization: `Bearer ${asToken(es2, { conversation_id: 'c1' })}` });
    assert.equal(res.status, 200, res.text);
    assert.equal(jwks.fetches(), before + 1);
    jwks.set([rs1, es1, ed1, es2, rs3]);
    const soon = await mcpRaw(server, { authorization: `Bearer ${asToken(rs3, { conversation_id: 'c1' })}` });
    assert.equal(soon.status, 401, 'a second unknown kid within the minute');
    assert.equal(jwks.fetches(), before + 1);
    const forged = await mcpRaw(server, { authorization: `Bearer ${asToken({ ...es2, key: es1.key }, { conversation_id: 'c1' })}` });
    assert.equal(forged.status, 401, 'signed by another key under a known kid');
  });

  test('without conversation_id the session follows the user\'s latest page, and list_changed fires when it changes', async (t) => {
    const convA = uid('a');
    const convB = uid('b');
    await page(t, convA, TOOLS_A);
    let changed = 0;
    const c = await mcpConnect(server, asToken(es1), { onListChanged: () => { changed++; } });
    cleanup(t).add(() => c.close());
    const first = await c.client.listTools();
    assert.deepEqual(first.tools.map((x) => x.name), ['notes__list']);
    // The GET stream is open once the client got its list; the user opens another page.
    await page(t, convB, TOOLS_B);
    await until(() => changed >= 1, 'list_changed for the new page');
    const second = await c.client.listTools();
    assert.deepEqual(second.tools.map((x) => x.name), ['mail__send']);
    const res = await c.client.callTool({ name: 'mail__send', arguments: {} });
    assert.deepEqual(res.structuredContent, { status: 'ok', data: { conv: convB, tool: 'mail.send' } });
  });
});

// The Go SDK client as a child process (e2e/gosdk): its JSON lines, step by step.
const GOSDK_BIN = process.env.GOSDK_BIN || path.resolve(__dirname, '../../bin/gosdk-e2e');
function goClient(t, args) {
  const proc = spawn(GOSDK_BIN, args, { stdio: ['ignore', 'pipe', 'inherit'] });
  cleanup(t).add(() => proc.kill());
  const lines = [];
  const waiters = [];
  readline.createInterface({ input: proc.stdout }).on('line', (l) => {
    lines.push(JSON.parse(l));
    for (const w of waiters.splice(0)) w();
  });
  return {
    /** The next line (after those already taken), waiting for it. */
    async next(step) {
      const end = Date.now() + 20000;
      while (lines.length === 0) {
        if (Date.now() > end) throw new Error(`no line from the Go client (want ${step})`);
        await new Promise((r) => { waiters.push(r); setTimeout(r, 250); });
      }
      const l = lines.shift();
      assert.equal(l.step, step, JSON.stringify(l));
      return l;
    },
  };
}

describe('the official Go SDK client', () => {
  before(() => {
    if (!process.env.GOSDK_BIN) {
      execFileSync('go', ['build', '-o', GOSDK_BIN, './e2e/gosdk'], { cwd: path.resolve(__dirname, '../..'), stdio: 'inherit',
        env: { ...process.env, CGO_ENABLED: '0' } });
    }
  });
  for (const [version, want] of [['', '2026-07-28'], ['2025-11-25', '2025-11-25']]) {
    test(`asked for ${version || 'its default'}: negotiates ${want}, lists, calls, and gets list_changed`, async (t) => {
      const conv = uid('g');
      const p = await page(t, conv, TOOLS_A);
      const c = goClient(t, ['-url', `${server.url}/toolmark/mcp`, '-token', asToken(es1, { conversation_id: conv }),
        '-version', version, '-call', 'notes__list', '-wait', '20s']);
      assert.equal((await c.next('connected')).protocol, want);
      assert.deepEqual((await c.next('listed')).tools, ['notes__list']);
      const called = await c.next('called');
      assert.equal(called.isError, false);
      assert.deepEqual(called.result, { status: 'ok', data: { conv, tool: 'notes.list' } });
      assert.equal((await p.manifest(2, [...TOOLS_A, ...TOOLS_B])).status, 204);
      await c.next('changed');
      assert.deepEqual((await c.next('listed')).tools, ['notes__list', 'mail__send']);
    });
  }
});
