'use strict';
// The operator's commands: `reverbgo config check` (validates like start, environment
// included, prints the effective config with secrets masked, exit 0 / 1), `reverbgo
// healthcheck` (exit 0 only while the configured server's /up answers OK, over https too),
// and server.log {format, level} with --log-level over the file.
const { describe, test } = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync, spawn } = require('node:child_process');
const net = require('node:net');
const fs = require('node:fs');
const path = require('node:path');
const { startServer, freePort, runBinary, writeConfig } = require('../lib/server');
const { pusherClient, whenConnected } = require('../lib/clients');
const { cleanup, eventually } = require('../lib/util');
const { scrape, parse } = require('../lib/prom');

const APP = { app_id: 'ops', key: 'ops-key', secret: 'ops-app-secret-value' };

describe('config check', () => {
  test('a good file: exit 0, effective YAML with defaults and env overrides, every secret masked', async (t) => {
    const cfg = writeConfig({
      server: { host: '127.0.0.1', port: 9123 },
      apps: [APP, {
        app_id: 'two', key: 'two-key', secret: 'second-app-secret',
        // A gateway token under an innocent header name, and tokens in the URL's user info and query.
        webhooks: [{ url: 'https://userinfo-token-value@hooks.example/w?token=query-token-value', headers: { 'X-Gateway-Key': 'gateway-header-value' } }],
      }],
      scaling: { enabled: false, redis_url: 'redis://default:redis-password-1@127.0.0.1:6379/2' },
      metrics: { enabled: true, token: 'metrics-token-value' },
    });
    cleanup(t).add(() => cfg.remove());
    const r = await runBinary(['config', 'check', '--config', cfg.file], { env: { REVERB_SERVER_PORT: '9555', REVERB_APP_SECRET: 'env-secret-value' } });
    assert.equal(r.code, 0, r.stderr);
    for (const secret of ['ops-app-secret-value', 'second-app-secret', 'redis-password-1', 'metrics-token-value', 'env-secret-value',
      'userinfo-token-value', 'query-token-value', 'gateway-header-value']) {
      assert.ok(!r.stdout.includes(secret) && !r.stderr.includes(secret), `${secret} leaked:\n${r.stdout}`);
    }
    assert.match(r.stdout, /^server:\n/);
    assert.match(r.stdout, /\n {4}port: 9555\n/); // REVERB_SERVER_PORT wins over the file, as in start
    assert.match(r.stdout, /secret: '\*{8}'/);
    assert.match(r.stdout, /token: '\*{8}'/);
    assert.match(r.stdout, /redis_url: redis:\/\/default:\*{8}@127\.0\.0\.1:6379\/2/);
    assert.match(r.stdout, /url: https:\/\/\*{8}@hooks\.example\/w\?token=\*{8}\n/);
    assert.match(r.stdout, /x-gateway-key: '\*{8}'/); // every header value, whatever its name
    assert.match(r.stdout, /key: ops-key/); // public keys stay readable
    assert.match(r.stdout, /activity_timeout: 30/); // defaults filled in
    assert.match(r.stdout, /format: json/);
    assert.match(r.stdout, /\n {4}routing: interest\n/); // scaling.routing's default, printed
  });

  for (const [name, yaml, key] of [
    ['an unknown key', 'server: {prot: 1}\napps: [{app_id: a, key: k, secret: s}]\n', 'server.prot'],
    ['a bad log format', 'server: {log: {format: xml}}\napps: [{app_id: a, key: k, secret: s}]\n', 'server.log.format'],
    ['a bad metrics listener', 'metrics: {enabled: true, listen: nowhere}\napps: [{app_id: a, key: k, secret: s}]\n', 'metrics.listen'],
    ['a missing secret', 'apps: [{app_id: a, key: k}]\n', 'apps[0].secret'],
    ['an unknown routing', 'scaling: {routing: fanout}\napps: [{app_id: a, key: k, secret: s}]\n', 'scaling.routing'],
  ]) {
    test(`${name}: exit 1 and the error names ${key}`, async (t) => {
      const cfg = writeConfig(yaml);
      cleanup(t).add(() => cfg.remove());
      const r = await runBinary(['config', 'check', '--config', cfg.file]);
      assert.equal(r.code, 1, r.stdout + r.stderr);
      assert.ok(r.stderr.includes(key), r.stderr);
      assert.equal(r.stdout, '');
    });
  }

  test('an environment value that start would refuse fails the check too', async (t) => {
    const cfg = writeConfig({ apps: [APP] });
    cleanup(t).add(() => cfg.remove());
    const r = await runBinary(['config', 'check', '--config', cfg.file], { env: { REVERB_SERVER_PORT: 'eighty' } });
    assert.equal(r.code, 1);
    assert.match(r.stderr, /REVERB_SERVER_PORT/);
  });
});

describe('healthcheck', () => {
  test('exit 0 while the server is up (0.0.0.0 is reached on 127.0.0.1), non-zero once it stopped', async (t) => {
    const port = await freePort();
    // The server itself binds loopback only (--host); the file the healthcheck reads says 0.0.0.0.
    const server = await startServer({ apps: [APP], server: { host: '0.0.0.0', port, path: '/rt' }, args: ['--host', '127.0.0.1'] });
    cleanup(t).add(() => server.stop());
    const cfg = writeConfig({ server: { host: '0.0.0.0', port, path: '/rt' }, apps: [APP] });
    cleanup(t).add(() => cfg.remove());
    const ok = await runBinary(['healthcheck', '--config', cfg.file]);
    assert.equal(ok.code, 0, ok.stderr);
    assert.match(ok.stdout, /"health":"OK"/);
    await server.stop();
    const down = await runBinary(['healthcheck', '--config', cfg.file]);
    assert.notEqual(down.code, 0);
    assert.match(down.stderr, /healthcheck/);
  });

  test('a config for a port nothing listens on fails; an invalid config fails', async (t) => {
    const cfg = writeConfig({ server: { host: '127.0.0.1', port: await freePort() }, apps: [APP] });
    const bad = writeConfig('apps: []\n');
    cleanup(t).add(() => { cfg.remove(); bad.remove(); });
    assert.notEqual((await runBinary(['healthcheck', '--config', cfg.file])).code, 0);
    const r = await runBinary(['healthcheck', '--config', bad.file]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /apps/);
  });

  test('with server.tls it speaks https and accepts the configured self-signed certificate', async (t) => {
    const dir = fs.mkdtempSync(path.join(require('node:os').tmpdir(), 'reverbgo-hc-'));
    cleanup(t).add(() => fs.rmSync(dir, { recursive: true, force: true }));
    const cert = path.join(dir, 'cert.pem');
    const key = path.join(dir, 'key.pem');
    execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
      '-keyout', key, '-out', cert, '-days', '2', '-subj', '/CN=reverb.example.com'], { stdio: 'ignore' });
    process.env.NODE_TLS_REJECT_UNAUTHORIZED = '0'; // startServer's own /up poll
    t.after(() => delete process.env.NODE_TLS_REJECT_UNAUTHORIZED);
    const port = await freePort();
    const serverCfg = { host: '127.0.0.1', port, tls: { cert, key } };
    const server = await startServer({ apps: [APP], server: serverCfg });
    cleanup(t).add(() => server.stop());
    const cfg = writeConfig({ server: serverCfg, apps: [APP] });
    cleanup(t).add(() => cfg.remove());
    const r = await runBinary(['healthcheck', '--config', cfg.file]);
    assert.equal(r.code, 0, r.stderr);
  });
});

/** A throwaway redis-server on a free loopback port. */
async function startRedis() {
  const port = await freePort();
  const proc = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
  const exited = new Promise((resolve) => proc.on('exit', resolve));
  await eventually(() => new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1', () => { s.end(); resolve(true); });
    s.on('error', () => resolve(false));
  }), { what: 'redis-server listening' });
  return { url: `redis://127.0.0.1:${port}/0`, stop: async () => { if (proc.exitCode === null) proc.kill('SIGTERM'); await exited; } };
}

describe('with scaling, health follows Redis', () => {
  test('healthcheck exits 0 while Redis is up and 1 once it is gone (503 DEGRADED); reverbgo_redis_broker_up follows', async (t) => {
    const redis = await startRedis();
    cleanup(t).add(() => redis.stop());
    const port = await freePort();
    const serverKeys = { host: '127.0.0.1', port };
    const config = { server: serverKeys, apps: [APP], scaling: { enabled: true, redis_url: redis.url, channel: `ops-${process.pid}` }, metrics: { enabled: true } };
    const server = await startServer({ server: serverKeys, apps: [APP], config });
    cleanup(t).add(() => server.stop());
    const cfg = writeConfig(config);
    cleanup(t).add(() => cfg.remove());
    const up = async () => parse((await scrape(`${server.url}/metrics`)).text).get('reverbgo_redis_broker_up');
    assert.equal((await runBinary(['healthcheck', '--config', cfg.file])).code, 0);
    assert.equal(await up(), 1);
    await redis.stop();
    await eventually(async () => (await up()) === 0, { ms: 15000, what: 'reverbgo_redis_broker_up 0' });
    const r = await runBinary(['healthcheck', '--config', cfg.file]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /503/);
  });
});

describe('server.log', () => {
  test('format text and level debug from the file', async (t) => {
    const server = await startServer({ apps: [APP], server: { log: { format: 'text', level: 'debug' } } });
    cleanup(t).add(() => server.stop());
    const p = pusherClient(server);
    await whenConnected(p);
    p.disconnect();
    await eventually(() => /level=DEBUG msg="connection closed"/.test(server.logs()), { what: 'a text debug line' });
    assert.match(server.logs(), /level=INFO msg="reverbgo listening"/);
    assert.doesNotMatch(server.logs(), /^\{/m);
  });

  test('json at warn hides info lines; --log-level info overrides the file', async (t) => {
    const quiet = await startServer({ apps: [APP], server: { log: { format: 'json', level: 'warn' } } });
    cleanup(t).add(() => quiet.stop());
    assert.doesNotMatch(quiet.logs(), /reverbgo listening/);
    const loud = await startServer({ apps: [APP], server: { log: { format: 'json', level: 'warn' } }, args: ['--log-level', 'info'] });
    cleanup(t).add(() => loud.stop());
    await eventually(() => /"msg":"reverbgo listening"/.test(loud.logs()), { what: 'a json info line' });
    for (const line of loud.logs().trim().split('\n')) JSON.parse(line);
  });
});
