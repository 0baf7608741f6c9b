'use strict';
// Hand-signed Pusher HTTP API requests, for the cases a well-behaved SDK never produces (bad
// signature, stale timestamp, unknown key, wrong body hash, oversized or malformed bodies).
// Signing follows the Pusher HTTP API reference:
//   METHOD \n /apps/{id}/... \n sorted "k=v" pairs (auth_key, auth_timestamp, auth_version,
//   body_md5 when there is a body, and any other query params), HMAC-SHA256 hex with the secret.
const crypto = require('node:crypto');
const { WAIT_MS } = require('./util');
const { pick } = require('./server');

const md5 = (s) => crypto.createHash('md5').update(s).digest('hex');
const hmac = (secret, s) => crypto.createHmac('sha256', secret).update(s).digest('hex');

/**
 * rawApi(server, {app, method, path, params, body, bodyText, sign})
 *   path      below /apps/{app_id}, e.g. "/events"
 *   body      object sent as JSON (or bodyText: exact string)
 *   sign      overrides: {key, secret, timestamp, bodyMd5, signature, appId, signedPath}
 * → {status, body (parsed JSON when possible), text}
 */
async function rawApi(server, { app = server.app, method = 'GET', path, params = {}, body, bodyText, sign = {} }) {
  const text = bodyText !== undefined ? bodyText : body !== undefined ? JSON.stringify(body) : '';
  const apiPath = `/apps/${sign.appId ?? app.app_id}${path}`;
  const q = {
    auth_key: sign.key ?? app.key,
    auth_timestamp: String(sign.timestamp ?? Math.floor(Date.now() / 1000)),
    auth_version: '1.0',
    ...params,
  };
  if (text) q.body_md5 = sign.bodyMd5 ?? md5(text);
  const query = Object.keys(q)
    .sort()
    .map((k) => `${k}=${q[k]}`)
    .join('&');
  const signature = sign.signature ?? hmac(sign.secret ?? app.secret, `${method}\n${sign.signedPath ?? apiPath}\n${query}`);
  const node = pick(server);
  const url = `${server.tls ? "https" : "http"}://${node.host}:${node.port}${server.prefix || ''}${apiPath}?${query}&auth_signature=${signature}`;
  const res = await fetch(url, {
    method,
    headers: text ? { 'content-type': 'application/json' } : {},
    body: text || undefined,
    signal: AbortSignal.timeout(WAIT_MS),
  });
  const out = await res.text();
  let parsed;
  try {
    parsed = JSON.parse(out);
  } catch {
    parsed = undefined;
  }
  return { status: res.status, body: parsed, text: out };
}

module.exports = { rawApi, md5, hmac };
