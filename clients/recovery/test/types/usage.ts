// Compiled by test/types.test.js with tsc --noEmit: index.d.ts against pusher-js's and
// laravel-echo's own types, as an app would use them.
import Pusher from 'pusher-js';
import Echo from 'laravel-echo';
import enableRecoveryDefault, { enableRecovery, RecoveryState, type RecoveryHandle, type ResumeFailed } from '@reverbgo/echo-recovery';

const pusher = new Pusher('key', { cluster: 'mt1' });
const handle: RecoveryHandle = enableRecovery(pusher);
const pos = handle.position('private-orders.1');
if (pos) {
  const serial: number = pos.serial;
  const epoch: string = pos.epoch;
  void serial;
  void epoch;
}
handle.disable();
enableRecoveryDefault(pusher);

const echo = new Echo({ broadcaster: 'reverb', key: 'key', Pusher });
enableRecovery(echo.connector.pusher, {
  onResumeFailed: (channel: string, e: ResumeFailed) => console.log(channel, e.reason, e.epoch, e.serial),
});
echo.private('orders.1').listen('.pusher:resume_failed', (e: ResumeFailed) => console.log(e.reason, e.epoch, e.serial));

const st = new RecoveryState();
const keep: boolean = st.accept('{}', 'socket');
const resume = st.resumeFor('c');
if (resume) console.log(resume.epoch, resume.serial, resume.socket_id);
void keep;

// @ts-expect-error not a pusher-js client
enableRecovery({});
// @ts-expect-error onResumeFailed takes (channel, data)
enableRecovery(pusher, { onResumeFailed: (n: number) => n });
