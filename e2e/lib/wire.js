'use strict';
// A raw Pusher-protocol client on top of `ws`, for checks where the exact frames matter:
// every text frame is kept as received (`text`) and decoded (`msg`, with `data` parsed when it
// is a JSON string), close codes and control frames are recorded.
const WebSocket = require('ws');
const PusherServer = require('pusher');
const { WAIT_MS, QUIET_MS, deadline } = require('./util');
const { pick } = require('./server');

const DEFAULT_QUERY = 'protocol=7&client=js&version=8.6.0&flash=false';

function parseFrame(text) {
  let msg;
  try {
    msg = JSON.parse(text);
  } catch {
    return { text, event: undefined, invalid: true };
  }
  let data = msg.data;
  if (typeof data === 'string') {
    try {
      data = JSON.parse(data);
    } catch {
      /* plain string data */
    }
  }
  return { text, msg, event: msg.event, channel: msg.channel, data, dataIsString: typeof msg.data === 'string' };
}

/** Builds a matcher from an event name, {event, channel}, or a predicate. */
function matcher(m) {
  if (typeof m === 'function') return m;
  if (typeof m === 'string') return (f) => f.event === m;
  return (f) => Object.entries(m).every(([k, v]) => f[k] === v);
}

function describe(m) {
  if (typeof m === 'function') return m.name || 'matching frame';
  return typeof m === 'string' ? m : JSON.stringify(m);
}

class Wire {
  constructor(ws, app) {
    this.ws = ws;
    this.app = app;
    this.frames = []; // every frame received
    this.inbox = []; // frames not yet taken by next()
    this.pongs = []; // payloads of pong control frames
    this.pings = 0; // ping control frames received
    this.waiters = [];
    this.closeCode = null;
    this.closeReason = null;
    this.socketId = null;
    this.closed = new Promise((resolve) => {
      ws.on('close', (code, reason) => {
        this.closeCode = code;
        this.closeReason = reason.toString();
        resolve({ code, reason: this.closeReason });
        this._wake();
      });
    });
    ws.on('error', () => {});
    ws.on('pong', (buf) => {
      this.pongs.push(buf.toString());
      this._wake();
    });
    ws.on('ping', () => {
      this.pings++;
    });
    ws.on('message', (buf, binary) => {
      const f = parseFrame(binary ? buf : buf.toString('utf8'));
      this.frames.push(f);
      this.inbox.push(f);
      this._wake();
    });
  }

  _wake() {
    for (const w of [...this.waiters]) w.check();
  }

  /**
   * Opens a socket to `${server.wsUrl}/app/${key}?${query}`; resolves once the WebSocket is
   * open (not waiting for connection_established). opts: app, key, query, origin, headers,
   * url (full override), autoPong.
   */
  static async open(server, opts = {}) {
    const app = opts.app || server.app;
    const key = opts.key ?? app.key;
    const query = opts.query ?? DEFAULT_QUERY;
    const url = opts.url || `${pick(server).wsUrl}/app/${encodeURIComponent(key)}${query ? `?${query}` : ''}`;
    const wsOpts = { handshakeTimeout: WAIT_MS, headers: opts.headers || {}, autoPong: opts.autoPong ?? true };
    if (server.tls) wsOpts.rejectUnauthorized = false; // the TLS tests use a throwaway self-signed cert
    if (opts.origin) wsOpts.origin = opts.origin;
    const ws = new WebSocket(url, wsOpts);
    const wire = new Wire(ws, app);
    wire.server = server;
    await deadline(
      new Promise((resolve, reject) => {
        ws.once('open', resolve);
        ws.once('error', reject);
        ws.once('unexpected-response', (_req, res) => reject(new Error(`upgrade answered HTTP ${res.statusCode}`)));
      }),
      WAIT_MS,
      `WebSocket open ${url}`,
    );
    return wire;
  }

  /** Opens and waits for pusher:connection_established; sets socketId. */
  static async connect(server, opts = {}) {
    const wire = await Wire.open(server, opts);
    const est = await wire.next('pusher:connection_established');
    wire.established = est;
    wire.socketId = est.data.socket_id;
    return wire;
  }

  send(obj) {
    this.ws.send(typeof obj === 'string' ? obj : JSON.stringify(obj));
  }

  /** Takes the first not-yet-taken frame matching m (waits up to ms). */
  next(m, ms = WAIT_MS) {
    const pred = matcher(m);
    let w;
    const found = new Promise((resolve, reject) => {
      w = {
        check: () => {
          const i = this.inbox.findIndex(pred);
          if (i !== -1) {
            this._unwait(w);
            resolve(this.inbox.splice(i, 1)[0]);
          } else if (this.closeCode !== null) {
            this._unwait(w);
            reject(new Error(`socket closed (${this.closeCode} ${this.closeReason}) before ${describe(m)}; frames:\n  ${this._recent()}`));
          }
        },
      };
      this.waiters.push(w);
      w.check();
    });
    return deadline(found, ms, () => `${describe(m)} on ${this.socketId || 'socket'}; frames so far:\n  ${this._recent()}`).catch((err) => {
      this._unwait(w);
      throw err;
    });
  }

  _unwait(w) {
    const i = this.waiters.indexOf(w);
    if (i !== -1) this.waiters.splice(i, 1);
  }

  _recent() {
    return this.frames.map((f) => f.text).slice(-10).join('\n  ') || '(none)';
  }

  /**
   * Resolves with the frames matching m that arrive within a quiet window (expected: none).
   * Rejects if the socket is or becomes closed: a closed socket receives nothing, so its
   * silence would prove nothing.
   */
  async none(m, ms = QUIET_MS) {
    let timer;
    const quiet = new Promise((resolve) => {
      timer = setTimeout(resolve, ms);
    });
    await Promise.race([quiet, this.closed]);
    clearTimeout(timer);
    if (this.closeCode !== null) {
      throw new Error(`socket closed (${this.closeCode} ${this.closeReason}) while watching for no ${describe(m)}; frames:\n  ${this._recent()}`);
    }
    return this.inbox.filter(matcher(m));
  }

  /** Waits for the close frame; resolves {code, reason}. */
  waitClosed(ms = WAIT_MS) {
    return deadline(this.closed, ms, `close of ${this.socketId || 'socket'}`);
  }

  get open() {
    return this.ws.readyState === WebSocket.OPEN;
  }

  /** Sends pusher:ping and waits for pusher:pong: proves the socket is alive and in order. */
  async roundTrip() {
    this.send({ event: 'pusher:ping', data: {} });
    return this.next('pusher:pong');
  }

  /** Subscribes and resolves with the answer (succeeded, pusher:error or subscription_error). */
  subscribe(channel, extra = {}) {
    this.send({ event: 'pusher:subscribe', data: { channel, ...extra } });
    return this.next(
      (f) =>
        (f.event === 'pusher_internal:subscription_succeeded' && f.channel === channel) ||
        f.event === 'pusher:error' ||
        f.event === 'pusher:subscription_error',
    );
  }

  /** Signs (private/presence) with the app secret through the server SDK and subscribes. */
  authSubscribe(channel, presence) {
    const signed = signer(this.app).authorizeChannel(this.socketId, channel, presence);
    return this.subscribe(channel, signed);
  }

  close() {
    if (this.ws.readyState === WebSocket.OPEN || this.ws.readyState === WebSocket.CONNECTING) this.ws.terminate();
  }
}

const signers = new Map();
/** A pusher server SDK used only to sign (no HTTP). */
function signer(app, extra = {}) {
  const k = `${app.key}|${app.secret}|${extra.encryptionMasterKeyBase64 || ''}`;
  if (!signers.has(k)) {
    signers.set(k, new PusherServer({ appId: app.app_id, key: app.key, secret: app.secret, host: '127.0.0.1', ...extra }));
  }
  return signers.get(k);
}

module.exports = { Wire, parseFrame, signer, DEFAULT_QUERY };
