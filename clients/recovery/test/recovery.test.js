// The module against the built reverbgo (one node, apps[].recovery on) with real pusher-js
// 8.6.0 and laravel-echo 2.5.0: reconnects through a TCP proxy while the HTTP API keeps
// publishing, toOthers, a server restart, a long cut-off, duplicate frames. Each test fails
// with REC_WITHOUT_MODULE=1 (the same clients without enableRecovery).
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import {
  APPS, startRecoveryServer, startProxy, startAuthApp, sdk, pusherClient, echoClient, subscribed,
  state, reconnected, inbox, publisher, sequence, uid, cleanup, eventually, sleep,
} from './helpers.js';

describe('enableRecovery against reverbgo', () => {
  let server;
  let proxy;
  let authApp;
  before(async () => {
    server = await startRecoveryServer();
    proxy = await startProxy(server.port);
    authApp = await startAuthApp({ sdk: sdk(server.port) });
  });
  after(async () => {
    if (authApp) await authApp.close();
    if (proxy) await proxy.close();
    if (server) await server.stop();
  });

  test('pusher-js: two reconnects while the HTTP API publishes: every event once, in order, serials up to the last', async (t) => {
    const bag = cleanup(t);
    const { pusher, recovery } = pusherClient(proxy.port, { signPort: server.port });
    bag.add(() => pusher.disconnect());
    const name = uid('public-rec.');
    const box = inbox((push) => pusher.subscribe(name).bind('ev', (d) => push(d.n)));
    await subscribed(pusher.channel(name));
    const pub = publisher(sdk(server.port), name);
    for (let i = 0; i < 2; i++) {
      await eventually(() => box.got.length > 0 && pub.count > box.got.length, { what: 'events flowing' });
      proxy.drop();
      await state(pusher, 'connecting');
      const during = pub.count;
      await reconnected(pusher);
      await eventually(() => pub.count > during + 5, { what: 'events published across the reconnect' });
    }
    const total = await pub.stop();
    const got = await box.wait(total);
    await sleep(100); // a late duplicate would show here
    assert.deepEqual(box.got, sequence(total));
    assert.deepEqual(recovery.position(name).serial, total);
  });

  test('Echo private channel: reconnects while publishing, every event once and in order', async (t) => {
    const bag = cleanup(t);
    const { echo, pusher, recovery } = echoClient(proxy.port, authApp);
    bag.add(() => echo.disconnect());
    const name = uid('orders.');
    const box = inbox((push) => echo.private(name).listen('.ev', (d) => push(d.n)));
    await subscribed(pusher.channel(`private-${name}`));
    const pub = publisher(sdk(server.port), `private-${name}`);
    for (let i = 0; i < 2; i++) {
      await eventually(() => box.got.length > 0 && pub.count > box.got.length, { what: 'events flowing' });
      proxy.drop();
      await state(pusher, 'connecting');
      const during = pub.count;
      await reconnected(pusher);
      await eventually(() => pub.count > during + 5, { what: 'events published across the reconnect' });
    }
    const total = await pub.stop();
    await box.wait(total);
    await sleep(100);
    assert.deepEqual(box.got, sequence(total));
    assert.equal(recovery.position(`private-${name}`).serial, total);
  });

  test('toOthers: an event published with the old socket id is not replayed, the rest is', async (t) => {
    const bag = cleanup(t);
    const { pusher } = pusherClient(proxy.port, { signPort: server.port });
    bag.add(() => pusher.disconnect());
    const name = uid('private-rec.');
    const box = inbox((push) => pusher.subscribe(name).bind('ev', (d) => push(d.n)));
    await subscribed(pusher.channel(name));
    const api = sdk(server.port);
    await api.trigger(name, 'ev', { n: 1 });
    await box.wait(1);
    const old = pusher.connection.socket_id;
    proxy.drop();
    // While it is away: its own broadcast, as Laravel's broadcast(...)->toOthers() does with
    // the X-Socket-ID the page sent (the stand-in app passes it as the API's socket_id), then another's.
    const res = await fetch(`${authApp.url}/broadcast`, {
      method: 'POST', headers: { 'content-type': 'application/json', 'x-socket-id': old },
      body: JSON.stringify({ channels: [name], event: 'ev', data: { n: 2 } }),
    });
    assert.equal(res.status, 200);
    await api.trigger(name, 'ev', { n: 3 });
    await reconnected(pusher);
    await box.wait(2);
    await api.trigger(name, 'ev', { n: 4 });
    await box.wait(3);
    assert.deepEqual(box.got, [1, 3, 4]);
  });

  test('duplicate frames: a frame whose serial was seen is dropped before pusher-js handles it', async (t) => {
    const bag = cleanup(t);
    const { pusher } = pusherClient(server.port);
    bag.add(() => pusher.disconnect());
    const name = uid('public-dup.');
    const box = inbox((push) => pusher.subscribe(name).bind('ev', (d) => push(d.n)));
    await subscribed(pusher.channel(name));
    // Capture the raw frames as the socket delivers them, to deliver one again.
    const socket = pusher.connection.connection.transport.socket;
    const frames = [];
    const onmessage = socket.onmessage;
    socket.onmessage = (e) => {
      frames.push(e.data);
      return onmessage.call(socket, e);
    };
    const api = sdk(server.port);
    await api.trigger(name, 'ev', { n: 1 });
    await api.trigger(name, 'ev', { n: 2 });
    await box.wait(2);
    const second = frames.find((f) => f.includes('"serial":2'));
    assert.ok(second, `the second event carries serial 2: ${frames.join('\n')}`);
    socket.onmessage({ data: second }); // the network delivers it again
    await api.trigger(name, 'ev', { n: 3 });
    await box.wait(3);
    await sleep(50);
    assert.deepEqual(box.got, [1, 2, 3]);
  });

  test('too_old: cut off by a frozen network while more than history_size events are published', async (t) => {
    const bag = cleanup(t);
    const cut = await startProxy(server.port);
    bag.add(() => cut.close());
    // Short ping and pong timeouts so pusher-js notices the frozen socket in about 2 s.
    const { pusher, recovery } = pusherClient(cut.port, { app: APPS[1], signPort: server.port, options: { activityTimeout: 1000, pongTimeout: 1000 } });
    bag.add(() => pusher.disconnect());
    const name = uid('private-small.');
    const channel = pusher.subscribe(name);
    const box = inbox((push) => channel.bind('ev', (d) => push(d.n)));
    const failed = inbox((push) => channel.bind('pusher:resume_failed', push));
    await subscribed(channel);
    const api = sdk(server.port, APPS[1]);
    await api.trigger(name, 'ev', { n: 1 });
    await box.wait(1);
    cut.pause();
    for (let n = 2; n <= 16; n++) await api.trigger(name, 'ev', { n }); // 15 > history_size 10
    await state(pusher, 'connecting', 10000); // its ping went unanswered
    cut.resume();
    await reconnected(pusher, 15000);
    const [told] = await failed.wait(1);
    assert.equal(told.reason, 'too_old');
    assert.equal(told.serial, 16, 'the events that follow start after the last one published');
    await api.trigger(name, 'ev', { n: 17 });
    await eventually(() => box.got.includes(17), { what: 'the live event after too_old' });
    assert.deepEqual(box.got, [1, 17], 'nothing of the gap is replayed, live events continue');
    assert.deepEqual(recovery.position(name), { epoch: told.epoch, serial: 17 });
  });
});

describe('enableRecovery across a server restart', () => {
  test('Echo: the new process has no history, .listen(".pusher:resume_failed") gets epoch_changed', async (t) => {
    const bag = cleanup(t);
    let server = await startRecoveryServer();
    const port = server.port;
    bag.add(() => server.stop());
    const authApp = await startAuthApp({ sdk: sdk(port) });
    bag.add(() => authApp.close());
    const { echo, pusher } = echoClient(port, authApp);
    bag.add(() => echo.disconnect());
    const name = uid('orders.');
    const failed = [];
    const got = [];
    echo.private(name).listen('.ev', (d) => got.push(d.n)).listen('.pusher:resume_failed', (d) => failed.push(d));
    await subscribed(pusher.channel(`private-${name}`));
    await sdk(port).trigger(`private-${name}`, 'ev', { n: 1 });
    await eventually(() => got.length === 1, { what: 'the first event' });
    await server.stop();
    server = await startRecoveryServer({ port });
    await reconnected(pusher, 15000);
    await eventually(() => failed.length === 1, { what: 'pusher:resume_failed' });
    assert.deepEqual(failed.map((d) => [d.reason, d.serial]), [['epoch_changed', 0]]);
    await sdk(port).trigger(`private-${name}`, 'ev', { n: 2 });
    await eventually(() => got.length === 2, { what: 'a live event of the new process (serial 1 again)' });
    assert.deepEqual(got, [1, 2]);
  });
});
