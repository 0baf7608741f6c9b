'use strict';
// Recovery in a real browser (issue 23): headless Chromium (Debian's /usr/bin/chromium driven
// by playwright-core) loads a page served here on 127.0.0.1 with pusher-js's web build,
// laravel-echo's ES module and clients/recovery/index.js as they ship (nothing bundled), sets
// Echo up as Laravel's echo.js does plus the module's one call, and listens on a private
// channel (authorized by the page's own /broadcasting/auth). The WebSocket goes through a TCP
// proxy that drops it twice while the HTTP API keeps publishing: every event arrives exactly
// once and in order. REC_WITHOUT_MODULE=1 loads the page without enableRecovery: it fails.
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const http = require('node:http');
const os = require('node:os');
const path = require('node:path');
const { chromium } = require('playwright-core');
const { startServer } = require('../lib/server');
const { startProxy } = require('../lib/tcpproxy');
const { PusherServer } = require('../lib/clients');
const { uid, eventually, sleep, WAIT_MS } = require('../lib/util');

const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];
const APP = { app_id: 'recb', key: 'recb-key', secret: 'recb-secret', recovery: { enabled: true, history_size: 1000, channels: ['private-*'] } };
const FILES = {
  '/pusher.js': require.resolve('pusher-js/dist/web/pusher.js'),
  '/echo.js': path.join(path.dirname(require.resolve('laravel-echo')), 'echo.js'),
  '/recovery/index.js': path.resolve(__dirname, '../../clients/recovery/index.js'),
};

let server, proxy, pages, browser, page, userDataDir;

function api() {
  return new PusherServer({ appId: APP.app_id, key: APP.key, secret: APP.secret, host: '127.0.0.1', port: String(server.port), useTLS: false, timeout: WAIT_MS });
}

// The page: Laravel's resources/js/echo.js with the module's one call.
const html = ({ wsPort, channel, recovery }) => `<!doctype html>
<meta charset="utf-8"><title>recovery</title>
<script src="/pusher.js"></script>
<script type="module">
import Echo from '/echo.js';
import { enableRecovery } from '/recovery/index.js';
window.got = []; window.failed = []; window.subscribed = false;
window.Echo = new Echo({
  broadcaster: 'reverb', key: ${JSON.stringify(APP.key)},
  wsHost: '127.0.0.1', wsPort: ${wsPort}, forceTLS: false, enabledTransports: ['ws'], enableStats: false,
  authEndpoint: '/broadcasting/auth',
});
${recovery ? 'enableRecovery(window.Echo.connector.pusher);' : '// REC_WITHOUT_MODULE=1: no recovery'}
window.Echo.private(${JSON.stringify(channel)})
  .subscribed(() => { window.subscribed = true; })
  .listen('.ev', (e) => window.got.push(e.n))
  .listen('.pusher:resume_failed', (e) => window.failed.push(e));
window.socketId = () => window.Echo.connector.pusher.connection.state === 'connected' ? window.Echo.socketId() : null;
</script>`;

function startPages(signer, opts) {
  const srv = http.createServer((req, res) => {
    const url = new URL(req.url, 'http://x');
    if (req.method === 'POST' && url.pathname === '/broadcasting/auth') {
      let body = '';
      req.on('data', (c) => (body += c));
      req.on('end', () => {
        const form = new URLSearchParams(body);
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify(signer.authorizeChannel(form.get('socket_id'), form.get('channel_name'))));
      });
      return;
    }
    if (url.pathname === '/') {
      res.writeHead(200, { 'content-type': 'text/html' });
      res.end(html({ ...opts, channel: url.searchParams.get('channel') }));
      return;
    }
    const file = FILES[url.pathname];
    if (!file) {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { 'content-type': 'text/javascript' });
    fs.createReadStream(file).pipe(res);
  });
  return new Promise((resolve) => srv.listen(0, '127.0.0.1', () => resolve({
    url: `http://127.0.0.1:${srv.address().port}`,
    close: () => new Promise((r) => { srv.closeAllConnections(); srv.close(() => r()); }),
  })));
}

before(async () => {
  if (!fs.existsSync('/usr/bin/chromium')) throw new Error('this test needs Debian\'s chromium at /usr/bin/chromium (apt-get install chromium)');
  server = await startServer({ apps: [APP], nodes: 1 });
  proxy = await startProxy(server.port);
  pages = await startPages(api(), { wsPort: proxy.port, recovery: process.env.REC_WITHOUT_MODULE !== '1' });
  userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'reverbgo-chromium-'));
  browser = await chromium.launchPersistentContext(userDataDir, { executablePath: '/usr/bin/chromium', headless: true, args: CHROMIUM_ARGS });
  page = browser.pages()[0] || (await browser.newPage());
});

after(async () => {
  await browser?.close();
  if (userDataDir) fs.rmSync(userDataDir, { recursive: true, force: true });
  await pages?.close();
  await proxy?.close();
  await server?.stop();
});

test('Echo with enableRecovery in Chromium: two dropped connections while publishing, every event once and in order', async () => {
  const errors = [];
  page.on('pageerror', (err) => errors.push(String(err)));
  const name = uid('orders.');
  await page.goto(`${pages.url}/?channel=${name}`);
  await page.waitForFunction(() => window.subscribed === true, null, { timeout: WAIT_MS });
  const ch = `private-${name}`;
  const rest = api();
  let published = 0;
  let running = true;
  const loop = (async () => {
    while (running) {
      published += 1;
      await rest.trigger(ch, 'ev', { n: published });
      await sleep(10);
    }
  })();
  const received = () => page.evaluate(() => window.got.length);
  try {
    for (let i = 0; i < 2; i++) {
      await eventually(async () => (await received()) > 0 && published > (await received()), { what: 'events flowing' });
      const before = await page.evaluate(() => window.socketId());
      proxy.drop();
      const during = published;
      await eventually(async () => {
        const now = await page.evaluate(() => window.socketId());
        return now && now !== before;
      }, { ms: 10000, what: 'a reconnect with a new socket id' }); // pusher-js retries 1 s after a close
      await eventually(() => published > during + 5, { what: 'events published across the reconnect' });
    }
  } finally {
    running = false;
    await loop;
  }
  await eventually(async () => (await received()) >= published, { what: `${published} events in the page` });
  await sleep(100); // a late duplicate would show here
  const { got, failed } = await page.evaluate(() => ({ got: window.got, failed: window.failed }));
  assert.deepEqual(got, Array.from({ length: published }, (_, i) => i + 1));
  assert.deepEqual(failed, []);
  assert.deepEqual(errors, []);
});
