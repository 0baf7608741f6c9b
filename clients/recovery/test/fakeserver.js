// A fake Pusher server for the module's tests: enough of the protocol for pusher-js 8 and
// laravel-echo (connection_established, subscribe answered with subscription_succeeded
// carrying a position, pong), and the test decides every other frame it sends, such as a
// live pusher:resume_failed and a new epoch's events, which the real server only sends
// after faults. RFC 6455 text frames over node's http upgrade, no dependency.
import http from 'node:http';
import crypto from 'node:crypto';

const GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11';

function frame(text) {
  const payload = Buffer.from(text);
  let head;
  if (payload.length < 126) {
    head = Buffer.from([0x81, payload.length]);
  } else if (payload.length < 65536) {
    head = Buffer.alloc(4);
    head[0] = 0x81;
    head[1] = 126;
    head.writeUInt16BE(payload.length, 2);
  } else {
    head = Buffer.alloc(10);
    head[0] = 0x81;
    head[1] = 127;
    head.writeBigUInt64BE(BigInt(payload.length), 2);
  }
  return Buffer.concat([head, payload]);
}

/** Reads the client's masked frames from buf; returns [messages, rest, closed]. */
function parse(buf) {
  const out = [];
  let closed = false;
  for (;;) {
    if (buf.length < 2) break;
    const op = buf[0] & 0x0f;
    let len = buf[1] & 0x7f;
    let off = 2;
    if (len === 126) {
      if (buf.length < 4) break;
      len = buf.readUInt16BE(2);
      off = 4;
    } else if (len === 127) {
      if (buf.length < 10) break;
      len = Number(buf.readBigUInt64BE(2));
      off = 10;
    }
    if (buf.length < off + 4 + len) break;
    const mask = buf.subarray(off, off + 4);
    const data = Buffer.from(buf.subarray(off + 4, off + 4 + len));
    for (let i = 0; i < data.length; i++) data[i] ^= mask[i % 4];
    buf = buf.subarray(off + 4 + len);
    if (op === 0x8) closed = true;
    else if (op === 0x1) out.push(data.toString());
  }
  return [out, buf, closed];
}

/**
 * startFakeServer({position(channel)}) listens on 127.0.0.1. position(channel) is the
 * {epoch, serial} a subscribe is answered with. Returns {port, subscribes, send(obj),
 * drop(), close()}: subscribes lists the data of every pusher:subscribe received, send
 * writes a frame to every open socket, drop ends every socket (pusher-js reconnects).
 */
export async function startFakeServer({ position }) {
  const sockets = new Set();
  const subscribes = [];
  let seq = 0;
  const server = http.createServer((req, res) => res.writeHead(404).end());
  server.on('upgrade', (req, socket) => {
    const accept = crypto.createHash('sha1').update(req.headers['sec-websocket-key'] + GUID).digest('base64');
    socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n\r\n`);
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => sockets.delete(socket));
    seq += 1;
    const socketId = `${seq}.${seq}`;
    socket.write(frame(JSON.stringify({ event: 'pusher:connection_established', data: JSON.stringify({ socket_id: socketId, activity_timeout: 120 }) })));
    let buf = Buffer.alloc(0);
    socket.on('data', (chunk) => {
      let msgs;
      let closed;
      [msgs, buf, closed] = parse(Buffer.concat([buf, chunk]));
      for (const text of msgs) {
        const msg = JSON.parse(text);
        if (msg.event === 'pusher:ping') socket.write(frame('{"event":"pusher:pong","data":"{}"}'));
        if (msg.event === 'pusher:subscribe') {
          subscribes.push(msg.data);
          const pos = position(msg.data.channel);
          socket.write(frame(JSON.stringify({ event: 'pusher_internal:subscription_succeeded', channel: msg.data.channel, data: '{}', serial: pos.serial, epoch: pos.epoch })));
        }
      }
      if (closed) socket.end();
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: server.address().port,
    subscribes,
    send(obj) {
      const f = frame(JSON.stringify(obj));
      for (const s of sockets) s.write(f);
    },
    drop() {
      for (const s of sockets) s.destroy();
    },
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}
