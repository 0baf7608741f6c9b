'use strict';
// A WebSocket client written against RFC 6455 directly on a TCP socket, for the tests where
// the bytes themselves are the subject: frames split at arbitrary points, several frames in
// one write, fragmented messages, interleaved control frames and deliberate protocol
// violations that a real client library refuses to produce.
const net = require('node:net');
const tls = require('node:tls');
const crypto = require('node:crypto');
const zlib = require('node:zlib');
const { WAIT_MS, deadline, sleep } = require('./util');

const OP = { cont: 0x0, text: 0x1, binary: 0x2, close: 0x8, ping: 0x9, pong: 0xa };

/** Encodes one client frame (masked unless mask: false). */
function frame(op, payload = Buffer.alloc(0), { fin = true, mask = true, rsv = 0, lengthOverride } = {}) {
  const data = Buffer.isBuffer(payload) ? payload : Buffer.from(typeof payload === 'string' ? payload : JSON.stringify(payload));
  const n = lengthOverride ?? data.length;
  let header;
  if (n < 126) {
    header = Buffer.from([0, n]);
  } else if (n <= 0xffff) {
    header = Buffer.alloc(4);
    header[1] = 126;
    header.writeUInt16BE(n, 2);
  } else {
    header = Buffer.alloc(10);
    header[1] = 127;
    header.writeBigUInt64BE(BigInt(n), 2);
  }
  header[0] = (fin ? 0x80 : 0) | (rsv << 4) | op;
  if (!mask) return Buffer.concat([header, data]);
  header[1] |= 0x80;
  const key = crypto.randomBytes(4);
  const body = Buffer.from(data);
  for (let i = 0; i < body.length; i++) body[i] ^= key[i & 3];
  return Buffer.concat([header, key, body]);
}

/** A close frame payload: 2-byte code + reason. */
function closePayload(code, reason = '') {
  const b = Buffer.alloc(2 + Buffer.byteLength(reason));
  b.writeUInt16BE(code, 0);
  b.write(reason, 2);
  return b;
}

class TcpWs {
  constructor(sock) {
    this.sock = sock;
    this.buf = Buffer.alloc(0);
    this.frames = []; // {fin, op, payload, text?, msg?}
    this.waiters = [];
    this.ended = false;
    this.endedAt = new Promise((resolve) => {
      sock.on('close', () => {
        this.ended = true;
        resolve();
        this._wake();
      });
    });
    sock.on('error', () => {});
  }

  /** Opens a TCP connection (TLS when the server serves it; its certificate is not checked). */
  static async socket(server) {
    const sock = server.tls
      ? tls.connect({ port: server.port, host: server.host, rejectUnauthorized: false })
      : net.connect(server.port, server.host);
    sock.setNoDelay(true);
    await deadline(new Promise((resolve, reject) => {
      sock.once(server.tls ? 'secureConnect' : 'connect', resolve);
      sock.once('error', reject);
    }), WAIT_MS, 'TCP connect');
    return sock;
  }

  /** Sends a raw HTTP request head and resolves with the response head (status line and headers). */
  static async handshake(server, headers, { key = server.app.key } = {}) {
    const sock = await TcpWs.socket(server);
    sock.on('error', () => {});
    sock.write(`GET ${server.prefix || ''}/app/${key}?protocol=7 HTTP/1.1\r\nHost: ${server.host}:${server.port}\r\n${headers}\r\n`);
    try {
      return await deadline(new Promise((resolve, reject) => {
        let acc = Buffer.alloc(0);
        sock.on('data', (chunk) => {
          acc = Buffer.concat([acc, chunk]);
          const end = acc.indexOf('\r\n\r\n');
          if (end !== -1) resolve(acc.subarray(0, end).toString());
        });
        sock.once('close', () => reject(new Error('closed during handshake')));
      }), WAIT_MS, 'HTTP response');
    } finally {
      sock.destroy();
    }
  }

  /** Connects and completes the opening handshake; resolves once the 101 is read. */
  static async connect(server, { key = server.app.key, query = 'protocol=7&client=js&version=8.6.0', headers = '' } = {}) {
    const sock = await TcpWs.socket(server);
    const client = new TcpWs(sock);
    const wsKey = crypto.randomBytes(16).toString('base64');
    sock.write(
      `GET ${server.prefix || ''}/app/${key}?${query} HTTP/1.1\r\nHost: ${server.host}:${server.port}\r\n` +
        `Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: ${wsKey}\r\nSec-WebSocket-Version: 13\r\n${headers}\r\n`,
    );
    const head = await deadline(
      new Promise((resolve, reject) => {
        let acc = Buffer.alloc(0);
        const onData = (chunk) => {
          acc = Buffer.concat([acc, chunk]);
          const end = acc.indexOf('\r\n\r\n');
          if (end === -1) return;
          sock.off('data', onData);
          client._onData(acc.subarray(end + 4));
          sock.on('data', (c) => client._onData(c));
          resolve(acc.subarray(0, end).toString());
        };
        sock.on('data', onData);
        sock.once('close', () => reject(new Error('closed during handshake')));
      }),
      WAIT_MS,
      'HTTP 101',
    );
    if (!/^HTTP\/1\.1 101/.test(head)) throw new Error(`handshake refused: ${head.split('\r\n')[0]}`);
    const accept = crypto.createHash('sha1').update(`${wsKey}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`).digest('base64');
    if (!head.toLowerCase().includes(`sec-websocket-accept: ${accept.toLowerCase()}`)) throw new Error('bad Sec-WebSocket-Accept');
    client.head = head;
    const est = await client.next((f) => f.msg && f.msg.event === 'pusher:connection_established');
    client.socketId = JSON.parse(est.msg.data).socket_id;
    return client;
  }

  _onData(chunk) {
    this.buf = Buffer.concat([this.buf, chunk]);
    for (;;) {
      if (this.buf.length < 2) break;
      const b0 = this.buf[0];
      const b1 = this.buf[1];
      let n = b1 & 0x7f;
      let p = 2;
      if (n === 126) {
        if (this.buf.length < 4) break;
        n = this.buf.readUInt16BE(2);
        p = 4;
      } else if (n === 127) {
        if (this.buf.length < 10) break;
        n = Number(this.buf.readBigUInt64BE(2));
        p = 10;
      }
      const masked = (b1 & 0x80) !== 0;
      if (masked) p += 4; // servers must not mask; recorded so a test can assert it
      if (this.buf.length < p + n) break;
      let payload = this.buf.subarray(p, p + n);
      const f = { fin: (b0 & 0x80) !== 0, rsv: (b0 >> 4) & 7, op: b0 & 0x0f, masked, wireBytes: p + n };
      if (f.rsv === 4 && f.fin && f.op < 8) {
        // permessage-deflate (RFC 7692 §7.2.2): the message plus the sync-flush tail.
        payload = zlib.inflateRawSync(Buffer.concat([payload, Buffer.from([0, 0, 0xff, 0xff])]), { finishFlush: zlib.constants.Z_SYNC_FLUSH });
      }
      f.payload = Buffer.from(payload);
      if (f.op === OP.text) {
        f.text = payload.toString('utf8');
        try {
          f.msg = JSON.parse(f.text);
          f.data = typeof f.msg.data === 'string' ? JSON.parse(f.msg.data) : f.msg.data;
        } catch {
          f.invalid = true;
        }
      }
      if (f.op === OP.close && payload.length >= 2) f.code = payload.readUInt16BE(0);
      this.frames.push(f);
      this.buf = this.buf.subarray(p + n);
    }
    this._wake();
  }

  _wake() {
    for (const w of [...this.waiters]) w();
  }

  write(buf) {
    this.sock.write(buf);
  }

  /** Writes buf in pieces of `size` bytes, pausing between them so they arrive separately. */
  async writeInPieces(buf, size = 1, pauseMs = 1) {
    for (let i = 0; i < buf.length; i += size) {
      this.sock.write(buf.subarray(i, i + size));
      await sleep(pauseMs);
    }
  }

  /** Resolves with the next frame (from index `from`) matching pred. */
  next(pred, ms = WAIT_MS) {
    let waiter;
    const found = new Promise((resolve, reject) => {
      let seen = 0;
      waiter = () => {
        for (; seen < this.frames.length; seen++) {
          const f = this.frames[seen];
          if (!f.taken && pred(f)) {
            f.taken = true;
            this.waiters.splice(this.waiters.indexOf(waiter), 1);
            return resolve(f);
          }
        }
        if (this.ended) {
          this.waiters.splice(this.waiters.indexOf(waiter), 1);
          reject(new Error(`connection ended; frames: ${this.describe()}`));
        }
      };
      this.waiters.push(waiter);
      waiter();
    });
    return deadline(found, ms, () => `frame; got: ${this.describe()}`).finally(() => {
      const i = this.waiters.indexOf(waiter);
      if (i !== -1) this.waiters.splice(i, 1);
    });
  }

  event(name, ms) {
    return this.next((f) => f.msg && f.msg.event === name, ms);
  }

  /** Resolves with the close frame the server sent (and waits for the TCP close). */
  async closed(ms = WAIT_MS) {
    const f = await this.next((x) => x.op === OP.close, ms);
    await deadline(this.endedAt, ms, 'TCP close after the close frame');
    return f;
  }

  describe() {
    return this.frames.map((f) => (f.text !== undefined ? f.text : `op${f.op}${f.code ? `(${f.code})` : ''}`)).slice(-8).join(' | ') || '(none)';
  }

  destroy() {
    this.sock.destroy();
  }
}

module.exports = { TcpWs, frame, closePayload, OP };
