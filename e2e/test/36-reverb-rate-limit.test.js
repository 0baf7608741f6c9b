'use strict';
// Laravel Reverb's per-app rate_limiting, as released Reverb 1.9.0-1.10.2 applies it
// (laravel/reverb src/Protocols/Pusher/Server.php ensureWithinRateLimit; the error from
// src/Protocols/Pusher/Exceptions/RateLimitExceeded.php; terminate through src/Connection.php
// terminate() and src/Servers/Reverb/Http/Connection.php close(), React's end(): the stream
// ends without a close frame and the pusher:error written after it never leaves). Configured
// from YAML and from Reverb's env names; and config check warning about REVERB_* names it
// does not know.
const { describe, test } = require('node:test');
const assert = require('node:assert/strict');
const { startServer, runBinary, writeConfig } = require('../lib/server');
const { Wire } = require('../lib/wire');
const { pusherClient, whenConnected, state } = require('../lib/clients');
const { cleanup } = require('../lib/util');

const APP = { app_id: 'rl', key: 'rl-key', secret: 'rl-secret' };
const ping = { event: 'pusher:ping', data: {} };
const isRateError = (f) => f.event === 'pusher:error' && f.data && f.data.code === 4301 && f.data.message === 'Rate limit exceeded';

describe('Reverb rate_limiting', () => {
  test('from YAML, without terminate: the message over max_attempts gets 4301 and is dropped; the socket stays open', async (t) => {
    const srv = await startServer({ apps: [{ ...APP, rate_limiting: { enabled: true, max_attempts: 3, decay_seconds: 60 } }], nodes: 1 });
    cleanup(t).add(() => srv.stop());
    const w = await Wire.connect(srv);
    cleanup(t).add(() => w.close());
    await w.roundTrip();
    await w.roundTrip();
    await w.roundTrip();
    w.send({ event: 'pusher:subscribe', data: { channel: 'over-the-limit' } });
    await w.next(isRateError);
    w.send(ping);
    await w.next(isRateError);
    assert.deepEqual(await w.none((f) => f.event === 'pusher_internal:subscription_succeeded' || f.event === 'pusher:pong'), []);
    assert.equal(w.open, true);
  });

  test('from Reverb env names, with terminate: the socket ends without a close frame or error, and pusher-js reconnects', async (t) => {
    const srv = await startServer({
      apps: [APP],
      env: {
        REVERB_APP_RATE_LIMITING_ENABLED: 'true',
        REVERB_APP_RATE_LIMIT_MAX_ATTEMPTS: '2',
        REVERB_APP_RATE_LIMIT_DECAY_SECONDS: '60',
        REVERB_APP_RATE_LIMIT_TERMINATE: 'true',
      },
    });
    cleanup(t).add(() => srv.stop());
    const w = await Wire.connect(srv);
    cleanup(t).add(() => w.close());
    await w.roundTrip();
    await w.roundTrip();
    w.send(ping);
    const { code } = await w.waitClosed();
    assert.equal(code, 1006, 'ended without a close frame');
    assert.equal(w.frames.filter((f) => f.event === 'pusher:error').length, 0, w.frames.map((f) => f.text).join('\n'));

    // pusher-js sends pusher:ping after activity_timeout; here it sends client messages itself.
    const p = pusherClient(srv, { app: APP });
    cleanup(t).add(() => p.disconnect());
    const first = await whenConnected(p);
    p.subscribe('a');
    p.subscribe('b');
    p.subscribe('c'); // the third message: terminated
    await state(p, 'connecting');
    const again = await whenConnected(p);
    assert.notEqual(again, first, 'a new socket');
  });

  test('from Reverb env names, without terminate: 4301 on each message over the limit', async (t) => {
    const srv = await startServer({
      apps: [APP],
      env: { REVERB_APP_RATE_LIMITING_ENABLED: '(true)', REVERB_APP_RATE_LIMIT_MAX_ATTEMPTS: '1' },
    });
    cleanup(t).add(() => srv.stop());
    const w = await Wire.connect(srv);
    cleanup(t).add(() => w.close());
    await w.roundTrip();
    w.send(ping);
    w.send(ping);
    await w.next(isRateError);
    await w.next(isRateError);
    assert.equal(w.open, true);
  });

  test('disabled by default: many messages, no error', async (t) => {
    const srv = await startServer({ apps: [APP] });
    cleanup(t).add(() => srv.stop());
    const w = await Wire.connect(srv);
    cleanup(t).add(() => w.close());
    for (let i = 0; i < 100; i++) w.send(ping);
    for (let i = 0; i < 100; i++) await w.next('pusher:pong');
    assert.equal(w.frames.filter((f) => f.event === 'pusher:error').length, 0);
  });

  test('REVERB_APP_RATE_LIMITING_ENABLED=1 stops start-up naming the variable (Reverb would leave the limit off)', async () => {
    const cfg = writeConfig({ apps: [APP] });
    try {
      const r = await runBinary(['config', 'check', '--config', cfg.file], { env: { REVERB_APP_RATE_LIMITING_ENABLED: '1' } });
      assert.equal(r.code, 1, r.stdout + r.stderr);
      assert.match(r.stderr, /REVERB_APP_RATE_LIMITING_ENABLED/);
    } finally {
      cfg.remove();
    }
  });
});

describe('config check and REVERB_* variables', () => {
  test('warns about a REVERB_* variable it does not know, notes a known one it does not apply, still exits 0', async () => {
    const cfg = writeConfig({ apps: [APP] });
    try {
      const r = await runBinary(['config', 'check', '--config', cfg.file], {
        env: { REVERB_APP_RATE_LIMIT_ENABLE: 'true', REVERB_APP_KEY: 'rl-key', REDIS_TIMEOUT: '60', REVERB_HOST: 'ws.example.com' },
      });
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.stderr, /warning: REVERB_APP_RATE_LIMIT_ENABLE is set but is not a Reverb setting reverbgo knows/);
      assert.match(r.stderr, /note: REDIS_TIMEOUT is set but not applied: /);
      assert.doesNotMatch(r.stderr, /REVERB_APP_KEY|REVERB_HOST/);
      assert.match(r.stdout, /rate_limiting:\n\s+enabled: false\n\s+max_attempts: 60\n\s+decay_seconds: 60\n\s+terminate_on_limit: false/);
    } finally {
      cfg.remove();
    }
  });
});
