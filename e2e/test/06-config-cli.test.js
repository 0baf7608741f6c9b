'use strict';
// The configuration contract of the binary: --host/--port flags, Laravel's REVERB_* environment
// variables (over the file; flags over both), an .env-only start, and refusing to start on an
// invalid config with a message naming the offending key.
const { describe, test } = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { startServer, freePort, runBinary, writeConfig, waitUp, childEnv, BIN } = require('../lib/server');
const { Wire } = require('../lib/wire');
const { sdk, outcome, pusherClient, whenConnected } = require('../lib/clients');
const { cleanup, uid } = require('../lib/util');

const APP = { app_id: 'cfg', key: 'cfg-key', secret: 'cfg-secret' };

/** Resolves true when something accepts HTTP on host:port/up. */
async function answers(host, port) {
  try {
    const res = await fetch(`http://${host}:${port}/up`, { signal: AbortSignal.timeout(1000) });
    return res.ok;
  } catch {
    return false;
  }
}

describe('flags and environment override the file', () => {
  test('start --config FILE --port P --host 127.0.0.1 listens on P, not on the file\'s host:port', async (t) => {
    const filePort = await freePort();
    const flagPort = await freePort();
    const srv = await startServer({
      apps: [APP],
      server: { host: '127.0.0.2', port: filePort },
      args: ['--port', String(flagPort), '--host', '127.0.0.1'],
      port: flagPort,
    });
    cleanup(t).add(() => srv.stop());
    assert.equal(await answers('127.0.0.1', flagPort), true);
    assert.equal(await answers('127.0.0.2', filePort), false);
    const p = pusherClient(srv);
    cleanup(t).add(() => p.disconnect());
    await whenConnected(p);
  });

  test('REVERB_SERVER_PORT overrides server.port, and --port overrides REVERB_SERVER_PORT', async (t) => {
    const bag = cleanup(t);
    const [filePort, envPort, flagPort] = [await freePort(), await freePort(), await freePort()];
    const byEnv = await startServer({ apps: [APP], server: { port: filePort }, env: { REVERB_SERVER_PORT: String(envPort) }, port: envPort });
    bag.add(() => byEnv.stop());
    assert.equal(await answers('127.0.0.1', envPort), true);
    assert.equal(await answers('127.0.0.1', filePort), false);
    await byEnv.stop();

    const byFlag = await startServer({
      apps: [APP],
      server: { port: filePort },
      env: { REVERB_SERVER_PORT: String(envPort) },
      args: ['--port', String(flagPort)],
      port: flagPort,
    });
    bag.add(() => byFlag.stop());
    assert.equal(await answers('127.0.0.1', flagPort), true);
    assert.equal(await answers('127.0.0.1', envPort), false);
  });

  test('REVERB_APP_ID / KEY / SECRET / ACTIVITY_TIMEOUT / ACCEPT_CLIENT_EVENTS_FROM override apps[0]', async (t) => {
    const bag = cleanup(t);
    const envApp = { app_id: 'env-id', key: 'env-key', secret: 'env-secret' };
    const srv = await startServer({
      apps: [APP],
      env: {
        REVERB_APP_ID: envApp.app_id,
        REVERB_APP_KEY: envApp.key,
        REVERB_APP_SECRET: envApp.secret,
        REVERB_APP_ACTIVITY_TIMEOUT: '17',
        REVERB_APP_ACCEPT_CLIENT_EVENTS_FROM: 'none',
      },
    });
    bag.add(() => srv.stop());
    const w = await Wire.connect(srv, { app: envApp });
    bag.add(() => w.close());
    assert.equal(w.established.data.activity_timeout, 17);
    const old = await Wire.open(srv, { app: APP });
    bag.add(() => old.close());
    assert.equal((await old.next('pusher:error')).data.code, 4001, 'the file\'s key is replaced');

    const channel = uid('private-env-');
    assert.equal((await w.authSubscribe(channel)).event, 'pusher_internal:subscription_succeeded', 'signed with the env secret');
    w.send({ event: 'client-x', channel, data: {} });
    assert.equal((await w.next('pusher:error')).data.code, 4301, 'client events off from the environment');

    assert.equal((await outcome(sdk(srv, envApp).trigger(channel, 'e', {}))).status, 200);
    await w.next('e');
    assert.equal((await outcome(sdk(srv, { ...envApp, secret: APP.secret }).trigger(channel, 'e', {}))).status, 401);
    assert.equal((await outcome(sdk(srv, APP).trigger(channel, 'e', {}))).status, 404, 'the file\'s app id is replaced');
  });

  test('no config file at all: a Laravel .env (REVERB_* only) is enough to start', async (t) => {
    const bag = cleanup(t);
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'reverbgo-envonly-'));
    bag.add(() => fs.rmSync(dir, { recursive: true, force: true }));
    const port = await freePort();
    const proc = spawn(BIN, ['start'], {
      cwd: dir,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: childEnv({
        REVERB_SERVER_HOST: '127.0.0.1',
        REVERB_SERVER_PORT: String(port),
        REVERB_APP_ID: 'dotenv',
        REVERB_APP_KEY: 'dotenv-key',
        REVERB_APP_SECRET: 'dotenv-secret',
      }),
    });
    let err = '';
    proc.stderr.on('data', (d) => (err += d));
    const exited = new Promise((resolve) => proc.on('exit', (code) => resolve(code)));
    bag.add(async () => {
      proc.kill('SIGTERM');
      await exited;
    });
    await Promise.race([waitUp(`http://127.0.0.1:${port}/up`, 10000), exited.then((code) => assert.fail(`exited ${code}: ${err}`))]);
    const srv = { host: '127.0.0.1', port, wsUrl: `ws://127.0.0.1:${port}`, app: { app_id: 'dotenv', key: 'dotenv-key', secret: 'dotenv-secret' } };
    const w = await Wire.connect(srv);
    bag.add(() => w.close());
    assert.equal(w.established.data.activity_timeout, 30, 'defaults apply to an env-only app');
    assert.equal((await outcome(sdk(srv).trigger('c', 'e', {}))).status, 200);
  });
});

describe('invalid configuration stops start-up, naming the key', () => {
  const base = () => ({ server: { host: '127.0.0.1', port: 1 }, apps: [{ ...APP }] });

  /** Runs `start --config` on cfg and expects a quick non-zero exit whose stderr matches all patterns. */
  async function refuses(cfg, patterns, { env } = {}) {
    const file = writeConfig(cfg);
    try {
      const res = await runBinary(['start', '--config', file.file], { env });
      assert.equal(res.timedOut, false, `the server started instead of refusing:\n${res.stderr}`);
      assert.notEqual(res.code, 0, `exit code 0 for an invalid config:\n${res.stderr}`);
      for (const p of patterns) assert.match(res.stderr, p, `stderr should name ${p}:\n${res.stderr}`);
      return res;
    } finally {
      file.remove();
    }
  }

  test('unknown keys (misspelt app setting, unknown section) are named with their path', async () => {
    const c = base();
    c.apps[0].max_conections = 5;
    await refuses(c, [/apps\[0\]\.max_conections/]);
    await refuses({ ...base(), servr: { port: 1 } }, [/servr/]);
    const nested = base();
    nested.server.tls = { cert: '', key: '', ca: 'x' };
    await refuses(nested, [/server\.tls\.ca/]);
  });

  test('duplicate app ids and keys', async () => {
    const c = base();
    c.apps.push({ app_id: APP.app_id, key: 'other-key', secret: 's' });
    await refuses(c, [/apps\[1\]\.app_id/, /duplicate/i]);
    const k = base();
    k.apps.push({ app_id: 'other', key: APP.key, secret: 's' });
    await refuses(k, [/apps\[1\]\.key/]);
  });

  test('bad enum, negative limit, empty secret, bad path, unknown webhook event: every key named at once', async () => {
    const c = base();
    c.apps[0].accept_client_events_from = 'everyone';
    await refuses(c, [/apps\[0\]\.accept_client_events_from/, /everyone/]);
    const many = base();
    Object.assign(many.apps[0], { max_connections: -1, secret: '', webhooks: [{ url: 'http://127.0.0.1:9/h', event_types: ['chanel_occupied'] }] });
    many.server.path = '/w s?x'; // ("ws/" is normalised to "/ws", so use characters that are refused)
    await refuses(many, [/apps\[0\]\.max_connections/, /apps\[0\]\.secret/, /server\.path/, /apps\[0\]\.webhooks\[0\]\.event_types\[0\]/]);
  });

  test('server.max_connections below -1 is named (-1 = no cap, 0 = from the open-file limit)', async () => {
    const c = base();
    c.server.max_connections = -2;
    await refuses(c, [/server\.max_connections/, /-2/]);
  });

  test('wrong types and broken YAML', async () => {
    await refuses('server:\n  port: "eighty"\napps:\n  - app_id: a\n    key: k\n    secret: s\n', [/port/]);
    await refuses('server: [unclosed\n', [/config/i]);
    await refuses({ server: { host: '127.0.0.1', port: 1 }, apps: [] }, [/apps/]);
  });

  test('a non-numeric REVERB_SERVER_PORT is named', async () => {
    await refuses(base(), [/REVERB_SERVER_PORT/], { env: { REVERB_SERVER_PORT: 'abc' } });
  });

  test('a missing --config file exits non-zero naming the file', async () => {
    const missing = path.join(os.tmpdir(), `no-such-${uid()}.yaml`);
    const res = await runBinary(['start', '--config', missing]);
    assert.notEqual(res.code, 0);
    assert.ok(res.stderr.includes(missing), res.stderr);
  });

  test('a port already in use exits non-zero instead of hanging', async (t) => {
    const srv = await startServer({ apps: [APP] });
    cleanup(t).add(() => srv.stop());
    const file = writeConfig({ server: { host: '127.0.0.1', port: srv.port }, apps: [APP] });
    cleanup(t).add(() => file.remove());
    const res = await runBinary(['start', '--config', file.file]);
    assert.equal(res.timedOut, false);
    assert.notEqual(res.code, 0);
    assert.match(res.stderr, /address already in use|bind/i);
  });

  test('CLI: version, no command, unknown flag', async () => {
    const v = await runBinary(['version']);
    assert.equal(v.code, 0);
    assert.match(v.stdout, /^reverbgo /);
    const none = await runBinary([]);
    assert.notEqual(none.code, 0);
    assert.match(none.stderr, /usage/);
    const bad = await runBinary(['start', '--no-such-flag']);
    assert.notEqual(bad.code, 0);
    assert.match(bad.stderr, /no-such-flag/);
  });
});
