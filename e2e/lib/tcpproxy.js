'use strict';
// A TCP proxy in front of a server port, for the network faults a client library must live
// through: drop() ends every connection abruptly (what a lost Wi-Fi or a NAT timeout looks
// like to the client once noticed), pause() stops forwarding in both directions without
// closing anything (a cable pulled: the client only notices by its own ping timeout), and
// connections made while paused wait until resume(). No dependency beyond node:net, so the
// client module's tests (clients/recovery) can use it too.
const net = require('node:net');

/**
 * startProxy(targetPort, {host}) → {port, drop(), pause(), resume(), connections(), close()}
 */
async function startProxy(targetPort, { host = '127.0.0.1' } = {}) {
  const pairs = new Set(); // {client, upstream}
  const waiting = []; // client sockets accepted while paused
  let paused = false;

  const connect = (client) => {
    const upstream = net.connect(targetPort, host);
    const pair = { client, upstream };
    pairs.add(pair);
    const end = () => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on('error', end).on('close', end);
    upstream.on('error', end).on('close', end);
    client.pipe(upstream);
    upstream.pipe(client);
  };

  const srv = net.createServer((client) => {
    client.setNoDelay(true);
    if (paused) {
      client.pause();
      client.on('error', () => client.destroy());
      waiting.push(client);
      return;
    }
    connect(client);
  });
  await new Promise((resolve, reject) => {
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', resolve);
  });

  const destroyAll = () => {
    for (const { client, upstream } of [...pairs]) {
      client.destroy();
      upstream.destroy();
    }
    pairs.clear();
  };

  return {
    port: srv.address().port,
    /** Ends every proxied connection at once (both sides see the TCP connection reset). */
    drop: destroyAll,
    /** Stops forwarding: nothing is read from either side, nothing is closed. */
    pause() {
      paused = true;
      for (const { client, upstream } of pairs) {
        client.unpipe(upstream);
        upstream.unpipe(client);
        client.pause();
        upstream.pause();
      }
    },
    /**
     * The network is back: the connections that were frozen are ended (their client gave
     * up on them by its ping timeout), and those made while paused go through.
     */
    resume() {
      paused = false;
      destroyAll();
      for (const client of waiting.splice(0)) {
        if (!client.destroyed) {
          connect(client);
          client.resume();
        }
      }
    },
    connections: () => pairs.size,
    close() {
      paused = false;
      destroyAll();
      for (const client of waiting.splice(0)) client.destroy();
      return new Promise((resolve) => srv.close(() => resolve()));
    },
  };
}

module.exports = { startProxy };
