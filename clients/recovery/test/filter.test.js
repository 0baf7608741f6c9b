// RecoveryState on its own: which raw frames pass, which are dropped as duplicates, and
// what resume a later subscribe carries.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { RecoveryState } from '../index.js';

const C = 'private-orders.1';
const ok = (epoch, serial, channel = C) =>
  JSON.stringify({ event: 'pusher_internal:subscription_succeeded', channel, data: '{}', serial, epoch });
const ev = (serial, channel = C) => JSON.stringify({ event: 'ev', channel, data: `{"s":${serial}}`, serial });
const failed = (reason, channel = C) => JSON.stringify({ event: 'pusher:resume_failed', channel, data: JSON.stringify({ reason }) });

// Each case: frames fed in order (a string, or {resume: true} for a resubscribe), the
// accept() results of the frames, and the position and resume left at the end.
const cases = [
  {
    name: 'a subscription then events in order: all pass',
    steps: [ok('E', 3), ev(4), ev(5)],
    want: [true, true, true],
    position: { epoch: 'E', serial: 5 },
  },
  {
    name: 'an event seen again is dropped, as is an older one',
    steps: [ok('E', 0), ev(1), ev(2), ev(3), ev(3), ev(2), ev(4)],
    want: [true, true, true, true, false, false, true],
    position: { epoch: 'E', serial: 4 },
  },
  {
    name: 'a resume in the same epoch keeps the last serial, the replay moves it on',
    steps: [ok('E', 0), ev(1), ev(2), { resume: true }, ok('E', 5), ev(3), ev(4), ev(5), ev(5), ev(6)],
    want: [true, true, true, true, true, true, true, false, true],
    position: { epoch: 'E', serial: 6 },
  },
  {
    name: 'a resume into a new epoch starts at the answered position',
    steps: [ok('E', 0), ev(1), ev(2), { resume: true }, ok('F', 7), failed('epoch_changed'), ev(7), ev(8)],
    want: [true, true, true, true, true, false, true],
    position: { epoch: 'F', serial: 8 },
  },
  {
    name: 'too_old: the replay is not coming, the answered position holds',
    steps: [ok('E', 0), ev(1), { resume: true }, ok('E', 40), failed('too_old'), ev(40), ev(41)],
    want: [true, true, true, true, false, true],
    position: { epoch: 'E', serial: 41 },
  },
  {
    name: 'serial 1 after a higher one: the channel started over (history_ttl), later resumes get epoch_changed',
    steps: [ok('E', 0), ev(1), ev(2), ev(3), ev(1), ev(2)],
    want: [true, true, true, true, true, true],
    position: { epoch: 'restarted', serial: 2 },
  },
  {
    name: 'frames without serial and other channels pass untouched',
    steps: [ok('E', 2), '{"event":"client-typing","channel":"private-orders.1","data":"{}"}', ev(1, 'other'), '{"event":"pusher:pong","data":"{}"}', 'not json "serial"'],
    want: [true, true, true, true, true],
    position: { epoch: 'E', serial: 2 },
  },
  {
    name: 'a subscription without epoch (recovery off for the channel) records nothing',
    steps: ['{"event":"pusher_internal:subscription_succeeded","channel":"private-orders.1","data":"{}"}', ev(1)],
    want: [true, true],
    position: undefined,
  },
];

for (const c of cases) {
  test(c.name, () => {
    const st = new RecoveryState();
    const got = [];
    for (const step of c.steps) {
      if (typeof step === 'object') {
        st.resumeFor(C);
        continue;
      }
      got.push(st.accept(step, 'sock.1'));
    }
    assert.deepEqual(got, c.want);
    assert.deepEqual(st.position(C), c.position);
  });
}

test('resumeFor: epoch, last serial and the socket id the position was recorded on; forget clears it', () => {
  const st = new RecoveryState();
  assert.equal(st.resumeFor(C), undefined, 'nothing before a subscription');
  st.accept(ok('E', 4), '123.456');
  st.accept(ev(5), '123.456');
  assert.deepEqual(st.resumeFor(C), { epoch: 'E', serial: 5, socket_id: '123.456' });
  st.forget(C);
  assert.equal(st.resumeFor(C), undefined, 'forgotten after an unsubscribe');
});
