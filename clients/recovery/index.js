// Recovery for pusher-js (and Laravel Echo, which drives it) against reverbgo's
// apps[].recovery (issue 23). It keeps, per channel, the epoch and last serial seen and the
// socket id they were seen on; when pusher-js resubscribes after a reconnect it adds
// data.resume = {epoch, serial, socket_id} to the pusher:subscribe, so the server replays
// what was missed; and it drops any event frame whose serial was already seen.
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
//   - pusher:resume_failed needs nothing: pusher-js emits any non-internal event of a
//     channel on it, so channel.bind('pusher:resume_failed') / Echo's
//     .listen('.pusher:resume_failed') get {reason}.

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
    if (typeof text !== 'string') return true;
    const hasSerial = text.includes('"serial"');
    if (!hasSerial && !text.includes('pusher:resume_failed')) return true;
    let msg;
    try {
      msg = JSON.parse(text);
    } catch {
      return true;
    }
    if (!msg || typeof msg.channel !== 'string') return true;
    const name = msg.channel;
    if (msg.event === 'pusher:resume_failed') {
      // The missed events are not coming: continue from the answered position.
      const st = this.channels.get(name);
      if (st) {
        st.serial = Math.max(st.serial, st.position);
        st.resumed = false;
      }
      return true;
    }
    if (!Number.isSafeInteger(msg.serial) || msg.serial < 0) return true;
    const serial = msg.serial;
    if (msg.event === 'pusher_internal:subscription_succeeded') {
      if (typeof msg.epoch !== 'string') return true;
      const st = this.channels.get(name);
      // Resuming within the same epoch: the events after st.serial follow this frame and
      // move it on. Anything else starts at the answered position.
      const keep = st && st.resumed && st.epoch === msg.epoch && st.serial <= serial;
      this.channels.set(name, {
        epoch: msg.epoch,
        serial: keep ? st.serial : serial,
        socketId: socketId || '',
        position: serial,
        resumed: false,
      });
      return true;
    }
    if (typeof msg.event === 'string' && msg.event.startsWith('pusher')) return true;
    const st = this.channels.get(name);
    if (!st) return true; // not (yet) a recovery channel of ours
    if (serial <= st.serial && !(serial === 1 && st.serial > 1)) return false; // seen: duplicate
    // Serial 1 below the last seen one is the channel starting over: its history expired
    // (history_ttl) while subscribed and the server numbers a new epoch from 1. The epoch is
    // unknown until the next subscription_succeeded, so a resume from here gets
    // epoch_changed (the app refetches) instead of a silent gap.
    if (serial < st.serial) st.epoch = 'restarted';
    st.serial = serial;
    return true;
  }
}

/**
 * enableRecovery(pusher) turns recovery on for a pusher-js 8 client (for Echo:
 * echo.connector.pusher). Call it right after creating the client; calling it again on the
 * same client returns the same handle. Returns {position(channel), disable()}.
 */
export function enableRecovery(pusher) {
  if (!pusher || !pusher.connection || typeof pusher.send_event !== 'function') {
    throw new TypeError('enableRecovery: expected a pusher-js client (for Echo: echo.connector.pusher)');
  }
  if (pusher[WRAPPED]) return pusher[WRAPPED];
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
      if (enabled && event && !state.accept(event.data, socketId)) return undefined;
      return onmessage.call(this, event);
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
