'use strict';
// Bounded before authenticated: 2,000 connections announce 1 MiB bodies, send the first
// 128 KiB and trickle the rest, against the signed Toolmark app API (bad signature), the
// page endpoint (a socket id that is not connected) and the Pusher HTTP API (bad signature).
// The server must not buffer what it has not authenticated: its RSS grows by less than
// 50 MiB, and normal traffic (a signed trigger reaching a subscribed WebSocket, a page POST)
// keeps being served meanwhile.
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const net = require('node:net');
const { startServer } = require('../lib/server');
const { sdk } = require('../lib/clients');
const { Wire } = require('../lib/wire');
const { sleep } = require('../lib/util');

const CONNS = 2000;
const ANNOUNCED = 1 << 20;
const FIRST = 128 << 10;
const RSS_BUDGET_MIB = 50;

let server;
before(async () => {
  server = await startServer();
});
after(async () => {
  await server?.stop();
});

function rssKiB(pid) {
  const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(m[1]);
}

function target(i, app) {
  const ts = Math.floor(Date.now() / 1000);
  const q = `auth_key=${app.key}&auth_timestamp=${ts}&auth_version=1.0&body_md5=${'0'.repeat(32)}&auth_signature=${'0'.repeat(64)}`;
  switch (i % 4) {
    case 0:
    case 1:
      return { path: `/apps/${app.app_id}/toolmark/calls?${q}`, headers: '' };
    case 2:
      return { path: '/toolmark/bridge/c1', headers: 'X-Socket-ID: 123456.654321\r\nX-Toolmark-Token: x\r\n' };
    default:
      return { path: `/apps/${app.app_id}/events?${q}`, headers: '' };
  }
}

/** Opens one abusive connection; resolves once its headers and first chunk are written. */
function abuser(i, sockets) {
  const { path, headers } = target(i, server.app);
  return new Promise((resolve) => {
    const s = net.connect({ host: '127.0.0.1', port: server.port });
    sockets.push(s);
    s.on('error', () => {});
    s.on('data', () => {}); // answers (401, 503) are read and ignored
    s.once('connect', () => {
      s.write(`POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n${headers}Content-Length: ${ANNOUNCED}\r\n\r\n`);
      s.write(Buffer.alloc(FIRST, 0x20), () => resolve());
    });
    s.once('close', () => resolve());
  });
}

test(`${CONNS} connections trickling 1 MiB bodies: RSS grows < ${RSS_BUDGET_MIB} MiB, normal traffic is served`, { timeout: 90000 }, async () => {
  const pid = server.proc.pid;
  const api = sdk(server);
  const wire = await Wire.connect(server);
  assert.equal((await wire.subscribe('news')).event, 'pusher_internal:subscription_succeeded');
  // Warm up the paths normal traffic uses, then take the baseline.
  for (let i = 0; i < 20; i++) await api.trigger('news', 'warm', { i });
  for (let i = 0; i < 20; i++) await wire.next({ event: 'warm' });
  const base = rssKiB(pid);

  const sockets = [];
  let peak = base;
  const sampler = setInterval(() => { peak = Math.max(peak, rssKiB(pid)); }, 100);
  const trickle = setInterval(() => {
    for (const s of sockets) if (!s.destroyed) s.write(' ');
  }, 500);
  const latencies = [];
  try {
    for (let i = 0; i < CONNS; i += 100) {
      await Promise.all(Array.from({ length: 100 }, (_, k) => abuser(i + k, sockets)));
    }
    // Normal traffic while the abusers trickle: signed triggers reach the WebSocket.
    const end = Date.now() + 8000;
    for (let n = 0; Date.now() < end; n++) {
      const t0 = Date.now();
      await api.trigger('news', 'live', { n });
      await wire.next({ event: 'live' }, 5000);
      latencies.push(Date.now() - t0);
      await sleep(200);
    }
  } finally {
    clearInterval(trickle);
    clearInterval(sampler);
    peak = Math.max(peak, rssKiB(pid));
    for (const s of sockets) s.destroy();
    wire.close();
  }
  const grownMiB = (peak - base) / 1024;
  console.log(`RSS base ${(base / 1024).toFixed(1)} MiB, peak ${(peak / 1024).toFixed(1)} MiB (+${grownMiB.toFixed(1)}); trigger->delivery ms max ${Math.max(...latencies)} over ${latencies.length}`);
  assert.ok(latencies.length >= 5, `only ${latencies.length} normal round trips`);
  assert.ok(grownMiB < RSS_BUDGET_MIB, `RSS grew by ${grownMiB.toFixed(1)} MiB`);
  assert.ok(Math.max(...latencies) < 3000, `normal traffic stalled: ${Math.max(...latencies)} ms`);
});
