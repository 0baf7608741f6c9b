// RecoveryState on its own: which raw frames pass, which are dropped as duplicates, and
// what resume a later subscribe carries.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { RecoveryState } from '../index.js';

const C = 'private-orders.1';
const ok = (epoch, serial, channel = C) =>
  JSON.stringify({ event: 'pusher_internal:subscription_succeeded', channel, data: '{}', serial, epoch });
const ev = (serial, channel = C) => JSON.stringify({ event: 'ev', channel, data: `{"s":${serial}}`, serial });
// pusher:resume_failed as the server sends it: data {reason, epoch, serial}, the position
// the events that follow start after (epoch undefined: an older server's {reason} alone).
const failed = (reason, epoch, serial, channel = C) =>
  JSON.stringify({ event: 'pusher:resume_failed', channel, data: JSON.stringify(epoch === undefined ? { reason } : { reason, epoch, serial }) });

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
    name: 'a resume into a new epoch starts at the position resume_failed names',
    steps: [ok('E', 0), ev(1), ev(2), { resume: true }, ok('F', 7), failed('epoch_changed', 'F', 7), ev(7), ev(8)],
    want: [true, true, true, true, true, false, true],
    position: { epoch: 'F', serial: 8 },
  },
  {
    name: 'too_old: the replay is not coming, the named position holds',
    steps: [ok('E', 0), ev(1), { resume: true }, ok('E', 40), failed('too_old', 'E', 40), ev(40), ev(41)],
    want: [true, true, true, true, false, true],
    position: { epoch: 'E', serial: 41 },
  },
  {
    name: 'resume_failed without a position (an older server): continue from the answered one',
    steps: [ok('E', 0), ev(1), { resume: true }, ok('E', 40), failed('too_old'), ev(40), ev(41)],
    want: [true, true, true, true, false, true],
    position: { epoch: 'E', serial: 41 },
  },
  {
    name: 'a live resume_failed names a new epoch: its events from 1 pass, a repeat of one is dropped',
    steps: [ok('E', 0), ev(1), ev(2), ev(3), failed('epoch_changed', 'F', 0), ev(1), ev(2), ev(1)],
    want: [true, true, true, true, true, true, true, false],
    position: { epoch: 'F', serial: 2 },
  },
  {
    name: 'a live resume_failed into a new epoch whose first event is above 1: they pass',
    steps: [ok('E', 0), ev(1), ev(2), ev(3), ev(4), ev(5), failed('epoch_changed', 'F', 3), ev(4), ev(5), ev(6)],
    want: [true, true, true, true, true, true, true, true, true, true],
    position: { epoch: 'F', serial: 6 },
  },
  {
    name: 'a live too_old in the same epoch: the position skips the gap, a late frame of it is dropped',
    steps: [ok('E', 0), ev(1), failed('too_old', 'E', 40), ev(39), ev(41)],
    want: [true, true, true, false, true],
    position: { epoch: 'E', serial: 41 },
  },
  {
    name: 'no guessing: serial 1 after a higher one without a told epoch is a duplicate',
    steps: [ok('E', 0), ev(1), ev(2), ev(3), ev(1), ev(2)],
    want: [true, true, true, true, false, false],
    position: { epoch: 'E', serial: 3 },
  },
  {
    name: 'a resume_failed for a channel not recorded yet records its position',
    steps: [failed('epoch_changed', 'F', 5), ev(5), ev(6)],
    want: [true, false, true],
    position: { epoch: 'F', serial: 6 },
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

test('resumeFor after a live resume_failed: the told epoch and the serials after it', () => {
  const st = new RecoveryState();
  st.accept(ok('E', 0), '1.1');
  st.accept(ev(1), '1.1');
  st.accept(ev(2), '1.1');
  st.accept(failed('epoch_changed', 'F', 0), '1.1');
  st.accept(ev(1), '1.1');
  assert.deepEqual(st.resumeFor(C), { epoch: 'F', serial: 1, socket_id: '1.1' });
});

test('read returns the resume_failed data and channel; accept stays its boolean', () => {
  const st = new RecoveryState();
  st.accept(ok('E', 0), '1.1');
  assert.deepEqual(st.read(failed('too_old', 'E', 9), '1.1'), { pass: true, channel: C, failed: { reason: 'too_old', epoch: 'E', serial: 9 } });
  assert.equal(st.accept(ev(9), '1.1'), false);
});
