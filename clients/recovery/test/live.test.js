// A live pusher:resume_failed (the server could not deliver every event in serial order: a
// gap the history no longer has, or a new epoch) with real pusher-js 8.6.0 and laravel-echo
// 2.5.0, against a fake server that sends exactly the frames of the contract: the position
// becomes the one it names, the new epoch's events pass, a repeat of one is dropped, the
// app is called, and the next resume names the told epoch.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { pusherClient, echoClient, subscribed, reconnected, eventually, cleanup, uid } from './helpers.js';
import { startFakeServer } from './fakeserver.js';

const ev = (channel, serial, n) => ({ event: 'ev', channel, data: JSON.stringify({ n }), serial });
const told = (channel, reason, epoch, serial) => ({ event: 'pusher:resume_failed', channel, data: JSON.stringify({ reason, epoch, serial }) });

describe('a live pusher:resume_failed', () => {
  let fake;
  before(async () => {
    fake = await startFakeServer({ position: () => ({ epoch: 'E', serial: 0 }) });
  });
  after(async () => {
    if (fake) await fake.close();
  });

  test('pusher-js: a new epoch from serial 1 passes, its repeat is dropped, the app is told, the resume names it', async (t) => {
    const bag = cleanup(t);
    const calls = [];
    const { pusher, recovery } = pusherClient(fake.port, { recovery: { onResumeFailed: (channel, data) => calls.push([channel, data]) } });
    bag.add(() => pusher.disconnect());
    const name = uid('public-live.');
    const channel = pusher.subscribe(name);
    const got = [];
    const failed = [];
    channel.bind('ev', (d) => got.push(d.n));
    channel.bind('pusher:resume_failed', (d) => failed.push(d));
    await subscribed(channel);
    const socketId = pusher.connection.socket_id;
    for (const [serial, n] of [[1, 'a1'], [2, 'a2'], [3, 'a3']]) fake.send(ev(name, serial, n));
    fake.send(told(name, 'epoch_changed', 'F', 0));
    for (const [serial, n] of [[1, 'b1'], [2, 'b2'], [1, 'b1 again'], [3, 'b3']]) fake.send(ev(name, serial, n));
    await eventually(() => got.includes('b3'), { what: 'the last event' });
    assert.deepEqual(got, ['a1', 'a2', 'a3', 'b1', 'b2', 'b3']);
    const data = { reason: 'epoch_changed', epoch: 'F', serial: 0 };
    assert.deepEqual(failed, [data], 'pusher-js emits it on the channel');
    assert.deepEqual(calls, [[name, data]], 'onResumeFailed');
    assert.deepEqual(recovery.position(name), { epoch: 'F', serial: 3 });
    const before = fake.subscribes.length;
    fake.drop();
    await reconnected(pusher);
    await eventually(() => fake.subscribes.length > before, { what: 'the resubscribe' });
    assert.deepEqual(fake.subscribes.at(-1).resume, { epoch: 'F', serial: 3, socket_id: socketId });
  });

  test('Echo: a too_old gap in the epoch and a new epoch starting above 1, .listen and onResumeFailed both see them', async (t) => {
    const bag = cleanup(t);
    const calls = [];
    const { echo, pusher, recovery } = echoClient(fake.port, { url: 'http://127.0.0.1:9' }, { recovery: { onResumeFailed: (channel, data) => calls.push([channel, data]) } });
    bag.add(() => echo.disconnect());
    const name = uid('live.');
    const got = [];
    const failed = [];
    echo.channel(name).listen('.ev', (d) => got.push(d.n)).listen('.pusher:resume_failed', (d) => failed.push(d));
    await subscribed(pusher.channel(name));
    fake.send(ev(name, 1, 1));
    fake.send(ev(name, 2, 2));
    fake.send(told(name, 'too_old', 'E', 10)); // 3..10 are gone
    fake.send(ev(name, 9, 'late')); // a frame of the gap arriving after it was told
    fake.send(ev(name, 11, 11));
    fake.send(told(name, 'epoch_changed', 'G', 3)); // the new epoch's first kept event is 4
    for (const s of [4, 5, 5, 6]) fake.send(ev(name, s, `g${s}`));
    await eventually(() => got.includes('g6'), { what: 'the last event' });
    assert.deepEqual(got, [1, 2, 11, 'g4', 'g5', 'g6']);
    assert.deepEqual(failed, [{ reason: 'too_old', epoch: 'E', serial: 10 }, { reason: 'epoch_changed', epoch: 'G', serial: 3 }]);
    assert.deepEqual(calls.map(([c, d]) => [c, d.reason]), [[name, 'too_old'], [name, 'epoch_changed']]);
    assert.deepEqual(recovery.position(name), { epoch: 'G', serial: 6 });
  });
});
