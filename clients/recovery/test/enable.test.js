// enableRecovery on a fake pusher-js client (the few members it touches, shaped as in
// pusher-js 8: connection.bind/unbind/state/socket_id, connection.connection.transport.socket
// with onmessage, send_event): what it sends and what it lets through, without a server.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { enableRecovery } from '../index.js';

class FakePusher {
  constructor() {
    this.sent = []; // [name, data, channel]
    this.delivered = []; // frames that reached pusher-js
    this.handlers = new Map();
    this.connection = {
      state: 'initialized',
      socket_id: null,
      connection: null,
      bind: (ev, fn) => this.handlers.set(ev, [...(this.handlers.get(ev) || []), fn]),
      unbind: (ev, fn) => this.handlers.set(ev, (this.handlers.get(ev) || []).filter((f) => f !== fn)),
    };
  }

  send_event(name, data, channel) {
    this.sent.push([name, data, channel]);
    return true;
  }

  /** A new socket: connected with socketId, then pusher-js resubscribes `channels`. */
  connect(socketId, channels = []) {
    const socket = { onmessage: (e) => this.delivered.push(e.data) };
    this.connection.connection = { transport: { socket } };
    this.connection.socket_id = socketId;
    this.connection.state = 'connected';
    for (const c of channels) this.send_event('pusher:subscribe', { auth: '', channel: c });
    for (const fn of this.handlers.get('connected') || []) fn({ socket_id: socketId });
    this.socket = socket;
  }

  frame(obj) {
    this.socket.onmessage({ data: JSON.stringify(obj) });
  }
}

const C = 'private-orders.1';
const ok = (serial, epoch = 'E') => ({ event: 'pusher_internal:subscription_succeeded', channel: C, data: '{}', serial, epoch });
const ev = (serial) => ({ event: 'ev', channel: C, data: `{"s":${serial}}`, serial });
const subscribes = (p) => p.sent.filter(([n]) => n === 'pusher:subscribe').map(([, d]) => d);

test('first subscribe plain; after a reconnect the subscribe resumes from the last serial and the old socket id', () => {
  const p = new FakePusher();
  enableRecovery(p);
  p.connect('1.1', [C]);
  p.frame(ok(4));
  p.frame(ev(5));
  p.connect('2.2', [C]);
  const [first, second] = subscribes(p);
  assert.equal(first.resume, undefined);
  assert.deepEqual(second, { auth: '', channel: C, resume: { epoch: 'E', serial: 5, socket_id: '1.1' } });
});

test('a frame with a serial already seen does not reach pusher-js; others do', () => {
  const p = new FakePusher();
  enableRecovery(p);
  p.connect('1.1', [C]);
  p.frame(ok(0));
  for (const s of [1, 2, 2, 3, 2]) p.frame(ev(s));
  const serials = p.delivered.map((f) => JSON.parse(f).serial);
  assert.deepEqual(serials, [0, 1, 2, 3]);
});

test('unsubscribe forgets the channel: a later subscribe starts fresh', () => {
  const p = new FakePusher();
  enableRecovery(p);
  p.connect('1.1', [C]);
  p.frame(ok(3));
  p.send_event('pusher:unsubscribe', { channel: C });
  p.send_event('pusher:subscribe', { auth: '', channel: C });
  assert.equal(subscribes(p)[1].resume, undefined);
});

test('called again it returns the same handle; disable restores send_event and stops filtering', () => {
  const p = new FakePusher();
  const own = p.send_event;
  const h = enableRecovery(p);
  assert.equal(enableRecovery(p), h);
  p.connect('1.1', [C]);
  p.frame(ok(0));
  p.frame(ev(1));
  assert.deepEqual(h.position(C), { epoch: 'E', serial: 1 });
  h.disable();
  assert.equal(p.send_event, own);
  p.frame(ev(1));
  assert.equal(p.delivered.length, 3, 'the duplicate passes once disabled');
  p.connect('2.2', [C]);
  assert.equal(subscribes(p)[1].resume, undefined);
});

test('already connected when enabled: the current socket is read at once', () => {
  const p = new FakePusher();
  p.connect('1.1');
  enableRecovery(p);
  p.send_event('pusher:subscribe', { auth: '', channel: C });
  p.frame(ok(7));
  p.frame(ev(7));
  assert.equal(p.delivered.length, 1);
});

test('not a pusher-js client: a TypeError naming what is expected', () => {
  for (const bad of [undefined, {}, { connection: {} }]) {
    assert.throws(() => enableRecovery(bad), /echo\.connector\.pusher/);
  }
});
