'use strict';
// Graceful shutdown: SIGTERM tells every client to reconnect (pusher:error 4200 + close 4200)
// and the process exits 0; pusher-js then reconnects and resubscribes to the next server
// started on the same port.
const { describe, test } = require('node:test');
const assert = require('node:assert/strict');
const { startServer } = require('../lib/server');
const { Wire } = require('../lib/wire');
const { TcpWs } = require('../lib/tcpws');
const { sdk, pusherClient, whenConnected, subscribe, inbox, state } = require('../lib/clients');
const { cleanup, uid, deadline, eventually } = require('../lib/util');

const APPS = [{ app_id: 'sd', key: 'sd-key', secret: 'sd-secret' }];

// Each test has its own server, so they run side by side: the pusher-js reconnect takes ~15 s
// because pusher-js (Node build) only retries a refused ws connection after its 15 s
// strategy timeout, which is client behaviour, not the server's.
describe('graceful shutdown', { concurrency: true }, () => {

  test('SIGTERM: every raw client gets pusher:error 4200 then close 4200; exit code 0', async (t) => {
    const bag = cleanup(t);
    const srv = await startServer({ apps: APPS });
    bag.add(() => srv.stop('SIGKILL'));
    const idle = await Wire.connect(srv);
    const pub = await Wire.connect(srv);
    const pres = await Wire.connect(srv);
    for (const w of [idle, pub, pres]) bag.add(() => w.close());
    await pub.subscribe(uid('pub-'));
    await pres.authSubscribe(uid('presence-sd-'), { user_id: 'u' });

    srv.proc.kill('SIGTERM');
    for (const w of [idle, pub, pres]) {
      const err = await w.next('pusher:error');
      assert.equal(err.data.code, 4200, err.text);
      const { code } = await w.waitClosed();
      assert.equal(code, 4200);
    }
    const exit = await deadline(srv.exited, 15000, 'process exit');
    assert.deepEqual(exit, { code: 0, signal: null }, srv.logs());
  });

  test('SIGTERM with 100 connected clients: every one gets close 4200', async (t) => {
    const srv = await startServer({ apps: APPS });
    cleanup(t).add(() => srv.stop('SIGKILL'));
    const wires = await Promise.all(Array.from({ length: 100 }, () => Wire.connect(srv)));
    cleanup(t).add(() => wires.forEach((w) => w.close()));
    srv.proc.kill('SIGTERM');
    const codes = await Promise.all(wires.map((w) => w.waitClosed(10000).then((c) => c.code)));
    assert.deepEqual([...new Set(codes)], [4200]);
    assert.deepEqual(await deadline(srv.exited, 15000, 'process exit'), { code: 0, signal: null });
  });

  test('clients that never answer the close frame hold shutdown no longer than shutdown_timeout', async (t) => {
    const srv = await startServer({ apps: APPS, server: { shutdown_timeout: 1 } });
    cleanup(t).add(() => srv.stop('SIGKILL'));
    const stuck = [];
    for (let i = 0; i < 3; i++) {
      const c = await TcpWs.connect(srv);
      c.sock.pause(); // reads nothing, so never sees (or answers) the close frame
      stuck.push(c);
    }
    cleanup(t).add(() => stuck.forEach((c) => c.destroy()));
    const started = Date.now();
    srv.proc.kill('SIGTERM');
    assert.deepEqual(await deadline(srv.exited, 8000, 'process exit'), { code: 0, signal: null });
    assert.ok(Date.now() - started < 4000, `exit took ${Date.now() - started} ms with shutdown_timeout 1`);
  });

  test('SIGINT shuts down the same way', async (t) => {
    const srv = await startServer({ apps: APPS });
    cleanup(t).add(() => srv.stop('SIGKILL'));
    const w = await Wire.connect(srv);
    cleanup(t).add(() => w.close());
    srv.proc.kill('SIGINT');
    assert.equal((await w.waitClosed()).code, 4200);
    assert.deepEqual(await deadline(srv.exited, 15000, 'process exit'), { code: 0, signal: null });
  });

  test('pusher-js reconnects and resubscribes to a new server on the same port', async (t) => {
    const bag = cleanup(t);
    const first = await startServer({ apps: APPS });
    bag.add(() => first.stop('SIGKILL'));
    let second;
    bag.add(() => second && second.stop());
    const p = pusherClient(first);
    // Disconnect pusher-js before any server stops in cleanup: a pusher-js that is retrying a
    // dead port when disconnect() is called can leave timers behind that keep node alive.
    bag.add(() => p.disconnect());
    const oldId = await whenConnected(p);
    const name = uid('private-survive-');
    const { channel } = await subscribe(p, name);
    const got = inbox(channel, 'after-restart');
    const errors = inbox(p.connection, 'error');

    assert.deepEqual(await first.stop('SIGTERM'), { code: 0, signal: null });
    const [err] = await errors.wait(1);
    // pusher-js reports protocol errors of an open connection as {type: 'PusherError', data}
    assert.equal(err.data.code, 4200, JSON.stringify(err));
    await eventually(() => p.connection.state !== 'connected', { what: 'pusher-js to leave "connected"' });

    second = await startServer({ apps: APPS, server: { port: first.port } });
    await state(p, 'connected', 20000);
    assert.notEqual(p.connection.socket_id, oldId, 'a new socket on the new server');
    const api = sdk(second);
    // pusher-js resubscribes on its own; wait until the new server has the subscriber
    await eventually(async () => (await (await api.get({ path: `/channels/${name}` })).json()).occupied, { what: 'resubscription on the new server' });
    await api.trigger(name, 'after-restart', { ok: true });
    assert.deepEqual((await got.wait(1))[0], { ok: true });
    p.disconnect();
  });
});
