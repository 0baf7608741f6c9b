'use strict';
// Helpers for the MCP endpoint e2e tests ({path}/toolmark/mcp): HS256 tokens minted the way a
// Laravel app does with firebase/php-jwt (and deliberately broken ones), the official TypeScript
// MCP client over Streamable HTTP, raw JSON-RPC POSTs for status checks, and a page responder
// that answers the bridge's describe/call messages from a simulated page (lib/toolmark.js).
const crypto = require('node:crypto');
const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
const { StreamableHTTPClientTransport } = require('@modelcontextprotocol/sdk/client/streamableHttp.js');
const { ToolListChangedNotificationSchema } = require('@modelcontextprotocol/sdk/types.js');
const { WAIT_MS } = require('./util');

const b64u = (s) => Buffer.from(s).toString('base64url');
const nowSec = () => Math.floor(Date.now() / 1000);

/**
 * A JWT over claims. alg HS256/HS384/HS512 signs with secret; alg 'none' leaves the signature
 * empty. Claims whose value is undefined are left out (JSON.stringify drops them).
 */
function jwt(claims, { secret, alg = 'HS256' } = {}) {
  const head = b64u(JSON.stringify({ alg, typ: 'JWT' }));
  const body = b64u(JSON.stringify(claims));
  if (alg === 'none') return `${head}.${body}.`;
  const algo = { HS256: 'sha256', HS384: 'sha384', HS512: 'sha512' }[alg];
  const sig = crypto.createHmac(algo, secret).update(`${head}.${body}`).digest('base64url');
  return `${head}.${body}.${sig}`;
}

/** PUBLIC_URL is server.public_url of the MCP tests' servers: tokens name RESOURCE in aud. */
const PUBLIC_URL = 'http://reverbgo.e2e';
const resourceOf = (base = PUBLIC_URL, prefix = '') => `${base}${prefix}/toolmark/mcp`;
const RESOURCE = resourceOf();

/**
 * The token an app mints for one user's conversation (5 minutes, iat now), for RESOURCE unless
 * aud says otherwise (aud: undefined leaves it out).
 */
function tokenFor(app, { user = 'u1', conv, ...extra } = {}) {
  return jwt({ iss: app.key, sub: user, conversation_id: conv, aud: RESOURCE, iat: nowSec(), exp: nowSec() + 300, ...extra }, { secret: app.secret });
}

/**
 * A token signed with a private KeyObject (RS256, ES256 or EdDSA) under kid, as an
 * authorization server (Passport, laravel/mcp) issues them.
 */
function asymToken(claims, { key, kid, alg }) {
  const head = b64u(JSON.stringify({ alg, typ: 'JWT', kid }));
  const body = b64u(JSON.stringify(claims));
  const input = Buffer.from(`${head}.${body}`);
  let sig;
  if (alg === 'RS256') sig = crypto.sign('sha256', input, key);
  else if (alg === 'ES256') sig = crypto.sign('sha256', input, { key, dsaEncoding: 'ieee-p1363' });
  else if (alg === 'EdDSA') sig = crypto.sign(null, input, key);
  else throw new Error(`alg ${alg}`);
  return `${head}.${body}.${sig.toString('base64url')}`;
}

/**
 * The official TypeScript client connected with a bearer token. onListChanged(), if given,
 * receives notifications/tools/list_changed (over the GET stream the transport opens after
 * initialization).
 */
async function mcpConnect(server, token, { onListChanged } = {}) {
  const transport = new StreamableHTTPClientTransport(new URL(`${server.url}/toolmark/mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  const client = new Client({ name: 'reverbgo-e2e', version: '1.0.0' });
  if (onListChanged) client.setNotificationHandler(ToolListChangedNotificationSchema, () => onListChanged());
  await client.connect(transport);
  return { client, transport, close: () => client.close() };
}

const INIT = {
  jsonrpc: '2.0', id: 1, method: 'initialize',
  params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } },
};

/**
 * A raw Streamable HTTP request: POST of a JSON-RPC body (initialize by default), or GET/DELETE.
 * authorization: the whole header value, or undefined for none.
 */
async function mcpRaw(server, { method = 'POST', authorization, session, body = INIT, headers: extra = {} } = {}) {
  const headers = { Accept: 'application/json, text/event-stream', ...extra };
  if (method === 'POST') headers['Content-Type'] = 'application/json';
  if (authorization !== undefined) headers.Authorization = authorization;
  if (session) headers['Mcp-Session-Id'] = session;
  if (session && method === 'POST') headers['MCP-Protocol-Version'] = '2025-06-18';
  const ctl = new AbortController();
  const res = await fetch(`${server.url}/toolmark/mcp`, {
    method, headers, body: method === 'POST' ? JSON.stringify(body) : undefined, signal: ctl.signal,
  });
  // A GET that was accepted is a stream that never ends: read nothing and hang up.
  const text = method === 'GET' && res.ok ? '' : await res.text();
  ctl.abort();
  return { status: res.status, headers: res.headers, text };
}

/**
 * Answers the page's describe/call messages with handler(message) (a ToolResult, or
 * null/undefined for no answer) until the returned stop() is called. Answers carry the
 * clientId the message was sent to.
 */
function respond(page, handler) {
  const seen = new Set();
  let stopped = false;
  const loop = (async () => {
    while (!stopped) {
      for (const m of page.messages()) {
        if (!m || seen.has(m)) continue;
        seen.add(m);
        if (m.type !== 'describe' && m.type !== 'call') continue;
        const result = await handler(m);
        if (result) page.result(m.id, result, { clientId: m.clientId }).catch(() => {});
      }
      await page.box.wait(page.box.got.length + 1, 250).catch(() => {});
    }
  })();
  return () => {
    stopped = true;
    return loop;
  };
}

/** Waits until fn() is truthy (polling), as util.eventually but with a clearer name here. */
async function until(fn, what, ms = WAIT_MS) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

module.exports = { jwt, tokenFor, asymToken, nowSec, mcpConnect, mcpRaw, respond, until, INIT, PUBLIC_URL, RESOURCE, resourceOf };
