// Recovery for pusher-js (and Laravel Echo, which drives it) against reverbgo's
// apps[].recovery (issue 23). It keeps, per channel, the epoch and last serial seen and the
// socket id they were seen on; when pusher-js resubscribes after a reconnect it adds
// data.resume = {epoch, serial, socket_id} to the pusher:subscribe, so the server replays
// what was missed; and it drops any event frame whose serial was already seen under the
// channel's epoch.
//
// The epoch is what the server says it is: the "epoch" of subscription_succeeded, or the
// data of pusher:resume_failed {reason, epoch, serial}, which the server sends after a
// failed resume and also on a live socket when it cannot deliver every event in serial
// order (a gap the history no longer has, or a new epoch). The events that follow it are
// those after (epoch, serial): that pair becomes the channel's position.
//
// Where it hooks into pusher-js 8 (read from its source):
//   - pusher.send_event(name, data, channel): Channel.subscribe/unsubscribe send through it;
//     wrapped on the instance to add `resume` and to forget unsubscribed channels.
//   - The raw frames: pusher-js decodes each WebSocket message into {event, channel, data,
//     user_id}, dropping top-level fields such as "serial" and "epoch". So the module reads
//     the frame before that, on the WebSocket's onmessage (the transport sets it when it
//     opens the socket): pusher.connection.connection.transport.socket.onmessage, wrapped
//     each time the connection manager reports 'connected' (a new socket). 'connected' is
//     emitted synchronously after the handshake frame, before any later frame is read.
//   - pusher:resume_failed reaches the app without help: pusher-js emits any non-internal
//     event of a channel on it, so channel.bind('pusher:resume_failed') / Echo's
//     .listen('.pusher:resume_failed') get {reason, epoch, serial}; the onResumeFailed
//     option is one callback for every channel.

const WRAPPED = Symbol.for('reverbgo.echo-recovery');

/**
 * The channels' positions (kept across connections) and the duplicate filter. Exported for
 * unit tests and for clients other than pusher-js; enableRecovery keeps one per client.
 */
export class RecoveryState {
  constructor() {
    /** @type {Map<string, {epoch: string, serial: number, socketId: string, position: number, resumed: boolean}>} */
    this.channels = new Map();
  }

  /**
   * The resume object for a subscribe to `channel`, or undefined when nothing is known
   * (never subscribed with recovery, or forgotten). Marks the channel as resuming.
   */
  resumeFor(channel) {
    const st = this.channels.get(channel);
    if (!st || !st.epoch) return undefined;
    st.resumed = true;
    const resume = { epoch: st.epoch, serial: st.serial };
    if (st.socketId) resume.socket_id = st.socketId;
    return resume;
  }

  /** Forgets a channel (unsubscribed: a later subscribe starts fresh). */
  forget(channel) {
    this.channels.delete(channel);
  }

  /** The recorded {epoch, serial} of a channel, or undefined. */
  position(channel) {
    const st = this.channels.get(channel);
    return st ? { epoch: st.epoch, serial: st.serial } : undefined;
  }

  /**
   * Looks at one raw frame (the WebSocket message text) received on socket `socketId`.
   * Returns false when the frame must be dropped (an event whose serial was already seen),
   * true otherwise (also for frames it cannot read: pusher-js reports those itself).
   */
  accept(text, socketId) {
    return this.read(text, socketId).pass;
  }

  /**
   * accept, also returning the data of a pusher:resume_failed frame ({reason, epoch,
   * serial} as sent) in `failed`: {pass, channel, failed}.
   */
  read(text, socketId) {
    const pass = { pass: true };
    if (typeof text !== 'string') return pass;
    if (!text.includes('"serial"') && !text.includes('pusher:resume_failed')) return pass;
    let msg;
    try {
      msg = JSON.parse(text);
    } catch {
      return pass;
    }
    if (!msg || typeof msg.channel !== 'string') return pass;
    const name = msg.channel;
    if (msg.event === 'pusher:resume_failed') {
      const failed = resumeFailedData(msg.data);
      this.told(name, failed, socketId);
      return { pass: true, channel: name, failed };
    }
    if (!Number.isSafeInteger(msg.serial) || msg.serial < 0) return pass;
    const serial = msg.serial;
    if (msg.event === 'pusher_internal:subscription_succeeded') {
      if (typeof msg.epoch !== 'string') return pass;
      const st = this.channels.get(name);
      // Resuming within the same epoch: the events after st.serial follow this frame and
      // move it on. Anything else starts at the answered position (a resume into another
      // epoch is followed by resume_failed naming the position).
      const keep = st && st.resumed && st.epoch === msg.epoch && st.serial <= serial;
      this.channels.set(name, {
        epoch: msg.epoch,
        serial: keep ? st.serial : serial,
        socketId: socketId || '',
        position: serial,
        resumed: false,
      });
      return pass;
    }
    if (typeof msg.event === 'string' && msg.event.startsWith('pusher')) return pass;
    const st = this.channels.get(name);
    if (!st) return pass; // not (yet) a recovery channel of ours
    if (serial <= st.serial) return { pass: false }; // seen under this epoch: a duplicate
    st.serial = serial;
    return pass;
  }

  /**
   * Takes a pusher:resume_failed's data for channel: the events that follow are those
   * after (data.epoch, data.serial), which becomes the channel's position. Without them
   * (not_enabled, or an older server) the missed events are not coming: it continues from
   * the position the subscription was answered with.
   */
  told(channel, data, socketId) {
    const st = this.channels.get(channel);
    if (data && typeof data.epoch === 'string' && data.epoch !== '' && Number.isSafeInteger(data.serial) && data.serial >= 0) {
      this.channels.set(channel, {
        epoch: data.epoch,
        serial: data.serial,
        socketId: (st && st.socketId) || socketId || '',
        position: data.serial,
        resumed: false,
      });
      return;
    }
    if (st) {
      st.serial = Math.max(st.serial, st.position);
      st.resumed = false;
    }
  }
}

/** The data of a resume_failed frame as an object ({} when it cannot be read). */
function resumeFailedData(data) {
  if (data && typeof data === 'object') return data;
  if (typeof data !== 'string') return {};
  try {
    const v = JSON.parse(data);
    return v && typeof v === 'object' ? v : {};
  } catch {
    return {};
  }
}

/**
 * enableRecovery(pusher, options) turns recovery on for a pusher-js 8 client (for Echo:
 * echo.connector.pusher). Call it right after creating the client; calling it again on the
 * same client returns the same handle. options.onResumeFailed(channel, {reason, epoch,
 * serial}) is called for every pusher:resume_failed, after the channel's position moved to
 * (epoch, serial) and pusher-js emitted the event: the app refetches the channel's state.
 * Returns {position(channel), disable()}.
 */
export function enableRecovery(pusher, options = {}) {
  if (!pusher || !pusher.connection || typeof pusher.send_event !== 'function') {
    throw new TypeError('enableRecovery: expected a pusher-js client (for Echo: echo.connector.pusher)');
  }
  if (pusher[WRAPPED]) return pusher[WRAPPED];
  const onResumeFailed = options && typeof options.onResumeFailed === 'function' ? options.onResumeFailed : undefined;
  const state = new RecoveryState();
  const ownSend = Object.prototype.hasOwnProperty.call(pusher, 'send_event') ? pusher.send_event : undefined;
  const send = pusher.send_event;
  let enabled = true;

  pusher.send_event = function sendWithResume(name, data, channel) {
    if (enabled && data && typeof data.channel === 'string') {
      if (name === 'pusher:subscribe') {
        const resume = state.resumeFor(data.channel);
        if (resume) data = { ...data, resume };
      } else if (name === 'pusher:unsubscribe') {
        state.forget(data.channel);
      }
    }
    return send.call(this, name, data, channel);
  };

  const tap = () => {
    const conn = pusher.connection.connection;
    const socket = conn && conn.transport && conn.transport.socket;
    if (!socket || socket[WRAPPED] || typeof socket.onmessage !== 'function') return;
    const onmessage = socket.onmessage;
    const socketId = pusher.connection.socket_id;
    socket[WRAPPED] = true;
    socket.onmessage = function filtered(event) {
      if (!enabled || !event) return onmessage.call(this, event);
      const seen = state.read(event.data, socketId);
      if (!seen.pass) return undefined;
      const ret = onmessage.call(this, event);
      if (seen.failed && onResumeFailed) {
        try {
          onResumeFailed(seen.channel, seen.failed);
        } catch (err) {
          setTimeout(() => {
            throw err;
          });
        }
      }
      return ret;
    };
  };
  pusher.connection.bind('connected', tap);
  if (pusher.connection.state === 'connected') tap();

  const handle = {
    position: (channel) => state.position(channel),
    disable() {
      enabled = false;
      pusher.connection.unbind('connected', tap);
      if (ownSend) pusher.send_event = ownSend;
      else delete pusher.send_event;
      delete pusher[WRAPPED];
    },
  };
  pusher[WRAPPED] = handle;
  return handle;
}

export default enableRecovery;
